//! Process resources the broker manages itself: the open file limit
//! (`RLIMIT_NOFILE`, raised from the soft to the hard limit at start), the
//! number of open descriptors (for `/metrics`), and the pacing of a
//! listener whose `accept` fails (EMFILE/ENFILE), so it neither spins nor
//! floods the log while descriptors are exhausted; and the CPU and I/O
//! priority of background maintenance threads.
//!
//! It owns no descriptors and touches no files other than `/proc/self/fd`.

use std::io;
use std::time::{Duration, Instant};

/// The nice value of background maintenance threads (the log cleaner):
/// under CPU contention the kernel gives them about a tenth of the share
/// of a request-handling thread, so a compaction pass slows down rather
/// than the produce and fetch paths; on an idle machine they run at full
/// speed. (Redpanda runs compaction in a scheduling group with fewer
/// shares for the same reason.)
pub const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to `nice` (Linux applies
/// `setpriority(PRIO_PROCESS, tid)` to that one thread). A thread cannot
/// raise its priority back without privileges, so only threads that do
/// nothing else call this. The thread's I/O priority goes down with it
/// (best-effort class, lowest level [`BACKGROUND_IO_LEVEL`]): the block
/// layer's schedulers that honour priorities (mq-deadline, BFQ) serve the
/// request handlers' reads and writes first. And the thread asks for a long
/// time slice, [`BACKGROUND_SLICE_NS`] (see there). Failing is logged and
/// otherwise harmless.
pub fn lower_this_threads_priority(nice: i32) {
    // SAFETY: gettid has no preconditions; setpriority takes plain integers.
    let tid = unsafe { libc::gettid() };
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc != 0 {
        tracing::warn!(nice, error = %io::Error::last_os_error(), "cannot lower a background thread's priority");
    }
    // sched_setattr sets the nice value as well; setpriority above stays
    // so that the thread is still niced where a sandbox refuses it
    if let Err(e) = set_this_threads_slice(nice, BACKGROUND_SLICE_NS) {
        tracing::warn!(error = %e, "cannot set a background thread's time slice");
    }
    // SAFETY: ioprio_set takes plain integers (who, id, priority).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid,
            background_io_priority(),
        )
    };
    if rc != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "cannot lower a background thread's I/O priority");
    }
}

/// The time slice background threads ask the kernel for: 20 ms, longer than
/// the default (a base of 0.7 ms scaled by the CPU count: 1.4 ms on 2 cores). Linux's EEVDF scheduler (6.6+)
/// lets a running thread finish its slice before a woken thread of the same
/// class preempts it, however low its nice value ("run to parity"), and
/// then waits for the next tick; only a woken thread with a *shorter* slice
/// preempts at once (6.12+, where a fair thread's `sched_runtime` sets its
/// slice). So the niced cleaner, left at the default slice, delayed every
/// request handler and client thread woken on its core by up to a tick: a
/// compaction pass raised the produce p99 of a paced producer (1000
/// records/s, 2 cores) while the broker's own handling time of those
/// requests stayed under 0.4 ms. With the long slice, woken threads preempt
/// the cleaner at once: in three alternating runs each, the p99 during
/// passes was 1.5–2.5 ms at the default slice, 1.2–1.2 ms at 20 ms, and
/// 2.1–2.6 ms with the cleaner at `SCHED_IDLE`. The cleaner's share of the CPU
/// is still set by its nice value. Older kernels ignore `sched_runtime` of
/// a fair thread.
pub const BACKGROUND_SLICE_NS: u64 = 20_000_000;

/// `struct sched_attr` as `sched_setattr(2)` takes it (its first version,
/// without utilisation clamps; the kernel accepts any known size).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Makes the calling thread `SCHED_OTHER` at `nice` with a time slice of
/// `slice_ns` (clamped by the kernel to 0.1–100 ms). Unprivileged, as long
/// as `nice` is not below the thread's current value.
fn set_this_threads_slice(nice: i32, slice_ns: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        nice,
        runtime: slice_ns,
        ..SchedAttr::default()
    };
    // SAFETY: pid 0 is the calling thread; the kernel reads `size` bytes of
    // the struct, which is that size and lives across the call.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The best-effort level of background threads' I/O: 7, the lowest of the
/// class (4 is every thread's default). Not the idle class, which a busy
/// disk can starve for ever (a cleaner that never finishes lets a
/// compacted partition grow without bound).
pub const BACKGROUND_IO_LEVEL: i32 = 7;
const IOPRIO_WHO_PROCESS: i32 = 1;
const IOPRIO_CLASS_BE: i32 = 2;
const IOPRIO_CLASS_SHIFT: i32 = 13;

/// `ioprio_set`'s encoding of (best-effort, [`BACKGROUND_IO_LEVEL`]).
fn background_io_priority() -> i32 {
    (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | BACKGROUND_IO_LEVEL
}

/// The soft and hard `RLIMIT_NOFILE`.
pub fn nofile_limits() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (each partition costs
/// descriptors; see the README) and logs both. Returns `(before, after,
/// hard)`; failures are logged and leave the limit as it was.
pub fn raise_nofile_limit() -> Option<(u64, u64, u64)> {
    let (soft, hard) = match nofile_limits() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE");
            return None;
        }
    };
    let mut after = soft;
    if soft < hard {
        let lim = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            after = hard;
        } else {
            let e = io::Error::last_os_error();
            tracing::warn!(error = %e, soft, hard, "cannot raise the open file limit");
        }
    }
    tracing::info!(
        soft_before = soft,
        soft = after,
        hard,
        "open file limit (RLIMIT_NOFILE)"
    );
    Some((soft, after, hard))
}

/// Number of open descriptors of this process (entries of `/proc/self/fd`,
/// not counting the one used to list them).
pub fn open_fds() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

/// Paces a listener whose `accept` fails: the pause doubles from 50 ms to
/// 1 s while errors repeat (a descriptor shortage lasts until connections
/// close), and the error is logged at most every 10 s with the number of
/// failures in between.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    consecutive: u32,
    last_log: Option<Instant>,
    suppressed: u64,
}

impl AcceptBackoff {
    const LOG_EVERY: Duration = Duration::from_secs(10);

    /// Call on a failed `accept`; returns how long to pause.
    pub fn on_error(&mut self, e: &io::Error) -> Duration {
        self.consecutive = self.consecutive.saturating_add(1);
        let due = self.last_log.is_none_or(|t| t.elapsed() >= Self::LOG_EVERY);
        if due {
            let fds = matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE));
            tracing::warn!(
                error = %e,
                out_of_file_descriptors = fds,
                failures_since_last_report = self.suppressed,
                "accept failed; pausing the listener"
            );
            self.last_log = Some(Instant::now());
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        Self::pause(self.consecutive)
    }

    /// Call on a successful `accept`.
    pub fn on_success(&mut self) {
        self.consecutive = 0;
    }

    fn pause(consecutive: u32) -> Duration {
        let exp = consecutive.saturating_sub(1).min(5);
        Duration::from_millis(50u64 << exp).min(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_niced_and_others_do_not() {
        let own = || {
            // SAFETY: plain integers; errno is cleared first because -1
            // is also a valid priority
            unsafe {
                *libc::__errno_location() = 0;
                let tid = libc::gettid();
                libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
            }
        };
        let io_priority = || {
            // SAFETY: plain integers
            unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, libc::gettid()) }
        };
        let slice = || {
            let mut attr = SchedAttr::default();
            // SAFETY: the kernel writes at most `size` (the struct's) bytes
            unsafe {
                libc::syscall(
                    libc::SYS_sched_getattr,
                    0,
                    &mut attr as *mut SchedAttr,
                    std::mem::size_of::<SchedAttr>() as u32,
                    0,
                )
            };
            attr.runtime
        };
        let before = own();
        let io_before = io_priority();
        let slice_before = slice();
        let (niced, io_niced, sliced) = std::thread::spawn(move || {
            lower_this_threads_priority(BACKGROUND_NICE);
            (own(), io_priority(), slice())
        })
        .join()
        .expect("thread");
        assert_eq!(io_niced, i64::from(background_io_priority()));
        // kernels before 6.12 report no slice for a fair thread (0)
        if slice_before != 0 {
            assert_eq!(sliced, BACKGROUND_SLICE_NS);
            assert_eq!(slice(), slice_before, "only that thread's slice");
        }
        assert_eq!(io_priority(), io_before, "only that thread's I/O");
        if before <= BACKGROUND_NICE {
            assert_eq!(niced, BACKGROUND_NICE);
        } else {
            // already nicer than that (raising priority needs privileges)
            assert!(niced >= BACKGROUND_NICE, "{niced}");
        }
        assert_eq!(own(), before, "only that thread");
    }

    #[test]
    fn accept_backoff_grows_then_resets_and_logs_rarely() {
        let mut b = AcceptBackoff::default();
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<u64> = (0..8).map(|_| b.on_error(&e).as_millis() as u64).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(b.suppressed, 7, "only the first failure was logged");
        b.on_success();
        assert_eq!(b.on_error(&e), Duration::from_millis(50));
    }

    #[test]
    fn fd_count_and_limits_are_readable() {
        assert!(
            open_fds().expect("/proc/self/fd") >= 3,
            "stdin, stdout, stderr"
        );
        let (soft, hard) = nofile_limits().expect("limits");
        assert!(soft <= hard);
    }
}
