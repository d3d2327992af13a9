//! What Moldau's brokers and operator share about coordinating through
//! Kubernetes (DESIGN.md, "Cluster coordination"):
//!
//! - [`records`]: the cluster metadata the controller writes — the cluster
//!   record (cluster id, controller, epoch, registered brokers, producer-id
//!   blocks) and one record per topic (id, configs, partitions with
//!   replicas, leader, leader epoch, ISR). Plain data, no I/O.
//!
//! Nothing here knows about the Kafka protocol or reconciling.

pub mod records;
