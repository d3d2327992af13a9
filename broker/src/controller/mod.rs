//! The controller: the only writer of cluster metadata. Its decisions are
//! pure functions (this module's children), applied through a metadata
//! store by a thin edge.
//!
//! Today it holds the placement of new partitions' replicas
//! ([`assignment`]); topic, config and partition-state changes move here as
//! the cluster controller is built (see `../shared/DESIGN.md`, "Cluster
//! coordination").

pub mod assignment;
