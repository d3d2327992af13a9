//! The rebalance's network edge without Kubernetes: read the cluster the
//! lifecycle needs (Metadata, DescribeLogDirs on every broker, each topic's
//! `min.insync.replicas`, ListPartitionReassignments) and perform a
//! lifecycle [`Action`] through the admin client. The KafkaRebalance
//! controller uses these with broker pod addresses; the integration tests
//! use them with brokers on 127.0.0.1. Callers pass socket addresses by
//! broker id; nothing here resolves names. Decides nothing: what to do
//! comes from the lifecycle step.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::kafka::{
    codes, reassign, AdminClient, ClusterMetadata, ConfigOp, Dial, KafkaError, OngoingReassignment,
    PartitionError,
};

use crate::brokers::connect_controller;
use crate::cluster::scaling::Placement;

use super::lifecycle::{Action, ObservedCluster, Step};
use super::model::{Broker, Partition};
use super::throttle::{self, ThrottleChange};

/// Kafka's default `min.insync.replicas`.
const DEFAULT_MIN_ISR: usize = 1;

/// The lifecycle's view of the cluster from what the admin calls returned:
/// Metadata, replica sizes per broker, `min.insync.replicas` per topic and
/// the running reassignments. A partition's size is its largest replica.
pub fn observed_from(
    meta: &ClusterMetadata,
    sizes: &[BTreeMap<(String, i32), u64>],
    min_isr: &BTreeMap<String, usize>,
    ongoing: Vec<OngoingReassignment>,
) -> ObservedCluster {
    let mut brokers: Vec<Broker> = meta
        .brokers
        .iter()
        .map(|b| Broker {
            id: b.node_id,
            rack: b.rack.clone(),
        })
        .collect();
    brokers.sort_by_key(|b| b.id);
    let mut partitions = Vec::new();
    for t in &meta.topics {
        for p in &t.partition_details {
            let key = (t.name.clone(), p.partition);
            partitions.push(Partition {
                topic: t.name.clone(),
                partition: p.partition,
                replicas: p.replicas.clone(),
                leader: (p.leader >= 0).then_some(p.leader),
                size_bytes: sizes
                    .iter()
                    .filter_map(|s| s.get(&key))
                    .copied()
                    .max()
                    .unwrap_or(0),
                min_insync_replicas: min_isr.get(&t.name).copied().unwrap_or(DEFAULT_MIN_ISR),
            });
        }
    }
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    ObservedCluster {
        brokers,
        partitions,
        ongoing,
    }
}

/// Where the replicas are, for a scale-down's decision
/// (`cluster::scaling`): the highest replication factor (a topic's largest
/// target replica list: a partition being moved counts the replicas it ends
/// with, not those being removed, see [`reassign::replication_factor`]) and
/// every broker holding a replica or targeted by a running reassignment.
pub fn placement_of(meta: &ClusterMetadata, ongoing: &[OngoingReassignment]) -> Placement {
    let mut out = Placement::default();
    for t in &meta.topics {
        let rf = reassign::topic_replication_factor(t, ongoing);
        if out
            .max_replication_factor
            .as_ref()
            .is_none_or(|(_, m)| rf > *m)
        {
            out.max_replication_factor = Some((t.name.clone(), rf));
        }
        for p in &t.partition_details {
            out.holding.extend(p.replicas.iter().copied());
        }
    }
    for o in ongoing {
        out.holding.extend(o.replicas.iter().copied());
    }
    out
}

/// Reads [`placement_of`] the cluster through its controller.
pub async fn read_placement(
    addrs: &[(i32, SocketAddr)],
    dial: &Dial,
) -> Result<Placement, KafkaError> {
    let mut admin = connect_controller(addrs, dial).await?.0;
    let meta = admin.metadata(None).await?;
    let ongoing = admin.list_partition_reassignments().await?;
    Ok(placement_of(&meta, &ongoing))
}

/// Reads the cluster: Metadata and reassignments from the controller,
/// replica sizes from every broker of `addrs`, `min.insync.replicas` of
/// every topic (one DescribeConfigs for all). A broker that cannot be reached fails the read (sizes would be
/// missing and the plan skewed).
pub async fn read_cluster(
    addrs: &[(i32, SocketAddr)],
    dial: &Dial,
) -> Result<ObservedCluster, KafkaError> {
    let mut admin = connect_controller(addrs, dial).await?.0;
    let meta = admin.metadata(None).await?;
    let ongoing = admin.list_partition_reassignments().await?;
    let names: Vec<String> = meta.topics.iter().map(|t| t.name.clone()).collect();
    let min_isr: BTreeMap<String, usize> = admin
        .describe_topics_config_key(&names, "min.insync.replicas")
        .await?
        .into_iter()
        .filter_map(|(t, v)| Some((t, v.trim().parse::<usize>().ok()?)))
        .collect();
    let mut sizes = Vec::new();
    for b in &meta.brokers {
        if let Some((_, addr)) = addrs.iter().find(|(id, _)| *id == b.node_id) {
            let mut one = AdminClient::dial(*addr, dial).await?;
            sizes.push(one.describe_log_dirs().await?);
        }
    }
    Ok(observed_from(&meta, &sizes, &min_isr, ongoing))
}

/// Applies a throttle change through `admin` (broker rates as dynamic
/// broker configs of each broker id, throttled-replica lists as topic
/// configs). Deleting a config that is not set is not an error.
pub async fn apply_throttle(
    admin: &mut AdminClient,
    change: &ThrottleChange,
) -> Result<(), KafkaError> {
    for (broker, rate) in &change.brokers {
        let ops: Vec<ConfigOp> = [throttle::LEADER_RATE, throttle::FOLLOWER_RATE]
            .iter()
            .map(|k| match rate {
                Some(r) => ConfigOp::Set(k.to_string(), r.to_string()),
                None => ConfigOp::Delete(k.to_string()),
            })
            .collect();
        admin.alter_broker_config(&broker.to_string(), &ops).await?;
    }
    for (topic, lists) in &change.topics {
        let ops = match lists {
            Some((leader, follower)) => vec![
                ConfigOp::Set(throttle::LEADER_REPLICAS.into(), leader.clone()),
                ConfigOp::Set(throttle::FOLLOWER_REPLICAS.into(), follower.clone()),
            ],
            None => vec![
                ConfigOp::Delete(throttle::LEADER_REPLICAS.into()),
                ConfigOp::Delete(throttle::FOLLOWER_REPLICAS.into()),
            ],
        };
        match admin.alter_topic_config(topic, &ops).await {
            // A topic deleted meanwhile has no throttle left to remove.
            Err(e) if lists.is_none() && e.code() == Some(codes::UNKNOWN_TOPIC_OR_PARTITION) => {}
            r => r?,
        }
    }
    Ok(())
}

/// Performs a lifecycle step on the controller: its throttle change (before
/// a Submit, so the copy starts throttled; after the other actions) and its
/// action. Returns the partitions the broker refused (an election that
/// could not happen is logged, not a refusal of the rebalance). An error
/// means some of it may not have happened; every part is safe to repeat.
pub async fn perform(
    step: &Step,
    addrs: &[(i32, SocketAddr)],
    dial: &Dial,
) -> Result<Vec<PartitionError>, KafkaError> {
    if step.action == Action::None && step.throttle.is_none() {
        return Ok(Vec::new());
    }
    let mut admin = connect_controller(addrs, dial).await?.0;
    let throttle_first = matches!(step.action, Action::Submit(_));
    if throttle_first {
        if let Some(change) = &step.throttle {
            apply_throttle(&mut admin, change).await?;
        }
    }
    let refused = match &step.action {
        Action::None => Vec::new(),
        Action::Submit(moves) | Action::Cancel(moves) => {
            admin.alter_partition_reassignments(moves).await?
        }
        Action::ElectPreferred(parts) => {
            let failed = admin.elect_preferred_leaders(parts).await?;
            for e in &failed {
                tracing::info!(topic = %e.topic, partition = e.partition, code = e.code,
                    "preferred leader not elected after the rebalance");
            }
            Vec::new()
        }
    };
    if !throttle_first {
        if let Some(change) = &step.throttle {
            apply_throttle(&mut admin, change).await?;
        }
    }
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::{BrokerInfo, PartitionInfo, TopicMetadata};

    #[test]
    fn observation_takes_the_largest_replica_and_defaults_min_isr() {
        let meta = ClusterMetadata {
            controller_id: 1,
            brokers: vec![
                BrokerInfo {
                    node_id: 1,
                    host: "127.0.0.1".into(),
                    port: 1,
                    rack: Some("a".into()),
                },
                BrokerInfo {
                    node_id: 0,
                    host: "127.0.0.1".into(),
                    port: 2,
                    rack: None,
                },
            ],
            topics: vec![TopicMetadata {
                name: "t".into(),
                topic_id: None,
                partitions: 2,
                replication_factor: 2,
                partition_details: vec![
                    PartitionInfo {
                        partition: 0,
                        leader: 0,
                        replicas: vec![0, 1],
                        isr: vec![0, 1],
                    },
                    PartitionInfo {
                        partition: 1,
                        leader: -1,
                        replicas: vec![1, 0],
                        isr: vec![],
                    },
                ],
            }],
        };
        let sizes = vec![
            BTreeMap::from([(("t".to_string(), 0), 10u64)]),
            BTreeMap::from([(("t".to_string(), 0), 12u64), (("t".to_string(), 1), 5)]),
        ];
        let o = observed_from(&meta, &sizes, &BTreeMap::new(), Vec::new());
        assert_eq!(o.brokers[0].id, 0);
        assert_eq!(o.brokers[1].rack.as_deref(), Some("a"));
        assert_eq!(o.partitions[0].size_bytes, 12);
        assert_eq!(o.partitions[1].size_bytes, 5);
        assert_eq!(o.partitions[1].leader, None);
        assert_eq!(o.partitions[0].min_insync_replicas, 1);
        let o = observed_from(
            &meta,
            &sizes,
            &BTreeMap::from([("t".to_string(), 2)]),
            Vec::new(),
        );
        assert_eq!(o.partitions[0].min_insync_replicas, 2);
    }

    #[test]
    fn placement_has_the_highest_factor_and_every_holder() {
        let part = |partition, replicas: &[i32]| PartitionInfo {
            partition,
            leader: replicas[0],
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
        };
        let topic = |name: &str, rf, parts| TopicMetadata {
            name: name.into(),
            topic_id: None,
            partitions: 1,
            replication_factor: rf,
            partition_details: parts,
        };
        let meta = ClusterMetadata {
            controller_id: 0,
            brokers: Vec::new(),
            topics: vec![
                topic("a", 2, vec![part(0, &[0, 1])]),
                topic("b", 3, vec![part(0, &[1, 2, 3])]),
                topic("c", 1, vec![part(0, &[2])]),
            ],
        };
        let moving = OngoingReassignment {
            topic: "c".into(),
            partition: 0,
            replicas: vec![2, 5],
            adding: vec![5],
            removing: vec![2],
        };
        let p = placement_of(&meta, &[moving]);
        assert_eq!(p.max_replication_factor, Some(("b".to_string(), 3)));
        assert_eq!(
            p.holding.into_iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 5]
        );
        // A drain in flight: b's partition moves {1,2,3} -> {0,1,2}; Metadata
        // lists 4 replicas while 3 is being removed. The factor is still 3,
        // and both 0 and 3 hold a replica.
        let meta = ClusterMetadata {
            controller_id: 0,
            brokers: Vec::new(),
            topics: vec![topic("b", 4, vec![part(0, &[0, 1, 2, 3])])],
        };
        let draining = OngoingReassignment {
            topic: "b".into(),
            partition: 0,
            replicas: vec![0, 1, 2, 3],
            adding: vec![0],
            removing: vec![3],
        };
        let p = placement_of(&meta, &[draining]);
        assert_eq!(p.max_replication_factor, Some(("b".to_string(), 3)));
        assert_eq!(p.holding.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        let empty = placement_of(
            &ClusterMetadata {
                controller_id: 0,
                brokers: Vec::new(),
                topics: Vec::new(),
            },
            &[],
        );
        assert_eq!(empty, Placement::default());
    }
}
