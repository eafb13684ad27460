//! Shared helpers for the scenario tests: a `Pair` wrapper that collects
//! completions while the simulator runs, small constructors for work
//! requests, and frame inspection for taps and filters.

#![allow(dead_code)]

use nic::device::QpInfo;
use nic::transport::Counters;
use nic::verbs::{Memory, MwBind, MwType, RecvWr, SendOp, SendWr, Sge, Sgl, Wc, WcStatus};
use nic::wire::{Opcode, Psn, RoceRepr};
use sim::{Pair, PairConfig, Sim};
use std::sync::Arc;
use std::time::Duration;

/// The plain numbers of one side of a pair.
#[derive(Clone, Copy, Debug)]
pub struct Ep {
    pub pd: u32,
    pub cq: u32,
    pub qpn: u32,
    pub base: u64,
    pub lkey: u32,
    pub rkey: u32,
}

/// A pair plus the completions seen so far on each side.
pub struct H {
    pub p: Pair,
    pub wcs: [Vec<Wc>; 2],
}

impl H {
    pub fn new(cfg: PairConfig) -> H {
        H {
            p: Pair::new(cfg),
            wcs: [Vec::new(), Vec::new()],
        }
    }

    pub fn rc() -> H {
        H::new(PairConfig::default())
    }

    pub fn ep(&self, i: usize) -> Ep {
        let s = &self.p.sides[i];
        Ep {
            pd: s.pd,
            cq: s.cq,
            qpn: s.qpn,
            base: s.base,
            lkey: s.lkey,
            rkey: s.rkey,
        }
    }

    pub fn sim(&mut self) -> &mut Sim {
        &mut self.p.sim
    }

    /// Posts `wr` on side `i`'s QP; panics if refused.
    pub fn send(&mut self, i: usize, wr: SendWr) {
        let qpn = self.p.sides[i].qpn;
        self.p
            .node_mut(i)
            .post_send(qpn, wr)
            .expect("post_send refused");
    }

    /// Posts a one-SGE receive of `len` bytes at offset `off` of side `i`'s buffer.
    pub fn recv(&mut self, i: usize, wr_id: u64, off: u64, len: u32) {
        let e = self.ep(i);
        self.p
            .node_mut(i)
            .post_recv(
                e.qpn,
                RecvWr {
                    wr_id,
                    sgl: Sgl::single(e.base + off, len, e.lkey),
                },
            )
            .expect("post_recv refused");
    }

    /// A one-SGE local buffer of side `i`.
    pub fn sgl(&self, i: usize, off: u64, len: u32) -> Sgl {
        let e = self.ep(i);
        Sgl::single(e.base + off, len, e.lkey)
    }

    /// An SGL of several (offset, len) pieces of side `i`'s buffer.
    pub fn sgl_multi(&self, i: usize, pieces: &[(u64, u32)]) -> Sgl {
        let e = self.ep(i);
        let sges: Vec<Sge> = pieces
            .iter()
            .map(|&(off, length)| Sge {
                addr: e.base + off,
                length,
                lkey: e.lkey,
            })
            .collect();
        Sgl::new(&sges).expect("at most MAX_SGE entries")
    }

    /// Side `peer`'s buffer at `off`, as a WRITE target.
    pub fn write_op(&self, peer: usize, off: u64) -> SendOp {
        let e = self.ep(peer);
        SendOp::Write {
            remote_addr: e.base + off,
            rkey: e.rkey,
        }
    }

    pub fn read_op(&self, peer: usize, off: u64) -> SendOp {
        let e = self.ep(peer);
        SendOp::Read {
            remote_addr: e.base + off,
            rkey: e.rkey,
        }
    }

    pub fn fill(&self, i: usize, off: usize, data: &[u8]) {
        self.p.sides[i].mem.write(off, data);
    }

    pub fn mem(&self, i: usize, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.p.sides[i].mem.read(off, &mut v);
        v
    }

    pub fn whole_mem(&self, i: usize) -> Vec<u8> {
        self.p.sides[i].mem.to_vec()
    }

    pub fn u64_at(&self, i: usize, off: usize) -> u64 {
        u64::from_ne_bytes(self.mem(i, off, 8).try_into().expect("8 bytes"))
    }

    pub fn qp(&self, i: usize) -> QpInfo {
        self.p
            .node(i)
            .query_qp(self.p.sides[i].qpn)
            .expect("query_qp")
    }

    pub fn counters(&self, i: usize) -> Counters {
        self.qp(i).counters
    }

    /// Runs until `done` holds (given the simulator and every completion
    /// collected so far) or `limit` of virtual time passes.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Sim, &[Vec<Wc>; 2]) -> bool,
    ) -> bool {
        let cqs = [
            (self.p.sides[0].node, self.p.sides[0].cq),
            (self.p.sides[1].node, self.p.sides[1].cq),
        ];
        let wcs = &mut self.wcs;
        self.p.sim.run_until(limit, |s| {
            for (i, (node, cq)) in cqs.into_iter().enumerate() {
                let _ = s.nodes[node].poll_cq(cq, usize::MAX, &mut wcs[i]);
            }
            done(s, wcs)
        })
    }

    /// Runs until side 0 has `a` and side 1 has `b` completions (in total
    /// since the last `take`); panics after a virtual second.
    pub fn run_for_wcs(&mut self, a: usize, b: usize) {
        let ok = self.run_until(Duration::from_secs(1), |_, w| {
            w[0].len() >= a && w[1].len() >= b
        });
        let tail = |w: &[Wc]| w[w.len().saturating_sub(4)..].to_vec();
        assert!(
            ok,
            "wanted {a}/{b} completions, have {}/{}; last a: {:?} b: {:?}",
            self.wcs[0].len(),
            self.wcs[1].len(),
            tail(&self.wcs[0]),
            tail(&self.wcs[1])
        );
        // Nothing more should arrive beyond what was asked for.
        assert_eq!(self.wcs[0].len(), a, "side 0: {:?}", tail(&self.wcs[0]));
        assert_eq!(self.wcs[1].len(), b, "side 1: {:?}", tail(&self.wcs[1]));
    }

    /// Runs until nothing is left to happen (or `limit` passes).
    pub fn settle(&mut self, limit: Duration) {
        self.run_until(limit, |_, _| false);
    }

    /// Runs for exactly `d` of virtual time (or until nothing is left).
    pub fn advance(&mut self, d: Duration) {
        let end = self.p.sim.now + d;
        self.run_until(d, move |s, _| s.now >= end);
    }

    /// Registers `len` bytes of side `i`'s memory from offset `at` as a
    /// region at virtual address `addr` in the side's PD; (lkey, rkey).
    pub fn reg(&mut self, i: usize, at: usize, addr: u64, len: u64, acc: u32) -> (u32, u32) {
        let (pd, mem) = (self.p.sides[i].pd, self.p.sides[i].mem.clone());
        self.p
            .node_mut(i)
            .reg_mr(pd, mem as Arc<dyn Memory>, at, addr, len, acc)
            .expect("reg_mr")
    }

    /// Allocates a memory window in side `i`'s PD; its R_Key.
    pub fn alloc_mw(&mut self, i: usize, kind: MwType) -> u32 {
        let pd = self.p.sides[i].pd;
        self.p.node_mut(i).alloc_mw(pd, kind).expect("alloc_mw")
    }

    /// The current R_Key of the window whose key was `rkey` (its handle is
    /// the key's index).
    pub fn mw_rkey(&self, i: usize, rkey: u32) -> u32 {
        self.p.node(i).query_mw(rkey >> 8).expect("window").rkey
    }

    /// Runs one local operation (BIND_MW, LOCAL_INV) on side `i`'s QP to
    /// its completion, which it takes out of the collected ones.
    pub fn local_op(&mut self, i: usize, wr_id: u64, op: SendOp) -> Wc {
        self.send(i, wr(wr_id, op, Sgl::default()));
        let n = self.wcs[i].len() + 1;
        let ok = self.run_until(Duration::from_secs(1), |_, w| w[i].len() >= n);
        assert!(ok, "no completion for local operation {op:?}");
        let wc = self.wcs[i].pop().expect("completed");
        assert_eq!(wc.wr_id, wr_id, "{wc:?}");
        wc
    }

    /// Binds window `mw_rkey` of side `i` with tag `tag` to `[addr, +len)`
    /// of region `mr_lkey`; the completion's status.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &mut self,
        i: usize,
        mw_rkey: u32,
        tag: u8,
        mr_lkey: u32,
        addr: u64,
        len: u64,
        acc: u32,
    ) -> WcStatus {
        self.bind_wc(i, mw_rkey, tag, mr_lkey, addr, len, acc)
            .status
    }

    /// [`H::bind`], the whole completion.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_wc(
        &mut self,
        i: usize,
        mw_rkey: u32,
        tag: u8,
        mr_lkey: u32,
        addr: u64,
        len: u64,
        acc: u32,
    ) -> Wc {
        let b = MwBind {
            mw_rkey,
            new_rkey: (mw_rkey & !0xff) | tag as u32,
            mr_lkey,
            addr,
            len,
            access: acc,
        };
        self.local_op(i, 77, SendOp::BindMw(b))
    }

    /// The next frame side `i` sends, taken straight from its device (it
    /// reaches no link); panics if it has none to send.
    pub fn pull(&mut self, i: usize) -> Vec<u8> {
        let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
        let now = self.p.sim.now;
        let n = self
            .p
            .node_mut(i)
            .poll_transmit(now, &mut buf)
            .expect("a frame to send");
        buf.truncate(n);
        buf
    }

    /// How many frames side `i` dropped for `reason`.
    pub fn drops(&self, i: usize, reason: &str) -> u64 {
        self.p.node(i).drops().get(reason).copied().unwrap_or(0)
    }

    /// Takes side `i`'s completions (collected so far, and any waiting in
    /// its CQ now).
    pub fn take(&mut self, i: usize) -> Vec<Wc> {
        let cq = self.p.sides[i].cq;
        let _ = self.p.node_mut(i).poll_cq(cq, usize::MAX, &mut self.wcs[i]);
        std::mem::take(&mut self.wcs[i])
    }
}

/// A signaled work request.
pub fn wr(wr_id: u64, op: SendOp, sgl: Sgl) -> SendWr {
    SendWr::new(wr_id, op, sgl)
}

/// An unsignaled work request.
pub fn wr_unsig(wr_id: u64, op: SendOp, sgl: Sgl) -> SendWr {
    let mut w = SendWr::new(wr_id, op, sgl);
    w.flags.signaled = false;
    w
}

/// `len` bytes of a seeded pattern.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Asserts two byte strings are equal, reporting the first difference
/// instead of printing both.
#[track_caller]
pub fn same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: lengths {} / {}, first difference at {:?}",
        got.len(),
        want.len(),
        at
    );
}

/// `frame` (a RoCE frame) with the changes `f` makes to its repr, emitted
/// again with a correct ICRC (and IP checksum).
pub fn reforge<'a>(frame: &'a [u8], f: impl FnOnce(&mut RoceRepr<'a>)) -> Vec<u8> {
    let mut r = RoceRepr::parse(frame).expect("a RoCE frame");
    r.trailer_len = 0;
    f(&mut r);
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).expect("emit");
    b.truncate(n);
    b
}

/// Opcode and PSN of a RoCE frame, if it parses.
pub fn frame_opcode_psn(frame: &[u8]) -> Option<(Opcode, Psn)> {
    let r = RoceRepr::parse(frame).ok()?;
    Some((r.bth.opcode, r.bth.psn))
}

/// A filter that drops the `n`-th (0-based) frame in direction `dir` for
/// which `pred` holds, once, and passes everything else.
pub fn drop_nth(
    dir: usize,
    n: usize,
    mut pred: impl FnMut(Opcode, Psn) -> bool + 'static,
) -> sim::Filter {
    let mut seen = 0usize;
    let mut done = false;
    Box::new(move |d, f| {
        if done || d != dir {
            return true;
        }
        let Some((op, psn)) = frame_opcode_psn(f) else {
            return true;
        };
        if !pred(op, psn) {
            return true;
        }
        if seen == n {
            done = true;
            return false;
        }
        seen += 1;
        true
    })
}
