//! Per-topic progress of partition moves, for `KafkaTopic.status.reassignment`:
//! a pure function of the topic's partitions as Kafka reports them, the
//! reassignments running now (ListPartitionReassignments) and the
//! `KafkaRebalance`s of the topic's cluster.
//!
//! One writer per status: the topic controller is the only writer of a
//! `KafkaTopic`'s status, so it computes this field itself when it
//! reconciles the topic — reading the rebalances' status (written only by
//! the rebalance controller) and Kafka — instead of the rebalance
//! controller patching topics. Two writers of one status would race: the
//! topic controller writes its status whole and would drop or resurrect a
//! field another controller wrote. Reading Kafka also shows moves that no
//! `KafkaRebalance` started (`kafka-reassign-partitions`). The topic
//! controller reconciles a topic again soon while this is present, and at
//! once when a rebalance that moves it changes.

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::{KafkaRebalanceStatus, RebalancePhase, TopicReassignment};
use crate::kafka::OngoingReassignment;

/// A `KafkaRebalance` of the topic's cluster: its name and status.
pub type RebalanceOf<'a> = (&'a str, &'a KafkaRebalanceStatus);

fn same_set(a: &[i32], b: &[i32]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// The progress of moves of `topic`, or None when none of its partitions
/// moves and no `Rebalancing` rebalance plans to move them. `replicas` are
/// the topic's partitions' replicas now (partition → brokers). A
/// rebalance's move is done when the partition is not moving and its
/// replicas are the move's target (as a set; order for a pure reorder).
pub fn topic_reassignment(
    topic: &str,
    replicas: &BTreeMap<i32, Vec<i32>>,
    ongoing: &[OngoingReassignment],
    rebalances: &[RebalanceOf],
) -> Option<TopicReassignment> {
    let moving: BTreeSet<i32> = ongoing
        .iter()
        .filter(|o| o.topic == topic)
        .map(|o| o.partition)
        .collect();
    let running = rebalances
        .iter()
        .filter(|(_, s)| s.phase == Some(RebalancePhase::Rebalancing))
        .find(|(_, s)| s.moves.iter().any(|m| m.topic == topic));
    if moving.is_empty() && running.is_none() {
        return None;
    }
    let mut out = TopicReassignment {
        partitions_moving: moving.iter().copied().collect(),
        ..TopicReassignment::default()
    };
    if let Some((name, status)) = running {
        out.rebalance = Some(name.to_string());
        for m in status.moves.iter().filter(|m| m.topic == topic) {
            out.partitions_total += 1;
            let reorder = same_set(&m.from, &m.to);
            let at_target = replicas.get(&m.partition).is_some_and(|r| {
                if reorder {
                    *r == m.to
                } else {
                    same_set(r, &m.to)
                }
            });
            if at_target && !moving.contains(&m.partition) {
                out.partitions_done += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::PlannedMove;

    fn mv(topic: &str, partition: i32, from: &[i32], to: &[i32]) -> PlannedMove {
        PlannedMove {
            topic: topic.into(),
            partition,
            from: from.to_vec(),
            to: to.to_vec(),
            bytes: 1,
            batch: 0,
        }
    }

    fn status(phase: RebalancePhase, moves: Vec<PlannedMove>) -> KafkaRebalanceStatus {
        KafkaRebalanceStatus {
            phase: Some(phase),
            moves,
            ..Default::default()
        }
    }

    fn ongoing(topic: &str, partition: i32) -> OngoingReassignment {
        OngoingReassignment {
            topic: topic.into(),
            partition,
            replicas: vec![0, 1, 2],
            adding: vec![2],
            removing: vec![0],
        }
    }

    fn replicas(parts: &[(i32, &[i32])]) -> BTreeMap<i32, Vec<i32>> {
        parts.iter().map(|(p, r)| (*p, r.to_vec())).collect()
    }

    #[test]
    fn nothing_moves_nothing_to_report() {
        let r = replicas(&[(0, &[0, 1])]);
        assert_eq!(topic_reassignment("t", &r, &[], &[]), None);
        // other topics' moves and finished or waiting rebalances do not count
        let ready = status(RebalancePhase::Ready, vec![mv("t", 0, &[0, 1], &[1, 2])]);
        let proposal = status(
            RebalancePhase::ProposalReady,
            vec![mv("t", 0, &[0, 1], &[1, 2])],
        );
        let running_other = status(
            RebalancePhase::Rebalancing,
            vec![mv("u", 0, &[0, 1], &[1, 2])],
        );
        assert_eq!(
            topic_reassignment(
                "t",
                &r,
                &[ongoing("u", 0)],
                &[("a", &ready), ("b", &proposal), ("c", &running_other)]
            ),
            None
        );
    }

    #[test]
    fn a_rebalance_counts_its_moves_of_the_topic_done_and_moving() {
        let s = status(
            RebalancePhase::Rebalancing,
            vec![
                mv("t", 0, &[0, 1], &[1, 2]), // done
                mv("t", 1, &[1, 2], &[2, 0]), // moving
                mv("t", 2, &[2, 0], &[0, 1]), // not started
                mv("t", 3, &[0, 1], &[1, 0]), // reorder, done
                mv("u", 0, &[0, 1], &[1, 2]), // another topic
            ],
        );
        let r = replicas(&[(0, &[2, 1]), (1, &[1, 2, 0]), (2, &[2, 0]), (3, &[1, 0])]);
        let got = topic_reassignment("t", &r, &[ongoing("t", 1)], &[("drain", &s)]).unwrap();
        assert_eq!(
            got,
            TopicReassignment {
                rebalance: Some("drain".into()),
                partitions_total: 4,
                partitions_done: 2,
                partitions_moving: vec![1],
            }
        );
        // A reorder not yet applied is not done.
        let r = replicas(&[(0, &[2, 1]), (1, &[2, 0]), (2, &[0, 1]), (3, &[0, 1])]);
        let got = topic_reassignment("t", &r, &[], &[("drain", &s)]).unwrap();
        assert_eq!(got.partitions_done, 3);
        assert!(got.partitions_moving.is_empty());
    }

    #[test]
    fn moves_started_by_other_tools_show_without_a_rebalance() {
        let r = replicas(&[(0, &[0, 1, 2]), (5, &[0, 1, 2])]);
        let got = topic_reassignment("t", &r, &[ongoing("t", 5), ongoing("t", 0)], &[]).unwrap();
        assert_eq!(got.rebalance, None);
        assert_eq!(got.partitions_total, 0);
        assert_eq!(got.partitions_moving, vec![0, 5]);
    }
}
