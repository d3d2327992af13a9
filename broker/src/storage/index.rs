//! Sparse, memory-mapped indexes of one segment: the offset index
//! (`.index`: relative offset u32 → file position u32) and the time index
//! (`.timeindex`: timestamp i64 → relative offset u32), both big endian.
//!
//! This module owns the index files only; it never reads the `.log` file.
//! The segment decides when to add entries and asks for sanity checks; a
//! failed check makes the segment rebuild the index from its log.
//!
//! Files are preallocated (zero-filled) to `segment.index.bytes` while their
//! segment is active and trimmed to their entries on roll and close, as in
//! Kafka. The number of entries is recovered from the content: entries are
//! strictly increasing and an all-zero entry marks the end (no real entry is
//! all zeros: offset index entries always have a position > 0, because the
//! first batch of a segment is never indexed, and the time index never
//! stores a `(0, 0)` entry).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// Bytes of one offset index entry.
pub const OFFSET_ENTRY_SIZE: usize = 8;
/// Bytes of one time index entry.
pub const TIME_ENTRY_SIZE: usize = 12;

/// A memory-mapped file of fixed-size entries.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    file: File,
    mmap: MmapMut,
    entry_size: usize,
    entries: usize,
}

fn map(file: &File) -> io::Result<MmapMut> {
    // SAFETY: the index file is private to this partition directory and
    // only this process (which holds the partition lock) changes it; its
    // length only changes through `IndexFile::resize`, which remaps.
    unsafe { MmapMut::map_mut(file) }
}

impl IndexFile {
    fn open(path: &Path, entry_size: usize, is_end: impl Fn(&[u8]) -> bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mmap = map(&file)?;
        let mut index = IndexFile {
            path: path.to_path_buf(),
            file,
            mmap,
            entry_size,
            entries: 0,
        };
        let slots = index.mmap.len() / entry_size;
        index.entries = (0..slots)
            .find(|&i| index.entry(i).is_none_or(&is_end))
            .unwrap_or(slots);
        Ok(index)
    }

    fn capacity(&self) -> usize {
        self.mmap.len() / self.entry_size
    }

    fn is_full(&self) -> bool {
        self.entries >= self.capacity()
    }

    /// Raw bytes of slot `i` (which may lie past the entries).
    fn entry(&self, i: usize) -> Option<&[u8]> {
        let start = i.checked_mul(self.entry_size)?;
        self.mmap.get(start..start.checked_add(self.entry_size)?)
    }

    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.is_full() || bytes.len() != self.entry_size {
            return false;
        }
        let start = self.entries * self.entry_size;
        match self.mmap.get_mut(start..start + self.entry_size) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.entries += 1;
                true
            }
            None => false,
        }
    }

    /// Whether the file length is a whole number of entries and every byte
    /// after the entries is zero.
    fn shape_problem(&self) -> Option<String> {
        let whole = self.mmap.len() / self.entry_size * self.entry_size;
        if whole != self.mmap.len() {
            return Some(format!(
                "length {} is not a multiple of {}",
                self.mmap.len(),
                self.entry_size
            ));
        }
        let used = self.entries * self.entry_size;
        if self.mmap.get(used..).unwrap_or(&[]).iter().any(|&b| b != 0) {
            return Some("non-zero bytes after the last entry".to_string());
        }
        None
    }

    /// Changes the file length to `len` bytes (rounded down to whole
    /// entries, never below the current entries) and remaps.
    fn resize(&mut self, len: u64) -> io::Result<()> {
        let min = (self.entries * self.entry_size) as u64;
        let len = (len - len % self.entry_size as u64).max(min);
        if len == self.mmap.len() as u64 {
            return Ok(());
        }
        self.mmap.flush()?;
        self.file.set_len(len)?;
        self.mmap = map(&self.file)?;
        Ok(())
    }

    /// Removes every entry (zero-fills them).
    fn reset(&mut self) {
        let used = (self.entries * self.entry_size).min(self.mmap.len());
        if let Some(region) = self.mmap.get_mut(..used) {
            region.fill(0);
        }
        self.entries = 0;
    }

    fn flush(&self) -> io::Result<()> {
        self.mmap.flush()?;
        self.file.sync_all()
    }
}

/// Sparse map from offsets to positions in the segment's `.log` file.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    inner: IndexFile,
}

impl OffsetIndex {
    /// Opens (creating if absent) the offset index of the segment starting
    /// at `base_offset`. Call [`OffsetIndex::sanity_check`] before trusting it.
    pub fn open(path: &Path, base_offset: i64) -> io::Result<Self> {
        let inner = IndexFile::open(path, OFFSET_ENTRY_SIZE, |e| {
            e.get(4..8).is_none_or(|p| p == [0; 4])
        })?;
        Ok(OffsetIndex { base_offset, inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }
    pub fn entries(&self) -> usize {
        self.inner.entries
    }
    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }
    /// Current length of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.inner.mmap.len() as u64
    }

    /// Entry `i` as an absolute offset and a position.
    pub fn entry(&self, i: usize) -> Option<(i64, u64)> {
        if i >= self.inner.entries {
            return None;
        }
        let e = self.inner.entry(i)?;
        let rel = u32::from_be_bytes(e.get(0..4)?.try_into().ok()?);
        let pos = u32::from_be_bytes(e.get(4..8)?.try_into().ok()?);
        Some((self.base_offset + i64::from(rel), u64::from(pos)))
    }

    pub fn last_entry(&self) -> Option<(i64, u64)> {
        self.inner
            .entries
            .checked_sub(1)
            .and_then(|i| self.entry(i))
    }

    /// The entry with the largest offset `<= offset`, if any.
    pub fn lookup(&self, offset: i64) -> Option<(i64, u64)> {
        let (mut lo, mut hi) = (0usize, self.inner.entries);
        // Invariant: entries before `lo` are <= offset, entries from `hi` are > offset.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid) {
                Some((o, _)) if o <= offset => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo.checked_sub(1).and_then(|i| self.entry(i))
    }

    /// The position of the last indexed batch start in `(after, limit]`
    /// whose base offset is below `max_offset`, if any. Entries grow in both
    /// offset and position, so this is two binary searches.
    pub fn last_boundary_within(&self, after: u64, limit: u64, max_offset: i64) -> Option<u64> {
        let count_while = |keep: &dyn Fn(i64, u64) -> bool| {
            let (mut lo, mut hi) = (0usize, self.inner.entries);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match self.entry(mid) {
                    Some((o, p)) if keep(o, p) => lo = mid + 1,
                    _ => hi = mid,
                }
            }
            lo
        };
        let within = count_while(&|_, p| p <= limit);
        let below = count_while(&|o, _| o < max_offset);
        let (_, position) = self.entry(within.min(below).checked_sub(1)?)?;
        (position > after).then_some(position)
    }

    /// Adds an entry; returns false (adding nothing) if the index is full or
    /// the entry would not be strictly after the last one or does not fit.
    pub fn append(&mut self, offset: i64, position: u64) -> bool {
        let (Ok(rel), Ok(pos)) = (
            u32::try_from(offset - self.base_offset),
            u32::try_from(position),
        ) else {
            return false;
        };
        if pos == 0 {
            return false;
        }
        if let Some((o, p)) = self.last_entry() {
            if o >= offset || p >= position {
                return false;
            }
        }
        let mut e = [0u8; OFFSET_ENTRY_SIZE];
        e[..4].copy_from_slice(&rel.to_be_bytes());
        e[4..].copy_from_slice(&pos.to_be_bytes());
        self.inner.push(&e)
    }

    /// Checks the index against its log: whole entries, strictly increasing
    /// offsets and positions, positions inside the log (`log_size`),
    /// offsets below `next_offset`, zeros after the last entry.
    pub fn sanity_check(&self, log_size: u64, next_offset: i64) -> std::result::Result<(), String> {
        if let Some(p) = self.inner.shape_problem() {
            return Err(p);
        }
        let mut prev: Option<(i64, u64)> = None;
        for i in 0..self.inner.entries {
            let (o, p) = self.entry(i).ok_or("unreadable entry")?;
            if p >= log_size {
                return Err(format!(
                    "entry {i} points at position {p} past the log end {log_size}"
                ));
            }
            if o >= next_offset {
                return Err(format!(
                    "entry {i} has offset {o} past the segment end {next_offset}"
                ));
            }
            if let Some((po, pp)) = prev {
                if o <= po || p <= pp {
                    return Err(format!("entry {i} is not after entry {}", i - 1));
                }
            }
            prev = Some((o, p));
        }
        Ok(())
    }

    /// Removes all entries.
    pub fn reset(&mut self) {
        self.inner.reset();
    }
    /// Grows or shrinks the file to `bytes` (never below its entries).
    pub fn resize(&mut self, bytes: u64) -> io::Result<()> {
        self.inner.resize(bytes)
    }
    /// Shrinks the file to exactly its entries.
    pub fn trim(&mut self) -> io::Result<()> {
        self.inner.resize(0)
    }
    pub fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    /// Renames the file (the mapping stays valid).
    pub fn rename(&mut self, to: PathBuf) -> io::Result<()> {
        fs::rename(&self.inner.path, &to)?;
        self.inner.path = to;
        Ok(())
    }
}

/// Sparse map from timestamps to offsets: entry `(t, o)` says every record
/// at or before offset `o` has a timestamp `<= t`.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    inner: IndexFile,
}

impl TimeIndex {
    /// Opens (creating if absent) the time index of the segment starting at
    /// `base_offset`. Call [`TimeIndex::sanity_check`] before trusting it.
    pub fn open(path: &Path, base_offset: i64) -> io::Result<Self> {
        let inner = IndexFile::open(path, TIME_ENTRY_SIZE, |e| e.iter().all(|&b| b == 0))?;
        Ok(TimeIndex { base_offset, inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }
    pub fn entries(&self) -> usize {
        self.inner.entries
    }
    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }
    pub fn file_len(&self) -> u64 {
        self.inner.mmap.len() as u64
    }

    /// Entry `i` as a timestamp and an absolute offset.
    pub fn entry(&self, i: usize) -> Option<(i64, i64)> {
        if i >= self.inner.entries {
            return None;
        }
        let e = self.inner.entry(i)?;
        let ts = i64::from_be_bytes(e.get(0..8)?.try_into().ok()?);
        let rel = u32::from_be_bytes(e.get(8..12)?.try_into().ok()?);
        Some((ts, self.base_offset + i64::from(rel)))
    }

    pub fn last_entry(&self) -> Option<(i64, i64)> {
        self.inner
            .entries
            .checked_sub(1)
            .and_then(|i| self.entry(i))
    }

    /// The last entry whose timestamp is strictly below `timestamp`: every
    /// record at or before its offset is older than `timestamp`.
    pub fn lookup_before(&self, timestamp: i64) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = (0usize, self.inner.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid) {
                Some((t, _)) if t < timestamp => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo.checked_sub(1).and_then(|i| self.entry(i))
    }

    /// Adds `(timestamp, offset)` if the timestamp is larger than the last
    /// entry's (and not negative) and the offset not smaller; returns
    /// whether it was added.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> bool {
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            return false;
        };
        if timestamp < 0 || (timestamp == 0 && rel == 0) {
            return false;
        }
        if let Some((t, o)) = self.last_entry() {
            if timestamp <= t || offset < o {
                return false;
            }
        }
        let mut e = [0u8; TIME_ENTRY_SIZE];
        e[..8].copy_from_slice(&timestamp.to_be_bytes());
        e[8..].copy_from_slice(&rel.to_be_bytes());
        self.inner.push(&e)
    }

    /// Checks whole entries, strictly increasing timestamps, non-decreasing
    /// offsets below `next_offset`, zeros after the last entry.
    pub fn sanity_check(&self, next_offset: i64) -> std::result::Result<(), String> {
        if let Some(p) = self.inner.shape_problem() {
            return Err(p);
        }
        let mut prev: Option<(i64, i64)> = None;
        for i in 0..self.inner.entries {
            let (t, o) = self.entry(i).ok_or("unreadable entry")?;
            if o >= next_offset {
                return Err(format!(
                    "entry {i} has offset {o} past the segment end {next_offset}"
                ));
            }
            if t < 0 {
                return Err(format!("entry {i} has negative timestamp {t}"));
            }
            if let Some((pt, po)) = prev {
                if t <= pt || o < po {
                    return Err(format!("entry {i} is not after entry {}", i - 1));
                }
            }
            prev = Some((t, o));
        }
        Ok(())
    }

    pub fn reset(&mut self) {
        self.inner.reset();
    }
    pub fn resize(&mut self, bytes: u64) -> io::Result<()> {
        self.inner.resize(bytes)
    }
    pub fn trim(&mut self) -> io::Result<()> {
        self.inner.resize(0)
    }
    pub fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    pub fn rename(&mut self, to: PathBuf) -> io::Result<()> {
        fs::rename(&self.inner.path, &to)?;
        self.inner.path = to;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_boundary_within_respects_range_and_max_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut idx = OffsetIndex::open(&dir.path().join("0.index"), 0).expect("open");
        idx.resize(80).expect("prealloc");
        assert_eq!(
            idx.last_boundary_within(0, u64::MAX, i64::MAX),
            None,
            "empty"
        );
        for (o, p) in [(10, 1000), (20, 2000), (30, 3000)] {
            assert!(idx.append(o, p));
        }
        assert_eq!(idx.last_boundary_within(0, 2500, i64::MAX), Some(2000));
        assert_eq!(idx.last_boundary_within(0, 3000, i64::MAX), Some(3000));
        assert_eq!(idx.last_boundary_within(0, 999, i64::MAX), None);
        assert_eq!(
            idx.last_boundary_within(0, 5000, 30),
            Some(2000),
            "base 30 is not below 30"
        );
        assert_eq!(
            idx.last_boundary_within(2000, 2500, i64::MAX),
            None,
            "strictly after `after`"
        );
        assert_eq!(idx.last_boundary_within(1000, 2500, i64::MAX), Some(2000));
    }

    #[test]
    fn offset_index_append_lookup_trim_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::open(&path, 100).expect("open");
        idx.resize(80).expect("prealloc");
        assert_eq!(idx.lookup(150), None);
        assert!(!idx.append(100, 0), "position 0 is never indexed");
        assert!(idx.append(110, 1000));
        assert!(idx.append(120, 2000));
        assert!(!idx.append(120, 3000), "offsets strictly increase");
        assert!(!idx.append(130, 1500), "positions strictly increase");
        assert!(idx.append(130, 3000));
        assert_eq!(idx.lookup(105), None);
        assert_eq!(idx.lookup(110), Some((110, 1000)));
        assert_eq!(idx.lookup(125), Some((120, 2000)));
        assert_eq!(idx.lookup(i64::MAX), Some((130, 3000)));
        assert!(idx.sanity_check(4000, 140).is_ok());
        assert!(
            idx.sanity_check(3000, 140).is_err(),
            "position past the log"
        );
        assert!(
            idx.sanity_check(4000, 130).is_err(),
            "offset past the segment"
        );
        idx.flush().expect("flush");
        drop(idx);
        // Reopened while still preallocated: entries end at the zeros.
        let mut idx = OffsetIndex::open(&path, 100).expect("reopen");
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.file_len(), 80);
        idx.trim().expect("trim");
        assert_eq!(fs::metadata(&path).expect("meta").len(), 24);
        drop(idx);
        let idx = OffsetIndex::open(&path, 100).expect("reopen");
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.lookup(129), Some((120, 2000)));
        assert!(idx.sanity_check(4000, 140).is_ok());
    }

    #[test]
    fn offset_index_detects_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.index");
        // Not a whole number of entries.
        fs::write(&path, [0u8, 0, 0, 1, 0, 0, 0, 9, 1]).expect("write");
        assert!(OffsetIndex::open(&path, 0)
            .expect("open")
            .sanity_check(100, 10)
            .is_err());
        // Decreasing entries.
        let mut bytes = Vec::new();
        for (r, p) in [(5u32, 50u32), (3, 60)] {
            bytes.extend_from_slice(&r.to_be_bytes());
            bytes.extend_from_slice(&p.to_be_bytes());
        }
        fs::write(&path, &bytes).expect("write");
        assert!(OffsetIndex::open(&path, 0)
            .expect("open")
            .sanity_check(100, 10)
            .is_err());
        // Garbage after an end marker.
        let mut bytes = vec![0u8; 8];
        bytes.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        fs::write(&path, &bytes).expect("write");
        let idx = OffsetIndex::open(&path, 0).expect("open");
        assert_eq!(idx.entries(), 0);
        assert!(idx.sanity_check(100, 10).is_err());
    }

    #[test]
    fn time_index_append_lookup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.timeindex");
        let mut idx = TimeIndex::open(&path, 10).expect("open");
        idx.resize(120).expect("prealloc");
        assert!(!idx.maybe_append(-1, 11), "no negative timestamps");
        assert!(idx.maybe_append(1000, 12));
        assert!(!idx.maybe_append(1000, 13), "timestamps strictly increase");
        assert!(!idx.maybe_append(2000, 11), "offsets never go back");
        assert!(idx.maybe_append(2000, 15));
        assert!(idx.maybe_append(3000, 15));
        assert_eq!(idx.lookup_before(1000), None);
        assert_eq!(idx.lookup_before(1001), Some((1000, 12)));
        assert_eq!(idx.lookup_before(2500), Some((2000, 15)));
        assert_eq!(idx.last_entry(), Some((3000, 15)));
        assert!(idx.sanity_check(16).is_ok());
        assert!(idx.sanity_check(15).is_err());
        idx.trim().expect("trim");
        drop(idx);
        let idx = TimeIndex::open(&path, 10).expect("reopen");
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.file_len(), 36);
    }
}
