//! # fabric — N hosts around one switch, at packet level, on a virtual clock
//!
//! A deterministic discrete-event simulator for congestion and flow control:
//! every host has one full-duplex link to one switch port; the switch has an
//! output queue per egress port (eight strict-priority classes sharing a
//! finite buffer), RED/ECN marking (Kmin, Kmax, Pmax with seeded
//! randomness), drops when the buffer is full, and optionally PFC generation
//! towards the hosts whose traffic fills it (per ingress port and priority,
//! XOFF/XON thresholds).
//!
//! Flows are modelled at packet level, not with the full RC transport: a
//! flow sends MTU-sized data packets (ECT(0), DSCP from [`Qos`](nic::cc::Qos)) paced by a
//! [`Pacer`] at its [`ReactionPoint`]'s rate; the receiving host runs a
//! notification point per flow ([`CnpLimiter`]) and answers CE marks with
//! CNPs over the reverse path (DSCP 48, priority 6, served before data).
//! Hosts obey PFC frames with a [`PfcRx`]. The cc pieces are the same code
//! the transport uses; the full transport (`Rnic`) is wired to them
//! separately.
//!
//! Frame sizes from the wire crate's header lengths: data = payload + 62
//! bytes (Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4), CNP 78 bytes,
//! PFC 64 bytes (a test pins the figures); every frame also takes
//! 20 bytes of preamble and inter-frame gap on the wire. Switching is
//! store-and-forward. RED marks at dequeue, with the queue length the packet
//! saw. Nothing reads a clock or an OS random source: the same
//! configuration and seed give the same run, bit for bit.
//!
//! `config.rs` holds the configuration, the frame sizes and what a run
//! records; this file the simulator (the switch, its queues and the hosts
//! share one event queue).

mod config;
#[cfg(test)]
mod tests;

pub use config::*;

use nic::cc::{
    ecn, CcCounters, CnpLimiter, NpCounters, Pacer, PfcCounters, PfcRx, PfcTx, PfcTxParams,
    ReactionPoint, PRIORITIES,
};
use nic::Instant;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Write};
use std::time::Duration;
use wire::{EthernetAddress, MacControl, MacControlRepr};

#[derive(Clone, Copy, Debug)]
struct Pkt {
    kind: FrameKind,
    frame: u64,
    payload: u64,
    prio: u8,
    ecn: u8,
    dst: usize,
    ingress: usize,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    ToSwitch { port: usize, pkt: Pkt },
    ToHost { host: usize, pkt: Pkt },
    HostWake(usize),
    PortWake(usize),
    Sample,
}

struct Entry {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Entry) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Entry) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Earliest first out of the max-heap; ties in insertion order.
    fn cmp(&self, o: &Entry) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// SplitMix64: a small, portable, seeded generator (the same numbers on
/// every platform and `rand` version).
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Flow {
    spec: FlowSpec,
    prio: u8,
    rp: ReactionPoint,
    pacer: Pacer,
    sent: u64,
    delivered: u64,
    sampled: u64,
    /// The receiver's NP state for this flow (its QP).
    np: CnpLimiter,
}

struct Host {
    busy_until: Instant,
    wake_at: Option<Instant>,
    ctrl: VecDeque<Pkt>,
    pfc_rx: PfcRx,
    np: NpCounters,
    flows: Vec<usize>,
    rr: usize,
}

struct Port {
    queues: [VecDeque<Pkt>; PRIORITIES],
    ctrl: VecDeque<Pkt>,
    queued: u64,
    max_queued: u64,
    busy_until: Instant,
    wake_at: Option<Instant>,
    /// Pauses the host on this port sent us.
    pfc_rx: PfcRx,
    /// Bytes in the switch that arrived on this port, per priority.
    ingress: [u64; PRIORITIES],
    /// Pauses we send to the host on this port.
    pfc_tx: Option<PfcTx>,
}

/// The simulator. Build it with [`Fabric::new`], run it with
/// [`Fabric::run_until`], read its counters and samples.
pub struct Fabric {
    cfg: FabricConfig,
    now: Instant,
    seq: u64,
    heap: BinaryHeap<Entry>,
    flows: Vec<Flow>,
    hosts: Vec<Host>,
    ports: Vec<Port>,
    rng: SplitMix64,
    drops: u64,
    marks: u64,
    samples: Vec<Sample>,
    emitted_pfc: Vec<(Instant, usize, MacControlRepr)>,
    tx_log: Vec<TxRecord>,
}

impl Fabric {
    /// A fabric running `flows`. Flows whose hosts do not exist are ignored.
    pub fn new(cfg: FabricConfig, flows: &[FlowSpec]) -> Fabric {
        let n = cfg.hosts;
        let mut hosts: Vec<Host> = (0..n)
            .map(|_| Host {
                busy_until: Instant::ZERO,
                wake_at: None,
                ctrl: VecDeque::new(),
                pfc_rx: PfcRx::new(cfg.link_bps),
                np: NpCounters::default(),
                flows: Vec::new(),
                rr: 0,
            })
            .collect();
        let ports = (0..n)
            .map(|_| Port {
                queues: Default::default(),
                ctrl: VecDeque::new(),
                queued: 0,
                max_queued: 0,
                busy_until: Instant::ZERO,
                wake_at: None,
                pfc_rx: PfcRx::new(cfg.link_bps),
                ingress: [0; PRIORITIES],
                pfc_tx: cfg.switch.pfc.map(|p| {
                    PfcTx::new(PfcTxParams {
                        quanta: p.quanta,
                        ..PfcTxParams::new(cfg.link_bps, p.xoff_bytes, p.xon_bytes)
                    })
                }),
            })
            .collect();
        let mut fl = Vec::new();
        for spec in flows
            .iter()
            .filter(|s| s.src < n && s.dst < n && s.src != s.dst)
        {
            let dscp = spec.dscp.unwrap_or(cfg.qos.data_dscp) & 63;
            let mut rp = ReactionPoint::new(cfg.dcqcn.unwrap_or_default(), cfg.link_bps);
            rp.set_enabled(cfg.dcqcn.is_some());
            hosts[spec.src].flows.push(fl.len());
            fl.push(Flow {
                spec: *spec,
                prio: cfg.qos.priority(None, dscp),
                rp,
                pacer: Pacer::new(),
                sent: 0,
                delivered: 0,
                sampled: 0,
                np: CnpLimiter::new(),
            });
        }
        let mut f = Fabric {
            rng: SplitMix64(cfg.seed),
            cfg,
            now: Instant::ZERO,
            seq: 0,
            heap: BinaryHeap::new(),
            flows: fl,
            hosts,
            ports,
            drops: 0,
            marks: 0,
            samples: Vec::new(),
            emitted_pfc: Vec::new(),
            tx_log: Vec::new(),
        };
        for i in 0..f.flows.len() {
            let (h, at) = (f.flows[i].spec.src, f.flows[i].spec.start);
            f.wake_host(h, at);
        }
        if !cfg.sample_every.is_zero() {
            f.push(Instant::ZERO, Ev::Sample);
        }
        f
    }

    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn ser(&self, frame: u64) -> Duration {
        let bits = (frame + WIRE_EXTRA) as u128 * 8 * 1_000_000_000;
        Duration::from_nanos(bits.div_ceil(self.cfg.link_bps.max(1) as u128) as u64)
    }

    fn wake_host(&mut self, h: usize, at: Instant) {
        let at = at.max(self.now);
        if !matches!(self.hosts[h].wake_at, Some(w) if w <= at) {
            self.hosts[h].wake_at = Some(at);
            self.push(at, Ev::HostWake(h));
        }
    }

    fn wake_port(&mut self, p: usize, at: Instant) {
        let at = at.max(self.now);
        if !matches!(self.ports[p].wake_at, Some(w) if w <= at) {
            self.ports[p].wake_at = Some(at);
            self.push(at, Ev::PortWake(p));
        }
    }

    /// Delivers `control` (a PFC or PAUSE frame from the switch) to `host`
    /// at `at`, as if it had just come off the wire.
    pub fn inject_mac_control(&mut self, at: Instant, host: usize, control: MacControl) {
        let pkt = Pkt {
            kind: FrameKind::Pfc(control),
            frame: PFC_FRAME,
            payload: 0,
            prio: 7,
            ecn: ecn::NOT_ECT,
            dst: host,
            ingress: host,
        };
        self.push(at.max(self.now), Ev::ToHost { host, pkt });
    }

    /// Runs every event up to and including `end`.
    pub fn run_until(&mut self, end: Instant) {
        while let Some(e) = self.heap.peek() {
            if e.at > end {
                break;
            }
            let e = self.heap.pop().expect("peeked");
            self.now = e.at;
            match e.ev {
                Ev::ToSwitch { port, pkt } => self.switch_rx(port, pkt),
                Ev::ToHost { host, pkt } => self.host_rx(host, pkt),
                Ev::HostWake(h) => {
                    if self.hosts[h].wake_at == Some(self.now) {
                        self.hosts[h].wake_at = None;
                        self.host_service(h);
                    }
                }
                Ev::PortWake(p) => {
                    if self.ports[p].wake_at == Some(self.now) {
                        self.ports[p].wake_at = None;
                        self.port_service(p);
                    }
                }
                Ev::Sample => self.sample(),
            }
        }
        self.now = self.now.max(end);
    }

    // ---- hosts ----------------------------------------------------------

    fn host_service(&mut self, h: usize) {
        let now = self.now;
        self.hosts[h].pfc_rx.handle_timeout(now);
        for k in 0..self.hosts[h].flows.len() {
            let f = self.hosts[h].flows[k];
            self.flows[f].rp.handle_timeout(now);
        }
        if self.hosts[h].busy_until > now {
            let t = self.hosts[h].busy_until;
            self.wake_host(h, t);
            return;
        }
        let pkt = self.host_pick(h, now);
        if let Some(pkt) = pkt {
            let until = now + self.ser(pkt.frame);
            self.hosts[h].busy_until = until;
            if self.cfg.trace_tx {
                self.tx_log.push(TxRecord {
                    at: now,
                    host: h,
                    prio: pkt.prio,
                    kind: pkt.kind,
                    until,
                });
            }
            self.push(until + self.cfg.prop_delay, Ev::ToSwitch { port: h, pkt });
            self.wake_host(h, until);
            return;
        }
        // Nothing may start now: wake when something could.
        let host = &self.hosts[h];
        let mut next = host.pfc_rx.poll_timeout();
        for &f in &host.flows {
            let fl = &self.flows[f];
            if fl.sent >= fl.spec.bytes {
                continue;
            }
            let t = if fl.spec.start > now {
                fl.spec.start
            } else if let Some(u) = host.pfc_rx.paused_until(fl.prio, now) {
                u
            } else {
                fl.pacer.next_send()
            };
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        }
        if let Some(t) = next {
            self.wake_host(h, t);
        }
    }

    fn host_pick(&mut self, h: usize, now: Instant) -> Option<Pkt> {
        let host = &mut self.hosts[h];
        if let Some(c) = host.ctrl.front() {
            if !host.pfc_rx.is_paused(c.prio, now) {
                return host.ctrl.pop_front();
            }
        }
        let n = host.flows.len();
        for k in 0..n {
            let idx = (host.rr + k) % n;
            let f = host.flows[idx];
            let fl = &mut self.flows[f];
            if fl.spec.start > now
                || fl.sent >= fl.spec.bytes
                || host.pfc_rx.is_paused(fl.prio, now)
                || !fl.pacer.ready(now)
            {
                continue;
            }
            host.rr = idx + 1;
            let payload = self.cfg.payload_bytes.min(fl.spec.bytes - fl.sent);
            let frame = payload + DATA_OVERHEAD;
            fl.pacer.on_send(now, frame + WIRE_EXTRA, fl.rp.rate_bps());
            fl.rp.on_sent(now, frame);
            fl.sent += payload;
            return Some(Pkt {
                kind: FrameKind::Data { flow: f },
                frame,
                payload,
                prio: fl.prio,
                ecn: self.cfg.qos.data_ecn,
                dst: fl.spec.dst,
                ingress: h,
            });
        }
        None
    }

    fn host_rx(&mut self, h: usize, pkt: Pkt) {
        let now = self.now;
        match pkt.kind {
            FrameKind::Data { flow } => {
                let fl = &mut self.flows[flow];
                fl.delivered += pkt.payload;
                let host = &mut self.hosts[h];
                if fl.np.on_packet(now, pkt.ecn, &self.cfg.np, &mut host.np) {
                    let prio = self.cfg.qos.priority(None, self.cfg.np.cnp_dscp);
                    host.ctrl.push_back(Pkt {
                        kind: FrameKind::Cnp { flow },
                        frame: CNP_FRAME,
                        payload: 0,
                        prio,
                        ecn: ecn::NOT_ECT,
                        dst: fl.spec.src,
                        ingress: h,
                    });
                    self.host_service(h);
                }
            }
            FrameKind::Cnp { flow } => {
                let rp = &mut self.flows[flow].rp;
                rp.handle_timeout(now);
                rp.handle_cnp(now);
            }
            FrameKind::Pfc(mc) => {
                self.hosts[h].pfc_rx.handle(now, &mc);
                self.host_service(h);
            }
        }
    }

    // ---- switch ---------------------------------------------------------

    fn switch_rx(&mut self, i: usize, mut pkt: Pkt) {
        if let FrameKind::Pfc(mc) = pkt.kind {
            self.ports[i].pfc_rx.handle(self.now, &mc);
            self.port_service(i);
            return;
        }
        let e = pkt.dst;
        let port = &mut self.ports[e];
        if port.queued + pkt.frame > self.cfg.switch.buffer_bytes {
            self.drops += 1;
            return;
        }
        pkt.ingress = i;
        port.queued += pkt.frame;
        port.max_queued = port.max_queued.max(port.queued);
        port.queues[pkt.prio as usize & 7].push_back(pkt);
        self.ingress_change(i, pkt.prio, pkt.frame as i64);
        self.port_service(e);
    }

    /// Ingress accounting of port `i`, and the PFC it triggers.
    fn ingress_change(&mut self, i: usize, prio: u8, delta: i64) {
        let now = self.now;
        let port = &mut self.ports[i];
        let b = &mut port.ingress[prio as usize & 7];
        *b = b.saturating_add_signed(delta);
        let backlog = *b;
        if let Some(tx) = &mut port.pfc_tx {
            tx.on_backlog(prio, backlog);
            if tx.pending() {
                self.wake_port(i, now);
            }
        }
    }

    fn port_service(&mut self, e: usize) {
        let now = self.now;
        let mac = EthernetAddress([0x02, 0x53, 0x57, 0, 0, e as u8]);
        let port = &mut self.ports[e];
        port.pfc_rx.handle_timeout(now);
        if let Some(tx) = &mut port.pfc_tx {
            while let Some(mc) = tx.poll_transmit(now) {
                port.ctrl.push_back(Pkt {
                    kind: FrameKind::Pfc(mc),
                    frame: PFC_FRAME,
                    payload: 0,
                    prio: 7,
                    ecn: ecn::NOT_ECT,
                    dst: e,
                    ingress: e,
                });
                self.emitted_pfc.push((
                    now,
                    e,
                    MacControlRepr {
                        src: mac,
                        dst: EthernetAddress::MAC_CONTROL,
                        control: mc,
                    },
                ));
            }
        }
        if port.busy_until > now {
            let t = port.busy_until;
            self.wake_port(e, t);
            return;
        }
        let mut pkt = port.ctrl.pop_front();
        if pkt.is_none() {
            for p in (0..PRIORITIES).rev() {
                if !port.queues[p].is_empty() && !port.pfc_rx.is_paused(p as u8, now) {
                    pkt = port.queues[p].pop_front();
                    break;
                }
            }
            if let Some(q) = &mut pkt {
                let seen = port.queued;
                port.queued -= q.frame;
                if let (Some(red), FrameKind::Data { .. }) = (self.cfg.switch.red, q.kind) {
                    if ecn::is_ect(q.ecn)
                        && q.ecn != ecn::CE
                        && self.rng.next_f64() < red.probability(seen)
                    {
                        q.ecn = ecn::CE;
                        self.marks += 1;
                    }
                }
                let (ing, prio, frame) = (q.ingress, q.prio, q.frame);
                self.ingress_change(ing, prio, -(frame as i64));
            }
        }
        if let Some(q) = pkt {
            let until = now + self.ser(q.frame);
            self.ports[e].busy_until = until;
            self.push(until + self.cfg.prop_delay, Ev::ToHost { host: e, pkt: q });
            self.wake_port(e, until);
            return;
        }
        let port = &self.ports[e];
        let mut next = port.pfc_tx.as_ref().and_then(|t| t.poll_timeout());
        if port.queues.iter().any(|q| !q.is_empty()) {
            if let Some(t) = port.pfc_rx.poll_timeout() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        if let Some(t) = next {
            self.wake_port(e, t);
        }
    }

    // ---- observation ------------------------------------------------------

    fn sample(&mut self) {
        let now = self.now;
        let dt = self.cfg.sample_every.as_secs_f64();
        let mut rate_bps = Vec::with_capacity(self.flows.len());
        let mut goodput_bps = Vec::with_capacity(self.flows.len());
        for f in &mut self.flows {
            f.rp.handle_timeout(now);
            rate_bps.push(f.rp.rate_bps());
            let d = f.delivered - f.sampled;
            f.sampled = f.delivered;
            goodput_bps.push(if now == Instant::ZERO {
                0.0
            } else {
                d as f64 * 8.0 / dt
            });
        }
        let queue_bytes = self.ports.iter().map(|p| p.queued).collect();
        self.samples.push(Sample {
            at: now,
            rate_bps,
            goodput_bps,
            queue_bytes,
        });
        let next = now + self.cfg.sample_every;
        self.push(next, Ev::Sample);
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Payload delivered to flow `f`'s receiver so far.
    pub fn delivered(&self, f: usize) -> u64 {
        self.flows[f].delivered
    }

    /// Payload flow `f` has sent so far.
    pub fn sent(&self, f: usize) -> u64 {
        self.flows[f].sent
    }

    /// Flow `f`'s reaction point.
    pub fn reaction_point(&self, f: usize) -> &ReactionPoint {
        &self.flows[f].rp
    }

    /// Frames the switch dropped (buffer full).
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Packets the switch marked CE.
    pub fn ce_marked(&self) -> u64 {
        self.marks
    }

    /// Bytes queued at switch port `p` now.
    pub fn queue_bytes(&self, p: usize) -> u64 {
        self.ports[p].queued
    }

    /// The most bytes ever queued at switch port `p`.
    pub fn max_queue_bytes(&self, p: usize) -> u64 {
        self.ports[p].max_queued
    }

    /// The cc counters of host `h`: its NP, the RPs of the flows it sends,
    /// the PFC frames it received.
    pub fn host_counters(&self, h: usize) -> CcCounters {
        let host = &self.hosts[h];
        let mut c = CcCounters {
            np: host.np.clone(),
            pfc: host.pfc_rx.counters(self.now),
            ..Default::default()
        };
        for &f in &host.flows {
            c.rp.add(self.flows[f].rp.counters());
        }
        c
    }

    /// The PFC counters of switch port `p` (tx: pauses it sent to its host).
    pub fn switch_pfc_counters(&self, p: usize) -> PfcCounters {
        let port = &self.ports[p];
        let mut c = port.pfc_rx.counters(self.now);
        if let Some(tx) = &port.pfc_tx {
            c.add(&tx.counters(self.now));
        }
        c
    }

    /// Every PFC frame the switch generated: (time, port, frame).
    pub fn emitted_pfc(&self) -> &[(Instant, usize, MacControlRepr)] {
        &self.emitted_pfc
    }

    /// Frames hosts started, when `trace_tx` is on.
    pub fn tx_log(&self) -> &[TxRecord] {
        &self.tx_log
    }

    /// The samples as CSV: `time_us`, then per flow `flow{i}_rate_gbps`,
    /// `flow{i}_goodput_gbps`, then per port `port{p}_queue_kb`.
    pub fn write_csv(&self, mut w: impl Write) -> io::Result<()> {
        write!(w, "time_us")?;
        for i in 0..self.flows.len() {
            write!(w, ",flow{i}_rate_gbps,flow{i}_goodput_gbps")?;
        }
        for p in 0..self.ports.len() {
            write!(w, ",port{p}_queue_kb")?;
        }
        writeln!(w)?;
        for s in &self.samples {
            write!(w, "{:.1}", s.at.as_nanos() as f64 / 1e3)?;
            for (r, g) in s.rate_bps.iter().zip(&s.goodput_bps) {
                write!(w, ",{:.4},{:.4}", *r as f64 / 1e9, g / 1e9)?;
            }
            for q in &s.queue_bytes {
                write!(w, ",{:.3}", *q as f64 / 1e3)?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}
