//! CPU time per thread of this process, to tell how busy the load
//! generator's busiest thread was during a run.
//!
//! librdkafka does a consumer's fetching, and a producer's batching, on one
//! thread per broker connection. When that thread is busy nearly all of a
//! run, the client is at its own limit and no broker can make it go faster,
//! however many cores are idle; the process's total CPU alone cannot show
//! that. librdkafka's threads are read from `/proc/self/task` before and
//! after the run; the load generator's own threads, which end before the
//! run is summed up, report their CPU themselves ([`own_cpu_seconds`]).

use std::collections::BTreeMap;
use std::fs;

/// CPU seconds (user + system) of each thread alive at one moment, by
/// thread id, with the thread's name.
pub struct ThreadTimes(BTreeMap<u32, (String, f64)>);

/// Clock ticks per second of `/proc/<pid>/stat`'s times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/task/<tid>/stat`
/// line, in ticks. The name (field 2) may hold spaces and parentheses, so
/// the fields are counted from its closing parenthesis.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

impl ThreadTimes {
    /// The threads of this process now (threads that end while they are
    /// read are left out).
    pub fn now() -> Self {
        let tick = ticks_per_second();
        let mut threads = BTreeMap::new();
        let Ok(dir) = fs::read_dir("/proc/self/task") else {
            return Self(threads);
        };
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let path = entry.path();
            let (Ok(stat), Ok(name)) = (
                fs::read_to_string(path.join("stat")),
                fs::read_to_string(path.join("comm")),
            ) else {
                continue;
            };
            if let Some(ticks) = cpu_ticks(&stat) {
                threads.insert(tid, (name.trim().to_string(), ticks as f64 / tick));
            }
        }
        Self(threads)
    }

    /// Each thread alive both `before` and now (`self`), with the CPU
    /// seconds it used in between.
    pub fn since(&self, before: &ThreadTimes) -> Vec<(String, f64)> {
        self.0
            .iter()
            .filter_map(|(tid, (name, now))| {
                let (_, then) = before.0.get(tid)?;
                Some((name.clone(), (now - then).max(0.0)))
            })
            .collect()
    }
}

/// CPU seconds (user + system) the calling thread has used so far.
pub fn own_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rusage for the call's duration.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// What one run's threads used: librdkafka's (alive from [`Self::start`]
/// to the end) read from `/proc`, and the load generator's own, which end
/// first and report themselves with [`Self::thread_done`].
pub struct RunThreads {
    before: ThreadTimes,
    own: std::sync::Mutex<Vec<(String, f64)>>,
}

impl RunThreads {
    /// Call before the run's threads start working.
    pub fn start() -> Self {
        Self {
            before: ThreadTimes::now(),
            own: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Called by one of the load generator's threads as it ends.
    pub fn thread_done(&self, name: &str) {
        let cpu = own_cpu_seconds();
        self.own
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name.to_string(), cpu));
    }

    /// The busiest thread of the run of `seconds` (see [`busiest_json`]).
    pub fn busiest_json(self, seconds: f64) -> serde_json::Value {
        let mut threads = ThreadTimes::now().since(&self.before);
        threads.extend(
            self.own
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        busiest_json(&threads, seconds)
    }
}

/// The busiest of `threads` over a run of `seconds`, as JSON: its name, CPU
/// seconds and the share of the run it was busy (null without threads).
pub fn busiest_json(threads: &[(String, f64)], seconds: f64) -> serde_json::Value {
    threads.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map_or(
        serde_json::Value::Null,
        |(name, cpu)| {
            serde_json::json!({
                "name": name,
                "cpu_s": cpu,
                "busy": if seconds > 0.0 { cpu / seconds } else { 0.0 },
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_from_the_name_s_closing_parenthesis() {
        let stat = "4242 (rdk:broker (0) x) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0";
        assert_eq!(cpu_ticks(stat), Some(281));
        assert_eq!(cpu_ticks("no parenthesis here"), None);
        assert_eq!(cpu_ticks("1 (short) S 1 2"), None);
    }

    #[test]
    fn a_busy_thread_shows_its_cpu_and_the_busiest_is_picked() {
        let before = ThreadTimes::now();
        let start = own_cpu_seconds();
        // Spin until this thread has used 0.3 s of CPU (by getrusage), not
        // for a wall-clock time: on a loaded machine it may get little CPU.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut x = 0u64;
        while own_cpu_seconds() - start < 0.3 && std::time::Instant::now() < give_up {
            for _ in 0..10_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        std::hint::black_box(x);
        let mine = own_cpu_seconds() - start;
        assert!(mine >= 0.3, "{mine}");
        // /proc counts whole ticks: the same CPU, within two ticks.
        let threads = ThreadTimes::now().since(&before);
        let busiest = threads.iter().map(|(_, s)| *s).fold(0.0, f64::max);
        assert!(busiest >= 0.25, "{threads:?}");
        let busiest = busiest_json(&[("a".into(), 0.5), ("b".into(), 1.5)], 2.0);
        assert_eq!(busiest["name"], "b");
        assert_eq!(busiest["busy"], 0.75);
        assert!(busiest_json(&[], 1.0).is_null());
    }
}
