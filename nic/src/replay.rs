//! Responder conformance by replay: feed the requests of a captured RC
//! connection to our responder, set up from what the capture shows, and
//! compare our responses with the capture's, field by field.
//!
//! Setup from the capture: the responder's address (IP, MAC), its peer's
//! QPN (the responses' destination QP), the first request PSN, the path MTU
//! (the largest payload seen, rounded up to an IB MTU), and one memory
//! region per R_Key used, covering every VA the requests name. Capture
//! R_Keys are mapped to ours. READ targets are pre-filled with the data the
//! capture's READ responses carry, and atomic targets with the value the
//! first atomic ACK returned, so that our responses must reproduce the
//! capture's data from the right offsets and our atomics the right
//! sequence of original values.
//!
//! The verdict covers only what the capture shows:
//! - Our responses are paired with the capture's by PSN, in order
//!   (`align`); each pair is compared field by field, a response on one
//!   side with no counterpart on the other is a difference.
//! - Except for our responses that come after the last response the
//!   capture holds for the connection when the capture stops before they
//!   were due: those are *after the end of the capture*, counted and
//!   listed apart. They are due within the slowest answer the capture
//!   shows on that connection (never less than `MIN_ANSWER_WINDOW`) after
//!   the connection's last request (`answers_due`).
//! - The memory check judges the bytes whose last WRITE the capture shows
//!   acknowledged (`check_writes`).

use crate::device::{Rnic, RnicConfig, MAX_FRAME_LEN};
use crate::time::Instant;
use crate::transport::QpInit;
use crate::verbs::{access, AhAttr, HeapMemory, Memory, QpAttr, QpState, RecvWr, Sgl, MTUS};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use wire::{Direction, Gid, Operation, Psn, RocePacket, RoceRepr, Syndrome, Transport};

/// The most memory the replay backs one capture R_Key with (it backs every
/// byte between the lowest and highest VA the requests name with it).
pub const SPAN_LIMIT: u64 = 256 << 20;

/// The least time a response is allowed after its connection's last
/// request before a capture that goes on without it shows it missing
/// (`answers_due`), in nanoseconds: 1 ms.
pub const MIN_ANSWER_WINDOW: u64 = 1_000_000;

/// How far ahead `align` looks for a PSN to pair up again after a
/// response that has no counterpart on the other side.
const RESYNC_WINDOW: usize = 64;

/// How many of the latest READ requests `slowest_answer` searches for the
/// one a READ response answers.
const READS_REMEMBERED: usize = 256;

/// One RC connection seen in a capture, responder side.
#[derive(Clone, Debug)]
pub struct ConnectionReport {
    pub responder: IpAddr,
    pub requester: IpAddr,
    pub udp_sport: u16,
    pub mtu: u32,
    pub requests: usize,
    /// Responses of the connection in the capture.
    pub expected: usize,
    /// Responses our responder sent.
    pub produced: usize,
    /// Our responses identical to the capture response they pair with.
    pub matched: usize,
    /// Responses that differ, each counted once: a pair that is not
    /// identical, a capture response ours has no counterpart for, or one
    /// of ours the capture has none for although it goes on past the point
    /// where it would appear.
    pub differed: usize,
    /// Our responses after the end of the capture, one line each:
    /// `our response N (OPCODE psn P)`. Not differences.
    pub after_end: Vec<String>,
    /// Bytes the memory check judged: their last WRITE is acknowledged in
    /// the capture.
    pub judged_bytes: usize,
    /// Bytes written by WRITEs the capture does not show acknowledged
    /// (last written by one), which the memory check leaves alone.
    pub unjudged_bytes: usize,
    /// Every difference, one line each (responses, memory, setup).
    pub mismatches: Vec<String>,
}

impl ConnectionReport {
    /// Nothing differed; responses after the end of the capture do not
    /// count against it.
    pub fn matches(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Feeds a prepared responder the requests (timestamp, frame) and returns
/// every frame it sent, in order.
pub type Driver<'a> = dyn FnMut(Rnic, Vec<(Instant, Vec<u8>)>) -> Vec<Vec<u8>> + 'a;

/// Drives the sans-I/O responder directly: one request in, its responses out.
pub fn drive_direct(mut rnic: Rnic, frames: Vec<(Instant, Vec<u8>)>) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let mut out = Vec::new();
    for (t, f) in frames {
        rnic.handle_frame(t, &f);
        while let Some(n) = rnic.poll_transmit(t, &mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

/// Drives the responder inside a polling engine fed by a pcap replay port,
/// one frame per turn as the capture had them one at a time.
pub fn drive_engine(rnic: Rnic, frames: Vec<(Instant, Vec<u8>)>) -> Vec<Vec<u8>> {
    use crate::engine::{Engine, EngineConfig};
    use crate::io::pcap::ReplayPort;
    let timed = frames
        .into_iter()
        .map(|(t, f)| (std::time::Duration::from_nanos(t.as_nanos()), f))
        .collect();
    let mac = rnic.config().mac;
    let port = ReplayPort::new(timed, mac, 0.0).one_per_turn();
    let (sent, done) = (port.sent(), port.done_flag());
    let engine = Engine::start(
        rnic,
        Box::new(port),
        EngineConfig {
            name: "replay".into(),
            ..Default::default()
        },
    );
    let t0 = std::time::Instant::now();
    while !done.load(std::sync::atomic::Ordering::Acquire)
        && t0.elapsed() < std::time::Duration::from_secs(30)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // the last responses leave in the turn after the last request
    let dev = engine.device();
    let _ = dev.call(|_| ());
    let _ = dev.call(|_| ());
    engine.stop();
    let out = sent.lock().expect("not poisoned").clone();
    out
}

/// Replays every RC connection found in `frames` (timestamp, bytes) into
/// the sans-I/O responder. Frames that are not RoCEv2 are ignored.
pub fn replay(frames: &[(Instant, Vec<u8>)]) -> Vec<ConnectionReport> {
    replay_with(frames, &mut drive_direct)
}

/// A RoCEv2 frame of the capture.
struct Seen<'a> {
    /// 1-based frame number in the capture.
    frame: usize,
    at: Instant,
    repr: RoceRepr<'a>,
    /// Whether its ICRC verifies.
    icrc_ok: bool,
}

/// Like `replay`, with the responder driven by `driver`.
pub fn replay_with(
    frames: &[(Instant, Vec<u8>)],
    driver: &mut Driver<'_>,
) -> Vec<ConnectionReport> {
    // Headers are parsed whatever the ICRC: a response with a bad one is
    // still compared (and differs); requests are replayed only with a
    // good one, as a responder drops the others.
    let parsed: Vec<Seen<'_>> = frames
        .iter()
        .enumerate()
        .filter_map(|(i, (t, f))| {
            let p = RocePacket::new_checked(f.as_slice()).ok()?;
            Some(Seen {
                frame: i + 1,
                at: *t,
                icrc_ok: p.verify_icrc().is_ok(),
                repr: RoceRepr::from_packet(&p),
            })
        })
        .collect();
    let end = frames
        .iter()
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(Instant::ZERO);
    // Connections: unordered address pair + UDP source port (Linux uses the
    // same source port in both directions of a connection).
    let mut roles: BTreeMap<(IpAddr, IpAddr, u16), ()> = BTreeMap::new();
    for s in &parsed {
        if s.icrc_ok && is_rc(&s.repr, Direction::Request) {
            let r = &s.repr;
            roles.insert((r.ip.dst(), r.ip.src(), r.udp.src_port), ());
        }
    }
    roles
        .keys()
        .map(|&(resp, req, sport)| replay_one(&parsed, end, resp, req, sport, driver))
        .collect()
}

fn is_rc(r: &RoceRepr<'_>, dir: Direction) -> bool {
    r.opcode_info()
        .is_some_and(|i| i.transport == Transport::Rc && i.direction == dir)
}

fn operation(r: &RoceRepr<'_>) -> Option<Operation> {
    r.opcode_info().map(|i| i.operation)
}

/// `OPCODE psn P`, to name a response.
fn describe(r: &RoceRepr<'_>) -> String {
    format!("{} psn {}", r.bth.opcode, r.bth.psn)
}

/// Packets of a READ of `len` bytes at path MTU `mtu`.
fn read_packets(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu.max(1)).max(1)
}

fn replay_one(
    parsed: &[Seen<'_>],
    end: Instant,
    resp_ip: IpAddr,
    req_ip: IpAddr,
    sport: u16,
    driver: &mut Driver<'_>,
) -> ConnectionReport {
    let in_conn = |r: &RoceRepr<'_>, src: IpAddr, dst: IpAddr| {
        r.ip.src() == src && r.ip.dst() == dst && r.udp.src_port == sport
    };
    let requests: Vec<&Seen<'_>> = parsed
        .iter()
        .filter(|s| {
            s.icrc_ok && in_conn(&s.repr, req_ip, resp_ip) && is_rc(&s.repr, Direction::Request)
        })
        .collect();
    let expected: Vec<&Seen<'_>> = parsed
        .iter()
        .filter(|s| in_conn(&s.repr, resp_ip, req_ip) && is_rc(&s.repr, Direction::Response))
        .collect();
    // The capture's responses whose ICRC verifies: what it shows of the
    // responder's memory and progress.
    let trusted: Vec<&Seen<'_>> = expected.iter().copied().filter(|s| s.icrc_ok).collect();
    let mut report = ConnectionReport {
        responder: resp_ip,
        requester: req_ip,
        udp_sport: sport,
        mtu: 0,
        requests: requests.len(),
        expected: expected.len(),
        produced: 0,
        matched: 0,
        differed: 0,
        after_end: Vec::new(),
        judged_bytes: 0,
        unjudged_bytes: 0,
        mismatches: Vec::new(),
    };
    let Some(first) = requests.first() else {
        return report;
    };
    let last_request = requests.iter().map(|s| s.at).max().unwrap_or(first.at);
    // The path MTU: the largest payload of a request or response, rounded up.
    let biggest = requests
        .iter()
        .chain(trusted.iter())
        .map(|s| s.repr.payload.len())
        .max()
        .unwrap_or(0);
    let mtu = MTUS
        .iter()
        .copied()
        .find(|&m| m as usize >= biggest)
        .unwrap_or(4096);
    report.mtu = mtu;
    let resp_mac = first.repr.eth.dst;
    let req_mac = first.repr.eth.src;
    // The requester's QPN: where our responses go (from the capture's
    // responses, or — with none whose ICRC verifies — from any frame the
    // responder sent on the connection). With none at all, the capture has
    // no response to compare a destination QP with, and any QPN serves.
    let peer_qpn = trusted
        .first()
        .map(|s| s.repr.bth.dest_qp)
        .or_else(|| {
            parsed
                .iter()
                .find(|s| in_conn(&s.repr, resp_ip, req_ip))
                .map(|s| s.repr.bth.dest_qp)
        })
        .unwrap_or(0);

    let mut rnic = Rnic::new(RnicConfig::new(resp_mac, Gid::from_ip(resp_ip)));
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(1 << 20);
    let qpn = match rnic.create_qp(QpInit {
        qp_type: wire::QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: 1 << 16,
        sq_sig_all: false,
    }) {
        Ok(q) => q,
        Err(e) => {
            report.mismatches.push(format!("setup: create the QP: {e}"));
            return report;
        }
    };
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let init = QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        access_flags: Some(all),
        ..Default::default()
    };
    let rtr = QpAttr {
        state: Some(QpState::Rtr),
        ah: Some(AhAttr::new(Gid::from_ip(req_ip), req_mac)),
        path_mtu: Some(mtu),
        dest_qpn: Some(peer_qpn),
        rq_psn: Some(first.repr.bth.psn.value()),
        max_dest_rd_atomic: Some(16),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    for (name, attr) in [("INIT", &init), ("RTR", &rtr)] {
        if let Err(e) = rnic.modify_qp(qpn, attr) {
            report
                .mismatches
                .push(format!("setup: move the QP to {name}: {e}"));
            return report;
        }
    }

    // Memory regions: one per capture R_Key, spanning every VA it is used with.
    let mut spans: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in &requests {
        let r = &s.repr;
        let (rkey, va, len) = match (r.ext.reth, r.ext.atomic) {
            (Some(x), _) => (x.rkey, x.va, x.dma_len as u64),
            (_, Some(a)) => (a.rkey, a.va, 8),
            _ => continue,
        };
        let e = spans.entry(rkey).or_insert((va, va.saturating_add(len)));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va.saturating_add(len));
    }
    let mut regions: HashMap<u32, (u32, u64, Arc<HeapMemory>)> = HashMap::new();
    let mut rkeys: Vec<_> = spans.into_iter().collect();
    rkeys.sort_unstable_by_key(|&(k, _)| k);
    for (rkey, (lo, hi)) in rkeys {
        let lo = lo & !7;
        // 8 bytes past the highest VA: room for an atomic's word
        let len = (hi - lo).max(8) + 8;
        if len > SPAN_LIMIT + 16 || lo.checked_add(len).is_none() {
            report.mismatches.push(format!(
                "setup: R_Key {rkey:#x} is used across {} MiB of addresses from {lo:#x}; the replay backs at most {} MiB",
                (hi - lo) >> 20,
                SPAN_LIMIT >> 20
            ));
            continue;
        }
        let mem = Arc::new(HeapMemory::new(len as usize));
        match rnic.reg_mr(pd, mem.clone() as Arc<dyn Memory>, 0, lo, len, all) {
            Ok((_, ours)) => {
                regions.insert(rkey, (ours, lo, mem));
            }
            Err(e) => report
                .mismatches
                .push(format!("setup: register R_Key {rkey:#x}'s memory: {e}")),
        }
    }
    prefill(&requests, &trusted, mtu, &regions);

    // Receive buffers for SENDs: one large buffer, reused.
    let recv_len = 1u64 << 20;
    let recv_mem = Arc::new(HeapMemory::new(recv_len as usize));
    let recv_lkey = match rnic.reg_mr(
        pd,
        recv_mem as Arc<dyn Memory>,
        0,
        0x7000_0000,
        recv_len,
        all,
    ) {
        Ok((lkey, _)) => lkey,
        Err(e) => {
            report
                .mismatches
                .push(format!("setup: register the receive buffer: {e}"));
            return report;
        }
    };

    // Receives up front for every message that consumes one (the
    // responder takes them in order): each SEND, and each RDMA WRITE
    // carrying immediate data (its LAST or ONLY packet consumes a receive
    // WQE, IBA 9.7.5.1.5).
    // Then the requests rewritten to our QPN and R_Keys.
    let mut frames = Vec::with_capacity(requests.len());
    let mut recv_id = 0u64;
    for s in &requests {
        let r = &s.repr;
        let Some(info) = r.opcode_info() else {
            continue;
        };
        let takes_receive = match info.operation {
            Operation::Send => info.position.is_start(),
            Operation::Write => info.has_immediate(),
            _ => false,
        };
        if takes_receive {
            recv_id += 1;
            let _ = rnic.post_recv(
                qpn,
                RecvWr {
                    wr_id: recv_id,
                    sgl: Sgl::single(0x7000_0000, recv_len as u32, recv_lkey),
                },
            );
        }
        let mut req = *r;
        req.bth.dest_qp = qpn;
        if let Some(x) = req.ext.reth.as_mut() {
            if let Some((k, _, _)) = regions.get(&x.rkey) {
                x.rkey = *k;
            }
        }
        if let Some(a) = req.ext.atomic.as_mut() {
            if let Some((k, _, _)) = regions.get(&a.rkey) {
                a.rkey = *k;
            }
        }
        let mut frame = vec![0u8; req.buffer_len()];
        match req.emit(&mut frame) {
            Ok(n) => {
                frame.truncate(n);
                frames.push((s.at, frame));
            }
            Err(e) => report.mismatches.push(format!(
                "setup: frame {}: cannot re-emit the request: {e}",
                s.frame
            )),
        }
    }
    let produced = driver(rnic, frames);
    check_writes(&requests, &trusted, &regions, &mut report);
    report.produced = produced.len();

    let mut ours: Vec<(usize, RoceRepr<'_>)> = Vec::with_capacity(produced.len());
    for (k, f) in produced.iter().enumerate() {
        match RoceRepr::parse(f) {
            Ok(o) => ours.push((k + 1, o)),
            Err(e) => {
                report.differed += 1;
                report
                    .mismatches
                    .push(format!("our response {}: does not parse: {e}", k + 1));
            }
        }
    }
    let due = answers_due(&requests, &trusted, last_request, mtu);
    let ours_psn: Vec<Psn> = ours.iter().map(|(_, o)| o.bth.psn).collect();
    let theirs_psn: Vec<Psn> = expected.iter().map(|s| s.repr.bth.psn).collect();
    for step in align(&ours_psn, &theirs_psn) {
        match step {
            Step::Pair(i, j) => {
                let before = report.mismatches.len();
                compare(&ours[i].1, expected[j], &mut report.mismatches);
                if report.mismatches.len() == before {
                    report.matched += 1;
                } else {
                    report.differed += 1;
                }
            }
            Step::Theirs(j) => {
                report.differed += 1;
                report.mismatches.push(format!(
                    "frame {} ({}): ours sent no such response",
                    expected[j].frame,
                    describe(&expected[j].repr)
                ));
            }
            Step::Ours(i) => {
                report.differed += 1;
                let (k, o) = &ours[i];
                report.mismatches.push(format!(
                    "our response {k} ({}): the capture has no such response",
                    describe(o)
                ));
            }
            Step::OursAfterLast(i) => {
                let (k, o) = &ours[i];
                if end.as_nanos() <= due {
                    report
                        .after_end
                        .push(format!("our response {k} ({})", describe(o)));
                } else {
                    report.differed += 1;
                    report.mismatches.push(format!(
                        "our response {k} ({}): the capture has no such response, and goes on {} us past when it was due",
                        describe(o),
                        (end.as_nanos() - due) / 1000
                    ));
                }
            }
        }
    }
    report
}

/// When, in nanoseconds, the responder owes the capture the answer to the
/// connection's last request (at `last_request`): the slowest answer the
/// capture shows on the connection, or `MIN_ANSWER_WINDOW` if longer,
/// after that request. A responder answers the requests of a connection
/// in the order they arrive (IBA 9.7.5: responses go back in PSN order),
/// so every response after the last one the capture holds is due by then
/// at the latest; a capture whose last frame comes no later stops before
/// it could show them.
fn answers_due(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    last_request: Instant,
    mtu: u32,
) -> u64 {
    let window = slowest_answer(requests, responses, mtu).max(MIN_ANSWER_WINDOW);
    last_request.as_nanos().saturating_add(window)
}

/// The longest time, in nanoseconds, between a request and a capture
/// response answering it (0 if none pairs up). A response answers the
/// latest request before it with its PSN, or for a READ response, the
/// latest READ request whose PSN range holds its PSN.
fn slowest_answer(requests: &[&Seen<'_>], responses: &[&Seen<'_>], mtu: u32) -> u64 {
    let mut by_psn: HashMap<Psn, Instant> = HashMap::new();
    let mut reads: VecDeque<(Psn, u32, Instant)> = VecDeque::new();
    let mut pending = requests.iter().peekable();
    let mut slowest = 0u64;
    for r in responses {
        while let Some(q) = pending.next_if(|q| q.frame < r.frame) {
            by_psn.insert(q.repr.bth.psn, q.at);
            if let (Some(Operation::ReadRequest), Some(reth)) =
                (operation(&q.repr), q.repr.ext.reth)
            {
                reads.push_back((q.repr.bth.psn, read_packets(reth.dma_len, mtu), q.at));
                if reads.len() > READS_REMEMBERED {
                    reads.pop_front();
                }
            }
        }
        let psn = r.repr.bth.psn;
        let asked = match operation(&r.repr) {
            Some(Operation::ReadResponse) => reads
                .iter()
                .rev()
                .find(|(first, n, _)| psn.in_window(*first, *n))
                .map(|&(_, _, at)| at),
            _ => by_psn.get(&psn).copied(),
        };
        if let Some(at) = asked {
            slowest = slowest.max(r.at.as_nanos().saturating_sub(at.as_nanos()));
        }
    }
    slowest
}

/// One step of pairing our responses with the capture's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Ours `i` and the capture's `j` are compared.
    Pair(usize, usize),
    /// Ours `i` has no counterpart, and a pair follows it.
    Ours(usize),
    /// Ours `i` has no counterpart and comes after every capture response.
    OursAfterLast(usize),
    /// The capture's `j` has no counterpart.
    Theirs(usize),
}

/// Pairs two response sequences by PSN, keeping each in order. Equal PSNs
/// pair. Otherwise the side whose PSN shows up next on the other side
/// (within `RESYNC_WINDOW`) has responses the other lacks; if neither
/// does, the two are paired anyway and compared (a response with a wrong
/// PSN). What is left of ours once the capture's run out comes after the
/// capture's last response.
fn align(ours: &[Psn], theirs: &[Psn]) -> Vec<Step> {
    let mut steps = Vec::with_capacity(ours.len().max(theirs.len()));
    let (mut i, mut j) = (0, 0);
    while i < ours.len() && j < theirs.len() {
        if ours[i] == theirs[j] {
            steps.push(Step::Pair(i, j));
            i += 1;
            j += 1;
            continue;
        }
        let ahead = |seq: &[Psn], from: usize, psn: Psn| {
            (1..RESYNC_WINDOW).find(|&d| seq.get(from + d) == Some(&psn))
        };
        match (ahead(theirs, j, ours[i]), ahead(ours, i, theirs[j])) {
            (Some(d), e) if e.is_none_or(|e| d <= e) => {
                steps.extend((j..j + d).map(Step::Theirs));
                j += d;
            }
            (_, Some(e)) => {
                steps.extend((i..i + e).map(Step::Ours));
                i += e;
            }
            _ => {
                steps.push(Step::Pair(i, j));
                i += 1;
                j += 1;
            }
        }
    }
    steps.extend((j..theirs.len()).map(Step::Theirs));
    steps.extend((i..ours.len()).map(Step::OursAfterLast));
    steps
}

/// READ targets get the data the capture's READ responses carry; atomic
/// targets the value the first atomic ACK at that address returned.
fn prefill(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    mtu: u32,
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
) {
    for s in requests.iter().rev() {
        let r = &s.repr;
        match operation(r) {
            Some(Operation::ReadRequest) => {
                let Some(reth) = r.ext.reth else { continue };
                let Some((_, lo, mem)) = regions.get(&reth.rkey) else {
                    continue;
                };
                let npkts = read_packets(reth.dma_len, mtu);
                for resp in responses.iter().map(|x| &x.repr).filter(|x| {
                    x.bth.psn.in_window(r.bth.psn, npkts)
                        && operation(x) == Some(Operation::ReadResponse)
                }) {
                    let off = r.bth.psn.distance_to(resp.bth.psn) as u64 * mtu as u64;
                    let Some(at) = reth
                        .va
                        .checked_add(off)
                        .and_then(|va| va.checked_sub(*lo))
                        .and_then(|at| usize::try_from(at).ok())
                    else {
                        continue;
                    };
                    if at.saturating_add(resp.payload.len()) <= mem.len() {
                        mem.write(at, resp.payload);
                    }
                }
            }
            Some(Operation::CompareSwap | Operation::FetchAdd) => {
                // iterate from the last request back so the first one wins
                let Some(a) = r.ext.atomic else { continue };
                let Some((_, lo, mem)) = regions.get(&a.rkey) else {
                    continue;
                };
                let ack = responses
                    .iter()
                    .find(|x| x.repr.bth.psn == r.bth.psn && x.repr.ext.atomic_ack.is_some());
                let at =
                    a.va.checked_sub(*lo)
                        .and_then(|at| usize::try_from(at).ok());
                if let (Some(orig), Some(at)) = (ack.and_then(|x| x.repr.ext.atomic_ack), at) {
                    if at.saturating_add(8) <= mem.len() {
                        mem.write(at, &orig.to_ne_bytes());
                    }
                }
            }
            _ => {}
        }
    }
}

/// Compares our response with the capture's, one line per field that
/// differs.
fn compare(ours: &RoceRepr<'_>, theirs: &Seen<'_>, out: &mut Vec<String>) {
    let name = format!("frame {} ({})", theirs.frame, describe(&theirs.repr));
    let theirs_icrc = theirs.icrc_ok;
    let theirs = &theirs.repr;
    let mut diff = |field: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}: {field}: ours {a}, capture {b}"));
        }
    };
    diff(
        "opcode",
        ours.bth.opcode.to_string(),
        theirs.bth.opcode.to_string(),
    );
    diff("psn", ours.bth.psn.to_string(), theirs.bth.psn.to_string());
    diff(
        "dest_qp",
        format!("{:#x}", ours.bth.dest_qp),
        format!("{:#x}", theirs.bth.dest_qp),
    );
    diff(
        "aeth.syndrome",
        format!("{:?}", ours.ext.aeth.map(|a| a.syndrome)),
        format!("{:?}", theirs.ext.aeth.map(|a| a.syndrome)),
    );
    diff(
        "aeth.msn",
        format!("{:?}", ours.ext.aeth.map(|a| a.msn)),
        format!("{:?}", theirs.ext.aeth.map(|a| a.msn)),
    );
    diff(
        "atomic_ack",
        format!("{:?}", ours.ext.atomic_ack),
        format!("{:?}", theirs.ext.atomic_ack),
    );
    diff(
        "payload length",
        ours.payload.len().to_string(),
        theirs.payload.len().to_string(),
    );
    // ours always carries a good ICRC
    diff(
        "icrc",
        "valid".into(),
        if theirs_icrc { "valid" } else { "invalid" }.into(),
    );
    if let Some(k) = ours
        .payload
        .iter()
        .zip(theirs.payload)
        .position(|(a, b)| a != b)
    {
        out.push(format!("{name}: payload bytes differ from byte {k}"));
    }
}

/// The first PSN a capture response does not acknowledge, if it
/// acknowledges any: an ACK acknowledges its PSN and every one before
/// (IBA 9.7.5.2: coalesced ACKs), a NAK or RNR NAK every PSN before its
/// own (IBA 9.7.5.2.2), and a READ response or atomic ACK the PSNs before
/// its own, as the requester's completer takes them (implied ACKs).
fn acknowledged_until(r: &RoceRepr<'_>) -> Option<Psn> {
    match operation(r)? {
        Operation::Acknowledge => match r.ext.aeth?.syndrome {
            Syndrome::Ack { .. } => Some(r.bth.psn.next()),
            Syndrome::RnrNak { .. } | Syndrome::Nak(_) => Some(r.bth.psn),
            Syndrome::Reserved(_) => None,
        },
        Operation::ReadResponse | Operation::AtomicAcknowledge => Some(r.bth.psn),
        _ => None,
    }
}

/// For each request, whether a capture response after it acknowledges it.
fn acknowledged(requests: &[&Seen<'_>], responses: &[&Seen<'_>]) -> Vec<bool> {
    let mut out = vec![false; requests.len()];
    // the furthest PSN acknowledged by the responses after the request
    let mut until: Option<Psn> = None;
    let mut later = responses.iter().rev().peekable();
    for (k, q) in requests.iter().enumerate().rev() {
        while let Some(r) = later.next_if(|r| r.frame > q.frame) {
            if let Some(p) = acknowledged_until(&r.repr) {
                if until.is_none_or(|u| u.before(p)) {
                    until = Some(p);
                }
            }
        }
        out[k] = until.is_some_and(|u| q.repr.bth.psn.before(u));
    }
    out
}

/// After the replay, every byte a WRITE put down holds what the last WRITE
/// to it carried — judged for the bytes whose last WRITE packet the
/// capture shows acknowledged. Bytes last written by a packet it does not
/// (the capture ends before its ACK, or the responder refused it) are
/// counted, not judged.
fn check_writes(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
    report: &mut ConnectionReport,
) {
    let acked = acknowledged(requests, responses);
    // (rkey, va) -> (byte, acknowledged), in request order so later
    // writes win
    let mut expect: BTreeMap<(u32, u64), (u8, bool)> = BTreeMap::new();
    let mut cursor: Option<(u32, u64)> = None;
    for (s, &ack) in requests.iter().zip(&acked) {
        let r = &s.repr;
        if operation(r) != Some(Operation::Write) {
            continue;
        }
        if let Some(reth) = r.ext.reth {
            cursor = Some((reth.rkey, reth.va));
        }
        let Some((rkey, va)) = cursor else { continue };
        for (i, b) in r.payload.iter().enumerate() {
            if let Some(at) = va.checked_add(i as u64) {
                expect.insert((rkey, at), (*b, ack));
            }
        }
        cursor = va
            .checked_add(r.payload.len() as u64)
            .map(|next| (rkey, next));
    }
    let mut wrong = 0usize;
    for (&(rkey, va), &(b, ack)) in &expect {
        if !ack {
            report.unjudged_bytes += 1;
            continue;
        }
        report.judged_bytes += 1;
        let Some((_, lo, mem)) = regions.get(&rkey) else {
            continue;
        };
        let Some(at) = va
            .checked_sub(*lo)
            .and_then(|at| usize::try_from(at).ok())
            .filter(|&at| at < mem.len())
        else {
            continue;
        };
        let mut got = [0u8];
        mem.read(at, &mut got);
        if got[0] != b {
            wrong += 1;
        }
    }
    if wrong > 0 {
        report.mismatches.push(format!(
            "memory: {wrong} of {} written bytes differ after the replay",
            report.judged_bytes
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn psns(v: &[u32]) -> Vec<Psn> {
        v.iter().map(|&p| Psn::new(p)).collect()
    }

    #[test]
    fn align_pairs_equal_psns_and_names_what_is_missing() {
        use Step::*;
        let a = |o: &[u32], t: &[u32]| align(&psns(o), &psns(t));
        assert_eq!(
            a(&[1, 2, 3], &[1, 2, 3]),
            [Pair(0, 0), Pair(1, 1), Pair(2, 2)]
        );
        // the capture lacks ours 1 in the middle, then runs out before 4
        assert_eq!(
            a(&[1, 2, 3, 4], &[1, 3]),
            [Pair(0, 0), Ours(1), Pair(2, 1), OursAfterLast(3)]
        );
        // ours lacks the capture's 2
        assert_eq!(a(&[1, 3], &[1, 2, 3]), [Pair(0, 0), Theirs(1), Pair(1, 2)]);
        // a wrong PSN is compared with the capture's response in its place
        assert_eq!(
            a(&[1, 9, 3], &[1, 2, 3]),
            [Pair(0, 0), Pair(1, 1), Pair(2, 2)]
        );
        // repeated PSNs (a duplicate answered again) pair in order, across
        // the 24-bit wrap
        assert_eq!(
            a(&[0xFF_FFFF, 0, 0, 1], &[0xFF_FFFF, 0, 0]),
            [Pair(0, 0), Pair(1, 1), Pair(2, 2), OursAfterLast(3)]
        );
        assert_eq!(a(&[], &[5]), [Theirs(0)]);
        assert_eq!(a(&[5], &[]), [OursAfterLast(0)]);
    }
}
