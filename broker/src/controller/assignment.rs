//! Replica placement for new partitions: which brokers hold each partition's
//! replicas, preferred leader first. A pure function of the live brokers
//! (with their racks) and two seeds; the controller picks the seeds and
//! persists the result, nothing here touches state.
//!
//! The placement follows the scheme Kafka uses, so operators see the spread
//! they expect:
//! - the first replica of partition `p` goes to broker `(start + p) mod n`,
//!   so preferred leaders spread evenly;
//! - follower `j` sits `1 + (shift + j) mod (n - 1)` places after the first,
//!   and `shift` grows by one every `n` partitions, so followers of
//!   consecutive partitions do not pile onto the same brokers;
//! - with racks (`broker.rack`), brokers are ordered alternating over racks
//!   (first of rack a, first of rack b, …, second of rack a, …) and a
//!   follower skips brokers whose rack already holds a replica of the
//!   partition (until every rack does) and brokers that already hold one, so
//!   each partition spans `min(replicas, racks)` racks.
//!
//! Brokers must either all have a rack or none (Kafka refuses the mix too).
//!
//! Explicit assignments (`kafka-topics --replica-assignment`, Admin
//! `NewTopic(name, replicasAssignments)`, CreatePartitions with
//! assignments) are not placed but checked, with Kafka's rules and
//! messages (`INVALID_REPLICA_ASSIGNMENT`): at least one replica, every one
//! a registered broker (fenced ones included), none twice, the same count
//! for every partition (and the topic's factor when partitions are added),
//! partitions numbered `0..n` without gaps or repeats, and at least one
//! replica in service: the ISR is the replicas in service, the leader the
//! first of them.

use std::collections::{BTreeMap, BTreeSet};

/// A live broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSlot {
    pub id: i32,
    pub rack: Option<String>,
}

/// Why replicas cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("replication factor must be at least 1, got {0}")]
    FactorTooSmall(i16),
    #[error("replication factor {factor} is larger than the {brokers} available brokers")]
    FactorTooLarge { factor: i16, brokers: usize },
    #[error("brokers {with:?} have a rack and {without:?} do not: set broker.rack on all or none")]
    MixedRacks { with: Vec<i32>, without: Vec<i32> },
}

/// Where placement starts: `start` picks the first partition's leader,
/// `shift` the first followers' offset. Kafka picks both at random; a
/// controller passes random values, tests fixed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seeds {
    pub start: usize,
    pub shift: usize,
}

/// Replicas (preferred leader first) of partitions `first_partition ..
/// first_partition + count`. `first_partition` lets CreatePartitions extend
/// a topic where creation left off.
pub fn assign_replicas(
    brokers: &[BrokerSlot],
    first_partition: usize,
    count: usize,
    factor: i16,
    seeds: Seeds,
) -> Result<Vec<Vec<i32>>, PlacementError> {
    if factor < 1 {
        return Err(PlacementError::FactorTooSmall(factor));
    }
    let rf = factor as usize;
    if rf > brokers.len() {
        return Err(PlacementError::FactorTooLarge {
            factor,
            brokers: brokers.len(),
        });
    }
    let (with, without): (Vec<&BrokerSlot>, Vec<&BrokerSlot>) =
        brokers.iter().partition(|b| b.rack.is_some());
    if !with.is_empty() && !without.is_empty() {
        return Err(PlacementError::MixedRacks {
            with: with.iter().map(|b| b.id).collect(),
            without: without.iter().map(|b| b.id).collect(),
        });
    }
    let ordered = if with.is_empty() {
        let mut ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    } else {
        rack_alternating(brokers)
    };
    let racks: BTreeMap<i32, &str> = brokers
        .iter()
        .filter_map(|b| Some((b.id, b.rack.as_deref()?)))
        .collect();
    Ok((first_partition..first_partition + count)
        .map(|p| place_one(&ordered, &racks, p, rf, seeds))
        .collect())
}

/// Checks one partition's explicit `replicas` (see the module doc);
/// `expected`: the replica count the other partitions have.
fn check_manual(
    partition: i64,
    replicas: &[i32],
    expected: Option<usize>,
    registered: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
) -> Result<(), String> {
    if replicas.is_empty() {
        return Err("The manual partition assignment includes an empty replica list.".into());
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    let mut previous = None;
    for id in sorted {
        if !registered.contains(&id) {
            return Err(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered."
            ));
        }
        if previous == Some(id) {
            return Err(format!(
                "The manual partition assignment includes the broker {id} more than once."
            ));
        }
        previous = Some(id);
    }
    if let Some(expected) = expected.filter(|e| *e != replicas.len()) {
        return Err(format!(
            "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {expected} replica(s).",
            replicas.len()
        ));
    }
    if !replicas.iter().any(|r| live.contains(r)) {
        return Err(format!(
            "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
        ));
    }
    Ok(())
}

/// CreateTopics' explicit `(partition, replicas)` list, checked: each
/// partition's replicas in partition order.
pub fn manual_for_create(
    assignments: &[(i32, Vec<i32>)],
    registered: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
) -> Result<Vec<Vec<i32>>, String> {
    let mut by_partition: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let mut expected = None;
    for (partition, replicas) in assignments {
        if by_partition.contains_key(partition) {
            return Err(format!(
                "Found multiple manual partition assignments for partition {partition}"
            ));
        }
        check_manual(i64::from(*partition), replicas, expected, registered, live)?;
        expected = Some(replicas.len());
        by_partition.insert(*partition, replicas.clone());
    }
    if by_partition
        .keys()
        .enumerate()
        .any(|(i, p)| i64::try_from(i).ok() != Some(i64::from(*p)))
    {
        return Err("partitions should be a consecutive 0-based integer sequence".into());
    }
    Ok(by_partition.into_values().collect())
}

/// CreatePartitions' explicit replicas of the `added` partitions from
/// `first_partition` on, checked against the topic's `factor`.
pub fn manual_for_extend(
    assignments: &[Vec<i32>],
    first_partition: usize,
    added: usize,
    factor: usize,
    registered: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
) -> Result<Vec<Vec<i32>>, String> {
    if assignments.len() != added {
        return Err(format!(
            "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        ));
    }
    for (i, replicas) in assignments.iter().enumerate() {
        let partition = i64::try_from(first_partition + i).unwrap_or(i64::MAX);
        check_manual(partition, replicas, Some(factor), registered, live)?;
    }
    Ok(assignments.to_vec())
}

/// Broker ids ordered so consecutive ones are on different racks.
fn rack_alternating(brokers: &[BrokerSlot]) -> Vec<i32> {
    let mut by_rack: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for b in brokers {
        if let Some(rack) = b.rack.as_deref() {
            by_rack.entry(rack).or_default().push(b.id);
        }
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
        ids.dedup();
    }
    let deepest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|i| by_rack.values().filter_map(move |ids| ids.get(i).copied()))
        .collect()
}

fn place_one(
    ordered: &[i32],
    racks: &BTreeMap<i32, &str>,
    partition: usize,
    rf: usize,
    seeds: Seeds,
) -> Vec<i32> {
    let n = ordered.len();
    let first = (seeds.start + partition) % n;
    let shift = seeds.shift + partition / n;
    // The other n - 1 brokers, in the order this partition's shift gives.
    let mut candidates: Vec<i32> = (0..n.saturating_sub(1))
        .map(|j| ordered[(first + 1 + (shift + j) % (n - 1)) % n])
        .collect();
    let mut replicas = vec![ordered[first]];
    while replicas.len() < rf && !candidates.is_empty() {
        // Without racks: the next candidate. With racks: the first
        // candidate whose rack holds the fewest replicas of this partition
        // so far, so racks fill evenly and all are used before any repeats.
        let on_rack = |id: &i32| {
            let rack = racks.get(id);
            replicas.iter().filter(|r| racks.get(*r) == rack).count()
        };
        let pick = (0..candidates.len())
            .min_by_key(|&i| (on_rack(&candidates[i]), i))
            .unwrap_or(0);
        replicas.push(candidates.remove(pick));
    }
    replicas
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn brokers(n: i32) -> Vec<BrokerSlot> {
        (0..n).map(|id| BrokerSlot { id, rack: None }).collect()
    }

    fn racked(spec: &[(i32, &str)]) -> Vec<BrokerSlot> {
        spec.iter()
            .map(|(id, r)| BrokerSlot {
                id: *id,
                rack: Some(r.to_string()),
            })
            .collect()
    }

    fn counts(of: impl Iterator<Item = i32>) -> BTreeMap<i32, usize> {
        let mut m = BTreeMap::new();
        for id in of {
            *m.entry(id).or_insert(0) += 1;
        }
        m
    }

    fn spread(m: &BTreeMap<i32, usize>) -> usize {
        m.values().max().unwrap_or(&0) - m.values().min().unwrap_or(&0)
    }

    #[test]
    fn a_single_broker_gets_every_partition() {
        let a = assign_replicas(&brokers(1), 0, 4, 1, Seeds::default()).unwrap();
        assert_eq!(a, vec![vec![0]; 4]);
    }

    #[test]
    fn leaders_and_replicas_spread_evenly_without_racks() {
        for n in 1..=7 {
            for rf in 1..=n.min(4) {
                for seeds in [Seeds::default(), Seeds { start: 3, shift: 5 }] {
                    let parts = 12 * n as usize;
                    let a = assign_replicas(&brokers(n), 0, parts, rf as i16, seeds).unwrap();
                    for r in &a {
                        assert_eq!(r.len(), rf as usize);
                        assert_eq!(
                            r.iter().collect::<BTreeSet<_>>().len(),
                            r.len(),
                            "distinct replicas: {r:?}"
                        );
                    }
                    let leaders = counts(a.iter().map(|r| r[0]));
                    assert_eq!(leaders.len(), n as usize);
                    assert_eq!(spread(&leaders), 0, "n={n} rf={rf} {leaders:?}");
                    let all = counts(a.iter().flatten().copied());
                    assert!(spread(&all) <= 1, "n={n} rf={rf} {all:?}");
                }
            }
        }
    }

    #[test]
    fn every_partition_spans_as_many_racks_as_it_can() {
        let b = racked(&[(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]);
        for rf in 1..=6i16 {
            let a = assign_replicas(&b, 0, 30, rf, Seeds { start: 1, shift: 2 }).unwrap();
            for r in &a {
                assert_eq!(r.len(), rf as usize, "{r:?}");
                assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), r.len());
                let racks: BTreeSet<_> = r.iter().map(|id| b[*id as usize].rack.clone()).collect();
                assert_eq!(racks.len(), (rf as usize).min(3), "rf={rf} {r:?}");
            }
            let leaders = counts(a.iter().map(|r| r[0]));
            assert!(spread(&leaders) <= 1, "{leaders:?}");
        }
    }

    #[test]
    fn uneven_racks_still_place_every_replica() {
        let b = racked(&[(0, "a"), (1, "a"), (2, "a"), (3, "b")]);
        let a = assign_replicas(&b, 0, 8, 3, Seeds::default()).unwrap();
        for r in &a {
            assert_eq!(r.len(), 3);
            let racks: BTreeSet<_> = r.iter().map(|id| b[*id as usize].rack.clone()).collect();
            assert_eq!(racks.len(), 2, "both racks in {r:?}");
        }
    }

    #[test]
    fn extending_a_topic_continues_the_pattern() {
        let whole = assign_replicas(&brokers(3), 0, 9, 2, Seeds::default()).unwrap();
        let tail = assign_replicas(&brokers(3), 6, 3, 2, Seeds::default()).unwrap();
        assert_eq!(&whole[6..], &tail[..]);
    }

    fn ids(v: &[i32]) -> BTreeSet<i32> {
        v.iter().copied().collect()
    }

    #[test]
    fn explicit_assignments_are_kept_in_partition_order() {
        let all = ids(&[0, 1, 2]);
        let a = manual_for_create(&[(1, vec![2, 0]), (0, vec![1, 2])], &all, &all).unwrap();
        assert_eq!(a, vec![vec![1, 2], vec![2, 0]]);
        // A fenced (registered, not live) replica is allowed while another
        // replica is in service.
        let a = manual_for_create(&[(0, vec![2, 1])], &all, &ids(&[1])).unwrap();
        assert_eq!(a, vec![vec![2, 1]]);
    }

    #[test]
    fn explicit_assignments_are_refused_with_kafkas_messages() {
        let all = ids(&[0, 1, 2]);
        let refused = |a: &[(i32, Vec<i32>)], live: &BTreeSet<i32>| {
            manual_for_create(a, &all, live).unwrap_err()
        };
        assert_eq!(
            refused(&[(0, vec![0, 7])], &all),
            "The manual partition assignment includes broker 7, but no such broker is registered."
        );
        assert_eq!(
            refused(&[(0, vec![1, 1])], &all),
            "The manual partition assignment includes the broker 1 more than once."
        );
        assert_eq!(
            refused(&[(0, vec![0, 1]), (1, vec![2])], &all),
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."
        );
        assert_eq!(
            refused(&[(0, vec![0]), (2, vec![1])], &all),
            "partitions should be a consecutive 0-based integer sequence"
        );
        assert_eq!(
            refused(&[(1, vec![0])], &all),
            "partitions should be a consecutive 0-based integer sequence"
        );
        assert_eq!(
            refused(&[(0, vec![0]), (0, vec![1])], &all),
            "Found multiple manual partition assignments for partition 0"
        );
        assert_eq!(
            refused(&[(0, vec![])], &all),
            "The manual partition assignment includes an empty replica list."
        );
        assert_eq!(
            refused(&[(0, vec![0]), (1, vec![2])], &ids(&[0])),
            "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
        );
    }

    #[test]
    fn explicit_assignments_of_added_partitions_match_the_topic() {
        let all = ids(&[0, 1, 2]);
        assert_eq!(
            manual_for_extend(&[vec![2, 0], vec![0, 1]], 3, 2, 2, &all, &all).unwrap(),
            vec![vec![2, 0], vec![0, 1]]
        );
        assert_eq!(
            manual_for_extend(&[vec![2, 0]], 3, 2, 2, &all, &all).unwrap_err(),
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
        );
        assert!(manual_for_extend(&[vec![2]], 3, 1, 2, &all, &all)
            .unwrap_err()
            .contains("which have 2 replica(s)"));
        assert!(manual_for_extend(&[vec![1]], 3, 1, 1, &all, &ids(&[0]))
            .unwrap_err()
            .contains("partition 3 are fenced"));
    }

    #[test]
    fn impossible_requests_are_refused() {
        assert_eq!(
            assign_replicas(&brokers(2), 0, 1, 3, Seeds::default()),
            Err(PlacementError::FactorTooLarge {
                factor: 3,
                brokers: 2
            })
        );
        assert_eq!(
            assign_replicas(&brokers(2), 0, 1, 0, Seeds::default()),
            Err(PlacementError::FactorTooSmall(0))
        );
        let mut mixed = racked(&[(0, "a")]);
        mixed.push(BrokerSlot { id: 1, rack: None });
        assert!(matches!(
            assign_replicas(&mixed, 0, 1, 1, Seeds::default()),
            Err(PlacementError::MixedRacks { .. })
        ));
    }
}
