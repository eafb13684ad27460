//! # sim — softrnic on a virtual clock, for tests and benchmarks
//!
//! A deterministic network simulator: two RNICs built from the real
//! transport code joined by a pair of links with latency, bandwidth, an MTU
//! and seeded loss, reordering, duplication, bit corruption and CE marking,
//! all on a virtual clock. Nothing sleeps; a run with the same seed is the
//! same run. [`fabric`] is the other simulator: N hosts around one switch,
//! at packet level, for congestion and flow control.
//!
//! A test-support crate: the tests and benchmarks depend on it, the product
//! never does. What a link does to a frame is the product's impairment
//! model (`nic::io::impair`), drawn once per frame; a link only adds when
//! things arrive (latency, serialisation, the delay of a reordered frame).
//! `rnic demo` and `rnic perf --loopback` do not run here: their two RNICs
//! face each other directly (`tools::loopback`), with no link to model.
//!
//! Length: The event loop, the links and the nodes share the virtual clock's
//! queue, so they stay in one file.

pub mod fabric;

pub use nic::device::Endpoint;
use nic::device::Rnic;
use nic::io::impair::{Chances, Impairments};
use nic::transport::{QpInit, MAX_FRAME_LEN};
use nic::verbs::{access, AhAttr, QpAttr, QpState, QpType, Wc};
use nic::Instant;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// One direction of a link.
#[derive(Clone, Copy, Debug)]
pub struct LinkConfig {
    pub latency: Duration,
    /// Bits per second; 0 means infinitely fast.
    pub bandwidth_bps: u64,
    /// Largest frame (Ethernet header included) the link carries.
    pub max_frame: usize,
    /// What the link does to frames, each a chance per frame. A reordered
    /// frame is held back by `reorder_delay`; a duplicate arrives up to
    /// 2 µs after the frame.
    pub impair: Impairments,
    pub reorder_delay: Duration,
}

impl LinkConfig {
    /// A link that takes no time and changes nothing: no latency, no
    /// serialisation delay, no loss, duplication, corruption, CE marks or
    /// reordering (the default frame size limit).
    pub fn ideal() -> LinkConfig {
        LinkConfig {
            latency: Duration::ZERO,
            bandwidth_bps: 0,
            impair: Impairments::default(),
            ..LinkConfig::default()
        }
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency: Duration::from_micros(2),
            bandwidth_bps: 100_000_000_000,
            max_frame: 9018,
            impair: Impairments::default(),
            reorder_delay: Duration::from_micros(5),
        }
    }
}

/// What a link did, for assertions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub ce_marked: u64,
    pub reordered: u64,
    pub too_big: u64,
    /// Dropped by `Sim::filter`.
    pub filtered: u64,
}

/// A frame on a link: (arrival time, sequence number, slot). Frames
/// arrive in (time, sequence) order.
type InFlight = (Instant, u64, usize);

/// Transmit buffers a link lends out before it copies frames instead.
const MAX_TX_BUFFERS: usize = 512;

struct Link {
    cfg: LinkConfig,
    /// `cfg.impair` as samplers, made when a frame is first sent after
    /// `cfg` may have changed (`None`).
    chances: Option<Chances>,
    busy_until: Instant,
    /// Frames in flight in arrival order, as long as each arrives no
    /// earlier than the one queued before it (the common case: a link
    /// without reordering or jitter is a FIFO).
    fifo: VecDeque<InFlight>,
    /// Frames that overtake frames already queued (reordered, duplicated,
    /// or sent after the latency was lowered).
    queue: BinaryHeap<Reverse<InFlight>>,
    /// Frame buffers. A node writes its frame straight into a transmit
    /// buffer (`MAX_FRAME_LEN` long), which travels as is while fewer than
    /// `MAX_TX_BUFFERS` are in use; beyond that (a link that queues up
    /// millions of frames) a frame is copied into a buffer of its own size.
    frames: Vec<Vec<u8>>,
    /// The length of the frame in each slot.
    lens: Vec<usize>,
    /// Which slots are transmit buffers.
    tx_buffer: Vec<bool>,
    tx_buffers: usize,
    free_tx: Vec<usize>,
    free: Vec<usize>,
    seq: u64,
    stats: LinkStats,
}

impl Link {
    fn new(cfg: LinkConfig) -> Link {
        Link {
            cfg,
            chances: None,
            busy_until: Instant::ZERO,
            fifo: VecDeque::new(),
            queue: BinaryHeap::new(),
            frames: Vec::new(),
            lens: Vec::new(),
            tx_buffer: Vec::new(),
            tx_buffers: 0,
            free_tx: Vec::new(),
            free: Vec::new(),
            seq: 0,
            stats: LinkStats::default(),
        }
    }

    /// A free transmit buffer.
    fn alloc_tx(&mut self) -> usize {
        self.free_tx.pop().unwrap_or_else(|| {
            self.frames.push(vec![0; MAX_FRAME_LEN]);
            self.lens.push(0);
            self.tx_buffer.push(true);
            self.tx_buffers += 1;
            self.frames.len() - 1
        })
    }

    /// A slot holding a copy of `frame`.
    fn alloc_copy(&mut self, frame: &[u8]) -> usize {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.frames.push(Vec::new());
            self.lens.push(0);
            self.tx_buffer.push(false);
            self.frames.len() - 1
        });
        self.frames[slot].clear();
        self.frames[slot].extend_from_slice(frame);
        slot
    }

    /// A copy of the first `len` bytes of `slot` in a slot of its own.
    fn copy_slot(&mut self, slot: usize, len: usize) -> usize {
        let f = std::mem::take(&mut self.frames[slot]);
        let copy = self.alloc_copy(&f[..len]);
        self.frames[slot] = f;
        copy
    }

    fn release(&mut self, slot: usize) {
        if self.tx_buffer[slot] {
            self.free_tx.push(slot);
        } else {
            self.free.push(slot);
        }
    }

    /// Queues the first `len` bytes of `slot` to arrive at `at`.
    fn enqueue_slot(&mut self, at: Instant, slot: usize, len: usize) {
        self.seq += 1;
        self.lens[slot] = len;
        let e = (at, self.seq, slot);
        match self.fifo.back() {
            Some(b) if b.0 > at => self.queue.push(Reverse(e)),
            _ => self.fifo.push_back(e),
        }
    }

    fn enqueue(&mut self, at: Instant, frame: &[u8]) {
        let slot = self.alloc_copy(frame);
        self.enqueue_slot(at, slot, frame.len());
    }

    /// Puts the frame a node wrote into `slot` (`len` bytes) on the link,
    /// or frees the slot if the link drops it.
    fn send(&mut self, now: Instant, slot: usize, len: usize, rng: &mut SmallRng) {
        let c = *self
            .chances
            .get_or_insert_with(|| Chances::new(&self.cfg.impair));
        self.stats.sent += 1;
        if len > self.cfg.max_frame {
            self.stats.too_big += 1;
            self.release(slot);
            return;
        }
        let start = now.max(self.busy_until);
        // bandwidth 0: infinitely fast
        let tx = Duration::from_nanos(
            ((len as u64 + 24) * 8 * 1_000_000_000)
                .checked_div(self.cfg.bandwidth_bps)
                .unwrap_or(0),
        );
        self.busy_until = start + tx;
        let fate = c.apply(&mut self.frames[slot][..len], rng);
        if fate.lost {
            self.stats.lost += 1;
            self.release(slot);
            return;
        }
        self.stats.corrupted += fate.corrupted as u64;
        self.stats.ce_marked += fate.ce_marked as u64;
        let mut at = self.busy_until + self.cfg.latency;
        if fate.reordered {
            self.stats.reordered += 1;
            at = at + self.cfg.reorder_delay;
        }
        if fate.duplicated {
            self.stats.duplicated += 1;
            let dup_at = at + Duration::from_nanos(rng.gen_range(0..2000));
            let dup = self.copy_slot(slot, len);
            self.enqueue_slot(dup_at, dup, len);
        }
        if self.tx_buffer[slot] && self.tx_buffers - self.free_tx.len() > MAX_TX_BUFFERS {
            let copy = self.copy_slot(slot, len);
            self.free_tx.push(slot);
            self.enqueue_slot(at, copy, len);
        } else {
            self.enqueue_slot(at, slot, len);
        }
    }

    /// The frame that arrives next: the earlier of the FIFO's head and the
    /// heap's top.
    fn peek(&self) -> Option<InFlight> {
        match (self.fifo.front(), self.queue.peek()) {
            (Some(&f), Some(&Reverse(h))) => Some(if (h.0, h.1) < (f.0, f.1) { h } else { f }),
            (Some(&f), None) => Some(f),
            (None, Some(&Reverse(h))) => Some(h),
            (None, None) => None,
        }
    }

    /// Takes the frame `peek` returned.
    fn pop(&mut self, e: InFlight) {
        if self.fifo.front() == Some(&e) {
            self.fifo.pop_front();
        } else {
            self.queue.pop();
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.peek().map(|e| e.0)
    }
}

/// A frame seen on a link: (time, direction 0 = a→b / 1 = b→a, bytes).
pub type Tap = Box<dyn FnMut(Instant, usize, &[u8])>;

/// Decides whether a frame a node sends goes onto the link: (direction,
/// bytes) → `true` to pass it on, `false` to drop it. Runs after the tap and
/// before the link's own seeded impairments, so a test can drop exactly the
/// frame it means to (one-shot drops, drops by opcode or PSN).
pub type Filter = Box<dyn FnMut(usize, &[u8]) -> bool>;

/// Two RNICs, the two links between them, and each node's loopback: a
/// frame a node sends to its own address ([`Rnic::is_to_self`], two QPs of
/// one device) travels on link `2 + node` back to the same node, with that
/// link's latency and impairments, as the engine loops it back.
pub struct Sim {
    pub now: Instant,
    pub nodes: [Rnic; 2],
    /// a→b, b→a, a→a, b→b.
    links: [Link; 4],
    rng: SmallRng,
    /// Sees every frame a node sends (before the link's impairments).
    pub tap: Option<Tap>,
    /// Drops the frames it returns `false` for (after the tap).
    pub filter: Option<Filter>,
}

impl Sim {
    pub fn new(a: Rnic, b: Rnic, link: LinkConfig, seed: u64) -> Sim {
        Sim::with_links(a, b, [link, link], seed)
    }

    /// Node `i`'s loopback link starts as a copy of its link to the other
    /// node (`links[i]`).
    pub fn with_links(a: Rnic, b: Rnic, links: [LinkConfig; 2], seed: u64) -> Sim {
        Sim {
            now: Instant::ZERO,
            nodes: [a, b],
            links: [
                Link::new(links[0]),
                Link::new(links[1]),
                Link::new(links[0]),
                Link::new(links[1]),
            ],
            rng: SmallRng::seed_from_u64(seed),
            tap: None,
            filter: None,
        }
    }

    /// Puts `frame` on link `dir` (0: a→b, 1: b→a, 2: a→a, 3: b→b) as if its
    /// sender had sent it now, without
    /// the tap, the filter or the link's impairments: it arrives after the
    /// link's latency. For replaying a captured frame (a late duplicate).
    pub fn inject(&mut self, dir: usize, frame: &[u8]) {
        let at = self.now + self.links[dir].cfg.latency;
        self.links[dir].stats.sent += 1;
        self.links[dir].enqueue(at, frame);
    }

    /// Link `dir`: 0 a→b, 1 b→a, 2 a's loopback, 3 b's.
    pub fn link_stats(&self, dir: usize) -> LinkStats {
        self.links[dir].stats
    }

    pub fn link_config_mut(&mut self, dir: usize) -> &mut LinkConfig {
        // the caller may change the chances: sample them afresh
        self.links[dir].chances = None;
        &mut self.links[dir].cfg
    }

    /// One round: every node sends what it has, the links deliver what is
    /// due, due timers fire. Returns whether anything happened.
    pub fn step(&mut self) -> bool {
        let mut busy = false;
        for i in 0..2 {
            let (wire, loops) = self.links.split_at_mut(2);
            let (link, looped) = (&mut wire[i], &mut loops[i]);
            loop {
                // the node writes its frame straight into a link buffer
                let slot = link.alloc_tx();
                let Some(n) = self.nodes[i].poll_transmit(self.now, &mut link.frames[slot]) else {
                    link.free_tx.push(slot);
                    break;
                };
                busy = true;
                if let Some(tap) = self.tap.as_mut() {
                    tap(self.now, i, &link.frames[slot][..n]);
                }
                let to_self = self.nodes[i].is_to_self(&link.frames[slot][..n]);
                if let Some(filter) = self.filter.as_mut() {
                    if !filter(i, &link.frames[slot][..n]) {
                        let l = if to_self { &mut *looped } else { &mut *link };
                        l.stats.sent += 1;
                        l.stats.filtered += 1;
                        link.free_tx.push(slot);
                        continue;
                    }
                }
                if to_self {
                    let copy = looped.alloc_copy(&link.frames[slot][..n]);
                    link.free_tx.push(slot);
                    looped.send(self.now, copy, n, &mut self.rng);
                } else {
                    link.send(self.now, slot, n, &mut self.rng);
                }
            }
        }
        for (i, link) in self.links.iter_mut().enumerate() {
            // a→b reaches b, b→a reaches a, each loopback its own node
            let to = [1, 0, 0, 1][i];
            while let Some(e @ (t, _, slot)) = link.peek() {
                if t > self.now {
                    break;
                }
                link.pop(e);
                link.stats.delivered += 1;
                let len = link.lens[slot];
                self.nodes[to].handle_frame(self.now, &link.frames[slot][..len]);
                link.release(slot);
                busy = true;
            }
        }
        for n in self.nodes.iter_mut() {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
                busy = true;
            }
        }
        busy
    }

    /// The next time anything is due, if anything is.
    pub fn next_event(&self) -> Option<Instant> {
        let arrivals = self.links.iter().filter_map(|l| l.next_arrival());
        let timers = self.nodes.iter().filter_map(|n| n.poll_timeout());
        arrivals.chain(timers).min()
    }

    /// Runs until `done` holds or nothing is left to happen or `limit` of
    /// virtual time passes. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.step() {
                continue;
            }
            match self.next_event() {
                Some(t) if t <= end => self.now = t.max(self.now),
                _ => return done(self),
            }
        }
    }
}

/// One side of a test connection: an RNIC with a PD, a CQ, a registered
/// buffer (the [`Endpoint`], whose fields read through: `side.lkey`) and a
/// QP.
pub struct Side {
    pub ep: Endpoint,
    pub qpn: u32,
    /// The node the side lives on (both on node 0 in a loopback pair).
    pub node: usize,
}

impl std::ops::Deref for Side {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.ep
    }
}

/// How to build a connected pair.
#[derive(Clone, Copy, Debug)]
pub struct PairConfig {
    pub qp_type: QpType,
    pub mtu: u32,
    pub mem_len: usize,
    pub link: LinkConfig,
    pub seed: u64,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub unlimited_retries: bool,
    pub ipv6: bool,
    pub sq_psn: [u32; 2],
    pub max_wr: u32,
    pub cq_len: usize,
    /// Both sides on node 0, talking through its loopback (link 2); node 1
    /// has no QP.
    pub loopback: bool,
    /// Congestion control of both nodes (DCQCN, CNPs, PFC).
    pub cc: nic::transport::CcConfig,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            qp_type: QpType::Rc,
            mtu: 1024,
            mem_len: 1 << 20,
            link: LinkConfig::default(),
            seed: 1,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            unlimited_retries: false,
            ipv6: false,
            sq_psn: [0x100, 0x200],
            max_wr: 4096,
            cq_len: 1 << 16,
            loopback: false,
            cc: nic::transport::CcConfig::default(),
        }
    }
}

/// A simulator with one connected QP on each node.
pub struct Pair {
    pub sim: Sim,
    pub sides: [Side; 2],
}

impl Pair {
    pub fn new(cfg: PairConfig) -> Pair {
        let mut rnics = Vec::new();
        let mut eps = Vec::new();
        for i in 0..2u8 {
            let (r, e) = Endpoint::create(i, cfg.ipv6, cfg.mem_len, cfg.cq_len, |rc| {
                rc.seed = cfg.seed.wrapping_add(i as u64);
                rc.unlimited_retries = cfg.unlimited_retries;
                rc.cc = cfg.cc;
                if cfg.link.bandwidth_bps > 0 {
                    rc.link_bps = cfg.link.bandwidth_bps;
                }
            });
            rnics.push(r);
            eps.push(e);
        }
        if cfg.loopback {
            // side 1: a second endpoint on node 0 (same MAC and GID)
            eps[1] = Endpoint::on(&mut rnics[0], 1, cfg.mem_len, cfg.cq_len);
        }
        let mut sides = Vec::new();
        for (i, e) in eps.into_iter().enumerate() {
            let node = if cfg.loopback { 0 } else { i };
            let qpn = rnics[node]
                .create_qp(QpInit {
                    qp_type: cfg.qp_type,
                    pd: e.pd,
                    send_cq: e.cq,
                    recv_cq: e.cq,
                    srq: None,
                    max_send_wr: cfg.max_wr,
                    max_recv_wr: cfg.max_wr,
                    sq_sig_all: false,
                })
                .expect("create qp");
            sides.push(Side { ep: e, qpn, node });
        }
        for i in 0..2 {
            let peer = &sides[1 - i];
            let ah = AhAttr::new(peer.gid, peer.mac);
            connect(
                &mut rnics[sides[i].node],
                sides[i].qpn,
                cfg,
                ah,
                peer.qpn,
                cfg.sq_psn[i],
                cfg.sq_psn[1 - i],
            );
        }
        let b = rnics.pop().expect("two");
        let a = rnics.pop().expect("two");
        let sides: [Side; 2] = sides.try_into().ok().expect("two");
        Pair {
            sim: Sim::new(a, b, cfg.link, cfg.seed ^ 0xA5A5),
            sides,
        }
    }

    /// The device side `i` lives on.
    pub fn node(&self, i: usize) -> &Rnic {
        &self.sim.nodes[self.sides[i].node]
    }

    pub fn node_mut(&mut self, i: usize) -> &mut Rnic {
        &mut self.sim.nodes[self.sides[i].node]
    }

    /// A second QP pair of type `cfg.qp_type` beside the pair's own, on the
    /// sides' PDs and CQs: side 0's QP has its own receive queue, side 1's
    /// takes its receives from `srq_b` when given; `depth` send and receive
    /// WRs each; connected both ways with side 0 sending from `sq_psn[0]`
    /// and side 1 from `sq_psn[1]`. Returns (side 0's QPN, side 1's).
    pub fn add_pair(&mut self, cfg: PairConfig, srq_b: Option<u32>, depth: u32) -> (u32, u32) {
        let mut qpns = [0u32; 2];
        for (i, srq) in [(0, None), (1, srq_b)] {
            let e = &self.sides[i].ep;
            qpns[i] = self.sim.nodes[self.sides[i].node]
                .create_qp(QpInit {
                    qp_type: cfg.qp_type,
                    pd: e.pd,
                    send_cq: e.cq,
                    recv_cq: e.cq,
                    srq,
                    max_send_wr: depth,
                    max_recv_wr: depth,
                    sq_sig_all: false,
                })
                .expect("create qp");
        }
        for i in 0..2 {
            let peer = &self.sides[1 - i].ep;
            let ah = AhAttr::new(peer.gid, peer.mac);
            connect(
                &mut self.sim.nodes[self.sides[i].node],
                qpns[i],
                cfg,
                ah,
                qpns[1 - i],
                cfg.sq_psn[i],
                cfg.sq_psn[1 - i],
            );
        }
        (qpns[0], qpns[1])
    }

    /// Drains completions of side `i`.
    pub fn poll(&mut self, i: usize) -> Vec<Wc> {
        let mut out = Vec::new();
        let cq = self.sides[i].cq;
        let _ = self.node_mut(i).poll_cq(cq, usize::MAX, &mut out);
        out
    }
}

/// Walks a QP through INIT, RTR and RTS with the pair's settings.
pub fn connect(
    r: &mut Rnic,
    qpn: u32,
    cfg: PairConfig,
    ah: AhAttr,
    dest_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
) {
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let ud = cfg.qp_type == QpType::Ud;
    let init = QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        access_flags: (!ud).then_some(all),
        qkey: ud.then_some(0x1111_1111),
        ..Default::default()
    };
    r.modify_qp(qpn, &init).expect("init");
    let rtr = match cfg.qp_type {
        QpType::Rc => QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(ah),
            path_mtu: Some(cfg.mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(cfg.max_rd_atomic),
            min_rnr_timer: Some(cfg.min_rnr_timer),
            ..Default::default()
        },
        QpType::Uc => QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(ah),
            path_mtu: Some(cfg.mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            ..Default::default()
        },
        QpType::Ud => QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        },
    };
    r.modify_qp(qpn, &rtr).expect("rtr");
    let rts = match cfg.qp_type {
        QpType::Rc => QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(cfg.timeout),
            retry_cnt: Some(cfg.retry_cnt),
            rnr_retry: Some(cfg.rnr_retry),
            max_rd_atomic: Some(cfg.max_rd_atomic),
            ..Default::default()
        },
        _ => QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..Default::default()
        },
    };
    r.modify_qp(qpn, &rts).expect("rts");
}
