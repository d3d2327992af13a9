//! Fetch sessions (KIP-227): the broker's cache of incremental fetch
//! sessions, and the rule that picks the partitions an incremental
//! response carries. Pure (the caller passes the time and the random
//! session ids); `handlers::fetch` drives it, and `Broker` holds the one
//! cache shared by all connections behind a mutex.
//!
//! A session is keyed by a random positive id (the handler draws them)
//! and holds the partitions of its fetcher in a fixed order: for each,
//! what the fetcher last asked
//! (fetch offset, log start offset, max bytes, leader epochs) and what the
//! broker last sent (high watermark, last stable offset, log start offset).
//! An incremental request only names the partitions that changed; the
//! others are fetched from the offsets the session holds. An incremental
//! response only carries the partitions with records, an error, a
//! diverging epoch, a preferred read replica, or a high watermark, last
//! stable offset or log start offset other than the one last sent. A
//! partition that was sent records moves to the end of the order, so the
//! response byte budget goes round the session's partitions fairly.
//!
//! Epochs: a new session starts at 1; each accepted incremental request
//! must carry the current epoch and moves it on ([`next_epoch`]: after
//! `i32::MAX` comes 1, as Kafka's `nextEpoch`).
//!
//! Admission and eviction follow KIP-227. When the cache holds fewer than
//! `max.incremental.fetch.session.cache.slots` sessions a new one is always
//! admitted. Otherwise it may take the slot of one existing session:
//! 1. the least recently used session, if it has been unused for longer
//!    than `min.incremental.fetch.session.eviction.ms` (120 000 ms, a
//!    constant in Kafka; a Moldau broker config here so tests can shorten
//!    it); else
//! 2. a session that the new one outranks: a consumer's session when the
//!    new one is a follower's (replica id ≥ 0, "privileged"), or any
//!    session created longer than `min.incremental.fetch.session.eviction.ms`
//!    ago that has fewer partitions than the new one (a follower's only by
//!    another follower's). Among those, the least valuable goes: a
//!    consumer's before a follower's, then the fewest partitions, then the
//!    least recently used (Kafka takes the lowest session id there). An
//!    equal size never evicts, as in Kafka, whose tie-break by session id
//!    always favours the existing session (the new one has none yet).
//!
//! If no session can go, the new one is refused and the full fetch is
//! answered with session id 0 (the client keeps sending full fetches).

use std::collections::{HashMap, HashSet};

/// The session id of a fetch without a session.
pub const NO_SESSION: i32 = 0;
/// The epoch of a full fetch that asks for a new session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full fetch that wants no session (and closes the named one).
pub const FINAL_EPOCH: i32 = -1;
/// Kafka's `min.incremental.fetch.session.eviction.ms`.
pub const DEFAULT_EVICTION_MS: u64 = 120_000;
/// Kafka's default `max.incremental.fetch.session.cache.slots`.
pub const DEFAULT_CACHE_SLOTS: usize = 1000;

/// The epoch after `epoch`: wraps from `i32::MAX` to 1; a negative epoch
/// stays final.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// A partition of a session: topic name and index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    pub topic: String,
    pub partition: i32,
}

/// What a fetch request asks of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRequest {
    pub key: PartitionKey,
    pub fetch_offset: i64,
    pub log_start_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
}

/// What a response said (or says) of one partition: the fields whose
/// change makes an incremental response carry the partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionAnswer {
    pub has_records: bool,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub preferred_read_replica: i32,
    pub diverging: bool,
}

/// A partition of a session: the last request and the last answer sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedPartition {
    pub request: PartitionRequest,
    /// Last sent (-1: never, or after an error, so it is sent again).
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

impl CachedPartition {
    fn new(request: PartitionRequest) -> Self {
        Self {
            request,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
        }
    }

    /// Whether an incremental response must carry this partition with
    /// `answer`; remembers what is sent.
    fn must_send(&mut self, answer: &PartitionAnswer) -> bool {
        let mut send = answer.has_records
            || answer.error_code != 0
            || answer.diverging
            || answer.preferred_read_replica >= 0;
        if self.high_watermark != answer.high_watermark {
            send = true;
            self.high_watermark = answer.high_watermark;
        }
        if self.last_stable_offset != answer.last_stable_offset {
            send = true;
            self.last_stable_offset = answer.last_stable_offset;
        }
        if self.log_start_offset != answer.log_start_offset {
            send = true;
            self.log_start_offset = answer.log_start_offset;
        }
        if answer.error_code != 0 {
            // sent again once the error is gone
            self.high_watermark = -1;
        }
        send
    }
}

/// One fetch session.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: i32,
    /// The epoch the next incremental request must carry.
    pub epoch: i32,
    /// A follower's (replica id ≥ 0).
    pub privileged: bool,
    pub created_ms: u64,
    pub last_used_ms: u64,
    partitions: Vec<CachedPartition>,
}

impl Session {
    /// The session's partitions, in fetch order.
    pub fn partitions(&self) -> &[CachedPartition] {
        &self.partitions
    }

    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Applies an incremental request: `changed` partitions are added (at
    /// the end) or have their request fields replaced; `forgotten` ones
    /// leave the session. Linear in the session's size plus the request's.
    pub fn update(&mut self, changed: Vec<PartitionRequest>, forgotten: &[PartitionKey]) {
        // client-named keys: foldhash's seeded quality hasher, several
        // times faster than SipHash on these short keys
        let positions: Vec<Option<usize>> = if changed.is_empty() {
            Vec::new()
        } else {
            let index: HashMap<(&str, i32), usize, foldhash::quality::RandomState> = self
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| ((p.request.key.topic.as_str(), p.request.key.partition), i))
                .collect();
            changed
                .iter()
                .map(|r| index.get(&(r.key.topic.as_str(), r.key.partition)).copied())
                .collect()
        };
        let mut added: HashMap<PartitionKey, usize, foldhash::quality::RandomState> =
            HashMap::default();
        for (request, position) in changed.into_iter().zip(positions) {
            match position.or_else(|| added.get(&request.key).copied()) {
                Some(i) => self.partitions[i].request = request,
                None => {
                    added.insert(request.key.clone(), self.partitions.len());
                    self.partitions.push(CachedPartition::new(request));
                }
            }
        }
        if !forgotten.is_empty() {
            let forgotten: HashSet<(&str, i32), foldhash::quality::RandomState> = forgotten
                .iter()
                .map(|k| (k.topic.as_str(), k.partition))
                .collect();
            self.partitions.retain(|p| {
                !forgotten.contains(&(p.request.key.topic.as_str(), p.request.key.partition))
            });
        }
    }

    /// Which of `answers` (one per partition, in the order of
    /// [`Session::partitions`]) an incremental response carries; remembers
    /// what is sent and moves the partitions sent records to the end.
    pub fn select(&mut self, answers: &[PartitionAnswer]) -> Vec<bool> {
        select(&mut self.partitions, answers)
    }
}

/// [`Session::select`] on a list of partitions (a copy of a session's that
/// was evicted while its fetch waited).
pub fn select(partitions: &mut Vec<CachedPartition>, answers: &[PartitionAnswer]) -> Vec<bool> {
    debug_assert_eq!(partitions.len(), answers.len());
    let chosen: Vec<bool> = partitions
        .iter_mut()
        .zip(answers)
        .map(|(p, a)| p.must_send(a))
        .collect();
    let (mut stay, mut moved) = (Vec::new(), Vec::new());
    for (p, a) in partitions.drain(..).zip(answers) {
        if a.has_records {
            moved.push(p);
        } else {
            stay.push(p);
        }
    }
    stay.extend(moved);
    *partitions = stay;
    chosen
}

/// Why an incremental fetch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionError {
    /// FETCH_SESSION_ID_NOT_FOUND
    NotFound,
    /// INVALID_FETCH_SESSION_EPOCH
    InvalidEpoch,
}

/// An accepted incremental fetch: the session's partitions to fetch (a
/// copy, in order) and the epoch the session moved to.
#[derive(Clone, Debug)]
pub struct Incremental {
    pub partitions: Vec<CachedPartition>,
    pub epoch: i32,
}

/// The sessions of a broker.
#[derive(Debug)]
pub struct SessionCache {
    max_slots: usize,
    eviction_ms: u64,
    sessions: HashMap<i32, Session>,
    evictions: u64,
}

impl SessionCache {
    pub fn new(max_slots: usize, eviction_ms: u64) -> Self {
        Self {
            max_slots,
            eviction_ms,
            sessions: HashMap::new(),
            evictions: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Sessions evicted so far to admit others.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    pub fn get(&self, id: i32) -> Option<&Session> {
        self.sessions.get(&id)
    }

    pub fn get_mut(&mut self, id: i32) -> Option<&mut Session> {
        self.sessions.get_mut(&id)
    }

    /// Closes session `id`; whether it existed.
    pub fn remove(&mut self, id: i32) -> bool {
        self.sessions.remove(&id).is_some()
    }

    /// Tries to create a session for a full fetch of `partitions` (each
    /// with the answer it was sent). `random` gives candidate ids. The new
    /// session's id, or `None` if the cache refused it (module doc).
    pub fn create(
        &mut self,
        privileged: bool,
        partitions: Vec<(PartitionRequest, PartitionAnswer)>,
        now_ms: u64,
        mut random: impl FnMut() -> i32,
    ) -> Option<i32> {
        if self.max_slots == 0 {
            return None;
        }
        if self.sessions.len() >= self.max_slots
            && !self.try_evict(privileged, partitions.len(), now_ms)
        {
            return None;
        }
        let id = loop {
            let id = random();
            if id != NO_SESSION && !self.sessions.contains_key(&id) {
                break id;
            }
        };
        let partitions = partitions
            .into_iter()
            .map(|(request, answer)| {
                let mut p = CachedPartition::new(request);
                p.must_send(&answer);
                p
            })
            .collect();
        self.sessions.insert(
            id,
            Session {
                id,
                epoch: next_epoch(INITIAL_EPOCH),
                privileged,
                created_ms: now_ms,
                last_used_ms: now_ms,
                partitions,
            },
        );
        Some(id)
    }

    /// Evicts one session to make room for a new one of `size` partitions,
    /// if the rules of the module doc allow; whether one was evicted.
    fn try_evict(&mut self, privileged: bool, size: usize, now_ms: u64) -> bool {
        let idle = |s: &Session| now_ms.saturating_sub(s.last_used_ms);
        let age = |s: &Session| now_ms.saturating_sub(s.created_ms);
        let lru = self
            .sessions
            .values()
            .min_by_key(|s| (s.last_used_ms, s.id))
            .filter(|s| idle(s) > self.eviction_ms)
            .map(|s| s.id);
        let victim = lru.or_else(|| {
            self.sessions
                .values()
                .filter(|s| {
                    let outranked = privileged && !s.privileged;
                    let smaller_and_old = age(s) > self.eviction_ms
                        && s.len() < size
                        && (privileged || !s.privileged);
                    outranked || smaller_and_old
                })
                .min_by_key(|s| (s.privileged, s.len(), s.last_used_ms, s.id))
                .map(|s| s.id)
        });
        match victim {
            Some(id) => {
                self.sessions.remove(&id);
                self.evictions += 1;
                true
            }
            None => false,
        }
    }

    /// Accepts an incremental fetch on session `id` at `epoch`: applies its
    /// `changed` and `forgotten` partitions, marks the session used and moves
    /// its epoch on. `Ok(None)`: the session became empty and was closed.
    pub fn incremental(
        &mut self,
        id: i32,
        epoch: i32,
        changed: Vec<PartitionRequest>,
        forgotten: &[PartitionKey],
        now_ms: u64,
    ) -> Result<Option<Incremental>, SessionError> {
        let session = self.sessions.get_mut(&id).ok_or(SessionError::NotFound)?;
        if session.epoch != epoch {
            return Err(SessionError::InvalidEpoch);
        }
        session.update(changed, forgotten);
        if session.is_empty() {
            self.sessions.remove(&id);
            return Ok(None);
        }
        session.last_used_ms = now_ms;
        session.epoch = next_epoch(session.epoch);
        Ok(Some(Incremental {
            partitions: session.partitions.clone(),
            epoch: session.epoch,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &str, p: i32) -> PartitionKey {
        PartitionKey {
            topic: t.to_string(),
            partition: p,
        }
    }

    fn req(t: &str, p: i32, offset: i64) -> PartitionRequest {
        PartitionRequest {
            key: key(t, p),
            fetch_offset: offset,
            log_start_offset: -1,
            max_bytes: 1 << 20,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
        }
    }

    fn answer(hw: i64, records: bool) -> PartitionAnswer {
        PartitionAnswer {
            has_records: records,
            error_code: 0,
            high_watermark: hw,
            last_stable_offset: hw,
            log_start_offset: 0,
            preferred_read_replica: -1,
            diverging: false,
        }
    }

    fn full(n: i32) -> Vec<(PartitionRequest, PartitionAnswer)> {
        (0..n).map(|p| (req("t", p, 0), answer(0, false))).collect()
    }

    fn ids() -> impl FnMut() -> i32 {
        let mut next = 0;
        move || {
            next += 1;
            next
        }
    }

    #[test]
    fn fetch_session_epochs_wrap_as_kafka() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(-1), -1);
    }

    #[test]
    fn fetch_session_admitted_while_slots_free() {
        let mut cache = SessionCache::new(2, 1000);
        let mut random = ids();
        let a = cache.create(false, full(1), 0, &mut random).unwrap();
        let b = cache.create(false, full(1), 0, &mut random).unwrap();
        assert_ne!(a, b);
        assert_eq!(cache.get(a).unwrap().epoch, 1);
        // full: an equal-sized, young consumer session is refused
        assert_eq!(cache.create(false, full(1), 10, &mut random), None);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.evictions(), 0);
        assert_eq!(
            SessionCache::new(0, 1000).create(false, full(1), 0, ids()),
            None
        );
    }

    #[test]
    fn fetch_session_ids_never_zero_nor_taken() {
        let mut cache = SessionCache::new(10, 1000);
        let mut seq = vec![0, 7, 0, 7, 9].into_iter();
        assert_eq!(
            cache.create(false, full(1), 0, || seq.next().unwrap()),
            Some(7)
        );
        assert_eq!(
            cache.create(false, full(1), 0, || seq.next().unwrap()),
            Some(9)
        );
    }

    #[test]
    fn fetch_session_stale_session_evicted_first() {
        let mut cache = SessionCache::new(2, 1000);
        let mut random = ids();
        let a = cache.create(true, full(50), 0, &mut random).unwrap();
        let b = cache.create(false, full(50), 500, &mut random).unwrap();
        // a (a follower's, larger than the new one) is unused for > 1000 ms
        let c = cache.create(false, full(1), 1001, &mut random).unwrap();
        assert!(cache.get(a).is_none());
        assert!(cache.get(b).is_some() && cache.get(c).is_some());
        assert_eq!(cache.evictions(), 1);
        // using b keeps it: at 1600 it was used 100 ms ago
        cache.incremental(b, 1, vec![], &[], 1500).unwrap().unwrap();
        assert_eq!(cache.create(false, full(1), 1600, &mut random), None);
    }

    #[test]
    fn fetch_session_evicted_by_size_only_when_old() {
        let mut cache = SessionCache::new(1, 1000);
        let mut random = ids();
        let a = cache.create(false, full(2), 0, &mut random).unwrap();
        cache.incremental(a, 1, vec![], &[], 900).unwrap();
        // young: not evicted even by a larger session
        assert_eq!(cache.create(false, full(3), 950, &mut random), None);
        // old enough, but the new one is not larger
        cache.incremental(a, 2, vec![], &[], 1500).unwrap();
        assert_eq!(cache.create(false, full(2), 1600, &mut random), None);
        // old enough and smaller than the new one
        let b = cache.create(false, full(3), 1600, &mut random).unwrap();
        assert!(cache.get(a).is_none());
        assert_eq!(cache.get(b).unwrap().len(), 3);
        assert_eq!(cache.evictions(), 1);
    }

    #[test]
    fn fetch_session_followers_are_privileged() {
        let mut cache = SessionCache::new(2, 1000);
        let mut random = ids();
        let follower = cache.create(true, full(1), 0, &mut random).unwrap();
        let consumer = cache.create(false, full(100), 1500, &mut random).unwrap();
        // a consumer cannot evict the (old, smaller) follower session
        cache.incremental(follower, 1, vec![], &[], 1900).unwrap();
        cache.incremental(consumer, 1, vec![], &[], 1900).unwrap();
        assert_eq!(cache.create(false, full(500), 2000, &mut random), None);
        // a follower evicts a young consumer session of any size
        let second = cache.create(true, full(1), 2000, &mut random).unwrap();
        assert!(cache.get(consumer).is_none());
        assert!(cache.get(follower).is_some() && cache.get(second).is_some());
        // followers' sessions stay for a follower's of the same size
        assert_eq!(cache.create(true, full(1), 2001, &mut random), None);
        // an old, smaller follower session yields to a larger follower's
        cache.incremental(follower, 2, vec![], &[], 2500).unwrap();
        cache.incremental(second, 1, vec![], &[], 2600).unwrap();
        let third = cache.create(true, full(5), 3001, &mut random).unwrap();
        assert!(cache.get(third).is_some());
        assert!(cache.get(follower).is_none());
        assert_eq!(cache.evictions(), 2);
    }

    #[test]
    fn fetch_session_epoch_checks_and_close() {
        let mut cache = SessionCache::new(10, 1000);
        let id = cache.create(false, full(2), 0, ids()).unwrap();
        assert_eq!(
            cache.incremental(id + 1, 1, vec![], &[], 1).unwrap_err(),
            SessionError::NotFound
        );
        assert_eq!(
            cache.incremental(id, 2, vec![], &[], 1).unwrap_err(),
            SessionError::InvalidEpoch
        );
        assert_eq!(
            cache
                .incremental(id, 1, vec![], &[], 1)
                .unwrap()
                .unwrap()
                .epoch,
            2
        );
        // a replayed epoch is refused
        assert_eq!(
            cache.incremental(id, 1, vec![], &[], 2).unwrap_err(),
            SessionError::InvalidEpoch
        );
        cache.get_mut(id).unwrap().epoch = i32::MAX;
        assert_eq!(
            cache
                .incremental(id, i32::MAX, vec![], &[], 3)
                .unwrap()
                .unwrap()
                .epoch,
            1
        );
        assert!(cache.remove(id));
        assert!(!cache.remove(id));
        assert_eq!(
            cache.incremental(id, 1, vec![], &[], 4).unwrap_err(),
            SessionError::NotFound
        );
    }

    #[test]
    fn fetch_session_incremental_updates_and_forgets() {
        let mut cache = SessionCache::new(10, 1000);
        let id = cache.create(false, full(3), 0, ids()).unwrap();
        cache
            .incremental(
                id,
                1,
                vec![req("t", 1, 40), req("u", 0, 7)],
                &[key("t", 2)],
                1,
            )
            .unwrap()
            .unwrap();
        // a partition listed twice is kept once, with its last request
        let twice = vec![req("v", 0, 1), req("v", 0, 3)];
        let inc = cache.incremental(id, 2, twice, &[], 1).unwrap().unwrap();
        let v: Vec<i64> = inc
            .partitions
            .iter()
            .filter(|p| p.request.key.topic == "v")
            .map(|p| p.request.fetch_offset)
            .collect();
        assert_eq!(v, vec![3]);
        let inc = cache
            .incremental(id, 3, vec![], &[key("v", 0)], 1)
            .unwrap()
            .unwrap();
        let got: Vec<(String, i32, i64)> = inc
            .partitions
            .iter()
            .map(|p| {
                (
                    p.request.key.topic.clone(),
                    p.request.key.partition,
                    p.request.fetch_offset,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![("t".into(), 0, 0), ("t".into(), 1, 40), ("u".into(), 0, 7)]
        );
        // forgetting everything closes the session
        let all = [key("t", 0), key("t", 1), key("u", 0)];
        assert!(cache.incremental(id, 4, vec![], &all, 2).unwrap().is_none());
        assert!(cache.get(id).is_none());
    }

    #[test]
    fn fetch_session_incremental_response_selection() {
        let mut cache = SessionCache::new(10, 1000);
        let parts: Vec<_> = (0..4)
            .map(|p| (req("t", p, 0), answer(10, false)))
            .collect();
        let id = cache.create(false, parts, 0, ids()).unwrap();
        let session = cache.get_mut(id).unwrap();
        // nothing changed: nothing sent
        let same = vec![answer(10, false); 4];
        assert_eq!(session.select(&same), vec![false; 4]);
        // p1 has records, p2's high watermark moved, p3 has an error
        let mut answers = vec![
            answer(10, false),
            answer(12, true),
            answer(11, false),
            answer(10, false),
        ];
        answers[3].error_code = 6;
        assert_eq!(session.select(&answers), vec![false, true, true, true]);
        // p1 (sent records) moved to the end
        let order: Vec<i32> = session
            .partitions()
            .iter()
            .map(|p| p.request.key.partition)
            .collect();
        assert_eq!(order, vec![0, 2, 3, 1]);
        // the new high watermarks are remembered; the errored partition is
        // sent again once it recovers
        let after = vec![
            answer(10, false),
            answer(11, false),
            answer(10, false),
            answer(12, false),
        ];
        assert_eq!(session.select(&after), vec![false, false, true, false]);
        // log start offset and preferred replica changes are sent
        let mut moved = vec![
            answer(10, false),
            answer(11, false),
            answer(10, false),
            answer(12, false),
        ];
        moved[0].log_start_offset = 5;
        moved[1].preferred_read_replica = 2;
        assert_eq!(session.select(&moved), vec![true, true, false, false]);
        // a newly added partition is always sent once
        session.update(vec![req("t", 9, 0)], &[]);
        let mut next = vec![
            answer(10, false),
            answer(11, false),
            answer(10, false),
            answer(12, false),
        ];
        next[0].log_start_offset = 5;
        next.push(answer(0, false));
        assert_eq!(
            session.select(&next),
            vec![false, false, false, false, true]
        );
        // a forgotten partition is no longer fetched nor sent
        session.update(vec![], &[key("t", 9)]);
        assert_eq!(session.len(), 4);
    }
}
