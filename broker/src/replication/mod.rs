//! Replication, broker side (Kafka's `ReplicaManager` split): the
//! [`manager`] applies each metadata image's roles to the partitions held
//! here and keeps one [`fetcher`] per leader broker this broker follows;
//! leaders' decisions about followers (high watermark, ISR) are the pure
//! functions of [`progress`], applied by `crate::partition`. ISR changes go
//! to the controller, which commits them as a compare-and-swap on the
//! partition epoch. [`selector`] sends consumers to a replica in their
//! rack (KIP-392); [`throttle`] holds replication throttles (Kafka's
//! throttled replicas and rates, for moving replicas); [`session`] is the
//! follower's side of a fetch session (KIP-227). [`markers`] is the
//! transaction coordinator's channel to partition leaders
//! (WriteTxnMarkers), over the fetchers' kind of connection.

pub mod fetcher;
pub mod manager;
pub mod markers;
pub mod progress;
pub mod selector;
pub mod session;
pub mod settings;
pub mod throttle;

pub use manager::ReplicaManager;
pub use settings::FetchSettings;
