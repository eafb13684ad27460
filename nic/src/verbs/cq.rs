//! Completion queues. A full CQ is an error, never silent loss: IBA 11.4.2.1
//! makes a CQ overrun an asynchronous error of the CQ, after which the
//! affected QPs go to the error state.

use super::wr::Wc;
use std::collections::VecDeque;

pub struct Cq {
    /// Completions, oldest first, each with its place in the device's
    /// order of completions ([`Cq::oldest`]).
    entries: VecDeque<(u64, Wc)>,
    capacity: usize,
    overrun: bool,
    /// On the device's list of CQs with new completions
    /// (`Rnic::take_ready_cqs`).
    pub(crate) listed: bool,
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
            listed: false,
        }
    }

    /// Adds completion `wc`, the device's `seq`-th.
    pub fn push(&mut self, seq: u64, wc: Wc) -> Result<(), CqOverrun> {
        if self.overrun || self.entries.len() >= self.capacity {
            self.overrun = true;
            return Err(CqOverrun);
        }
        self.entries.push_back((seq, wc));
        Ok(())
    }

    /// The device-wide sequence number of the oldest completion held: which
    /// of several CQs got a completion first, for their events to go out in
    /// that order (a completion channel's events follow the completions, as
    /// a NIC's event queue does).
    pub fn oldest(&self) -> Option<u64> {
        self.entries.front().map(|(seq, _)| *seq)
    }

    /// Up to `max` completions, oldest first; `Err` once the CQ overran.
    pub fn poll(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, CqOverrun> {
        if self.overrun {
            return Err(CqOverrun);
        }
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n).map(|(_, wc)| wc));
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
