//! The bounded fuzz run of the workspace's tests: every check of
//! `moldau-fuzz-checks` on its committed corpus (`fuzz/corpus/<check>/`) and
//! regression inputs (`fuzz/regressions/<check>/`), then on seeded random
//! mutations of them (bit flips, interesting integers, inserted, deleted,
//! duplicated and spliced ranges, truncation) for `MOLDAU_FUZZ_SECS` seconds
//! per check (default 15).
//!
//! This is the short version that fits the test command. It has no coverage
//! guidance and no AddressSanitizer; `scripts/fuzz.sh` is the full,
//! coverage-guided run of the same checks with libFuzzer.
//!
//! As in `scripts/fuzz.sh` (`-malloc_limit_mb=512`), one allocation of
//! 512 MiB or more fails the run: that is how a length read from the input
//! that sizes an allocation shows up. The process cannot unwind from the
//! allocator, so it saves the input and aborts.
//!
//! A failing input is saved as `fuzz/artifacts/<check>/bounded-<seed>-<n>`
//! (the directory git ignores) and the test fails naming it; reproduce it
//! with `cargo +nightly fuzz run <check> <file>` (from `fuzz/`). Every run
//! prints its seed; `MOLDAU_FUZZ_SEED` repeats one.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use moldau_fuzz_checks::CHECKS;

/// One allocation this large is a failure (libFuzzer's `-malloc_limit_mb`).
const ALLOCATION_LIMIT: usize = 512 << 20;

/// The input under test on this thread, for the allocation guard.
struct Current {
    check: &'static str,
    seed: u64,
    input: Vec<u8>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

struct LimitedAllocator;

// SAFETY: every call is forwarded to `System` with the same arguments; the
// only addition is the abort on an over-limit size, before any allocation.
unsafe impl GlobalAlloc for LimitedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        guard(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        guard(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        guard(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: LimitedAllocator = LimitedAllocator;

fn guard(size: usize) {
    if size < ALLOCATION_LIMIT {
        return;
    }
    let saved = CURRENT
        .try_with(|current| {
            let current = current.try_borrow().ok()?;
            let c = current.as_ref()?;
            Some(save(c.check, c.seed, "oom", &c.input))
        })
        .ok()
        .flatten();
    eprintln!(
        "bounded fuzz: an allocation of {size} bytes (limit {ALLOCATION_LIMIT}); input saved as {}",
        saved.map_or_else(
            || "(none: not inside a check)".into(),
            |p| p.display().to_string()
        )
    );
    std::process::abort();
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Writes a failing input to `fuzz/artifacts/<check>/`; returns its path.
fn save(check: &str, seed: u64, what: &str, input: &[u8]) -> PathBuf {
    let dir = fuzz_dir().join("artifacts").join(check);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("bounded-{what}-{seed}-{}", input.len()));
    let _ = std::fs::write(&path, input);
    path
}

/// Every file of `fuzz/<kind>/<check>/`, sorted by name.
fn inputs(kind: &str, check: &str) -> Vec<Vec<u8>> {
    let dir = fuzz_dir().join(kind).join(check);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .iter()
        .filter(|p| p.is_file())
        .map(|p| std::fs::read(p).expect("read a corpus file"))
        .collect()
}

/// Integers that sit on the edges decoders get wrong.
const INTERESTING: [i64; 12] = [
    0,
    1,
    -1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    -0x8000_0000,
    0x1_0000,
    0x10_0000,
];

/// One random change of `data`, `other` is a second input to splice from.
fn mutate(rng: &mut fastrand::Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let len = data.len();
    match rng.u8(0..10) {
        0 if len > 0 => {
            let i = rng.usize(0..len);
            data[i] ^= 1 << rng.u8(0..8);
        }
        1 if len > 0 => {
            let i = rng.usize(0..len);
            data[i] = rng.u8(..);
        }
        2 if len > 0 => {
            // an interesting integer, big-endian as Kafka writes them
            let value = INTERESTING[rng.usize(0..INTERESTING.len())];
            let width = [1usize, 2, 4, 8][rng.usize(0..4)].min(len);
            let at = rng.usize(0..=len - width);
            let bytes = value.to_be_bytes();
            data[at..at + width].copy_from_slice(&bytes[8 - width..]);
        }
        3 => {
            let at = rng.usize(0..=len);
            let n = rng.usize(1..=16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
            data.splice(at..at, bytes);
        }
        4 if len > 0 => {
            let at = rng.usize(0..len);
            let n = rng.usize(1..=(len - at).min(64));
            data.drain(at..at + n);
        }
        5 if len > 0 => {
            let at = rng.usize(0..len);
            let n = rng.usize(1..=(len - at).min(256));
            let chunk = data[at..at + n].to_vec();
            let to = rng.usize(0..=len);
            data.splice(to..to, chunk);
        }
        6 if len > 0 => data.truncate(rng.usize(0..len)),
        7 if !other.is_empty() => {
            // the head of this input, the tail of another
            let keep = rng.usize(0..=len);
            let from = rng.usize(0..other.len());
            data.truncate(keep);
            data.extend_from_slice(&other[from..]);
        }
        8 if !other.is_empty() && len > 0 => {
            // a range of another input over a range of this one
            let from = rng.usize(0..other.len());
            let n = rng.usize(1..=(other.len() - from).min(len).min(512));
            let at = rng.usize(0..=len - n);
            data[at..at + n].copy_from_slice(&other[from..from + n]);
        }
        _ => {
            let at = rng.usize(0..=len);
            data.insert(at, rng.u8(..));
        }
    }
    data.truncate(max_len);
}

/// Runs `check` on one input; a panic is saved and reported.
fn run_one(name: &'static str, check: fn(&[u8]), seed: u64, input: &[u8]) -> Result<(), PathBuf> {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        match current.as_mut() {
            Some(c) => {
                c.input.clear();
                c.input.extend_from_slice(input);
            }
            None => {
                *current = Some(Current {
                    check: name,
                    seed,
                    input: input.to_vec(),
                })
            }
        }
    });
    catch_unwind(AssertUnwindSafe(|| check(input))).map_err(|_| save(name, seed, "panic", input))
}

fn bounded_run(name: &'static str) {
    let check = CHECKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .expect("a check of that name");
    let seconds: u64 = std::env::var("MOLDAU_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed: u64 = std::env::var("MOLDAU_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let max_len = if name == "request_frame" {
        1 << 20
    } else {
        256 << 10
    };

    let corpus = inputs("corpus", name);
    let regressions = inputs("regressions", name);
    assert!(
        !corpus.is_empty(),
        "{name}: no committed corpus in fuzz/corpus/{name}"
    );
    let started = Instant::now();
    for input in corpus.iter().chain(&regressions) {
        if let Err(path) = run_one(name, check, seed, input) {
            panic!(
                "{name}: a committed input fails; saved as {}",
                path.display()
            );
        }
    }
    let replayed = started.elapsed();

    let mut rng = fastrand::Rng::with_seed(seed);
    let pool: Vec<&Vec<u8>> = corpus.iter().chain(&regressions).collect();
    let deadline = started + Duration::from_secs(seconds);
    let mut mutated = 0u64;
    let mut input = Vec::new();
    while Instant::now() < deadline {
        input.clear();
        input.extend_from_slice(pool[rng.usize(0..pool.len())]);
        let other = pool[rng.usize(0..pool.len())];
        for _ in 0..rng.usize(1..=8) {
            mutate(&mut rng, &mut input, other, max_len);
        }
        if let Err(path) = run_one(name, check, seed, &input) {
            panic!(
                "{name}: mutated input #{mutated} fails (seed {seed}); saved as {}",
                path.display()
            );
        }
        mutated += 1;
    }
    println!(
        "bounded fuzz {name}: {} corpus + {} regression inputs in {:.1}s, then {mutated} mutated inputs; seed {seed}",
        corpus.len(),
        regressions.len(),
        replayed.as_secs_f64(),
    );
    assert!(
        mutated > 0 || seconds == 0 || replayed >= Duration::from_secs(seconds),
        "{name}: no mutated input ran"
    );
}

#[test]
fn request_frame() {
    bounded_run("request_frame");
}

#[test]
fn record_batch() {
    bounded_run("record_batch");
}

#[test]
fn group_codecs() {
    bounded_run("group_codecs");
}

#[test]
fn log_recovery() {
    bounded_run("log_recovery");
}

#[test]
fn txn_codecs() {
    bounded_run("txn_codecs");
}

#[test]
fn auth_exchanges() {
    bounded_run("auth_exchanges");
}

#[test]
fn telemetry_payload() {
    bounded_run("telemetry_payload");
}

/// The guard catches what it must: a check that allocates past the limit
/// aborts its process. Run in a child process (the test binary itself,
/// filtered to the ignored helper below), since the abort ends it.
#[test]
fn an_allocation_past_the_limit_fails_the_run() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "allocates_past_the_limit",
            "--nocapture",
        ])
        .env("MOLDAU_FUZZ_SEED", "7")
        .output()
        .expect("run the test binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the over-limit allocation did not fail: {stderr}"
    );
    assert!(
        stderr.contains("an allocation of") && stderr.contains("bounded-oom-7-"),
        "no report of the allocation and the saved input: {stderr}"
    );
    let saved = fuzz_dir().join("artifacts/guard_self_test/bounded-oom-7-3");
    assert_eq!(std::fs::read(&saved).ok().as_deref(), Some(&b"big"[..]));
    let _ = std::fs::remove_dir_all(saved.parent().unwrap());
}

#[test]
#[ignore = "run by an_allocation_past_the_limit_fails_the_run in a child process"]
fn allocates_past_the_limit() {
    fn greedy(input: &[u8]) {
        let v: Vec<u8> = Vec::with_capacity(ALLOCATION_LIMIT + input.len());
        std::hint::black_box(v);
    }
    let _ = run_one("guard_self_test", greedy, 7, b"big");
}
