//! Client quotas, as Kafka has them: byte rates for producers and
//! consumers and a share of request-handling time, per user and/or client
//! id with Kafka's precedence ([`entity`]). The quotas live in the cluster
//! metadata (the controller's cluster record; a standalone broker's own
//! file) and reach every broker in its metadata image; AlterClientQuotas
//! and DescribeClientQuotas (`handlers::quotas`) change and show them.
//! Each broker enforces them on its own traffic ([`manager`], with the
//! rate [`meter`]s the replication throttles use too).

pub mod busy;
pub mod entity;
pub mod manager;
pub mod meter;

pub use busy::Busy;
pub use entity::{
    from_records, resolve, to_records, ClientQuotaRecord, ClientQuotas, QuotaEntity, QuotaName,
};
pub use manager::{QuotaKind, QuotaManager};
