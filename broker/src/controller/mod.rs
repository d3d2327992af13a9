//! The controller: the only writer of cluster metadata (topics and their
//! ids, partition counts and assignments, leaders and epochs, dynamic
//! configs, producer ids). Every admin operation goes through
//! [`Controller`], a facade over this broker: in standalone mode it applies
//! the change to the broker's own metadata and publishes the next
//! [`MetadataImage`](crate::image::MetadataImage); in cluster mode it
//! forwards the change to the active controller ([`link`]) and answers once
//! this broker's image shows it. Handlers read only the image.
//!
//! Decisions are pure functions in the children: replica placement
//! ([`assignment`]), admin plans over the cluster records ([`cluster`]),
//! broker registrations and fencing ([`registry`]), leader election and ISR
//! changes ([`leadership`]), requested leader elections ([`elect`]),
//! partition reassignment ([`reassignment`]),
//! controller-epoch fencing ([`fencing`]). The
//! edges: [`rpc`] (the active controller's gRPC service, persisting through
//! a [`store`] per term: [`store::DirStore`] or [`kube_store`]), [`host`]
//! (runs controller terms while this broker wins the [`election`]),
//! [`session`] (the broker's registration, heartbeats and metadata),
//! [`transport`] (the endpoint's gRPC in the clear or over mutual TLS), and
//! [`mode`] (starts them for `--cluster dir|kubernetes`).

pub mod assignment;
pub mod cluster;
pub mod elect;
pub mod election;
pub mod facade;
pub mod fencing;
pub mod host;
pub mod kube_store;
pub mod leadership;
pub mod link;
pub mod mode;
pub mod reassignment;
pub mod registry;
pub mod rpc;
pub mod session;
pub mod store;
#[cfg(test)]
mod test_support;
pub mod transport;

pub use facade::{Controller, CreatedTopic, ReassignRequest};
