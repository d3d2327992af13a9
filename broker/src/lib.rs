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
//!   [`txn`] holds transactions' pure rules and records, [`txn_coordinator`]
//!   the transaction coordinator that runs them;
//! - [`protocol`] is the wire edge (framing, limits), [`handlers`] answer
//!   each API, [`offload`] keeps blocking work off the runtime's workers;
//! - [`http`] serves metrics and health, [`resources`] watches descriptors;
//!   [`server`] starts and stops it all.
//!
//! # Floors
//!
//! Modules form floors, and a module imports only from floors below its
//! own (within a floor, only in the order given here), so no two modules
//! import each other, directly or around a loop. From the bottom:
//!
//! 1. **Vocabulary**, importing nothing of the broker: [`clock`],
//!    [`config_values`], [`build_info`], and pure leaves wherever they sit
//!    in the tree (`fetch_session`, `group::offsets`, `producer::ids`,
//!    `quota::meter`, `replication::progress`, …);
//! 2. **Storage**: [`storage`], and [`error`] (refusals in Kafka's error
//!    codes, over storage's errors) with the pure codecs and rules over
//!    storage or vocabulary types (`producer::state`,
//!    `protocol::fetch_encode`, `replication::throttle`, `quota::entity`);
//! 3. **Configs, metadata and the image**: [`config`], then
//!    [`topic_config`], then [`dynamic_config`]; [`metadata`] (the
//!    persisted description); the [`image`] (pure data); the wire's limits
//!    and framing (`protocol::limits`, `protocol::frame`);
//! 4. **Partitions and replication's rules**: [`partition`],
//!    `replication::{selector, settings, session}`;
//! 5. **Topics, groups, the controller**: [`topics`], [`group`], then
//!    [`txn_coordinator`] (the transaction coordinator's runtime), the
//!    controller's decisions, stores and link (`controller::{cluster, rpc,
//!    link, …}`), `quota::manager`, [`metrics`];
//! 6. **Protocol handlers**: [`broker`] (the state handlers share), then
//!    [`handlers`], then `protocol::connection`;
//! 7. **Server**: what drives the floors below from outside —
//!    `replication::{fetcher, manager}`, `controller::{session, facade,
//!    mode}`, [`http`], [`acceptor`] (the listeners' sockets and accept
//!    loops), and [`server`] itself.
//!
//! `tests/module_layering.rs` guards the rule: the import graph of
//! `crate::`/`super::`/`self::` paths (tests aside) may have no loop, and
//! its baseline lists none. A new import that points down a floor keeps it
//! so; one that points up is where a loop starts — move the shared item
//! down to the vocabulary instead.

pub mod acceptor;
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
pub mod security;
pub mod server;
pub mod storage;
pub mod telemetry;
pub mod topic_config;
pub mod topics;
pub mod txn;
pub mod txn_coordinator;
