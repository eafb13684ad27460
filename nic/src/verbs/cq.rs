//! Completion queues. A full CQ is an error, never silent loss: IBA 11.4.2.1
//! makes a CQ overrun an asynchronous error of the CQ, after which the
//! affected QPs go to the error state.

use super::wr::Wc;
use std::collections::VecDeque;

pub struct Cq {
    entries: VecDeque<Wc>,
    capacity: usize,
    overrun: bool,
}

/// The CQ overflowed; completions after the overflow are lost.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[error("completion queue overrun")]
pub struct CqOverrun;

impl Cq {
    pub fn new(capacity: usize) -> Cq {
        Cq {
            entries: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity,
            overrun: false,
        }
    }

    pub fn push(&mut self, wc: Wc) -> Result<(), CqOverrun> {
        if self.overrun || self.entries.len() >= self.capacity {
            self.overrun = true;
            return Err(CqOverrun);
        }
        self.entries.push_back(wc);
        Ok(())
    }

    /// Up to `max` completions, oldest first; `Err` once the CQ overran.
    pub fn poll(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, CqOverrun> {
        if self.overrun {
            return Err(CqOverrun);
        }
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n));
        Ok(n)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn is_overrun(&self) -> bool {
        self.overrun
    }
}
