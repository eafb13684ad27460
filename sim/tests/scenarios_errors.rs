//! Scenario tests: every NAK kind, RNR, retry exhaustion and remote access
//! errors on RC, with error completions, QP states, flushes, untouched
//! target memory and counters asserted.

mod common;

use common::*;
use nic::verbs::{access, Memory, MwType, QpState, RecvWr, SendOp, Sgl, WcOpcode, WcStatus};
use nic::wire::Opcode;
use sim::PairConfig;
use std::sync::Arc;
use std::time::Duration;

// ---- PSN sequence error NAK ----

#[test]
fn nak_psn_sequence_error_then_go_back_n() {
    let mut h = H::rc();
    let data = pattern(1, 8 * 1024);
    h.fill(0, 0, &data);
    // drop the second packet of the 8-packet WRITE, once
    h.sim().filter = Some(drop_nth(0, 1, |op, _| {
        op == Opcode::RC_RDMA_WRITE_MIDDLE || op == Opcode::RC_RDMA_WRITE_FIRST
    }));
    let op = h.write_op(1, 0x4000);
    h.send(0, wr(1, op, h.sgl(0, 0, 8 * 1024)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    same(&h.mem(1, 0x4000, 8 * 1024), &data, "WRITE target");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(h.p.sim.link_stats(0).filtered, 1);
    // packets 3..8 arrived out of sequence; only one NAK for the gap (C9-97)
    assert_eq!(cb.out_of_sequence, 6);
    assert_eq!(ca.packet_seq_err, 1, "one PSN sequence error NAK");
    assert_eq!(
        ca.local_ack_timeout_err, 0,
        "recovered by the NAK, not a timeout"
    );
    // go-back-N resends packets 2..8
    assert_eq!(ca.retransmitted_pkts, 7);
    assert_eq!(ca.sent_pkts, 15);
    assert_eq!(cb.rx_write_requests, 1);
    assert_eq!(h.qp(0).state, QpState::Rts);
    assert_eq!(h.qp(1).state, QpState::Rts);
}

#[test]
fn lost_ack_recovers_by_timeout_and_duplicate_is_acked() {
    let mut h = H::rc();
    h.fill(0, 0, &pattern(2, 1000));
    h.recv(1, 5, 0x8000, 1000);
    // drop the one ACK
    h.sim().filter = Some(drop_nth(1, 0, |op, _| op == Opcode::RC_ACKNOWLEDGE));
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 1000)));
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let wb = h.take(1);
    assert_eq!(wb[0].status, WcStatus::Success);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.local_ack_timeout_err, 1);
    assert_eq!(ca.retransmitted_pkts, 1);
    // the resent SEND is a duplicate: acknowledged, not delivered twice
    assert_eq!(cb.duplicate_request, 1);
    assert_eq!(cb.rdma_recvs, 1);
    same(&h.mem(1, 0x8000, 1000), &pattern(2, 1000), "SEND target");
}

// ---- invalid request NAK ----

#[test]
fn nak_invalid_request_send_longer_than_receive() {
    let mut h = H::rc();
    h.fill(0, 0, &pattern(3, 3000));
    h.recv(1, 10, 0x8000, 2000);
    h.recv(1, 11, 0x9000, 4096);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 3000)));
    h.send(0, wr(2, SendOp::Send, h.sgl(0, 0, 10)));
    h.run_for_wcs(2, 2);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RemInvReqErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!((wb[0].wr_id, wb[0].status), (10, WcStatus::LocLenErr));
    assert_eq!((wb[1].wr_id, wb[1].status), (11, WcStatus::WrFlushErr));
    assert_eq!(h.qp(0).state, QpState::Err);
    assert_eq!(h.qp(1).state, QpState::Err);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.req_remote_invalid_request, 1);
    assert_eq!(ca.req_cqe_error, 1);
    assert_eq!(ca.req_cqe_flush_error, 1);
    assert_eq!(cb.resp_invalid_request, 1);
    assert_eq!(cb.resp_local_length_error, 1);
    assert_eq!(cb.resp_cqe_error, 1);
    assert_eq!(cb.resp_cqe_flush_error, 1);
}

#[test]
fn nak_invalid_request_operation_not_enabled_on_qp() {
    // The QP (not the MR) lacks remote write: IBA 9.7.5.1.3 → invalid request.
    let mut h = H::rc();
    let b = h.ep(1);
    let attr = nic::verbs::QpAttr {
        access_flags: Some(access::LOCAL_WRITE | access::REMOTE_READ),
        ..Default::default()
    };
    h.p.sim.nodes[1].modify_qp(b.qpn, &attr).unwrap();
    h.fill(0, 0, &[1; 64]);
    let before = h.whole_mem(1);
    let op = h.write_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0, 64)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::RemInvReqErr);
    assert!(h.whole_mem(1) == before, "target memory changed");
    assert_eq!(h.counters(1).resp_invalid_request, 1);
    assert_eq!(h.counters(0).req_remote_invalid_request, 1);
    assert_eq!(h.qp(1).state, QpState::Err);
}

// ---- remote access error NAK ----

/// Runs one failing request from A against B's memory and checks that it
/// ends in REM_ACCESS_ERR with B's memory unchanged byte for byte, the
/// WQEs behind it flushed and both QPs in ERR.
fn remote_access_case(h: &mut H, op: SendOp, len: u32) {
    h.fill(0, 0, &pattern(9, 64 * 1024));
    h.fill(1, 0, &pattern(10, 64 * 1024));
    let before = h.whole_mem(1);
    h.recv(1, 50, 0x20000, 64);
    h.send(0, wr(1, op, h.sgl(0, 0, len)));
    let op2 = h.write_op(1, 0x100);
    h.send(0, wr(2, op2, h.sgl(0, 0, 64)));
    h.run_for_wcs(2, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RemAccessErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!((wb[0].wr_id, wb[0].status), (50, WcStatus::WrFlushErr));
    assert!(
        h.whole_mem(1) == before,
        "target memory changed at {:?}",
        h.whole_mem(1).iter().zip(&before).position(|(a, b)| a != b)
    );
    assert_eq!(h.qp(0).state, QpState::Err);
    assert_eq!(h.qp(1).state, QpState::Err);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.req_remote_access_errors, 1);
    assert_eq!(ca.req_cqe_error, 1);
    assert_eq!(ca.req_cqe_flush_error, 1);
    assert_eq!(cb.resp_remote_access_errors, 1);
    assert_eq!(
        cb.rx_write_requests + cb.rx_read_requests + cb.rx_atomic_requests,
        0
    );
}

#[test]
fn rem_access_bad_rkey() {
    for kind in 0..3 {
        let mut h = H::rc();
        let b = h.ep(1);
        let bad = b.rkey ^ 0x01; // same region index, wrong key byte
        let op = match kind {
            0 => SendOp::Write {
                remote_addr: b.base,
                rkey: bad,
            },
            1 => SendOp::Read {
                remote_addr: b.base,
                rkey: bad,
            },
            _ => SendOp::FetchAdd {
                remote_addr: b.base,
                rkey: bad,
                add: 1,
            },
        };
        let len = if kind == 2 { 8 } else { 5000 };
        remote_access_case(&mut h, op, len);
    }
}

#[test]
fn rem_access_out_of_bounds() {
    for kind in 0..4 {
        let mut h = H::new(PairConfig {
            mem_len: 64 * 1024,
            ..Default::default()
        });
        let b = h.ep(1);
        let end = b.base + 64 * 1024;
        // a multi-packet WRITE whose last byte is one past the region: the
        // first packet is in bounds, but the RETH's whole range is checked
        let (op, len) = match kind {
            0 => (
                SendOp::Write {
                    remote_addr: end - 4999,
                    rkey: b.rkey,
                },
                5000,
            ),
            1 => (
                SendOp::Read {
                    remote_addr: end - 100,
                    rkey: b.rkey,
                },
                101,
            ),
            2 => (
                SendOp::Write {
                    remote_addr: b.base - 1,
                    rkey: b.rkey,
                },
                10,
            ),
            _ => (
                SendOp::CompareSwap {
                    remote_addr: end,
                    rkey: b.rkey,
                    compare: 0,
                    swap: 1,
                },
                8,
            ),
        };
        remote_access_case(&mut h, op, len);
    }
}

#[test]
fn rem_access_missing_access_rights() {
    // Regions on B lacking each remote right in turn.
    let cases = [
        // (region access, op kind)
        (access::LOCAL_WRITE | access::REMOTE_READ, 0), // WRITE needs REMOTE_WRITE
        (access::LOCAL_WRITE | access::REMOTE_WRITE, 1), // READ needs REMOTE_READ
        (
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            2,
        ), // atomics need REMOTE_ATOMIC
    ];
    for (acc, kind) in cases {
        let mut h = H::rc();
        let b = h.ep(1);
        let mem = h.p.sides[1].mem.clone();
        let va = 0x5000_0000u64;
        let (_, rkey) = h.p.sim.nodes[1]
            .reg_mr(b.pd, mem as Arc<dyn Memory>, 0x8000, va, 0x8000, acc)
            .unwrap();
        let op = match kind {
            0 => SendOp::Write {
                remote_addr: va,
                rkey,
            },
            1 => SendOp::Read {
                remote_addr: va,
                rkey,
            },
            _ => SendOp::CompareSwap {
                remote_addr: va + 8,
                rkey,
                compare: 0,
                swap: 1,
            },
        };
        let len = if kind == 2 { 8 } else { 3000 };
        remote_access_case(&mut h, op, len);
    }
}

// ---- remote operational error NAK ----

#[test]
fn nak_remote_operational_error_bad_receive_lkey() {
    // A receive WQE naming a key that is not ours cannot take the data: the
    // responder NAKs with remote operational error.
    let mut h = H::rc();
    let b = h.ep(1);
    h.p.sim.nodes[1]
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 70,
                sgl: Sgl::single(b.base, 100, b.lkey ^ 0x80),
            },
        )
        .unwrap();
    h.fill(0, 0, &[5; 100]);
    let before = h.whole_mem(1);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 100)));
    h.run_for_wcs(1, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!(wa[0].status, WcStatus::RemOpErr);
    assert_ne!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].wr_id, 70);
    assert!(h.whole_mem(1) == before);
    assert_eq!(h.counters(0).req_remote_operational_error, 1);
    assert_eq!(h.qp(0).state, QpState::Err);
    assert_eq!(h.qp(1).state, QpState::Err);
}

// ---- RNR ----

#[test]
fn rnr_retries_then_success() {
    let mut h = H::new(PairConfig {
        rnr_retry: 3,
        ..Default::default()
    });
    let data = pattern(11, 2500);
    h.fill(0, 0, &data);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 2500)));
    // two RNR NAKs, then the receive shows up
    h.run_until(Duration::from_millis(10), |s, _| {
        s.nodes[0].counters().rnr_nak_retry_err >= 2
    });
    assert!(h.wcs[0].is_empty());
    h.recv(1, 9, 0x8000, 4096);
    h.run_for_wcs(1, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 2500);
    same(&h.mem(1, 0x8000, 2500), &data, "SEND target");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.rnr_nak_retry_err, 2);
    assert_eq!(cb.out_of_buffer, 2);
    assert_eq!(ca.retry_rnr_exceeded_err, 0);
    assert_eq!(cb.rdma_recvs, 1);
    assert!(ca.retransmitted_pkts >= 2);
}

#[test]
fn rnr_on_write_with_imm() {
    let mut h = H::new(PairConfig {
        rnr_retry: 3,
        ..Default::default()
    });
    h.fill(0, 0, &[3; 100]);
    let b = h.ep(1);
    h.send(
        0,
        wr(
            1,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x100,
                rkey: b.rkey,
                imm: 5,
            },
            h.sgl(0, 0, 100),
        ),
    );
    h.run_until(Duration::from_millis(10), |s, _| {
        s.nodes[0].counters().rnr_nak_retry_err >= 1
    });
    // an RNR'd WRITE_WITH_IMM has not touched memory
    assert_eq!(h.mem(1, 0x100, 100), vec![0; 100]);
    h.recv(1, 9, 0, 0);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let wb = h.take(1);
    assert_eq!(wb[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wb[0].imm, Some(5));
    assert_eq!(h.mem(1, 0x100, 100), vec![3; 100]);
    assert_eq!(h.counters(1).out_of_buffer, 1);
    assert_eq!(h.counters(1).rx_write_requests, 1);

    // A multi-packet WRITE_WITH_IMM is RNR-NAKed at its LAST packet; only
    // that packet is resent, and the message completes once.
    let data = pattern(13, 3000);
    h.fill(0, 0x1000, &data);
    h.send(
        0,
        wr(
            2,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x4000,
                rkey: b.rkey,
                imm: 6,
            },
            h.sgl(0, 0x1000, 3000),
        ),
    );
    h.run_until(Duration::from_millis(10), |s, _| {
        s.nodes[0].counters().rnr_nak_retry_err >= 2
    });
    h.recv(1, 10, 0, 0);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let wb = h.take(1);
    assert_eq!(
        (wb[0].wr_id, wb[0].imm, wb[0].byte_len),
        (10, Some(6), 3000)
    );
    same(&h.mem(1, 0x4000, 3000), &data, "WRITE_WITH_IMM target");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(cb.rx_write_requests, 2);
    assert_eq!(cb.out_of_buffer, 2);
    // (1 + 1 resent) + (3 + 1 resent LAST): only the NAKed packet is resent
    assert_eq!(ca.sent_pkts, 6);
    assert_eq!(ca.retransmitted_pkts, 2);
}

#[test]
fn rnr_retry_exhaustion() {
    let mut h = H::new(PairConfig {
        rnr_retry: 3,
        ..Default::default()
    });
    h.recv(1, 1, 0x8000, 64);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 64)));
    h.send(0, wr(2, SendOp::Send, h.sgl(0, 0, 64)));
    h.send(0, wr(3, SendOp::Send, h.sgl(0, 0, 64)));
    h.run_for_wcs(3, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!((wb[0].wr_id, wb[0].status), (1, WcStatus::Success));
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::RnrRetryExcErr));
    assert_eq!((wa[2].wr_id, wa[2].status), (3, WcStatus::WrFlushErr));
    assert_eq!(h.qp(0).state, QpState::Err);
    let ca = h.counters(0);
    // rnr_retry = 3: the first RNR NAK and three retries, each NAKed
    assert_eq!(ca.rnr_nak_retry_err, 4);
    assert_eq!(ca.retry_rnr_exceeded_err, 1);
    assert_eq!(ca.req_cqe_error, 1);
    assert_eq!(ca.req_cqe_flush_error, 1);
    assert_eq!(h.counters(1).out_of_buffer, 4);
}

#[test]
fn rnr_retry_7_retries_forever() {
    let mut h = H::new(PairConfig {
        rnr_retry: 7,
        ..Default::default()
    });
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 64)));
    h.run_until(Duration::from_secs(1), |s, _| {
        s.nodes[0].counters().rnr_nak_retry_err >= 100
    });
    assert!(h.wcs[0].is_empty(), "{:?}", h.wcs[0]);
    assert_eq!(h.qp(0).state, QpState::Rts);
    h.recv(1, 9, 0x8000, 64);
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let ca = h.counters(0);
    assert!(ca.rnr_nak_retry_err >= 100);
    assert_eq!(ca.retry_rnr_exceeded_err, 0);
    assert_eq!(h.counters(1).out_of_buffer, ca.rnr_nak_retry_err);
}

// ---- transport retry exhaustion ----

#[test]
fn retry_exhaustion_flushes_and_errors_qp() {
    let mut h = H::new(PairConfig {
        retry_cnt: 3,
        ..Default::default()
    });
    h.sim().link_config_mut(0).impair.loss = 1.0;
    h.fill(0, 0, &pattern(12, 4096));
    let op = h.write_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0, 4096)));
    h.send(0, wr(2, SendOp::Send, h.sgl(0, 0, 10)));
    let op = h.read_op(1, 0);
    h.send(0, wr_unsig(3, op, h.sgl(0, 0x2000, 10)));
    h.run_for_wcs(3, 0);
    let wa = h.take(0);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!((wa[2].wr_id, wa[2].status), (3, WcStatus::WrFlushErr));
    let q = h.qp(0);
    assert_eq!(q.state, QpState::Err);
    assert_eq!(q.send_queue_len, 0);
    let ca = q.counters;
    // IBA 9.7.6.1.3: retry_cnt retries after the first timeout; the
    // (retry_cnt + 1)-th timeout fails the WQE.
    assert_eq!(ca.local_ack_timeout_err, 3 + 1);
    assert_eq!(ca.retry_exceeded_err, 1);
    assert_eq!(ca.req_cqe_error, 1);
    assert_eq!(ca.req_cqe_flush_error, 2);
    assert!(ca.retransmitted_pkts > 0);
    assert_eq!(h.p.sim.link_stats(0).delivered, 0);
    // each of the 4 timeouts waited 4.096 us * 2^timeout (IBA C9-140)
    let t = nic::transport::timers::local_ack_timeout(8).unwrap();
    assert!(h.p.sim.now.as_nanos() >= 4 * t.as_nanos() as u64);
    assert!(h.p.sim.now.as_nanos() < 5 * t.as_nanos() as u64);
    // the responder never saw anything and stays usable
    assert_eq!(h.qp(1).state, QpState::Rts);
    // a WR posted in ERR is flushed at once
    h.send(0, wr(4, SendOp::Send, h.sgl(0, 0, 10)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::WrFlushErr);
}

// ---- local errors ----

#[test]
fn local_protection_error_completes_in_order() {
    // A WR with a bad lkey behind WRs already on the wire: the earlier WRs
    // complete normally first (completions are in posting order), then the
    // bad one with LOC_PROT_ERR, then the rest flush.
    let mut h = H::rc();
    h.fill(0, 0, &pattern(40, 8192));
    let op = h.write_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0, 8192)));
    let op = h.write_op(1, 0x4000);
    h.send(0, wr(2, op, h.sgl(0, 0, 100)));
    let a = h.ep(0);
    h.recv(1, 9, 0x8000, 64);
    h.send(
        0,
        wr(3, SendOp::Send, Sgl::single(a.base, 10, a.lkey ^ 0x40)),
    );
    h.send(0, wr(4, SendOp::Send, h.sgl(0, 0, 10)));
    h.run_for_wcs(4, 0);
    let wa = h.take(0);
    let got: Vec<(u64, WcStatus)> = wa.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::LocProtErr),
            (4, WcStatus::WrFlushErr)
        ]
    );
    same(
        &h.mem(1, 0, 8192),
        &pattern(40, 8192),
        "WRITE before the error",
    );
    assert_eq!(h.qp(0).state, QpState::Err);
    let ca = h.counters(0);
    assert_eq!(ca.req_cqe_error, 1);
    assert_eq!(ca.req_cqe_flush_error, 1);
    // the bad SEND never went out
    assert_eq!(h.counters(1).rdma_recvs, 0);
    assert_eq!(h.qp(1).recv_queue_len, 1);
}

#[test]
fn rnr_wait_honours_the_responders_timer() {
    // min_rnr_timer 14 = 1.28 ms (IBA Table 45): the requester waits at
    // least that long after each RNR NAK before sending again.
    let mut h = H::new(PairConfig {
        min_rnr_timer: 14,
        rnr_retry: 7,
        ..Default::default()
    });
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let l2 = log.clone();
    h.sim().tap = Some(Box::new(move |now, dir, f| {
        if let Some((op, _)) = frame_opcode_psn(f) {
            l2.borrow_mut().push((now.as_nanos(), dir, op));
        }
    }));
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 10)));
    h.run_until(Duration::from_secs(1), |s, _| {
        s.nodes[0].counters().rnr_nak_retry_err >= 3
    });
    h.recv(1, 1, 0, 64);
    h.run_for_wcs(1, 1);
    let log = log.borrow();
    let sends: Vec<u64> = log.iter().filter(|e| e.1 == 0).map(|e| e.0).collect();
    let naks: Vec<u64> = log.iter().filter(|e| e.1 == 1).map(|e| e.0).collect();
    assert!(sends.len() >= 4, "{log:?}");
    for (i, nak) in naks.iter().take(3).enumerate() {
        // the NAK arrives one latency after it was sent
        assert!(sends[i + 1] >= nak + 2_000 + 1_280_000, "{log:?}");
    }
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    let mut h = H::rc();
    let b = h.ep(1);
    h.fill(1, 0x100, &[0xAA; 32]);
    let before = h.whole_mem(1);
    h.send(
        0,
        wr(
            1,
            SendOp::FetchAdd {
                remote_addr: b.base + 0x104,
                rkey: b.rkey,
                add: 1,
            },
            h.sgl(0, 0, 8),
        ),
    );
    h.run_for_wcs(1, 0);
    // IBA 9.4.5: an atomic's target is 8 bytes, naturally aligned
    assert_eq!(h.take(0)[0].status, WcStatus::RemInvReqErr);
    assert!(h.whole_mem(1) == before);
    assert_eq!(h.counters(1).rx_atomic_requests, 0);
    assert_eq!(h.counters(1).resp_invalid_request, 1);
    assert_eq!(h.qp(1).state, QpState::Err);
}

// ---- SEND with Invalidate naming an R_Key that cannot be invalidated ----

/// A SEND_WITH_INVALIDATE whose IETH names `rkey`, which the responder
/// cannot invalidate: IBA 9.9.3 responder class J, as rxe
/// (RESPST_ERR_INVALIDATE_RKEY): the receive WQE completes with
/// REM_INV_REQ_ERR and the responder's QP fails, but the request is
/// acknowledged, so the SEND succeeds; the next request is never answered
/// and the requester's retries run out. Nothing is invalidated.
fn send_with_bad_invalidate(h: &mut H, rkey: u32) {
    let recvs_before = h.counters(1).rdma_recvs;
    h.fill(0, 0, b"invalidate?");
    h.recv(1, 10, 0x8000, 4096);
    h.recv(1, 11, 0x9000, 4096);
    h.send(
        0,
        wr(
            1,
            SendOp::SendWithInv {
                invalidate_rkey: rkey,
            },
            h.sgl(0, 0, 11),
        ),
    );
    h.send(0, wr(2, SendOp::Send, h.sgl(0, 0, 11)));
    h.run_for_wcs(2, 2);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!(
        (wa[0].wr_id, wa[0].status),
        (1, WcStatus::Success),
        "{wa:?}"
    );
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::RetryExcErr));
    assert_eq!(
        (wb[0].wr_id, wb[0].status),
        (10, WcStatus::RemInvReqErr),
        "{wb:?}"
    );
    assert_eq!(wb[0].invalidated_rkey, None);
    assert_eq!((wb[1].wr_id, wb[1].status), (11, WcStatus::WrFlushErr));
    assert_eq!(h.qp(0).state, QpState::Err);
    assert_eq!(h.qp(1).state, QpState::Err);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(
        ca.req_remote_invalid_request, 0,
        "the requester is not told"
    );
    assert_eq!(cb.resp_invalid_request, 1);
    assert_eq!(cb.rdma_recvs, recvs_before, "no receive succeeded");
}

#[test]
fn send_with_invalidate_of_unknown_rkey_is_class_j() {
    let mut h = H::rc();
    let b = h.ep(1);
    // an R_Key in no slot, and one in B's slot with the wrong key byte
    send_with_bad_invalidate(&mut h, 0x00ff_ff00 | (b.rkey & 0xff));
    let mut h = H::rc();
    let b2 = h.ep(1);
    assert_eq!(b.rkey, b2.rkey, "same seed, same keys");
    send_with_bad_invalidate(&mut h, b.rkey ^ 0x01);
}

#[test]
fn send_with_invalidate_of_a_regular_region_is_refused() {
    // IBA 10.6.7.3: a SEND with Invalidate may name a type 2 window (or a
    // fast-registration region, which this device does not have), never a
    // region of ibv_reg_mr.
    let mut h = H::rc();
    let (lkey2, rkey2) = h.reg(
        1,
        0x40000,
        0x7000_0000,
        0x1000,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
    );
    send_with_bad_invalidate(&mut h, rkey2);
    // the region is still there: B deregisters it without complaint
    assert!(h.p.sim.nodes[1].dereg_mr(lkey2).is_ok());
}

#[test]
fn send_with_invalidate_of_another_pds_window_is_class_j() {
    let mut h = H::rc();
    // a type 2 window of B under a second PD
    let pd2 = h.p.sim.nodes[1].alloc_pd();
    let mw = h.p.sim.nodes[1].alloc_mw(pd2, MwType::Type2).unwrap();
    send_with_bad_invalidate(&mut h, mw);
}

#[test]
fn send_with_invalidate_twice_fails_the_second_time() {
    let mut h = H::rc();
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE | access::MW_BIND;
    let (lkey2, _) = h.reg(1, 0x40000, 0x7000_0000, 0x1000, acc);
    let mw = h.alloc_mw(1, MwType::Type2);
    let st = h.bind(
        1,
        mw,
        0x5a,
        lkey2,
        0x7000_0000,
        0x1000,
        access::REMOTE_WRITE,
    );
    assert_eq!(st, WcStatus::Success);
    let rkey2 = h.mw_rkey(1, mw);
    h.recv(1, 1, 0x8000, 4096);
    h.send(
        0,
        wr(
            9,
            SendOp::SendWithInv {
                invalidate_rkey: rkey2,
            },
            h.sgl(0, 0, 8),
        ),
    );
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let wb = h.take(1);
    assert_eq!(
        (wb[0].status, wb[0].invalidated_rkey),
        (WcStatus::Success, Some(rkey2))
    );
    // the key is now invalid: invalidating it again is an error
    send_with_bad_invalidate(&mut h, rkey2);
}

#[test]
fn multi_packet_send_with_bad_invalidate_fails_on_its_last_packet() {
    let mut h = H::rc();
    let data = pattern(9, 3000);
    h.fill(0, 0, &data);
    h.recv(1, 10, 0x8000, 4096);
    h.send(
        0,
        wr(
            1,
            SendOp::SendWithInv {
                invalidate_rkey: 0xdead_be00,
            },
            h.sgl(0, 0, 3000),
        ),
    );
    h.run_for_wcs(1, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    // class J: acknowledged, the receive fails (see send_with_bad_invalidate)
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(wb[0].status, WcStatus::RemInvReqErr);
    assert_eq!(h.qp(1).state, QpState::Err);
}
