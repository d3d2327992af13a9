//! Aborted-transaction index files of one partition directory (Kafka's
//! `<base>.txnindex`, issue 37): one per segment that holds an ABORT
//! marker, listing the transactions whose abort markers that segment
//! holds, so a read_committed fetch can tell consumers which producers'
//! records in its range to drop.
//!
//! This module owns the files and their bytes only: which transactions
//! were aborted, and when a file is rebuilt, is the partition's business
//! (`partition`'s transaction state replays control batches for it).
//!
//! Each entry is Kafka's 34 bytes, big-endian: `version i16` (0),
//! `producer_id i64`, `first_offset i64`, `last_offset i64` (the abort
//! marker's offset), `last_stable_offset i64` (the partition's LSO once the
//! transaction ended). Entries are appended in marker order. A reader
//! takes every whole entry of a known version and stops at the first
//! partial (a torn tail after an unclean stop) or unknown one; the
//! partition then rebuilds what is missing from the log. An append first
//! cuts such an unreadable tail off: written behind it, the rebuilt entry
//! would be unreadable too (or misread), and lost at the next start.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::Path;

use super::checkpoint;
use super::segment;
use super::Result;

/// Suffix of an aborted-transaction index file.
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Size of one entry.
pub const ENTRY_LEN: usize = 34;
/// The entry version written (Kafka's `AbortedTxn.CURRENT_VERSION`).
pub const VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
    /// The partition's last stable offset once it ended.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// Its 34 bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[..2].copy_from_slice(&VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// One entry from `b` (exactly [`ENTRY_LEN`] bytes), `None` for an
    /// unknown version.
    fn decode(b: &[u8; ENTRY_LEN]) -> Option<Self> {
        let i64_at = |at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            i64::from_be_bytes(x)
        };
        (i16::from_be_bytes([b[0], b[1]]) == VERSION).then(|| AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// The whole entries of a file's bytes (see the module doc for where it
/// stops).
pub fn decode_all(bytes: &[u8]) -> Vec<AbortedTxn> {
    bytes
        .chunks_exact(ENTRY_LEN)
        .map_while(|c| c.try_into().ok().and_then(AbortedTxn::decode))
        .collect()
}

/// The file name of the index of the segment based at `base`.
pub fn file_name(base: i64) -> String {
    segment::file_name(base, TXN_INDEX_SUFFIX)
}

/// The base offsets of the index files in `dir`, ascending.
pub fn list(dir: &Path) -> Result<Vec<i64>> {
    let mut offsets = Vec::new();
    for entry in fs::read_dir(dir)? {
        if let Some(o) = entry?
            .file_name()
            .to_str()
            .and_then(|n| segment::parse_file_name(n, TXN_INDEX_SUFFIX))
        {
            offsets.push(o);
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

/// The entries of the index of segment `base` (none without a file).
pub fn read(dir: &Path, base: i64) -> Result<Vec<AbortedTxn>> {
    match fs::read(dir.join(file_name(base))) {
        Ok(bytes) => Ok(decode_all(&bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Appends `entry` to the index of segment `base` (written with the
/// segment: made durable by the same flush policy, rebuilt from the log
/// when a crash loses it).
pub fn append(dir: &Path, base: i64, entry: &AbortedTxn) -> Result<()> {
    let path = dir.join(file_name(base));
    let existing = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let readable = decode_all(&existing).len() * ENTRY_LEN;
    if readable < existing.len() {
        // a torn or unknown entry: what follows it would never be read
        f.set_len(readable as u64)?;
    }
    f.write_all(&entry.encode())?;
    Ok(())
}

/// Replaces the index of segment `base` with `entries` atomically (none:
/// the file goes).
pub fn rewrite(dir: &Path, base: i64, entries: &[AbortedTxn]) -> Result<()> {
    if entries.is_empty() {
        return remove(dir, base);
    }
    let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    checkpoint::write_atomically(dir, &file_name(base), &bytes)
}

/// Removes the index of segment `base`, if any.
pub fn remove(dir: &Path, base: i64) -> Result<()> {
    match fs::remove_file(dir.join(file_name(base))) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: i64, first: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: first + 5,
            last_stable_offset: first + 6,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let e = AbortedTxn {
            producer_id: 0x0102,
            first_offset: 3,
            last_offset: 4,
            last_stable_offset: 5,
        };
        let b = e.encode();
        assert_eq!(&b[..2], &[0, 0]);
        assert_eq!(&b[2..10], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(b[17], 3);
        assert_eq!(b[25], 4);
        assert_eq!(b[33], 5);
        assert_eq!(decode_all(&b), vec![e]);
    }

    #[test]
    fn files_append_rewrite_and_stop_at_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(read(d, 0).unwrap(), vec![]);
        append(d, 100, &entry(1, 100)).unwrap();
        append(d, 100, &entry(2, 110)).unwrap();
        assert!(d.join("00000000000000000100.txnindex").is_file());
        assert_eq!(read(d, 100).unwrap(), vec![entry(1, 100), entry(2, 110)]);
        assert_eq!(list(d).unwrap(), vec![100]);
        // a torn tail and an entry of an unknown version end the reading
        let path = d.join(file_name(100));
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 1]);
        fs::write(&path, &bytes).unwrap();
        assert_eq!(read(d, 100).unwrap().len(), 2);
        let mut unknown = entry(3, 120).encode();
        unknown[1] = 9;
        let mut bytes = entry(1, 100).encode().to_vec();
        bytes.extend_from_slice(&unknown);
        bytes.extend_from_slice(&entry(4, 130).encode());
        fs::write(&path, &bytes).unwrap();
        assert_eq!(read(d, 100).unwrap(), vec![entry(1, 100)]);
        rewrite(d, 100, &[entry(5, 100)]).unwrap();
        assert_eq!(read(d, 100).unwrap(), vec![entry(5, 100)]);
        rewrite(d, 100, &[]).unwrap();
        assert_eq!(list(d).unwrap(), Vec::<i64>::new());
    }
}
