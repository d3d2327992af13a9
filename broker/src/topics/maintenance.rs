//! The periodic work over every partition the topic manager holds:
//! retention and the flush policy (`log.retention.check.interval.ms`),
//! rounds of the log cleaner (`log.cleaner.backoff.ms`), the data
//! directory's high watermark checkpoint, and the clean close of every log
//! at shutdown. The server's background tasks call these.

use std::sync::Arc;

use super::manager::TopicManager;
use crate::clock::now_ms;
use crate::partition::Partition;
use crate::storage::high_watermarks;
use crate::storage::CompactionPlan;

impl TopicManager {
    /// Runs retention and the flush policy on every partition
    /// (`log.retention.check.interval.ms`; compaction is [`Self::clean`]).
    pub fn housekeeping(&self) {
        let now = now_ms();
        for topic in self.all() {
            for p in &topic.partitions {
                let outcome = p.with_log(|log| {
                    let r = log.enforce_retention(now);
                    if let Err(e) = log.maybe_flush(now) {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "flush failed");
                    }
                    r
                });
                match outcome {
                    Ok(o) if o.segments_deleted > 0 => tracing::info!(
                        topic = %p.topic,
                        partition = p.index,
                        segments = o.segments_deleted,
                        bytes = o.bytes_deleted,
                        log_start_offset = o.log_start_offset,
                        "retention deleted segments"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                    }
                }
            }
        }
    }

    /// Rewrites the data directory's high watermark checkpoint with every
    /// partition's high watermark, when one changed (every
    /// `high_watermarks::CHECKPOINT_INTERVAL_MS`, as Kafka's checkpoint
    /// thread, and after the logs are closed): one file and its fsyncs
    /// whatever the number of partitions. The values are the published
    /// ones, read without the partitions' locks, so no produce or fetch
    /// waits for it; a truncation between the gathering and the write
    /// makes this round drop its values (see `HighWatermarks::write_all`).
    pub fn checkpoint_high_watermarks(&self) {
        let since = self.high_watermarks.generation();
        let entries: high_watermarks::Entries = self
            .all()
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.key(), p.checkpoint_entry(p.published_high_watermark())))
            .collect();
        match self.high_watermarks.write_all(since, entries) {
            Ok(outcome) => tracing::trace!(?outcome, "high watermark checkpoint"),
            // a full disk delays it; written again next time
            Err(e) => tracing::warn!(error = %e, "cannot checkpoint the high watermarks"),
        }
    }

    /// One round of the log cleaner (every `log.cleaner.backoff.ms`): a
    /// compaction pass on each compacted partition that is due for one. A
    /// pass does its reading and writing between two short holds of the
    /// partition's lock (see `PartitionLog::plan_compaction`), so produce
    /// and fetch go on while a partition is cleaned; its I/O counts against
    /// `log.cleaner.io.max.bytes.per.second`.
    pub fn clean(&self) {
        for topic in self.all() {
            for p in &topic.partitions {
                let now = now_ms();
                let started = std::time::Instant::now();
                let plan = if p.with_log(|log| log.config().compact) {
                    p.plan_compaction(now)
                } else {
                    Ok(CompactionPlan::Nothing(Default::default()))
                };
                let planned = started.elapsed();
                let mut ran_for = std::time::Duration::ZERO;
                let mut swapped = std::time::Duration::ZERO;
                let mut swap_locked = std::time::Duration::ZERO;
                let outcome = match plan {
                    Ok(CompactionPlan::Nothing(_)) => continue,
                    Ok(CompactionPlan::Pass(mut pass)) => {
                        let t = std::time::Instant::now();
                        let ran = pass.run(&self.cleaner_throttle);
                        ran_for = t.elapsed();
                        let t = std::time::Instant::now();
                        let finished = p.with_log(|log| {
                            let finished = log.finish_compaction(pass, ran);
                            swap_locked = t.elapsed();
                            finished
                        });
                        swapped = t.elapsed();
                        finished
                    }
                    Err(e) => Err(e),
                };
                // The plan and the swap hold the partition's lock (what
                // produce and fetch wait for); logged so that a slow one
                // shows. swap_locked_ms is the lock's part (waiting for the
                // lock included); swap_ms also counts freeing the retired
                // files, which `with_log` does after releasing the lock.
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                match outcome {
                    Ok(o) if o.abandoned => {
                        tracing::info!(topic = %p.topic, partition = p.index, "compaction pass abandoned: the log changed while it ran")
                    }
                    Ok(o) => tracing::debug!(
                        topic = %p.topic,
                        partition = p.index,
                        plan_ms = ms(planned),
                        pass_ms = ms(ran_for),
                        swap_ms = ms(swapped),
                        swap_locked_ms = ms(swap_locked),
                        segments_rewritten = o.segments_rewritten,
                        segments_deleted = o.segments_deleted,
                        "compaction pass"
                    ),
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "compaction failed")
                    }
                }
            }
        }
    }

    /// Clean shutdown: closes every partition's log in place (see
    /// [`PartitionLog::close_in_place`]: fsync what changed, checkpoints,
    /// clean-shutdown marker), on up to [`CLOSE_THREADS`] threads at once.
    /// The work is fsyncs, which the filesystem batches into shared journal
    /// commits when they come from many threads, so a broker with thousands
    /// of partitions closes in seconds instead of one fsync after another.
    /// Logs refuse appends once closed, so a request still in flight cannot
    /// write behind a marker.
    pub fn close(&self) {
        let partitions: Vec<Arc<Partition>> = self
            .all()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(p) = partitions.get(i) else { break };
            if let Err(e) = p.close_log() {
                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing log failed; the next start recovers it");
            }
        };
        let threads = CLOSE_THREADS.min(partitions.len());
        std::thread::scope(|scope| {
            for n in 1..threads {
                let spawned = std::thread::Builder::new()
                    .name(format!("moldau-close-{n}"))
                    .spawn_scoped(scope, work);
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start another thread to close logs");
                    break;
                }
            }
            work();
        });
        tracing::info!(
            partitions = partitions.len(),
            failed = failed.into_inner(),
            "logs closed"
        );
        // the closed logs' high watermarks no longer move
        self.checkpoint_high_watermarks();
    }
}

/// At most this many threads close logs at shutdown.
pub const CLOSE_THREADS: usize = 16;
