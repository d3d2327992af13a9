//! The cluster controller's metadata and its admin decisions, as pure
//! functions: what a CreateTopics, CreatePartitions, AlterConfigs or a
//! producer-id block allocation turns the metadata into, or why it is
//! refused (with Kafka's error code). The controller's edge
//! ([`super::rpc`]) persists what these decide and only then makes it
//! current; nothing here does I/O or reads a clock.
//!
//! The metadata is the records of `moldau_coordination::records`: one
//! cluster record and one record per topic (with each partition's
//! replicas, leader, leader epoch and ISR), so whatever store keeps them
//! writes one small object per change.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use moldau_coordination::records::{ClusterRecord, PartitionRecord, TopicRecord};
use uuid::Uuid;

use super::assignment::{
    assign_replicas, manual_for_create, manual_for_extend, BrokerSlot, PlacementError, Seeds,
};
use super::leadership::{Change, PartitionState};
use crate::error::TopicError;
use crate::metadata::validate_topic_name;
use crate::topic_config;

/// How many producer ids one allocation hands a broker (Kafka's block size).
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Defaults a create request may leave to the cluster (`-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateDefaults {
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// A CreateTopics request for one topic (`-1`: the cluster default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Explicit `(partition, replicas)`, preferred leader first; empty: the
    /// controller places the replicas. With them, `partitions` and
    /// `replication_factor` must be -1.
    pub assignments: Vec<(i32, Vec<i32>)>,
}

/// Explicit assignments refused (Kafka's INVALID_REPLICA_ASSIGNMENT).
pub fn manual_error(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidReplicaAssignment, message)
}

/// CreateTopics with explicit assignments must leave the partition count
/// and replication factor to them (`-1`), as Kafka requires.
pub fn check_manual_counts(partitions: i32, replication_factor: i16) -> Result<(), TopicError> {
    if replication_factor != -1 {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ));
    }
    if partitions != -1 {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ));
    }
    Ok(())
}

/// The whole cluster metadata, as the active controller holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    pub cluster: ClusterRecord,
    pub topics: BTreeMap<String, TopicRecord>,
}

fn placement_error(e: PlacementError) -> TopicError {
    TopicError::new(ResponseError::InvalidReplicationFactor, e.to_string())
}

fn unknown(name: &str) -> TopicError {
    TopicError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("topic {name} does not exist"),
    )
}

/// New partitions `first..first+replicas.len()` in leader epoch 0, with
/// every replica in service (`live`) in sync (an empty log is held by all
/// of them, as Kafka starts a partition) and the first of those leading:
/// the preferred (first) replica unless an explicit assignment named a
/// fenced broker first.
fn new_partitions(
    first: usize,
    replicas: Vec<Vec<i32>>,
    live: &BTreeSet<i32>,
) -> Vec<PartitionRecord> {
    replicas
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| {
            let isr: Vec<i32> = replicas
                .iter()
                .copied()
                .filter(|r| live.contains(r))
                .collect();
            (i, replicas, isr)
        })
        .map(|(i, replicas, isr)| PartitionRecord {
            index: i32::try_from(first + i).unwrap_or(i32::MAX),
            leader: isr.first().copied().unwrap_or(-1),
            isr,
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            eligible_leader_replicas: Vec::new(),
        })
        .collect()
}

fn validate_configs(configs: &BTreeMap<String, String>) -> Result<(), TopicError> {
    for (k, v) in configs {
        topic_config::validate(k, v)
            .map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))?;
    }
    Ok(())
}

impl ClusterState {
    /// The topic a CreateTopics request would create, placed over the live
    /// `brokers` (or as its explicit assignments say, checked against the
    /// `registered` brokers); the caller picks `seeds` (at random, as Kafka
    /// does) and the topic id.
    pub fn plan_create(
        &self,
        request: NewTopic,
        defaults: CreateDefaults,
        brokers: &[BrokerSlot],
        registered: &BTreeSet<i32>,
        seeds: Seeds,
        id: Uuid,
    ) -> Result<TopicRecord, TopicError> {
        let NewTopic {
            name,
            partitions,
            replication_factor,
            configs,
            assignments,
        } = request;
        let live: BTreeSet<i32> = brokers.iter().map(|b| b.id).collect();
        let name = name.as_str();
        validate_topic_name(name)
            .map_err(|m| TopicError::new(ResponseError::InvalidTopicException, m))?;
        if self.topics.contains_key(name) {
            return Err(TopicError::new(
                ResponseError::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        if !assignments.is_empty() {
            check_manual_counts(partitions, replication_factor)?;
            let replicas =
                manual_for_create(&assignments, registered, &live).map_err(manual_error)?;
            validate_configs(&configs)?;
            let rf = replicas
                .first()
                .map_or(1, |r| i16::try_from(r.len()).unwrap_or(i16::MAX));
            return Ok(TopicRecord {
                name: name.to_string(),
                topic_id: id.to_string(),
                replication_factor: rf,
                configs,
                partitions: new_partitions(0, replicas, &live),
            });
        }
        let partitions = if partitions == -1 {
            defaults.num_partitions
        } else {
            partitions
        };
        let rf = if replication_factor == -1 {
            defaults.replication_factor
        } else {
            replication_factor
        };
        if partitions < 1 {
            return Err(TopicError::new(
                ResponseError::InvalidPartitions,
                format!("number of partitions must be at least 1, got {partitions}"),
            ));
        }
        validate_configs(&configs)?;
        let count = usize::try_from(partitions).unwrap_or(0);
        let replicas = assign_replicas(brokers, 0, count, rf, seeds).map_err(placement_error)?;
        Ok(TopicRecord {
            name: name.to_string(),
            topic_id: id.to_string(),
            replication_factor: rf,
            configs,
            partitions: new_partitions(0, replicas, &live),
        })
    }

    /// The topic grown to `count` partitions (CreatePartitions), the new
    /// ones placed over the live `brokers` with the topic's replication
    /// factor, or as `assignments` (one replica list per added partition)
    /// say, checked against the `registered` brokers.
    pub fn plan_create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: &[Vec<i32>],
        brokers: &[BrokerSlot],
        registered: &BTreeSet<i32>,
        seeds: Seeds,
    ) -> Result<TopicRecord, TopicError> {
        let live: BTreeSet<i32> = brokers.iter().map(|b| b.id).collect();
        let current = self.topics.get(name).ok_or_else(|| unknown(name))?;
        let have = current.partitions.len();
        if usize::try_from(count).map_or(true, |c| c <= have) {
            return Err(TopicError::new(
                ResponseError::InvalidPartitions,
                format!("topic {name} has {have} partitions; the new count {count} must be larger"),
            ));
        }
        let added = usize::try_from(count).unwrap_or(0) - have;
        // The topic's factor as Kafka takes it: partition 0's replica count
        // (a reassignment may have changed it since creation, KIP-860).
        let factor = current
            .partitions
            .first()
            .map_or(current.replication_factor, |p| {
                i16::try_from(p.replicas.len()).unwrap_or(i16::MAX)
            });
        let replicas = if assignments.is_empty() {
            assign_replicas(brokers, have, added, factor, seeds).map_err(placement_error)?
        } else {
            let factor = usize::try_from(factor).unwrap_or(0);
            manual_for_extend(assignments, have, added, factor, registered, &live)
                .map_err(manual_error)?
        };
        let mut next = current.clone();
        next.partitions
            .extend(new_partitions(have, replicas, &live));
        Ok(next)
    }

    /// The topic with its config overrides changed by `change`, every
    /// resulting value validated (AlterConfigs, IncrementalAlterConfigs).
    pub fn plan_alter_configs(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), TopicError>,
    ) -> Result<TopicRecord, TopicError> {
        let current = self.topics.get(name).ok_or_else(|| unknown(name))?;
        let mut next = current.clone();
        change(&mut next.configs)?;
        validate_configs(&next.configs)?;
        Ok(next)
    }

    /// The next producer-id block: `(first id, cluster record with the
    /// block end moved past it)`. Ids are never handed out twice because
    /// the end is persisted before the block is used.
    pub fn plan_producer_block(&self) -> (i64, ClusterRecord) {
        let first = self.cluster.producer_id_block_end.max(0);
        let mut next = self.cluster.clone();
        next.producer_id_block_end = first + PRODUCER_ID_BLOCK;
        (first, next)
    }

    /// Every partition as the leadership decisions see it.
    pub fn partition_states(&self) -> Vec<PartitionState> {
        self.topics.values().flat_map(partition_states).collect()
    }

    /// Topics whose records change when `changes` apply, with the changes
    /// applied (one record per topic, so one write per topic).
    pub fn topics_changed_by(&self, changes: &[Change]) -> Vec<TopicRecord> {
        let mut changed: BTreeMap<&str, TopicRecord> = BTreeMap::new();
        for c in changes {
            let Some(current) = self.topics.get(&c.state.topic) else {
                continue;
            };
            let record = changed
                .entry(current.name.as_str())
                .or_insert_with(|| current.clone());
            if let Some(p) = usize::try_from(c.state.index)
                .ok()
                .and_then(|i| record.partitions.get_mut(i))
            {
                p.replicas = c.state.replicas.clone();
                p.isr = c.state.isr.clone();
                p.leader = c.state.leader;
                p.leader_epoch = c.state.leader_epoch;
                p.partition_epoch = c.state.partition_epoch;
                p.adding_replicas = c.state.adding.clone();
                p.removing_replicas = c.state.removing.clone();
                p.eligible_leader_replicas = c.state.elr.clone();
            }
        }
        changed.into_values().collect()
    }

    /// Topics with unclean leader election enabled.
    pub fn unclean_topics(&self) -> BTreeSet<String> {
        self.topics
            .values()
            .filter(|t| {
                t.configs
                    .get("unclean.leader.election.enable")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            })
            .map(|t| t.name.clone())
            .collect()
    }
}

/// A topic record's partitions as leadership decisions see them.
pub fn partition_states(t: &TopicRecord) -> Vec<PartitionState> {
    let id = Uuid::parse_str(&t.topic_id).unwrap_or(Uuid::nil());
    t.partitions
        .iter()
        .map(|p| PartitionState {
            topic: t.name.clone(),
            topic_id: id,
            index: p.index,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            elr: p.eligible_leader_replicas.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::controller::leadership::on_brokers_fenced;

    fn brokers(n: i32) -> Vec<BrokerSlot> {
        (0..n).map(|id| BrokerSlot { id, rack: None }).collect()
    }

    fn registered() -> BTreeSet<i32> {
        [0, 1, 2].into()
    }

    const DEFAULTS: CreateDefaults = CreateDefaults {
        num_partitions: 3,
        replication_factor: 1,
    };

    fn create(
        s: &ClusterState,
        name: &str,
        partitions: i32,
        rf: i16,
    ) -> Result<TopicRecord, TopicError> {
        s.plan_create(
            NewTopic {
                name: name.into(),
                partitions,
                replication_factor: rf,
                configs: BTreeMap::new(),
                assignments: Vec::new(),
            },
            DEFAULTS,
            &brokers(3),
            &registered(),
            Seeds::default(),
            Uuid::new_v4(),
        )
    }

    #[test]
    fn a_new_topic_spreads_its_leaders_over_every_broker() {
        let s = ClusterState::default();
        let t = create(&s, "orders", 12, 1).expect("create");
        assert_eq!(t.validate(), Ok(()));
        let mut per_broker = BTreeMap::new();
        for p in &t.partitions {
            assert_eq!(p.leader, p.replicas[0]);
            assert_eq!(
                p.isr, p.replicas,
                "every replica of a new partition is in sync"
            );
            *per_broker.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(per_broker, BTreeMap::from([(0, 4), (1, 4), (2, 4)]));
        let t3 = create(&s, "replicated", 6, 3).expect("rf 3");
        assert!(t3.partitions.iter().all(|p| p.replicas.len() == 3));
    }

    #[test]
    fn creates_are_refused_with_kafkas_codes() {
        let mut s = ClusterState::default();
        let t = create(&s, "orders", 1, 1).unwrap();
        s.topics.insert("orders".into(), t);
        let code = |r: Result<TopicRecord, TopicError>| r.err().map(|e| e.code);
        assert_eq!(
            code(create(&s, "orders", 1, 1)),
            Some(ResponseError::TopicAlreadyExists)
        );
        assert_eq!(
            code(create(&s, "a b", 1, 1)),
            Some(ResponseError::InvalidTopicException)
        );
        assert_eq!(
            code(create(&s, "x", 0, 1)),
            Some(ResponseError::InvalidPartitions)
        );
        assert_eq!(
            code(create(&s, "x", 1, 4)),
            Some(ResponseError::InvalidReplicationFactor)
        );
        assert_eq!(
            code(create(&s, "x", 1, 0)),
            Some(ResponseError::InvalidReplicationFactor)
        );
        let bad_config = s.plan_create(
            NewTopic {
                name: "x".into(),
                partitions: 1,
                replication_factor: 1,
                configs: [("retention.ms".to_string(), "soon".to_string())].into(),
                assignments: Vec::new(),
            },
            DEFAULTS,
            &brokers(3),
            &registered(),
            Seeds::default(),
            Uuid::new_v4(),
        );
        assert_eq!(code(bad_config), Some(ResponseError::InvalidConfig));
        // -1: the defaults
        let d = create(&s, "d", -1, -1).unwrap();
        assert_eq!(d.partitions.len(), 3);
        assert_eq!(d.replication_factor, 1);
    }

    #[test]
    fn partitions_grow_where_creation_left_off_and_never_shrink() {
        let mut s = ClusterState::default();
        s.topics.insert("t".into(), create(&s, "t", 2, 1).unwrap());
        let grown = s
            .plan_create_partitions("t", 5, &[], &brokers(3), &registered(), Seeds::default())
            .unwrap();
        assert_eq!(grown.partitions.len(), 5);
        assert_eq!(grown.partitions[..2], s.topics["t"].partitions[..]);
        assert_eq!(grown.validate(), Ok(()));
        for n in [1, 2] {
            assert_eq!(
                s.plan_create_partitions("t", n, &[], &brokers(3), &registered(), Seeds::default())
                    .unwrap_err()
                    .code,
                ResponseError::InvalidPartitions
            );
        }
        assert_eq!(
            s.plan_create_partitions("nope", 5, &[], &brokers(3), &registered(), Seeds::default())
                .unwrap_err()
                .code,
            ResponseError::UnknownTopicOrPartition
        );
    }

    fn manual(
        s: &ClusterState,
        partitions: i32,
        rf: i16,
        assignments: &[(i32, &[i32])],
        live: &[i32],
    ) -> Result<TopicRecord, TopicError> {
        let slots: Vec<BrokerSlot> = live
            .iter()
            .map(|id| BrokerSlot {
                id: *id,
                rack: None,
            })
            .collect();
        s.plan_create(
            NewTopic {
                name: "m".into(),
                partitions,
                replication_factor: rf,
                configs: BTreeMap::new(),
                assignments: assignments.iter().map(|(p, r)| (*p, r.to_vec())).collect(),
            },
            DEFAULTS,
            &slots,
            &[0, 1, 2].into(),
            Seeds::default(),
            Uuid::new_v4(),
        )
    }

    #[test]
    fn explicit_assignments_are_taken_as_given() {
        let s = ClusterState::default();
        let t = manual(&s, -1, -1, &[(1, &[2, 0]), (0, &[1, 2])], &[0, 1, 2]).unwrap();
        assert_eq!(t.validate(), Ok(()));
        assert_eq!(t.replication_factor, 2);
        let got: Vec<(i32, Vec<i32>, i32, Vec<i32>)> = t
            .partitions
            .iter()
            .map(|p| (p.index, p.replicas.clone(), p.leader, p.isr.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, vec![1, 2], 1, vec![1, 2]),
                (1, vec![2, 0], 2, vec![2, 0]),
            ]
        );
        // A fenced preferred replica: in the replicas, not in the ISR, and
        // the first replica in service leads.
        let t = manual(&s, -1, -1, &[(0, &[2, 1])], &[0, 1]).unwrap();
        assert_eq!(
            (t.partitions[0].leader, t.partitions[0].isr.clone()),
            (1, vec![1])
        );
    }

    #[test]
    fn explicit_assignments_are_refused_with_kafkas_codes() {
        let mut s = ClusterState::default();
        let code = |r: Result<TopicRecord, TopicError>| r.err().map(|e| e.code);
        let all = [0, 1, 2];
        for (partitions, rf) in [(2, -1), (-1, 2), (2, 2)] {
            assert_eq!(
                code(manual(
                    &s,
                    partitions,
                    rf,
                    &[(0, &[0, 1]), (1, &[1, 2])],
                    &all
                )),
                Some(ResponseError::InvalidRequest),
                "{partitions} {rf}"
            );
        }
        let bad: [&[(i32, &[i32])]; 5] = [
            &[(0, &[0, 7])],            // unknown broker
            &[(0, &[1, 1])],            // a replica twice
            &[(0, &[0, 1]), (1, &[2])], // uneven counts
            &[(0, &[0]), (2, &[1])],    // a gap
            &[(0, &[0]), (0, &[1])],    // a partition twice
        ];
        for a in bad {
            assert_eq!(
                code(manual(&s, -1, -1, a, &all)),
                Some(ResponseError::InvalidReplicaAssignment),
                "{a:?}"
            );
        }
        assert_eq!(
            code(manual(&s, -1, -1, &[(0, &[2])], &[0, 1])),
            Some(ResponseError::InvalidReplicaAssignment),
            "no replica in service"
        );
        s.topics
            .insert("m".into(), manual(&s, -1, -1, &[(0, &[0])], &all).unwrap());
        assert_eq!(
            code(manual(&s, -1, -1, &[(0, &[0])], &all)),
            Some(ResponseError::TopicAlreadyExists)
        );
    }

    #[test]
    fn added_partitions_take_explicit_assignments() {
        let mut s = ClusterState::default();
        let all: BTreeSet<i32> = [0, 1, 2].into();
        s.topics.insert(
            "m".into(),
            manual(&s, -1, -1, &[(0, &[0, 1])], &[0, 1, 2]).unwrap(),
        );
        let grown = s
            .plan_create_partitions(
                "m",
                3,
                &[vec![2, 0], vec![1, 2]],
                &brokers(3),
                &all,
                Seeds::default(),
            )
            .unwrap();
        assert_eq!(grown.validate(), Ok(()));
        let replicas: Vec<Vec<i32>> = grown
            .partitions
            .iter()
            .map(|p| p.replicas.clone())
            .collect();
        assert_eq!(replicas, vec![vec![0, 1], vec![2, 0], vec![1, 2]]);
        assert_eq!(grown.partitions[1].leader, 2);
        // Partition 0 moved to three replicas: added partitions take three.
        let mut moved = s.clone();
        if let Some(t) = moved.topics.get_mut("m") {
            t.partitions[0].replicas = vec![0, 1, 2];
            t.partitions[0].isr = vec![0, 1, 2];
        }
        let three = moved
            .plan_create_partitions(
                "m",
                2,
                &[vec![2, 1, 0]],
                &brokers(3),
                &all,
                Seeds::default(),
            )
            .unwrap();
        assert_eq!(three.partitions[1].replicas, vec![2, 1, 0]);
        for bad in [
            vec![vec![2, 0]],             // one list for two partitions
            vec![vec![2], vec![1]],       // not the topic's factor
            vec![vec![2, 9], vec![1, 2]], // unknown broker
            vec![vec![2, 2], vec![1, 2]], // a replica twice
        ] {
            assert_eq!(
                s.plan_create_partitions("m", 3, &bad, &brokers(3), &all, Seeds::default())
                    .unwrap_err()
                    .code,
                ResponseError::InvalidReplicaAssignment,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn config_changes_are_validated_whole() {
        let mut s = ClusterState::default();
        s.topics.insert("t".into(), create(&s, "t", 1, 1).unwrap());
        let ok = s
            .plan_alter_configs("t", |c| {
                c.insert("retention.ms".into(), "1000".into());
                Ok(())
            })
            .unwrap();
        assert_eq!(ok.configs["retention.ms"], "1000");
        let bad = s.plan_alter_configs("t", |c| {
            c.insert("cleanup.policy".into(), "sometimes".into());
            Ok(())
        });
        assert_eq!(bad.unwrap_err().code, ResponseError::InvalidConfig);
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut s = ClusterState::default();
        let (a, next) = s.plan_producer_block();
        s.cluster = next;
        let (b, _) = s.plan_producer_block();
        assert_eq!(a, 0);
        assert_eq!(b, PRODUCER_ID_BLOCK);
    }

    #[test]
    fn leadership_changes_become_one_record_per_topic() {
        let mut s = ClusterState::default();
        s.topics.insert("a".into(), create(&s, "a", 6, 1).unwrap());
        s.topics.insert("b".into(), create(&s, "b", 3, 1).unwrap());
        let live: BTreeSet<i32> = [0, 2].into();
        let changes = on_brokers_fenced(&s.partition_states(), &[1].into(), &live, |_| false);
        assert!(!changes.is_empty());
        let records = s.topics_changed_by(&changes);
        assert_eq!(records.len(), 2, "both topics had a partition on broker 1");
        for r in &records {
            for p in r.partitions.iter().filter(|p| p.replicas == vec![1]) {
                assert_eq!(p.leader, -1, "rf 1: nobody else can lead");
                assert!(p.leader_epoch > 0);
            }
            assert_eq!(r.validate(), Ok(()));
        }
    }
}
