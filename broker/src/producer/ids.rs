//! Producer id allocation: ids come from blocks whose upper end is
//! persisted (by the caller) before any id of the block is handed out, so
//! ids stay unique across restarts even after a crash.

/// How many ids one persisted block covers.
pub const BLOCK_SIZE: i64 = 1000;

/// Hands out producer ids; `next_block_end` tells when a new block must be
/// persisted first.
#[derive(Debug, Clone)]
pub struct ProducerIdBlocks {
    next: i64,
    block_end: i64,
}

impl ProducerIdBlocks {
    /// Starts after everything an earlier run may have handed out.
    pub fn resume(persisted_block_end: i64) -> Self {
        Self {
            next: persisted_block_end,
            block_end: persisted_block_end,
        }
    }

    /// The block end to persist before [`take`](Self::take) may proceed,
    /// if the current block is used up.
    pub fn needs_new_block(&self) -> Option<i64> {
        (self.next >= self.block_end).then(|| self.next + BLOCK_SIZE)
    }

    /// Records that `end` has been persisted.
    pub fn block_persisted(&mut self, end: i64) {
        self.block_end = end;
    }

    /// The next id; only valid when [`needs_new_block`](Self::needs_new_block) is `None`.
    pub fn take(&mut self) -> Option<i64> {
        if self.next >= self.block_end {
            return None;
        }
        let id = self.next;
        self.next += 1;
        Some(id)
    }

    /// The block end last persisted (or resumed from).
    pub fn persisted_end(&self) -> i64 {
        self.block_end
    }

    /// Whether `id` was handed out by this or an earlier run.
    pub fn issued(&self, id: i64) -> bool {
        id >= 0 && id < self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_resumes() {
        let mut a = ProducerIdBlocks::resume(0);
        assert_eq!(a.take(), None);
        let end = a.needs_new_block().unwrap();
        assert_eq!(end, BLOCK_SIZE);
        a.block_persisted(end);
        assert_eq!(a.take(), Some(0));
        assert_eq!(a.take(), Some(1));
        // A crash now: the next run resumes after the persisted block.
        let mut b = ProducerIdBlocks::resume(end);
        let end2 = b.needs_new_block().unwrap();
        b.block_persisted(end2);
        assert_eq!(b.take(), Some(BLOCK_SIZE));
        assert!(b.issued(1));
        assert!(!b.issued(BLOCK_SIZE + 1));
    }
}
