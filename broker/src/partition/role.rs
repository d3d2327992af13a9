//! A partition's replica role and the leader's ISR bookkeeping: leader or
//! follower in a leader epoch, the leader's view of its replicas (committed
//! and pending ISR, followers' progress, where its epoch began), the ISR
//! changes it proposes, and what `acks=all` producers and metrics read of
//! it. Pure data and rules; the partition's lock guards them.

use kafka_protocol::error::ResponseError;

use crate::replication::progress;

/// What this broker is for the partition.
#[derive(Debug, Clone)]
pub(super) enum Role {
    Leader(LeaderState),
    /// Follows `leader` (-1: none now) in leader epoch `epoch`.
    Follower {
        leader: i32,
        epoch: i32,
    },
}

/// A leader's view of its replicas.
#[derive(Debug, Clone)]
pub(super) struct LeaderState {
    /// This broker's node id (-1 until an image names it: a partition just
    /// opened leads alone in epoch 0, which is what a standalone broker is).
    pub(super) node: i32,
    pub(super) epoch: i32,
    pub(super) partition_epoch: i32,
    pub(super) replicas: Vec<i32>,
    /// The committed ISR (the leader included); empty means the leader alone.
    pub(super) isr: Vec<i32>,
    /// An ISR change sent to the controller and not yet committed.
    pub(super) pending_isr: Option<Vec<i32>>,
    /// The log end when this leadership began: a follower must hold it to
    /// join the ISR.
    pub(super) epoch_start_offset: i64,
    pub(super) followers: progress::Followers,
}

impl LeaderState {
    pub(super) fn alone() -> Self {
        Self {
            node: -1,
            epoch: 0,
            partition_epoch: 0,
            replicas: Vec::new(),
            isr: Vec::new(),
            pending_isr: None,
            epoch_start_offset: 0,
            followers: Default::default(),
        }
    }

    /// The ISR the high watermark must wait for: the committed one and any
    /// member a pending change adds (Kafka's "maximal ISR"), so a record
    /// counts as committed only once every replica that may be in the ISR
    /// has it.
    pub(super) fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        if let Some(pending) = &self.pending_isr {
            for r in pending {
                if !isr.contains(r) {
                    isr.push(*r);
                }
            }
        }
        isr
    }

    /// Proposes `isr` for partition `index` of `topic` (pending until the
    /// controller answers).
    pub(super) fn propose(
        &mut self,
        topic: &str,
        index: i32,
        isr: Vec<i32>,
        shrink: bool,
    ) -> IsrProposal {
        self.pending_isr = Some(isr.clone());
        IsrProposal {
            topic: topic.to_string(),
            index,
            leader: self.node,
            leader_epoch: self.epoch,
            partition_epoch: self.partition_epoch,
            isr,
            shrink,
        }
    }

    /// The number of in-sync replicas `min.insync.replicas` counts.
    pub(super) fn isr_size(&self) -> usize {
        self.isr.len().max(1)
    }
}

/// An ISR change a leader proposes; the controller commits it (or not)
/// with the partition epoch as a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub topic: String,
    pub index: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// It removes replicas (else it adds one).
    pub shrink: bool,
}

/// A leader's replication state, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSummary {
    pub replicas: usize,
    pub isr: usize,
    /// Each follower's distance behind the leader's log end, in offsets
    /// (the whole log end when it has not fetched yet).
    pub follower_lag: Vec<(i32, i64)>,
}

/// Where an `acks=all` produce stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// The in-sync replicas have it.
    Done,
    /// Not yet replicated to every in-sync replica.
    Waiting,
    Failed(ResponseError),
}
