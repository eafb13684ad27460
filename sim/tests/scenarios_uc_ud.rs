//! Scenario tests: the UC and UD verbs, UC loss semantics (whole messages
//! lost, never retransmitted), UD GRH, Q_Key and length rules.

mod common;

use common::*;
use nic::verbs::VerbsError;
use nic::verbs::{AhAttr, QpState, QpType, SendOp, SendWr, UdDest, WcOpcode, WcStatus};
use nic::wire::Opcode;
use sim::PairConfig;
use std::net::Ipv4Addr;

fn uc() -> H {
    H::new(PairConfig {
        qp_type: QpType::Uc,
        ..Default::default()
    })
}

fn ud() -> H {
    H::new(PairConfig {
        qp_type: QpType::Ud,
        ..Default::default()
    })
}

// ---- UC ----

#[test]
fn uc_send_and_send_with_imm() {
    let mut h = uc();
    let d1 = pattern(1, 3000);
    let d2 = pattern(2, 100);
    h.fill(0, 0, &d1);
    h.fill(0, 0x4000, &d2);
    h.recv(1, 1, 0x8000, 4096);
    h.recv(1, 2, 0x9000, 4096);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 3000)));
    h.send(
        0,
        wr(2, SendOp::SendWithImm { imm: 77 }, h.sgl(0, 0x4000, 100)),
    );
    h.run_for_wcs(2, 2);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!((wb[0].wr_id, wb[0].byte_len, wb[0].imm), (1, 3000, None));
    assert_eq!((wb[1].wr_id, wb[1].byte_len, wb[1].imm), (2, 100, Some(77)));
    assert!(wb.iter().all(|w| w.status == WcStatus::Success));
    same(&h.mem(1, 0x8000, 3000), &d1, "SEND");
    same(&h.mem(1, 0x9000, 100), &d2, "SEND_WITH_IMM");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.sent_pkts, 4);
    assert_eq!(ca.rcvd_pkts, 0, "UC has no ACKs");
    assert_eq!(cb.sent_pkts, 0);
    assert_eq!(cb.rdma_recvs, 2);
}

#[test]
fn uc_write_and_write_with_imm() {
    let mut h = uc();
    let d = pattern(3, 5000);
    h.fill(0, 0, &d);
    h.recv(1, 1, 0, 0);
    let op = h.write_op(1, 0x1000);
    h.send(0, wr(1, op, h.sgl(0, 0, 5000)));
    let b = h.ep(1);
    h.send(
        0,
        wr(
            2,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x4000,
                rkey: b.rkey,
                imm: 9,
            },
            h.sgl(0, 0, 2000),
        ),
    );
    h.run_for_wcs(2, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::RdmaWrite));
    assert_eq!(wb[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((wb[0].imm, wb[0].byte_len), (Some(9), 2000));
    same(&h.mem(1, 0x1000, 5000), &d, "WRITE");
    same(&h.mem(1, 0x4000, 2000), &d[..2000], "WRITE_WITH_IMM");
    assert_eq!(h.counters(1).rx_write_requests, 2);
}

#[test]
fn uc_loss_loses_whole_messages_only() {
    let mut h = uc();
    // 3-packet SENDs; the middle packet of the second is dropped
    h.sim().filter = Some(drop_nth(0, 1, |op, _| op.0 == 0x21)); // UC SEND MIDDLE
    for k in 0..4u32 {
        h.fill(0, 0x1000 * k as usize, &pattern(10 + k, 2500));
        h.recv(1, 100 + k as u64, 0x10000 * (k as u64 + 1), 4096);
    }
    for k in 0..4u32 {
        h.send(
            0,
            wr(k as u64, SendOp::Send, h.sgl(0, 0x1000 * k as u64, 2500)),
        );
    }
    h.settle(std::time::Duration::from_millis(10));
    let (wa, wb) = (h.take(0), h.take(1));
    // the sender completes everything: UC has no acknowledgements
    assert_eq!(wa.len(), 4);
    assert!(wa.iter().all(|w| w.status == WcStatus::Success));
    // the receiver gets messages 0, 2 and 3; message 1 is gone, and its
    // receive WQE is used by the next message
    assert_eq!(wb.len(), 3, "{wb:?}");
    assert!(wb.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        wb.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    same(&h.mem(1, 0x10000, 2500), &pattern(10, 2500), "msg 0");
    same(&h.mem(1, 0x20000, 2500), &pattern(12, 2500), "msg 2");
    same(&h.mem(1, 0x30000, 2500), &pattern(13, 2500), "msg 3");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.sent_pkts, 12, "no retransmission on UC");
    assert_eq!(ca.retransmitted_pkts, 0);
    assert_eq!(cb.rcvd_pkts, 11);
    assert!(cb.out_of_sequence >= 1);
    assert_eq!(cb.rdma_recvs, 3);
    assert_eq!(h.qp(1).recv_queue_len, 1);
    assert_eq!(h.qp(1).state, QpState::Rts);

    // a lost WRITE LAST: the first packets land, no completion for the
    // WRITE_WITH_IMM, the next message arrives
    let mut h = uc();
    h.sim().filter = Some(drop_nth(0, 0, |op, _| op.0 == 0x29)); // UC WRITE LAST WITH IMM
    h.recv(1, 1, 0, 0);
    h.fill(0, 0, &pattern(20, 3000));
    let b = h.ep(1);
    h.send(
        0,
        wr(
            1,
            SendOp::WriteWithImm {
                remote_addr: b.base,
                rkey: b.rkey,
                imm: 1,
            },
            h.sgl(0, 0, 3000),
        ),
    );
    h.send(
        0,
        wr(
            2,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x2000,
                rkey: b.rkey,
                imm: 2,
            },
            h.sgl(0, 0, 10),
        ),
    );
    h.settle(std::time::Duration::from_millis(10));
    assert_eq!(h.take(0).len(), 2);
    let wb = h.take(1);
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].imm, wb[0].byte_len), (1, Some(2), 10));
}

#[test]
fn uc_read_atomic_and_send_with_inv_refused() {
    let mut h = uc();
    let b = h.ep(1);
    let qpn = h.ep(0).qpn;
    for op in [
        h.read_op(1, 0),
        SendOp::FetchAdd {
            remote_addr: b.base,
            rkey: b.rkey,
            add: 1,
        },
        SendOp::CompareSwap {
            remote_addr: b.base,
            rkey: b.rkey,
            compare: 0,
            swap: 1,
        },
        SendOp::SendWithInv {
            invalidate_rkey: b.rkey,
        },
    ] {
        let r = h.p.sim.nodes[0].post_send(qpn, wr(1, op, h.sgl(0, 0, 8)));
        assert!(matches!(r, Err(VerbsError::InvalidWr(_))), "{op:?}: {r:?}");
    }
    assert_eq!(h.qp(0).send_queue_len, 0);
    assert_eq!(h.qp(0).state, QpState::Rts);
}

// ---- UD ----

fn ud_dest(h: &H, to: usize, qkey: u32) -> UdDest {
    let s = &h.p.sides[to];
    UdDest {
        ah: AhAttr::new(s.gid, s.mac),
        remote_qpn: s.qpn,
        remote_qkey: qkey,
    }
}

const QKEY: u32 = 0x1111_1111;

fn ud_wr(h: &H, wr_id: u64, op: SendOp, off: u64, len: u32, qkey: u32) -> SendWr {
    let mut w = wr(wr_id, op, h.sgl(0, off, len));
    w.ud = Some(ud_dest(h, 1, qkey));
    w
}

#[test]
fn ud_send_and_send_with_imm_with_grh() {
    let mut h = ud();
    let d1 = pattern(30, 1000);
    h.fill(0, 0, &d1);
    h.recv(1, 1, 0x8000, 2048);
    h.recv(1, 2, 0x9000, 2048);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 1000, QKEY);
    h.send(0, w);
    let w = ud_wr(&h, 2, SendOp::SendWithImm { imm: 0xabc }, 0, 24, QKEY);
    h.send(0, w);
    h.run_for_wcs(2, 2);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    let a_qpn = h.ep(0).qpn;
    for w in &wb {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.opcode, WcOpcode::Recv);
        // RoCEv2 A17.4.5.1: the completion says the frame was IPv4
        assert!(w.grh && w.grh_ipv4);
        assert_eq!(w.src_qp, a_qpn);
    }
    assert_eq!(
        (wb[0].wr_id, wb[0].byte_len, wb[0].imm),
        (1, 40 + 1000, None)
    );
    assert_eq!(
        (wb[1].wr_id, wb[1].byte_len, wb[1].imm),
        (2, 40 + 24, Some(0xabc))
    );
    // GRH: IPv4-mapped, the first 20 bytes reserved, the IPv4 header after
    let grh = h.mem(1, 0x8000, 40);
    assert_eq!(grh[..20], [0; 20]);
    let ip = &grh[20..];
    assert_eq!(ip[0], 0x45, "IPv4, IHL 5");
    assert_eq!(
        u16::from_be_bytes([ip[2], ip[3]]) as usize,
        20 + 8 + 12 + 8 + 1000 + 4
    );
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(
        Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()),
        Ipv4Addr::new(192, 0, 2, 1)
    );
    assert_eq!(
        Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap()),
        Ipv4Addr::new(192, 0, 2, 2)
    );
    same(&h.mem(1, 0x8000 + 40, 1000), &d1, "UD payload");
    same(&h.mem(1, 0x9000 + 40, 24), &d1[..24], "UD imm payload");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.sent_pkts, 2);
    assert_eq!(ca.rdma_sends, 2);
    assert_eq!(cb.rdma_recvs, 2);
    assert_eq!(cb.sent_pkts, 0, "UD has no ACKs");
}

#[test]
fn ud_qkey_high_bit_uses_qp_qkey() {
    let mut h = ud();
    h.recv(1, 1, 0x8000, 2048);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 10, 0x8000_0000);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
    assert_eq!(h.counters(1).qkey_violation, 0);
}

#[test]
fn ud_wrong_qkey_dropped_and_counted() {
    let mut h = ud();
    h.recv(1, 1, 0x8000, 2048);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 10, 0x2222_2222);
    h.send(0, w);
    h.settle(std::time::Duration::from_millis(10));
    // the sender cannot know: success
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    assert!(h.take(1).is_empty());
    assert_eq!(h.counters(1).qkey_violation, 1);
    assert_eq!(h.qp(1).recv_queue_len, 1, "the receive WQE is still there");
    // and the right Q_Key still gets through
    let w = ud_wr(&h, 2, SendOp::Send, 0, 10, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
}

#[test]
fn ud_message_larger_than_mtu_is_loc_len_err() {
    let mut h = ud();
    let mtu = h.qp(0).mtu;
    h.recv(1, 1, 0x8000, 8192);
    let w = ud_wr(&h, 1, SendOp::Send, 0, mtu + 1, QKEY);
    h.send(0, w);
    h.settle(std::time::Duration::from_millis(10));
    let wa = h.take(0);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::LocLenErr);
    assert!(h.take(1).is_empty());
    assert_eq!(h.counters(0).sent_pkts, 0);
    assert_eq!(h.counters(0).req_cqe_error, 1);
    // IBA 10.3.1: a UD send error moves the QP to SQEr, not ERR
    assert_eq!(h.qp(0).state, QpState::Sqe);
    // sends posted in SQEr are flushed
    let w = ud_wr(&h, 2, SendOp::Send, 0, 10, QKEY);
    h.send(0, w);
    let wa = h.take(0);
    assert_eq!((wa[0].wr_id, wa[0].status), (2, WcStatus::WrFlushErr));
    // the receive queue keeps working in SQEr
    h.recv(0, 50, 0x8000, 2048);
    let mut w = wr(3, SendOp::Send, h.sgl(1, 0, 10));
    w.ud = Some(ud_dest(&h, 0, QKEY));
    h.p.sim.nodes[1].post_send(h.ep(1).qpn, w).unwrap();
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    h.take(1);
    // SQE → RTS resumes sending
    let attr = nic::verbs::QpAttr {
        state: Some(QpState::Rts),
        ..Default::default()
    };
    h.p.sim.nodes[0].modify_qp(h.ep(0).qpn, &attr).unwrap();
    let w = ud_wr(&h, 4, SendOp::Send, 0, 10, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    assert_eq!(h.take(1)[0].wr_id, 1);
    // a message of exactly one MTU is fine on a fresh pair
    let mut h = ud();
    h.recv(1, 1, 0x8000, 8192);
    let w = ud_wr(&h, 1, SendOp::Send, 0, mtu, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(1)[0].byte_len, 40 + mtu);
}

#[test]
fn ud_receive_buffer_too_small_is_loc_len_err() {
    let mut h = ud();
    // 40 B of GRH + 100 B do not fit in 120 B
    h.recv(1, 1, 0x8000, 120);
    h.fill(1, 0x8000, &[0x5A; 256]);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 100, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let wb = h.take(1);
    assert_eq!(wb[0].wr_id, 1);
    assert_eq!(wb[0].status, WcStatus::LocLenErr);
    let cb = h.counters(1);
    assert_eq!(cb.resp_local_length_error, 1);
    assert_eq!(cb.resp_cqe_error, 1);
}

#[test]
fn ud_rejects_rc_only_verbs() {
    let mut h = ud();
    let qpn = h.ep(0).qpn;
    // without an address handle
    let r = h.p.sim.nodes[0].post_send(qpn, wr(1, SendOp::Send, h.sgl(0, 0, 8)));
    assert!(matches!(r, Err(VerbsError::InvalidWr(_))));
    for op in [h.write_op(1, 0), h.read_op(1, 0)] {
        let w = ud_wr(&h, 1, op, 0, 8, QKEY);
        let r = h.p.sim.nodes[0].post_send(qpn, w);
        assert!(matches!(r, Err(VerbsError::InvalidWr(_))), "{op:?}");
    }
    let _ = Opcode::UD_SEND_ONLY;
}

#[test]
fn uc_loss_with_srq_reuses_the_srq_wqe() {
    use nic::verbs::RecvWr;
    let mut h = uc();
    let b = h.ep(1);
    let srq = h.p.sim.nodes[1].create_srq(b.pd, 16).unwrap();
    let cfg = PairConfig {
        qp_type: QpType::Uc,
        sq_psn: [0x10, 0x20],
        ..Default::default()
    };
    let (qa, qb) = h.p.add_pair(cfg, Some(srq), 16);
    for k in 0..3u64 {
        let sgl = h.sgl(1, 0x10000 * (k + 1), 4096);
        h.p.sim.nodes[1]
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 100 + k,
                    sgl,
                },
            )
            .unwrap();
    }
    // drop the MIDDLE of the second 3-packet SEND
    h.sim().filter = Some(drop_nth(0, 1, |op, _| op.0 == 0x21));
    for k in 0..3u32 {
        h.fill(0, 0x1000 * k as usize, &pattern(60 + k, 2500));
        let sgl = h.sgl(0, 0x1000 * k as u64, 2500);
        h.p.sim.nodes[0]
            .post_send(qa, wr(k as u64, SendOp::Send, sgl))
            .unwrap();
    }
    h.settle(std::time::Duration::from_millis(10));
    let wb = h.take(1);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(100, WcStatus::Success), (101, WcStatus::Success)]
    );
    same(&h.mem(1, 0x10000, 2500), &pattern(60, 2500), "msg 0");
    same(&h.mem(1, 0x20000, 2500), &pattern(62, 2500), "msg 2");
    // the third SRQ WQE is still available to the next message
    h.p.sim.nodes[0]
        .post_send(qa, wr(9, SendOp::Send, h.sgl(0, 0, 10)))
        .unwrap();
    h.settle(std::time::Duration::from_millis(10));
    let wb = h.take(1);
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (102, 10));
    let info = h.p.sim.nodes[1].query_qp(qb).unwrap();
    assert_eq!(info.recv_queue_len, 0);
    assert_eq!(info.counters.rdma_recvs, 3);
}

#[test]
fn ud_send_over_ipv6_has_ipv6_grh() {
    let mut h = H::new(PairConfig {
        qp_type: QpType::Ud,
        ipv6: true,
        ..Default::default()
    });
    let d = pattern(31, 300);
    h.fill(0, 0, &d);
    h.recv(1, 1, 0x8000, 1024);
    let w = ud_wr(&h, 1, SendOp::SendWithImm { imm: 3 }, 0, 300, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    let wb = h.take(1);
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!((wb[0].byte_len, wb[0].imm), (40 + 300, Some(3)));
    assert!(wb[0].grh && !wb[0].grh_ipv4, "the completion says IPv6");
    let grh = h.mem(1, 0x8000, 40);
    assert_eq!(grh[0] >> 4, 6, "IPv6");
    assert_eq!(grh[6], 17, "next header UDP");
    let src: std::net::Ipv6Addr = <[u8; 16]>::try_from(&grh[8..24]).unwrap().into();
    let dst: std::net::Ipv6Addr = <[u8; 16]>::try_from(&grh[24..40]).unwrap().into();
    assert_eq!(src, "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(dst, "2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap());
    same(&h.mem(1, 0x8000 + 40, 300), &d, "UD payload");
}

#[test]
fn rc_over_ipv6() {
    let mut h = H::new(PairConfig {
        ipv6: true,
        ..Default::default()
    });
    let d = pattern(32, 5000);
    h.fill(0, 0, &d);
    let op = h.write_op(1, 0x1000);
    h.send(0, wr(1, op, h.sgl(0, 0, 5000)));
    let op = h.read_op(1, 0x1000);
    h.send(0, wr(2, op, h.sgl(0, 0x4000, 5000)));
    h.run_for_wcs(2, 0);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    same(&h.mem(1, 0x1000, 5000), &d, "WRITE");
    same(&h.mem(0, 0x4000, 5000), &d, "READ");
}

// ---- UD message size follows the port's active MTU ----

/// A UD pair whose ports run at active MTU `mtu`.
fn ud_at(mtu: u32) -> H {
    let mut h = ud();
    for n in 0..2 {
        h.p.sim.nodes[n].set_port_mtu(mtu).unwrap();
        assert_eq!(h.p.sim.nodes[n].port_mtu(), mtu);
    }
    h
}

#[test]
fn ud_mtu_defaults_to_4096_and_follows_the_port() {
    let h = ud();
    assert_eq!(h.p.sim.nodes[0].port_mtu(), 4096);
    assert_eq!(h.qp(0).mtu, 4096, "a UD QP takes the port's active MTU");
    let mut h = ud_at(1024);
    assert_eq!((h.qp(0).mtu, h.qp(1).mtu), (1024, 1024));
    // not an IB MTU
    for bad in [0, 1500, 9000] {
        let r = h.p.sim.nodes[0].set_port_mtu(bad);
        assert!(r.is_err(), "{bad}: {r:?}");
    }
    assert_eq!(h.p.sim.nodes[0].port_mtu(), 1024);
    // RC QPs keep their own path MTU
    let rc = H::rc();
    assert_eq!(rc.qp(0).mtu, 1024);
}

#[test]
fn ud_messages_of_2048_and_4096_bytes_are_one_packet() {
    for mtu in [2048u32, 4096] {
        let mut h = ud_at(mtu);
        let sizes = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = sizes.clone();
        h.sim().filter = Some(Box::new(move |_, f| {
            if let Ok(r) = nic::wire::RoceRepr::parse(f) {
                seen.borrow_mut().push((r.bth.opcode, r.payload.len()));
            }
            true
        }));
        let d = pattern(mtu, mtu as usize);
        h.fill(0, 0, &d);
        h.recv(1, 1, 0x8000, mtu + 40);
        h.recv(1, 2, 0x10000, mtu + 40);
        let w = ud_wr(&h, 1, SendOp::Send, 0, mtu, QKEY);
        h.send(0, w);
        let w = ud_wr(&h, 2, SendOp::SendWithImm { imm: 5 }, 0, mtu - 3, QKEY);
        h.send(0, w);
        h.run_for_wcs(2, 2);
        let (wa, wb) = (h.take(0), h.take(1));
        assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
        assert_eq!(wb.len(), 2);
        assert!(wb.iter().all(|w| w.status == WcStatus::Success), "{wb:?}");
        assert_eq!(wb[0].byte_len, 40 + mtu, "mtu {mtu}");
        assert_eq!((wb[1].byte_len, wb[1].imm), (40 + mtu - 3, Some(5)));
        same(&h.mem(1, 0x8000 + 40, mtu as usize), &d, "UD at the MTU");
        same(
            &h.mem(1, 0x10000 + 40, mtu as usize - 3),
            &d[..mtu as usize - 3],
            "UD just under the MTU",
        );
        assert_eq!(h.counters(0).sent_pkts, 2, "one packet per message");
        assert_eq!(
            *sizes.borrow(),
            [
                (Opcode::UD_SEND_ONLY, mtu as usize),
                (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, mtu as usize - 3)
            ]
        );
        // one byte more than the port's MTU: a local length error (IBA 9.8:
        // UD messages are single packets), nothing on the wire
        let w = ud_wr(&h, 3, SendOp::Send, 0, mtu + 1, QKEY);
        h.send(0, w);
        h.settle(std::time::Duration::from_millis(10));
        let wa = h.take(0);
        assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::LocLenErr));
        assert_eq!(h.counters(0).sent_pkts, 2);
        assert_eq!(h.qp(0).state, QpState::Sqe);
    }
}

#[test]
fn ud_limit_shrinks_with_the_port_mtu() {
    // a 1024-byte port (an interface MTU of 1500) refuses a 2048-byte message
    let mut h = ud_at(1024);
    h.recv(1, 1, 0x8000, 4096);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 2048, QKEY);
    h.send(0, w);
    h.settle(std::time::Duration::from_millis(10));
    assert_eq!(h.take(0)[0].status, WcStatus::LocLenErr);
    assert!(h.take(1).is_empty());
    // and 1024 bytes go
    let mut h = ud_at(1024);
    h.recv(1, 1, 0x8000, 4096);
    let w = ud_wr(&h, 1, SendOp::Send, 0, 1024, QKEY);
    h.send(0, w);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(1)[0].byte_len, 40 + 1024);
}
