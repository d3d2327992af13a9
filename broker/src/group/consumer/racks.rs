//! Where a consumer group's members and its subscribed partitions are, for
//! the rack-aware assignors of [`super::rack_aware`]: each member's rack
//! (ConsumerGroupHeartbeat's `RackId`, a classic member's subscription
//! `rack_id`) and each partition's replica racks (the brokers'
//! `broker.rack`, as the KIP-1101 hash sees them).
//!
//! A member *matches* a partition when its rack is one of the racks of the
//! partition's replicas: it could fetch from a replica in its own rack
//! (KIP-392) instead of across racks. A member without a rack matches
//! nothing, and a partition without racks is matched by nobody: neither
//! has a preference, so they take what is left.
//!
//! Pure data and predicates; knows nothing of the assignors' algorithms.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// The racks of a group's members and of its subscribed partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Racks {
    /// Each member's rack, by member id (members without one are absent).
    pub members: BTreeMap<String, String>,
    /// Per topic id, per partition index, its replicas' racks (a topic
    /// absent, or a partition past the end: no racks known).
    pub partitions: BTreeMap<Uuid, Vec<BTreeSet<String>>>,
}

impl Racks {
    /// Whether `member`'s rack holds a replica of partition `p` of `topic`.
    pub fn matches(&self, member: &str, topic: Uuid, p: i32) -> bool {
        let Some(rack) = self.members.get(member) else {
            return false;
        };
        self.of(topic, p).is_some_and(|racks| racks.contains(rack))
    }

    /// The racks of partition `p` of `topic`'s replicas, if known.
    pub fn of(&self, topic: Uuid, p: i32) -> Option<&BTreeSet<String>> {
        let i = usize::try_from(p).ok()?;
        self.partitions.get(&topic)?.get(i)
    }
}

/// Whether a member's matches (or how well it matches) over the
/// partitions it may be given are mixed: not all the same. A member that
/// matches all or none of its candidates is indifferent to which it gets —
/// this is how "no member has a rack", "no partition has racks" and "racks
/// don't overlap" all leave the rack-blind assignors' result as it is.
pub fn mixed<T: PartialEq>(matches: impl IntoIterator<Item = T>) -> bool {
    let mut it = matches.into_iter();
    let Some(first) = it.next() else {
        return false;
    };
    it.any(|m| m != first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn racks() -> Racks {
        let t = Uuid::from_u128(1);
        Racks {
            members: [("a".to_string(), "r1".to_string())].into(),
            partitions: [(
                t,
                vec![["r1".to_string()].into(), ["r2".to_string()].into()],
            )]
            .into(),
        }
    }

    #[test]
    fn a_member_matches_partitions_with_a_replica_in_its_rack() {
        let r = racks();
        let t = Uuid::from_u128(1);
        assert!(r.matches("a", t, 0));
        assert!(!r.matches("a", t, 1));
        // past the end, unknown topic, negative index, member without rack
        assert!(!r.matches("a", t, 2));
        assert!(!r.matches("a", Uuid::from_u128(2), 0));
        assert!(!r.matches("a", t, -1));
        assert!(!r.matches("b", t, 0));
    }

    #[test]
    fn only_a_mixed_choice_is_a_preference() {
        let r = racks();
        let t = Uuid::from_u128(1);
        let over = |m: &str, ps: &[i32]| mixed(ps.iter().map(|p| r.matches(m, t, *p)));
        assert!(over("a", &[0, 1]));
        assert!(!over("a", &[0]));
        assert!(!over("a", &[1, 2]));
        assert!(!over("a", &[]));
        assert!(!over("b", &[0, 1]));
    }
}
