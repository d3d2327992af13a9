//! Sparse, memory-mapped indexes of one segment: the offset index
//! (`.index`: relative offset u32 → file position u32) and the time index
//! (`.timeindex`: timestamp i64 → relative offset u32), both big endian.
//!
//! This module owns the index files only; it never reads the `.log` file.
//! The segment decides when to add entries and asks for sanity checks; a
//! failed check makes the segment rebuild the index from its log.
//!
//! While their segment is active, index files grow on demand, page by page
//! (doubling), up to `segment.index.bytes`, and are trimmed to their entries
//! on roll and close, as in Kafka. The number of entries is recovered from
//! the content: entries are strictly increasing and an all-zero entry marks
//! the end (no real entry is all zeros: offset index entries always have a
//! position > 0, because the first batch of a segment is never indexed, and
//! the time index never stores a `(0, 0)` entry).
//!
//! **Space is reserved before it is mapped.** Every byte of a mapping is
//! backed by blocks reserved with `posix_fallocate` (never a sparse
//! `ftruncate`), so a store through the map can never raise SIGBUS on a
//! full filesystem (tmpfs included): when the reservation fails the
//! operation fails with an I/O error instead. An existing file is checked
//! the same way when opened (it may be sparse: written by an older version
//! or copied); if its holes cannot be reserved it is trimmed to its entries,
//! and if even that cannot be backed the index is *detached*: its entries
//! are kept in anonymous memory and the file is removed, so the segment's
//! indexes are rebuilt at the next start. Reads keep working either way.
//!
//! Sealed indexes do not keep a file descriptor: only the mapping stays
//! (`msync` makes it durable); the file is reopened by path if it must be
//! resized again.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};

/// Bytes of one offset index entry.
pub const OFFSET_ENTRY_SIZE: usize = 8;
/// Bytes of one time index entry.
pub const TIME_ENTRY_SIZE: usize = 12;

/// Growth step of an active index (and its first reservation): one page.
const GROWTH_STEP: u64 = 4096;

/// Reserves (allocates) `len` bytes at `offset` of `file`, extending it if
/// needed, with `posix_fallocate` (which falls back to writing zeros into
/// holes on filesystems without `fallocate`). Afterwards every page of the
/// range is backed, so stores through a mapping cannot fail for space.
pub fn reserve_space(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    loop {
        // SAFETY: plain syscall wrapper on a valid open descriptor.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), off, n) };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// A memory-mapped file of fixed-size entries.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    /// Open while the index may grow; `None` once sealed (reopened by path
    /// on demand) or when detached.
    file: Option<File>,
    /// Every byte of it is reserved on disk (or anonymous when detached).
    mmap: MmapMut,
    entry_size: usize,
    entries: usize,
    /// Largest length growth may reach (whole entries).
    max_len: u64,
    /// The file was removed and the entries live in anonymous memory only.
    detached: bool,
}

fn map(file: &File, len: u64) -> io::Result<MmapMut> {
    if len == 0 {
        return MmapMut::map_anon(0);
    }
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: the index file is private to this partition directory and
    // only this process (which holds the partition lock) changes it; its
    // length only changes through `IndexFile::resize`, which remaps, and
    // the whole mapped range is reserved (`reserve_space`) beforehand.
    unsafe { MmapOptions::new().len(len).map_mut(file) }
}

/// Reads the whole file with `pread` (which never allocates blocks for holes).
fn read_all(file: &File, len: u64) -> io::Result<Vec<u8>> {
    let n = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

fn count_entries(bytes: &[u8], entry_size: usize, is_end: &dyn Fn(&[u8]) -> bool) -> usize {
    bytes
        .chunks(entry_size)
        .take_while(|e| e.len() == entry_size && !is_end(e))
        .count()
}

impl IndexFile {
    fn open(path: &Path, entry_size: usize, is_end: impl Fn(&[u8]) -> bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        let mut index = match reserve_space(&file, 0, len) {
            Ok(()) => IndexFile {
                path: path.to_path_buf(),
                mmap: map(&file, len)?,
                file: Some(file),
                entry_size,
                entries: 0,
                max_len: len,
                detached: false,
            },
            Err(e) => Self::open_degraded(path, file, len, entry_size, &is_end, e)?,
        };
        let slots = index.mmap.len() / entry_size;
        index.entries = (0..slots)
            .find(|&i| index.entry(i).is_none_or(&is_end))
            .unwrap_or(slots);
        Ok(index)
    }

    /// The file has holes that cannot be reserved (a full filesystem):
    /// trim it to its entries (written bytes are backed); if even that
    /// cannot be reserved, detach.
    fn open_degraded(
        path: &Path,
        file: File,
        len: u64,
        entry_size: usize,
        is_end: &dyn Fn(&[u8]) -> bool,
        cause: io::Error,
    ) -> io::Result<Self> {
        let bytes = read_all(&file, len)?;
        let used = (count_entries(&bytes, entry_size, is_end) * entry_size) as u64;
        tracing::warn!(path = %path.display(), error = %cause, len, used, "cannot reserve space for an index; trimming it to its entries");
        let trimmed = file
            .set_len(used)
            .and_then(|()| reserve_space(&file, 0, used))
            .and_then(|()| map(&file, used));
        match trimmed {
            Ok(mmap) => Ok(IndexFile {
                path: path.to_path_buf(),
                file: Some(file),
                mmap,
                entry_size,
                entries: 0,
                max_len: used,
                detached: false,
            }),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "keeping the index in memory only; it is rebuilt at the next start");
                let keep = usize::try_from(used).unwrap_or(0).min(bytes.len());
                let mut index = IndexFile {
                    path: path.to_path_buf(),
                    file: None,
                    mmap: MmapMut::map_anon(keep)?,
                    entry_size,
                    entries: 0,
                    max_len: used,
                    detached: false,
                };
                if let (Some(dst), Some(src)) = (index.mmap.get_mut(..keep), bytes.get(..keep)) {
                    dst.copy_from_slice(src);
                }
                drop(file);
                index.detach();
                Ok(index)
            }
        }
    }

    /// Moves the entries to anonymous memory and removes the file (which
    /// frees its space), so that a later start rebuilds the index from the
    /// log. Used when the filesystem cannot back the index any more.
    fn detach(&mut self) {
        if !self.detached {
            if let Ok(mut anon) = MmapMut::map_anon(self.mmap.len()) {
                anon.copy_from_slice(&self.mmap);
                self.mmap = anon;
            }
            // If that allocation failed the file mapping stays: it is
            // wholly reserved, so it is still safe to use.
            self.file = None;
            self.detached = true;
            match fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a detached index")
                }
            }
        }
    }

    fn capacity(&self) -> usize {
        self.max_len.max(self.mmap.len() as u64) as usize / self.entry_size
    }

    fn is_full(&self) -> bool {
        self.entries >= self.capacity()
    }

    /// Raw bytes of slot `i` (which may lie past the entries).
    fn entry(&self, i: usize) -> Option<&[u8]> {
        let start = i.checked_mul(self.entry_size)?;
        self.mmap.get(start..start.checked_add(self.entry_size)?)
    }

    /// Makes sure `extra` more entries fit without growing (up to the
    /// maximum length), growing the file (and its reservation) if needed.
    fn reserve(&mut self, extra: usize) -> io::Result<()> {
        let es = self.entry_size as u64;
        let cap = self.capacity() as u64 * es;
        let want = ((self.entries.saturating_add(extra)) as u64)
            .saturating_mul(es)
            .min(cap);
        let len = self.mmap.len() as u64;
        if want <= len {
            return Ok(());
        }
        let target = want
            .max(len.saturating_mul(2))
            .max(GROWTH_STEP)
            .div_ceil(GROWTH_STEP)
            .saturating_mul(GROWTH_STEP)
            .min(cap);
        self.resize(target - target % es)
    }

    /// Whether [`IndexFile::reserve`] of `extra` entries would grow the file.
    fn needs_growth(&self, extra: usize) -> bool {
        let es = self.entry_size as u64;
        let cap = self.capacity() as u64 * es;
        let want = (self.entries.saturating_add(extra) as u64)
            .saturating_mul(es)
            .min(cap);
        want > self.mmap.len() as u64
    }

    /// Adds an entry; false if the index is at its maximum length. Growing
    /// the file may fail on a full filesystem: the index is then detached
    /// (callers that must not degrade call `reserve` first).
    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.is_full() || bytes.len() != self.entry_size {
            return false;
        }
        if let Err(e) = self.reserve(1) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot grow an index; keeping it in memory only");
            self.detach();
            if let Err(e) = self.reserve(1) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot grow a detached index");
                return false;
            }
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

    /// The open file, reopening it by path if it was closed.
    fn ensure_file(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            let f = OpenOptions::new().read(true).write(true).open(&self.path)?;
            self.file = Some(f);
        }
        self.file
            .as_ref()
            .ok_or_else(|| io::Error::other("index file not open"))
    }

    /// Changes the file length to `len` bytes (rounded down to whole
    /// entries, never below the current entries) and remaps. Growing
    /// reserves the new bytes first and fails (changing nothing) when they
    /// cannot be reserved.
    fn resize(&mut self, len: u64) -> io::Result<()> {
        let es = self.entry_size as u64;
        let min = (self.entries * self.entry_size) as u64;
        let len = (len - len % es).max(min);
        let cur = self.mmap.len() as u64;
        if len == cur {
            return Ok(());
        }
        if self.detached {
            let n = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
            let mut anon = MmapMut::map_anon(n)?;
            let keep = n.min(self.mmap.len());
            if let (Some(dst), Some(src)) = (anon.get_mut(..keep), self.mmap.get(..keep)) {
                dst.copy_from_slice(src);
            }
            self.mmap = anon;
            return Ok(());
        }
        let mmap = {
            let file = self.ensure_file()?;
            if len > cur {
                if let Err(e) = reserve_space(file, cur, len - cur) {
                    // posix_fallocate may have extended the file before failing.
                    if let Err(e2) = file.set_len(cur) {
                        tracing::warn!(error = %e2, "cannot undo a failed index reservation");
                    }
                    return Err(e);
                }
                map(file, len)?
            } else {
                // Map the shorter length before cutting the file, so the
                // mapping in use never reaches past the end of the file.
                let m = map(file, len)?;
                file.set_len(len)?;
                m
            }
        };
        self.mmap = mmap;
        Ok(())
    }

    fn set_max_len(&mut self, bytes: u64) {
        self.max_len = bytes - bytes % self.entry_size as u64;
    }

    /// Removes every entry (zero-fills them).
    fn reset(&mut self) {
        let used = (self.entries * self.entry_size).min(self.mmap.len());
        if let Some(region) = self.mmap.get_mut(..used) {
            region.fill(0);
        }
        self.entries = 0;
    }

    /// Keeps only the first `n` entries (zero-fills the others).
    fn truncate_entries(&mut self, n: usize) {
        if n >= self.entries {
            return;
        }
        let from = n * self.entry_size;
        let to = (self.entries * self.entry_size).min(self.mmap.len());
        if let Some(region) = self.mmap.get_mut(from..to) {
            region.fill(0);
        }
        self.entries = n;
    }

    /// Removes the entries whose offset (a big-endian u32 relative to
    /// `base` at byte `at` of the entry) is `next_offset` or later.
    fn truncate_to_offset(&mut self, at: usize, base: i64, next_offset: i64) {
        let keep = self.count_prefix(&|e| {
            e.get(at..at + 4)
                .and_then(|r| r.try_into().ok())
                .is_some_and(|r: [u8; 4]| base + i64::from(u32::from_be_bytes(r)) < next_offset)
        });
        self.truncate_entries(keep);
    }

    /// Number of leading entries for which `keep` holds (entries are
    /// sorted, so `keep` must hold for a prefix).
    fn count_prefix(&self, keep: &dyn Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid) {
                Some(e) if keep(e) => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    fn flush(&self) -> io::Result<()> {
        if self.detached {
            return Ok(());
        }
        // msync(MS_SYNC) is an fdatasync of the mapped range (file size
        // included); the descriptor, when still open, also syncs metadata.
        self.mmap.flush()?;
        if let Some(file) = &self.file {
            file.sync_all()?;
        }
        Ok(())
    }

    fn rename(&mut self, to: PathBuf) -> io::Result<()> {
        if !self.detached {
            fs::rename(&self.path, &to)?;
        }
        self.path = to;
        Ok(())
    }
}

/// Methods both index kinds share.
macro_rules! common_index_methods {
    () => {
        pub fn path(&self) -> &Path {
            &self.inner.path
        }
        pub fn entries(&self) -> usize {
            self.inner.entries
        }
        /// Whether no entry can be added without passing the maximum length.
        pub fn is_full(&self) -> bool {
            self.inner.is_full()
        }
        /// Current length of the file in bytes.
        pub fn file_len(&self) -> u64 {
            self.inner.mmap.len() as u64
        }
        /// Removes all entries.
        pub fn reset(&mut self) {
            self.inner.reset();
        }
        /// Grows (reserving the space) or shrinks the file to `bytes`
        /// (never below its entries).
        pub fn resize(&mut self, bytes: u64) -> io::Result<()> {
            self.inner.resize(bytes)
        }
        /// Lets the file grow on demand up to `bytes` (`segment.index.bytes`).
        pub fn set_max_bytes(&mut self, bytes: u64) {
            self.inner.set_max_len(bytes);
        }
        /// Makes room for `extra` more entries (up to the maximum length),
        /// reserving disk space; fails with the I/O error (ENOSPC…) when
        /// the space cannot be reserved.
        pub fn reserve(&mut self, extra: usize) -> io::Result<()> {
            self.inner.reserve(extra)
        }
        /// Whether `reserve(extra)` would have to grow the file (reserve
        /// disk space and map it again).
        pub fn needs_growth(&self, extra: usize) -> bool {
            self.inner.needs_growth(extra)
        }
        /// Shrinks the file to exactly its entries.
        pub fn trim(&mut self) -> io::Result<()> {
            self.inner.resize(0)
        }
        pub fn flush(&self) -> io::Result<()> {
            self.inner.flush()
        }
        /// Closes the file descriptor (the mapping stays valid and is
        /// synced with msync); it is reopened if the index must grow.
        pub fn close_file(&mut self) {
            self.inner.file = None;
        }
        /// Whether the index lives in memory only (its file was removed
        /// because the filesystem could not back it).
        pub fn is_detached(&self) -> bool {
            self.inner.detached
        }
        /// Keeps the entries in memory only and removes the file.
        pub fn detach(&mut self) {
            self.inner.detach();
        }
        /// Renames the file (the mapping stays valid).
        pub fn rename(&mut self, to: PathBuf) -> io::Result<()> {
            self.inner.rename(to)
        }
        /// Follows a rename of the directory holding the file.
        pub fn relocate(&mut self, dir: &Path) {
            if let Some(name) = self.inner.path.file_name() {
                self.inner.path = dir.join(name);
            }
        }
    };
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

    common_index_methods!();

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

    /// Removes the entries pointing at `position` or later (the log is
    /// cut there).
    pub fn truncate_to_position(&mut self, position: u64) {
        let keep = self.inner.count_prefix(&|e| {
            e.get(4..8)
                .and_then(|p| p.try_into().ok())
                .is_some_and(|p: [u8; 4]| u64::from(u32::from_be_bytes(p)) < position)
        });
        self.inner.truncate_entries(keep);
    }

    /// Removes the entries naming `next_offset` or later.
    pub fn truncate_to_offset(&mut self, next_offset: i64) {
        self.inner
            .truncate_to_offset(0, self.base_offset, next_offset);
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

    common_index_methods!();

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

    /// Removes the entries naming `next_offset` or later (the log now
    /// ends before it).
    pub fn truncate_to_offset(&mut self, next_offset: i64) {
        self.inner
            .truncate_to_offset(8, self.base_offset, next_offset);
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

    /// A small tmpfs mounted on a temporary directory for one test (needs
    /// root); unmounted on drop. Without root the test fails loudly unless
    /// `MOLDAU_SKIP_MOUNT_TESTS=1`.
    struct Tmpfs {
        dir: tempfile::TempDir,
    }

    impl Tmpfs {
        fn mount(size: &str) -> Option<Self> {
            let dir = tempfile::tempdir().expect("tempdir");
            let out = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .output();
            match out {
                Ok(o) if o.status.success() => Some(Tmpfs { dir }),
                other => {
                    let why = format!("cannot mount a tmpfs (root needed): {other:?}");
                    if std::env::var("MOLDAU_SKIP_MOUNT_TESTS").as_deref() == Ok("1") {
                        eprintln!("SKIPPED (MOLDAU_SKIP_MOUNT_TESTS=1): {why}");
                        None
                    } else {
                        panic!("{why}; set MOLDAU_SKIP_MOUNT_TESTS=1 to skip");
                    }
                }
            }
        }
        fn path(&self) -> &Path {
            self.dir.path()
        }
        /// Writes a file until the filesystem is full.
        fn fill(&self) -> PathBuf {
            use std::io::Write;
            let path = self.path().join("filler");
            let mut f = File::create(&path).expect("filler");
            let chunk = vec![0xa5u8; 4096];
            while f.write_all(&chunk).is_ok() {}
            path
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }

    fn is_enospc(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ENOSPC)
    }

    #[test]
    fn index_growth_on_a_full_tmpfs_is_an_error_not_sigbus() {
        let Some(fs_) = Tmpfs::mount("256k") else {
            return;
        };
        let path = fs_.path().join("00000000000000000000.index");
        let mut idx = OffsetIndex::open(&path, 0).expect("open");
        idx.set_max_bytes(1 << 20);
        idx.reserve(1).expect("first page while there is space");
        assert_eq!(idx.file_len(), 4096);
        let filler = fs_.fill();
        // The reserved page takes its 512 entries on a full filesystem.
        for i in 1..=512i64 {
            assert!(idx.append(i, i as u64 * 10), "entry {i}");
        }
        // Growing past it cannot be backed: an error, never a signal.
        let err = idx.reserve(1).expect_err("reservation on a full tmpfs");
        assert!(is_enospc(&err), "{err}");
        assert_eq!(idx.file_len(), 4096, "a failed reservation changes nothing");
        assert_eq!(fs::metadata(&path).expect("meta").len(), 4096);
        assert_eq!(idx.lookup(300), Some((300, 3000)));
        // A plain resize fails the same way.
        assert!(idx.resize(8192).is_err());
        // Appending past the reservation (recovery's path) degrades to a
        // memory-only index: the file goes away (freeing its space).
        assert!(idx.append(513, 5130));
        assert!(idx.is_detached());
        assert!(!path.exists());
        assert_eq!(idx.lookup(600), Some((513, 5130)));
        assert_eq!(idx.entries(), 513);
        // Space returns: a new index reserves again.
        fs::remove_file(filler).expect("free space");
        let mut idx2 = TimeIndex::open(&fs_.path().join("1.timeindex"), 0).expect("open");
        idx2.set_max_bytes(1 << 20);
        idx2.reserve(400).expect("space is back");
        assert!(idx2.file_len() >= 400 * TIME_ENTRY_SIZE as u64);
    }

    #[test]
    fn sparse_index_on_a_full_tmpfs_opens_and_serves_without_sigbus() {
        let Some(fs_) = Tmpfs::mount("256k") else {
            return;
        };
        // What older versions left: a sparse file (ftruncate to 1 MiB)
        // with a few entries written at its start.
        let path = fs_.path().join("00000000000000000000.index");
        {
            let f = File::create(&path).expect("create");
            f.set_len(1 << 20).expect("sparse");
            let mut bytes = Vec::new();
            for (r, p) in [(10u32, 100u32), (20, 200), (30, 300)] {
                bytes.extend_from_slice(&r.to_be_bytes());
                bytes.extend_from_slice(&p.to_be_bytes());
            }
            f.write_all_at(&bytes, 0).expect("entries");
        }
        let _filler = fs_.fill();
        let mut idx = OffsetIndex::open(&path, 0).expect("open on a full tmpfs");
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.lookup(25), Some((20, 200)));
        assert!(idx.sanity_check(1000, 100).is_ok());
        assert!(
            idx.file_len() < 1 << 20,
            "the unbacked holes are not mapped"
        );
        // Appending (as recovery does) must not touch an unbacked page.
        idx.set_max_bytes(1 << 20);
        for i in 4..2000i64 {
            idx.append(i * 10, i as u64 * 100);
        }
        assert!(idx.entries() >= 3);
        assert_eq!(idx.lookup(25), Some((20, 200)));
    }
}
