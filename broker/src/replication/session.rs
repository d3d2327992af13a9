//! The follower's side of a fetch session (KIP-227), as Kafka's
//! `FetchSessionHandler`: which partitions a follower's next Fetch names,
//! and with which session id and epoch. Pure: the fetcher passes what it
//! wants fetched and what the leader answered.
//!
//! The first fetch on a connection is full (session id 0, epoch 0: every
//! partition, and a request for a session). Once the leader has created
//! one, each fetch names only the partitions whose fetch state changed
//! since the last request the leader accepted (new ones, and those whose
//! fetch offset, log start, leader epoch, last fetched epoch or byte limit
//! moved: any partition that received records), and forgets those no
//! longer wanted (a refused partition backing off, a throttled one sitting
//! out, one this broker stopped following). The leader fetches the others
//! from the offsets it holds, so a follower of 1,000 idle partitions sends
//! a few bytes per fetch instead of 1,000 entries, and the leader answers
//! only the partitions with something to say.
//!
//! A refused session (`FETCH_SESSION_ID_NOT_FOUND`: evicted;
//! `INVALID_FETCH_SESSION_EPOCH`), any other top-level error, an answer on
//! another session, and a lost connection all start over with a full
//! fetch; that full fetch names the abandoned session so that the leader
//! closes it at once (session id X, epoch 0: "close X, open a new one")
//! instead of keeping its slot until eviction. A fetcher retired because
//! this broker follows nothing more on that leader closes its session with
//! a fetch of no partitions and the final epoch (-1). A leader that admits
//! no session (answer id 0) gets full fetches, each asking again.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;
use std::hash::Hash;

use crate::fetch_session::{next_epoch, INITIAL_EPOCH, NO_SESSION};

/// What a fetch asks of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub fetch_offset: i64,
    pub log_start: i64,
    pub leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub max_bytes: i32,
}

/// The session fields of the next request and what it names (`K`: how
/// the fetcher tells its partitions apart).
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<K> {
    pub session_id: i32,
    pub epoch: i32,
    /// Indexes into the wanted partitions: those the request names.
    pub named: Vec<usize>,
    /// Partitions the session holds that are no longer wanted.
    pub forgotten: Vec<K>,
}

/// A follower's fetch session with one leader.
#[derive(Debug)]
pub struct FollowerSession<K> {
    /// The open session, or `NO_SESSION`.
    id: i32,
    /// The epoch the next incremental request carries.
    epoch: i32,
    /// What the session holds for each partition, as last accepted.
    held: HashMap<K, Asked, RandomState>,
    /// A session given up, for the next full fetch to close.
    abandoned: Option<i32>,
    /// What the request in flight named and forgot: applied to `held`
    /// once the leader accepts it (a full request names everything).
    in_flight: Option<InFlight<K>>,
}

/// A request's named partitions (with what it asked) and forgotten ones.
type InFlight<K> = (Vec<(K, Asked)>, Vec<K>);

impl<K> Default for FollowerSession<K> {
    fn default() -> Self {
        Self {
            id: NO_SESSION,
            epoch: INITIAL_EPOCH,
            held: HashMap::default(),
            abandoned: None,
            in_flight: None,
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> FollowerSession<K> {
    /// The open session's id, or `NO_SESSION`.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Plans the next request for `wanted` (the partitions to fetch now,
    /// each with what the fetch asks of it).
    pub fn plan(&mut self, wanted: &[(K, Asked)]) -> Plan<K> {
        if self.id == NO_SESSION {
            self.in_flight = Some((wanted.to_vec(), Vec::new()));
            return Plan {
                session_id: self.abandoned.unwrap_or(NO_SESSION),
                epoch: INITIAL_EPOCH,
                named: (0..wanted.len()).collect(),
                forgotten: Vec::new(),
            };
        }
        let named: Vec<usize> = wanted
            .iter()
            .enumerate()
            .filter(|(_, (key, asked))| self.held.get(key) != Some(asked))
            .map(|(i, _)| i)
            .collect();
        // Each wanted partition is held or named, so the session holds
        // more than the wanted ones exactly when some are to be forgotten.
        let held_wanted = wanted.len() - named.len();
        let mut forgotten: Vec<K> = Vec::new();
        if self.held.len() > held_wanted {
            let still: HashSet<&K, RandomState> = wanted.iter().map(|(k, _)| k).collect();
            forgotten = self
                .held
                .keys()
                .filter(|k| !still.contains(k))
                .cloned()
                .collect();
            forgotten.sort();
        }
        self.in_flight = Some((
            named.iter().map(|&i| wanted[i].clone()).collect(),
            forgotten.clone(),
        ));
        Plan {
            session_id: self.id,
            epoch: self.epoch,
            named,
            forgotten,
        }
    }

    /// Takes the leader's answer to the planned request: its top-level
    /// error code and session id.
    pub fn answered(&mut self, error_code: i16, session_id: i32) {
        let (named, forgotten) = self.in_flight.take().unwrap_or_default();
        if error_code != 0 {
            self.abandon();
            return;
        }
        if self.id == NO_SESSION {
            // a full fetch: it closed any abandoned session
            self.abandoned = None;
            if session_id != NO_SESSION {
                self.id = session_id;
                self.epoch = next_epoch(INITIAL_EPOCH);
                self.held = named.into_iter().collect();
            }
        } else if session_id == self.id {
            self.epoch = next_epoch(self.epoch);
            for key in &forgotten {
                self.held.remove(key);
            }
            self.held.extend(named);
        } else {
            // The leader answered without the session (it closed it): the
            // answer stands, the next fetch is full.
            self.id = NO_SESSION;
            self.held.clear();
        }
    }

    /// The session was closed on the leader (or needs no closing): the next
    /// fetch is full and names no session to close.
    pub fn closed(&mut self) {
        self.abandon();
        self.abandoned = None;
    }

    /// Gives the session up (a refused request, a lost connection): the
    /// next fetch is full and closes it on the leader.
    pub fn abandon(&mut self) {
        self.in_flight = None;
        if self.id != NO_SESSION {
            self.abandoned = Some(self.id);
        }
        self.id = NO_SESSION;
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch_session::FINAL_EPOCH;

    const NOT_FOUND: i16 = 70;
    const INVALID_EPOCH: i16 = 71;

    fn asked(offset: i64) -> Asked {
        Asked {
            fetch_offset: offset,
            log_start: 0,
            leader_epoch: 3,
            last_fetched_epoch: 3,
            max_bytes: 1 << 20,
        }
    }

    type Key = (String, i32);

    fn wanted(offsets: &[(i32, i64)]) -> Vec<(Key, Asked)> {
        offsets
            .iter()
            .map(|&(p, o)| (("t".to_string(), p), asked(o)))
            .collect()
    }

    /// A session opened on a full fetch of partitions 0-2 at offset 10.
    fn opened() -> FollowerSession<Key> {
        let mut s = FollowerSession::<Key>::default();
        let plan = s.plan(&wanted(&[(0, 10), (1, 10), (2, 10)]));
        assert_eq!((plan.session_id, plan.epoch), (NO_SESSION, INITIAL_EPOCH));
        s.answered(0, 77);
        s
    }

    #[test]
    fn the_first_fetch_is_full_and_the_next_names_only_what_moved() {
        let mut s = opened();
        assert_eq!(s.id(), 77);
        // partition 1 received records (its offset moved), the others did not
        let plan = s.plan(&wanted(&[(0, 10), (1, 25), (2, 10)]));
        assert_eq!(
            plan,
            Plan {
                session_id: 77,
                epoch: 1,
                named: vec![1],
                forgotten: vec![]
            }
        );
        s.answered(0, 77);
        // nothing moved: the request names nothing, on the next epoch
        let plan = s.plan(&wanted(&[(0, 10), (1, 25), (2, 10)]));
        assert_eq!((plan.epoch, plan.named.len()), (2, 0));
    }

    #[test]
    fn a_new_epoch_or_log_start_names_a_partition_and_a_dropped_one_is_forgotten() {
        let mut s = opened();
        let mut w = wanted(&[(0, 10), (2, 10), (3, 0)]);
        w[1].1.leader_epoch = 4;
        let plan = s.plan(&w);
        assert_eq!(plan.named, vec![1, 2], "new epoch, new partition");
        assert_eq!(plan.forgotten, vec![("t".to_string(), 1)]);
        s.answered(0, 77);
        // accepted: the session now holds 0, 2 (epoch 4) and 3
        let plan = s.plan(&w);
        assert!(plan.named.is_empty() && plan.forgotten.is_empty());
        w[0].1.log_start = 5;
        assert_eq!(s.plan(&w).named, vec![0]);
    }

    #[test]
    fn a_refused_session_starts_over_with_a_full_fetch_that_closes_it() {
        for code in [NOT_FOUND, INVALID_EPOCH, 1] {
            let mut s = opened();
            s.plan(&wanted(&[(0, 11), (1, 10), (2, 10)]));
            s.answered(code, 0);
            assert_eq!(s.id(), NO_SESSION);
            let plan = s.plan(&wanted(&[(0, 11), (1, 10), (2, 10)]));
            assert_eq!(
                (plan.session_id, plan.epoch, plan.named.len()),
                (77, INITIAL_EPOCH, 3),
                "error {code}: full, closing session 77"
            );
            s.answered(0, 78);
            assert_eq!(s.id(), 78);
            // the abandoned session was closed by that fetch: not named again
            s.abandon();
            assert_eq!(s.plan(&wanted(&[(0, 11)])).session_id, 78);
        }
    }

    #[test]
    fn a_lost_connection_abandons_the_session_and_an_unanswered_plan_changes_nothing() {
        let mut s = opened();
        // a request planned but never answered (the connection broke)
        s.plan(&wanted(&[(0, 50), (1, 10), (2, 10)]));
        s.abandon();
        let plan = s.plan(&wanted(&[(0, 50), (1, 10), (2, 10)]));
        assert_eq!((plan.session_id, plan.epoch), (77, INITIAL_EPOCH));
        assert_eq!(plan.named, vec![0, 1, 2]);
    }

    #[test]
    fn a_closed_session_is_not_named_again() {
        let mut s = opened();
        s.closed();
        let plan = s.plan(&wanted(&[(0, 10)]));
        assert_eq!((plan.session_id, plan.epoch), (NO_SESSION, INITIAL_EPOCH));
    }

    #[test]
    fn a_leader_that_admits_no_session_gets_full_fetches() {
        let mut s = FollowerSession::<Key>::default();
        for _ in 0..3 {
            let plan = s.plan(&wanted(&[(0, 10), (1, 10)]));
            assert_eq!((plan.session_id, plan.epoch), (NO_SESSION, INITIAL_EPOCH));
            assert_eq!(plan.named, vec![0, 1]);
            s.answered(0, NO_SESSION);
        }
        // an answer without the session ends it: the next fetch is full
        let mut s = opened();
        s.plan(&wanted(&[(0, 12), (1, 10), (2, 10)]));
        s.answered(0, NO_SESSION);
        let plan = s.plan(&wanted(&[(0, 12), (1, 10), (2, 10)]));
        assert_eq!((plan.session_id, plan.epoch), (NO_SESSION, INITIAL_EPOCH));
        assert_ne!(plan.epoch, FINAL_EPOCH, "it asks for a new session");
    }
}
