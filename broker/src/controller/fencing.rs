//! Controller-epoch fencing on the receiving side: a broker remembers the
//! highest controller epoch it has seen and ignores anything a controller
//! of an older term sends (a deposed controller paused between its lease
//! check and its write must not be obeyed). Epochs come from the
//! controller Lease's terms and only grow.

/// The highest controller epoch seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EpochFence {
    seen: i64,
}

/// A message from an older controller term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("controller epoch {sent} is older than {seen}, already seen")]
pub struct StaleController {
    pub sent: i64,
    pub seen: i64,
}

impl EpochFence {
    /// Accepts a message of controller epoch `epoch` if it is not older
    /// than any seen before, and remembers it.
    pub fn admit(&mut self, epoch: i64) -> Result<(), StaleController> {
        if epoch < self.seen {
            return Err(StaleController {
                sent: epoch,
                seen: self.seen,
            });
        }
        self.seen = epoch;
        Ok(())
    }

    pub fn seen(&self) -> i64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_terms_are_refused_and_the_current_one_repeats() {
        let mut f = EpochFence::default();
        assert_eq!(f.admit(3), Ok(()));
        assert_eq!(f.admit(3), Ok(()), "the same term sends many messages");
        assert_eq!(f.admit(2), Err(StaleController { sent: 2, seen: 3 }));
        assert_eq!(f.seen(), 3, "a refused message changes nothing");
        assert_eq!(f.admit(7), Ok(()));
        assert_eq!(f.admit(3), Err(StaleController { sent: 3, seen: 7 }));
    }
}
