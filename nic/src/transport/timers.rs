//! Transport timer values, and the index of the QPs' deadlines.

use crate::Instant;
use std::collections::BTreeSet;
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
/// timers), kept exact and ordered so that the earliest one, and the QPs
/// due at a given instant, are found without visiting every QP: an idle
/// engine turn costs O(log #QPs), not O(#QPs).
///
/// The owner calls [`Self::set`] with a QP slot's current deadline after
/// anything that may have changed it, and with `None` when the slot is
/// emptied, so a destroyed or reused slot never keeps a stale entry.
#[derive(Debug, Default)]
pub(crate) struct DeadlineIndex {
    /// (deadline, QP slot), one entry per slot with a deadline.
    by_time: BTreeSet<(Instant, u32)>,
    /// Each slot's deadline as entered in `by_time`.
    armed: Vec<Option<Instant>>,
}

impl DeadlineIndex {
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
        if let Some(o) = old {
            self.by_time.remove(&(o, idx as u32));
        }
        if let Some(d) = deadline {
            self.by_time.insert((d, idx as u32));
        }
    }

    /// The earliest deadline of any slot.
    pub(crate) fn first(&self) -> Option<Instant> {
        self.by_time.first().map(|&(d, _)| d)
    }

    /// Whether any slot's deadline is at or before `now`.
    pub(crate) fn any_due(&self, now: Instant) -> bool {
        self.first().is_some_and(|d| d <= now)
    }

    /// Replaces `out` with the slots whose deadline is at or before `now`,
    /// in slot order (the order the former scan of every QP fired them in).
    pub(crate) fn due(&self, now: Instant, out: &mut Vec<u32>) {
        out.clear();
        out.extend(
            self.by_time
                .iter()
                .take_while(|&&(d, _)| d <= now)
                .map(|&(_, idx)| idx),
        );
        out.sort_unstable();
    }

    /// Whether the index holds exactly `deadlines` (slot by slot) and
    /// nothing else.
    pub(crate) fn check(&self, deadlines: impl Iterator<Item = Option<Instant>>) -> bool {
        let mut n = 0;
        for (idx, d) in deadlines.enumerate() {
            if self.armed.get(idx).copied().flatten() != d {
                return false;
            }
            if let Some(d) = d {
                if !self.by_time.contains(&(d, idx as u32)) {
                    return false;
                }
                n += 1;
            }
        }
        n == self.by_time.len() && self.armed.iter().flatten().count() == n
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
        x.due(t(19), &mut due);
        assert!(due.is_empty());
        assert!(!x.any_due(t(19)));
        x.due(t(50), &mut due);
        assert_eq!(due, [2, 5, 7]);
        // moving a deadline leaves no stale entry behind
        x.set(2, Some(t(60)));
        x.due(t(50), &mut due);
        assert_eq!(due, [5, 7]);
        x.set(7, None);
        x.set(5, None);
        assert_eq!(x.first(), Some(t(60)));
        assert_eq!(x.get(2), Some(t(60)));
        assert_eq!(x.get(7), None);
        assert_eq!(x.get(100), None);
        x.set(2, None);
        assert_eq!(x.first(), None);
    }
}
