//! Transport timer values, and the index of the QPs' deadlines.

use crate::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// IBA 9.7.6.1.3 / C9-140: the local ACK timeout is 4.096 us * 2^timeout;
/// 0 disables the timer.
pub fn local_ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    Some(Duration::from_nanos(4096u64 << timeout.min(31)))
}

/// IBA Table 45 (encoding of the RNR NAK timer field), in microseconds.
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The minimum RNR NAK timer for a 5-bit code.
pub fn rnr_timer(code: u8) -> Duration {
    Duration::from_micros(RNR_US[(code & 0x1F) as usize] as u64)
}

/// Every QP's next deadline (the earliest of its local ACK timer, IBA
/// 9.7.6.1.3 / C9-140; its RNR timer, IBA 9.7.5.2.8; and its DCQCN / pacing
/// timers), in a min-heap so that the earliest one, and the QPs due at a
/// given instant, are found without visiting every QP: an idle engine turn
/// costs O(1), not O(#QPs).
///
/// The owner calls [`Self::set`] with a QP slot's current deadline after
/// anything that may have changed it, and with `None` when the slot is
/// emptied. `armed` holds each slot's current deadline; a heap entry is
/// live only while it matches (lazy invalidation), so a moved timer, or a
/// destroyed or reused slot, leaves only dead entries, which are dropped
/// when they reach the top (the top is always live, so [`Self::first`] is
/// exact) or when dead entries outnumber live ones (the heap is rebuilt).
/// A heap rather than an ordered set: the ACK timer moves on every ACK, and
/// a push onto a vector is cheaper than a tree's remove and insert.
#[derive(Debug, Default)]
pub(crate) struct DeadlineIndex {
    /// (deadline, QP slot) entries, live or dead; the top one is live.
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Each slot's deadline.
    armed: Vec<Option<Instant>>,
    /// Slots with a deadline.
    live: usize,
}

impl DeadlineIndex {
    fn is_live(&self, (d, idx): (Instant, u32)) -> bool {
        self.armed.get(idx as usize).copied().flatten() == Some(d)
    }

    /// Drops dead entries from the top.
    fn trim(&mut self) {
        while let Some(&Reverse(e)) = self.heap.peek() {
            if self.is_live(e) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Records `deadline` as slot `idx`'s next deadline (`None`: none).
    pub(crate) fn set(&mut self, idx: usize, deadline: Option<Instant>) {
        if idx >= self.armed.len() {
            if deadline.is_none() {
                return;
            }
            self.armed.resize(idx + 1, None);
        }
        let old = std::mem::replace(&mut self.armed[idx], deadline);
        if old == deadline {
            return;
        }
        self.live = self.live + deadline.is_some() as usize - old.is_some() as usize;
        if let Some(d) = deadline {
            self.heap.push(Reverse((d, idx as u32)));
        }
        if self.heap.len() > 2 * self.live + 64 {
            // more dead entries than live ones: O(#QPs), amortised over
            // the (at least live + 64) updates that made them
            let live = self.armed.iter().enumerate();
            self.heap = live
                .filter_map(|(i, d)| Some(Reverse(((*d)?, i as u32))))
                .collect();
        } else {
            self.trim();
        }
    }

    /// The earliest deadline of any slot.
    pub(crate) fn first(&self) -> Option<Instant> {
        self.heap.peek().map(|&Reverse((d, _))| d)
    }

    /// Whether any slot's deadline is at or before `now`.
    pub(crate) fn any_due(&self, now: Instant) -> bool {
        self.first().is_some_and(|d| d <= now)
    }

    /// Takes out the slots whose deadline is at or before `now` (their
    /// deadlines become `None`: the caller fires their timers and sets
    /// them again) into `out`, in slot order (the order the former scan
    /// of every QP fired them in).
    pub(crate) fn take_due(&mut self, now: Instant, out: &mut Vec<u32>) {
        out.clear();
        while let Some(&Reverse(e @ (d, idx))) = self.heap.peek() {
            if d > now {
                break;
            }
            self.heap.pop();
            if self.is_live(e) {
                // a second live entry of the same deadline is dead now
                self.armed[idx as usize] = None;
                self.live -= 1;
                out.push(idx);
            }
        }
        self.trim();
        out.sort_unstable();
    }

    /// Whether the index holds exactly `deadlines` (slot by slot): every
    /// one has a live entry, the top entry is live and is the earliest.
    pub(crate) fn check(&self, deadlines: impl Iterator<Item = Option<Instant>>) -> bool {
        let entries: std::collections::HashSet<(Instant, u32)> =
            self.heap.iter().map(|&Reverse(e)| e).collect();
        let mut n = 0;
        let mut min = None;
        for (idx, d) in deadlines.enumerate() {
            if self.armed.get(idx).copied().flatten() != d {
                return false;
            }
            if let Some(d) = d {
                if !entries.contains(&(d, idx as u32)) {
                    return false;
                }
                n += 1;
                min = Some(min.map_or(d, |m: Instant| m.min(d)));
            }
        }
        n == self.live && self.armed.iter().flatten().count() == n && self.first() == min
    }

    /// Slot `idx`'s deadline as recorded.
    #[cfg(test)]
    pub(crate) fn get(&self, idx: usize) -> Option<Instant> {
        self.armed.get(idx).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(
            local_ack_timeout(14),
            Some(Duration::from_nanos(67_108_864))
        );
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }

    #[test]
    fn deadline_index() {
        let t = Instant::from_nanos;
        let mut x = DeadlineIndex::default();
        assert_eq!(x.first(), None);
        x.set(3, None);
        x.set(5, Some(t(50)));
        x.set(2, Some(t(20)));
        x.set(7, Some(t(20)));
        assert_eq!(x.first(), Some(t(20)));
        let mut due = vec![99];
        x.take_due(t(19), &mut due);
        assert!(due.is_empty());
        assert!(!x.any_due(t(19)));
        // moving a deadline leaves no live entry behind
        x.set(2, Some(t(60)));
        x.set(2, Some(t(10)));
        x.set(2, Some(t(60)));
        assert_eq!(x.first(), Some(t(20)));
        x.take_due(t(50), &mut due);
        assert_eq!(due, [5, 7]);
        assert_eq!(x.get(5), None);
        assert_eq!(x.first(), Some(t(60)));
        assert!(x.check([None, None, Some(t(60))].into_iter()));
        // A -> B -> A: two entries of one deadline, fired once
        x.set(3, Some(t(70)));
        x.set(3, Some(t(80)));
        x.set(3, Some(t(70)));
        x.take_due(t(100), &mut due);
        assert_eq!(due, [2, 3]);
        assert_eq!(x.first(), None);
        assert_eq!(x.get(2), None);
        assert_eq!(x.get(100), None);
        // many moves: dead entries do not pile up
        for k in 0..10_000u64 {
            x.set(1, Some(t(1_000_000 - k)));
        }
        assert!(x.heap.len() <= 2 * x.live + 64 + 1);
        assert_eq!(x.first(), Some(t(1_000_000 - 9_999)));
        x.set(1, None);
        assert_eq!(x.first(), None);
    }
}
