//! What Moldau's brokers and operator share about coordinating through
//! Kubernetes (DESIGN.md, "Cluster coordination"):
//!
//! - [`records`]: the cluster metadata the controller writes — the cluster
//!   record (cluster id, controller, epoch, registered brokers, producer-id
//!   blocks) and one record per topic (id, configs, partitions with
//!   replicas, leader, leader epoch, ISR). Plain data, no I/O.
//! - [`lease`]: leader election on a `coordination.k8s.io` Lease (the
//!   brokers' controller election, the operator's leader replica, tests):
//!   the pure decision, a one-attempt [`lease::Candidate`] and a background
//!   [`lease::Elector`] publishing [`lease::LeaderState`] on a watch channel.
//! - [`shard`]: the `MetadataShard` custom resource (`moldau.io/v1alpha1`)
//!   that holds one record, with the CEL rules by which the API server
//!   itself refuses a write of an older controller epoch.
//! - [`store`]: [`store::KubeMetadataStore`], the controller's metadata store
//!   over `MetadataShard` objects: take-over (epoch bump and stamping of
//!   every object), compare-and-swap writes, the read brokers use to find
//!   the controller.
//!
//! Nothing here knows about the Kafka protocol or reconciling; the
//! controller logic that decides *what* to write lives in the broker.

pub mod lease;
pub mod records;
pub mod shard;
pub mod store;
