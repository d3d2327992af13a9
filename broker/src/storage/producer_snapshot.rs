//! Producer-state snapshot files of one partition directory.
//!
//! This module owns the `<offset, 20 digits>.snapshot` files: their binary
//! format, their atomic write, which of them a start may use, and their
//! pruning. It knows nothing of the rules of idempotent producers
//! (`producer::state` turns its table into [`SnapshotEntry`]s and back) and
//! never reads segments (the log replays the batches after a snapshot).
//!
//! A snapshot named `N` holds the producer state after every batch below
//! offset `N`: loading it and replaying the batches from `N` to the log end
//! gives the state a full scan of the log would give. The log writes one at
//! each segment roll of an append and at clean shutdown (at the log end),
//! keeps at most two, and removes those past the log end on truncation and
//! those below the log start on retention and DeleteRecords.
//!
//! Format (all integers big-endian):
//!
//! ```text
//! magic   u32  0x4d505353 ("MPSS")
//! version u16  2 (1 is still read)
//! crc     u32  CRC-32C of everything after this field
//! offset  i64  the offset the snapshot covers up to (= the file name)
//! count   u32  number of producers, then per producer:
//!   producer_id i64, epoch i16, batches u8, then per batch (oldest first):
//!     first_seq i32, last_seq i32, first_offset i64
//!   then (version 2 only):
//!     current_txn_first_offset i64 (-1: no open transaction),
//!     coordinator_epoch i32 (-1: no marker seen)
//! ```
//!
//! Version 2 carries what Kafka's snapshot calls `CurrentTxnFirstOffset`
//! and `CoordinatorEpoch` (issue 37): the first offset of each producer's
//! open transaction, so the last stable offset survives a restart and a
//! leader change without a scan. A version 1 file reads as "no open
//! transaction, no coordinator epoch".
//!
//! A file whose magic, version, CRC, length or offset does not check out is
//! ignored with a warning; the next older snapshot (or a full scan) is used.
//! Files are written as `<name>.tmp`, fsynced, renamed and the directory
//! fsynced (as every checkpoint is, see `checkpoint`).

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use super::checkpoint;
use super::segment;
use super::Result;

/// Suffix of a snapshot file.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// How many snapshots a partition keeps at most.
pub const MAX_SNAPSHOTS: usize = 2;

const MAGIC: u32 = 0x4d50_5353;
const VERSION: u16 = 2;
/// The version before open transactions were kept: still read.
const VERSION_1: u16 = 1;
const HEADER_LEN: usize = 4 + 2 + 4;
const ENTRY_FIXED_LEN: usize = 8 + 2 + 1;
const BATCH_LEN: usize = 4 + 4 + 8;
const TXN_LEN: usize = 8 + 4;

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
}

/// The state of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// Oldest first; at most 255 (the state keeps 5).
    pub batches: Vec<SnapshotBatch>,
    /// The first offset of its open transaction (-1: none).
    pub current_txn_first_offset: i64,
    /// The coordinator epoch of the last marker it got (-1: none).
    pub coordinator_epoch: i32,
}

/// The file name of the snapshot covering up to `offset`.
pub fn file_name(offset: i64) -> String {
    segment::file_name(offset, SNAPSHOT_SUFFIX)
}

/// Serializes a snapshot covering up to `offset`.
pub fn encode(offset: i64, entries: &[SnapshotEntry]) -> Vec<u8> {
    let body_len: usize = 12
        + entries
            .iter()
            .map(|e| ENTRY_FIXED_LEN + TXN_LEN + BATCH_LEN * e.batches.len().min(255))
            .sum::<usize>();
    let mut out = Vec::with_capacity(HEADER_LEN + body_len);
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        // The newest batches matter (duplicates and the next sequence).
        let batches = &e.batches[e.batches.len().saturating_sub(255)..];
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.epoch.to_be_bytes());
        out.push(batches.len() as u8);
        for b in batches {
            out.extend_from_slice(&b.first_seq.to_be_bytes());
            out.extend_from_slice(&b.last_seq.to_be_bytes());
            out.extend_from_slice(&b.first_offset.to_be_bytes());
        }
        out.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
    }
    let crc = crc32c::crc32c(&out[HEADER_LEN..]);
    out[6..10].copy_from_slice(&crc.to_be_bytes());
    out
}

/// A cursor over a byte slice that fails on a short read.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        if self.0.len() < N {
            return Err("truncated".to_string());
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("N bytes"))
    }
}

/// Parses a snapshot: `(offset it covers up to, entries)`, or why not.
pub fn decode(bytes: &[u8]) -> std::result::Result<(i64, Vec<SnapshotEntry>), String> {
    let mut r = Reader(bytes);
    let magic = u32::from_be_bytes(r.take()?);
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#x}"));
    }
    let version = u16::from_be_bytes(r.take()?);
    if version != VERSION && version != VERSION_1 {
        return Err(format!("unsupported version {version}"));
    }
    let crc = u32::from_be_bytes(r.take()?);
    let actual = crc32c::crc32c(r.0);
    if crc != actual {
        return Err(format!("CRC {actual:#x} where {crc:#x} was written"));
    }
    let offset = i64::from_be_bytes(r.take()?);
    let count = u32::from_be_bytes(r.take()?) as usize;
    // Each entry takes at least ENTRY_FIXED_LEN bytes: a bad count cannot
    // make us allocate more than the file holds.
    let mut entries = Vec::with_capacity(count.min(r.0.len() / ENTRY_FIXED_LEN));
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(r.take()?);
        let epoch = i16::from_be_bytes(r.take()?);
        let [n] = r.take::<1>()?;
        let mut batches = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            batches.push(SnapshotBatch {
                first_seq: i32::from_be_bytes(r.take()?),
                last_seq: i32::from_be_bytes(r.take()?),
                first_offset: i64::from_be_bytes(r.take()?),
            });
        }
        let (current_txn_first_offset, coordinator_epoch) = if version == VERSION_1 {
            (-1, -1)
        } else {
            (i64::from_be_bytes(r.take()?), i32::from_be_bytes(r.take()?))
        };
        entries.push(SnapshotEntry {
            producer_id,
            epoch,
            batches,
            current_txn_first_offset,
            coordinator_epoch,
        });
    }
    if !r.0.is_empty() {
        return Err(format!("{} trailing bytes", r.0.len()));
    }
    Ok((offset, entries))
}

/// The offsets of the snapshots in `dir`, ascending.
pub fn list(dir: &Path) -> Result<Vec<i64>> {
    let mut offsets = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(o) = entry
            .file_name()
            .to_str()
            .and_then(|n| segment::parse_file_name(n, SNAPSHOT_SUFFIX))
        {
            offsets.push(o);
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

/// Writes the snapshot covering up to `offset` atomically.
pub fn write(dir: &Path, offset: i64, entries: &[SnapshotEntry]) -> Result<()> {
    checkpoint::write_atomically(dir, &file_name(offset), &encode(offset, entries))
}

/// Reads one snapshot file; `Err` with the reason when it is not usable.
fn read(dir: &Path, offset: i64) -> std::result::Result<Vec<SnapshotEntry>, String> {
    let bytes = fs::read(dir.join(file_name(offset))).map_err(|e| e.to_string())?;
    let (covered, entries) = decode(&bytes)?;
    if covered != offset {
        return Err(format!("covers offset {covered}, named {offset}"));
    }
    Ok(entries)
}

/// The newest usable snapshot with `min <= offset <= max`: `(offset,
/// entries)`. Unusable ones (corrupt, unsupported version) are skipped
/// with a warning, so the next older one is tried.
pub fn latest(dir: &Path, min: i64, max: i64) -> Result<Option<(i64, Vec<SnapshotEntry>)>> {
    for offset in list(dir)?.into_iter().rev() {
        if offset > max {
            continue;
        }
        if offset < min {
            break;
        }
        match read(dir, offset) {
            Ok(entries) => return Ok(Some((offset, entries))),
            Err(problem) => {
                tracing::warn!(dir = %dir.display(), offset, %problem, "ignoring an unusable producer state snapshot");
            }
        }
    }
    Ok(None)
}

fn remove(dir: &Path, offset: i64) -> Result<()> {
    match fs::remove_file(dir.join(file_name(offset))) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes the snapshots outside `[min, max]` (past the log end after a
/// truncation, below the log start after retention). The directory is
/// fsynced when one was removed past `max`: a snapshot of a truncated
/// history must not reappear after a crash once the log grows past it again.
pub fn remove_outside(dir: &Path, min: i64, max: i64) -> Result<usize> {
    let mut removed = 0;
    let mut above = false;
    for offset in list(dir)? {
        if offset < min || offset > max {
            remove(dir, offset)?;
            removed += 1;
            above |= offset > max;
        }
    }
    if above {
        checkpoint::fsync_dir(dir)?;
    }
    Ok(removed)
}

/// Keeps at most [`MAX_SNAPSHOTS`]: the newest, and the newest at or below
/// `recovery_point` (what an unclean start can use) or, when that is the
/// newest, the one before it.
pub fn prune(dir: &Path, recovery_point: i64) -> Result<usize> {
    let offsets = list(dir)?;
    if offsets.len() <= MAX_SNAPSHOTS {
        return Ok(0);
    }
    let newest = offsets[offsets.len() - 1];
    let second = match offsets.iter().rev().find(|&&o| o <= recovery_point) {
        Some(&o) if o != newest => o,
        _ => offsets[offsets.len() - 2],
    };
    let mut removed = 0;
    for o in offsets {
        if o != newest && o != second {
            remove(dir, o)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<SnapshotEntry> {
        vec![
            SnapshotEntry {
                producer_id: 7,
                epoch: 3,
                batches: vec![
                    SnapshotBatch {
                        first_seq: 0,
                        last_seq: 4,
                        first_offset: 100,
                    },
                    SnapshotBatch {
                        first_seq: 5,
                        last_seq: 9,
                        first_offset: 105,
                    },
                ],
                current_txn_first_offset: 101,
                coordinator_epoch: 4,
            },
            SnapshotEntry {
                producer_id: i64::MAX,
                epoch: -1,
                batches: vec![],
                current_txn_first_offset: -1,
                coordinator_epoch: -1,
            },
        ]
    }

    #[test]
    fn round_trip() {
        let bytes = encode(12345, &entries());
        assert_eq!(decode(&bytes), Ok((12345, entries())));
        assert_eq!(decode(&encode(0, &[])), Ok((0, vec![])));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 12345, &entries()).unwrap();
        assert!(dir.path().join("00000000000000012345.snapshot").is_file());
        assert_eq!(list(dir.path()).unwrap(), vec![12345]);
        assert_eq!(
            latest(dir.path(), 0, i64::MAX).unwrap(),
            Some((12345, entries()))
        );
    }

    #[test]
    fn version_1_files_read_without_open_transactions() {
        // A version 1 file: no transaction fields after the batches.
        let mut body = Vec::new();
        body.extend_from_slice(&12i64.to_be_bytes());
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&7i64.to_be_bytes());
        body.extend_from_slice(&3i16.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&4i32.to_be_bytes());
        body.extend_from_slice(&8i64.to_be_bytes());
        let mut file = Vec::new();
        file.extend_from_slice(&MAGIC.to_be_bytes());
        file.extend_from_slice(&1u16.to_be_bytes());
        file.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        file.extend_from_slice(&body);
        let (offset, entries) = decode(&file).unwrap();
        assert_eq!(offset, 12);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].current_txn_first_offset, -1);
        assert_eq!(entries[0].coordinator_epoch, -1);
        assert_eq!(entries[0].batches[0].first_offset, 8);
    }

    #[test]
    fn corruption_is_detected() {
        let good = encode(5, &entries());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipped byte {i} went unnoticed");
        }
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "cut at {len} went unnoticed");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut v2 = good;
        v2[5] = 3;
        assert!(decode(&v2).unwrap_err().contains("version"));
    }

    #[test]
    fn corrupt_and_misnamed_snapshots_fall_back_to_older_ones() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, 10, &entries()).unwrap();
        write(d, 20, &entries()[..1]).unwrap();
        write(d, 30, &[]).unwrap();
        // 30: bad CRC; 20: unsupported version
        let p30 = d.join(file_name(30));
        let mut b = fs::read(&p30).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        fs::write(&p30, b).unwrap();
        let p20 = d.join(file_name(20));
        let mut b = fs::read(&p20).unwrap();
        b[5] = 9;
        fs::write(&p20, b).unwrap();
        assert_eq!(latest(d, 0, 100).unwrap(), Some((10, entries())));
        // a file whose content names another offset
        fs::copy(d.join(file_name(10)), d.join(file_name(40))).unwrap();
        assert_eq!(latest(d, 0, 100).unwrap().map(|s| s.0), Some(10));
        assert_eq!(latest(d, 11, 100).unwrap(), None);
    }

    #[test]
    fn selection_takes_the_latest_in_range() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for o in [0, 10, 20, 30] {
            write(d, o, &[]).unwrap();
        }
        fs::write(d.join("junk.snapshot"), b"x").unwrap();
        assert_eq!(list(d).unwrap(), vec![0, 10, 20, 30]);
        assert_eq!(latest(d, 0, 25).unwrap().map(|s| s.0), Some(20));
        assert_eq!(latest(d, 0, 20).unwrap().map(|s| s.0), Some(20));
        assert_eq!(latest(d, 0, 9).unwrap().map(|s| s.0), Some(0));
        assert_eq!(latest(d, 11, 19).unwrap(), None);
        assert_eq!(latest(d, 0, -1).unwrap(), None);
    }

    #[test]
    fn pruning_keeps_the_newest_and_one_an_unclean_start_can_use() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for o in [0, 10, 20, 30] {
            write(d, o, &[]).unwrap();
        }
        assert_eq!(prune(d, 10).unwrap(), 2);
        assert_eq!(list(d).unwrap(), vec![10, 30]);
        write(d, 40, &[]).unwrap();
        assert_eq!(prune(d, 40).unwrap(), 1);
        assert_eq!(list(d).unwrap(), vec![30, 40]);
        write(d, 50, &[]).unwrap();
        assert_eq!(prune(d, 0).unwrap(), 1);
        assert_eq!(list(d).unwrap(), vec![40, 50]);
        // truncation and retention
        assert_eq!(remove_outside(d, 0, 45).unwrap(), 1);
        assert_eq!(list(d).unwrap(), vec![40]);
        write(d, 60, &[]).unwrap();
        assert_eq!(remove_outside(d, 41, i64::MAX).unwrap(), 1);
        assert_eq!(list(d).unwrap(), vec![60]);
    }
}
