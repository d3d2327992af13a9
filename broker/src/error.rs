//! The broker's refusals in Kafka's terms: [`TopicError`] (a Kafka error
//! code and a message for the client), the code a [`StorageError`] maps
//! to, and the hints a storage error carries (out of file descriptors, a
//! full data directory).
//!
//! Vocabulary of every floor above storage: it imports only storage's
//! error type, so partitions, topics, coordinators and handlers all refuse
//! with the same type without importing each other.

use kafka_protocol::error::ResponseError;

use crate::storage::StorageError;

/// A refused admin operation: the Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct TopicError {
    pub code: ResponseError,
    pub message: String,
}

impl TopicError {
    pub fn new(code: ResponseError, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A failed file operation of the broker's own (metadata, markers):
    /// `KAFKA_STORAGE_ERROR`, with the same hints as a log's.
    pub fn from_io(e: std::io::Error) -> Self {
        StorageError::Io(e).into()
    }
}

impl From<StorageError> for TopicError {
    fn from(e: StorageError) -> Self {
        let hint = match &e {
            StorageError::Io(io) if is_fd_exhaustion(io) => {
                "; the broker ran out of file descriptors (see moldau_open_fds and moldau_max_fds in /metrics)"
            }
            StorageError::Io(io) if io.raw_os_error() == Some(libc::ENOSPC) => {
                "; the data directory is full"
            }
            _ => "",
        };
        TopicError::new(storage_error_code(&e), format!("{e}{hint}"))
    }
}

/// EMFILE (this process) or ENFILE (the whole system).
pub fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The Kafka error code of a storage error.
pub fn storage_error_code(e: &StorageError) -> ResponseError {
    match e {
        StorageError::Io(_) => ResponseError::KafkaStorageError,
        StorageError::CorruptBatch(_) => ResponseError::CorruptMessage,
        StorageError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
        StorageError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::InvalidTimestamp(_) | StorageError::TimestampErrors { .. } => {
            ResponseError::InvalidTimestamp
        }
        StorageError::InvalidRecord(_) | StorageError::RecordErrors { .. } => {
            ResponseError::InvalidRecord
        }
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_of_the_brokers_own_files_carry_the_logs_hints() {
        let fds = TopicError::from_io(std::io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(fds.code, ResponseError::KafkaStorageError);
        assert!(fds.message.contains("file descriptors"), "{}", fds.message);
        let full = TopicError::from_io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(
            full.message.contains("data directory is full"),
            "{}",
            full.message
        );
        let other = TopicError::from_io(std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(other.code, ResponseError::KafkaStorageError);
        assert!(!other.message.contains(';'), "{}", other.message);
    }
}
