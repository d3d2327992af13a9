//! Keeping the runtime's worker threads free of blocking or CPU-heavy work
//! that a request handler must do inline (decompressing a produce payload
//! to validate it, for one): [`blocking`] runs it under
//! `tokio::task::block_in_place`, which hands this worker's other tasks to
//! another thread for the duration, so other connections are not stalled.
//!
//! Only for work done in the middle of a synchronous handler; work that can
//! be awaited belongs in `tokio::task::spawn_blocking` instead.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f` so that it cannot stall other tasks of a multi-threaded runtime.
/// On a current-thread runtime (some tests) or outside any runtime, where
/// there is no other worker to hand tasks to, it simply runs `f`.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_outside_a_runtime() {
        assert_eq!(blocking(|| 7), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_inline_on_a_current_thread_runtime() {
        assert_eq!(blocking(|| 8), 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn other_tasks_progress_while_a_worker_blocks() {
        // One worker: without block_in_place the spawned task could not run
        // until the blocking closure returned, and the closure waits for it.
        let (tx, rx) = std::sync::mpsc::channel();
        tokio::spawn(async move {
            let _ = tx.send(());
        });
        let got = blocking(|| rx.recv_timeout(std::time::Duration::from_secs(10)));
        assert!(got.is_ok(), "the other task never ran");
    }
}
