//! The device: the verbs API over its resource tables and QPs
//! ([`Rnic`]), and the sans-I/O entry points the drivers call — frames and
//! time in (`handle_frame`, `handle_timeout`), frames, completions and the
//! next deadline out (`poll_transmit`, `poll_cq`, `poll_timeout`). It never
//! reads a clock, opens a socket or spawns a thread, so a virtual-clock
//! simulator, a pcap replay and the polling engine all drive the same code.
//!
//! - `verbs`: PD, MR, MW, CQ, SRQ and QP verbs, posting and polling;
//! - `datapath`: frames in and out, timers, dispatch to the QPs;
//! - `port`: the port's attributes, link, MTU and PFC settings;
//! - `gsi`: QP 1, management datagrams to and from the owner;
//! - `endpoint`: a device with one region, as the loopback and tests set
//!   one up.

mod datapath;
mod endpoint;
mod gsi;
mod port;
mod verbs;

pub use crate::transport::{RnicConfig, FIRST_QPN, MAX_FRAME_LEN, MAX_MSG_LEN};
pub use endpoint::Endpoint;
pub use gsi::{GsiCounters, GsiError, GsiMad, GSI_PKEY, GSI_RX_DEPTH, GSI_TX_DEPTH};
pub use port::{ib_mtu_for_ip_mtu, PortAttr, PortState};

use crate::time::Instant;
use crate::transport::{congestion, timers, Counters, Qp, Resources};
use crate::verbs::{MrTable, QpState, VerbsError};
use std::collections::{BTreeMap, VecDeque};
use wire::QpType;

/// Why a received frame was dropped before it reached a QP. The names are
/// stable: they are the keys of [`Rnic::drops`], of `rnic stats` and of
/// the engine's counters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum DropReason {
    /// The frame failed a check of its headers or its ICRC (RoCEv2
    /// A17.3.3: a packet whose ICRC does not match is dropped).
    Wire(wire::Reason),
    /// No QP has the BTH's destination QPN.
    UnknownQp,
    /// The opcode is not one of the QP's transport service (IBA 9.2.1).
    OpcodeNotForQpType,
    /// The BTH P_Key does not match the QP's (C9-43).
    PkeyMismatch,
    /// An RC or UC packet not from the QP's connected peer (IBA 9.6).
    AddressMismatch,
    /// A packet to QP 1 that is not a UD SEND ONLY (IBA 13.5.1).
    GsiOpcode,
    /// A datagram to QP 1 without the GSI Q_Key 0x80010000 (IBA 13.5.1).
    GsiQkey,
    /// A datagram to QP 1 whose payload is not one 256-byte MAD (IBA 13.4.2).
    GsiLength,
    /// A MAD for QP 1 while [`GSI_RX_DEPTH`] wait for the owner.
    GsiQueueFull,
}

impl DropReason {
    /// The stable counter name.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Wire(r) => r.name(),
            DropReason::UnknownQp => "unknown_qp",
            DropReason::OpcodeNotForQpType => "opcode_not_for_qp_type",
            DropReason::PkeyMismatch => "pkey_mismatch",
            DropReason::AddressMismatch => "address_mismatch",
            DropReason::GsiOpcode => "gsi_opcode",
            DropReason::GsiQkey => "gsi_qkey",
            DropReason::GsiLength => "gsi_length",
            DropReason::GsiQueueFull => "gsi_queue_full",
        }
    }
}

/// What a QP looks like from outside (`ibv_query_qp`).
#[derive(Clone, Debug)]
pub struct QpInfo {
    pub qpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    pub dest_qpn: u32,
    pub mtu: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub send_queue_len: usize,
    pub recv_queue_len: usize,
    pub counters: Counters,
}

/// A soft RNIC: verbs objects, QPs, and the transport between them.
pub struct Rnic {
    res: Resources,
    qps: Vec<Option<Qp>>,
    /// Received frames dropped before reaching a QP, by reason.
    drops: BTreeMap<DropReason, u64>,
    /// QPs with frames to send, served round robin up to `tx_quantum`
    /// bytes per turn.
    tx_queue: VecDeque<u32>,
    /// Bytes a QP may send per turn (0: one frame).
    tx_quantum: usize,
    /// Bytes the QP at the front of `tx_queue` sent in its current turn.
    tx_spent: usize,
    /// Every QP's `next_deadline()` in a min-heap: kept exact by
    /// [`Self::rearm`] at the end of each entry point that touched a QP.
    deadlines: timers::DeadlineIndex,
    /// Scratch for the slots `handle_timeout` fires (no allocation per turn).
    due: Vec<u32>,
    /// QP 1: MADs in and out.
    gsi: gsi::Gsi,
}

impl Rnic {
    pub fn new(cfg: RnicConfig) -> Rnic {
        let seed = cfg.seed;
        let pfc = congestion::pfc_rx(&cfg.cc, cfg.link_bps);
        let pfc_tx = congestion::pfc_tx(&cfg.cc, cfg.link_bps);
        Rnic {
            res: Resources {
                cfg,
                mrs: MrTable::new(seed),
                cqs: Vec::new(),
                srqs: Vec::new(),
                pds: Vec::new(),
                dev: Counters::default(),
                events: VecDeque::new(),
                pfc,
                pfc_tx,
                now: Instant::ZERO,
                link_up: true,
                completions: 0,
                ready_cqs: Vec::new(),
            },
            qps: Vec::new(),
            drops: BTreeMap::new(),
            tx_queue: VecDeque::new(),
            tx_quantum: 0,
            tx_spent: 0,
            deadlines: timers::DeadlineIndex::default(),
            due: Vec::new(),
            gsi: gsi::Gsi::default(),
        }
    }

    pub fn config(&self) -> &RnicConfig {
        &self.res.cfg
    }

    // ---- the wire side ----

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        let idx = qpn.checked_sub(FIRST_QPN)? as usize;
        matches!(self.qps.get(idx), Some(Some(_))).then_some(idx)
    }

    fn qp_mut(&mut self, qpn: u32) -> Result<&mut Qp, VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok(self.qps[idx].as_mut().expect("index is live"))
    }

    /// Re-enters QP slot `idx`'s next deadline in the deadline index.
    /// Called wherever a QP's timers may have changed: the local ACK timer
    /// (IBA 9.7.6.1.3 / C9-140: armed when a request goes out, re-armed or
    /// stopped as ACKs arrive), the RNR timer (IBA 9.7.5.2.8: armed by an
    /// RNR NAK) and the DCQCN / pacing timers.
    fn rearm(&mut self, idx: usize) {
        let d = self.qps.get(idx).and_then(|q| q.as_ref()?.next_deadline());
        self.deadlines.set(idx, d);
    }

    fn schedule(&mut self, idx: usize) {
        if let Some(qp) = self.qps[idx].as_mut() {
            if !qp.scheduled {
                qp.scheduled = true;
                self.tx_queue.push_back(idx as u32);
            }
        }
    }

    /// A multi-line dump of a QP's transport state, for debugging and tools.
    pub fn debug_qp(&self, qpn: u32) -> String {
        let Some(idx) = self.qp_index(qpn) else {
            return format!("no QP {qpn:#x}");
        };
        self.qps[idx].as_ref().expect("index is live").debug_state()
    }

    /// The CQ a QP completes its send (or receive) work on.
    pub fn qp_cq(&self, qpn: u32, recv: bool) -> Option<u32> {
        let q = self.qps.get(self.qp_index(qpn)?)?.as_ref()?;
        Some(if recv { q.init.recv_cq } else { q.init.send_cq })
    }

    /// Device counters: every QP's plus those of destroyed QPs.
    pub fn counters(&self) -> Counters {
        let mut c = self.res.dev.clone();
        for qp in self.qps.iter().flatten() {
            c.add(&qp.counters);
        }
        c
    }

    /// Every QP's DCQCN reaction-point state at `now` (RC, RT, α: see
    /// [`RpState`](crate::cc::RpState)), by QPN in ascending order. Reading
    /// it allocates nothing and changes nothing; callers without the
    /// driver's clock pass [`Self::last_now`].
    pub fn cc_states(&self, now: Instant) -> impl Iterator<Item = (u32, crate::cc::RpState)> + '_ {
        self.qps
            .iter()
            .flatten()
            .map(move |qp| (qp.qpn, qp.cc.rp.state(now)))
    }

    /// Received frames dropped before reaching a QP, by reason name.
    pub fn drops(&self) -> BTreeMap<&'static str, u64> {
        self.drops.iter().map(|(r, &n)| (r.name(), n)).collect()
    }

    /// Received frames dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(&reason).copied().unwrap_or(0)
    }

    fn drop_frame(&mut self, reason: DropReason) {
        *self.drops.entry(reason).or_default() += 1;
    }

    /// True when no QP has anything left to send, to receive or to time.
    pub fn is_idle(&self) -> bool {
        self.qps
            .iter()
            .flatten()
            .all(|q| q.sq.is_empty() && !q.resp.owes_responses())
    }
}
