//! A standalone broker's small cluster-level state kept beside its logs:
//! one JSON file per kind (dynamic broker configs, client quotas) in the
//! data directory, replaced atomically. In cluster mode the controller's
//! cluster record holds the same state instead.

use std::path::{Path, PathBuf};

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::TopicError;

/// One JSON file and its current value. A file that cannot be read is
/// logged and treated as the default (empty): the broker starts on its
/// static properties rather than not at all.
#[derive(Debug)]
pub struct JsonFile<T> {
    path: PathBuf,
    value: RwLock<T>,
}

impl<T: Serialize + DeserializeOwned + Default + Clone> JsonFile<T> {
    pub fn open(data_dir: &Path, file_name: &str) -> Self {
        let path = data_dir.join(file_name);
        let value = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::error!(path = %path.display(), error = %e, "unreadable; starting without it");
                T::default()
            }),
            Err(_) => T::default(),
        };
        Self {
            path,
            value: RwLock::new(value),
        }
    }

    pub fn get(&self) -> T {
        self.value.read().clone()
    }

    /// Changes the value with `change` and persists it (atomically) before
    /// it becomes current; on any error nothing changes.
    pub fn update(
        &self,
        change: impl FnOnce(&mut T) -> Result<(), TopicError>,
    ) -> Result<(), TopicError> {
        let mut current = self.value.write();
        let mut next = current.clone();
        change(&mut next)?;
        let bytes = serde_json::to_vec_pretty(&next)
            .map_err(|e| TopicError::new(ResponseError::UnknownServerError, e.to_string()))?;
        crate::metadata::write_atomically(&self.path, &bytes).map_err(TopicError::from_io)?;
        *current = next;
        Ok(())
    }
}
