//! Who owns a data directory. A broker holds an exclusive `flock` on
//! `<data>/.lock` for as long as its process lives: a second process on
//! the same directory would corrupt the logs, so it refuses to start, as
//! Kafka's log-directory lock makes it. The kernel releases the lock when
//! the process dies, kill -9 included.
//!
//! The directory also keeps a **succession token**,
//! `<data>/succession.token`: a random secret made at the first start,
//! readable by its owner only. A broker presents it when it registers with
//! the controller, which keeps only its SHA-256. A new process of a node id
//! whose previous incarnation still counts as live may take its place at
//! once if it presents the same token: only a process holding this
//! directory's lock can have read it, and holding the lock proves the
//! previous incarnation is gone. So a restart after kill -9 does not wait
//! a session timeout for the old incarnation to be fenced, while a second
//! process claiming a live node id from another directory is still
//! refused.
//!
//! Owns only these two files; must not touch the logs.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Why a data directory cannot be owned.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error(
        "another process holds the data directory {0} (its .lock); two brokers cannot share one"
    )]
    Held(PathBuf),
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The owned data directory: the lock, held until this is dropped, and the
/// succession token.
#[derive(Debug)]
pub struct OwnedDataDir {
    _lock: File,
    token: String,
}

impl OwnedDataDir {
    /// The succession token (a secret: never logged, never in a Kafka
    /// response; only its [`token_hash`] is kept by the controller).
    pub fn succession_token(&self) -> &str {
        &self.token
    }
}

/// Takes the data directory `dir` (created if missing): its lock, and its
/// succession token (made at the first start).
pub fn own(dir: &Path) -> Result<OwnedDataDir, DataDirError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let lock_path = dir.join(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    // SAFETY: flock on a descriptor we own; non-blocking.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(DataDirError::Held(dir.to_path_buf()));
    }
    let token_path = dir.join("succession.token");
    let token = match std::fs::read_to_string(&token_path) {
        Ok(t) if t.trim().len() >= 32 => t.trim().to_string(),
        Ok(_) | Err(_) => {
            let token = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let tmp = dir.join("succession.token.tmp");
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(&tmp))?;
            f.write_all(token.as_bytes()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &token_path).map_err(io(&token_path))?;
            token
        }
    };
    Ok(OwnedDataDir { _lock: lock, token })
}

/// What the controller keeps of a succession token: its SHA-256, in hex.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_owner_at_a_time_and_the_token_outlives_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let first = own(dir.path()).unwrap();
        let token = first.succession_token().to_string();
        assert!(matches!(own(dir.path()), Err(DataDirError::Held(_))));
        drop(first);
        let again = own(dir.path()).expect("free once the owner is gone");
        assert_eq!(
            again.succession_token(),
            token,
            "the same directory, the same token"
        );
        let other = tempfile::tempdir().unwrap();
        assert_ne!(own(other.path()).unwrap().succession_token(), token);
        assert_eq!(token_hash(&token).len(), 64);
        assert_ne!(token_hash(&token), token_hash("x"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("succession.token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "readable by the owner only");
    }
}
