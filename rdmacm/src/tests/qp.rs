//! The QP an ID drives on the fake CM and fake verbs: moved to INIT, RTR
//! and RTS as the connection forms, to ERR when it ends, with the
//! options' values; synchronous listeners; QPs that cannot be readied.

use super::*;
use crate::fake::{ev, Fake};
use crate::id;
use crate::state::Lib;
use libc::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

/// A library on the fake CM and fake verbs, with both logs.
type Logs = (
    Arc<Lib>,
    Arc<Mutex<crate::fake::State>>,
    Arc<Mutex<Vec<String>>>,
    *mut rdma_event_channel,
);

fn setup_verbs() -> Logs {
    let fake = Fake::new(&[("t0", "192.0.2.1"), ("t1", "192.0.2.2")]);
    let st = fake.st.clone();
    let verbs = crate::fake::FakeVerbs {
        devs: fake.devs.clone(),
        ..Default::default()
    };
    let vlog = verbs.log.clone();
    let lib = Lib::new(Box::new(fake), Box::new(verbs));
    let chan = ChanPriv::create(lib.clone()).unwrap() as *mut rdma_event_channel;
    (lib, st, vlog, chan)
}

fn qp_attrs() -> ibv_qp_init_attr {
    // SAFETY: all-zero is a valid ibv_qp_init_attr (no CQs, no SRQ).
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.cap.max_send_wr = 10;
    a.cap.max_recv_wr = 20;
    a
}

#[test]
fn the_active_side_moves_its_qp_init_then_rtr_rts_when_answered_and_err_on_disconnect() {
    let (_lib, st, vlog, chan) = setup_verbs();
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        let mut dst = sa("192.0.2.2:7001");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        scm_rdma_ack_cm_event(next(chan));
        assert!(!(*id).verbs.is_null());
        // the device's PD is the ID's from the moment it has a device, as
        // in librdmacm: a program makes its own QP and MRs on it
        assert!(!(*id).pd.is_null());
        assert_eq!((*(*id).pd).context, (*id).verbs);
        let mut a = qp_attrs();
        assert_eq!(crate::qp::scm_rdma_create_qp(id, null_mut(), &mut a), 0);
        assert!(!(*id).qp.is_null() && !(*id).pd.is_null());
        assert!(!(*id).send_cq.is_null() && !(*id).recv_cq_channel.is_null());
        assert_eq!(
            vlog.lock().unwrap().clone(),
            [
                "create_cq 20",
                "create_cq 10",
                "modify 1 mask 0x1 sgid 0 rd 0/0"
            ]
        );
        let mut p: rdma_conn_param = std::mem::zeroed();
        p.initiator_depth = 1;
        p.responder_resources = 1;
        assert_eq!(scm_rdma_connect(id, &mut p), 0);
        assert!(log(&st).contains(&"t0 connect 1 qpn 153 pd []".to_string()));
        let e = next(chan);
        assert_eq!((*e).event, event::ESTABLISHED);
        scm_rdma_ack_cm_event(e);
        assert_eq!(
            vlog.lock().unwrap()[3..],
            [
                "modify 2 mask 0x81 sgid 3 rd 0/0",
                "modify 3 mask 0x201 sgid 0 rd 0/0"
            ]
        );
        assert_eq!(scm_rdma_disconnect(id), 0);
        assert_eq!(vlog.lock().unwrap()[5], "modify 6 mask 0x1 sgid 0 rd 0/0");
        scm_rdma_ack_cm_event(next(chan));
        crate::qp::scm_rdma_destroy_qp(id);
        assert!((*id).qp.is_null() && (*id).send_cq.is_null());
        assert!(vlog.lock().unwrap().ends_with(&[
            "destroy_qp".to_string(),
            "destroy_cq".to_string(),
            "destroy_cq".to_string()
        ]));
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn the_ack_timeout_and_tos_options_replace_the_daemons_values() {
    let (_lib, _st, _vlog, chan) = setup_verbs();
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        let mut dst = sa("192.0.2.2:7001");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        scm_rdma_ack_cm_event(next(chan));
        let attrs = |state| {
            let mut a = ibv_qp_attr {
                qp_state: state,
                ..Default::default()
            };
            let mut mask = 0;
            assert_eq!(crate::qp::scm_rdma_init_qp_attr(id, &mut a, &mut mask), 0);
            (a, mask)
        };
        // the daemon's: timeout 14, traffic class 0
        assert_eq!(attrs(IBV_QPS_RTS).0.timeout, 14);
        assert_eq!(attrs(IBV_QPS_RTR).0.ah_attr.grh.traffic_class, 0);
        let mut t: u8 = 19;
        let v = &mut t as *mut u8 as *mut c_void;
        assert_eq!(
            scm_rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, v, 1),
            0
        );
        let mut tos: u8 = 0x60;
        let v = &mut tos as *mut u8 as *mut c_void;
        assert_eq!(
            scm_rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, v, 1),
            0
        );
        let (rts, mask) = attrs(IBV_QPS_RTS);
        assert_eq!((rts.timeout, mask & IBV_QP_TIMEOUT), (19, IBV_QP_TIMEOUT));
        assert_eq!(attrs(IBV_QPS_RTR).0.ah_attr.grh.traffic_class, 0x60);
        // INIT sets neither
        assert_eq!(attrs(IBV_QPS_INIT).0.timeout, 0);
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn the_passive_side_is_ready_before_it_accepts_and_a_reject_errors_the_qp() {
    let (_lib, st, vlog, chan) = setup_verbs();
    // SAFETY: the objects of this test.
    unsafe {
        let l = new_id(chan, 0);
        let mut src = sa("192.0.2.2:7000");
        scm_rdma_bind_addr(l, addr(&mut src));
        scm_rdma_listen(l, 1);
        let mut req = ev(50, event::CONNECT_REQUEST);
        req.listen_id = Some(1);
        req.conn = Some(crate::backend::ConnEventParam {
            initiator_depth: 2,
            responder_resources: 3,
            ..Default::default()
        });
        Fake::send(&st, "t1", req);
        let e = next(chan);
        let c = (*e).id;
        let mut a = qp_attrs();
        assert_eq!(crate::qp::scm_rdma_create_qp(c, null_mut(), &mut a), 0);
        assert_eq!(scm_rdma_accept(c, null_mut()), 0);
        let v = vlog.lock().unwrap().clone();
        // no parameters: the depths of the request, as its event has them
        assert_eq!(
            v[2..],
            [
                "modify 1 mask 0x1 sgid 0 rd 0/0",
                "modify 2 mask 0x81 sgid 3 rd 0/3",
                "modify 3 mask 0x201 sgid 0 rd 2/0"
            ]
        );
        assert!(log(&st).contains(&"t1 accept 50 qpn 153".to_string()));
        scm_rdma_ack_cm_event(next(chan));

        // a second request, rejected by the peer after the application made
        // its QP: REJECTED moves it to ERR
        let mut req = ev(51, event::CONNECT_REQUEST);
        req.listen_id = Some(1);
        Fake::send(&st, "t1", req);
        let e2 = next(chan);
        let c2 = (*e2).id;
        let mut a = qp_attrs();
        crate::qp::scm_rdma_create_qp(c2, null_mut(), &mut a);
        let mut rej = ev(51, event::REJECTED);
        rej.status = 28;
        Fake::send(&st, "t1", rej);
        let r = next(chan);
        assert_eq!(
            ((*r).event, (*r).status, (*r).id),
            (event::REJECTED, 28, c2)
        );
        assert_eq!(
            vlog.lock().unwrap().last().unwrap(),
            "modify 6 mask 0x1 sgid 0 rd 0/0"
        );
        scm_rdma_ack_cm_event(r);
        scm_rdma_ack_cm_event(e2);
        scm_rdma_ack_cm_event(e);
    }
}

#[test]
fn a_synchronous_listener_hands_out_requests_with_rdma_get_request() {
    let (lib, st, vlog, _chan) = setup_verbs();
    // SAFETY: the objects of this test.
    unsafe {
        let l = sync_id(&lib);
        let mut src = sa("192.0.2.2:7000");
        assert_eq!(scm_rdma_bind_addr(l, addr(&mut src)), 0);
        assert_eq!(scm_rdma_listen(l, 1), 0);
        crate::state::IdPriv::from_ptr(l).unwrap().state().ep_attr = Some((qp_attrs(), 0));
        let mut req = ev(60, event::CONNECT_REQUEST);
        req.listen_id = Some(1);
        Fake::send(&st, "t1", req);
        let mut c = null_mut();
        assert_eq!(scm_rdma_get_request(l, &mut c), 0);
        assert!(!c.is_null() && c != l);
        // its own channel, its request event kept, its QP made from the
        // endpoint's attributes
        assert_ne!((*c).channel, (*l).channel);
        assert_eq!((*(*c).event).event, event::CONNECT_REQUEST);
        assert!(!(*c).qp.is_null());
        assert!(log(&st).contains(&"t1 migrate_id 60".to_string()));
        assert_eq!(scm_rdma_accept(c, null_mut()), 0);
        assert_eq!((*(*c).event).event, event::ESTABLISHED);
        assert!(vlog
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("modify 3")));
        crate::qp::scm_rdma_destroy_qp(c);
        assert_eq!(id::scm_rdma_destroy_id(c), 0);
        assert_eq!(id::scm_rdma_destroy_id(l), 0);
    }
}

#[test]
fn a_qp_that_cannot_be_readied_is_a_connect_error_and_the_teardown_is_not_reported() {
    let fake = Fake::new(&[("t0", "192.0.2.1"), ("t1", "192.0.2.2")]);
    let st = fake.st.clone();
    let verbs = crate::fake::FakeVerbs {
        devs: fake.devs.clone(),
        fail_rtr: true,
        ..Default::default()
    };
    let lib = Lib::new(Box::new(fake), Box::new(verbs));
    let chan = ChanPriv::create(lib).unwrap() as *mut rdma_event_channel;
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        let mut dst = sa("192.0.2.2:7001");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        scm_rdma_ack_cm_event(next(chan));
        let mut a = qp_attrs();
        assert_eq!(crate::qp::scm_rdma_create_qp(id, null_mut(), &mut a), 0);
        let mut p: rdma_conn_param = std::mem::zeroed();
        assert_eq!(scm_rdma_connect(id, &mut p), 0);
        let e = next(chan);
        assert_eq!(
            ((*e).event, (*e).status),
            (event::CONNECT_ERROR, -libc::EINVAL)
        );
        scm_rdma_ack_cm_event(e);
        assert!(log(&st).contains(&"t0 disconnect 1".to_string()));
        // the daemon's DISCONNECTED of that teardown is the library's own
        libc::fcntl((*chan).fd, libc::F_SETFL, libc::O_NONBLOCK);
        let mut e = null_mut();
        assert_eq!(scm_rdma_get_cm_event(chan, &mut e), -1);
        assert_eq!(errno(), libc::EAGAIN);
        crate::qp::scm_rdma_destroy_qp(id);
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
    }
}
