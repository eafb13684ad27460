//! The sans-I/O transport: a whole RNIC (verbs objects and QPs) that takes
//! frames and time in (`handle_frame`, `handle_timeout`) and hands frames,
//! completions and its next deadline out (`poll_transmit`, `poll_cq`,
//! `poll_timeout`). It never reads a clock, opens a socket or spawns a
//! thread, so a virtual-clock simulator, a pcap replay and the polling
//! engine all drive the same code.
//!
//! The split follows Linux rxe: `requester` builds request packets,
//! `responder` checks and executes them and owes responses, `completer`
//! retires WQEs on responses and timers.

mod completer;
mod congestion;
pub mod counters;
mod frame;
mod qp;
mod requester;
mod responder;
pub mod timers;

pub use congestion::{CcConfig, PfcTxConfig};
pub use counters::Counters;
pub use qp::{HeaderTemplate, QpInit};

use crate::time::Instant;
use crate::verbs::{
    access, check_modify, Cq, KeyError, Memory, ModifyError, MrTable, Mw, MwError, MwType, QpAttr,
    QpState, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode, WcStatus,
};
use qp::{Qp, SendWqe};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use wire::{BthRepr, EthernetAddress, ExtHeaders, Gid, IpRepr, QpType, RoceRepr};

/// First QPN handed out (QPs 0 and 1 are the IB management QPs).
pub const FIRST_QPN: u32 = 0x11;
/// A buffer of this many bytes holds any frame the transport sends
/// (VLAN + IPv6 + UDP + BTH + the largest header set + 4096 B + pad + ICRC).
pub const MAX_FRAME_LEN: usize = 18 + 40 + 8 + 12 + 32 + 4096 + 4 + 4;
/// The longest message, and the largest RETH DMA length, there is: 2^31
/// bytes (C9-94; the port's max_msg_sz).
pub const MAX_MSG_LEN: u64 = 1 << 31;

/// Device-wide settings.
#[derive(Clone, Debug)]
pub struct RnicConfig {
    pub mac: EthernetAddress,
    pub gid: Gid,
    /// Seeds key generation (and nothing else).
    pub seed: u64,
    /// Most PSNs a requester leaves unacknowledged.
    pub max_unacked_psns: u32,
    /// A requester asks for an ACK at least every this many packets.
    pub ack_every: u32,
    /// Simulation only: never give up retrying (retry_cnt is ignored).
    pub unlimited_retries: bool,
    /// DCQCN, CNPs, ECN marking and PFC.
    pub cc: CcConfig,
    /// Link speed (bit/s): the DCQCN line rate and the PFC quantum length.
    pub link_bps: u64,
    /// The port's active MTU (`ibv_port_attr.active_mtu`, one of
    /// [`crate::verbs::MTUS`]): the largest payload one packet carries on
    /// this port. UD QPs have no path MTU attribute (the INIT→RTR row for
    /// UD in IBA Table 93 has none) and use this one: a UD message is a
    /// single SEND ONLY packet (IBA 9.8, unreliable service), so it is also
    /// the largest UD message. A device on an
    /// interface sets it from the interface MTU as rxe does (the largest
    /// IB MTU that fits with the RoCEv2 headers); 4096 otherwise.
    pub port_mtu: u32,
}

impl RnicConfig {
    pub fn new(mac: EthernetAddress, gid: Gid) -> RnicConfig {
        RnicConfig {
            mac,
            gid,
            seed: 0x5eed,
            max_unacked_psns: 128,
            ack_every: 64,
            unlimited_retries: false,
            cc: CcConfig::default(),
            link_bps: 100_000_000_000,
            port_mtu: 4096,
        }
    }
}

/// Why a verb was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    #[error("no CQ {0}")]
    NoSuchCq(u32),
    #[error("no SRQ {0}")]
    NoSuchSrq(u32),
    #[error("SRQ {0} still has QPs")]
    SrqInUse(u32),
    #[error("no PD {0}")]
    NoSuchPd(u32),
    #[error("modify_qp: {0}")]
    Modify(#[from] ModifyError),
    #[error("the work queue is full")]
    QueueFull,
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    #[error("the QP is in state {0:?}, which does not accept this")]
    BadState(QpState),
    #[error("memory registration refused: {0}")]
    BadMr(&'static str),
    #[error("completion queue overrun")]
    CqOverrun,
    #[error("{0}")]
    Mw(#[from] MwError),
}

/// A shared receive queue.
pub struct Srq {
    pub pd: u32,
    pub queue: VecDeque<RecvWr>,
    pub max_wr: u32,
    /// The armed SRQ limit ("low watermark"); 0: not armed.
    pub limit: u32,
}

/// An asynchronous event of the device (`ibv_get_async_event`), with the
/// QPN, CQ or SRQ number it is affiliated with (IBTA 11.6.3 "Asynchronous
/// Events"; rdma-core `enum ibv_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncEvent {
    /// IBV_EVENT_CQ_ERR: the CQ overran (IBA 11.4.2.1: a CQ overrun is an
    /// asynchronous error of the CQ). Raised once, when it overruns.
    CqErr(u32),
    /// IBV_EVENT_QP_FATAL (IBTA "Local Work Queue Catastrophic Error": an
    /// error the CI cannot report through the CQ): the QP's CQ overran, so
    /// its completions cannot be delivered, and the QP went to ERR.
    QpFatal(u32),
    /// IBV_EVENT_QP_REQ_ERR (IBTA "Invalid Request Local Work Queue
    /// Error"): the RC responder NAKed an invalid request and the QP went
    /// to ERR (IBA 9.9.3, class C responder errors).
    QpReqErr(u32),
    /// IBV_EVENT_QP_ACCESS_ERR (IBTA "Local Access Violation Work Queue
    /// Error"): the RC responder NAKed a remote access error and the QP went
    /// to ERR.
    QpAccessErr(u32),
    /// IBV_EVENT_COMM_EST (IBTA 11.6.3.1 "Communication Established"): the
    /// first packet arrived on an RC or UC QP in RTR (once per RTR).
    CommEst(u32),
    /// IBV_EVENT_SQ_DRAINED (IBTA 11.6.3.1 "Send Queue Drained"): the QP is
    /// in SQD and every send message in progress has completed (once per
    /// transition to SQD).
    SqDrained(u32),
    /// IBV_EVENT_QP_LAST_WQE_REACHED (IBA 10.2.9.5 / 11.6.3.1 "Last WQE
    /// Reached"): a QP attached to an SRQ went to ERR; it takes no more
    /// receive WQEs from the SRQ.
    QpLastWqeReached(u32),
    /// IBV_EVENT_SRQ_LIMIT_REACHED: fewer receive WQEs than the armed limit
    /// are left on the SRQ; the limit is disarmed (IBTA: the "SRQ Limit
    /// Reached" affiliated asynchronous event; `ibv_modify_srq` re-arms).
    SrqLimitReached(u32),
    /// IBV_EVENT_PORT_ACTIVE (IBTA 11.6.3.2, unaffiliated "Port Active"):
    /// the link of port `n` came up; the port is ACTIVE again.
    PortActive(u8),
    /// IBV_EVENT_PORT_ERR (IBTA 11.6.3.2, unaffiliated "Port Error" / link
    /// down): the link of port `n` went down; the port is DOWN.
    PortErr(u8),
}

/// The object an [`AsyncEvent`] is affiliated with; a port for the
/// unaffiliated events (`ibv_async_event.element.port_num`), which concern
/// every user of the device.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Affiliated {
    Qp(u32),
    Cq(u32),
    Srq(u32),
    Port(u8),
}

/// A port's state (rdma-core `enum ibv_port_state`, IBTA 14.2.5.6
/// PortState): a RoCE port is ACTIVE while its link is up, else DOWN (no
/// subnet manager walks it through INIT and ARMED).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

impl PortState {
    /// The `enum ibv_port_state` number.
    pub fn ibv(self) -> u32 {
        self as u32
    }
}

/// What `ibv_query_port` tells of the device's one port.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PortAttr {
    pub state: PortState,
    /// The active IB MTU in bytes (256..4096), from the interface MTU.
    pub active_mtu: u32,
    /// The largest IB MTU the port supports (4096).
    pub max_mtu: u32,
    pub link_speed_bps: u64,
}

impl AsyncEvent {
    /// The QP, CQ or SRQ the event is about (`ibv_async_event.element`).
    pub fn affiliated(&self) -> Affiliated {
        match *self {
            AsyncEvent::CqErr(c) => Affiliated::Cq(c),
            AsyncEvent::SrqLimitReached(s) => Affiliated::Srq(s),
            AsyncEvent::QpFatal(q)
            | AsyncEvent::QpReqErr(q)
            | AsyncEvent::QpAccessErr(q)
            | AsyncEvent::CommEst(q)
            | AsyncEvent::SqDrained(q)
            | AsyncEvent::QpLastWqeReached(q) => Affiliated::Qp(q),
            AsyncEvent::PortActive(p) | AsyncEvent::PortErr(p) => Affiliated::Port(p),
        }
    }

    /// The event's number in rdma-core's `enum ibv_event_type`.
    pub fn ibv_event_type(&self) -> u32 {
        match self {
            AsyncEvent::CqErr(_) => 0,
            AsyncEvent::QpFatal(_) => 1,
            AsyncEvent::QpReqErr(_) => 2,
            AsyncEvent::QpAccessErr(_) => 3,
            AsyncEvent::CommEst(_) => 4,
            AsyncEvent::SqDrained(_) => 5,
            AsyncEvent::SrqLimitReached(_) => 15,
            AsyncEvent::QpLastWqeReached(_) => 16,
            AsyncEvent::PortActive(_) => 9,
            AsyncEvent::PortErr(_) => 10,
        }
    }
}

/// Device events kept for the application at most (older ones are dropped
/// and counted as `async_events_dropped`).
const MAX_ASYNC_EVENTS: usize = 1024;

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

/// Everything but the QPs, so QP methods can borrow both.
pub(crate) struct Resources {
    pub cfg: RnicConfig,
    pub mrs: MrTable,
    pub cqs: Vec<Option<Cq>>,
    pub srqs: Vec<Option<Srq>>,
    pub pds: Vec<bool>,
    /// Counters of QPs since destroyed, plus device-level events.
    pub dev: Counters,
    /// Asynchronous events not yet taken (`Rnic::poll_async_event`).
    pub events: VecDeque<AsyncEvent>,
    /// Received frames dropped before reaching a QP, by reason.
    pub drops: BTreeMap<&'static str, u64>,
    pub ip_ident: u16,
    /// Which priorities a peer has paused (PFC reaction).
    pub pfc: crate::cc::PfcRx,
    /// PFC generation from the receive backlog (`None`: off).
    pub pfc_tx: Option<crate::cc::PfcTx>,
    /// The latest `now` the device was handed.
    pub now: Instant,
    /// Whether the port's link is up (what the engine last saw).
    pub link_up: bool,
}

impl Resources {
    /// Queues an asynchronous event; beyond `MAX_ASYNC_EVENTS` the oldest
    /// is dropped and counted.
    pub(crate) fn raise(&mut self, ev: AsyncEvent) {
        if self.events.len() >= MAX_ASYNC_EVENTS {
            self.events.pop_front();
            self.dev.async_events_dropped += 1;
        }
        self.events.push_back(ev);
    }

    fn drop_frame(&mut self, reason: &'static str) {
        *self.drops.entry(reason).or_default() += 1;
    }

    /// Builds a frame from a QP's header template into `buf`, with a
    /// payload of `payload_len` bytes that `fill` writes straight into the
    /// frame (from registered memory, say: no staging copy, and the ICRC
    /// taken in the same pass). If `fill` fails nothing is sent and no IPv4
    /// ident is used. `Ok(None)`: the frame could not be built.
    #[inline]
    pub(crate) fn emit<E>(
        &mut self,
        hdr: &qp::HeaderTemplate,
        bth: BthRepr,
        ext: ExtHeaders,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&Resources, &mut frame::Payload<'_>) -> Result<(), E>,
    ) -> Result<Option<usize>, E> {
        let mut ip = hdr.ip;
        if let IpRepr::V4(v4) = &mut ip {
            v4.ident = self.ip_ident;
        }
        let repr = RoceRepr {
            eth: hdr.eth,
            ip,
            udp: hdr.udp,
            udp_checksum: hdr.udp_checksum,
            bth,
            ext,
            payload: &[],
            trailer_len: 0,
        };
        let this = &*self;
        let n = frame::emit_with(&repr, payload_len, buf, |dst| fill(this, dst))?;
        if let IpRepr::V4(_) = ip {
            self.ip_ident = self.ip_ident.wrapping_add(1);
        }
        Ok(n)
    }

    /// `emit` for a frame without payload.
    pub(crate) fn emit_bare(
        &mut self,
        hdr: &qp::HeaderTemplate,
        bth: BthRepr,
        ext: ExtHeaders,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = self.emit(hdr, bth, ext, 0, buf, |_, _| Ok::<(), ()>(()));
        n.ok().flatten()
    }

    /// Copies the rest of `dst`'s payload (`dst.remaining()` bytes) from
    /// the message described by `sgl`, starting at message offset `off`,
    /// out of registered memory.
    pub(crate) fn gather(
        &self,
        pd: u32,
        sgl: &Sgl,
        mut off: u64,
        dst: &mut frame::Payload<'_>,
    ) -> Result<(), KeyError> {
        for sge in sgl.as_slice() {
            if dst.remaining() == 0 {
                break;
            }
            let len = sge.length as u64;
            if off >= len {
                off -= len;
                continue;
            }
            let n = ((len - off) as usize).min(dst.remaining());
            let (mr, at) = self
                .mrs
                .check_local(sge.lkey, pd, sge.addr + off, n as u64, 0)?;
            dst.put_mem(&*mr.mem, at, n);
            off = 0;
        }
        Ok(())
    }

    /// Copies `src` into the message described by `sgl` at offset `off`.
    pub(crate) fn scatter(
        &self,
        pd: u32,
        sgl: &Sgl,
        mut off: u64,
        src: &[u8],
    ) -> Result<(), KeyError> {
        let mut done = 0;
        for sge in sgl.as_slice() {
            if done == src.len() {
                break;
            }
            let len = sge.length as u64;
            if off >= len {
                off -= len;
                continue;
            }
            let n = ((len - off) as usize).min(src.len() - done);
            let (mr, at) = self.mrs.check_local(
                sge.lkey,
                pd,
                sge.addr + off,
                n as u64,
                access::LOCAL_WRITE,
            )?;
            mr.mem.write(at, &src[done..done + n]);
            done += n;
            off = 0;
        }
        Ok(())
    }

    /// Checks every SGE of a list against the local keys.
    pub(crate) fn check_sgl(&self, pd: u32, sgl: &Sgl, need: u32) -> Result<(), KeyError> {
        for sge in sgl.as_slice().iter().filter(|s| s.length > 0) {
            self.mrs
                .check_local(sge.lkey, pd, sge.addr, sge.length as u64, need)?;
        }
        Ok(())
    }

    /// Delivers a completion. A CQ overrun is counted; the caller's QP then
    /// goes to the error state (IBA 11.4.2.1).
    pub(crate) fn complete(&mut self, cq: u32, wc: Wc) -> Result<(), VerbsError> {
        match self.cqs.get_mut(cq as usize).and_then(|c| c.as_mut()) {
            Some(c) => {
                let was = c.is_overrun();
                let r = c.push(wc).map_err(|_| VerbsError::CqOverrun);
                if !was && c.is_overrun() {
                    // IBA 11.4.2.1: the overrun is an asynchronous CQ error
                    self.raise(AsyncEvent::CqErr(cq));
                }
                r
            }
            None => Err(VerbsError::NoSuchCq(cq)),
        }
    }
}

/// A soft RNIC: verbs objects, QPs, and the transport between them.
pub struct Rnic {
    res: Resources,
    qps: Vec<Option<Qp>>,
    tx_queue: VecDeque<u32>,
    /// Every QP's `next_deadline()` in a min-heap: kept exact by
    /// [`Self::rearm`] at the end of each entry point that touched a QP.
    deadlines: timers::DeadlineIndex,
    /// Scratch for the slots `handle_timeout` fires (no allocation per turn).
    due: Vec<u32>,
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
                drops: BTreeMap::new(),
                ip_ident: 0,
                pfc,
                pfc_tx,
                now: Instant::ZERO,
                link_up: true,
            },
            qps: Vec::new(),
            tx_queue: VecDeque::new(),
            deadlines: timers::DeadlineIndex::default(),
            due: Vec::new(),
        }
    }

    pub fn config(&self) -> &RnicConfig {
        &self.res.cfg
    }

    /// The port's speed: DCQCN's line rate and PFC's quantum length follow it.
    pub fn set_link_speed(&mut self, bps: u64) {
        self.res.cfg.link_bps = bps;
        self.res.pfc = congestion::pfc_rx(&self.res.cfg.cc, bps);
        if let Some(tx) = &mut self.res.pfc_tx {
            tx.set_link_bps(bps);
        }
        for qp in self.qps.iter_mut().flatten() {
            qp.cc = congestion::QpCc::new(&self.res.cfg.cc, bps);
        }
        // a fresh DCQCN state has no timers: O(#QPs), but a configuration
        // call, not a turn
        for idx in 0..self.qps.len() {
            self.rearm(idx);
        }
    }

    /// Sets the port's active MTU from the interface MTU (the largest IP
    /// datagram): the largest IB MTU whose packets fit (see
    /// [`ib_mtu_for_ip_mtu`]), as rxe derives its port's active MTU from
    /// its netdev's MTU.
    pub fn set_port_ip_mtu(&mut self, ip_mtu: usize) {
        let ipv6 = self.res.cfg.gid.to_ipv4().is_none();
        let _ = self.set_port_mtu(ib_mtu_for_ip_mtu(ip_mtu, ipv6));
    }

    /// Sets the port's active MTU (see [`RnicConfig::port_mtu`]); UD QPs,
    /// existing and new, take it as their message limit.
    pub fn set_port_mtu(&mut self, mtu: u32) -> Result<(), VerbsError> {
        if !crate::verbs::MTUS.contains(&mtu) {
            return Err(VerbsError::Modify(ModifyError::OutOfRange {
                name: "active_mtu",
                value: mtu,
            }));
        }
        self.res.cfg.port_mtu = mtu;
        for qp in self.qps.iter_mut().flatten() {
            if qp.qp_type() == QpType::Ud {
                qp.mtu = mtu;
            }
        }
        Ok(())
    }

    /// The port's active MTU (`ibv_query_port`'s `active_mtu`).
    pub fn port_mtu(&self) -> u32 {
        self.res.cfg.port_mtu
    }

    /// PFC counters as of `now`, under the mlx5 `ethtool -S` names:
    /// `rx_prio{p}_pause`, `rx_prio{p}_pause_duration` (frames we obeyed)
    /// and `tx_prio{p}_pause`, `tx_prio{p}_pause_duration` (frames we
    /// generated, see [`Self::on_rx_backlog`]).
    pub fn pfc_counters(&self, now: Instant) -> crate::cc::PfcCounters {
        let mut c = self.res.pfc.counters(now);
        if let Some(tx) = &self.res.pfc_tx {
            c.add(&tx.counters(now));
        }
        c
    }

    /// The latest `now` handed to the device (by `handle_frame`,
    /// `handle_timeout`, `poll_transmit` or `on_rx_backlog`): what a
    /// caller without the driver's clock passes to [`Self::pfc_counters`].
    pub fn last_now(&self) -> Instant {
        self.res.now
    }

    /// Turns PFC generation on (or off with `None`), as
    /// [`CcConfig::pfc_tx`] does at creation; counters start again.
    pub fn set_pfc_tx(&mut self, cfg: Option<PfcTxConfig>) {
        self.res.cfg.cc.pfc_tx = cfg;
        self.res.pfc_tx = congestion::pfc_tx(&self.res.cfg.cc, self.res.cfg.link_bps);
    }

    /// Whether the device generates PFC (so its driver should report the
    /// receive backlog through [`Self::on_rx_backlog`]).
    pub fn pfc_tx_enabled(&self) -> bool {
        self.res.pfc_tx.is_some()
    }

    /// The receive backlog of priority `prio` (bytes received by the port
    /// and not yet handed to [`Self::handle_frame`]) is `bytes` at `now`.
    /// With PFC generation on (IEEE 802.1Qbb): reaching the XOFF threshold
    /// queues a PFC frame pausing the peer on `prio`, refreshed every half
    /// pause time while the backlog stays above XON; falling to XON queues
    /// one with pause time 0. The frames leave through
    /// [`Self::poll_transmit`], ahead of any data. Without it, nothing.
    pub fn on_rx_backlog(&mut self, now: Instant, prio: u8, bytes: u64) {
        self.res.now = self.res.now.max(now);
        if let Some(tx) = &mut self.res.pfc_tx {
            tx.on_backlog(prio, bytes);
        }
    }

    /// [`Self::on_rx_backlog`] for the eight priorities at once.
    pub fn on_rx_backlogs(&mut self, now: Instant, bytes: &[u64; crate::cc::PRIORITIES]) {
        for (p, &b) in bytes.iter().enumerate() {
            self.on_rx_backlog(now, p as u8, b);
        }
    }

    // ---- verbs: objects ----

    pub fn alloc_pd(&mut self) -> u32 {
        self.res.pds.push(true);
        (self.res.pds.len() - 1) as u32
    }

    fn check_pd(&self, pd: u32) -> Result<(), VerbsError> {
        match self.res.pds.get(pd as usize) {
            Some(true) => Ok(()),
            _ => Err(VerbsError::NoSuchPd(pd)),
        }
    }

    /// Registers `len` bytes of `mem` (from `mem_offset`) at virtual address
    /// `addr`. Returns (lkey, rkey).
    pub fn reg_mr(
        &mut self,
        pd: u32,
        mem: Arc<dyn Memory>,
        mem_offset: usize,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<(u32, u32), VerbsError> {
        self.check_pd(pd)?;
        // ibv_reg_mr(3): remote write or atomic access requires local write.
        if access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
            && access & access::LOCAL_WRITE == 0
        {
            return Err(VerbsError::BadMr(
                "remote write or atomic access needs local write",
            ));
        }
        self.res
            .mrs
            .register(pd, mem, mem_offset, addr, len, access)
            .ok_or(VerbsError::BadMr(
                "region outside its memory or key space exhausted",
            ))
    }

    /// Deregisters a region; refused while memory windows are bound to it.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), VerbsError> {
        Ok(self.res.mrs.deregister(lkey)?)
    }

    /// Allocates a memory window in `pd` (`ibv_alloc_mw`); returns its
    /// R_Key (its handle is `rkey >> 8`). Bind it with a
    /// [`SendOp::BindMw`] work request.
    pub fn alloc_mw(&mut self, pd: u32, kind: MwType) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        self.res
            .mrs
            .alloc_window(pd, kind)
            .ok_or(VerbsError::BadMr("key space exhausted"))
    }

    /// Frees a memory window by its handle (`ibv_dealloc_mw`).
    pub fn dealloc_mw(&mut self, handle: u32) -> Result<(), VerbsError> {
        if self.res.mrs.dealloc_window(handle) {
            Ok(())
        } else {
            Err(MwError::NoSuchWindow(handle << 8).into())
        }
    }

    /// The memory window in slot `handle`, as it is now.
    pub fn query_mw(&self, handle: u32) -> Option<Mw> {
        self.res.mrs.window_by_handle(handle).copied()
    }

    pub fn create_cq(&mut self, capacity: usize) -> u32 {
        self.res.cqs.push(Some(Cq::new(capacity)));
        (self.res.cqs.len() - 1) as u32
    }

    /// A shared receive queue on `pd`; the number of a destroyed SRQ may be
    /// handed out again.
    pub fn create_srq(&mut self, pd: u32, max_wr: u32) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        let srq = Some(Srq {
            pd,
            queue: VecDeque::new(),
            max_wr,
            limit: 0,
        });
        match self.res.srqs.iter().position(|s| s.is_none()) {
            Some(free) => {
                self.res.srqs[free] = srq;
                Ok(free as u32)
            }
            None => {
                self.res.srqs.push(srq);
                Ok((self.res.srqs.len() - 1) as u32)
            }
        }
    }

    /// Destroys SRQ `srq` (ibv_destroy_srq): refused while a QP is
    /// attached to it (the verbs return EBUSY); the receive WQEs it still
    /// holds are dropped without completions, as the verbs do.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), VerbsError> {
        if !matches!(self.res.srqs.get(srq as usize), Some(Some(_))) {
            return Err(VerbsError::NoSuchSrq(srq));
        }
        if self.qps.iter().flatten().any(|q| q.init.srq == Some(srq)) {
            return Err(VerbsError::SrqInUse(srq));
        }
        self.res.srqs[srq as usize] = None;
        Ok(())
    }

    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, VerbsError> {
        self.check_pd(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            if !matches!(self.res.cqs.get(cq as usize), Some(Some(_))) {
                return Err(VerbsError::NoSuchCq(cq));
            }
        }
        if let Some(s) = init.srq {
            if !matches!(self.res.srqs.get(s as usize), Some(Some(_))) {
                return Err(VerbsError::NoSuchSrq(s));
            }
        }
        let idx = self
            .qps
            .iter()
            .position(|q| q.is_none())
            .unwrap_or_else(|| {
                self.qps.push(None);
                self.qps.len() - 1
            });
        let qpn = FIRST_QPN + idx as u32;
        self.qps[idx] = Some(Qp::new(qpn, init, &self.res.cfg));
        self.rearm(idx);
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].take().expect("index is live");
        // the slot's timers die with it: a QP created in it later does not
        // inherit them
        self.deadlines.set(idx, None);
        self.res.dev.add(&qp.counters);
        // its type 2 windows become unusable (MrTable::orphan_qp_windows)
        self.res.mrs.orphan_qp_windows(qpn);
        Ok(())
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        let idx = qpn.checked_sub(FIRST_QPN)? as usize;
        matches!(self.qps.get(idx), Some(Some(_))).then_some(idx)
    }

    fn qp_mut(&mut self, qpn: u32) -> Result<&mut Qp, VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok(self.qps[idx].as_mut().expect("index is live"))
    }

    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_mut().expect("index is live");
        let to = check_modify(qp.state, qp.qp_type(), attr)?;
        if let Some(a) = attr.access_flags {
            qp.access = a;
        }
        if let Some(k) = attr.qkey {
            qp.qkey = k;
        }
        if let Some(ah) = attr.ah {
            qp.ah = Some(ah);
        }
        if let Some(m) = attr.path_mtu {
            qp.mtu = m;
        }
        if let Some(d) = attr.dest_qpn {
            qp.dest_qpn = d;
        }
        if let Some(p) = attr.rq_psn {
            qp.resp.epsn = wire::Psn::new(p);
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            qp.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            qp.min_rnr_timer = v;
        }
        if let Some(p) = attr.sq_psn {
            qp.req.npsn = wire::Psn::new(p);
            qp.req.una = qp.req.npsn;
            qp.req.high = qp.req.npsn;
            qp.req.acked = qp.req.npsn;
        }
        if let Some(v) = attr.timeout {
            qp.timeout = v;
        }
        if let Some(v) = attr.retry_cnt {
            qp.retry_cnt = v;
            qp.req.retry_left = v;
        }
        if let Some(v) = attr.rnr_retry {
            qp.rnr_retry = v;
            qp.req.rnr_left = v;
        }
        if let Some(v) = attr.max_rd_atomic {
            qp.max_rd_atomic = v;
        }
        if let (Some(ah), QpType::Rc | QpType::Uc) = (qp.ah, qp.qp_type()) {
            let mut hdr =
                HeaderTemplate::new(self.res.cfg.mac, self.res.cfg.gid, &ah, qp.qpn, qp.dest_qpn);
            data_class(&mut hdr, &ah, &self.res.cfg.cc);
            qp.cc.prio = self.res.cfg.cc.qos.priority(hdr.eth.vlan, ip_dscp(&hdr.ip));
            qp.hdr = Some(hdr);
        }
        match to {
            QpState::Err if qp.state != QpState::Err => qp.enter_error(&mut self.res),
            QpState::Reset => {
                let (qpn, init, counters) = (qp.qpn, qp.init, std::mem::take(&mut qp.counters));
                *qp = Qp::new(qpn, init, &self.res.cfg);
                qp.counters = counters;
            }
            QpState::Sqd => {
                // SQ_DRAINED is owed once per transition into SQD
                if qp.state != QpState::Sqd {
                    qp.drain_pending = true;
                }
                qp.state = QpState::Sqd;
                qp.check_drained(&mut self.res);
            }
            s => qp.state = s,
        }
        self.schedule(idx);
        // ERR and RESET disarm the QP's timers
        self.rearm(idx);
        Ok(())
    }

    pub fn query_qp(&self, qpn: u32) -> Result<QpInfo, VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_ref().expect("index is live");
        Ok(QpInfo {
            qpn,
            qp_type: qp.qp_type(),
            state: qp.state,
            dest_qpn: qp.dest_qpn,
            mtu: qp.mtu,
            sq_psn: qp.req.npsn.value(),
            rq_psn: qp.resp.epsn.value(),
            send_queue_len: qp.req.sq.len(),
            recv_queue_len: qp.rq.len(),
            counters: qp.counters.clone(),
        })
    }

    // ---- verbs: data path ----

    /// Posts a send work request (`ibv_post_send`).
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_mut().expect("index is live");
        let posted = qp.post_send(&mut self.res, wr);
        self.rearm(idx);
        posted?;
        self.schedule(idx);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qp_mut(qpn)?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::InvalidWr("the QP uses an SRQ: post to the SRQ"));
        }
        if matches!(qp.state, QpState::Reset) {
            return Err(VerbsError::BadState(qp.state));
        }
        if qp.rq.len() >= qp.init.max_recv_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        if qp.state == QpState::Err {
            // IBA 10.3.1: WRs posted in the error state complete as flushed.
            let wc = Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn);
            qp.counters.resp_cqe_flush_error += 1;
            let cq = qp.init.recv_cq;
            return self.res.complete(cq, wc);
        }
        qp.rq.push_back(wr);
        Ok(())
    }

    fn srq(&self, srq: u32) -> Result<&Srq, VerbsError> {
        self.res
            .srqs
            .get(srq as usize)
            .and_then(|s| s.as_ref())
            .ok_or(VerbsError::NoSuchSrq(srq))
    }

    fn srq_mut(&mut self, srq: u32) -> Result<&mut Srq, VerbsError> {
        self.res
            .srqs
            .get_mut(srq as usize)
            .and_then(|s| s.as_mut())
            .ok_or(VerbsError::NoSuchSrq(srq))
    }

    /// Arms SRQ `srq`'s limit (`ibv_modify_srq` with IBV_SRQ_LIMIT): once
    /// fewer than `limit` receive WQEs are left on it, an
    /// [`AsyncEvent::SrqLimitReached`] is raised and the limit disarmed.
    /// 0 disarms it; more than the SRQ holds is refused (the verbs: EINVAL).
    pub fn arm_srq_limit(&mut self, srq: u32, limit: u32) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if limit > s.max_wr {
            return Err(VerbsError::InvalidWr(
                "the SRQ limit exceeds the SRQ's size",
            ));
        }
        s.limit = limit;
        Ok(())
    }

    /// `ibv_query_srq`: (max WRs, armed limit — 0 once fired or never
    /// armed, receive WQEs it holds now).
    pub fn query_srq(&self, srq: u32) -> Result<(u32, u32, usize), VerbsError> {
        let s = self.srq(srq)?;
        Ok((s.max_wr, s.limit, s.queue.len()))
    }

    /// The port's link state as its owner (the engine) sees it: on a
    /// change, IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE is raised for
    /// port 1 (IBTA 11.6.3.2); the same state again raises nothing. Only a
    /// report: the data path is unchanged (an RC QP retries and fails by
    /// its retry count, as on hardware). Returns whether it changed.
    pub fn set_link_up(&mut self, up: bool) -> bool {
        if self.res.link_up == up {
            return false;
        }
        self.res.link_up = up;
        self.res.raise(if up {
            AsyncEvent::PortActive(1)
        } else {
            AsyncEvent::PortErr(1)
        });
        true
    }

    /// The link state at start-up: no event (the port simply starts DOWN
    /// or ACTIVE).
    pub fn init_link_up(&mut self, up: bool) {
        self.res.link_up = up;
    }

    /// `ibv_query_port` for port 1.
    pub fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: if self.res.link_up {
                PortState::Active
            } else {
                PortState::Down
            },
            active_mtu: self.res.cfg.port_mtu,
            max_mtu: 4096,
            link_speed_bps: self.res.cfg.link_bps,
        }
    }

    /// The oldest asynchronous event not yet taken.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.res.events.pop_front()
    }

    pub fn post_srq_recv(&mut self, srq: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if s.queue.len() >= s.max_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// Moves up to `max` completions of CQ `cq` into `out` (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: u32, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        let c = self
            .res
            .cqs
            .get_mut(cq as usize)
            .and_then(|c| c.as_mut())
            .ok_or(VerbsError::NoSuchCq(cq))?;
        c.poll(max, out).map_err(|_| VerbsError::CqOverrun)
    }

    // ---- the wire side ----

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

    /// Takes one received frame. Frames that are not RoCEv2 for a QP of
    /// ours are counted by reason and dropped.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.res.now = self.res.now.max(now);
        if let Ok(eth) = wire::ethernet::EthernetFrame::new_checked(frame) {
            if eth.ethertype() == wire::ethernet::ethertype::MAC_CONTROL {
                // 802.1Qbb / 802.3x: pause the named priorities.
                match wire::MacControlRepr::parse(frame) {
                    Ok(m) => self.res.pfc.handle(now, &m.control),
                    Err(e) => self.res.drop_frame(e.reason()),
                }
                return;
            }
        }
        // headers checked, ICRC verified (IBTA RoCEv2 annex A17.3.3: a
        // packet whose ICRC does not match is dropped), then the repr
        let repr = match RoceRepr::parse(frame) {
            Ok(r) => r,
            Err(e) => return self.res.drop_frame(e.reason()),
        };
        let Some(info) = repr.opcode_info() else {
            // parse refuses unknown opcodes; this cannot happen
            return self.res.drop_frame("unknown_opcode");
        };
        let Some(idx) = self.qp_index(repr.bth.dest_qp) else {
            return self.res.drop_frame("unknown_qp");
        };
        let qp = self.qps[idx].as_mut().expect("index is live");
        if !info.valid_for(qp.qp_type()) {
            qp.counters.rx_qp_state_drop += 1;
            return self.res.drop_frame("opcode_not_for_qp_type");
        }
        // C9-43: a packet whose BTH P_Key does not match the QP's is dropped.
        if !wire::bth::pkey_matches(repr.bth.pkey, qp.pkey) {
            return self.res.drop_frame("pkey_mismatch");
        }
        // IBA 9.6 (connected address; rxe: check_addr): an RC or UC QP takes
        // packets only from its remote address to its local one. Without a
        // path (before RTR) the QP takes no packet anyway.
        if let (QpType::Rc | QpType::Uc, Some(hdr)) = (qp.qp_type(), &qp.hdr) {
            if !hdr.is_from_peer(&repr.ip) {
                return self.res.drop_frame("address_mismatch");
            }
        }
        qp.counters.rcvd_pkts += 1;
        // IBTA 11.6.3.1 "Communication Established": a packet arrived on a
        // connected QP still in RTR (the application may move it to RTS).
        if qp.state == QpState::Rtr && !qp.comm_est && qp.qp_type() != QpType::Ud {
            qp.comm_est = true;
            self.res.raise(AsyncEvent::CommEst(qp.qpn));
        }
        let peer = match (qp.qp_type(), repr.ext.deth) {
            (QpType::Ud, Some(d)) => d.src_qp,
            _ => qp.dest_qpn,
        };
        qp.cc.on_receive(now, &repr, peer, &self.res.cfg.cc.np);
        if info.is_request() {
            qp.handle_request(&mut self.res, now, &repr);
        } else if info.is_response() {
            qp.handle_response(&mut self.res, now, &repr);
        } else {
            // RoCEv2 A17.9.3: a CNP makes the reaction point cut the QP's rate.
            qp.cc.rp.handle_cnp(now);
        }
        qp.sync_cc_counters();
        qp.check_drained(&mut self.res);
        self.schedule(idx);
        // an ACK stops or re-arms the ACK timer, an RNR NAK arms the RNR
        // timer, a CNP arms DCQCN's
        self.rearm(idx);
    }

    /// Writes the next frame to send into `buf` (at least `MAX_FRAME_LEN`
    /// bytes) and returns its length, or `None` when nothing is ready.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < MAX_FRAME_LEN {
            return None;
        }
        self.res.now = self.res.now.max(now);
        // 802.1Qbb: a PFC frame owed to the peer goes first. MAC control
        // frames are never held back by a pause (802.3 Annex 31B).
        if let Some(tx) = &mut self.res.pfc_tx {
            if let Some(control) = tx.poll_transmit(now) {
                let repr = wire::MacControlRepr {
                    src: self.res.cfg.mac,
                    dst: EthernetAddress::MAC_CONTROL,
                    control,
                };
                if let Ok(n) = repr.emit(buf) {
                    return Some(n);
                }
            }
        }
        while let Some(idx) = self.tx_queue.pop_front() {
            let Some(qp) = self.qps[idx as usize].as_mut() else {
                continue;
            };
            let sent = qp.poll_transmit(&mut self.res, now, buf);
            qp.check_drained(&mut self.res);
            // a request sent arms the ACK timer; pacing may arm its own
            self.deadlines.set(idx as usize, qp.next_deadline());
            match sent {
                Some(n) => {
                    qp.counters.sent_pkts += 1;
                    // more may follow: stay in the round robin
                    self.tx_queue.push_back(idx);
                    return Some(n);
                }
                None => qp.scheduled = false,
            }
        }
        None
    }

    /// The earliest deadline of any timer: the QPs' (the top of the
    /// deadline index, O(1)) and PFC's.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let pfc_tx = self.res.pfc_tx.as_ref().and_then(|t| t.poll_timeout());
        [self.deadlines.first(), self.res.pfc.poll_timeout(), pfc_tx]
            .into_iter()
            .flatten()
            .min()
    }

    /// What [`Self::poll_timeout`] returns, found by visiting every QP
    /// (O(#QPs)): the reference the deadline index is tested against.
    #[doc(hidden)]
    pub fn poll_timeout_scan(&self) -> Option<Instant> {
        let qps = self.qps.iter().flatten().filter_map(|q| q.next_deadline());
        let pfc_tx = self.res.pfc_tx.as_ref().and_then(|t| t.poll_timeout());
        qps.chain(self.res.pfc.poll_timeout()).chain(pfc_tx).min()
    }

    /// Whether the deadline index holds exactly every QP's next deadline
    /// (tests check this after every step).
    #[doc(hidden)]
    pub fn deadline_index_is_exact(&self) -> bool {
        self.deadlines.check(
            self.qps
                .iter()
                .map(|q| q.as_ref().and_then(Qp::next_deadline)),
        )
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.res.now = self.res.now.max(now);
        if let Some(tx) = &mut self.res.pfc_tx {
            // a PFC refresh falls due: `poll_transmit` sends it
            tx.handle_timeout(now);
        }
        if self.res.pfc.poll_timeout().is_some_and(|t| t <= now) {
            // a pause ended: every QP may have frames waiting
            self.res.pfc.handle_timeout(now);
            // O(#QPs), but only when a pause ends (rare next to idle turns)
            for idx in 0..self.qps.len() {
                self.schedule(idx);
            }
        }
        if !self.deadlines.any_due(now) {
            return;
        }
        // the QPs due, each fired once and in slot order, as a scan of
        // every QP would; a QP's timers only change its own deadline
        let mut due = std::mem::take(&mut self.due);
        self.deadlines.take_due(now, &mut due);
        for &idx in &due {
            let idx = idx as usize;
            let Some(qp) = self.qps[idx].as_mut() else {
                continue;
            };
            // local ACK timeout (IBA 9.7.6.1.3 / C9-140), RNR timer
            // (IBA 9.7.5.2.8) or DCQCN
            qp.handle_timeout(&mut self.res, now);
            qp.check_drained(&mut self.res);
            self.schedule(idx);
            self.rearm(idx);
        }
        self.due = due;
    }

    /// A multi-line dump of a QP's transport state, for debugging and tools.
    pub fn debug_qp(&self, qpn: u32) -> String {
        let Some(idx) = self.qp_index(qpn) else {
            return format!("no QP {qpn:#x}");
        };
        let q = self.qps[idx].as_ref().expect("index is live");
        let mut s = format!(
            "qp {qpn:#x} {:?} {:?}: req npsn={} una={} cur={} cur_off={} rd_atomic={} ack_deadline={:?} rnr_deadline={:?} retry_left={}\n",
            q.qp_type(), q.state, q.req.npsn, q.req.una, q.req.cur, q.req.cur_off, q.req.rd_atomic_outstanding,
            q.req.ack_deadline, q.req.rnr_deadline, q.req.retry_left
        );
        for w in q.req.sq.iter().take(12) {
            s += &format!(
                "  wqe {} {:?} len={} started={} first_psn={} npkts={} read_done={}\n",
                w.wr.wr_id, w.wr.op, w.len, w.started, w.first_psn, w.npkts, w.read_done
            );
        }
        s += &format!(
            "  resp epsn={} msn={} in_msg={:?} nak_sent={} responses={:?}\n",
            q.resp.epsn,
            q.resp.msn,
            q.resp.in_msg.map(|m| m.operation()),
            q.resp.nak_sent,
            q.resp.responses
        );
        s
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

    /// Received frames dropped before reaching a QP, by reason.
    pub fn drops(&self) -> &BTreeMap<&'static str, u64> {
        &self.res.drops
    }

    /// True when no QP has anything left to send, to receive or to time.
    pub fn is_idle(&self) -> bool {
        self.qps
            .iter()
            .flatten()
            .all(|q| q.req.sq.is_empty() && q.resp.responses.is_empty())
    }
}

impl Qp {
    /// Validates and queues a send WR.
    fn post_send(&mut self, res: &mut Resources, wr: SendWr) -> Result<(), VerbsError> {
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState(self.state));
        }
        if self.req.sq.len() >= self.init.max_send_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        match (self.qp_type(), &wr.op) {
            (QpType::Ud, SendOp::Send | SendOp::SendWithImm { .. }) if wr.ud.is_some() => {}
            (QpType::Ud, _) => {
                return Err(VerbsError::InvalidWr(
                    "UD QPs take SEND with an address handle",
                ))
            }
            (QpType::Uc, op)
                if op.is_read_or_atomic() || matches!(op, SendOp::SendWithInv { .. }) =>
            {
                return Err(VerbsError::InvalidWr(
                    "UC QPs take only SEND and RDMA WRITE",
                ))
            }
            _ => {}
        }
        let len = wr.sgl.total_len();
        if wr.op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidWr(
                "atomics need one 8-byte local buffer",
            ));
        }
        if len > MAX_MSG_LEN {
            return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
        }
        let inline = if wr.flags.inline {
            if wr.op.is_read_or_atomic() {
                return Err(VerbsError::InvalidWr("inline data is for SEND and WRITE"));
            }
            // IBV_SEND_INLINE: the data is copied now, the lkeys are not used.
            let mut data = vec![0u8; len as usize].into_boxed_slice();
            let mut off = 0;
            for sge in wr.sgl.as_slice() {
                let n = sge.length as usize;
                let (mr, at) = res
                    .mrs
                    .get(sge.lkey)
                    .and_then(|m| m.offset_of(sge.addr, n as u64).ok().map(|at| (m, at)))
                    .ok_or(VerbsError::InvalidWr(
                        "inline SGE outside any registered region",
                    ))?;
                mr.mem.read(at, &mut data[off..off + n]);
                off += n;
            }
            Some(data)
        } else {
            None
        };
        let signaled = wr.flags.signaled || self.init.sq_sig_all;
        let wqe = SendWqe {
            wr,
            inline,
            len,
            started: false,
            first_psn: wire::Psn::new(0),
            npkts: 0,
            read_done: 0,
            signaled,
            local_status: None,
        };
        // IBA 10.3.1: send WRs posted in ERR (or SQEr) complete as flushed.
        if matches!(self.state, QpState::Err | QpState::Sqe) {
            self.req.sq.push_back(wqe);
            self.flush_send_queue(res);
            return Ok(());
        }
        self.req.sq.push_back(wqe);
        Ok(())
    }

    /// Frames the QP has to send: a CNP it owes first (on its own
    /// priority), then — unless PFC pauses the QP's priority — responses
    /// (they unblock the peer), then requests at the pace DCQCN allows.
    fn poll_transmit(
        &mut self,
        res: &mut Resources,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<usize> {
        if let Some(cnp) = self.cc.pending_cnp.take() {
            if let Ok(n) = cnp.emit(buf) {
                return Some(n);
            }
        }
        if res.pfc.is_paused(self.cc.prio, now) {
            return None;
        }
        if let Some(n) = self.next_response(res, buf) {
            return Some(n);
        }
        if self.resp.error_after_flush && self.resp.responses.is_empty() {
            self.resp.error_after_flush = false;
            if let Some(ev) = self.resp.error_event.take() {
                res.raise(ev);
            }
            self.enter_error(res);
            return None;
        }
        if !self.cc.may_send(now) {
            return None;
        }
        let n = self.next_request(res, now, buf)?;
        self.cc.on_sent(now, n);
        Some(n)
    }

    /// Copies the congestion counters into the QP's counters.
    fn sync_cc_counters(&mut self) {
        let np = &self.cc.np_counters;
        let rp = self.cc.rp.counters();
        self.counters.np_ecn_marked_roce_packets = np.np_ecn_marked_roce_packets;
        self.counters.np_cnp_sent = np.np_cnp_sent;
        self.counters.rp_cnp_handled = rp.rp_cnp_handled;
        self.counters.rp_cnp_ignored = rp.rp_cnp_ignored;
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.req.ack_deadline,
            self.req.rnr_deadline,
            self.cc.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the QP to ERR and flushes both queues (IBA 10.3.1.2, 11.2.4.7).
    pub(crate) fn enter_error(&mut self, res: &mut Resources) {
        let was = self.state;
        self.state = QpState::Err;
        self.drain_pending = false;
        self.resp.error_after_flush = false;
        self.resp.error_event = None;
        self.req.ack_deadline = None;
        self.req.rnr_deadline = None;
        self.resp.responses.clear();
        self.flush_send_queue(res);
        if let Some(qp::InMessage::Send { recv, .. }) = self.resp.in_msg.take() {
            self.rq.push_front(recv);
        }
        while let Some(wr) = self.rq.pop_front() {
            self.counters.resp_cqe_flush_error += 1;
            let _ = res.complete(
                self.init.recv_cq,
                Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn),
            );
        }
        // IBA 10.2.9.5 / 11.6.3.1 "Last WQE Reached": a QP on an SRQ went to
        // ERR and will take no more receive WQEs from it.
        if was != QpState::Err && self.init.srq.is_some() {
            res.raise(AsyncEvent::QpLastWqeReached(self.qpn));
        }
    }

    /// SQ_DRAINED (IBTA 11.6.3.1 "Send Queue Drained"), once the QP is in
    /// SQD and no message it had begun is left unfinished.
    pub(crate) fn check_drained(&mut self, res: &mut Resources) {
        if self.drain_pending
            && self.state == QpState::Sqd
            && !self.req.outstanding()
            && !self.req.sq.iter().any(|w| w.started)
        {
            self.drain_pending = false;
            res.raise(AsyncEvent::SqDrained(self.qpn));
        }
    }

    fn flush_send_queue(&mut self, res: &mut Resources) {
        while let Some(w) = self.req.sq.pop_front() {
            self.counters.req_cqe_flush_error += 1;
            let wc = Wc::new(
                w.wr.wr_id,
                WcStatus::WrFlushErr,
                w.wr.op.wc_opcode(),
                self.qpn,
            );
            let _ = res.complete(self.init.send_cq, wc);
        }
        self.req.cur = 0;
        self.req.cur_off = 0;
        self.req.rd_atomic_outstanding = 0;
    }

    /// Completes the oldest send WQE with `status` (errors always complete,
    /// signaled or not) and, on error, fails the QP.
    pub(crate) fn complete_front(&mut self, res: &mut Resources, status: WcStatus) {
        let Some(w) = self.req.sq.pop_front() else {
            return;
        };
        if self.req.cur == 0 {
            // the WQE being (re)sent is done: the cursor moves to the next
            // one (`fast_forward` puts npsn back in line with una)
            self.req.cur_off = 0;
        }
        self.req.cur = self.req.cur.saturating_sub(1);
        if w.wr.op.is_read_or_atomic() && w.started {
            self.req.rd_atomic_outstanding = self.req.rd_atomic_outstanding.saturating_sub(1);
        }
        if status == WcStatus::Success {
            if w.wr.op.is_send() {
                self.counters.rdma_sends += 1;
            }
            if w.signaled {
                let mut wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.qpn);
                wc.byte_len = w.len as u32;
                if res.complete(self.init.send_cq, wc).is_err() {
                    self.counters.cq_overrun += 1;
                    self.raise_fatal(res);
                    self.enter_error(res);
                    return;
                }
            }
            // The next WQE failed locally while this one was in flight: its
            // error completion is due now, in order.
            if let Some(st) = self.req.sq.front().and_then(|w| w.local_status) {
                self.complete_front(res, st);
            }
        } else {
            self.counters.req_cqe_error += 1;
            let wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.qpn);
            let _ = res.complete(self.init.send_cq, wc);
            self.fail_send_queue(res);
        }
    }

    /// A send WQE completed in error. RC fails the whole QP (IBA 9.9.2).
    /// UC and UD move to the Send Queue Error state (IBA 10.3.1, SQEr): the
    /// other send WQEs are flushed, the receive queue keeps working, and
    /// `modify_qp(SQE → RTS)` resumes sending.
    pub(crate) fn fail_send_queue(&mut self, res: &mut Resources) {
        match self.qp_type() {
            QpType::Rc => self.enter_error(res),
            QpType::Uc | QpType::Ud => {
                self.state = QpState::Sqe;
                self.flush_send_queue(res);
            }
        }
    }

    /// Completes a receive WQE; on a CQ overrun the QP fails.
    pub(crate) fn complete_recv(&mut self, res: &mut Resources, wc: Wc) {
        if wc.status != WcStatus::Success {
            self.counters.resp_cqe_error += 1;
        }
        if res.complete(self.init.recv_cq, wc).is_err() {
            self.counters.cq_overrun += 1;
            self.raise_fatal(res);
            self.enter_error(res);
        }
    }

    /// QP_FATAL (IBTA "Local Work Queue Catastrophic Error": an error the
    /// CI cannot report through the CQ): the QP's completion could not be
    /// delivered because its CQ overran, and the QP goes to ERR. The only
    /// local catastrophic cause this transport has.
    fn raise_fatal(&mut self, res: &mut Resources) {
        if self.state != QpState::Err {
            res.raise(AsyncEvent::QpFatal(self.qpn));
        }
    }

    /// Takes the next receive WQE: from the SRQ if the QP has one.
    pub(crate) fn take_recv(&mut self, res: &mut Resources) -> Option<RecvWr> {
        match self.init.srq {
            Some(s) => {
                let srq = res.srqs.get_mut(s as usize)?.as_mut()?;
                let wr = srq.queue.pop_front()?;
                // the SRQ limit: below it, one event, and it disarms
                // (ibv_modify_srq(3): "low watermark"; IBTA SRQ Limit Reached)
                if srq.limit > 0 && (srq.queue.len() as u64) < srq.limit as u64 {
                    srq.limit = 0;
                    res.raise(AsyncEvent::SrqLimitReached(s));
                }
                Some(wr)
            }
            None => self.rq.pop_front(),
        }
    }

    /// Puts back a receive WQE that a dropped message had taken, at the
    /// head of the queue it came from (the SRQ if the QP has one).
    pub(crate) fn return_recv(&mut self, res: &mut Resources, recv: RecvWr) {
        match self.init.srq {
            Some(s) => {
                if let Some(srq) = res.srqs.get_mut(s as usize).and_then(|s| s.as_mut()) {
                    srq.queue.push_front(recv);
                }
            }
            None => self.rq.push_front(recv),
        }
    }

    pub(crate) fn has_recv(&self, res: &Resources) -> bool {
        match self.init.srq {
            Some(s) => res
                .srqs
                .get(s as usize)
                .and_then(|s| s.as_ref())
                .is_some_and(|s| !s.queue.is_empty()),
            None => !self.rq.is_empty(),
        }
    }
}

/// Data traffic class when congestion control is on: ECT(0) so switches can
/// mark it, and the configured DSCP unless the address handle names one.
fn data_class(hdr: &mut HeaderTemplate, ah: &crate::verbs::AhAttr, cc: &CcConfig) {
    let (dscp, ecn) = if ah.traffic_class == 0 {
        (cc.qos.data_dscp, cc.qos.data_ecn)
    } else {
        (ah.traffic_class >> 2, ah.traffic_class & 3)
    };
    match &mut hdr.ip {
        IpRepr::V4(v) => {
            v.dscp = dscp;
            v.ecn = ecn;
        }
        IpRepr::V6(v) => {
            v.dscp = dscp;
            v.ecn = ecn;
        }
    }
}

fn ip_dscp(ip: &IpRepr) -> u8 {
    ip.dscp()
}

/// What a RoCEv2 packet adds to its payload inside the IP MTU, at most: IP
/// (20, or 40 for IPv6) + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 (RDMA
/// WRITE Only with Immediate carries both) + ICRC 4.
const ROCE_OVERHEAD_V4: usize = 20 + 8 + 12 + 16 + 4 + 4;

/// The largest IB MTU (256..4096) whose packets fit an interface whose IP
/// MTU is `ip_mtu`; 256 when nothing larger fits.
pub fn ib_mtu_for_ip_mtu(ip_mtu: usize, ipv6: bool) -> u32 {
    let room = ip_mtu.saturating_sub(ROCE_OVERHEAD_V4 + if ipv6 { 20 } else { 0 });
    crate::verbs::MTUS
        .iter()
        .rev()
        .copied()
        .find(|&m| m as usize <= room)
        .unwrap_or(256)
}
