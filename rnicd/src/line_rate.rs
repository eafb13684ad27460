//! `rnicd --line-rate`: a port held to a given link speed. The device
//! takes its line rate from the port (DCQCN's ceiling and its rate steps
//! are relative to it, and PFC pause quanta last 512 bit times at it), and
//! the port lets frames leave no faster than that rate: a veth or an
//! in-memory wire otherwise carries them as fast as the CPU makes them, so
//! a switch queue downstream would see bursts no link of that speed could
//! deliver.
//!
//! The pacer is a token bucket of bytes ([`Pacer`]) filled at the line
//! rate: a frame costs its length (padded to Ethernet's 60-byte minimum)
//! plus [`WIRE_OVERHEAD`], the bytes a frame takes on a real link besides
//! the ones the port is handed (preamble and start delimiter 8, FCS 4,
//! inter-frame gap 12). The bucket holds [`BURST_FRAMES`] frames of the
//! largest size, so at most that much leaves back to back; the engine
//! makes no more frames than [`Port::tx_room`] says and, while frames
//! wait, parks until [`Port::tx_ready_in`]: when half the bucket is back.

use nic::io::{FrameBatch, Port};
use std::time::Duration;

pub use nic::rate::{parse_rate, BadRate};

/// Bytes a frame occupies on an Ethernet link besides its header and
/// payload: preamble 7, start-of-frame delimiter 1, FCS 4, inter-frame
/// gap 12.
pub const WIRE_OVERHEAD: u64 = 24;

/// Ethernet's shortest frame without its FCS: shorter frames are padded.
const MIN_FRAME: u64 = 60;

/// Largest frames that may leave back to back.
pub const BURST_FRAMES: u64 = 8;

/// A token bucket of bytes on a clock given in each call (nanoseconds
/// since any fixed start), so it runs the same on the virtual clock of a
/// test as on the monotonic one.
#[derive(Debug, Clone)]
pub struct Pacer {
    bps: u64,
    /// The cost of the largest frame (header, MTU, a VLAN tag, overhead).
    max_cost: u64,
    /// The bucket's depth, bytes.
    burst: u64,
    /// Bytes that may leave now, in thousandths of a byte of the wire
    /// (so a refill of a few ns is not rounded away).
    milli_tokens: u64,
    last_ns: u64,
}

impl Pacer {
    /// A full bucket at `bps` bits per second for frames carrying up to
    /// `mtu` bytes of IP.
    pub fn new(bps: u64, mtu: usize) -> Pacer {
        let max_cost = frame_cost(mtu as u64 + 18);
        let burst = BURST_FRAMES * max_cost;
        Pacer {
            bps: bps.max(1),
            max_cost,
            burst,
            milli_tokens: burst * 1000,
            last_ns: 0,
        }
    }

    /// Adds what the line rate gave since the last call (never more than
    /// the bucket holds).
    fn refill(&mut self, now_ns: u64) {
        let add = self.earned(now_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.milli_tokens = self.milli_tokens.saturating_add(add).min(self.burst * 1000);
    }

    /// Thousandths of a byte the line rate gave from the last refill to
    /// `now_ns`.
    fn earned(&self, now_ns: u64) -> u64 {
        let dt = now_ns.saturating_sub(self.last_ns);
        // bytes × 1000 = bits/8 × ns/1e9 × 1000 = bits × ns / 8e6
        (u128::from(self.bps) * u128::from(dt) / 8_000_000).min(u128::from(u64::MAX)) as u64
    }

    /// How many frames of the largest size may leave at `now_ns`.
    pub fn room(&mut self, now_ns: u64) -> usize {
        self.refill(now_ns);
        (self.milli_tokens / 1000 / self.max_cost) as usize
    }

    /// A frame of `len` bytes (its header included, FCS not) left.
    pub fn sent(&mut self, len: usize) {
        self.milli_tokens = self
            .milli_tokens
            .saturating_sub(frame_cost(len as u64) * 1000);
    }

    /// How long from `now_ns` until half the bucket is full again (zero
    /// when it is).
    pub fn ready_in(&self, now_ns: u64) -> Duration {
        let have = self.milli_tokens.saturating_add(self.earned(now_ns));
        let want = (self.burst / 2).max(self.max_cost) * 1000;
        let short = want.saturating_sub(have);
        // ns = milli-bytes × 8e6 / bps
        Duration::from_nanos((u128::from(short) * 8_000_000).div_ceil(u128::from(self.bps)) as u64)
    }
}

/// What a frame of `len` bytes costs on the wire.
pub fn frame_cost(len: u64) -> u64 {
    len.max(MIN_FRAME) + WIRE_OVERHEAD
}

/// `inner` with the link speed `bps`, its transmissions held to it.
pub struct LineRate {
    inner: Box<dyn Port>,
    bps: u64,
    pacer: Pacer,
    start: std::time::Instant,
}

impl LineRate {
    pub fn new(inner: Box<dyn Port>, bps: u64) -> LineRate {
        let pacer = Pacer::new(bps, inner.mtu());
        LineRate {
            inner,
            bps,
            pacer,
            start: std::time::Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

impl Port for LineRate {
    fn link_speed_bps(&self) -> u64 {
        self.bps
    }

    fn tx_room(&mut self, want: usize) -> usize {
        let now = self.now_ns();
        let paced = self.pacer.room(now);
        self.inner.tx_room(want.min(paced))
    }

    fn tx_ready_in(&self) -> Option<Duration> {
        let t = self.pacer.ready_in(self.now_ns());
        // a full bucket: what holds frames back is the inner port's
        if t.is_zero() {
            self.inner.tx_ready_in()
        } else {
            Some(t)
        }
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        // what left: a prefix of the batch (`Port::send`)
        let n = self.inner.send(batch);
        for f in batch.iter().take(n) {
            self.pacer.sent(f.len());
        }
        n
    }

    nic::forward_port!(field inner: recv, train_bytes, mac, mtu, counters, wait, wait_or_ring, wait_unheld, attach_bell, pending, rx_backlog, link_up, loop_back);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: usize = 1500;

    /// Sends frames of `len` whenever the pacer allows, checking at every
    /// step of `step_ns` over `steps` that the bytes let through never
    /// exceed rate × elapsed + the bucket; returns the bytes sent.
    fn drive(p: &mut Pacer, bps: u64, len: usize, step_ns: u64, steps: u64) -> u64 {
        let burst = BURST_FRAMES * frame_cost(MTU as u64 + 18);
        let mut sent = 0u64;
        for i in 0..=steps {
            let now = i * step_ns;
            for _ in 0..p.room(now) {
                p.sent(len);
                sent += frame_cost(len as u64);
            }
            let allowed = u128::from(bps) * u128::from(now) / 8_000_000_000 + u128::from(burst);
            assert!(
                u128::from(sent) <= allowed,
                "{sent} > {allowed} at {now} ns"
            );
        }
        sent
    }

    #[test]
    fn the_bytes_let_through_never_exceed_rate_times_time_plus_the_bucket() {
        for (bps, len, step) in [
            (100_000_000, 1082, 7_000),
            (100_000_000, 64, 500),
            (1_000_000_000, 1514, 1_000),
            (25_000_000_000, 1518, 10),
        ] {
            let mut p = Pacer::new(bps, MTU);
            drive(&mut p, bps, len, step, 20_000);
        }
    }

    #[test]
    fn a_busy_sender_gets_the_line_rate() {
        // 100 Mbit/s for 1 s of virtual time in steps of 50 µs: within a
        // frame per step of the rate (a frame waits for a whole one)
        let bps = 100_000_000;
        let mut p = Pacer::new(bps, MTU);
        let sent = drive(&mut p, bps, 1500, 50_000, 20_000);
        let want = bps / 8;
        assert!(sent <= want + BURST_FRAMES * 1542, "{sent}");
        assert!(sent >= want * 97 / 100, "{sent} of {want}");
    }

    #[test]
    fn an_empty_bucket_says_when_half_of_it_is_back() {
        let bps = 100_000_000;
        let mut p = Pacer::new(bps, MTU);
        assert_eq!(p.ready_in(0), Duration::ZERO);
        let n = p.room(0);
        assert_eq!(n as u64, BURST_FRAMES);
        for _ in 0..n {
            p.sent(1518);
        }
        assert_eq!(p.room(0), 0);
        // half of 8 frames of 1542 bytes at 12.5 bytes/µs: 493.44 µs
        let t = p.ready_in(0);
        assert_eq!(t, Duration::from_nanos(493_440));
        assert!(p.room(t.as_nanos() as u64) >= (BURST_FRAMES / 2) as usize);
    }

    #[test]
    fn the_port_reports_the_given_speed_and_paces_what_it_sends() {
        let macs = [
            wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            wire::EthernetAddress([2, 0, 0, 0, 0, 2]),
        ];
        let (a, _b) = nic::io::mem::pair(macs, 16);
        let mut p = LineRate::new(Box::new(a), 100_000_000);
        assert_eq!(p.link_speed_bps(), 100_000_000);
        assert_eq!(p.mac(), macs[0]);
        // a full bucket: its frames, within the wire's 16 buffers
        assert_eq!(p.tx_room(64), BURST_FRAMES as usize);
        let mut b = FrameBatch::new(64);
        for _ in 0..BURST_FRAMES {
            b.push(&[0u8; 1514]);
        }
        assert_eq!(p.send(&b), BURST_FRAMES as usize);
    }
}
