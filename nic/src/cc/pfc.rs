//! IEEE 802.1Qbb priority-based flow control: reacting to PFC frames we
//! receive ([`PfcRx`]) and generating them from a receive backlog
//! ([`PfcTx`]).
//!
//! Reaction (802.1Qbb clause 36.1.3 / 802.3 Annex 31D): a PFC frame carries
//! a class-enable vector and a pause time per priority, in quanta of 512 bit
//! times at the link speed. A priority whose bit is set is paused for its
//! time from the frame's arrival; a new frame reloads the timer (a refresh
//! before expiry extends the pause); a time of 0 resumes at once. Priorities
//! whose bit is clear are untouched and keep flowing. An 802.3x PAUSE frame
//! pauses every priority.
//!
//! Generation: when the backlog of a priority reaches `xoff_bytes`, a PFC
//! frame pauses the peer on that priority (`quanta`, default 0xFFFF) and is
//! refreshed every half pause time while the backlog stays above
//! `xon_bytes`; when it falls to `xon_bytes`, a frame with time 0 resumes
//! the peer. Several priorities due at once share one frame.
//!
//! Counters (mlx5 names): `rx_prio{p}_pause` / `tx_prio{p}_pause` count PFC
//! frames received / sent with priority `p` in their class-enable vector
//! (pause and resume alike); `rx_prio{p}_pause_duration` is the time our
//! transmission of `p` was paused, `tx_prio{p}_pause_duration` the time we
//! held the peer paused (from the first pause frame to the resume frame);
//! both reported in microseconds, kept in nanoseconds.

use crate::time::Instant;
use std::time::Duration;
use wire::mac_control::pause_duration_ns;
use wire::MacControl;

/// The eight 802.1p priorities.
pub const PRIORITIES: usize = 8;

/// PFC counters of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PfcCounters {
    /// `rx_prio{p}_pause`: PFC frames received naming priority `p`.
    pub rx_pause: [u64; PRIORITIES],
    /// `rx_prio{p}_pause_duration`: time our transmission of `p` was paused.
    pub rx_pause_duration_ns: [u64; PRIORITIES],
    /// `tx_prio{p}_pause`: PFC frames sent naming priority `p`.
    pub tx_pause: [u64; PRIORITIES],
    /// `tx_prio{p}_pause_duration`: time we held the peer paused on `p`.
    pub tx_pause_duration_ns: [u64; PRIORITIES],
}

impl PfcCounters {
    /// (name, value) pairs, priority by priority; durations in µs.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        (0..PRIORITIES).flat_map(move |p| {
            [
                (format!("rx_prio{p}_pause"), self.rx_pause[p]),
                (
                    format!("rx_prio{p}_pause_duration"),
                    self.rx_pause_duration_ns[p] / 1000,
                ),
                (format!("tx_prio{p}_pause"), self.tx_pause[p]),
                (
                    format!("tx_prio{p}_pause_duration"),
                    self.tx_pause_duration_ns[p] / 1000,
                ),
            ]
        })
    }

    pub fn add(&mut self, o: &PfcCounters) {
        for p in 0..PRIORITIES {
            self.rx_pause[p] += o.rx_pause[p];
            self.rx_pause_duration_ns[p] += o.rx_pause_duration_ns[p];
            self.tx_pause[p] += o.tx_pause[p];
            self.tx_pause_duration_ns[p] += o.tx_pause_duration_ns[p];
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pause {
    start: Instant,
    until: Instant,
}

/// The pause state of a transmitter: which priorities a peer has paused,
/// until when.
#[derive(Clone, Debug)]
pub struct PfcRx {
    link_bps: u64,
    respect: u8,
    pause: [Option<Pause>; PRIORITIES],
    frames: [u64; PRIORITIES],
    closed_ns: [u64; PRIORITIES],
    link_pauses: u64,
}

impl PfcRx {
    /// Obeys PFC on every priority of a link of `link_bps`.
    pub fn new(link_bps: u64) -> PfcRx {
        PfcRx::with_mask(link_bps, 0xFF)
    }

    /// Obeys PFC only on the priorities in `respect` (mlx5 `pfcrx`).
    pub fn with_mask(link_bps: u64, respect: u8) -> PfcRx {
        PfcRx {
            link_bps,
            respect,
            pause: [None; PRIORITIES],
            frames: [0; PRIORITIES],
            closed_ns: [0; PRIORITIES],
            link_pauses: 0,
        }
    }

    pub fn link_bps(&self) -> u64 {
        self.link_bps
    }

    /// A MAC control frame arrived at `now`.
    pub fn handle(&mut self, now: Instant, control: &MacControl) {
        match *control {
            MacControl::Pfc {
                class_enable,
                quanta,
            } => {
                for (p, &q) in quanta.iter().enumerate() {
                    if class_enable & (1 << p) == 0 {
                        continue;
                    }
                    self.frames[p] += 1;
                    if self.respect & (1 << p) != 0 {
                        self.apply(p, now, q);
                    }
                }
            }
            MacControl::Pause { quanta } => {
                self.link_pauses += 1;
                for p in 0..PRIORITIES {
                    if self.respect & (1 << p) != 0 {
                        self.apply(p, now, quanta);
                    }
                }
            }
        }
    }

    fn apply(&mut self, p: usize, now: Instant, quanta: u16) {
        self.close_expired(p, now);
        if quanta == 0 {
            if let Some(ps) = self.pause[p].take() {
                self.closed_ns[p] += (now - ps.start).as_nanos() as u64;
            }
            return;
        }
        let until = now + Duration::from_nanos(pause_duration_ns(quanta, self.link_bps));
        match &mut self.pause[p] {
            Some(ps) => ps.until = until,
            None => self.pause[p] = Some(Pause { start: now, until }),
        }
    }

    fn close_expired(&mut self, p: usize, now: Instant) {
        if let Some(ps) = self.pause[p] {
            if ps.until <= now {
                self.closed_ns[p] += (ps.until - ps.start).as_nanos() as u64;
                self.pause[p] = None;
            }
        }
    }

    /// Whether priority `p` may not start a frame at `now`.
    pub fn is_paused(&self, p: u8, now: Instant) -> bool {
        self.paused_until(p, now).is_some()
    }

    /// The end of the pause of priority `p`, if it is paused at `now`.
    pub fn paused_until(&self, p: u8, now: Instant) -> Option<Instant> {
        match self.pause.get(p as usize).copied().flatten() {
            Some(ps) if now < ps.until => Some(ps.until),
            _ => None,
        }
    }

    /// Bit `p` set when priority `p` is paused at `now`.
    pub fn paused_mask(&self, now: Instant) -> u8 {
        (0..PRIORITIES as u8).fold(0, |m, p| m | ((self.is_paused(p, now) as u8) << p))
    }

    /// The earliest pause end still to be observed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pause.iter().flatten().map(|ps| ps.until).min()
    }

    /// Closes the pauses that ended at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for p in 0..PRIORITIES {
            self.close_expired(p, now);
        }
    }

    /// PFC frames received naming priority `p`.
    pub fn pause_frames(&self, p: u8) -> u64 {
        self.frames[p as usize & 7]
    }

    /// 802.3x PAUSE frames received.
    pub fn link_pause_frames(&self) -> u64 {
        self.link_pauses
    }

    /// Total time priority `p` has been paused, up to `now`.
    pub fn pause_duration(&self, p: u8, now: Instant) -> Duration {
        let p = p as usize & 7;
        let open = self.pause[p].map_or(0, |ps| {
            (now.min(ps.until).saturating_since(ps.start)).as_nanos() as u64
        });
        Duration::from_nanos(self.closed_ns[p] + open)
    }

    /// The rx half of the PFC counters, as of `now`.
    pub fn counters(&self, now: Instant) -> PfcCounters {
        let mut c = PfcCounters::default();
        for p in 0..PRIORITIES {
            c.rx_pause[p] = self.frames[p];
            c.rx_pause_duration_ns[p] = self.pause_duration(p as u8, now).as_nanos() as u64;
        }
        c
    }
}

/// PFC generation knobs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PfcTxParams {
    /// Pause the peer when a priority's backlog reaches this many bytes.
    pub xoff_bytes: u64,
    /// Resume the peer when it falls to this many bytes (below `xoff_bytes`).
    pub xon_bytes: u64,
    /// Pause time we send, in quanta (default 0xFFFF).
    pub quanta: u16,
    /// Link speed, for the refresh interval (half the pause time).
    pub link_bps: u64,
    /// Priorities we generate PFC for (mlx5 `pfctx`).
    pub enabled: u8,
}

impl PfcTxParams {
    pub fn new(link_bps: u64, xoff_bytes: u64, xon_bytes: u64) -> PfcTxParams {
        PfcTxParams {
            xoff_bytes,
            xon_bytes,
            quanta: 0xFFFF,
            link_bps,
            enabled: 0xFF,
        }
    }
}

/// PFC generation from per-priority backlogs.
#[derive(Clone, Debug)]
pub struct PfcTx {
    p: PfcTxParams,
    /// Backlog at or above XOFF (hysteresis state).
    want_off: u8,
    /// The peer has been sent a pause and no resume since.
    told_off: u8,
    /// A refresh is due.
    due: u8,
    refresh_at: [Option<Instant>; PRIORITIES],
    since: [Instant; PRIORITIES],
    frames: [u64; PRIORITIES],
    closed_ns: [u64; PRIORITIES],
}

impl PfcTx {
    pub fn new(mut params: PfcTxParams) -> PfcTx {
        params.xon_bytes = params.xon_bytes.min(params.xoff_bytes.saturating_sub(1));
        PfcTx {
            p: params,
            want_off: 0,
            told_off: 0,
            due: 0,
            refresh_at: [None; PRIORITIES],
            since: [Instant::ZERO; PRIORITIES],
            frames: [0; PRIORITIES],
            closed_ns: [0; PRIORITIES],
        }
    }

    pub fn params(&self) -> &PfcTxParams {
        &self.p
    }

    /// The link speed changed: refreshes are spaced by the new half pause
    /// time (the state and counters stay).
    pub fn set_link_bps(&mut self, link_bps: u64) {
        self.p.link_bps = link_bps;
    }

    /// The backlog of priority `prio` is now `backlog_bytes`.
    pub fn on_backlog(&mut self, prio: u8, backlog_bytes: u64) {
        if prio as usize >= PRIORITIES || self.p.enabled & (1 << prio) == 0 {
            return;
        }
        let bit = 1u8 << prio;
        if self.want_off & bit == 0 {
            if backlog_bytes >= self.p.xoff_bytes {
                self.want_off |= bit;
            }
        } else if backlog_bytes <= self.p.xon_bytes {
            self.want_off &= !bit;
        }
    }

    fn refresh_interval(&self) -> Duration {
        Duration::from_nanos((pause_duration_ns(self.p.quanta, self.p.link_bps) / 2).max(1))
    }

    fn xoff_due(&self) -> u8 {
        self.want_off & (self.due | !self.told_off)
    }

    fn xon_due(&self) -> u8 {
        self.told_off & !self.want_off
    }

    /// Whether a frame is waiting for [`Self::poll_transmit`].
    pub fn pending(&self) -> bool {
        self.xoff_due() | self.xon_due() != 0
    }

    /// The PFC frame to send at `now`, if any: new pauses, refreshes and
    /// resumes of every priority that needs one.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<MacControl> {
        self.handle_timeout(now);
        let (off, on) = (self.xoff_due(), self.xon_due());
        let mask = off | on;
        if mask == 0 {
            return None;
        }
        let mut quanta = [0u16; PRIORITIES];
        let refresh = now + self.refresh_interval();
        for (p, q) in quanta.iter_mut().enumerate() {
            let bit = 1u8 << p;
            if mask & bit == 0 {
                continue;
            }
            self.frames[p] += 1;
            if off & bit != 0 {
                *q = self.p.quanta;
                if self.told_off & bit == 0 {
                    self.since[p] = now;
                    self.told_off |= bit;
                }
                self.refresh_at[p] = Some(refresh);
            } else {
                self.closed_ns[p] += (now - self.since[p]).as_nanos() as u64;
                self.told_off &= !bit;
                self.refresh_at[p] = None;
            }
        }
        self.due = 0;
        Some(MacControl::Pfc {
            class_enable: mask,
            quanta,
        })
    }

    /// When [`Self::poll_transmit`] next has something: `Instant::ZERO` if
    /// a frame is already pending, else the next refresh.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.pending() {
            return Some(Instant::ZERO);
        }
        (0..PRIORITIES)
            .filter(|&p| self.told_off & self.want_off & (1 << p) != 0)
            .filter_map(|p| self.refresh_at[p])
            .min()
    }

    /// Marks the refreshes due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for p in 0..PRIORITIES {
            let bit = 1u8 << p;
            if self.told_off & self.want_off & bit != 0
                && self.refresh_at[p].is_some_and(|t| t <= now)
            {
                self.due |= bit;
            }
        }
    }

    /// Whether the peer is held paused on `prio`.
    pub fn is_xoff(&self, prio: u8) -> bool {
        prio < 8 && self.told_off & (1 << prio) != 0
    }

    /// PFC frames sent naming priority `p`.
    pub fn pause_frames(&self, p: u8) -> u64 {
        self.frames[p as usize & 7]
    }

    /// Time the peer has been held paused on `p`, up to `now`.
    pub fn pause_duration(&self, p: u8, now: Instant) -> Duration {
        let p = p as usize & 7;
        let open = if self.told_off & (1 << p) != 0 {
            now.saturating_since(self.since[p]).as_nanos() as u64
        } else {
            0
        };
        Duration::from_nanos(self.closed_ns[p] + open)
    }

    /// The tx half of the PFC counters, as of `now`.
    pub fn counters(&self, now: Instant) -> PfcCounters {
        let mut c = PfcCounters::default();
        for p in 0..PRIORITIES {
            c.tx_pause[p] = self.frames[p];
            c.tx_pause_duration_ns[p] = self.pause_duration(p as u8, now).as_nanos() as u64;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    fn ns(n: u64) -> Instant {
        Instant::from_nanos(n)
    }

    fn pfc(class_enable: u8, q: &[(usize, u16)]) -> MacControl {
        let mut quanta = [0u16; 8];
        for &(p, v) in q {
            quanta[p] = v;
        }
        MacControl::Pfc {
            class_enable,
            quanta,
        }
    }

    #[test]
    fn pause_lasts_exactly_quanta_times_512_bit_times() {
        let mut rx = PfcRx::new(G100);
        let t0 = ns(1_000);
        // 1000 quanta at 100 Gb/s = 512000 bits / 1e11 = 5120 ns
        rx.handle(t0, &pfc(1 << 3, &[(3, 1000)]));
        assert_eq!(rx.paused_until(3, t0), Some(ns(6_120)));
        assert!(rx.is_paused(3, t0));
        assert!(rx.is_paused(3, ns(6_119)));
        assert!(!rx.is_paused(3, ns(6_120)));
        // other priorities keep flowing
        for p in (0..8).filter(|&p| p != 3) {
            assert!(!rx.is_paused(p, t0));
        }
        assert_eq!(rx.paused_mask(ns(2_000)), 1 << 3);
        assert_eq!(rx.poll_timeout(), Some(ns(6_120)));
        rx.handle_timeout(ns(7_000));
        assert_eq!(rx.poll_timeout(), None);
        assert_eq!(rx.pause_duration(3, ns(9_000)), Duration::from_nanos(5_120));
        assert_eq!(rx.pause_frames(3), 1);
        assert_eq!(rx.pause_frames(2), 0);
    }

    #[test]
    fn zero_resumes_at_once_and_refresh_extends() {
        let mut rx = PfcRx::new(10_000_000_000); // 1 quantum = 51.2 ns
        rx.handle(ns(0), &pfc(0b0100_1000, &[(3, 100), (6, 100)])); // 5120 ns
        rx.handle(ns(4_000), &pfc(1 << 3, &[(3, 100)])); // refresh: until 9120
        assert!(rx.is_paused(3, ns(9_119)));
        assert!(!rx.is_paused(6, ns(5_120)));
        // bit clear: priority 6's entry in the frame is ignored even if non-zero
        rx.handle(ns(5_000), &pfc(1 << 3, &[(3, 0), (6, 0xFFFF)]));
        assert!(!rx.is_paused(3, ns(5_000)));
        assert!(rx.is_paused(6, ns(5_000)), "untouched: still paused");
        assert!(!rx.is_paused(6, ns(5_120)));
        assert_eq!(
            rx.pause_duration(3, ns(50_000)),
            Duration::from_nanos(5_000)
        );
        assert_eq!(
            rx.pause_duration(6, ns(50_000)),
            Duration::from_nanos(5_120)
        );
        let c = rx.counters(ns(50_000));
        assert_eq!(c.rx_pause[3], 3);
        assert_eq!(c.rx_pause[6], 1);
        assert_eq!(c.rx_pause_duration_ns[3], 5_000);
        // a resume for a priority that is not paused is harmless
        rx.handle(ns(60_000), &pfc(1 << 1, &[]));
        assert!(!rx.is_paused(1, ns(60_000)));
        // the open part of a pause counts up to now
        rx.handle(ns(70_000), &pfc(1, &[(0, 1000)]));
        assert_eq!(rx.pause_duration(0, ns(70_100)), Duration::from_nanos(100));
    }

    #[test]
    fn link_pause_and_mask() {
        let mut rx = PfcRx::with_mask(G100, 0b1111_0111);
        rx.handle(ns(0), &MacControl::Pause { quanta: 10 });
        assert_eq!(rx.paused_mask(ns(0)), 0b1111_0111);
        assert_eq!(rx.link_pause_frames(), 1);
        rx.handle(ns(1), &pfc(1 << 3, &[(3, 0xFFFF)]));
        assert!(!rx.is_paused(3, ns(2)), "priority 3 is not obeyed");
        assert_eq!(rx.pause_frames(3), 1, "but the frame is counted");
        rx.handle(ns(2), &MacControl::Pause { quanta: 0 });
        assert_eq!(rx.paused_mask(ns(2)), 0);
    }

    #[test]
    fn generation_with_hysteresis_and_refresh() {
        let link = 10_000_000_000;
        let mut tx = PfcTx::new(PfcTxParams {
            quanta: 1000, // 51.2 µs; refresh every 25.6 µs
            ..PfcTxParams::new(link, 100_000, 50_000)
        });
        tx.on_backlog(3, 99_999);
        assert_eq!(tx.poll_transmit(ns(0)), None);
        assert_eq!(tx.poll_timeout(), None);
        tx.on_backlog(3, 100_000);
        tx.on_backlog(5, 200_000);
        assert!(tx.pending());
        assert_eq!(tx.poll_timeout(), Some(Instant::ZERO));
        let f = tx.poll_transmit(ns(1_000)).unwrap();
        assert_eq!(f, pfc(0b0010_1000, &[(3, 1000), (5, 1000)]));
        assert!(tx.is_xoff(3) && tx.is_xoff(5));
        assert_eq!(tx.poll_transmit(ns(1_001)), None);
        assert_eq!(tx.poll_timeout(), Some(ns(26_600)));
        // between XON and XOFF: nothing changes
        tx.on_backlog(3, 60_000);
        assert_eq!(tx.poll_transmit(ns(2_000)), None);
        // refresh of both, half a pause time after
        assert_eq!(tx.poll_transmit(ns(26_599)), None);
        let f = tx.poll_transmit(ns(26_600)).unwrap();
        assert_eq!(f, pfc(0b0010_1000, &[(3, 1000), (5, 1000)]));
        // priority 3 drains: resume it alone
        tx.on_backlog(3, 50_000);
        let f = tx.poll_transmit(ns(30_000)).unwrap();
        assert_eq!(f, pfc(1 << 3, &[]));
        assert!(!tx.is_xoff(3) && tx.is_xoff(5));
        let c = tx.counters(ns(40_000));
        assert_eq!(c.tx_pause[3], 3);
        assert_eq!(c.tx_pause[5], 2);
        assert_eq!(c.tx_pause_duration_ns[3], 29_000);
        assert_eq!(c.tx_pause_duration_ns[5], 39_000); // still open
                                                       // a priority PFC is not enabled for never pauses
        let mut off = PfcTx::new(PfcTxParams {
            enabled: 0,
            ..PfcTxParams::new(link, 1, 0)
        });
        off.on_backlog(0, u64::MAX);
        assert!(!off.pending());
        off.on_backlog(9, u64::MAX); // out of range: ignored
    }
}
