//! Replica health of a cluster, as its controller recorded it: which
//! partitions are under-replicated (a replica of the assignment is not in
//! the ISR) or offline (no leader). The rolling-restart planner restarts a
//! broker only when there are none, so a restart never takes a second
//! replica of a partition out of sync, and it moves on to the next broker
//! only once the one it restarted is back in every ISR it left.
//!
//! Read from the topics' `MetadataShard` objects (the controller persists
//! every ISR change there before it takes effect), like the membership in
//! [`super::membership`]: the operator never dials a broker to learn this.
//! Owns the pure evaluation ([`replica_health`]) and its one list call
//! ([`read_replica_health`]).

use kube::api::{Api, ListParams};
use moldau_coordination::records::TopicRecord;
use moldau_coordination::shard::{MetadataShard, Payload, CLUSTER_LABEL};

use super::builders::Names;

/// Under-replicated and offline partitions, each as `topic-partition`,
/// sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaHealth {
    /// Partitions with a replica (not one a reassignment is still adding)
    /// outside the ISR.
    pub under_replicated: Vec<String>,
    /// Partitions without a leader.
    pub offline: Vec<String>,
}

impl ReplicaHealth {
    /// No partition under-replicated or offline.
    pub fn is_healthy(&self) -> bool {
        self.under_replicated.is_empty() && self.offline.is_empty()
    }

    /// One line for a condition message: counts and the first few names.
    pub fn summary(&self) -> String {
        fn some(names: &[String]) -> String {
            let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
            let more = names.len().saturating_sub(shown.len());
            if more > 0 {
                format!("{} and {more} more", shown.join(", "))
            } else {
                shown.join(", ")
            }
        }
        let mut parts = Vec::new();
        if !self.offline.is_empty() {
            parts.push(format!(
                "{} offline partition(s) ({})",
                self.offline.len(),
                some(&self.offline)
            ));
        }
        if !self.under_replicated.is_empty() {
            parts.push(format!(
                "{} under-replicated partition(s) ({})",
                self.under_replicated.len(),
                some(&self.under_replicated)
            ));
        }
        if parts.is_empty() {
            "every partition fully in sync".into()
        } else {
            parts.join(", ")
        }
    }
}

/// What the operator could learn of the replicas' health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthView {
    /// The records as the controller last wrote them.
    Known(ReplicaHealth),
    /// The records could not be read (the message says why): a restart
    /// waits, as it cannot be shown to be safe.
    Unknown(String),
}

/// The health of `topics` (the records of one cluster). Replicas a
/// reassignment is adding do not count as missing (KIP-352: they were never
/// in sync, the partition lost nothing).
pub fn replica_health<'a>(topics: impl IntoIterator<Item = &'a TopicRecord>) -> ReplicaHealth {
    let mut health = ReplicaHealth::default();
    for topic in topics {
        for p in &topic.partitions {
            let name = format!("{}-{}", topic.name, p.index);
            if p.leader < 0 {
                health.offline.push(name);
            } else if p
                .replicas
                .iter()
                .any(|r| !p.isr.contains(r) && !p.adding_replicas.contains(r))
            {
                health.under_replicated.push(name);
            }
        }
    }
    health.offline.sort();
    health.under_replicated.sort();
    health
}

/// Lists the cluster's topic records and evaluates them. Topics the
/// controller deleted, or whose object a deposed controller created after
/// the current one stamped the cluster (`stampedEpoch`), are not metadata
/// and are skipped, as the brokers skip them.
pub async fn read_replica_health(client: &kube::Client, names: &Names) -> HealthView {
    let api: Api<MetadataShard> = Api::namespaced(client.clone(), &names.namespace);
    let selector = format!("{CLUSTER_LABEL}={}", names.cluster);
    let shards = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(e) => return HealthView::Unknown(format!("listing the metadata records failed: {e}")),
    };
    let cluster = shards.iter().find_map(|s| match s.spec.payload() {
        Ok(Payload::Cluster(c)) => Some((c, s.spec.stamped_epoch.unwrap_or(0))),
        _ => None,
    });
    let Some((record, stamped)) = cluster else {
        return HealthView::Unknown("the cluster record does not exist yet".into());
    };
    let topics = shards.iter().filter_map(|s| match s.spec.payload() {
        Ok(Payload::Topic(t))
            if s.spec.epoch >= stamped
                && !record.deleted_topics.iter().any(|d| d == &t.topic_id) =>
        {
            Some(t)
        }
        _ => None,
    });
    HealthView::Known(replica_health(topics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use moldau_coordination::records::PartitionRecord;

    fn partition(index: i32, replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRecord {
        PartitionRecord {
            index,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 1,
            partition_epoch: 1,
            adding_replicas: vec![],
            removing_replicas: vec![],
            eligible_leader_replicas: vec![],
        }
    }

    fn topic(name: &str, partitions: Vec<PartitionRecord>) -> TopicRecord {
        TopicRecord {
            name: name.into(),
            topic_id: format!("id-{name}"),
            replication_factor: 2,
            configs: Default::default(),
            partitions,
        }
    }

    #[test]
    fn a_replica_out_of_the_isr_is_under_replicated_and_no_leader_is_offline() {
        let mut moving = partition(3, &[0, 1, 2], &[0, 1], 0);
        moving.adding_replicas = vec![2];
        let topics = [
            topic(
                "a",
                vec![
                    partition(0, &[0, 1], &[0, 1], 0),
                    partition(1, &[1, 2], &[1], 1),
                    partition(2, &[2, 0], &[], -1),
                    moving,
                ],
            ),
            topic("b", vec![partition(0, &[2, 1], &[2], 2)]),
        ];
        let h = replica_health(&topics);
        assert_eq!(h.under_replicated, vec!["a-1", "b-0"]);
        assert_eq!(h.offline, vec!["a-2"]);
        assert!(!h.is_healthy());
        assert_eq!(
            h.summary(),
            "1 offline partition(s) (a-2), 2 under-replicated partition(s) (a-1, b-0)"
        );
        let fine = replica_health(&[topic("c", vec![partition(0, &[0, 1], &[1, 0], 1)])]);
        assert!(fine.is_healthy());
        assert_eq!(fine.summary(), "every partition fully in sync");
    }

    #[test]
    fn a_long_list_is_cut_in_the_summary() {
        let topics = [topic(
            "t",
            (0..8).map(|i| partition(i, &[0, 1], &[0], 0)).collect(),
        )];
        assert_eq!(
            replica_health(&topics).summary(),
            "8 under-replicated partition(s) (t-0, t-1, t-2, t-3, t-4 and 3 more)"
        );
    }
}
