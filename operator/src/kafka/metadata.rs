//! The typed result of a Metadata call (brokers, topics, partitions), as
//! `admin` reads it from the wire: plain data, shared by `admin` (which
//! fills it) and `reassign` (which reads a topic's replication factor from
//! it), so neither imports the other for it.

/// A broker as reported by Metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id (the pod ordinal in a Moldau StatefulSet).
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
}

/// One partition as reported by Metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader (-1 when offline).
    pub leader: i32,
    /// Replicas in order; the first is the preferred leader.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
}

/// A topic as reported by Metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// Topic id, when the broker reports one.
    pub topic_id: Option<String>,
    /// Partition count.
    pub partitions: i32,
    /// Largest replica set of any partition, as Metadata lists it: during a
    /// reassignment that includes the replicas being removed, so it is not
    /// the replication factor then (see [`super::reassign::replication_factor`]).
    pub replication_factor: i32,
    /// Every partition, by index.
    pub partition_details: Vec<PartitionInfo>,
}

/// The result of a Metadata call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// Broker id of the active controller (-1 if unknown).
    pub controller_id: i32,
    /// Live brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Requested topics that exist.
    pub topics: Vec<TopicMetadata>,
}
