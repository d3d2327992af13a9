//! One topic as this broker holds it: its persisted description and the
//! partitions of it this broker opened, with the lookup by partition index
//! every request path uses.

use std::sync::Arc;

use crate::metadata::TopicMeta;
use crate::partition::Partition;

/// A topic and the partitions this broker holds, by index (all of them in
/// standalone mode; those the controller placed here in cluster mode).
#[derive(Debug)]
pub struct Topic {
    pub meta: TopicMeta,
    /// Sorted by index.
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    /// The partition with this index, if this broker holds it (any `i32`
    /// from the wire is fine, negative ones included).
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        let at = usize::try_from(index).ok()?;
        match self.partitions.get(at) {
            // every partition held (standalone): the index is the position
            Some(p) if p.index == index => Some(p),
            _ => self
                .partitions
                .binary_search_by_key(&index, |p| p.index)
                .ok()
                .map(|i| &self.partitions[i]),
        }
    }
}
