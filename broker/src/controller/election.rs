//! Who is the active controller. Every broker of a cluster contends; the
//! winner runs the controller (see [`super::host`]). Leadership is a
//! `watch` of `bool` that turns false as soon as this broker may no longer
//! act as controller.
//!
//! - Kubernetes mode: a `coordination.k8s.io` Lease (the shared elector of
//!   `moldau_coordination::lease`), which gives up acting before the lease
//!   can expire.
//! - Directory mode (brokers sharing one host and a metadata directory,
//!   for local clusters and tests): the same lease scheme on files,
//!   [`file_lease`]. The record `controller.lease` names the term and its
//!   holder and counts renewals; the holder renews it every retry period
//!   and acts only until its last renewal's start plus the renew deadline,
//!   as the Kubernetes elector does. The others take over when the record
//!   has not changed for a lease duration on their own monotonic clock
//!   (a stopped holder: SIGSTOP, a paused VM), or at once when the
//!   holder's process is gone: the holder of term N keeps an exclusive
//!   `flock` on `controller.alive.<N>`, which the kernel releases when the
//!   process dies (kill -9 included) or lets go. Every read-check-write
//!   of the record is done under a short `flock` on `controller.lease.lock`
//!   taken without waiting, so two candidates never both win a term.
//!
//! A holder stopped past its lease may resume believing it leads for a
//! moment; what keeps it from corrupting the metadata is the store's epoch
//! fencing ([`super::store::DirStore`]), as in Kubernetes mode.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use moldau_coordination::lease::Observer;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The lease record of directory mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Grows with every new holder.
    pub term: u64,
    /// The holder's identity (node id and process incarnation).
    pub holder: String,
    /// Grows with every renewal, so an unchanged record means no renewal.
    pub renewals: u64,
}

/// Lease timings (as the Kubernetes elector's `LeaseConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseTimings {
    /// The renew deadline is the lease duration minus one retry period (at
    /// most a quarter of the lease), as `LeaseConfig::new`.
    pub fn new(lease_duration: Duration, retry_period: Duration) -> Self {
        let margin = retry_period.min(lease_duration / 4);
        Self {
            lease_duration,
            renew_deadline: lease_duration.saturating_sub(margin),
            retry_period,
        }
    }
}

/// What one round decides, from the record read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ours: renew it.
    Renew,
    /// Free, expired, or its holder is gone: take term `term`.
    TakeOver { term: u64 },
    /// Someone else holds a live lease.
    Wait { expires_in: Duration },
}

/// Decides from the record, whether the holder's process is known to be
/// gone, and how long the record has been unchanged on our clock.
pub fn decide(
    record: Option<&LeaseRecord>,
    me: &str,
    holder_gone: bool,
    unchanged_for: Duration,
    lease_duration: Duration,
) -> Action {
    match record {
        None => Action::TakeOver { term: 1 },
        Some(r) if r.holder == me => Action::Renew,
        Some(r) if holder_gone || unchanged_for >= lease_duration => {
            Action::TakeOver { term: r.term + 1 }
        }
        Some(_) => Action::Wait {
            expires_in: lease_duration - unchanged_for,
        },
    }
}

fn flock_now(file: &File) -> bool {
    // SAFETY: flock on a descriptor we own; non-blocking.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Releases a `flock` taken with [`flock_now`] when dropped.
/// (The descriptor is the candidate's, which outlives the round.)
struct Unlock(std::os::fd::RawFd);

impl Drop for Unlock {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor the candidate owns and keeps open.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// The outcome of one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// We hold the lease (taken or renewed just now).
    Held,
    /// Someone else holds it; it may expire in this long.
    NotHeld(Option<Duration>),
    /// Another candidate was mid-round: nothing was decided.
    Busy,
}

/// One candidate's files and state.
struct FileCandidate {
    dir: PathBuf,
    me: String,
    timings: LeaseTimings,
    observer: Observer<(u64, String, u64)>,
    /// The `controller.alive.<term>` lock of the term we hold.
    alive: Option<(u64, File)>,
    /// `controller.lease.lock`, opened once (each round flocks it).
    mutex: Option<File>,
}

impl FileCandidate {
    fn alive_path(&self, term: u64) -> PathBuf {
        self.dir.join(format!("controller.alive.{term}"))
    }

    fn read(&self) -> std::io::Result<Option<LeaseRecord>> {
        match std::fs::read(self.dir.join("controller.lease")) {
            // an unreadable record is treated as none: a new term
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write(&self, r: &LeaseRecord) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(r).map_err(std::io::Error::other)?;
        crate::metadata::write_atomically(&self.dir.join("controller.lease"), &bytes)
    }

    /// Whether the holder of `term` is gone: its alive lock is free.
    fn holder_gone(&self, term: u64) -> bool {
        match std::fs::File::open(self.alive_path(term)) {
            Ok(f) => flock_now(&f),
            // never created, or cleaned up: nobody holds it
            Err(_) => true,
        }
    }

    /// One round: read the record and renew, take or leave it.
    fn round(&mut self, now: Instant) -> std::io::Result<Round> {
        if self.mutex.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            self.mutex = Some(open_lock(&self.dir.join("controller.lease.lock"))?);
        }
        let Some(mutex) = self.mutex.as_ref() else {
            return Ok(Round::Busy);
        };
        if !flock_now(mutex) {
            return Ok(Round::Busy);
        }
        // released at the end of the round, whatever it decides
        let _unlock = Unlock(mutex.as_raw_fd());
        let record = self.read()?;
        let mine = |r: &LeaseRecord| {
            r.holder == self.me && self.alive.as_ref().is_some_and(|(t, _)| *t == r.term)
        };
        let (gone, unchanged) = match &record {
            Some(r) if !mine(r) => {
                let unchanged = self
                    .observer
                    .observe((r.term, r.holder.clone(), r.renewals), now);
                (self.holder_gone(r.term), unchanged)
            }
            _ => (false, Duration::ZERO),
        };
        // a record naming us without our alive lock is a previous life's
        let me = if record
            .as_ref()
            .is_some_and(|r| r.holder == self.me && !mine(r))
        {
            ""
        } else {
            self.me.as_str()
        };
        match decide(
            record.as_ref(),
            me,
            gone,
            unchanged,
            self.timings.lease_duration,
        ) {
            Action::Renew => {
                let mut r = record.unwrap_or_else(|| LeaseRecord {
                    term: 0,
                    holder: self.me.clone(),
                    renewals: 0,
                });
                r.renewals += 1;
                self.write(&r)?;
                Ok(Round::Held)
            }
            Action::TakeOver { term } => {
                let alive = open_lock(&self.alive_path(term))?;
                if !flock_now(&alive) {
                    return Ok(Round::Busy);
                }
                self.write(&LeaseRecord {
                    term,
                    holder: self.me.clone(),
                    renewals: 0,
                })?;
                self.alive = Some((term, alive));
                self.observer.reset();
                // older terms' lock files are no one's any more
                for old in term.saturating_sub(8)..term.saturating_sub(1) {
                    let _ = std::fs::remove_file(self.alive_path(old));
                }
                Ok(Round::Held)
            }
            Action::Wait { expires_in } => {
                self.alive = None;
                Ok(Round::NotHeld(Some(expires_in)))
            }
        }
    }
}

/// Contends for the directory's controller lease until `shutdown`; the
/// returned channel is true while this process may act as controller.
/// `identity` must be unique to this process (node id and incarnation).
pub fn file_lease(
    dir: PathBuf,
    identity: String,
    timings: LeaseTimings,
    mut shutdown: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut candidate = FileCandidate {
            dir,
            me: identity,
            timings,
            observer: Observer::default(),
            alive: None,
            mutex: None,
        };
        let mut until: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let mut next = timings.retry_period;
            match candidate.round(started) {
                Ok(Round::Held) => {
                    if until.is_none() {
                        tracing::info!(dir = %candidate.dir.display(), "won the controller lease");
                    }
                    until = Some(started + timings.renew_deadline);
                }
                Ok(Round::NotHeld(retry_in)) => {
                    if until.take().is_some() {
                        tracing::warn!("lost the controller lease");
                    }
                    if let Some(r) = retry_in {
                        next = next.min(r + Duration::from_millis(10));
                    }
                }
                Ok(Round::Busy) => next = next.min(Duration::from_millis(50)),
                Err(e) => {
                    tracing::warn!(error = %e, "controller lease round failed");
                }
            }
            let now = Instant::now();
            match until {
                Some(u) if now < u => next = next.min(u - now),
                Some(_) => {
                    tracing::warn!("could not renew the controller lease in time; stepping down");
                    until = None;
                    // let go of the term so the others take over at once
                    candidate.alive = None;
                }
                None => {}
            }
            tx.send_if_modified(|leading| {
                let now_leading = until.is_some_and(|u| Instant::now() < u);
                std::mem::replace(leading, now_leading) != now_leading
            });
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.wait_for(|s| *s) => {
                    tx.send_replace(false);
                    // dropping the alive lock lets the next candidate take
                    // over at once
                    drop(candidate);
                    return;
                }
            }
            // a holder that was stopped past its deadline stops acting
            // before anything else it does
            if until.is_some_and(|u| Instant::now() >= u) {
                tx.send_replace(false);
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_secs(8);

    fn rec(term: u64, holder: &str, renewals: u64) -> LeaseRecord {
        LeaseRecord {
            term,
            holder: holder.into(),
            renewals,
        }
    }

    #[test]
    fn the_lease_is_taken_when_free_expired_or_its_holder_is_gone() {
        assert_eq!(
            decide(None, "a", false, Duration::ZERO, L),
            Action::TakeOver { term: 1 }
        );
        let r = rec(4, "b", 9);
        assert_eq!(
            decide(Some(&r), "a", false, Duration::ZERO, L),
            Action::Wait { expires_in: L }
        );
        assert_eq!(
            decide(Some(&r), "a", false, L, L),
            Action::TakeOver { term: 5 },
            "unchanged for a lease duration"
        );
        assert_eq!(
            decide(Some(&r), "a", true, Duration::ZERO, L),
            Action::TakeOver { term: 5 },
            "its process is gone"
        );
        assert_eq!(decide(Some(&r), "b", false, L * 3, L), Action::Renew);
    }

    fn candidate(dir: &Path, me: &str) -> FileCandidate {
        FileCandidate {
            dir: dir.to_path_buf(),
            me: me.into(),
            timings: LeaseTimings::new(L, Duration::from_secs(1)),
            observer: Observer::default(),
            alive: None,
            mutex: None,
        }
    }

    #[test]
    fn one_holder_at_a_time_and_a_stopped_one_is_replaced_after_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let mut a = candidate(dir.path(), "a");
        let mut b = candidate(dir.path(), "b");
        assert!(
            a.round(t0).unwrap() == Round::Held,
            "a takes the free lease"
        );
        assert!(b.round(t0).unwrap() != Round::Held, "b waits");
        assert!(
            a.round(t0 + Duration::from_secs(1)).unwrap() == Round::Held,
            "a renews"
        );
        // b has seen the renewal at +2 s; a stops renewing (stopped, but
        // alive: it keeps its alive lock)
        assert!(b.round(t0 + Duration::from_secs(2)).unwrap() != Round::Held);
        assert!(
            b.round(t0 + Duration::from_secs(9)).unwrap() != Round::Held,
            "not yet"
        );
        assert!(
            b.round(t0 + Duration::from_secs(10)).unwrap() == Round::Held,
            "expired"
        );
        assert_eq!(b.read().unwrap().unwrap().term, 2);
        // a resumes: the record is no longer its term
        assert!(a.round(t0 + Duration::from_secs(11)).unwrap() != Round::Held);
        assert!(b.round(t0 + Duration::from_secs(11)).unwrap() == Round::Held);
    }

    #[test]
    fn a_holder_whose_process_is_gone_is_replaced_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let mut a = candidate(dir.path(), "a");
        let mut b = candidate(dir.path(), "b");
        assert!(a.round(t0).unwrap() == Round::Held);
        assert!(b.round(t0).unwrap() != Round::Held);
        drop(a); // its alive lock goes with it, as at a process's death
        assert!(b.round(t0 + Duration::from_millis(10)).unwrap() == Round::Held);
        assert_eq!(b.read().unwrap().unwrap(), rec(2, "b", 0));
    }
}
