//! Loopback on the virtual clock: two QPs of ONE device (one MAC, one GID)
//! talk through the device's loopback (`Rnic::is_to_self`, the simulator's
//! link 2) exactly as two devices talk over a wire — the same packets,
//! PSNs, ACKs, completions and counters, the same retries when the loopback
//! loses frames, the same errors.

mod common;

use common::*;
use nic::verbs::{access, AhAttr, MwType, QpType, RecvWr, SendOp, Sgl, UdDest, WcStatus};
use nic::wire::{Opcode, RoceRepr};
use sim::PairConfig;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

fn pair(qp_type: QpType, loopback: bool) -> H {
    H::new(PairConfig {
        qp_type,
        loopback,
        ..PairConfig::default()
    })
}

/// What a frame says, without the addresses and QPNs that tell the two
/// set-ups apart: (receiving side, opcode, PSN, payload length, AETH).
type Seen = (usize, Opcode, u32, usize, Option<(u8, u32)>);

/// Records every RoCE frame either side sends.
fn record(h: &mut H) -> Rc<RefCell<Vec<Seen>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let qpns = [h.ep(0).qpn, h.ep(1).qpn];
    let loopback = h.p.sides[1].node == 0;
    let out = seen.clone();
    h.sim().tap = Some(Box::new(move |_, dir, f| {
        let Ok(r) = RoceRepr::parse(f) else {
            panic!("not a RoCE frame: {:02x?}", &f[..f.len().min(64)]);
        };
        let to = if loopback {
            qpns.iter().position(|&q| q == r.bth.dest_qp).unwrap_or(9)
        } else {
            1 - dir
        };
        let aeth = r.ext.aeth.map(|a| (a.syndrome.to_byte(), a.msn));
        out.borrow_mut()
            .push((to, r.bth.opcode, r.bth.psn.value(), r.payload.len(), aeth));
    }));
    seen
}

/// Every RC operation in both directions, with receives posted; returns
/// what each side completed (status, opcode, wr_id, byte_len, imm) and
/// both sides' memory.
fn rc_workload(h: &mut H) -> (Vec<String>, [Vec<u8>; 2]) {
    for i in 0..2 {
        h.fill(i, 0, &pattern(i as u32 + 7, 0x4000));
    }
    for k in 0..4 {
        h.recv(1, 100 + k, 0x8000 + k * 0x1000, 0x1000);
        h.recv(0, 200 + k, 0x8000 + k * 0x1000, 0x1000);
    }
    let b = h.ep(1);
    let a = h.ep(0);
    let ops = [
        (0, SendOp::Send, 3000),
        (0, SendOp::SendWithImm { imm: 0x1234 }, 100),
        (0, h.write_op(1, 0x20000), 9000),
        (
            0,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x30000,
                rkey: b.rkey,
                imm: 7,
            },
            2048,
        ),
        (0, h.read_op(1, 0x100), 5000),
        (
            0,
            SendOp::CompareSwap {
                remote_addr: b.base + 0x40,
                rkey: b.rkey,
                compare: h.u64_at(1, 0x40),
                swap: 0xfeed,
            },
            8,
        ),
        (
            0,
            SendOp::FetchAdd {
                remote_addr: b.base + 0x48,
                rkey: b.rkey,
                add: 5,
            },
            8,
        ),
        (1, SendOp::Send, 4096),
        (
            1,
            SendOp::Write {
                remote_addr: a.base + 0x20000,
                rkey: a.rkey,
            },
            1500,
        ),
        (
            1,
            SendOp::Read {
                remote_addr: a.base + 0x200,
                rkey: a.rkey,
            },
            4000,
        ),
    ];
    let mut want = [0usize; 2];
    for (n, (i, op, len)) in ops.into_iter().enumerate() {
        // reads and atomics land at 0x60000 and up of the requester
        let off = if op.is_read_or_atomic() {
            0x60000 + n as u64 * 0x2000
        } else {
            0
        };
        h.send(i, wr(n as u64, op, h.sgl(i, off, len)));
        want[i] += 1;
    }
    // receives: 2 on B (SEND, SEND+IMM) + WRITE+IMM's; 1 on A
    h.run_for_wcs(want[0] + 1, want[1] + 3);
    let mut out = Vec::new();
    for i in 0..2 {
        for w in h.take(i) {
            out.push(format!(
                "{i} {:?} {:?} {} {} {:?}",
                w.status, w.opcode, w.wr_id, w.byte_len, w.imm
            ));
        }
    }
    (out, [h.whole_mem(0), h.whole_mem(1)])
}

#[test]
fn rc_on_one_device_is_the_same_as_on_two() {
    let mut two = pair(QpType::Rc, false);
    let mut one = pair(QpType::Rc, true);
    assert_eq!(one.p.sides[0].gid, one.p.sides[1].gid, "one GID");
    assert_ne!(one.ep(0).qpn, one.ep(1).qpn);
    let (seen2, seen1) = (record(&mut two), record(&mut one));
    let (wc2, mem2) = rc_workload(&mut two);
    let (wc1, mem1) = rc_workload(&mut one);
    // the last ACKs arrive
    two.settle(Duration::from_millis(1));
    one.settle(Duration::from_millis(1));
    assert_eq!(wc1, wc2, "completions");
    assert!(wc1.iter().all(|w| w.contains("Success")), "{wc1:?}");
    assert!(mem1 == mem2, "memory after the workload differs");
    // the packets each side receives: same opcodes, PSNs, lengths, ACKs
    for side in 0..2 {
        let of = |s: &Rc<RefCell<Vec<Seen>>>| -> Vec<Seen> {
            s.borrow().iter().filter(|x| x.0 == side).cloned().collect()
        };
        let (a, b) = (of(&seen1), of(&seen2));
        assert!(!a.is_empty());
        assert_eq!(a, b, "packets to side {side}");
    }
    // counted per QP as over a wire
    for i in 0..2 {
        let (c1, c2) = (one.counters(i), two.counters(i));
        assert_eq!(c1.sent_pkts, c2.sent_pkts, "side {i} sent_pkts");
        assert_eq!(c1.rcvd_pkts, c2.rcvd_pkts, "side {i} rcvd_pkts");
        assert_eq!(c1.rdma_sends, c2.rdma_sends);
        assert_eq!(c1.rdma_recvs, c2.rdma_recvs);
        assert_eq!(c1.retransmitted_pkts, 0);
    }
    // every frame went over node 0's loopback, none over the wire
    let l = one.sim().link_stats(2);
    assert_eq!(l.sent, l.delivered);
    assert_eq!(l.sent, seen1.borrow().len() as u64, "{l:?}");
    assert_eq!(one.sim().link_stats(0).sent, 0);
    assert_eq!(one.sim().link_stats(1).sent, 0);
}

#[test]
fn lossy_loopback_retransmits_and_delivers_everything() {
    let mut h = pair(QpType::Rc, true);
    h.sim().link_config_mut(2).impair.loss = 0.05;
    let data = pattern(11, 64 * 1024);
    h.fill(0, 0, &data);
    for k in 0..16u64 {
        let op = h.write_op(1, 0x10000 + k * 0x1000);
        h.send(0, wr(k, op, h.sgl(0, k * 0x1000, 0x1000)));
    }
    let ok = h.run_until(Duration::from_secs(30), |_, w| w[0].len() >= 16);
    assert!(ok, "16 WRITEs complete despite loss");
    let wcs = h.take(0);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(h.mem(1, 0x10000, 64 * 1024), data);
    let l = h.sim().link_stats(2);
    assert!(l.lost > 0, "the loopback lost frames: {l:?}");
    let c = h.counters(0);
    assert!(c.retransmitted_pkts > 0, "go-back-N resent: {c:?}");
    let cb = h.counters(1);
    assert!(cb.out_of_sequence + cb.duplicate_request > 0, "{cb:?}");
}

#[test]
fn a_dead_loopback_ends_in_retry_exceeded_as_a_dead_wire_does() {
    for loopback in [false, true] {
        let mut h = H::new(PairConfig {
            loopback,
            retry_cnt: 2,
            timeout: 10,
            ..PairConfig::default()
        });
        h.sim().filter = Some(Box::new(|_, _| false));
        let op = h.write_op(1, 0);
        h.send(0, wr(1, op, h.sgl(0, 0, 64)));
        let ok = h.run_until(Duration::from_secs(60), |_, w| !w[0].is_empty());
        assert!(ok, "loopback {loopback}: a completion comes");
        let w = h.take(0);
        assert_eq!(w[0].status, WcStatus::RetryExcErr, "loopback {loopback}");
        let c = h.counters(0);
        assert_eq!(c.local_ack_timeout_err, 3, "loopback {loopback}: {c:?}");
        assert_eq!(c.sent_pkts, 3, "the first try and two retries");
    }
}

#[test]
fn remote_access_errors_are_the_same_on_one_device() {
    for loopback in [false, true] {
        let mut h = pair(QpType::Rc, loopback);
        let b = h.ep(1);
        h.send(
            0,
            wr(
                1,
                SendOp::Write {
                    remote_addr: b.base,
                    rkey: b.rkey ^ 0x100,
                },
                h.sgl(0, 0, 64),
            ),
        );
        h.run_for_wcs(1, 0);
        assert_eq!(h.take(0)[0].status, WcStatus::RemAccessErr, "{loopback}");
        assert_eq!(h.counters(1).rx_write_requests, 0);
    }
}

#[test]
fn uc_and_ud_on_one_device() {
    let mut h = pair(QpType::Uc, true);
    let data = pattern(3, 3000);
    h.fill(0, 0, &data);
    h.recv(1, 1, 0x8000, 4096);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 3000)));
    let op = h.write_op(1, 0x20000);
    h.send(0, wr(2, op, h.sgl(0, 0, 3000)));
    h.run_for_wcs(2, 1);
    // UC completes a request once sent: let the WRITE arrive
    h.settle(Duration::from_millis(1));
    let (a, b) = (h.take(0), h.take(1));
    assert!(
        a.iter().chain(&b).all(|w| w.status == WcStatus::Success),
        "{a:?} {b:?}"
    );
    assert!(h.mem(1, 0x8000, 3000) == data, "UC SEND's data");
    assert!(h.mem(1, 0x20000, 3000) == data, "UC WRITE's data");

    let mut h = pair(QpType::Ud, true);
    h.fill(0, 0, &data[..1000]);
    h.recv(1, 1, 0x8000, 2048);
    let s = &h.p.sides[1];
    let mut w = wr(1, SendOp::SendWithImm { imm: 9 }, h.sgl(0, 0, 1000));
    w.ud = Some(UdDest {
        ah: AhAttr::new(s.gid, s.mac),
        remote_qpn: s.qpn,
        remote_qkey: 0x1111_1111,
    });
    h.send(0, w);
    h.run_for_wcs(1, 1);
    let b = h.take(1);
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(b[0].imm, Some(9));
    // the GRH (40 bytes) before the payload
    assert_eq!(b[0].byte_len, 1040);
    assert_eq!(b[0].src_qp, h.ep(0).qpn);
    assert!(h.mem(1, 0x8000 + 40, 1000) == data[..1000], "UD payload");
}

#[test]
fn srq_and_memory_window_on_one_device() {
    let mut h = pair(QpType::Rc, true);
    let node = h.p.sides[1].node;
    let srq = h.p.sim.nodes[node].create_srq(h.ep(1).pd, 16).unwrap();
    let (qa, _qb) = h.p.add_pair(
        PairConfig {
            loopback: true,
            ..PairConfig::default()
        },
        Some(srq),
        16,
    );
    let b = h.ep(1);
    h.p.sim.nodes[node]
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 55,
                sgl: Sgl::single(b.base + 0x9000, 256, b.lkey),
            },
        )
        .unwrap();
    h.fill(0, 0, &[0x5a; 200]);
    h.p.sim.nodes[0]
        .post_send(qa, wr(1, SendOp::Send, h.sgl(0, 0, 200)))
        .unwrap();
    h.run_for_wcs(1, 1);
    let r = h.take(1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (55, 200));
    assert_eq!(h.mem(1, 0x9000, 200), vec![0x5a; 200]);
    h.take(0);

    // a type 2 window on side B's region, written through by side A
    let (lkey, _) = h.reg(
        1,
        0x40000,
        0x7000_0000,
        0x1000,
        access::LOCAL_WRITE | access::MW_BIND,
    );
    let mw = h.alloc_mw(1, MwType::Type2);
    let wc = h.bind_wc(1, mw, 3, lkey, 0x7000_0000, 0x1000, access::REMOTE_WRITE);
    assert_eq!(wc.status, WcStatus::Success);
    h.fill(0, 0, &[0xa5; 64]);
    h.send(
        0,
        wr(
            2,
            SendOp::Write {
                remote_addr: 0x7000_0000,
                rkey: (mw & !0xff) | 3,
            },
            h.sgl(0, 0, 64),
        ),
    );
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    assert_eq!(h.mem(1, 0x40000, 64), vec![0xa5; 64]);
}
