//! Shared receive queues.

use super::RecvWr;
use std::collections::VecDeque;

/// A shared receive queue.
pub struct Srq {
    pub pd: u32,
    pub queue: VecDeque<RecvWr>,
    pub max_wr: u32,
    /// The armed SRQ limit ("low watermark"); 0: not armed.
    pub limit: u32,
}
