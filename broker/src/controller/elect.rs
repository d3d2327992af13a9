//! ElectLeaders (Kafka's `kafka-leader-election`, KIP-460) as pure
//! decisions: which partitions of a request get a new leader, and the
//! per-partition answer Kafka gives for the others. The controller's edge
//! ([`super::rpc`]) persists the changes exactly as it does those of the
//! auto leader rebalance (each one bumps the leader epoch and the
//! partition epoch); nothing here does I/O.
//!
//! Rules, as Kafka's controller applies them:
//! - **preferred**: the first replica leads if it is live and in the ISR
//!   (the same move [`leadership::preferred_leader_moves`] makes);
//!   `ELECTION_NOT_NEEDED` when it already leads,
//!   `PREFERRED_LEADER_NOT_AVAILABLE` when it is not live or not in sync;
//! - **unclean**: only a partition without a leader is touched
//!   (`ELECTION_NOT_NEEDED` otherwise). A live ISR member is taken first
//!   (a clean election); failing that, any live replica, with the ISR set
//!   to just that replica — acknowledged records may be lost, and the
//!   caller logs it ([`leadership::on_broker_returned`] with unclean
//!   election allowed decides both). No live replica at all:
//!   `ELIGIBLE_LEADERS_NOT_AVAILABLE`;
//! - a topic or partition the metadata does not have:
//!   `UNKNOWN_TOPIC_OR_PARTITION`;
//! - a request naming no partitions (Kafka's null list) means every
//!   partition, and then, as in Kafka, partitions that need no election are
//!   left out of the answer (a request naming partitions gets an answer for
//!   each, once per partition even if named twice).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;

use super::leadership::{self, Change, PartitionState};
use crate::image::MetadataImage;

/// Kafka's `ElectionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// 0: give leadership back to the first (preferred) replica.
    Preferred,
    /// 1: elect a leader for leaderless partitions, outside the ISR if
    /// need be.
    Unclean,
}

impl ElectionType {
    /// The type a request's code names; `None` for an unknown code.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(Self::Preferred),
            1 => Some(Self::Unclean),
            _ => None,
        }
    }

    pub fn code(self) -> i32 {
        match self {
            Self::Preferred => 0,
            Self::Unclean => 1,
        }
    }
}

/// The answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOutcome {
    pub topic: String,
    pub index: i32,
    /// `None`: elected (the change is in [`Decision::changes`]).
    pub error: Option<(ResponseError, String)>,
}

/// What an ElectLeaders request decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// One answer per partition, by topic then partition.
    pub outcomes: Vec<PartitionOutcome>,
    /// The leadership changes to persist.
    pub changes: Vec<Change>,
}

/// The new leadership of one partition, or why there is none.
pub fn elect_one(
    p: &PartitionState,
    kind: ElectionType,
    live: &BTreeSet<i32>,
) -> Result<Change, (ResponseError, String)> {
    let name = format!("{}-{}", p.topic, p.index);
    match kind {
        ElectionType::Preferred => {
            if p.replicas.first() == Some(&p.leader) {
                return Err((
                    ResponseError::ElectionNotNeeded,
                    format!("the preferred replica {} already leads {name}", p.leader),
                ));
            }
            leadership::preferred_leader_moves(std::slice::from_ref(p), live)
                .into_iter()
                .next()
                .ok_or_else(|| {
                    let preferred = p.replicas.first().copied().unwrap_or(-1);
                    (
                        ResponseError::PreferredLeaderNotAvailable,
                        format!(
                            "the preferred replica {preferred} of {name} is not live or not in the ISR {:?}",
                            p.isr
                        ),
                    )
                })
        }
        ElectionType::Unclean => {
            if p.leader >= 0 {
                return Err((
                    ResponseError::ElectionNotNeeded,
                    format!("{name} has a leader ({})", p.leader),
                ));
            }
            leadership::on_broker_returned(std::slice::from_ref(p), live, |_| true)
                .into_iter()
                .next()
                .ok_or_else(|| {
                    (
                        ResponseError::EligibleLeadersNotAvailable,
                        format!("no replica of {name} ({:?}) is live", p.replicas),
                    )
                })
        }
    }
}

/// Decides a whole request. `targets`: topic → partitions named (`None`:
/// every partition of every topic).
pub fn decide(
    partitions: &[PartitionState],
    kind: ElectionType,
    targets: Option<&BTreeMap<String, BTreeSet<i32>>>,
    live: &BTreeSet<i32>,
) -> Decision {
    let by_key: BTreeMap<(&str, i32), &PartitionState> = partitions
        .iter()
        .map(|p| ((p.topic.as_str(), p.index), p))
        .collect();
    let wanted: Vec<(String, i32)> = match targets {
        Some(t) => t
            .iter()
            .flat_map(|(topic, ps)| ps.iter().map(move |i| (topic.clone(), *i)))
            .collect(),
        None => by_key.keys().map(|(t, i)| (t.to_string(), *i)).collect(),
    };
    let mut decision = Decision::default();
    for (topic, index) in wanted {
        let result = match by_key.get(&(topic.as_str(), index)) {
            Some(p) => elect_one(p, kind, live),
            None => Err((
                ResponseError::UnknownTopicOrPartition,
                format!("{topic}-{index} does not exist"),
            )),
        };
        let error = match result {
            Ok(change) => {
                decision.changes.push(change);
                None
            }
            // every partition: the ones already as wanted are not listed
            Err((ResponseError::ElectionNotNeeded, _)) if targets.is_none() => continue,
            Err(e) => Some(e),
        };
        decision.outcomes.push(PartitionOutcome {
            topic,
            index,
            error,
        });
    }
    decision
}

/// The partitions of an image as the decisions see them (the standalone
/// broker decides over its own image: it is the only broker and leads
/// everything, so nothing ever needs an election there).
pub fn image_states(image: &MetadataImage) -> Vec<PartitionState> {
    image
        .topics()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| PartitionState::from_image(t, p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::leadership::Election;

    fn p(topic: &str, index: i32, replicas: &[i32], isr: &[i32], leader: i32) -> PartitionState {
        PartitionState {
            topic: topic.into(),
            topic_id: uuid::Uuid::nil(),
            index,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 4,
            partition_epoch: 7,
            adding: vec![],
            removing: vec![],
            elr: vec![],
        }
    }

    use crate::controller::test_support::set;

    fn code(r: Result<Change, (ResponseError, String)>) -> Option<ResponseError> {
        r.err().map(|(c, _)| c)
    }

    #[test]
    fn election_types_are_kafkas_codes() {
        assert_eq!(ElectionType::from_code(0), Some(ElectionType::Preferred));
        assert_eq!(ElectionType::from_code(1), Some(ElectionType::Unclean));
        assert_eq!(ElectionType::from_code(2), None);
        assert_eq!(ElectionType::from_code(-1), None);
        assert_eq!(ElectionType::Unclean.code(), 1);
    }

    #[test]
    fn a_preferred_election_moves_leadership_back_with_a_new_epoch() {
        let moved = p("t", 0, &[1, 2, 3], &[1, 2, 3], 2);
        let c = elect_one(&moved, ElectionType::Preferred, &set(&[1, 2, 3])).unwrap();
        assert_eq!(c.state.leader, 1);
        assert_eq!(c.state.isr, vec![1, 2, 3], "the ISR is kept");
        assert_eq!((c.state.leader_epoch, c.state.partition_epoch), (5, 8));
        assert_eq!(c.election, Election::Clean);
    }

    #[test]
    fn a_preferred_election_is_refused_as_kafka_refuses_it() {
        let live = set(&[1, 2, 3]);
        let leading = p("t", 0, &[1, 2, 3], &[1, 2, 3], 1);
        assert_eq!(
            code(elect_one(&leading, ElectionType::Preferred, &live)),
            Some(ResponseError::ElectionNotNeeded)
        );
        let out_of_sync = p("t", 0, &[1, 2, 3], &[2, 3], 2);
        assert_eq!(
            code(elect_one(&out_of_sync, ElectionType::Preferred, &live)),
            Some(ResponseError::PreferredLeaderNotAvailable)
        );
        let in_sync = p("t", 0, &[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(
            code(elect_one(&in_sync, ElectionType::Preferred, &set(&[2, 3]))),
            Some(ResponseError::PreferredLeaderNotAvailable),
            "the preferred replica is not live"
        );
        let no_replicas = p("t", 0, &[], &[], -1);
        assert_eq!(
            code(elect_one(&no_replicas, ElectionType::Preferred, &live)),
            Some(ResponseError::PreferredLeaderNotAvailable)
        );
    }

    #[test]
    fn an_unclean_election_takes_a_live_replica_outside_the_isr_alone() {
        // 1 alone was in sync, and it is gone; 2 and 3 are live
        let offline = p("t", 0, &[1, 2, 3], &[1], -1);
        let c = elect_one(&offline, ElectionType::Unclean, &set(&[2, 3])).unwrap();
        assert_eq!(c.state.leader, 2);
        assert_eq!(c.state.isr, vec![2], "the ISR is just the new leader");
        assert_eq!(c.state.leader_epoch, 5);
        assert_eq!(c.election, Election::Unclean);
        // a live ISR member is preferred: a clean election
        let back = elect_one(&offline, ElectionType::Unclean, &set(&[1, 3])).unwrap();
        assert_eq!((back.state.leader, back.election), (1, Election::Clean));
        assert_eq!(back.state.isr, vec![1]);
    }

    #[test]
    fn an_unclean_election_is_refused_as_kafka_refuses_it() {
        let led = p("t", 0, &[1, 2], &[1, 2], 2);
        assert_eq!(
            code(elect_one(&led, ElectionType::Unclean, &set(&[1, 2]))),
            Some(ResponseError::ElectionNotNeeded)
        );
        let offline = p("t", 0, &[1, 2], &[1], -1);
        assert_eq!(
            code(elect_one(&offline, ElectionType::Unclean, &set(&[3]))),
            Some(ResponseError::EligibleLeadersNotAvailable)
        );
    }

    #[test]
    fn named_partitions_each_get_an_answer_and_unknown_ones_are_reported() {
        let parts = [
            p("a", 0, &[1, 2], &[1, 2], 2),
            p("a", 1, &[2, 1], &[2, 1], 2),
        ];
        let targets: BTreeMap<String, BTreeSet<i32>> = [
            ("a".to_string(), set(&[0, 1, 5])),
            ("nope".to_string(), set(&[0])),
        ]
        .into();
        let d = decide(
            &parts,
            ElectionType::Preferred,
            Some(&targets),
            &set(&[1, 2]),
        );
        let got: Vec<(&str, i32, Option<ResponseError>)> = d
            .outcomes
            .iter()
            .map(|o| (o.topic.as_str(), o.index, o.error.as_ref().map(|e| e.0)))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", 0, None),
                ("a", 1, Some(ResponseError::ElectionNotNeeded)),
                ("a", 5, Some(ResponseError::UnknownTopicOrPartition)),
                ("nope", 0, Some(ResponseError::UnknownTopicOrPartition)),
            ]
        );
        assert_eq!(d.changes.len(), 1);
        assert_eq!(
            (d.changes[0].state.index, d.changes[0].state.leader),
            (0, 1)
        );
        let none = decide(
            &parts,
            ElectionType::Preferred,
            Some(&BTreeMap::new()),
            &set(&[1, 2]),
        );
        assert_eq!(none, Decision::default(), "an empty list elects nothing");
    }

    #[test]
    fn every_partition_leaves_out_those_that_need_no_election() {
        let parts = [
            p("a", 0, &[1, 2], &[1, 2], 2),
            p("a", 1, &[2, 1], &[2, 1], 2),
            p("b", 0, &[3, 1], &[1], 1),
        ];
        let d = decide(&parts, ElectionType::Preferred, None, &set(&[1, 2, 3]));
        let got: Vec<(&str, i32, Option<ResponseError>)> = d
            .outcomes
            .iter()
            .map(|o| (o.topic.as_str(), o.index, o.error.as_ref().map(|e| e.0)))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", 0, None),
                ("b", 0, Some(ResponseError::PreferredLeaderNotAvailable)),
            ]
        );
        assert_eq!(d.changes.len(), 1);
    }

    #[test]
    fn a_standalone_image_never_needs_an_election() {
        let image = MetadataImage::standalone(
            "c",
            crate::image::BrokerImage {
                id: 3,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                endpoints: vec![],
                incarnation: None,
            },
            [crate::image::TopicFacts {
                name: "t".into(),
                id: uuid::Uuid::new_v4(),
                partitions: 2,
            }],
        );
        let states = image_states(&image);
        assert_eq!(states.len(), 2);
        for kind in [ElectionType::Preferred, ElectionType::Unclean] {
            let all = decide(&states, kind, None, &set(&[3]));
            assert_eq!(all, Decision::default(), "{kind:?}");
            let named: BTreeMap<String, BTreeSet<i32>> = [("t".to_string(), set(&[1]))].into();
            let one = decide(&states, kind, Some(&named), &set(&[3]));
            assert_eq!(
                one.outcomes[0].error.as_ref().map(|e| e.0),
                Some(ResponseError::ElectionNotNeeded)
            );
            assert!(one.changes.is_empty());
        }
    }
}
