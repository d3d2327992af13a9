//! What a partition leader decides about its followers, as pure functions
//! over what their fetches told it: how far each follower has replicated,
//! when it was last caught up, the high watermark, who falls out of the
//! in-sync replicas (ISR) and who may join them.
//!
//! The rules are Kafka's: a follower's fetch offset is its log end; it was
//! caught up at a fetch if it asked for the leader's log end of that
//! moment, or, failing that, at its previous fetch if it now asks for at
//! least what the leader had then; it leaves the ISR once it has not been
//! caught up for `replica.lag.time.max.ms`; it may join again once it holds
//! everything below the high watermark and everything of the leader's
//! current epoch's start. The high watermark is the smallest log end over
//! the ISR (the leader included) and never goes back on a leader.

use std::collections::HashMap;

/// A leader's followers by node id. Looked up for every partition of
/// every follower fetch: a fast hash of the small integer keys.
pub type Followers = HashMap<i32, FollowerProgress, foldhash::fast::RandomState>;

/// A follower as its fetches describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end: the offset of its last fetch (-1: no fetch
    /// yet in this leadership).
    pub log_end: i64,
    /// The last time the follower held everything the leader had.
    pub last_caught_up_ms: i64,
    /// The leader's log end and the time of the follower's previous fetch.
    previous_leader_end: i64,
    previous_fetch_ms: i64,
}

impl FollowerProgress {
    /// A follower when leadership starts: unknown log end, counted as
    /// caught up now (an in-sync follower gets `replica.lag.time.max.ms`
    /// to show it still is).
    pub fn new(now_ms: i64) -> Self {
        Self {
            log_end: -1,
            last_caught_up_ms: now_ms,
            previous_leader_end: -1,
            previous_fetch_ms: now_ms,
        }
    }

    /// Records a fetch at `fetch_offset` while the leader's log ends at
    /// `leader_end`.
    pub fn on_fetch(&mut self, fetch_offset: i64, leader_end: i64, now_ms: i64) {
        if fetch_offset >= leader_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(now_ms);
        } else if self.previous_leader_end >= 0 && fetch_offset >= self.previous_leader_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(self.previous_fetch_ms);
        }
        self.log_end = fetch_offset;
        self.previous_leader_end = leader_end;
        self.previous_fetch_ms = now_ms;
    }
}

/// The high watermark the ISR allows: the smallest log end among `isr`
/// (`leader_end` for the leader itself), never below `current` (a leader's
/// high watermark does not go back). A member with no fetch yet holds it.
pub fn high_watermark(
    leader: i32,
    leader_end: i64,
    isr: &[i32],
    followers: &Followers,
    current: i64,
) -> i64 {
    let lowest = isr
        .iter()
        .filter(|r| **r != leader)
        .map(|r| followers.get(r).map_or(-1, |f| f.log_end))
        .fold(leader_end, i64::min);
    lowest.max(current)
}

/// Members of `isr` (the leader aside) not caught up for longer than
/// `lag_max_ms`: they leave the ISR.
pub fn lagging(
    leader: i32,
    isr: &[i32],
    followers: &Followers,
    now_ms: i64,
    lag_max_ms: i64,
) -> Vec<i32> {
    isr.iter()
        .copied()
        .filter(|r| *r != leader)
        .filter(|r| {
            followers
                .get(r)
                .is_none_or(|f| now_ms.saturating_sub(f.last_caught_up_ms) > lag_max_ms)
        })
        .collect()
}

/// Whether a follower outside the ISR may join it: it holds everything
/// below the high watermark and everything since the leader's current
/// epoch started (so it has the leader's epoch history).
pub fn may_join(progress: &FollowerProgress, high_watermark: i64, epoch_start_offset: i64) -> bool {
    progress.log_end >= 0
        && progress.log_end >= high_watermark
        && progress.log_end >= epoch_start_offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(log_end: i64, now: i64) -> FollowerProgress {
        let mut f = FollowerProgress::new(0);
        f.on_fetch(log_end, log_end, now);
        f
    }

    #[test]
    fn the_high_watermark_is_the_lowest_log_end_of_the_isr() {
        let followers: Followers = [(2, at(7, 1)), (3, at(4, 1))].into_iter().collect();
        assert_eq!(high_watermark(1, 10, &[1, 2, 3], &followers, 0), 4);
        // 3 left the ISR: only 2 holds it back
        assert_eq!(high_watermark(1, 10, &[1, 2], &followers, 0), 7);
        // the leader alone: its log end
        assert_eq!(high_watermark(1, 10, &[1], &followers, 0), 10);
        // a leader's high watermark never goes back
        assert_eq!(high_watermark(1, 10, &[1, 2, 3], &followers, 6), 6);
        // an ISR member that has not fetched yet holds it where it is
        assert_eq!(high_watermark(1, 10, &[1, 2, 9], &followers, 3), 3);
    }

    #[test]
    fn a_follower_is_caught_up_when_it_asks_for_the_leaders_end() {
        let mut f = FollowerProgress::new(0);
        f.on_fetch(5, 10, 100);
        assert_eq!(f.last_caught_up_ms, 0, "behind at its first fetch");
        // next fetch asks for what the leader had at the previous one
        f.on_fetch(10, 12, 200);
        assert_eq!(
            f.last_caught_up_ms, 100,
            "caught up as of the previous fetch"
        );
        f.on_fetch(12, 12, 300);
        assert_eq!(f.last_caught_up_ms, 300);
        assert_eq!(f.log_end, 12);
    }

    #[test]
    fn a_follower_that_falls_behind_for_the_lag_time_leaves_the_isr() {
        let mut slow = FollowerProgress::new(0);
        slow.on_fetch(5, 100, 1_000);
        slow.on_fetch(6, 200, 2_000);
        let fast = at(200, 29_000);
        let followers: Followers = [(2, slow), (3, fast)].into_iter().collect();
        assert!(lagging(1, &[1, 2, 3], &followers, 20_000, 30_000).is_empty());
        assert_eq!(lagging(1, &[1, 2, 3], &followers, 30_001, 30_000), vec![2]);
        // a member the leader never heard from counts as lagging
        assert_eq!(lagging(1, &[1, 7], &followers, 1, 30_000), vec![7]);
        // the leader never lags itself
        assert!(lagging(1, &[1], &followers, i64::MAX, 1).is_empty());
    }

    #[test]
    fn a_follower_joins_once_it_has_the_high_watermark_and_the_epochs_start() {
        let f = at(50, 1);
        assert!(may_join(&f, 50, 40));
        assert!(!may_join(&f, 51, 40), "below the high watermark");
        assert!(!may_join(&f, 50, 60), "missing the current epoch's records");
        assert!(!may_join(&FollowerProgress::new(0), 0, 0), "never fetched");
    }
}
