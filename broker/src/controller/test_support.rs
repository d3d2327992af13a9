//! Fixtures shared by the controller's unit tests.

use std::collections::BTreeSet;

use super::leadership::PartitionState;

/// Partition 0 of topic `t` with these replicas, ISR and leader (leader
/// epoch 5, partition epoch 9, no move in progress).
pub fn p(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionState {
    PartitionState {
        topic: "t".into(),
        topic_id: uuid::Uuid::nil(),
        index: 0,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: 5,
        partition_epoch: 9,
        adding: vec![],
        removing: vec![],
        elr: vec![],
    }
}

/// A set of broker ids.
pub fn set(ids: &[i32]) -> BTreeSet<i32> {
    ids.iter().copied().collect()
}
