//! The in-process loopback: two soft RNICs built from the real transport,
//! facing each other with nothing between them, driven from one thread.
//! What one sends in a turn, the other receives in the same turn; time is
//! virtual and jumps to the next timer when nothing else is left to do, so
//! nothing waits on a wire and what a wall clock measures around an
//! operation is the software path itself: post → requester → frame → ICRC
//! → responder → ACK → completion.
//!
//! This is product code (`rnic demo`, `rnic perf --loopback`), built on
//! `nic`'s public API only. It models no link: latency, bandwidth and
//! impairments are the `sim` crate's, which the tests use and the product
//! never depends on. QPs come up as every other command brings them up
//! ([`crate::qp`]).

use crate::qp::{self, Connect, QpError};
use nic::device::{Endpoint, Rnic, MAX_FRAME_LEN};
use nic::verbs::{AhAttr, QpState, QpType, Wc};
use nic::Instant;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the output header says about the loopback.
pub const LOOPBACK_NOTE: &str =
    "in-process loopback: both NICs in one thread; wall-clock time of the software path";

/// One node: a device's PD, CQ and region ([`Endpoint`], whose fields
/// read through: `node.lkey`) and its name.
pub struct Node {
    pub name: String,
    pub ep: Endpoint,
}

impl std::ops::Deref for Node {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.ep
    }
}

impl Node {
    /// Node `i` ([`Endpoint::create`]): a CQ of 65536 entries, `mem_len`
    /// bytes, the device's seed 0x5eed + `i`.
    fn create(i: u8, mem_len: usize) -> (Rnic, Node) {
        let (r, ep) = Endpoint::create(i, false, mem_len, 1 << 16, |cfg| {
            cfg.seed = 0x5eed + i as u64;
        });
        let node = Node {
            name: format!("srnic{i}"),
            ep,
        };
        (r, node)
    }
}

/// A connected QP pair: `qpn[i]` lives on node `i`.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub qpn: [u32; 2],
    pub qp_type: QpType,
}

/// The two RNICs on their virtual clock, and the frames each sent in the
/// current turn.
pub struct BackToBack {
    pub now: Instant,
    pub nodes: [Rnic; 2],
    sent: [Sent; 2],
}

/// Frames one node sent in a turn, in buffers kept from turn to turn.
#[derive(Default)]
struct Sent {
    bufs: Vec<Box<[u8]>>,
    /// The length of each frame sent (`lens.len()` frames, in `bufs`).
    lens: Vec<usize>,
}

impl BackToBack {
    /// One turn: every node sends what it has (each frame shown to `see`
    /// with its sender), then receives what the other sent, then the timers
    /// that are due fire. Returns whether anything happened.
    fn step(&mut self, mut see: impl FnMut(usize, &[u8])) -> bool {
        let mut busy = false;
        for (i, (node, sent)) in self.nodes.iter_mut().zip(&mut self.sent).enumerate() {
            loop {
                let k = sent.lens.len();
                if k == sent.bufs.len() {
                    sent.bufs.push(vec![0; MAX_FRAME_LEN].into_boxed_slice());
                }
                let Some(n) = node.poll_transmit(self.now, &mut sent.bufs[k]) else {
                    break;
                };
                see(i, &sent.bufs[k][..n]);
                sent.lens.push(n);
                busy = true;
            }
        }
        let [a, b] = &mut self.nodes;
        for (to, sent) in [b, a].into_iter().zip(&mut self.sent) {
            for (buf, &n) in sent.bufs.iter().zip(&sent.lens) {
                to.handle_frame(self.now, &buf[..n]);
                busy = true;
            }
            sent.lens.clear();
        }
        for n in self.nodes.iter_mut() {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
                busy = true;
            }
        }
        busy
    }

    /// The next timer of either node, if one is set.
    fn next_timer(&self) -> Option<Instant> {
        self.nodes.iter().filter_map(|n| n.poll_timeout()).min()
    }
}

/// Frames and bytes seen on the wire, per sending node, and the frames
/// kept for a capture file.
#[derive(Default)]
pub struct Wire {
    pub tx_packets: [u64; 2],
    pub tx_bytes: [u64; 2],
    /// Frames still to be recorded (0: recording is off).
    pub record_budget: usize,
    pub recorded: Vec<(Duration, Vec<u8>)>,
    origin: Option<(SystemTime, std::time::Instant)>,
}

impl Wire {
    fn see(&mut self, dir: usize, frame: &[u8]) {
        self.tx_packets[dir] += 1;
        self.tx_bytes[dir] += frame.len() as u64;
        if self.record_budget > 0 {
            self.record_budget -= 1;
            let (wall, mono) = *self
                .origin
                .get_or_insert_with(|| (SystemTime::now(), std::time::Instant::now()));
            let since_epoch = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
            self.recorded
                .push((since_epoch + mono.elapsed(), frame.to_vec()));
        }
    }
}

/// Two RNICs back to back.
pub struct Loopback {
    pub sim: BackToBack,
    pub nodes: [Node; 2],
    pub conns: Vec<Conn>,
    pub wire: Rc<RefCell<Wire>>,
    next_psn: u32,
}

impl Loopback {
    /// Two nodes, each with a PD, a CQ and one registered region of
    /// `mem_len` bytes, and no QP yet.
    pub fn new(mem_len: usize) -> Loopback {
        let (a, na) = Node::create(0, mem_len);
        let (b, nb) = Node::create(1, mem_len);
        Loopback {
            sim: BackToBack {
                now: Instant::ZERO,
                nodes: [a, b],
                sent: Default::default(),
            },
            nodes: [na, nb],
            conns: Vec::new(),
            wire: Rc::new(RefCell::new(Wire::default())),
            next_psn: 0x1000,
        }
    }

    /// Creates a QP on each node and connects them (RC or UC), with queues
    /// of `depth` work requests. Returns the connection's index.
    pub fn connect(&mut self, qp_type: QpType, mtu: u32, depth: u32) -> Result<usize, QpError> {
        let mut qpn = [0u32; 2];
        for (i, q) in qpn.iter_mut().enumerate() {
            let n = &self.nodes[i];
            *q = qp::create(&mut self.sim.nodes[i], qp_type, n.pd, n.cq, depth)?;
        }
        // distinct starting PSNs per connection and direction
        let psn = [self.next_psn, self.next_psn + 0x80_0000];
        self.next_psn = (self.next_psn + 0x1_0000) & 0x7F_FFFF;
        for i in 0..2 {
            let peer = &self.nodes[1 - i];
            let ah = AhAttr::new(peer.gid, peer.mac);
            let c = Connect {
                // a 1 ms retransmission timeout, a 0.01 ms RNR delay
                min_rnr_timer: 1,
                timeout: 8,
                ..Connect::new(qp_type, ah, mtu, qpn[1 - i]).with_psns(psn[i], psn[1 - i])
            };
            let r = &mut self.sim.nodes[i];
            qp::init(r, qpn[i], qp_type)?;
            qp::connect(r, qpn[i], &c)?;
        }
        self.conns.push(Conn { qpn, qp_type });
        Ok(self.conns.len() - 1)
    }

    /// Drains node `i`'s completions into `out`.
    pub fn poll(&mut self, i: usize, out: &mut Vec<Wc>) {
        let cq = self.nodes[i].cq;
        let _ = self.sim.nodes[i].poll_cq(cq, usize::MAX, out);
    }

    /// One turn of both nodes; when nothing happened, jumps the clock to
    /// the next timer. Returns false when nothing is left to happen at
    /// all (the transport stalled).
    pub fn turn(&mut self) -> bool {
        let mut wire = self.wire.borrow_mut();
        if self.sim.step(|dir, frame| wire.see(dir, frame)) {
            return true;
        }
        match self.sim.next_timer() {
            Some(t) => {
                self.sim.now = t.max(self.sim.now);
                true
            }
            None => false,
        }
    }

    /// The state of every QP of connection `c`, for error messages.
    pub fn describe(&self, c: usize) -> String {
        let conn = self.conns[c];
        (0..2)
            .map(|i| self.sim.nodes[i].debug_qp(conn.qpn[i]))
            .collect::<Vec<_>>()
            .join("")
            .replace('\n', " | ")
    }

    /// Whether both QPs of connection `c` are still ready to send.
    pub fn healthy(&self, c: usize) -> bool {
        let conn = self.conns[c];
        (0..2).all(|i| {
            self.sim.nodes[i]
                .query_qp(conn.qpn[i])
                .is_ok_and(|q| q.state == QpState::Rts)
        })
    }
}
