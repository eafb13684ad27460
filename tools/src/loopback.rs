//! The in-process loopback: two soft RNICs built from the real transport,
//! joined by the simulator's in-memory wire with zero latency and unlimited
//! bandwidth, driven from one thread. Time on the simulator's clock does not
//! move (nothing waits on the wire), so what a wall clock measures around an
//! operation is the software path itself: post → requester → frame → ICRC
//! → responder → ACK → completion.

use crate::qp::{self, Connect, QpError};
use nic::sim::{Endpoint, LinkConfig, Sim};
use nic::verbs::{AhAttr, QpState, QpType, Wc};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the output header says about the loopback.
pub const LOOPBACK_NOTE: &str =
    "in-process loopback: both NICs in one thread; wall-clock time of the software path";

/// One node: its verbs objects and the memory of its one region.
pub struct Node {
    pub name: String,
    /// PD, CQ, the registered region and the addresses (`node.lkey`).
    pub ep: Endpoint,
}

impl std::ops::Deref for Node {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.ep
    }
}

/// A connected QP pair: `qpn[i]` lives on node `i`.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub qpn: [u32; 2],
    pub qp_type: QpType,
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

/// Two RNICs on the in-memory wire.
pub struct Loopback {
    pub sim: Sim,
    pub nodes: [Node; 2],
    pub conns: Vec<Conn>,
    pub wire: Rc<RefCell<Wire>>,
    next_psn: u32,
}

impl Loopback {
    /// Two nodes, each with a PD, a CQ and one registered region of
    /// `mem_len` bytes, and no QP yet.
    pub fn new(mem_len: usize) -> Loopback {
        let mut rnics = Vec::new();
        let mut nodes = Vec::new();
        for i in 0..2u8 {
            let (r, e) = Endpoint::create(i, false, mem_len, 1 << 16, |c| {
                c.seed = 0x5eed + i as u64;
            });
            rnics.push(r);
            nodes.push(Node {
                name: format!("srnic{i}"),
                ep: e,
            });
        }
        let b = rnics.pop().expect("two");
        let a = rnics.pop().expect("two");
        let mut sim = Sim::new(a, b, LinkConfig::ideal(), 1);
        let wire = Rc::new(RefCell::new(Wire::default()));
        let w = wire.clone();
        sim.tap = Some(Box::new(move |_, dir, frame| {
            w.borrow_mut().see(dir, frame)
        }));
        let nodes: [Node; 2] = match nodes.try_into() {
            Ok(n) => n,
            Err(_) => unreachable!("two nodes were built"),
        };
        Loopback {
            sim,
            nodes,
            conns: Vec::new(),
            wire,
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
                // the simulator's pair defaults: a short ACK timeout and RNR timer
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

    /// One round of the simulator; when nothing happened, jumps its clock
    /// to the next timer. Returns false when nothing is left to happen at
    /// all (the transport stalled).
    pub fn turn(&mut self) -> bool {
        if self.sim.step() {
            return true;
        }
        match self.sim.next_event() {
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
