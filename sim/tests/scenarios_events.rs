//! Scenario tests: the affiliated asynchronous events (`ibv_get_async_event`,
//! IBTA 11.6.3), each raised where the IBTA says it happens, on the
//! simulator: COMM_EST, QP_REQ_ERR, QP_ACCESS_ERR, QP_FATAL with CQ_ERR,
//! SQ_DRAINED and QP_LAST_WQE_REACHED.

mod common;

use common::*;
use nic::device::Rnic;
use nic::verbs::AsyncEvent;
use nic::verbs::{AhAttr, QpAttr, QpState, QpType, RecvWr, SendOp, WcStatus};
use sim::PairConfig;
use std::time::Duration;

fn events(r: &mut Rnic) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| r.poll_async_event()).collect()
}

fn to(s: QpState) -> QpAttr {
    QpAttr {
        state: Some(s),
        ..Default::default()
    }
}

#[test]
fn event_numbers_follow_rdma_core() {
    // rdma-core verbs.h `enum ibv_event_type`
    let want = [
        (AsyncEvent::CqErr(0), 0),
        (AsyncEvent::QpFatal(0), 1),
        (AsyncEvent::QpReqErr(0), 2),
        (AsyncEvent::QpAccessErr(0), 3),
        (AsyncEvent::CommEst(0), 4),
        (AsyncEvent::SqDrained(0), 5),
        (AsyncEvent::SrqLimitReached(0), 15),
        (AsyncEvent::QpLastWqeReached(0), 16),
    ];
    for (ev, n) in want {
        assert_eq!(ev.ibv_event_type(), n, "{ev:?}");
    }
}

/// Side 1's QP back to RTR only (RESET → INIT → RTR), ready to receive.
fn side1_rtr_only(h: &mut H, qp_type: QpType) {
    let cfg = PairConfig {
        qp_type,
        ..Default::default()
    };
    let q = h.ep(1).qpn;
    let (gid, mac, peer) = (h.p.sides[0].gid, h.p.sides[0].mac, h.ep(0).qpn);
    let r = &mut h.p.sim.nodes[1];
    r.modify_qp(q, &to(QpState::Reset)).unwrap();
    let all = nic::verbs::access::LOCAL_WRITE
        | nic::verbs::access::REMOTE_WRITE
        | nic::verbs::access::REMOTE_READ;
    r.modify_qp(
        q,
        &QpAttr {
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(all),
            ..to(QpState::Init)
        },
    )
    .unwrap();
    let mut rtr = QpAttr {
        ah: Some(AhAttr::new(gid, mac)),
        path_mtu: Some(cfg.mtu),
        dest_qpn: Some(peer),
        rq_psn: Some(cfg.sq_psn[0]),
        ..to(QpState::Rtr)
    };
    if qp_type == QpType::Rc {
        rtr.max_dest_rd_atomic = Some(4);
        rtr.min_rnr_timer = Some(1);
    }
    r.modify_qp(q, &rtr).unwrap();
    assert_eq!(h.qp(1).state, QpState::Rtr);
}

#[test]
fn comm_est_on_first_packet_in_rtr() {
    for t in [QpType::Rc, QpType::Uc] {
        let mut h = H::new(PairConfig {
            qp_type: t,
            ..Default::default()
        });
        side1_rtr_only(&mut h, t);
        assert_eq!(events(&mut h.p.sim.nodes[1]), vec![], "{t:?}: nothing yet");
        h.fill(0, 0, b"hello, RTR");
        for k in 0..2u64 {
            let op = h.write_op(1, 0x100 * k);
            h.send(0, wr(k, op, h.sgl(0, 0, 10)));
        }
        h.run_for_wcs(2, 0);
        // UC completes on sending: let the packets arrive
        h.settle(Duration::from_millis(10));
        assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(h.mem(1, 0x100, 10), b"hello, RTR", "{t:?}");
        // IBTA 11.6.3.1: one event, however many packets arrive in RTR
        let q1 = h.ep(1).qpn;
        assert_eq!(
            events(&mut h.p.sim.nodes[1]),
            vec![AsyncEvent::CommEst(q1)],
            "{t:?}"
        );
        assert_eq!(
            events(&mut h.p.sim.nodes[0]),
            vec![],
            "{t:?}: the sender in RTS"
        );
        // in RTS, traffic raises nothing more
        let rts = QpAttr {
            sq_psn: Some(0x200),
            timeout: Some(8),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(4),
            ..to(QpState::Rts)
        };
        let rts = if t == QpType::Uc {
            QpAttr {
                sq_psn: Some(0x200),
                ..to(QpState::Rts)
            }
        } else {
            rts
        };
        h.p.sim.nodes[1].modify_qp(q1, &rts).unwrap();
        let op = h.write_op(1, 0x200);
        h.send(0, wr(9, op, h.sgl(0, 0, 10)));
        h.run_for_wcs(1, 0);
        assert_eq!(events(&mut h.p.sim.nodes[1]), vec![], "{t:?}");
    }
}

#[test]
fn remote_access_error_raises_qp_access_err_on_the_responder() {
    let mut h = H::rc();
    let e1 = h.ep(1);
    let bad = SendOp::Write {
        remote_addr: e1.base,
        rkey: e1.rkey ^ 0x100,
    };
    h.send(0, wr(1, bad, h.sgl(0, 0, 64)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::RemAccessErr);
    h.settle(Duration::from_millis(10));
    assert_eq!(h.qp(1).state, QpState::Err, "class C: the responder fails");
    assert_eq!(
        events(&mut h.p.sim.nodes[1]),
        vec![AsyncEvent::QpAccessErr(e1.qpn)]
    );
    // the requester's failure is reported by its completion, not an event
    assert_eq!(events(&mut h.p.sim.nodes[0]), vec![]);
}

#[test]
fn invalid_request_raises_qp_req_err_on_the_responder() {
    let mut h = H::rc();
    // a SEND longer than the receive buffer: NAK invalid request
    h.recv(1, 7, 0, 16);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 100)));
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(h.take(1)[0].status, WcStatus::LocLenErr);
    h.settle(Duration::from_millis(10));
    let q1 = h.ep(1).qpn;
    assert_eq!(h.qp(1).state, QpState::Err);
    assert_eq!(
        events(&mut h.p.sim.nodes[1]),
        vec![AsyncEvent::QpReqErr(q1)]
    );
    assert_eq!(events(&mut h.p.sim.nodes[0]), vec![]);
}

#[test]
fn cq_overrun_raises_cq_err_and_qp_fatal() {
    let mut h = H::new(PairConfig {
        cq_len: 2,
        ..Default::default()
    });
    for k in 0..4 {
        h.recv(1, k, 0x100 * k, 64);
    }
    for k in 0..4 {
        h.send(0, wr_unsig(k, SendOp::Send, h.sgl(0, 0, 16)));
    }
    // side 1 does not poll: its third receive completion overruns the CQ
    h.p.sim.run_until(Duration::from_millis(10), |_| false);
    let (c1, q1) = (h.ep(1).cq, h.ep(1).qpn);
    assert_eq!(h.qp(1).state, QpState::Err);
    assert_eq!(h.counters(1).cq_overrun, 1);
    // once each: further completions into the overrun CQ raise nothing
    assert_eq!(
        events(&mut h.p.sim.nodes[1]),
        vec![AsyncEvent::CqErr(c1), AsyncEvent::QpFatal(q1)]
    );
    assert_eq!(events(&mut h.p.sim.nodes[0]), vec![]);
}

#[test]
fn sq_drained_once_messages_in_progress_complete() {
    let mut h = H::rc();
    // idle QP: drained at once
    let q0 = h.ep(0).qpn;
    h.p.sim.nodes[0].modify_qp(q0, &to(QpState::Sqd)).unwrap();
    assert_eq!(
        events(&mut h.p.sim.nodes[0]),
        vec![AsyncEvent::SqDrained(q0)]
    );
    // SQD → SQD is no new drain
    h.p.sim.nodes[0].modify_qp(q0, &to(QpState::Sqd)).unwrap();
    assert_eq!(events(&mut h.p.sim.nodes[0]), vec![]);
    h.p.sim.nodes[0].modify_qp(q0, &to(QpState::Rts)).unwrap();

    // four 4-packet WRITEs; SQD once the first packets are out
    for k in 0..4u64 {
        let op = h.write_op(1, 0x1000 * k);
        h.send(0, wr(k, op, h.sgl(0, 0, 4096)));
    }
    // the first two packets of the first WRITE leave, then SQD
    let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
    for _ in 0..2 {
        let now = h.p.sim.now;
        let n = h.p.sim.nodes[0].poll_transmit(now, &mut buf).unwrap();
        h.p.sim.inject(0, &buf[..n]);
    }
    h.p.sim.nodes[0].modify_qp(q0, &to(QpState::Sqd)).unwrap();
    assert_eq!(
        events(&mut h.p.sim.nodes[0]),
        vec![],
        "a message is in progress"
    );
    h.settle(Duration::from_millis(50));
    let done = h.take(0);
    // IBA 10.3.1: the WRITE in progress is finished, no other begins
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        events(&mut h.p.sim.nodes[0]),
        vec![AsyncEvent::SqDrained(q0)]
    );
    // the WQEs not begun wait in the send queue; RTS sends them
    assert_eq!(h.qp(0).send_queue_len, 4 - done.len());
    h.p.sim.nodes[0].modify_qp(q0, &to(QpState::Rts)).unwrap();
    h.run_for_wcs(4 - done.len(), 0);
    assert_eq!(events(&mut h.p.sim.nodes[0]), vec![]);
}

/// Side 1 gets a second QP on an SRQ, connected to a new QP on side 0.
fn srq_pair(h: &mut H) -> (u32, u32, u32) {
    let b = h.ep(1);
    let srq = h.p.sim.nodes[1].create_srq(b.pd, 16).unwrap();
    let cfg = PairConfig {
        sq_psn: [0x1000, 0x2000],
        ..Default::default()
    };
    let (qa, qb) = h.p.add_pair(cfg, Some(srq), 64);
    (srq, qa, qb)
}

#[test]
fn last_wqe_reached_when_an_srq_qp_fails() {
    let mut h = H::rc();
    let (srq, qa, qb) = srq_pair(&mut h);
    for k in 0..2u64 {
        let sgl = h.sgl(1, 0x1000 * k, 256);
        h.p.sim.nodes[1]
            .post_srq_recv(srq, RecvWr { wr_id: k, sgl })
            .unwrap();
    }
    // a remote access error: QP_ACCESS_ERR, then LAST_WQE_REACHED
    let e1 = h.ep(1);
    let bad = SendOp::Write {
        remote_addr: e1.base,
        rkey: e1.rkey ^ 0x100,
    };
    h.p.sim.nodes[0]
        .post_send(qa, wr(1, bad, h.sgl(0, 0, 8)))
        .unwrap();
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::RemAccessErr);
    h.settle(Duration::from_millis(10));
    assert_eq!(
        events(&mut h.p.sim.nodes[1]),
        vec![
            AsyncEvent::QpAccessErr(qb),
            AsyncEvent::QpLastWqeReached(qb)
        ]
    );
    // the SRQ keeps its WQEs for the other QPs
    assert_eq!(h.p.sim.nodes[1].query_srq(srq).unwrap().2, 2);
    // moving to ERR by hand raises it too, once
    let (_, _, qb2) = srq_pair(&mut h);
    h.p.sim.nodes[1].modify_qp(qb2, &to(QpState::Err)).unwrap();
    h.p.sim.nodes[1].modify_qp(qb2, &to(QpState::Err)).unwrap();
    assert_eq!(
        events(&mut h.p.sim.nodes[1]),
        vec![AsyncEvent::QpLastWqeReached(qb2)]
    );
    // a QP without an SRQ going to ERR does not raise it
    let q1 = h.ep(1).qpn;
    h.p.sim.nodes[1].modify_qp(q1, &to(QpState::Err)).unwrap();
    assert_eq!(events(&mut h.p.sim.nodes[1]), vec![]);
}

/// The port events without an engine or a clock: the device raises
/// PORT_ERR / PORT_ACTIVE once per change of the link state its owner
/// reports (IBTA 11.6.3.2), nothing for the same state again, and nothing
/// for the state it starts in; `port_attr` follows. (`engine_port.rs`
/// checks that the engine polls a port's link and feeds it here.)
#[test]
fn port_events_once_per_link_change() {
    use nic::device::PortState;
    use nic::verbs::Affiliated;
    let mut h = H::rc();
    let r = &mut h.p.sim.nodes[0];
    r.init_link_up(false);
    assert!(events(r).is_empty(), "an event for the starting state");
    assert_eq!(r.port_attr().state, PortState::Down);
    assert!(!r.set_link_up(false), "the same state is no change");
    assert!(events(r).is_empty());
    assert!(r.set_link_up(true));
    assert!(!r.set_link_up(true));
    assert_eq!(events(r), vec![AsyncEvent::PortActive(1)]);
    assert_eq!(r.port_attr().state, PortState::Active);
    assert!(r.set_link_up(false));
    assert!(r.set_link_up(true));
    assert!(r.set_link_up(false));
    assert_eq!(
        events(r),
        vec![
            AsyncEvent::PortErr(1),
            AsyncEvent::PortActive(1),
            AsyncEvent::PortErr(1)
        ]
    );
    assert_eq!(r.port_attr().state, PortState::Down);
    assert_eq!(AsyncEvent::PortErr(1).affiliated(), Affiliated::Port(1));
}
