//! Wall-clock time as Kafka carries it: milliseconds since the Unix epoch.
//!
//! Bottom vocabulary: imports nothing of the broker.

/// Now, in milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
