//! Moldau broker: a Kafka-compatible streaming log.
//!
//! - [`storage`] owns the bytes on disk (segments, indexes, recovery);
//! - [`partition`] owns one partition (log, producers, leader or follower
//!   role), [`replication`] the follower fetchers and ISR proposals;
//! - [`topics`] owns the partitions this broker holds, [`metadata`] the
//!   persisted description behind the `MetadataStore` trait,
//!   [`topic_config`] the topic config rules;
//! - [`controller`] is the only writer of cluster metadata (its decisions
//!   are pure functions) and publishes the [`image`] that handlers read;
//! - [`group`] is the group coordinator, [`producer`] the producer state;
//! - [`protocol`] is the wire edge (framing, limits), [`handlers`] answer
//!   each API, [`offload`] keeps blocking work off the runtime's workers;
//! - [`http`] serves metrics and health, [`resources`] watches descriptors;
//!   [`server`] starts and stops it all.

pub mod broker;
pub mod build_info;
pub mod clock;
pub mod config;
pub mod config_check;
pub mod config_values;
pub mod controller;
pub mod data_dir;
pub mod dynamic_config;
pub mod error;
pub mod fetch_session;
pub mod group;
pub mod handlers;
pub mod http;
pub mod image;
pub mod local_store;
pub mod metadata;
pub mod metrics;
pub mod offload;
pub mod partition;
pub mod producer;
pub mod protocol;
pub mod quota;
pub mod replication;
pub mod resources;
pub mod server;
pub mod storage;
pub mod topic_config;
pub mod topics;
