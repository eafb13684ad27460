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
//!   capture holds for the connection when the capture shows nothing the
//!   responder's address sent after they were due: those are *after the
//!   end of the capture*, counted and listed apart. They are due within
//!   the slowest answer the capture shows on that connection (never less
//!   than `MIN_ANSWER_WINDOW`) after the connection's last request
//!   (`answers_due`). Only the responder's own frames (RoCE or not) show
//!   that the capture still saw it: a requester retrying into a responder
//!   that went silent (its QP destroyed, its process gone) goes on
//!   sending, and says nothing of what the responder owed.
//! - The memory check judges the bytes whose last WRITE the capture shows
//!   acknowledged (`check_writes`).

mod judge;
mod setup;

use crate::device::{Rnic, RnicConfig, MAX_FRAME_LEN};
use crate::time::Instant;
use crate::transport::QpInit;
use crate::verbs::{access, AhAttr, HeapMemory, Memory, QpAttr, QpState, RecvWr, Sgl, MTUS};
use judge::*;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use wire::sniff::Peek;
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
    let last_sent = last_sent_by(frames);
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
        .map(|&(resp, req, sport)| {
            let end = last_sent.get(&resp).copied().unwrap_or(Instant::ZERO);
            let key = ConnKey {
                resp_ip: resp,
                req_ip: req,
                sport,
            };
            replay_one(&parsed, end, key, driver)
        })
        .collect()
}

/// When each IP address sent its last frame in the capture: any frame
/// with that IP source, RoCE or not (a program's TCP teardown shows its
/// host still on the wire as well as an ACK does).
fn last_sent_by(frames: &[(Instant, Vec<u8>)]) -> HashMap<IpAddr, Instant> {
    let mut last: HashMap<IpAddr, Instant> = HashMap::new();
    for (t, f) in frames {
        if let Peek::Ip { src, .. } | Peek::Fragment { src, .. } = wire::sniff::peek(f) {
            let e = last.entry(src).or_insert(*t);
            *e = (*e).max(*t);
        }
    }
    last
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

/// One connection of the capture: its responder and requester addresses
/// and the UDP source port its frames use.
#[derive(Clone, Copy)]
struct ConnKey {
    resp_ip: IpAddr,
    req_ip: IpAddr,
    sport: u16,
}

impl ConnKey {
    /// `r` goes from `src` to `dst` on this connection.
    fn carries(&self, r: &RoceRepr<'_>, src: IpAddr, dst: IpAddr) -> bool {
        r.ip.src() == src && r.ip.dst() == dst && r.udp.src_port == self.sport
    }

    /// Requester to responder.
    fn forward(&self, r: &RoceRepr<'_>) -> bool {
        self.carries(r, self.req_ip, self.resp_ip)
    }

    /// Responder to requester.
    fn backward(&self, r: &RoceRepr<'_>) -> bool {
        self.carries(r, self.resp_ip, self.req_ip)
    }
}

/// The frames of one connection the replay works from.
struct Frames<'s, 'a> {
    /// RC requests whose ICRC verifies (a responder drops the others).
    requests: Vec<&'s Seen<'a>>,
    /// Every RC response, whatever its ICRC.
    expected: Vec<&'s Seen<'a>>,
    /// The responses whose ICRC verifies: what the capture shows of the
    /// responder's memory and progress.
    trusted: Vec<&'s Seen<'a>>,
}

impl<'s, 'a> Frames<'s, 'a> {
    fn of(parsed: &'s [Seen<'a>], key: ConnKey) -> Self {
        let requests: Vec<_> = parsed
            .iter()
            .filter(|s| s.icrc_ok && key.forward(&s.repr) && is_rc(&s.repr, Direction::Request))
            .collect();
        let expected: Vec<_> = parsed
            .iter()
            .filter(|s| key.backward(&s.repr) && is_rc(&s.repr, Direction::Response))
            .collect();
        let trusted = expected.iter().copied().filter(|s| s.icrc_ok).collect();
        Frames {
            requests,
            expected,
            trusted,
        }
    }

    /// What the capture shows of the path; `None` without a request.
    fn path(&self, parsed: &[Seen<'_>], key: ConnKey) -> Option<setup::Path> {
        let first = self.requests.first()?;
        // The path MTU: the largest payload of a request or response, rounded up.
        let biggest = self
            .requests
            .iter()
            .chain(self.trusted.iter())
            .map(|s| s.repr.payload.len())
            .max()
            .unwrap_or(0);
        let mtu = MTUS
            .iter()
            .copied()
            .find(|&m| m as usize >= biggest)
            .unwrap_or(4096);
        // The requester's QPN: where our responses go (from the capture's
        // responses, or — with none whose ICRC verifies — from any frame the
        // responder sent on the connection). With none at all, the capture has
        // no response to compare a destination QP with, and any QPN serves.
        let peer_qpn = self
            .trusted
            .first()
            .map(|s| s.repr.bth.dest_qp)
            .or_else(|| {
                parsed
                    .iter()
                    .find(|s| key.backward(&s.repr))
                    .map(|s| s.repr.bth.dest_qp)
            })
            .unwrap_or(0);
        Some(setup::Path {
            resp_ip: key.resp_ip,
            req_ip: key.req_ip,
            resp_mac: first.repr.eth.dst,
            req_mac: first.repr.eth.src,
            mtu,
            peer_qpn,
            first_psn: first.repr.bth.psn,
        })
    }
}

/// Replays one connection; `end` is when the responder's address sent its
/// last frame in the capture.
fn replay_one(
    parsed: &[Seen<'_>],
    end: Instant,
    key: ConnKey,
    driver: &mut Driver<'_>,
) -> ConnectionReport {
    let frames = Frames::of(parsed, key);
    let mut report = ConnectionReport {
        responder: key.resp_ip,
        requester: key.req_ip,
        udp_sport: key.sport,
        mtu: 0,
        requests: frames.requests.len(),
        expected: frames.expected.len(),
        produced: 0,
        matched: 0,
        differed: 0,
        after_end: Vec::new(),
        judged_bytes: 0,
        unjudged_bytes: 0,
        mismatches: Vec::new(),
    };
    let Some(path) = frames.path(parsed, key) else {
        return report;
    };
    report.mtu = path.mtu;
    let Some(mut resp) = setup::create_qp(&path, &mut report.mismatches) else {
        return report;
    };
    let regions = setup::register_regions(&mut resp, &frames.requests, &mut report.mismatches);
    prefill(&frames.requests, &frames.trusted, path.mtu, &regions);
    let Some(requests) = setup::request_frames(
        &mut resp,
        &frames.requests,
        &regions,
        &mut report.mismatches,
    ) else {
        return report;
    };
    let produced = driver(resp.rnic, requests);
    check_writes(&frames.requests, &frames.trusted, &regions, &mut report);
    report.produced = produced.len();
    // `path` found a request, so there is a latest one
    let last_request = frames.requests.iter().map(|s| s.at).max();
    let last_request = last_request.unwrap_or(Instant::ZERO);
    let due = answers_due(&frames.requests, &frames.trusted, last_request, path.mtu);
    judge_responses(&produced, &frames.expected, end, due, &mut report);
    report
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
