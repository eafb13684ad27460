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

use crate::time::Instant;
use crate::transport::{QpInit, Rnic, RnicConfig, MAX_FRAME_LEN};
use crate::verbs::{access, AhAttr, HeapMemory, Memory, QpAttr, QpState, RecvWr, Sgl, MTUS};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use wire::{Direction, Gid, Operation, RoceRepr, Transport};

/// One RC connection seen in a capture, responder side.
#[derive(Clone, Debug)]
pub struct ConnectionReport {
    pub responder: IpAddr,
    pub requester: IpAddr,
    pub udp_sport: u16,
    pub mtu: u32,
    pub requests: usize,
    pub expected: usize,
    pub produced: usize,
    /// Every difference, one line each: `response N: field: ours X, capture Y`.
    pub mismatches: Vec<String>,
}

impl ConnectionReport {
    pub fn matches(&self) -> bool {
        self.mismatches.is_empty() && self.expected == self.produced
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

/// Like `replay`, with the responder driven by `driver`.
pub fn replay_with(
    frames: &[(Instant, Vec<u8>)],
    driver: &mut Driver<'_>,
) -> Vec<ConnectionReport> {
    let parsed: Vec<(Instant, RoceRepr<'_>)> = frames
        .iter()
        .filter_map(|(t, f)| RoceRepr::parse(f).ok().map(|r| (*t, r)))
        .collect();
    // Connections: unordered address pair + UDP source port (Linux uses the
    // same source port in both directions of a connection).
    let mut roles: BTreeMap<(IpAddr, IpAddr, u16), ()> = BTreeMap::new();
    for (_, r) in &parsed {
        let Some(info) = r.opcode_info() else {
            continue;
        };
        if info.transport == Transport::Rc && info.direction == Direction::Request {
            roles.insert((r.ip.dst(), r.ip.src(), r.udp.src_port), ());
        }
    }
    roles
        .keys()
        .map(|&(resp, req, sport)| replay_one(&parsed, resp, req, sport, driver))
        .collect()
}

fn is_rc(r: &RoceRepr<'_>, dir: Direction) -> bool {
    r.opcode_info()
        .is_some_and(|i| i.transport == Transport::Rc && i.direction == dir)
}

fn replay_one(
    parsed: &[(Instant, RoceRepr<'_>)],
    resp_ip: IpAddr,
    req_ip: IpAddr,
    sport: u16,
    driver: &mut Driver<'_>,
) -> ConnectionReport {
    let in_conn = |r: &RoceRepr<'_>, src: IpAddr, dst: IpAddr| {
        r.ip.src() == src && r.ip.dst() == dst && r.udp.src_port == sport
    };
    let requests: Vec<&(Instant, RoceRepr<'_>)> = parsed
        .iter()
        .filter(|(_, r)| in_conn(r, req_ip, resp_ip) && is_rc(r, Direction::Request))
        .collect();
    let expected: Vec<&RoceRepr<'_>> = parsed
        .iter()
        .map(|(_, r)| r)
        .filter(|r| in_conn(r, resp_ip, req_ip) && is_rc(r, Direction::Response))
        .collect();
    let mut report = ConnectionReport {
        responder: resp_ip,
        requester: req_ip,
        udp_sport: sport,
        mtu: 0,
        requests: requests.len(),
        expected: expected.len(),
        produced: 0,
        mismatches: Vec::new(),
    };
    let Some((_, first)) = requests.first() else {
        return report;
    };
    // The path MTU: the largest payload of a request or response, rounded up.
    let biggest = requests
        .iter()
        .map(|(_, r)| r.payload.len())
        .chain(expected.iter().map(|r| r.payload.len()))
        .max();
    let mtu = MTUS
        .iter()
        .copied()
        .find(|&m| m as usize >= biggest.unwrap_or(0))
        .unwrap_or(4096);
    report.mtu = mtu;
    let resp_mac = first.eth.dst;
    let req_mac = first.eth.src;
    // The requester's QPN: where our responses go (from the capture's
    // responses, or — with none — from the other direction's requests).
    let peer_qpn = expected.first().map(|r| r.bth.dest_qp).or_else(|| {
        parsed
            .iter()
            .map(|(_, r)| r)
            .find(|r| in_conn(r, resp_ip, req_ip))
            .map(|r| r.bth.dest_qp)
    });
    let Some(peer_qpn) = peer_qpn else {
        report
            .mismatches
            .push("cannot tell the requester's QPN".into());
        return report;
    };

    let mut rnic = Rnic::new(RnicConfig::new(resp_mac, Gid::from_ip(resp_ip)));
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(1 << 20);
    let qpn = rnic
        .create_qp(QpInit {
            qp_type: wire::QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 16,
            max_recv_wr: 1 << 16,
            sq_sig_all: false,
        })
        .expect("fresh device");
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
        rq_psn: Some(first.bth.psn.value()),
        max_dest_rd_atomic: Some(16),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    rnic.modify_qp(qpn, &init).expect("init");
    rnic.modify_qp(qpn, &rtr).expect("rtr");

    // Memory regions: one per capture R_Key, spanning every VA it is used with.
    let mut spans: HashMap<u32, (u64, u64)> = HashMap::new();
    for (_, r) in &requests {
        let (rkey, va, len) = match (r.ext.reth, r.ext.atomic) {
            (Some(x), _) => (x.rkey, x.va, x.dma_len as u64),
            (_, Some(a)) => (a.rkey, a.va, 8),
            _ => continue,
        };
        let e = spans.entry(rkey).or_insert((va, va + len));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va + len);
    }
    let mut regions: HashMap<u32, (u32, u64, Arc<HeapMemory>)> = HashMap::new();
    for (&rkey, &(lo, hi)) in &spans {
        let lo = lo & !7;
        let mem = Arc::new(HeapMemory::new((hi - lo).max(8) as usize + 8));
        let (_, ours) = rnic
            .reg_mr(
                pd,
                mem.clone() as Arc<dyn Memory>,
                0,
                lo,
                (hi - lo).max(8) + 8,
                all,
            )
            .expect("register");
        regions.insert(rkey, (ours, lo, mem));
    }
    prefill(&requests, &expected, mtu, &regions);

    // Receive buffers for SENDs: one large buffer, reused.
    let recv_len = 1u64 << 20;
    let recv_mem = Arc::new(HeapMemory::new(recv_len as usize));
    let (recv_lkey, _) = rnic
        .reg_mr(
            pd,
            recv_mem as Arc<dyn Memory>,
            0,
            0x7000_0000,
            recv_len,
            all,
        )
        .expect("register");

    // Receives for every SEND up front (the responder takes them in order),
    // then the requests rewritten to our QPN and R_Keys.
    let mut frames = Vec::with_capacity(requests.len());
    let mut frame = vec![0u8; MAX_FRAME_LEN];
    let mut recv_id = 0u64;
    for (t, r) in &requests {
        let info = r.opcode_info().expect("parsed");
        if info.operation == Operation::Send && info.position.is_start() {
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
        let n = req.emit(&mut frame).expect("re-emit a parsed request");
        frames.push((*t, frame[..n].to_vec()));
    }
    let produced = driver(rnic, frames);
    check_writes(&requests, &regions, &mut report.mismatches);
    report.produced = produced.len();
    for (i, (ours, theirs)) in produced.iter().zip(expected.iter()).enumerate() {
        let ours = match RoceRepr::parse(ours) {
            Ok(o) => o,
            Err(e) => {
                report
                    .mismatches
                    .push(format!("response {i}: ours does not parse: {e}"));
                continue;
            }
        };
        compare(i, &ours, theirs, &mut report.mismatches);
    }
    if report.produced != report.expected {
        report.mismatches.push(format!(
            "response count: ours {}, capture {}",
            report.produced, report.expected
        ));
    }
    report
}

/// READ targets get the data the capture's READ responses carry; atomic
/// targets the value the first atomic ACK at that address returned.
fn prefill(
    requests: &[&(Instant, RoceRepr<'_>)],
    expected: &[&RoceRepr<'_>],
    mtu: u32,
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
) {
    for (_, r) in requests.iter().rev() {
        let info = r.opcode_info().expect("parsed");
        match info.operation {
            Operation::ReadRequest => {
                let Some(reth) = r.ext.reth else { continue };
                let Some((_, lo, mem)) = regions.get(&reth.rkey) else {
                    continue;
                };
                let npkts = (reth.dma_len as u64).div_ceil(mtu as u64).max(1) as u32;
                for resp in expected
                    .iter()
                    .filter(|x| x.bth.psn.in_window(r.bth.psn, npkts))
                {
                    let off = r.bth.psn.distance_to(resp.bth.psn) as u64 * mtu as u64;
                    let at = (reth.va + off - lo) as usize;
                    if at + resp.payload.len() <= mem.len()
                        && resp
                            .opcode_info()
                            .is_some_and(|i| i.operation == Operation::ReadResponse)
                    {
                        mem.write(at, resp.payload);
                    }
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // iterate from the last request back so the first one wins
                let Some(a) = r.ext.atomic else { continue };
                let Some((_, lo, mem)) = regions.get(&a.rkey) else {
                    continue;
                };
                let ack = expected
                    .iter()
                    .find(|x| x.bth.psn == r.bth.psn && x.ext.atomic_ack.is_some());
                if let Some(orig) = ack.and_then(|x| x.ext.atomic_ack) {
                    mem.write((a.va - lo) as usize, &orig.to_ne_bytes());
                }
            }
            _ => {}
        }
    }
}

fn compare(i: usize, ours: &RoceRepr<'_>, theirs: &RoceRepr<'_>, out: &mut Vec<String>) {
    let mut diff = |field: &str, a: String, b: String| {
        if a != b {
            out.push(format!("response {i}: {field}: ours {a}, capture {b}"));
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
    if ours.payload != theirs.payload {
        out.push(format!("response {i}: payload bytes differ"));
    }
}

/// After the replay, every byte a WRITE put down holds what the last WRITE
/// to it carried.
fn check_writes(
    requests: &[&(Instant, RoceRepr<'_>)],
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
    out: &mut Vec<String>,
) {
    // (rkey, va) -> byte, in request order so later writes win
    let mut expect: BTreeMap<(u32, u64), u8> = BTreeMap::new();
    let mut cursor: Option<(u32, u64)> = None;
    for (_, r) in requests {
        let info = r.opcode_info().expect("parsed");
        if info.operation != Operation::Write {
            continue;
        }
        if let Some(reth) = r.ext.reth {
            cursor = Some((reth.rkey, reth.va));
        }
        let Some((rkey, va)) = cursor else { continue };
        for (i, b) in r.payload.iter().enumerate() {
            expect.insert((rkey, va + i as u64), *b);
        }
        cursor = Some((rkey, va + r.payload.len() as u64));
    }
    let mut wrong = 0usize;
    for (&(rkey, va), &b) in &expect {
        let Some((_, lo, mem)) = regions.get(&rkey) else {
            continue;
        };
        let mut got = [0u8];
        mem.read((va - lo) as usize, &mut got);
        if got[0] != b {
            wrong += 1;
        }
    }
    if wrong > 0 {
        out.push(format!(
            "memory: {wrong} of {} written bytes differ after the replay",
            expect.len()
        ));
    }
}
