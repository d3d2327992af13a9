//! The time a request's handler keeps the broker busy: the time spent
//! polling its future, not the time it waits (for a long poll, for
//! replication, for a group to form). Kafka's `request_percentage` quota
//! measures I/O-thread time the same way; waiting costs nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A future that resolves to its inner future's output and the time
/// spent inside the inner future's `poll`.
pub struct Busy<F> {
    inner: Pin<Box<F>>,
    busy: Duration,
}

impl<F: Future> Busy<F> {
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            busy: Duration::ZERO,
        }
    }
}

impl<F: Future> Future for Busy<F> {
    type Output = (F::Output, Duration);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let started = Instant::now();
        let polled = this.inner.as_mut().poll(cx);
        this.busy += started.elapsed();
        polled.map(|out| (out, this.busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_is_not_counted_and_working_is() {
        let (out, busy) = Busy::new(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            7
        })
        .await;
        assert_eq!(out, 7);
        assert!(
            busy < Duration::from_millis(100),
            "{busy:?} counted the sleep"
        );
        let (_, busy) = Busy::new(async {
            std::thread::sleep(Duration::from_millis(50)); // holds the thread
        })
        .await;
        assert!(busy >= Duration::from_millis(50), "{busy:?}");
    }
}
