//! Scenario tests: the QP state machine through the `Rnic` API (illegal
//! transitions and missing attributes refused with the right error, posting
//! in states that do not allow it), errors flushing both queues, and CQ
//! overflow as an error rather than silent loss.

mod common;

use common::*;
use nic::device::Rnic;
use nic::transport::{QpInit, RnicConfig};
use nic::verbs::VerbsError;
use nic::verbs::{
    access, AhAttr, ModifyError, QpAttr, QpState, QpType, RecvWr, SendOp, Sgl, WcStatus,
};
use nic::wire::{EthernetAddress, Gid};
use sim::PairConfig;

fn rnic() -> (Rnic, u32, u32) {
    let mut r = Rnic::new(RnicConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, 9]),
        Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 9)),
    ));
    let pd = r.alloc_pd();
    let cq = r.create_cq(64);
    (r, pd, cq)
}

fn qp(r: &mut Rnic, pd: u32, cq: u32, t: QpType) -> u32 {
    r.create_qp(QpInit {
        qp_type: t,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 8,
        max_recv_wr: 8,
        sq_sig_all: true,
    })
    .unwrap()
}

fn to(s: QpState) -> QpAttr {
    QpAttr {
        state: Some(s),
        ..Default::default()
    }
}

fn init_attr() -> QpAttr {
    QpAttr {
        pkey_index: Some(0),
        port: Some(1),
        access_flags: Some(access::LOCAL_WRITE | access::REMOTE_WRITE),
        ..to(QpState::Init)
    }
}

fn rtr_attr() -> QpAttr {
    QpAttr {
        ah: Some(AhAttr::new(
            Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 8)),
            EthernetAddress([2, 0, 0, 0, 0, 8]),
        )),
        path_mtu: Some(1024),
        dest_qpn: Some(0x99),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(1),
        ..to(QpState::Rtr)
    }
}

fn rts_attr() -> QpAttr {
    QpAttr {
        sq_psn: Some(0),
        timeout: Some(10),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..to(QpState::Rts)
    }
}

fn modify_err(e: VerbsError) -> ModifyError {
    match e {
        VerbsError::Modify(m) => m,
        other => panic!("expected a modify error, got {other:?}"),
    }
}

#[test]
fn illegal_transitions_refused() {
    let (mut r, pd, cq) = rnic();
    let q = qp(&mut r, pd, cq, QpType::Rc);
    use QpState::*;
    for target in [Rtr, Rts, Sqd, Sqe] {
        let e = r.modify_qp(q, &to(target)).unwrap_err();
        assert_eq!(
            modify_err(e),
            ModifyError::IllegalTransition {
                from: Reset,
                to: target
            }
        );
        assert_eq!(r.query_qp(q).unwrap().state, Reset, "state unchanged");
    }
    r.modify_qp(q, &init_attr()).unwrap();
    let e = r.modify_qp(q, &rts_attr()).unwrap_err();
    assert_eq!(
        modify_err(e),
        ModifyError::IllegalTransition {
            from: Init,
            to: Rts
        }
    );
    r.modify_qp(q, &rtr_attr()).unwrap();
    let e = r.modify_qp(q, &init_attr()).unwrap_err();
    assert_eq!(
        modify_err(e),
        ModifyError::IllegalTransition {
            from: Rtr,
            to: Init
        }
    );
    r.modify_qp(q, &rts_attr()).unwrap();
    assert_eq!(r.query_qp(q).unwrap().state, Rts);
    // RC has no SQE
    let e = r.modify_qp(q, &to(Sqe)).unwrap_err();
    assert!(matches!(
        modify_err(e),
        ModifyError::IllegalTransition { .. }
    ));
    // any state → ERR → RESET → INIT works
    r.modify_qp(q, &to(Err)).unwrap();
    assert_eq!(r.query_qp(q).unwrap().state, Err);
    let e = r.modify_qp(q, &to(Rts)).unwrap_err();
    assert!(matches!(
        modify_err(e),
        ModifyError::IllegalTransition { .. }
    ));
    r.modify_qp(q, &to(Reset)).unwrap();
    r.modify_qp(q, &init_attr()).unwrap();
    assert_eq!(r.query_qp(q).unwrap().state, Init);
}

#[test]
fn missing_and_disallowed_attributes_refused() {
    let (mut r, pd, cq) = rnic();
    let q = qp(&mut r, pd, cq, QpType::Rc);
    // RESET → INIT needs pkey_index, port and access flags
    for (attr, name) in [
        (
            QpAttr {
                pkey_index: None,
                ..init_attr()
            },
            "pkey_index",
        ),
        (
            QpAttr {
                port: None,
                ..init_attr()
            },
            "port_num",
        ),
        (
            QpAttr {
                access_flags: None,
                ..init_attr()
            },
            "qp_access_flags",
        ),
    ] {
        let e = r.modify_qp(q, &attr).unwrap_err();
        assert_eq!(modify_err(e), ModifyError::Missing(name));
    }
    let e = r
        .modify_qp(
            q,
            &QpAttr {
                sq_psn: Some(1),
                ..init_attr()
            },
        )
        .unwrap_err();
    assert_eq!(modify_err(e), ModifyError::NotAllowed("sq_psn"));
    r.modify_qp(q, &init_attr()).unwrap();
    // INIT → RTR on RC needs the path and the responder's resources
    for (attr, name) in [
        (
            QpAttr {
                ah: None,
                ..rtr_attr()
            },
            "ah_attr",
        ),
        (
            QpAttr {
                path_mtu: None,
                ..rtr_attr()
            },
            "path_mtu",
        ),
        (
            QpAttr {
                dest_qpn: None,
                ..rtr_attr()
            },
            "dest_qp_num",
        ),
        (
            QpAttr {
                rq_psn: None,
                ..rtr_attr()
            },
            "rq_psn",
        ),
        (
            QpAttr {
                max_dest_rd_atomic: None,
                ..rtr_attr()
            },
            "max_dest_rd_atomic",
        ),
        (
            QpAttr {
                min_rnr_timer: None,
                ..rtr_attr()
            },
            "min_rnr_timer",
        ),
    ] {
        let e = r.modify_qp(q, &attr).unwrap_err();
        assert_eq!(modify_err(e), ModifyError::Missing(name));
        assert_eq!(r.query_qp(q).unwrap().state, QpState::Init);
    }
    let e = r
        .modify_qp(
            q,
            &QpAttr {
                path_mtu: Some(1500),
                ..rtr_attr()
            },
        )
        .unwrap_err();
    assert_eq!(
        modify_err(e),
        ModifyError::OutOfRange {
            name: "path_mtu",
            value: 1500
        }
    );
    r.modify_qp(q, &rtr_attr()).unwrap();
    // RTR → RTS on RC needs the requester's settings
    for (attr, name) in [
        (
            QpAttr {
                sq_psn: None,
                ..rts_attr()
            },
            "sq_psn",
        ),
        (
            QpAttr {
                timeout: None,
                ..rts_attr()
            },
            "timeout",
        ),
        (
            QpAttr {
                retry_cnt: None,
                ..rts_attr()
            },
            "retry_cnt",
        ),
        (
            QpAttr {
                rnr_retry: None,
                ..rts_attr()
            },
            "rnr_retry",
        ),
        (
            QpAttr {
                max_rd_atomic: None,
                ..rts_attr()
            },
            "max_rd_atomic",
        ),
    ] {
        let e = r.modify_qp(q, &attr).unwrap_err();
        assert_eq!(modify_err(e), ModifyError::Missing(name));
    }
    for (attr, name, value) in [
        (
            QpAttr {
                sq_psn: Some(1 << 24),
                ..rts_attr()
            },
            "sq_psn",
            1 << 24,
        ),
        (
            QpAttr {
                retry_cnt: Some(8),
                ..rts_attr()
            },
            "retry_cnt",
            8,
        ),
        (
            QpAttr {
                rnr_retry: Some(8),
                ..rts_attr()
            },
            "rnr_retry",
            8,
        ),
    ] {
        let e = r.modify_qp(q, &attr).unwrap_err();
        assert_eq!(modify_err(e), ModifyError::OutOfRange { name, value });
    }
    let e = r
        .modify_qp(
            q,
            &QpAttr {
                dest_qpn: Some(5),
                ..rts_attr()
            },
        )
        .unwrap_err();
    assert_eq!(modify_err(e), ModifyError::NotAllowed("dest_qp_num"));
    r.modify_qp(q, &rts_attr()).unwrap();
    // UD needs a Q_Key to reach INIT
    let u = qp(&mut r, pd, cq, QpType::Ud);
    let e = r
        .modify_qp(
            u,
            &QpAttr {
                access_flags: None,
                ..init_attr()
            },
        )
        .unwrap_err();
    assert_eq!(modify_err(e), ModifyError::Missing("qkey"));
    // unknown QP
    assert_eq!(
        r.modify_qp(0x5000, &init_attr()).unwrap_err(),
        VerbsError::NoSuchQp(0x5000)
    );
}

#[test]
fn post_in_wrong_state_refused() {
    let (mut r, pd, cq) = rnic();
    let q = qp(&mut r, pd, cq, QpType::Rc);
    let s = nic::verbs::SendWr::new(1, SendOp::Send, Sgl::default());
    let rw = RecvWr {
        wr_id: 1,
        sgl: Sgl::default(),
    };
    assert_eq!(
        r.post_send(q, s.clone()).unwrap_err(),
        VerbsError::BadState(QpState::Reset)
    );
    assert_eq!(
        r.post_recv(q, rw).unwrap_err(),
        VerbsError::BadState(QpState::Reset)
    );
    r.modify_qp(q, &init_attr()).unwrap();
    assert_eq!(
        r.post_send(q, s.clone()).unwrap_err(),
        VerbsError::BadState(QpState::Init)
    );
    // receives may be posted from INIT on (IBA 10.3.1)
    r.post_recv(q, rw).unwrap();
    r.modify_qp(q, &rtr_attr()).unwrap();
    assert_eq!(
        r.post_send(q, s.clone()).unwrap_err(),
        VerbsError::BadState(QpState::Rtr)
    );
    r.modify_qp(q, &rts_attr()).unwrap();
    r.post_send(q, s.clone()).unwrap();
    // the send queue has a limit
    for i in 1..8 {
        r.post_send(q, nic::verbs::SendWr::new(i, SendOp::Send, Sgl::default()))
            .unwrap();
    }
    assert_eq!(r.post_send(q, s).unwrap_err(), VerbsError::QueueFull);
    assert_eq!(r.query_qp(q).unwrap().send_queue_len, 8);
}

#[test]
fn modify_to_err_flushes_both_queues() {
    let mut h = H::rc();
    for k in 0..3 {
        h.recv(1, 10 + k, 0x1000 * k, 64);
    }
    // B has WRs queued too (not yet sent: stop B's link first)
    h.sim().link_config_mut(1).impair.loss = 1.0;
    h.send(1, wr(1, SendOp::Send, h.sgl(1, 0, 8)));
    h.send(1, wr_unsig(2, SendOp::Send, h.sgl(1, 0, 8)));
    h.advance(std::time::Duration::from_micros(1));
    let qb = h.ep(1).qpn;
    h.p.sim.nodes[1]
        .modify_qp(
            qb,
            &QpAttr {
                state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    let wb = h.take(1);
    let mut got: Vec<(u64, WcStatus)> = wb.iter().map(|w| (w.wr_id, w.status)).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr),
        ]
    );
    let c = h.counters(1);
    assert_eq!(c.req_cqe_flush_error, 2);
    assert_eq!(c.resp_cqe_flush_error, 3);
    // receives posted in ERR are flushed at once
    h.recv(1, 20, 0, 8);
    let wb = h.take(1);
    assert_eq!((wb[0].wr_id, wb[0].status), (20, WcStatus::WrFlushErr));
    // and packets to a QP in ERR are dropped and counted
    h.fill(0, 0, &[1; 8]);
    let op = h.write_op(1, 0x100);
    h.send(0, wr(5, op, h.sgl(0, 0, 8)));
    h.advance(std::time::Duration::from_micros(50));
    assert!(h.counters(1).rx_qp_state_drop > 0);
    assert_eq!(h.mem(1, 0x100, 8), vec![0; 8]);
}

#[test]
fn cq_overflow_is_an_error_not_silent_loss() {
    let mut h = H::new(PairConfig {
        cq_len: 3,
        ..Default::default()
    });
    for k in 0..5 {
        let op = h.write_op(1, 0x100 * k);
        h.send(0, wr(k, op, h.sgl(0, 0, 16)));
    }
    // do not poll: the 4th completion overruns the CQ
    let a = h.ep(0);
    h.p.sim
        .run_until(std::time::Duration::from_millis(10), |_| false);
    let mut out = Vec::new();
    assert_eq!(
        h.p.sim.nodes[0].poll_cq(a.cq, 16, &mut out),
        Err(VerbsError::CqOverrun)
    );
    let info = h.qp(0);
    assert_eq!(info.state, QpState::Err, "a CQ overrun fails the QP");
    assert_eq!(info.counters.cq_overrun, 1);
    // with a CQ that is polled in time, the same traffic is fine
    let mut h = H::new(PairConfig {
        cq_len: 3,
        ..Default::default()
    });
    for k in 0..5 {
        let op = h.write_op(1, 0x100 * k);
        h.send(0, wr(k, op, h.sgl(0, 0, 16)));
        h.run_for_wcs(k as usize + 1, 0);
    }
    assert_eq!(h.counters(0).cq_overrun, 0);
}

#[test]
fn create_with_bad_objects_refused() {
    let (mut r, pd, cq) = rnic();
    let bad_cq = r.create_qp(QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq: 77,
        recv_cq: cq,
        srq: None,
        max_send_wr: 1,
        max_recv_wr: 1,
        sq_sig_all: false,
    });
    assert_eq!(bad_cq.unwrap_err(), VerbsError::NoSuchCq(77));
    let bad_pd = r.create_qp(QpInit {
        qp_type: QpType::Rc,
        pd: 9,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 1,
        max_recv_wr: 1,
        sq_sig_all: false,
    });
    assert_eq!(bad_pd.unwrap_err(), VerbsError::NoSuchPd(9));
    let bad_srq = r.create_qp(QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(3),
        max_send_wr: 1,
        max_recv_wr: 1,
        sq_sig_all: false,
    });
    assert_eq!(bad_srq.unwrap_err(), VerbsError::NoSuchSrq(3));
    // remote write without local write is refused (ibv_reg_mr(3))
    let mem = std::sync::Arc::new(nic::verbs::HeapMemory::new(64));
    assert!(matches!(
        r.reg_mr(pd, mem, 0, 0, 64, access::REMOTE_WRITE),
        Err(VerbsError::BadMr(_))
    ));
}

/// ibv_destroy_srq: refused while a QP is attached (EBUSY in the verbs);
/// once the QP is gone the SRQ goes, posting to it is refused, and its
/// number is handed out again.
#[test]
fn destroy_srq_refused_while_attached_then_reused() {
    let (mut r, pd, cq) = rnic();
    let srq = r.create_srq(pd, 8).unwrap();
    let attached = r
        .create_qp(QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            max_send_wr: 1,
            max_recv_wr: 1,
            sq_sig_all: false,
        })
        .unwrap();
    let mem = std::sync::Arc::new(nic::verbs::HeapMemory::new(64));
    let (lkey, _) = r.reg_mr(pd, mem, 0, 0, 64, access::LOCAL_WRITE).unwrap();
    let recv = |id| RecvWr {
        wr_id: id,
        sgl: Sgl::single(0, 64, lkey),
    };
    r.post_srq_recv(srq, recv(1)).unwrap();
    assert_eq!(r.destroy_srq(srq), Err(VerbsError::SrqInUse(srq)));
    r.destroy_qp(attached).unwrap();
    assert_eq!(r.destroy_srq(srq), Ok(()));
    assert_eq!(r.destroy_srq(srq), Err(VerbsError::NoSuchSrq(srq)));
    assert_eq!(
        r.post_srq_recv(srq, recv(2)),
        Err(VerbsError::NoSuchSrq(srq))
    );
    let again = r.create_srq(pd, 8).unwrap();
    assert_eq!(again, srq, "the freed number is reused");
    r.post_srq_recv(again, recv(3)).unwrap();
}
