//! Moldau broker: a Kafka-compatible streaming log.
//!
//! - [`storage`] owns the bytes on disk (segments, indexes, recovery);
//! - [`topics`] owns the live topics and partitions, [`metadata`] their
//!   persisted description, [`topic_config`] the topic config rules;
//! - [`protocol`] is the wire edge, [`handlers`] answer each API;
//! - [`http`] serves metrics and health; [`server`] starts and stops it all.

pub mod broker;
pub mod config;
pub mod controller;
pub mod group;
pub mod handlers;
pub mod http;
pub mod image;
pub mod metadata;
pub mod metrics;
pub mod offload;
pub mod producer;
pub mod protocol;
pub mod resources;
pub mod server;
pub mod storage;
pub mod topic_config;
pub mod topics;
