//! The data directory's high watermark checkpoint,
//! `replication-offset-checkpoint`: one file holding the high watermark of
//! every partition in the directory, as Kafka keeps it.
//!
//! This module owns that file and nothing else: its format, its atomic
//! rewrite, and the order of the writes that race for it. Partitions read
//! their value from it when they open; the broker rewrites it every
//! [`CHECKPOINT_INTERVAL_MS`] with the values of all partitions and once
//! more after the logs are closed at shutdown. A replica fetcher's
//! truncation rewrites it at once, under the partition's lock, so that a
//! high watermark of the log's cut history never survives a crash: after a
//! truncation and new appends, an old value could otherwise mark records
//! committed that are not.
//!
//! One file instead of one per partition: a broker with 1,000 replicated
//! partitions fsynced 1,000 files (and their directories) every interval,
//! a fifth of its CPU in `bench/cluster_partitions.py`; now it is one
//! file and two fsyncs per interval, whatever the number of partitions.
//!
//! Entries are keyed by topic id and partition, so a topic deleted and
//! created again under its name never inherits the old one's value. The
//! format is text:
//!
//! ```text
//! moldau-replication-offset-checkpoint 1
//! <number of entries>
//! <topic> <partition> <topic id> <high watermark>
//! ...
//! ```
//!
//! A file that does not parse as a whole is ignored (with a warning):
//! partitions then open at their older per-partition file
//! ([`LEGACY_FILE`], written by brokers before this file existed) or at
//! their log start — a lower high watermark is safe, it only waits for the
//! leader or the followers to move it again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use uuid::Uuid;

use super::{checkpoint, Result};

/// The file's name in the data directory.
pub const FILE: &str = "replication-offset-checkpoint";
/// The per-partition high watermark file of brokers before [`FILE`]: read
/// when [`FILE`] has no entry for the partition, removed once it has.
pub const LEGACY_FILE: &str = "high-watermark.checkpoint";
/// How often the broker rewrites the file (Kafka's
/// `replica.high.watermark.checkpoint.interval.ms` default).
pub const CHECKPOINT_INTERVAL_MS: i64 = 5_000;

const MAGIC: &str = "moldau-replication-offset-checkpoint";
const VERSION: u32 = 1;

/// A partition, as the file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic_id: Uuid,
    pub index: i32,
}

/// A partition's entry: its topic's name (for whoever reads the file) and
/// its high watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub topic: String,
    pub high_watermark: i64,
}

/// Every entry of a file, by partition.
pub type Entries = BTreeMap<PartitionKey, Entry>;

/// What [`HighWatermarks::write_all`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Written,
    /// The file already holds exactly these values: nothing written.
    Unchanged,
    /// Another write (a truncation's, or a later gathering's) happened
    /// after the values were gathered: they may be older than what the
    /// file holds, so they were dropped. The next interval gathers again.
    Superseded,
}

/// The data directory's checkpoint file and what it holds.
#[derive(Debug)]
pub struct HighWatermarks {
    dir: PathBuf,
    /// What the file held when opened, for the partitions' opens.
    loaded: Entries,
    state: Mutex<FileState>,
}

#[derive(Debug, Default)]
struct FileState {
    /// What the file holds (as last written, or as loaded).
    written: Entries,
    /// Counts writes of the file, so that values gathered before one are
    /// not written over it.
    generation: u64,
    /// Writes done, for tests and the log.
    writes: u64,
}

impl HighWatermarks {
    /// Reads the file of `dir` (absent or unreadable: empty).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(FILE);
        let loaded = match std::fs::read(&path) {
            Ok(bytes) => {
                let parsed = std::str::from_utf8(&bytes).ok().and_then(parse);
                if parsed.is_none() {
                    tracing::warn!(path = %path.display(), "ignoring an unreadable high watermark checkpoint");
                }
                parsed.unwrap_or_default()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Entries::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            state: Mutex::new(FileState {
                written: loaded.clone(),
                ..FileState::default()
            }),
            loaded,
        })
    }

    /// The partition's high watermark as the file held it when opened.
    pub fn checkpointed(&self, key: PartitionKey) -> Option<i64> {
        self.loaded.get(&key).map(|e| e.high_watermark)
    }

    /// The current generation: pass it to [`HighWatermarks::write_all`]
    /// with values gathered after this call.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// How many times the file was written since it was opened.
    pub fn writes(&self) -> u64 {
        self.state.lock().writes
    }

    /// Replaces the file's entries with `entries` (every partition of the
    /// directory, gathered after [`HighWatermarks::generation`] returned
    /// `since`), unless another write came between or nothing changed.
    pub fn write_all(&self, since: u64, entries: Entries) -> Result<WriteOutcome> {
        let mut state = self.state.lock();
        if state.generation != since {
            return Ok(WriteOutcome::Superseded);
        }
        if state.written == entries {
            return Ok(WriteOutcome::Unchanged);
        }
        self.write(&mut state, entries)?;
        Ok(WriteOutcome::Written)
    }

    /// Sets one partition's entry and rewrites the file at once (a
    /// truncation lowered its high watermark): values gathered before this
    /// are dropped instead of written over it.
    pub fn write_one(&self, key: PartitionKey, entry: Entry) -> Result<()> {
        let mut state = self.state.lock();
        let mut entries = state.written.clone();
        entries.insert(key, entry);
        self.write(&mut state, entries)
    }

    fn write(&self, state: &mut FileState, entries: Entries) -> Result<()> {
        // Counted before the write: a failed one may have changed nothing,
        // but a gathering that began before it must gather again anyway.
        state.generation += 1;
        checkpoint::write_atomically(&self.dir, FILE, render(&entries).as_bytes())?;
        state.written = entries;
        state.writes += 1;
        Ok(())
    }
}

/// The file's content for `entries`, sorted by topic name and partition.
pub fn render(entries: &Entries) -> String {
    let mut lines: Vec<(&str, i32, Uuid, i64)> = entries
        .iter()
        .map(|(k, e)| (e.topic.as_str(), k.index, k.topic_id, e.high_watermark))
        .collect();
    lines.sort_unstable();
    let mut out = format!("{MAGIC} {VERSION}\n{}\n", lines.len());
    for (topic, index, id, hw) in lines {
        out.push_str(&format!("{topic} {index} {id} {hw}\n"));
    }
    out
}

/// Parses a file's content; `None` unless all of it is well formed.
pub fn parse(content: &str) -> Option<Entries> {
    let body = content.strip_suffix('\n')?;
    let mut lines = body.split('\n');
    let mut header = lines.next()?.split(' ');
    if header.next()? != MAGIC || header.next()?.parse::<u32>().ok()? != VERSION {
        return None;
    }
    if header.next().is_some() {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let mut entries = Entries::new();
    for line in lines {
        let mut fields = line.split(' ');
        let topic = fields.next().filter(|t| !t.is_empty())?;
        let index: i32 = fields.next()?.parse().ok()?;
        let topic_id: Uuid = fields.next()?.parse().ok()?;
        let high_watermark: i64 = fields.next()?.parse().ok()?;
        if fields.next().is_some() || index < 0 || high_watermark < 0 {
            return None;
        }
        let entry = Entry {
            topic: topic.to_string(),
            high_watermark,
        };
        if entries
            .insert(PartitionKey { topic_id, index }, entry)
            .is_some()
        {
            return None;
        }
    }
    (entries.len() == count).then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u128, index: i32) -> PartitionKey {
        PartitionKey {
            topic_id: Uuid::from_u128(id),
            index,
        }
    }

    fn entry(topic: &str, hw: i64) -> Entry {
        Entry {
            topic: topic.to_string(),
            high_watermark: hw,
        }
    }

    fn sample() -> Entries {
        Entries::from([
            (key(2, 1), entry("orders", 17)),
            (key(2, 0), entry("orders", 0)),
            (key(1, 0), entry("audit", i64::MAX)),
        ])
    }

    #[test]
    fn renders_sorted_by_topic_and_parses_back() {
        let text = render(&sample());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "moldau-replication-offset-checkpoint 1");
        assert_eq!(lines[1], "3");
        assert!(lines[2].starts_with("audit 0 "), "{text}");
        assert!(lines[3].starts_with("orders 0 "), "{text}");
        assert!(lines[4].ends_with(" 17"), "{text}");
        assert_eq!(parse(&text), Some(sample()));
        assert_eq!(parse(&render(&Entries::new())), Some(Entries::new()));
    }

    #[test]
    fn anything_malformed_reads_as_nothing() {
        let good = render(&sample());
        let id = Uuid::from_u128(1);
        for bad in [
            String::new(),
            good.trim_end().to_string(), // torn: no final newline
            good.replace(" 1\n3\n", " 2\n3\n"),
            good.replace("\n3\n", "\n4\n"),
            good.replace("\n3\n", "\n2\n"),
            good.replace(" 17\n", " -17\n"),
            good.replace(" 17\n", " 17 9\n"),
            good.replace("orders 0", "orders x"),
            format!("{MAGIC} {VERSION}\n2\nt 0 {id} 1\nt 0 {id} 2\n"),
            format!("{MAGIC} {VERSION}\n1\nt 0 not-a-uuid 1\n"),
        ] {
            assert_eq!(parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn opens_what_was_written_and_skips_unchanged_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hws = HighWatermarks::open(dir.path()).expect("open");
        assert_eq!(hws.checkpointed(key(2, 1)), None);
        let since = hws.generation();
        assert_eq!(
            hws.write_all(since, sample()).unwrap(),
            WriteOutcome::Written
        );
        let since = hws.generation();
        assert_eq!(
            hws.write_all(since, sample()).unwrap(),
            WriteOutcome::Unchanged
        );
        assert_eq!(hws.writes(), 1);
        let reopened = HighWatermarks::open(dir.path()).expect("reopen");
        assert_eq!(reopened.checkpointed(key(2, 1)), Some(17));
        assert_eq!(reopened.checkpointed(key(1, 0)), Some(i64::MAX));
        assert_eq!(reopened.checkpointed(key(3, 0)), None);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [FILE], "no temp file left");
    }

    #[test]
    fn values_gathered_before_a_truncation_are_not_written_over_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hws = HighWatermarks::open(dir.path()).expect("open");
        let since = hws.generation();
        // gathered: orders-1 at 17; then a truncation lowers it to 5
        hws.write_one(key(2, 1), entry("orders", 5)).unwrap();
        assert_eq!(
            hws.write_all(since, sample()).unwrap(),
            WriteOutcome::Superseded
        );
        let reopened = HighWatermarks::open(dir.path()).expect("reopen");
        assert_eq!(reopened.checkpointed(key(2, 1)), Some(5));
        // the next gathering writes, and drops partitions no longer here
        let since = hws.generation();
        let now = Entries::from([(key(2, 1), entry("orders", 6))]);
        assert_eq!(hws.write_all(since, now).unwrap(), WriteOutcome::Written);
        let reopened = HighWatermarks::open(dir.path()).expect("reopen");
        assert_eq!(reopened.checkpointed(key(2, 1)), Some(6));
        assert_eq!(reopened.checkpointed(key(2, 0)), None);
    }

    #[test]
    fn an_unreadable_file_opens_empty_and_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(FILE),
            b"moldau-replication-offset-checkpoint 1\n9\n",
        )
        .unwrap();
        let hws = HighWatermarks::open(dir.path()).expect("open");
        assert_eq!(hws.checkpointed(key(2, 1)), None);
        hws.write_one(key(2, 1), entry("orders", 3)).unwrap();
        let reopened = HighWatermarks::open(dir.path()).expect("reopen");
        assert_eq!(reopened.checkpointed(key(2, 1)), Some(3));
    }
}
