//! Atomic checkpoint files and the clean-shutdown marker of one partition
//! directory.
//!
//! This module owns only the small metadata files next to the segments
//! (recovery point, log start offset, cleaner offset, clean-shutdown
//! marker; high watermarks are the data directory's, `high_watermarks`) and the atomic write every checkpoint uses (the
//! leader epoch cache's file format lives in `epochs`); it never reads or
//! writes segments. A checkpoint is written to
//! `<name>.tmp`, fsynced, renamed over `<name>` and the directory is
//! fsynced, so a reader sees either the old or the new value, never a torn
//! one. The content is one line, `moldau-checkpoint 1 <value>`; a file that
//! does not parse reads as absent (callers then fall back to safe defaults).

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;

use super::Result;

/// Offset below which everything is known to be fsynced.
pub const RECOVERY_POINT_FILE: &str = "recovery-point.checkpoint";
/// First offset consumers may read.
pub const LOG_START_OFFSET_FILE: &str = "log-start-offset.checkpoint";
/// The cleaner's "cleaned up to" offset: segments below it were compacted
/// (their offsets may have gaps); bytes from it on are dirty.
pub const CLEANER_OFFSET_FILE: &str = "cleaner-offset.checkpoint";
/// When the earliest tombstone kept by the last clean expires
/// (`i64::MAX`: none), so that a restart does not force a clean.
pub const CLEANER_TOMBSTONE_DUE_FILE: &str = "cleaner-tombstone-due.checkpoint";
/// Present only between a clean close and the next open.
pub const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
/// Suffix of checkpoint files being written.
pub const TMP_SUFFIX: &str = ".tmp";

const MAGIC: &str = "moldau-checkpoint";
const VERSION: u32 = 1;

/// fsyncs a directory so that renames and unlinks in it are durable.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Atomically replaces `dir/name` with a checkpoint holding `value`.
pub fn write_checkpoint(dir: &Path, name: &str, value: i64) -> Result<()> {
    write_checkpoints(dir, &[(name, value)])
}

/// Atomically replaces several checkpoints of `dir`: each is written to
/// its temp file and fsynced, then all are renamed into place and the
/// directory is fsynced once. Each file is still replaced atomically (a
/// reader, or a crash at any point, sees the old or the new value of each,
/// never a torn one); only the directory fsync is shared, after the last
/// rename, which makes every rename durable before this returns.
pub fn write_checkpoints(dir: &Path, checkpoints: &[(&str, i64)]) -> Result<()> {
    if checkpoints.is_empty() {
        return Ok(());
    }
    for &(name, value) in checkpoints {
        let written = write_temp(dir, name, format!("{MAGIC} {VERSION} {value}\n").as_bytes());
        if let Err(e) = written {
            // A full disk: do not leave temp files holding space behind.
            for &(n, _) in checkpoints {
                let _ = fs::remove_file(dir.join(format!("{n}{TMP_SUFFIX}")));
            }
            return Err(e.into());
        }
    }
    for &(name, _) in checkpoints {
        fs::rename(dir.join(format!("{name}{TMP_SUFFIX}")), dir.join(name))?;
    }
    fsync_dir(dir)?;
    Ok(())
}

/// Atomically replaces `dir/name` with `content`: written to
/// `<name>.tmp`, fsynced, renamed into place, directory fsynced. For
/// checkpoints of another format than one value (the leader epoch cache).
pub fn write_atomically(dir: &Path, name: &str, content: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    if let Err(e) = write_temp(dir, name, content) {
        let _ = fs::remove_file(&tmp);
        return Err(e.into());
    }
    fs::rename(&tmp, dir.join(name))?;
    fsync_dir(dir)?;
    Ok(())
}

/// Writes `content` to `dir/<name>.tmp` and fsyncs it (the first half of
/// an atomic replace; the caller renames).
fn write_temp(dir: &Path, name: &str, content: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(format!("{name}{TMP_SUFFIX}")))?;
    f.write_all(content)?;
    f.sync_all()
}

/// Removes `dir/name` durably (absent is fine).
pub fn remove_checkpoint(dir: &Path, name: &str) -> Result<()> {
    match fs::remove_file(dir.join(name)) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    fsync_dir(dir)?;
    Ok(())
}

/// Parses the content of a checkpoint file.
pub fn parse_checkpoint(content: &str) -> Option<i64> {
    let line = content.strip_suffix('\n')?;
    let mut parts = line.split(' ');
    if parts.next()? != MAGIC || parts.next()?.parse::<u32>().ok()? != VERSION {
        return None;
    }
    let value = parts.next()?.parse::<i64>().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(value)
}

/// Reads `dir/name`: `Ok(None)` when the file is absent or does not parse
/// (a warning is logged for the latter).
pub fn read_checkpoint(dir: &Path, name: &str) -> Result<Option<i64>> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let value = std::str::from_utf8(&bytes).ok().and_then(parse_checkpoint);
    if value.is_none() {
        tracing::warn!(path = %path.display(), "ignoring unreadable checkpoint file");
    }
    Ok(value)
}

/// Writes the clean-shutdown marker durably.
pub fn write_clean_shutdown(dir: &Path) -> Result<()> {
    let f = File::create(dir.join(CLEAN_SHUTDOWN_FILE))?;
    f.sync_all()?;
    fsync_dir(dir)?;
    Ok(())
}

/// Whether the clean-shutdown marker is present.
pub fn has_clean_shutdown(dir: &Path) -> bool {
    dir.join(CLEAN_SHUTDOWN_FILE).is_file()
}

/// Removes the clean-shutdown marker durably (a crash after this must be
/// seen as unclean).
pub fn remove_clean_shutdown(dir: &Path) -> Result<()> {
    match fs::remove_file(dir.join(CLEAN_SHUTDOWN_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    fsync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_atomic_write_and_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        assert_eq!(read_checkpoint(d, RECOVERY_POINT_FILE).expect("read"), None);
        write_checkpoint(d, RECOVERY_POINT_FILE, 42).expect("write");
        assert_eq!(
            read_checkpoint(d, RECOVERY_POINT_FILE).expect("read"),
            Some(42)
        );
        write_checkpoint(d, RECOVERY_POINT_FILE, i64::MAX).expect("overwrite");
        assert_eq!(
            read_checkpoint(d, RECOVERY_POINT_FILE).expect("read"),
            Some(i64::MAX)
        );
        write_checkpoint(d, CLEANER_OFFSET_FILE, -1).expect("write");
        assert_eq!(
            read_checkpoint(d, CLEANER_OFFSET_FILE).expect("read"),
            Some(-1)
        );
        // No temp file is left behind.
        let names: Vec<String> = fs::read_dir(d)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(TMP_SUFFIX)), "{names:?}");
        // Several at once: each replaced, no temp file left.
        write_checkpoints(d, &[(RECOVERY_POINT_FILE, 7), (LOG_START_OFFSET_FILE, 3)])
            .expect("write several");
        assert_eq!(
            read_checkpoint(d, RECOVERY_POINT_FILE).expect("read"),
            Some(7)
        );
        assert_eq!(
            read_checkpoint(d, LOG_START_OFFSET_FILE).expect("read"),
            Some(3)
        );
        write_checkpoints(d, &[]).expect("nothing to write");
        write_checkpoint(d, RECOVERY_POINT_FILE, i64::MAX).expect("overwrite");
        // A leftover temp file from a crash mid-write does not affect the value.
        fs::write(
            d.join(format!("{RECOVERY_POINT_FILE}{TMP_SUFFIX}")),
            b"moldau-check",
        )
        .expect("tmp");
        assert_eq!(
            read_checkpoint(d, RECOVERY_POINT_FILE).expect("read"),
            Some(i64::MAX)
        );
        // Garbage or torn content reads as absent.
        for bad in [
            "",
            "moldau-checkpoint 1 12",
            "moldau-checkpoint 2 12\n",
            "x 1 1\n",
            "moldau-checkpoint 1 1 2\n",
        ] {
            fs::write(d.join(LOG_START_OFFSET_FILE), bad).expect("write");
            assert_eq!(
                read_checkpoint(d, LOG_START_OFFSET_FILE).expect("read"),
                None,
                "{bad:?}"
            );
        }
        fs::write(d.join(LOG_START_OFFSET_FILE), [0xffu8, 0xfe]).expect("write");
        assert_eq!(
            read_checkpoint(d, LOG_START_OFFSET_FILE).expect("read"),
            None
        );
    }

    #[test]
    fn clean_shutdown_marker() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!has_clean_shutdown(dir.path()));
        write_clean_shutdown(dir.path()).expect("write");
        assert!(has_clean_shutdown(dir.path()));
        remove_clean_shutdown(dir.path()).expect("remove");
        assert!(!has_clean_shutdown(dir.path()));
        remove_clean_shutdown(dir.path()).expect("idempotent");
    }
}
