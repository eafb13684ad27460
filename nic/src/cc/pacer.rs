//! Packet-granularity pacing of one QP to its DCQCN rate.
//!
//! A [`Pacer`] keeps the earliest time the QP's next packet may start: after
//! a packet of `b` wire bytes sent at rate `r`, the next may start `8b/r`
//! later (or at once if the QP was idle longer). No credit accumulates while
//! idle, so a QP never bursts above its rate. Time is kept in picoseconds so
//! that rounding does not drift at 100 Gb/s (a 1 KiB packet is 82 ns).
//!
//! The pacer is per-QP state, owned by whoever transmits for the QP: no lock
//! per packet. When the reaction point runs elsewhere (another core handles
//! received CNPs), it publishes the rate through a [`SharedRate`], one
//! relaxed atomic load per packet.

use crate::time::Instant;
use std::sync::atomic::{AtomicU64, Ordering};

const PS_PER_NS: u64 = 1000;
const PS_PER_S: u128 = 1_000_000_000_000;

/// Next-send-time pacer on the caller's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacer {
    next_ps: u64,
    /// Remainder of the last gap, in 1/rate picoseconds (no rounding drift).
    rem: u128,
}

impl Pacer {
    pub const fn new() -> Pacer {
        Pacer { next_ps: 0, rem: 0 }
    }

    /// The earliest instant the next packet may start (rounded up to ns).
    pub fn next_send(&self) -> Instant {
        self.next_send_ahead(0)
    }

    /// Whether a packet may start at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        self.ready_ahead(now, 0)
    }

    /// Whether a packet may start at `now` when the pacer may run up to
    /// `ahead_ps` picoseconds ahead of its rate (a burst allowance:
    /// credit accumulates while idle up to that much, no further).
    pub fn ready_ahead(&self, now: Instant, ahead_ps: u64) -> bool {
        now.as_nanos()
            .saturating_mul(PS_PER_NS)
            .saturating_add(ahead_ps)
            >= self.next_ps
    }

    /// The earliest instant [`Self::ready_ahead`] allows the next packet.
    pub fn next_send_ahead(&self, ahead_ps: u64) -> Instant {
        Instant::from_nanos(self.next_ps.saturating_sub(ahead_ps).div_ceil(PS_PER_NS))
    }

    /// A packet of `wire_bytes` started at `now` under rate `rate_bps`
    /// (0 = unpaced). Call it for every packet the QP sends.
    pub fn on_send(&mut self, now: Instant, wire_bytes: u64, rate_bps: u64) {
        let start = self.next_ps.max(now.as_nanos().saturating_mul(PS_PER_NS));
        let gap = if rate_bps == 0 {
            0
        } else {
            let r = rate_bps as u128;
            let num = wire_bytes as u128 * 8 * PS_PER_S + self.rem;
            self.rem = num % r;
            (num / r).min(u64::MAX as u128) as u64
        };
        self.next_ps = start.saturating_add(gap);
    }
}

/// A rate published by one thread and read by another without a lock.
#[derive(Debug, Default)]
pub struct SharedRate(AtomicU64);

impl SharedRate {
    pub const fn new(bps: u64) -> SharedRate {
        SharedRate(AtomicU64::new(bps))
    }

    pub fn set(&self, bps: u64) {
        self.0.store(bps, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_at_packet_granularity() {
        let mut p = Pacer::new();
        let t0 = Instant::from_nanos(1_000);
        assert!(p.ready(t0));
        // 1250 bytes at 10 Gb/s = 1 µs
        p.on_send(t0, 1250, 10_000_000_000);
        assert_eq!(p.next_send(), Instant::from_nanos(2_000));
        assert!(!p.ready(Instant::from_nanos(1_999)));
        assert!(p.ready(Instant::from_nanos(2_000)));
        // sent late: the gap counts from the actual start, no credit
        p.on_send(Instant::from_nanos(5_000), 1250, 10_000_000_000);
        assert_eq!(p.next_send(), Instant::from_nanos(6_000));
        // sent early (caller ignored ready): starts at next_send
        p.on_send(Instant::from_nanos(5_500), 1250, 10_000_000_000);
        assert_eq!(p.next_send(), Instant::from_nanos(7_000));
        // sub-ns gaps do not drift: 1000 packets of 1 byte at 3 Gb/s = 2666.67 ns
        let mut q = Pacer::new();
        for _ in 0..1000 {
            q.on_send(Instant::ZERO, 1, 3_000_000_000); // back to back
        }
        assert_eq!(q.next_send(), Instant::from_nanos(2_667));
        // unpaced
        let mut u = Pacer::new();
        u.on_send(t0, 9000, 0);
        assert!(u.ready(t0));
    }

    #[test]
    fn shared_rate() {
        let r = SharedRate::new(5);
        r.set(7);
        assert_eq!(r.get(), 7);
    }
}
