//! The replication throttle of a running rebalance, as Kafka's
//! `kafka-reassign-partitions --throttle` sets it, decided as pure
//! functions: which configs to set for the batch in flight, and the
//! difference to what is already set (so a step only touches what
//! changed, and an ended rebalance removes exactly what it set).
//!
//! For each move of the batch in flight: the partition's current replicas
//! go into its topic's `leader.replication.throttled.replicas` (they serve
//! the copy), the new ones into `follower.replication.throttled.replicas`
//! (they fetch it), both as `partition:broker` lists; every broker a move
//! touches gets `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate`. The broker throttles only
//! replicas outside the ISR, so clients and in-sync followers are never
//! slowed. What was set is kept in the rebalance's `status.throttle`; the
//! topic controller leaves these two topic configs alone (they belong to
//! whoever moves partitions).
//!
//! Owns only the decision; the admin calls are in `execute`.

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::{AppliedThrottle, PlannedMove, ThrottledTopic};

/// Broker config: bytes per second a leader sends to throttled replicas.
pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
/// Broker config: bytes per second a follower fetches for throttled replicas.
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
/// Topic config: throttled replicas on the sending side.
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
/// Topic config: throttled replicas on the fetching side.
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// Config changes to make in Kafka; `None` values are deletions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThrottleChange {
    /// Broker id → the rate to set on it (both directions), or None to
    /// remove both rates.
    pub brokers: BTreeMap<i32, Option<i64>>,
    /// Topic → (leader list, follower list) to set, or None to remove both.
    pub topics: BTreeMap<String, Option<(String, String)>>,
}

/// `(partition, broker)` entries of one throttled-replicas list.
type Entries = BTreeSet<(i32, i32)>;

fn entries(set: &Entries) -> String {
    set.iter()
        .map(|(p, b)| format!("{p}:{b}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The throttle for `moves` (the batch in flight) at `rate` bytes/s.
pub fn wanted<'a>(rate: i64, moves: impl IntoIterator<Item = &'a PlannedMove>) -> AppliedThrottle {
    let mut brokers = BTreeSet::new();
    let mut topics: BTreeMap<&str, (Entries, Entries)> = BTreeMap::new();
    for m in moves {
        let (leader, follower) = topics.entry(m.topic.as_str()).or_default();
        for b in &m.from {
            leader.insert((m.partition, *b));
            brokers.insert(*b);
        }
        for b in m.to.iter().filter(|b| !m.from.contains(b)) {
            follower.insert((m.partition, *b));
            brokers.insert(*b);
        }
    }
    AppliedThrottle {
        bytes_per_second: rate,
        brokers: brokers.into_iter().collect(),
        topics: topics
            .into_iter()
            .map(|(topic, (l, f))| ThrottledTopic {
                topic: topic.to_string(),
                leader: entries(&l),
                follower: entries(&f),
            })
            .collect(),
    }
}

/// What to change in Kafka to go from `old` (set now) to `new` (wanted);
/// None when nothing changes.
pub fn change(
    old: Option<&AppliedThrottle>,
    new: Option<&AppliedThrottle>,
) -> Option<ThrottleChange> {
    let mut out = ThrottleChange::default();
    let old_rate = old.map(|o| o.bytes_per_second);
    let old_brokers: BTreeSet<i32> = old
        .map(|o| o.brokers.iter().copied().collect())
        .unwrap_or_default();
    let new_brokers: BTreeSet<i32> = new
        .map(|n| n.brokers.iter().copied().collect())
        .unwrap_or_default();
    if let Some(n) = new {
        for b in &new_brokers {
            if !old_brokers.contains(b) || old_rate != Some(n.bytes_per_second) {
                out.brokers.insert(*b, Some(n.bytes_per_second));
            }
        }
    }
    for b in old_brokers.difference(&new_brokers) {
        out.brokers.insert(*b, None);
    }
    let old_topics: BTreeMap<&str, &ThrottledTopic> = old
        .map(|o| o.topics.iter().map(|t| (t.topic.as_str(), t)).collect())
        .unwrap_or_default();
    let new_topics: BTreeMap<&str, &ThrottledTopic> = new
        .map(|n| n.topics.iter().map(|t| (t.topic.as_str(), t)).collect())
        .unwrap_or_default();
    for (name, t) in &new_topics {
        if old_topics.get(name) != Some(t) {
            out.topics.insert(
                name.to_string(),
                Some((t.leader.clone(), t.follower.clone())),
            );
        }
    }
    for name in old_topics.keys().filter(|n| !new_topics.contains_key(*n)) {
        out.topics.insert(name.to_string(), None);
    }
    (out != ThrottleChange::default()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(topic: &str, partition: i32, from: &[i32], to: &[i32]) -> PlannedMove {
        PlannedMove {
            topic: topic.into(),
            partition,
            from: from.to_vec(),
            to: to.to_vec(),
            bytes: 10,
            batch: 0,
        }
    }

    #[test]
    fn sources_lead_and_new_replicas_follow() {
        let moves = [
            mv("a", 0, &[0, 1], &[1, 2]),
            mv("a", 3, &[1, 2], &[3, 2]),
            mv("b", 1, &[0], &[4]),
        ];
        let w = wanted(1000, &moves);
        assert_eq!(w.bytes_per_second, 1000);
        assert_eq!(w.brokers, vec![0, 1, 2, 3, 4]);
        assert_eq!(
            w.topics,
            vec![
                ThrottledTopic {
                    topic: "a".into(),
                    leader: "0:0,0:1,3:1,3:2".into(),
                    follower: "0:2,3:3".into()
                },
                ThrottledTopic {
                    topic: "b".into(),
                    leader: "1:0".into(),
                    follower: "1:4".into()
                },
            ]
        );
    }

    #[test]
    fn nothing_set_nothing_wanted_is_no_change() {
        assert_eq!(change(None, None), None);
        let w = wanted(5, &[mv("a", 0, &[0], &[1])]);
        assert_eq!(change(Some(&w), Some(&w)), None);
    }

    #[test]
    fn first_batch_sets_everything() {
        let w = wanted(5, &[mv("a", 0, &[0], &[1])]);
        let c = change(None, Some(&w)).unwrap();
        assert_eq!(c.brokers, BTreeMap::from([(0, Some(5)), (1, Some(5))]));
        assert_eq!(
            c.topics,
            BTreeMap::from([(
                "a".to_string(),
                Some(("0:0".to_string(), "0:1".to_string()))
            )])
        );
    }

    #[test]
    fn next_batch_sets_the_new_and_removes_what_no_longer_moves() {
        let one = wanted(5, &[mv("a", 0, &[0], &[1]), mv("b", 0, &[0], &[1])]);
        let two = wanted(5, &[mv("a", 1, &[2], &[1])]);
        let c = change(Some(&one), Some(&two)).unwrap();
        // broker 1 keeps its rate untouched; 0 loses it; 2 gets it
        assert_eq!(c.brokers, BTreeMap::from([(0, None), (2, Some(5))]));
        assert_eq!(
            c.topics,
            BTreeMap::from([
                (
                    "a".to_string(),
                    Some(("1:2".to_string(), "1:1".to_string()))
                ),
                ("b".to_string(), None),
            ])
        );
    }

    #[test]
    fn a_new_rate_is_set_on_every_broker() {
        let old = wanted(5, &[mv("a", 0, &[0], &[1])]);
        let new = wanted(9, &[mv("a", 0, &[0], &[1])]);
        let c = change(Some(&old), Some(&new)).unwrap();
        assert_eq!(c.brokers, BTreeMap::from([(0, Some(9)), (1, Some(9))]));
        assert!(c.topics.is_empty());
    }

    #[test]
    fn the_end_removes_exactly_what_was_set() {
        let old = wanted(5, &[mv("a", 0, &[0], &[1]), mv("b", 2, &[3], &[1])]);
        let c = change(Some(&old), None).unwrap();
        assert_eq!(c.brokers, BTreeMap::from([(0, None), (1, None), (3, None)]));
        assert_eq!(
            c.topics,
            BTreeMap::from([("a".to_string(), None), ("b".to_string(), None)])
        );
    }
}
