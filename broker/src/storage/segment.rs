//! One segment of a partition log: a `.log` file of record batches plus its
//! `.index` and `.timeindex`.
//!
//! This module owns the files of one segment: writing batches at its end,
//! finding batch boundaries (sparse index, then a short scan of batch
//! headers with `pread`), validating its bytes during recovery, rebuilding
//! its indexes and deleting its files. It knows nothing of the other
//! segments, checkpoints or retention policies (see `log`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use super::batch::{self, BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD, MIN_BATCH_LENGTH};
use super::index::{OffsetIndex, TimeIndex};
use super::{Result, StorageError};

/// Suffix of the record batch file.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of the offset index.
pub const INDEX_SUFFIX: &str = ".index";
/// Suffix of the time index.
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Suffix appended to the files of a segment being deleted.
pub const DELETED_SUFFIX: &str = ".deleted";
/// Suffix of a compacted `.log` being written (discarded by recovery).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a compacted `.log` committed but not yet renamed into place
/// (recovery completes the swap).
pub const SWAP_SUFFIX: &str = ".swap";

/// Smallest preallocation of an index (a few entries), whatever
/// `segment.index.bytes` says, so that an active segment can always index.
pub const MIN_INDEX_BYTES: u64 = 96;

/// `<base offset, 20 digits zero-padded><suffix>`.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Parses `<20 digits><suffix>` into the base offset.
pub fn parse_file_name(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<i64>().ok()
}

/// What the log needs to know about one batch of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Position of the batch inside the appended buffer.
    pub position: u64,
    pub size: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// Result of scanning batch headers without checking CRCs.
#[derive(Debug, Clone, Copy)]
struct HeaderScan {
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    bytes: u64,
}

/// The trusted start of a segment being recovered ([`Segment::recover_after`]).
struct TrustedPrefix {
    /// Where the header walk began (the last kept index entry, or 0).
    scan_start: u64,
    /// The first byte to re-validate.
    end: u64,
    /// The segment's state at `end`; `bytes` counts from `scan_start`.
    scan: HeaderScan,
}

enum TrustedWalk {
    Done(std::result::Result<TrustedPrefix, String>),
    /// The batch at this position, which the offset index names, reaches
    /// the recovery point: it is re-validated, so its entries go.
    IndexedBatchStraddles(u64),
}

/// What recovering one segment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Bytes cut off after the last valid batch.
    pub bytes_cut: u64,
    /// Bytes read to recover (re-validated, plus the header walk).
    pub bytes_read: u64,
}

/// One segment. Positions are `u64` but always below `u32::MAX` (the log
/// never lets a segment grow past `i32::MAX` bytes).
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    size: u64,
    next_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Largest batch max timestamp in the segment, -1 if none.
    max_timestamp: i64,
    /// Last offset of the batch holding `max_timestamp`.
    offset_of_max_timestamp: i64,
    /// Broker time the segment's age (`segment.ms`) counts from; `None`
    /// while empty.
    roll_base_ms: Option<i64>,
    bytes_since_last_index_entry: u64,
    /// The `.log` file was written since its last fsync.
    log_dirty: bool,
    /// The indexes changed (entries, length) since their last msync.
    index_dirty: bool,
}

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptBatch(msg.into())
}

/// The bytes of a sealed segment as they were when taken
/// ([`Segment::sealed_bytes`]): the same open file and its size then,
/// readable without the partition's lock (the cleaner reads them so). If
/// the segment is deleted meanwhile the file stays readable; if it is
/// truncated, reads past the new end fail. Whoever acts on what was read
/// checks under the lock that the segment is still the one taken
/// ([`SealedBytes::is_still`]).
#[derive(Clone, Debug)]
pub struct SealedBytes {
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    size: u64,
}

impl SealedBytes {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    /// Whether `seg` is the segment these bytes were taken from, unchanged
    /// (same file, same base, same size).
    pub fn is_still(&self, seg: &Segment) -> bool {
        Arc::ptr_eq(&self.file, &seg.file)
            && self.base_offset == seg.base_offset
            && self.size == seg.size
    }
    /// Parses the header of the batch at `pos` (wholly inside the bytes).
    pub fn header_at(&self, pos: u64) -> Result<BatchHeader> {
        HeaderReader::new(self, BATCH_HEADER_LEN).header(pos)
    }
    /// Reads the whole batch at `pos` of `size` bytes.
    pub fn read_batch(&self, pos: u64, size: u64) -> Result<Vec<u8>> {
        read_batch_of(self.into(), pos, size)
    }
}

/// Reads `size` bytes at `pos`, which must lie inside the segment.
fn read_batch_of(seg: SegmentView<'_>, pos: u64, size: u64) -> Result<Vec<u8>> {
    if pos.checked_add(size).is_none_or(|end| end > seg.size) {
        return Err(corrupt(format!(
            "{}: batch at {pos} runs past the end",
            seg.log_path.display()
        )));
    }
    let len = usize::try_from(size).map_err(|_| corrupt("batch too large"))?;
    let mut buf = vec![0u8; len];
    seg.file.read_exact_at(&mut buf, pos)?;
    Ok(buf)
}

impl Segment {
    /// Creates an empty segment (truncating any file of the same name) with
    /// indexes that may grow to `index_bytes` (their first page reserved).
    /// On failure (a full disk, no file descriptors left) the files it
    /// created are removed again.
    pub fn create(dir: &Path, base_offset: i64, index_bytes: u64) -> Result<Self> {
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX));
        let index_path = dir.join(file_name(base_offset, INDEX_SUFFIX));
        let time_path = dir.join(file_name(base_offset, TIME_INDEX_SUFFIX));
        let created = (|| -> Result<Self> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&log_path)?;
            for p in [&index_path, &time_path] {
                File::create(p)?;
            }
            let mut seg = Segment::from_files(log_path.clone(), file, 0, base_offset)?;
            seg.make_active(index_bytes)?;
            seg.log_dirty = true;
            seg.index_dirty = true;
            Ok(seg)
        })();
        if created.is_err() {
            for p in [&log_path, &index_path, &time_path] {
                if let Err(e) = fs::remove_file(p) {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::warn!(path = %p.display(), error = %e, "cannot remove a half-created segment file");
                    }
                }
            }
        }
        created
    }

    /// Opens an existing segment without validating anything; call
    /// [`Segment::load_trusted`] or [`Segment::recover`] next.
    pub fn open(dir: &Path, base_offset: i64) -> Result<Self> {
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX));
        let file = OpenOptions::new().read(true).write(true).open(&log_path)?;
        let size = file.metadata()?.len();
        Segment::from_files(log_path, file, size, base_offset)
    }

    fn from_files(log_path: PathBuf, file: File, size: u64, base_offset: i64) -> Result<Self> {
        let dir = log_path.parent().map(Path::to_path_buf).unwrap_or_default();
        let offset_index =
            OffsetIndex::open(&dir.join(file_name(base_offset, INDEX_SUFFIX)), base_offset)?;
        let time_index = TimeIndex::open(
            &dir.join(file_name(base_offset, TIME_INDEX_SUFFIX)),
            base_offset,
        )?;
        Ok(Segment {
            base_offset,
            log_path,
            file: Arc::new(file),
            size,
            next_offset: base_offset,
            offset_index,
            time_index,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            roll_base_ms: None,
            bytes_since_last_index_entry: 0,
            log_dirty: false,
            index_dirty: false,
        })
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Offset after the last record of the segment.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    /// Largest batch max timestamp and the last offset of its batch.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        (self.max_timestamp >= 0).then_some((self.max_timestamp, self.offset_of_max_timestamp))
    }
    pub fn roll_base_ms(&self) -> Option<i64> {
        self.roll_base_ms
    }
    /// Whether anything (log or indexes) changed since the last flush.
    pub fn is_dirty(&self) -> bool {
        self.log_dirty || self.index_dirty
    }
    /// Whether another index entry may not fit (the log then rolls).
    pub fn indexes_full(&self) -> bool {
        self.offset_index.is_full() || self.time_index.is_full()
    }

    /// The timestamp time retention compares: the largest batch timestamp,
    /// or the file's modification time when no batch carries one.
    pub fn retention_timestamp(&self) -> i64 {
        if self.max_timestamp >= 0 {
            return self.max_timestamp;
        }
        self.file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Lets the indexes grow to `index_bytes` for appends and reserves
    /// room for the next entries (their first page). Fails when the space
    /// cannot be reserved; the segment stays readable.
    pub fn make_active(&mut self, index_bytes: u64) -> Result<()> {
        let index_bytes = index_bytes.max(MIN_INDEX_BYTES);
        self.offset_index.set_max_bytes(index_bytes);
        self.time_index.set_max_bytes(index_bytes);
        self.offset_index.reserve(1)?;
        self.time_index.reserve(1)?;
        Ok(())
    }

    /// Closes the index files' descriptors (sealed segments keep only their
    /// mappings and the `.log` descriptor).
    pub fn close_index_files(&mut self) {
        self.offset_index.close_file();
        self.time_index.close_file();
    }

    /// Follows a rename of the partition directory (no file is touched).
    pub fn relocate(&mut self, dir: &Path) {
        if let Some(name) = self.log_path.file_name() {
            self.log_path = dir.join(name);
        }
        self.offset_index.relocate(dir);
        self.time_index.relocate(dir);
    }

    /// Called when the segment stops being active (roll, close): adds the
    /// final time index entry and trims both indexes to their entries.
    pub fn seal(&mut self) -> Result<()> {
        let adds_entry = self.max_timestamp >= 0
            && self
                .time_index
                .last_entry()
                .is_none_or(|(t, _)| self.max_timestamp > t);
        if adds_entry {
            // Make room for the final entry that records the max timestamp
            // (past `segment.index.bytes` if need be).
            let len = self
                .time_index
                .file_len()
                .max((self.time_index.entries() + 1) as u64 * super::index::TIME_ENTRY_SIZE as u64);
            self.time_index.set_max_bytes(len);
            if let Err(e) = self.time_index.reserve(1) {
                // A full disk: without its final entry the file would
                // understate the segment's max timestamp; keep the index in
                // memory instead (the file is removed and rebuilt at the
                // next start).
                tracing::warn!(path = %self.time_index.path().display(), error = %e, "cannot reserve the final time index entry");
                self.time_index.detach();
            }
        }
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
        self.offset_index.trim()?;
        self.time_index.trim()?;
        self.close_index_files();
        self.index_dirty = true;
        Ok(())
    }

    /// Writes `pieces`, back to back (whole batches whose offsets are
    /// already assigned, as described by `batches`, whose positions count
    /// from the first piece's first byte), at the end of the log with one
    /// vectored write, then updates the indexes. On a write error the file
    /// is cut back to its previous size.
    pub fn append(
        &mut self,
        pieces: &[&[u8]],
        batches: &[BatchInfo],
        index_interval: u64,
        now_ms: i64,
    ) -> Result<()> {
        // Index space first: a full disk fails the append before any byte
        // is written (an index store can then never hit an unbacked page).
        self.offset_index.reserve(batches.len())?;
        self.time_index.reserve(batches.len())?;
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if let Err(e) = super::vectored::write_all_at(&self.file, pieces, self.size) {
            if let Err(e2) = self.file.set_len(self.size) {
                tracing::error!(path = %self.log_path.display(), error = %e2, "cannot undo a failed append");
            }
            return Err(e.into());
        }
        let start = self.size;
        for b in batches {
            self.on_batch(start + b.position, b, index_interval);
        }
        self.size += len as u64;
        if self.roll_base_ms.is_none() {
            self.roll_base_ms = Some(now_ms);
        }
        self.log_dirty = true;
        Ok(())
    }

    /// Index bookkeeping for one batch at `position` (Kafka's rule: an
    /// entry once more than `index_interval` bytes were written since the
    /// last one).
    fn on_batch(&mut self, position: u64, b: &BatchInfo, index_interval: u64) {
        if b.max_timestamp > self.max_timestamp {
            self.max_timestamp = b.max_timestamp;
            self.offset_of_max_timestamp = b.last_offset;
        }
        if self.bytes_since_last_index_entry > index_interval {
            if self.offset_index.append(b.base_offset, position) {
                self.time_index
                    .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
                self.index_dirty = true;
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += b.size;
        self.next_offset = b.last_offset.saturating_add(1);
    }

    /// fsyncs what changed since the last flush: the log (`fdatasync`)
    /// and/or the indexes (`msync`), each only if written since.
    pub fn flush(&mut self) -> Result<()> {
        if self.log_dirty {
            self.file.sync_data()?;
            self.log_dirty = false;
        }
        if self.index_dirty {
            self.offset_index.flush()?;
            self.time_index.flush()?;
            self.index_dirty = false;
        }
        Ok(())
    }

    /// Whether appending `batches` batches needs more index space first (a `posix_fallocate` and a new mapping).
    pub fn append_grows_indexes(&self, batches: usize) -> bool {
        self.offset_index.needs_growth(batches) || self.time_index.needs_growth(batches)
    }

    /// Reads `buf.len()` bytes at `pos` (fails on a short read).
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        self.file.read_exact_at(buf, pos)?;
        Ok(())
    }

    /// Parses the header of the batch at `pos`, checking that it lies
    /// wholly inside the segment.
    pub fn header_at(&self, pos: u64) -> Result<BatchHeader> {
        HeaderReader::new(self, BATCH_HEADER_LEN).header(pos)
    }

    /// Reads the whole batch at `pos` of `size` bytes.
    pub fn read_batch(&self, pos: u64, size: u64) -> Result<Vec<u8>> {
        read_batch_of(self.into(), pos, size)
    }

    /// The segment's bytes as they are now, to read without the log's lock.
    pub fn sealed_bytes(&self) -> SealedBytes {
        SealedBytes {
            base_offset: self.base_offset,
            log_path: self.log_path.clone(),
            file: Arc::clone(&self.file),
            size: self.size,
        }
    }

    /// Position of the first batch whose last offset is `>= offset`, or
    /// `None` if no batch of this segment reaches `offset`.
    pub fn find_position(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let mut pos = self.offset_index.lookup(offset).map_or(0, |(_, p)| p);
        let mut reader = HeaderReader::new(self, READ_AHEAD);
        while pos < self.size {
            let h = reader.header(pos)?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Length of the run of whole batches starting at `start` (a batch
    /// boundary): at least the first batch if its base offset is below
    /// `max_offset`, then more while they fit in `max_bytes` and their base
    /// offset is below `max_offset`.
    pub fn slice_len(&self, start: u64, max_bytes: u64, max_offset: i64) -> Result<u64> {
        // The sparse index points at batch starts: everything between `start`
        // and the last indexed start within `max_bytes` is whole batches, so
        // only the tail past that entry needs its headers read. Without this
        // jump a 1 MiB fetch of small batches would read every header.
        let limit = start.saturating_add(max_bytes);
        let mut pos = self
            .offset_index
            .last_boundary_within(start, limit, max_offset)
            .unwrap_or(start);
        let ahead = usize::try_from(max_bytes.clamp(LOG_OVERHEAD as u64, READ_AHEAD as u64))
            .unwrap_or(READ_AHEAD);
        let mut reader = HeaderReader::new(self, ahead);
        while pos < self.size {
            let (base, size) = reader.prefix(pos)?;
            if base >= max_offset || (pos > start && pos - start + size > max_bytes) {
                break;
            }
            if pos + size > self.size {
                return Err(corrupt(format!(
                    "{}: batch at {pos} runs past the end",
                    self.log_path.display()
                )));
            }
            pos += size;
        }
        Ok(pos - start)
    }

    /// Scans batch headers (no CRC) from `pos`, where a batch with base
    /// offset `expected` must start, to the end of the file. `None` when the
    /// headers are not a consistent chain ending exactly at the file end.
    /// With `allow_gaps` (compacted segments) a batch may start after the
    /// expected offset, never before it.
    fn scan_headers(
        &self,
        mut pos: u64,
        mut expected: i64,
        allow_gaps: bool,
    ) -> Result<Option<HeaderScan>> {
        let start = pos;
        let mut scan = HeaderScan {
            next_offset: expected,
            max_timestamp: -1,
            offset_of_max_timestamp: expected,
            bytes: 0,
        };
        let mut reader = HeaderReader::new(self, READ_AHEAD);
        while pos < self.size {
            let h = match reader.header(pos) {
                Ok(h) => h,
                Err(StorageError::Io(e)) => return Err(e.into()),
                Err(_) => return Ok(None),
            };
            let in_order = if allow_gaps {
                h.base_offset >= expected
            } else {
                h.base_offset == expected
            };
            if !in_order || h.last_offset_delta < 0 {
                return Ok(None);
            }
            if h.max_timestamp > scan.max_timestamp {
                scan.max_timestamp = h.max_timestamp;
                scan.offset_of_max_timestamp = h.last_offset();
            }
            expected = h.last_offset().saturating_add(1);
            pos += h.total_size() as u64;
        }
        scan.next_offset = expected;
        scan.bytes = pos - start;
        Ok(Some(scan))
    }

    /// Loads a segment whose bytes were validated before (clean shutdown or
    /// below the recovery point): sanity-checks the indexes and finds the
    /// segment end. `next_segment_base` is the base offset of the following
    /// segment, `None` for the last one (whose tail after the last index
    /// entry is then scanned). Returns a description of the problem when
    /// the segment must be recovered instead. `allow_gaps`: the segment was
    /// compacted, so offsets may jump between batches and it may end before
    /// the next segment starts.
    pub fn load_trusted(
        &mut self,
        next_segment_base: Option<i64>,
        index_interval: u64,
        now_ms: i64,
        allow_gaps: bool,
    ) -> Result<std::result::Result<(), String>> {
        let bound = next_segment_base.unwrap_or(i64::MAX);
        if self.offset_index.entries() == 0 && self.size > index_interval.saturating_mul(2) {
            // Any segment with batches past twice the interval has an entry
            // (only a single huge batch could legitimately leave none).
            return Ok(Err(format!(
                "offset index empty for a {}-byte log",
                self.size
            )));
        }
        if self.offset_index.entries() > 0 && self.time_index.entries() == 0 {
            return Ok(Err(
                "time index empty while the offset index is not".to_string()
            ));
        }
        if let Err(e) = self.offset_index.sanity_check(self.size, bound) {
            return Ok(Err(format!("offset index: {e}")));
        }
        if let Err(e) = self.time_index.sanity_check(bound) {
            return Ok(Err(format!("time index: {e}")));
        }
        // The first and last entries must point at the start of the batch
        // they name (checking every entry would cost a read per entry).
        let n = self.offset_index.entries();
        let mut reader = HeaderReader::new(&*self, LOG_OVERHEAD);
        for i in [0, n.saturating_sub(1)] {
            if let Some((offset, pos)) = self.offset_index.entry(i) {
                match reader.prefix(pos) {
                    Ok((base, _)) if base == offset => {}
                    Ok(_) | Err(StorageError::CorruptBatch(_)) => {
                        return Ok(Err(format!(
                            "offset index entry {i} does not point at batch {offset}"
                        )));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if let Some((ts, off)) = self.time_index.last_entry() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = off;
        }
        let (scan_pos, scan_offset) = match self.offset_index.last_entry() {
            Some((o, p)) => (p, o),
            None => (0, self.base_offset),
        };
        let must_scan =
            next_segment_base.is_none() || (self.size > 0 && self.time_index.entries() == 0);
        if must_scan {
            let Some(scan) = self.scan_headers(scan_pos, scan_offset, allow_gaps)? else {
                return Ok(Err(format!(
                    "inconsistent batch headers after position {scan_pos}"
                )));
            };
            if scan.max_timestamp > self.max_timestamp {
                self.max_timestamp = scan.max_timestamp;
                self.offset_of_max_timestamp = scan.offset_of_max_timestamp;
            }
            self.next_offset = scan.next_offset;
            self.bytes_since_last_index_entry = scan.bytes;
            if let Some(next) = next_segment_base {
                if next < scan.next_offset || (!allow_gaps && next != scan.next_offset) {
                    return Ok(Err(format!(
                        "segment ends at {} but the next one starts at {next}",
                        scan.next_offset
                    )));
                }
            }
        } else {
            self.next_offset = bound;
        }
        if let Err(e) = self.offset_index.sanity_check(self.size, self.next_offset) {
            return Ok(Err(format!("offset index: {e}")));
        }
        if let Err(e) = self.time_index.sanity_check(self.next_offset) {
            return Ok(Err(format!("time index: {e}")));
        }
        self.roll_base_ms = self.first_roll_base(now_ms)?;
        Ok(Ok(()))
    }

    /// Age base (`segment.ms`) of a reopened non-empty segment: the log
    /// file's creation time when the filesystem records it (and it is not
    /// in the future), else `now_ms`. Client timestamps are not used, so a
    /// producer with old timestamps cannot make every append roll.
    fn first_roll_base(&self, now_ms: i64) -> Result<Option<i64>> {
        if self.size == 0 {
            return Ok(None);
        }
        let created = self
            .file
            .metadata()
            .and_then(|m| m.created())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .filter(|&t| t <= now_ms);
        Ok(Some(created.unwrap_or(now_ms)))
    }

    /// Re-validates every batch (length, magic, CRC-32C, contiguous offsets
    /// from the segment base), rebuilds both indexes, and truncates the file
    /// after the last valid batch. Returns the number of bytes cut off.
    /// With `allow_gaps` (a compacted segment) offsets must only increase:
    /// a batch may start after the previous one's end, never inside it.
    pub fn recover(
        &mut self,
        index_interval: u64,
        index_bytes: u64,
        now_ms: i64,
        allow_gaps: bool,
    ) -> Result<u64> {
        self.offset_index.reset();
        self.time_index.reset();
        self.reserve_index_space_for_recovery(index_bytes);
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        self.bytes_since_last_index_entry = 0;
        self.next_offset = self.base_offset;
        self.validate_from(0, index_interval, now_ms, allow_gaps)
    }

    /// Recovers the segment holding the recovery point after an unclean
    /// stop, re-validating only what follows it: the batches wholly below
    /// `trusted_below` were fsynced with their index entries by the flush
    /// that set the recovery point, so they are trusted as a sealed segment
    /// below the recovery point is ([`Segment::load_trusted`]: index entries
    /// sanity-checked, the last kept entry must name its batch, headers
    /// only from there to the first batch reaching `trusted_below`). From
    /// that batch on every batch is re-validated as [`Segment::recover`]
    /// does, and the file is cut after the last valid one. If the trusted
    /// part does not check out (the disk lost a flushed write, an index was
    /// damaged) the whole segment is recovered instead.
    ///
    /// Kafka re-validates every segment from the one holding the recovery
    /// point; a 1 GiB active segment flushed a moment before a crash is then
    /// re-read whole. Here a crash costs what was written since the flush.
    pub fn recover_after(
        &mut self,
        trusted_below: i64,
        index_interval: u64,
        index_bytes: u64,
        now_ms: i64,
        allow_gaps: bool,
    ) -> Result<Recovered> {
        let file_size = self.file.metadata()?.len();
        self.size = file_size;
        if trusted_below > self.base_offset {
            match self.trusted_prefix(trusted_below, index_interval, allow_gaps)? {
                Ok(prefix) => {
                    self.reserve_index_space_for_recovery(index_bytes);
                    self.max_timestamp = prefix.scan.max_timestamp;
                    self.offset_of_max_timestamp = prefix.scan.offset_of_max_timestamp;
                    self.next_offset = prefix.scan.next_offset;
                    self.bytes_since_last_index_entry = prefix.scan.bytes;
                    let cut = self.validate_from(prefix.end, index_interval, now_ms, allow_gaps)?;
                    return Ok(Recovered {
                        bytes_cut: cut,
                        bytes_read: file_size - prefix.scan_start,
                    });
                }
                Err(problem) => {
                    tracing::warn!(path = %self.log_path.display(), %problem, "the bytes below the recovery point do not check out; re-validating the whole segment");
                }
            }
        }
        let cut = self.recover(index_interval, index_bytes, now_ms, allow_gaps)?;
        Ok(Recovered {
            bytes_cut: cut,
            bytes_read: file_size,
        })
    }

    /// The part of the segment made of batches wholly below `trusted_below`
    /// (see [`Segment::recover_after`]); trims both indexes to the entries
    /// of that part. `Err` names why it cannot be trusted.
    fn trusted_prefix(
        &mut self,
        trusted_below: i64,
        index_interval: u64,
        allow_gaps: bool,
    ) -> Result<std::result::Result<TrustedPrefix, String>> {
        self.offset_index.truncate_to_offset(trusted_below);
        loop {
            match self.walk_trusted(trusted_below, index_interval, allow_gaps)? {
                // The log start (DeleteRecords) can put the recovery point
                // inside a batch, which an entry may name.
                TrustedWalk::IndexedBatchStraddles(pos) => {
                    self.offset_index.truncate_to_position(pos)
                }
                TrustedWalk::Done(prefix) => return Ok(prefix),
            }
        }
    }

    /// One try of [`Segment::trusted_prefix`] with the offset index as it is.
    fn walk_trusted(
        &mut self,
        trusted_below: i64,
        index_interval: u64,
        allow_gaps: bool,
    ) -> Result<TrustedWalk> {
        let fail = |problem: String| Ok(TrustedWalk::Done(Err(problem)));
        if let Err(e) = self.offset_index.sanity_check(self.size, trusted_below) {
            return fail(format!("offset index: {e}"));
        }
        // Time index entries are added with offset index entries, naming an
        // offset up to the indexed batch's last: those of the kept entries
        // name offsets up to the last kept entry's batch, later ones (of the
        // entries dropped) offsets past it.
        let indexed = self.offset_index.last_entry();
        let time_kept_below = match indexed {
            Some((_, pos)) => match self.header_at(pos) {
                Ok(h) => h.last_offset().saturating_add(1),
                Err(StorageError::Io(e)) => return Err(e.into()),
                Err(e) => return fail(format!("indexed batch at {pos}: {e}")),
            },
            None => self.base_offset,
        };
        self.time_index.truncate_to_offset(time_kept_below);
        if let Err(e) = self.time_index.sanity_check(time_kept_below) {
            return fail(format!("time index: {e}"));
        }
        // The walk starts at the last kept entry, with the segment's max
        // timestamp up to it from the time index's last entry, which must
        // name the batch holding that timestamp (as a trusted segment's
        // time index must not be empty beside a non-empty offset index).
        let mut scan = HeaderScan {
            next_offset: self.base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: self.base_offset,
            bytes: 0,
        };
        match self.time_index.last_entry() {
            Some((ts, offset)) => {
                if self.batch_ending_at(offset)?.map(|h| h.max_timestamp) != Some(ts) {
                    return fail(format!(
                        "time index entry ({ts}, {offset}) does not name its batch"
                    ));
                }
                scan.max_timestamp = ts;
                scan.offset_of_max_timestamp = offset;
            }
            None if indexed.is_some() => {
                return fail("time index empty while the offset index is not".to_string())
            }
            None => {}
        }
        let (scan_start, mut expected, read_ahead) = match indexed {
            // a walk of about an index interval: one read per header
            Some((offset, pos)) => (pos, offset, BATCH_HEADER_LEN),
            None => (0, self.base_offset, READ_AHEAD),
        };
        // The walk also checks the offset index against the rule appends
        // follow (`on_batch`): an entry at the first batch after more than
        // an interval of bytes since the last one, none elsewhere. An index
        // that lost entries (or was written with another interval) would
        // otherwise be kept as it is; the whole segment is rebuilt instead.
        let mut next_entry = match indexed {
            Some(_) => self.offset_index.entries() - 1,
            None => 0,
        };
        let mut since_entry = 0u64;
        let mut reader = HeaderReader::new(&*self, read_ahead);
        let mut pos = scan_start;
        while pos < self.size {
            let h = match reader.header(pos) {
                Ok(h) => h,
                Err(StorageError::Io(e)) => return Err(e.into()),
                Err(e) => return fail(format!("batch at {pos}: {e}")),
            };
            let at_entry = pos == scan_start && indexed.is_some();
            let in_order = if allow_gaps && !at_entry {
                h.base_offset >= expected
            } else {
                h.base_offset == expected
            };
            if !in_order || h.last_offset_delta < 0 {
                return fail(format!(
                    "batch at {pos} starts at {} where {expected} was expected",
                    h.base_offset
                ));
            }
            if h.last_offset() >= trusted_below {
                break;
            }
            let has_entry = self
                .offset_index
                .entry(next_entry)
                .is_some_and(|(o, p)| p == pos && o == h.base_offset);
            if has_entry {
                if !at_entry && since_entry <= index_interval {
                    return fail(format!("index entry at {pos} where none is due"));
                }
                next_entry += 1;
                since_entry = 0;
            } else if since_entry > index_interval {
                return fail(format!("no index entry at {pos} where one is due"));
            }
            since_entry += h.total_size() as u64;
            if h.max_timestamp > scan.max_timestamp {
                scan.max_timestamp = h.max_timestamp;
                scan.offset_of_max_timestamp = h.last_offset();
            }
            expected = h.last_offset().saturating_add(1);
            pos += h.total_size() as u64;
        }
        if let Some((_, p)) = self.offset_index.entry(next_entry) {
            if p < pos {
                return fail(format!("index entry at {p} is not at a batch start"));
            }
            return Ok(TrustedWalk::IndexedBatchStraddles(pos));
        }
        if pos >= self.size && expected < trusted_below && !allow_gaps {
            return fail(format!(
                "the segment ends at offset {expected}, below the recovery point {trusted_below}"
            ));
        }
        scan.next_offset = expected;
        scan.bytes = since_entry;
        Ok(TrustedWalk::Done(Ok(TrustedPrefix {
            scan_start,
            end: pos,
            scan,
        })))
    }

    /// The header of the batch whose last offset is `offset`, if one is:
    /// found from the offset index's entry at or before it (a walk of
    /// about an index interval). Damaged bytes read as none.
    fn batch_ending_at(&self, offset: i64) -> Result<Option<BatchHeader>> {
        let (mut expected, mut pos) = self
            .offset_index
            .lookup(offset)
            .unwrap_or((self.base_offset, 0));
        let mut reader = HeaderReader::new(self, BATCH_HEADER_LEN);
        while pos < self.size {
            let h = match reader.header(pos) {
                Ok(h) => h,
                Err(StorageError::Io(e)) => return Err(e.into()),
                Err(_) => return Ok(None),
            };
            if h.base_offset < expected || h.last_offset_delta < 0 {
                return Ok(None);
            }
            if h.last_offset() >= offset {
                return Ok((h.last_offset() == offset).then_some(h));
            }
            expected = h.last_offset().saturating_add(1);
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    fn reserve_index_space_for_recovery(&mut self, index_bytes: u64) {
        if let Err(e) = self.make_active(index_bytes) {
            // A full disk: rebuild anyway; an index that cannot grow is kept
            // in memory (see `index`), so the segment stays readable.
            tracing::warn!(path = %self.log_path.display(), error = %e, "cannot reserve index space while recovering");
        }
    }

    /// Validates every batch from `pos` (a batch start; the segment's state
    /// describes the bytes before it), indexing them, and cuts the file
    /// after the last valid one. Returns the number of bytes cut off.
    fn validate_from(
        &mut self,
        mut pos: u64,
        index_interval: u64,
        now_ms: i64,
        allow_gaps: bool,
    ) -> Result<u64> {
        let file_size = self.file.metadata()?.len();
        let mut buf = Vec::new();
        let problem = loop {
            let remaining = file_size - pos;
            if remaining == 0 {
                break None;
            }
            if remaining < LOG_OVERHEAD as u64 {
                break Some(format!("{remaining} trailing bytes"));
            }
            let mut prefix = [0u8; LOG_OVERHEAD];
            self.read_exact_at(&mut prefix, pos)?;
            let Some((_, len)) = batch::read_offset_and_length(&prefix) else {
                break Some("short prefix".to_string());
            };
            if len < MIN_BATCH_LENGTH || LOG_OVERHEAD as u64 + len as u64 > remaining {
                break Some(format!("batch length {len} with {remaining} bytes left"));
            }
            let total = LOG_OVERHEAD + len as usize;
            buf.resize(total, 0);
            self.read_exact_at(&mut buf, pos)?;
            let h = match batch::validate_one(&buf) {
                Ok(h) => h,
                Err(e) => break Some(e.to_string()),
            };
            let in_order = if allow_gaps {
                h.base_offset >= self.next_offset
            } else {
                h.base_offset == self.next_offset
            };
            if !in_order {
                break Some(format!(
                    "base offset {} where {} was expected",
                    h.base_offset, self.next_offset
                ));
            }
            if h.last_offset() - self.base_offset > i64::from(i32::MAX) {
                break Some(format!(
                    "offset {} too far from the segment base",
                    h.last_offset()
                ));
            }
            let info = BatchInfo {
                position: pos,
                size: total as u64,
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
            };
            self.size = pos;
            self.on_batch(pos, &info, index_interval);
            pos += total as u64;
        };
        self.size = pos;
        let cut = file_size - pos;
        if let Some(problem) = problem {
            tracing::warn!(
                path = %self.log_path.display(),
                position = pos,
                bytes = cut,
                %problem,
                "truncating log segment after its last valid batch"
            );
            self.file.set_len(pos)?;
        }
        self.log_dirty = true;
        self.index_dirty = true;
        self.roll_base_ms = self.first_roll_base(now_ms)?;
        Ok(cut)
    }

    /// Calls `f` with the header of every batch, in order (headers only:
    /// no CRC check; one read per read-ahead chunk).
    pub fn for_each_header(&self, mut f: impl FnMut(&BatchHeader)) -> Result<()> {
        let mut reader = HeaderReader::new(self, READ_AHEAD);
        let mut pos = 0u64;
        while pos < self.size {
            let h = reader.header(pos)?;
            f(&h);
            pos += h.total_size() as u64;
        }
        Ok(())
    }

    /// Cuts the segment before the first batch holding an offset `>=
    /// offset` (a batch straddling `offset` goes whole), with its index
    /// entries, and makes the cut durable (`fdatasync`) before returning.
    /// Returns the number of bytes removed (0 when no batch reaches
    /// `offset`). The segment's end, max timestamp and index bookkeeping
    /// are re-derived from the indexes and a header scan of the tail after
    /// the last index entry; if that scan finds the bytes inconsistent the
    /// whole segment is re-validated ([`Segment::recover`]).
    pub fn truncate_to(
        &mut self,
        offset: i64,
        index_interval: u64,
        index_bytes: u64,
        now_ms: i64,
    ) -> Result<u64> {
        let Some((pos, _)) = self.find_position(offset)? else {
            return Ok(0);
        };
        let removed = self.size - pos;
        self.offset_index.truncate_to_position(pos);
        self.index_dirty = true;
        self.file.set_len(pos)?;
        self.file.sync_data()?;
        self.size = pos;
        let (scan_pos, scan_offset) = match self.offset_index.last_entry() {
            Some((o, p)) => (p, o),
            None => (0, self.base_offset),
        };
        let Some(scan) = self.scan_headers(scan_pos, scan_offset, true)? else {
            tracing::warn!(path = %self.log_path.display(), "inconsistent batch headers after truncation; re-validating the segment");
            self.recover(index_interval, index_bytes, now_ms, true)?;
            return Ok(removed);
        };
        self.next_offset = scan.next_offset;
        self.bytes_since_last_index_entry = scan.bytes;
        self.time_index.truncate_to_offset(scan.next_offset);
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        if let Some((ts, off)) = self.time_index.last_entry() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = off;
        }
        if scan.max_timestamp > self.max_timestamp {
            self.max_timestamp = scan.max_timestamp;
            self.offset_of_max_timestamp = scan.offset_of_max_timestamp;
        }
        if self.size == 0 {
            self.roll_base_ms = None;
        }
        Ok(removed)
    }

    /// Renames the segment's files with the `.deleted` suffix and removes
    /// them. Readers holding the `Arc<File>` keep reading the unlinked inode.
    pub fn delete(self) -> Result<()> {
        drop(self.into_deleted()?);
        Ok(())
    }

    /// The first half of [`Segment::delete`]: renames the segment's files
    /// with the `.deleted` suffix (cheap, so it may happen under the
    /// partition's lock) and returns them still open; dropping the
    /// [`DeletedSegment`] removes them. Removal is the costly half: the
    /// filesystem frees a large file's blocks when its last link and
    /// descriptor go, which can take tens of milliseconds (more with
    /// online discard), so the broker drops it after releasing the lock.
    /// A crash in between leaves `.deleted` files, which open removes.
    pub fn into_deleted(self) -> Result<DeletedSegment> {
        let Segment {
            log_path,
            file,
            offset_index,
            time_index,
            ..
        } = self;
        let paths = [
            log_path,
            offset_index.path().to_path_buf(),
            time_index.path().to_path_buf(),
        ];
        drop(offset_index);
        drop(time_index);
        let mut renamed = Vec::new();
        for p in paths {
            let mut to = p.clone().into_os_string();
            to.push(DELETED_SUFFIX);
            let to = PathBuf::from(to);
            match fs::rename(&p, &to) {
                Ok(()) => renamed.push(to),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    // what was renamed goes now; the rest stays a segment
                    drop(DeletedSegment {
                        renamed,
                        _file: file,
                    });
                    return Err(e.into());
                }
            }
        }
        Ok(DeletedSegment {
            renamed,
            _file: file,
        })
    }
}

/// A segment renamed `.deleted` but not yet removed (see
/// [`Segment::into_deleted`]): dropping it unlinks the files and closes
/// the log file (readers holding their own `Arc<File>` keep the inode).
#[derive(Debug)]
pub struct DeletedSegment {
    renamed: Vec<PathBuf>,
    _file: Arc<File>,
}

impl Drop for DeletedSegment {
    fn drop(&mut self) {
        for p in &self.renamed {
            match fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // left for the next open, which removes `.deleted` files
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "cannot remove a deleted segment file")
                }
            }
        }
    }
}

/// How many bytes a header walk reads at once.
const READ_AHEAD: usize = 16 * 1024;

/// Reads batch headers of one segment through a read-ahead buffer, so that
/// walking many small batches costs one `pread` per chunk, not per batch.
/// What a [`HeaderReader`] reads: a segment's file up to its size.
#[derive(Clone, Copy)]
struct SegmentView<'a> {
    file: &'a File,
    size: u64,
    log_path: &'a Path,
}

impl<'a> From<&'a Segment> for SegmentView<'a> {
    fn from(seg: &'a Segment) -> Self {
        SegmentView {
            file: &seg.file,
            size: seg.size,
            log_path: &seg.log_path,
        }
    }
}

impl<'a> From<&'a SealedBytes> for SegmentView<'a> {
    fn from(seg: &'a SealedBytes) -> Self {
        SegmentView {
            file: &seg.file,
            size: seg.size,
            log_path: &seg.log_path,
        }
    }
}

struct HeaderReader<'a> {
    seg: SegmentView<'a>,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_pos: u64,
    read_ahead: usize,
}

impl<'a> HeaderReader<'a> {
    fn new(seg: impl Into<SegmentView<'a>>, read_ahead: usize) -> Self {
        HeaderReader {
            seg: seg.into(),
            buf: Vec::new(),
            buf_pos: 0,
            read_ahead,
        }
    }

    /// `len` bytes at `pos`, which must lie inside the segment.
    fn bytes(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let end = pos.checked_add(len as u64).filter(|&e| e <= self.seg.size);
        let Some(end) = end else {
            return Err(corrupt(format!(
                "{}: {len} bytes at {pos} past the end",
                self.seg.log_path.display()
            )));
        };
        let buffered = pos >= self.buf_pos && end <= self.buf_pos + self.buf.len() as u64;
        if !buffered {
            let want = (self.read_ahead.max(len) as u64).min(self.seg.size - pos);
            let want = usize::try_from(want).unwrap_or(len);
            self.buf.resize(want, 0);
            self.seg.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_pos = pos;
        }
        let from = usize::try_from(pos - self.buf_pos).unwrap_or(usize::MAX);
        from.checked_add(len)
            .and_then(|to| self.buf.get(from..to))
            .ok_or_else(|| corrupt("read-ahead buffer too short"))
    }

    /// The header of the batch at `pos`, which must lie wholly inside the segment.
    fn header(&mut self, pos: u64) -> Result<BatchHeader> {
        let h = BatchHeader::parse(self.bytes(pos, BATCH_HEADER_LEN)?)?;
        if pos + h.total_size() as u64 > self.seg.size {
            return Err(corrupt(format!(
                "{}: batch at {pos} runs past the end",
                self.seg.log_path.display()
            )));
        }
        Ok(h)
    }

    /// `(base offset, total size)` of the batch at `pos`, from its first 12 bytes.
    fn prefix(&mut self, pos: u64) -> Result<(i64, u64)> {
        let (base, len) = batch::read_offset_and_length(self.bytes(pos, LOG_OVERHEAD)?)
            .ok_or_else(|| corrupt("short batch prefix"))?;
        if len < MIN_BATCH_LENGTH {
            return Err(corrupt(format!(
                "{}: bad batch length at {pos}",
                self.seg.log_path.display()
            )));
        }
        Ok((base, LOG_OVERHEAD as u64 + len as u64))
    }
}
