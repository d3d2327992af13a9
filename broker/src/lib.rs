//! Moldau broker: a Kafka-compatible streaming log.
//!
//! - [`storage`] owns the bytes on disk (segments, indexes, recovery).

pub mod storage;
