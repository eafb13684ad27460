//! Congestion control wired into the transport: each QP has a DCQCN
//! reaction point and a pacer (its requests leave no faster than the RP's
//! rate), a notification point that answers CE-marked packets with CNPs,
//! and the device obeys PFC pause frames per priority. The algorithms live
//! in `crate::cc`; this is where packets meet them.

use crate::cc::{
    CnpLimiter, DcqcnParams, NpCounters, NpParams, Pacer, PfcRx, PfcTx, PfcTxParams, Qos,
    ReactionPoint,
};
use crate::time::Instant;
use wire::{RoceRepr, Transport};

/// Device-wide congestion settings.
#[derive(Clone, Copy, Debug)]
pub struct CcConfig {
    /// DCQCN reaction point; `None` turns it off (CNPs are then counted as
    /// ignored and nothing is paced).
    pub dcqcn: Option<DcqcnParams>,
    /// Notification point (CNP generation).
    pub np: NpParams,
    /// DSCP/ECN of data, and the priority classification.
    pub qos: Qos,
    /// Obey received PFC frames on these priorities (bit mask; mlx5
    /// `pfcrx`).
    pub pfc_respect: u8,
    /// Generate PFC frames from the receive backlog (mlx5 `pfctx`); `None`
    /// (the default) sends none.
    pub pfc_tx: Option<PfcTxConfig>,
}

/// PFC generation (802.1Qbb) from the receive backlog of the port: when
/// the bytes waiting for a priority reach `xoff_bytes` the NIC sends a PFC
/// frame pausing the peer on it (refreshed every half pause time while the
/// backlog stays above `xon_bytes`), and one with pause time 0 once the
/// backlog has fallen to `xon_bytes`. The names follow the mlx5 receive
/// buffer thresholds (`xoff` / `xon`) and `mlnx_qos --pfc` (`enabled`, the
/// priorities PFC is on for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcTxConfig {
    /// Pause the peer when a priority's receive backlog reaches this many bytes.
    pub xoff_bytes: u64,
    /// Resume it when the backlog falls to this many bytes (below `xoff_bytes`).
    pub xon_bytes: u64,
    /// Pause time sent, in quanta of 512 bit times (default 0xFFFF).
    pub quanta: u16,
    /// Priorities PFC is generated for (bit mask; default all).
    pub enabled: u8,
}

impl PfcTxConfig {
    /// XOFF / XON thresholds, pause time 0xFFFF, every priority.
    pub fn new(xoff_bytes: u64, xon_bytes: u64) -> PfcTxConfig {
        PfcTxConfig {
            xoff_bytes,
            xon_bytes,
            quanta: 0xFFFF,
            enabled: 0xFF,
        }
    }

    /// The generator's parameters on a link of `link_bps`.
    pub fn params(&self, link_bps: u64) -> PfcTxParams {
        PfcTxParams {
            xoff_bytes: self.xoff_bytes,
            xon_bytes: self.xon_bytes,
            quanta: self.quanta,
            link_bps,
            enabled: self.enabled,
        }
    }
}

impl Default for CcConfig {
    /// As a ConnectX NIC ships: DCQCN and CNPs on with NVIDIA's defaults,
    /// data ECT(0) at DSCP 26, PFC obeyed on every priority.
    fn default() -> CcConfig {
        CcConfig {
            dcqcn: Some(DcqcnParams::nvidia()),
            np: NpParams::nvidia(),
            qos: Qos::default(),
            pfc_respect: 0xFF,
            pfc_tx: None,
        }
    }
}

impl CcConfig {
    /// DCQCN (reaction and notification points) for a link `s` times
    /// slower than its values were made for ([`DcqcnParams::scaled`],
    /// [`NpParams::scaled`]); QoS and PFC as they are.
    pub fn scaled(&self, s: f64) -> CcConfig {
        CcConfig {
            dcqcn: self.dcqcn.map(|d| d.scaled(s)),
            np: self.np.scaled(s),
            ..*self
        }
    }

    /// No congestion control at all (what Linux rxe does).
    pub fn off() -> CcConfig {
        let qos = Qos {
            data_dscp: 0,
            data_ecn: crate::cc::ecn::NOT_ECT,
            ..Qos::default()
        };
        CcConfig {
            dcqcn: None,
            np: NpParams {
                enabled: false,
                ..NpParams::nvidia()
            },
            qos,
            pfc_respect: 0,
            pfc_tx: None,
        }
    }
}

/// What a frame costs on the wire beyond its bytes: preamble, start-of-
/// frame delimiter, FCS and the inter-frame gap.
const WIRE_OVERHEAD: u64 = 24;

/// How far READ response data may run ahead of the line rate while DCQCN
/// does not limit the QP: one engine transmit batch (32 frames) at the
/// largest IB MTU. The engine still fills its batches, and a switch queue
/// sees at most this much of one large READ before the first CNP can come
/// back, instead of the whole message at once.
pub const READ_BURST_BYTES: u64 = 32 * 4096;

/// Per-QP congestion state.
pub(crate) struct QpCc {
    pub rp: ReactionPoint,
    pub pacer: Pacer,
    /// READ response data at the line rate, with [`READ_BURST_BYTES`] of
    /// credit (while DCQCN does not limit the QP).
    read_pacer: Pacer,
    /// The port's rate, bits per second.
    line_bps: u64,
    /// [`READ_BURST_BYTES`] as time at the line rate, in picoseconds.
    read_burst_ps: u64,
    /// The line-rate pacer held READ response data back: wake at its next
    /// send time.
    read_blocked: bool,
    pub np: CnpLimiter,
    pub np_counters: NpCounters,
    /// A CNP owed to the peer, sent before anything else.
    pub pending_cnp: Option<RoceRepr<'static>>,
    /// The priority the QP's data travels on (for PFC).
    pub prio: u8,
    /// The pacer held a request back: wake at its next send time.
    pub pace_blocked: bool,
}

impl QpCc {
    pub fn new(cfg: &CcConfig, link_bps: u64) -> QpCc {
        let mut rp = ReactionPoint::new(cfg.dcqcn.unwrap_or_default(), link_bps);
        rp.set_enabled(cfg.dcqcn.is_some());
        QpCc {
            rp,
            pacer: Pacer::new(),
            read_pacer: Pacer::new(),
            line_bps: link_bps,
            read_burst_ps: (READ_BURST_BYTES as u128 * 8 * 1_000_000_000_000
                / link_bps.max(1) as u128) as u64,
            read_blocked: false,
            np: CnpLimiter::new(),
            np_counters: NpCounters::default(),
            pending_cnp: None,
            prio: cfg.qos.data_priority(),
            pace_blocked: false,
        }
    }

    /// The rate the pacer enforces (0 = unpaced: not rate-limited).
    pub fn pace_bps(&self) -> u64 {
        if self.rp.is_enabled() && self.rp.is_limited() {
            self.rp.rate_bps()
        } else {
            0
        }
    }

    /// Notification point: a packet arrived for this QP. CNPs are not
    /// answered; `peer_qpn` is the QP that sent it.
    pub fn on_receive(&mut self, now: Instant, pkt: &RoceRepr<'_>, peer_qpn: u32, np: &NpParams) {
        if pkt
            .opcode_info()
            .is_some_and(|i| i.transport == Transport::Cnp)
        {
            return;
        }
        // RoCEv2 A17.9.2 / NVIDIA DCQCN NP: at most one CNP per QP per
        // min_time_between_cnps, for CE-marked packets.
        if self.np.on_roce(now, pkt, np, &mut self.np_counters) {
            self.pending_cnp = Some(crate::cc::np::cnp_reply(pkt, peer_qpn, np));
        }
    }

    /// Reaction point: our frame of `bytes` left at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        let wire = bytes as u64 + WIRE_OVERHEAD;
        let rate = self.pace_bps();
        self.pacer.on_send(now, wire, rate);
        self.rp.on_sent(now, bytes as u64);
    }

    /// Whether the pacer lets a request go at `now` (remembering when it
    /// did not, so that its next send time becomes a deadline).
    pub fn may_send(&mut self, now: Instant) -> bool {
        let ok = self.pace_bps() == 0 || self.pacer.ready(now);
        self.pace_blocked = !ok;
        ok
    }

    /// Whether READ response data may go at `now`: at the DCQCN rate when
    /// the QP is limited (as its requests), else at the line rate with
    /// [`READ_BURST_BYTES`] of credit.
    pub fn may_send_read(&mut self, now: Instant) -> bool {
        if self.pace_bps() != 0 {
            return self.may_send(now);
        }
        let ok = self.line_bps == 0 || self.read_pacer.ready_ahead(now, self.read_burst_ps);
        self.read_blocked = !ok;
        ok
    }

    /// READ response data of `bytes` left at `now`.
    pub fn on_sent_read(&mut self, now: Instant, bytes: usize) {
        self.on_sent(now, bytes);
        self.read_pacer
            .on_send(now, bytes as u64 + WIRE_OVERHEAD, self.line_bps);
    }

    /// A timer fired at `now`: the pacers that held a packet back and
    /// allow one again stop asking for a wake-up.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.pace_blocked && self.pacer.ready(now) {
            self.pace_blocked = false;
        }
        if self.read_blocked && self.read_pacer.ready_ahead(now, self.read_burst_ps) {
            self.read_blocked = false;
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        let pace = (self.pace_blocked && self.pace_bps() != 0).then(|| self.pacer.next_send());
        let read = self
            .read_blocked
            .then(|| self.read_pacer.next_send_ahead(self.read_burst_ps));
        Instant::earliest(self.rp.poll_timeout(), Instant::earliest(pace, read))
    }
}

/// Device-level PFC reaction state.
pub(crate) fn pfc_rx(cfg: &CcConfig, link_bps: u64) -> PfcRx {
    PfcRx::with_mask(link_bps, cfg.pfc_respect)
}

/// Device-level PFC generation state (`None`: generation off).
pub(crate) fn pfc_tx(cfg: &CcConfig, link_bps: u64) -> Option<PfcTx> {
    cfg.pfc_tx.map(|c| PfcTx::new(c.params(link_bps)))
}
