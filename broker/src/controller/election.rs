//! Who is the active controller. Every broker of a cluster contends; the
//! winner runs the controller (see [`super::host`]). Leadership is a
//! `watch` of `bool` that turns false as soon as this broker may no longer
//! act as controller.
//!
//! - Kubernetes mode: a `coordination.k8s.io` Lease (the shared elector of
//!   `moldau_coordination::lease`), which gives up acting before the lease
//!   can expire.
//! - Directory mode (brokers sharing one host and a metadata directory,
//!   for local clusters and tests): an exclusive `flock` on
//!   `<dir>/controller.lock`. The kernel releases it when the holder dies
//!   (kill -9 included), so another broker takes over at once; a stopped
//!   (SIGSTOP) holder keeps it, so there is never a second controller.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

/// Contends for the directory's controller lock until `shutdown`; the
/// returned channel is true while this process holds it.
pub fn file_lock(dir: PathBuf, mut shutdown: watch::Receiver<bool>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let path = dir.join("controller.lock");
        let file = loop {
            match std::fs::create_dir_all(&dir).and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
            }) {
                Ok(f) => break f,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot open the controller lock");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        };
        loop {
            // SAFETY: flock on a descriptor this task owns; non-blocking.
            let got = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if got {
                tracing::info!(lock = %path.display(), "won the controller election");
                tx.send_replace(true);
                // Held until the process exits or shuts down.
                let _ = shutdown.wait_for(|s| *s).await;
                tx.send_replace(false);
                drop(file);
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    rx
}
