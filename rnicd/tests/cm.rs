//! The RDMA CM through rnicd (`softrnic::client::cm`): two devices on the
//! in-memory wire, a client that connects and a server that listens and
//! accepts; private data both ways, the QP attributes each side gets from
//! `init_qp_attr`, an RC QP pair brought up with them moving data (the
//! active side's RTU held until its QP is ready or it establishes), reject,
//! no listener, disconnect; lost REQ, REP and RTU retried (an impairment
//! stage on one device's port); hostile MADs and a REQ flood counted and
//! harmless; a vanished peer (UNREACHABLE, DISCONNECTED after the DREQ
//! retries, with rnicd's CM timers); only the caller's QPs connect.

mod common;

use common::cm::{count, daemon, daemon_with, pair_with, server_addr, Side, SERVER_IP};
use common::{Daemon, T};
use nic::io::impair::{Fate, Interceptor};
use nic::verbs::{RecvWr, SendOp, SendWr, Sgl, WcStatus};
use rnicd::server::{CmTimers, Server};
use softrnic::client::cm::{
    CmEventKind, CmIdNo, CmQpType, ConnParam, EventChannel, PortSpace, QpState,
};
use softrnic::{Context, QpInitAttr, QpKind, ACCESS_ALL};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use wire::mad::{attr, MadHeader};

fn param(qpn: u32, pd: &[u8]) -> ConnParam {
    ConnParam {
        qpn,
        private_data: pd.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}

/// Connects `c` to `s` (listening on `port`) and brings both QPs up.
fn establish(c: &mut Side, s: &mut Side, port: u16) -> (CmIdNo, CmIdNo) {
    let l = s.listening(port);
    let cid = c.resolved(port);
    c.move_qp(cid, QpState::Init);
    let rtus = || count(&c.ctx.stats().unwrap().cm, "cm_tx_rtu");
    let rtu0 = rtus();
    c.cm.connect(cid, &param(c.qp.qpn, b"hello")).unwrap();
    let req = s.expect(CmEventKind::CONNECT_REQUEST);
    assert_eq!(req.listen_id, Some(l));
    assert_eq!(req.user_ctx, 7);
    let sid = req.id;
    let conn = req.conn.unwrap();
    assert_eq!(&conn.private_data[..5], b"hello");
    assert_eq!(conn.private_data.len(), 56);
    assert_eq!(conn.qp_num, c.qp.qpn);
    let (local, remote) = req.addrs.unwrap();
    assert_eq!(local, server_addr(port));
    assert_eq!(remote.ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    // the passive side: INIT, RTR, RTS, then accept (as librdmacm does)
    s.move_qp(sid, QpState::Init);
    let s_rtr = s.move_qp(sid, QpState::Rtr);
    assert_eq!(s_rtr.dest_qpn, Some(c.qp.qpn));
    let s_rts = s.move_qp(sid, QpState::Rts);
    s.cm.accept(sid, &param(s.qp.qpn, b"welcome")).unwrap();
    let est = c.expect(CmEventKind::ESTABLISHED);
    let conn = est.conn.unwrap();
    assert_eq!(&conn.private_data[..7], b"welcome");
    assert_eq!(conn.qp_num, s.qp.qpn);
    let c_rtr = c.move_qp(cid, QpState::Rtr);
    // IBA 12.6.9: the RTU waits until the active side's QP can receive
    // (it asks for its RTS attributes)
    assert_eq!(rtus(), rtu0);
    let c_rts = c.move_qp(cid, QpState::Rts);
    // each side's receive PSN is the other's send PSN
    assert_eq!(c_rtr.dest_qpn, Some(s.qp.qpn));
    assert_eq!(c_rtr.rq_psn, s_rts.sq_psn);
    assert_eq!(s_rtr.rq_psn, c_rts.sq_psn);
    s.expect(CmEventKind::ESTABLISHED);
    // (more than one where the first was lost)
    assert!(rtus() > rtu0);
    (cid, sid)
}

/// A SEND from `c` lands in `s`'s buffer.
fn send_data(c: &mut Side, s: &mut Side) {
    let data: Vec<u8> = (0..200u8).collect();
    s.qp.post_recv(&RecvWr {
        wr_id: 1,
        sgl: Sgl::single(s.mr.addr, 4096, s.mr.lkey),
    })
    .unwrap();
    c.buf.write(0, &data);
    c.qp.post_send(&SendWr::new(
        2,
        SendOp::Send,
        Sgl::single(c.mr.addr, data.len() as u32, c.mr.lkey),
    ))
    .unwrap();
    assert_eq!(c.wait_wc().status, WcStatus::Success);
    assert_eq!(s.wait_wc().status, WcStatus::Success);
    assert_eq!(s.buf.to_vec(0, data.len()), data);
}

#[test]
fn connect_accept_move_data_and_disconnect() {
    let (_d, s0, s1) = daemon("cm-conn");
    let (mut c, mut s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    let (cid, sid) = establish(&mut c, &mut s, 7471);
    send_data(&mut c, &mut s);
    // every event read: the channel is not readable
    assert!(c.ch.next(true).unwrap().is_none());
    assert!(s.ch.next(true).unwrap().is_none());
    // the server's ID moves to a second channel: its next event goes there
    let ch2 = EventChannel::open(&s1).unwrap();
    assert_eq!(s.cm.migrate_id(sid, ch2.token()).unwrap(), 2);
    c.cm.disconnect(cid).unwrap();
    let mut p = libc::pollfd {
        fd: ch2.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd that lives across the call.
    assert_eq!(unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) }, 1);
    let e = ch2.next(false).unwrap().unwrap();
    assert_eq!((e.kind, e.id), (CmEventKind::DISCONNECTED, sid));
    c.expect(CmEventKind::DISCONNECTED);
    assert!(s.ch.next(true).unwrap().is_none());
    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(st.get("cm_tx_req"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_rx_rep"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_tx_rtu"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_tx_dreq"), Some(&1), "{st:?}");
    let st = s.ctx.stats().unwrap().cm;
    assert_eq!(st.get("cm_rx_req"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_tx_rep"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_tx_drep"), Some(&1), "{st:?}");
    // ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED; then
    // CONNECT_REQUEST, ESTABLISHED, DISCONNECTED
    assert_eq!(c.cm.destroy_id(cid).unwrap(), 4);
    assert_eq!(s.cm.destroy_id(sid).unwrap(), 3);
    assert!(c.cm.destroy_id(cid).is_err(), "destroyed");
    // the ID lives where its address is
    let addr = IpAddr::V4(SERVER_IP);
    let dir = s1.parent().unwrap();
    assert_eq!(
        softrnic::client::cm::device_socket_in(dir, addr),
        Some(s1.clone())
    );
}

#[test]
fn reject_and_no_listener_give_rejected() {
    let (_d, s0, s1) = daemon("cm-rej");
    let (c, s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    s.listening(7000);
    let cid = c.resolved(7000);
    c.cm.connect(cid, &param(c.qp.qpn, b"please")).unwrap();
    let req = s.expect(CmEventKind::CONNECT_REQUEST);
    s.cm.reject(req.id, b"go away").unwrap();
    let e = c.expect(CmEventKind::REJECTED);
    // IBA 12.6.7 Table 104: 28, consumer reject
    assert_eq!(e.status, 28);
    assert_eq!(&e.conn.unwrap().private_data[..7], b"go away");

    // a port nobody listens on: IBA Table 104 reason 8, invalid service ID
    let cid = c.resolved(7001);
    c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
    let e = c.expect(CmEventKind::REJECTED);
    assert_eq!(e.status, 8);
    // IB addressing is refused clearly
    let e =
        c.cm.create_id(c.ch.token(), PortSpace::IB, CmQpType::Rc, 0)
            .unwrap_err();
    assert!(e.to_string().contains("port space"), "{e}");
}

#[test]
fn a_closed_client_connection_disconnects_its_ids() {
    let (_d, s0, s1) = daemon("cm-orphan");
    let (mut c, mut s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    establish(&mut c, &mut s, 7100);
    // the client goes away: its connected ID sends a DREQ
    drop(c);
    s.expect(CmEventKind::DISCONNECTED);
}

/// Drops the first CM MAD of kind `attribute` this port sends.
struct DropFirst {
    attribute: u16,
    dropped: Arc<AtomicUsize>,
}

impl Interceptor for DropFirst {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate {
        let lost = self.dropped.load(Ordering::SeqCst) == 0
            && wire::RoceRepr::parse(frame).is_ok_and(|r| {
                r.bth.dest_qp == 1
                    && MadHeader::parse(r.payload).is_ok_and(|h| h.attribute_id == self.attribute)
            });
        if lost {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
        Fate {
            lost,
            ..Fate::default()
        }
    }
}

/// Keeps a copy of every frame the port sends.
struct Record(Arc<Mutex<Vec<Vec<u8>>>>);

impl Interceptor for Record {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate {
        self.0.lock().unwrap().push(frame.to_vec());
        Fate::default()
    }
}

/// Two devices in this process on an in-memory wire; `dropper` (0 or 1)
/// loses the first `attribute` it sends.
fn impaired_pair(tag: &str, dropper: usize, attribute: u16) -> (Vec<Server>, Arc<AtomicUsize>) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let i = DropFirst {
        attribute,
        dropped: dropped.clone(),
    };
    let timers = CmTimers::default();
    (pair_with(tag, dropper, Box::new(i), timers), dropped)
}

fn lost_message_is_retried(tag: &str, dropper: usize, attribute: u16) {
    let (servers, dropped) = impaired_pair(tag, dropper, attribute);
    let mut c = Side::new(servers[0].socket_path(), QpKind::Rc);
    let mut s = Side::new(servers[1].socket_path(), QpKind::Rc);
    establish(&mut c, &mut s, 7200);
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the message was dropped");
    send_data(&mut c, &mut s);
    let st = if dropper == 0 { &c } else { &s }.ctx.stats().unwrap().cm;
    if attribute != attr::RTU {
        // REQ and REP are retransmitted on their timer (IBA 12.6.5, 12.6.8;
        // a lost REP also goes again as the answer to the repeated REQ)
        assert!(st.get("cm_retries").is_some_and(|n| *n >= 1), "{st:?}");
    }
}

#[test]
fn a_lost_req_is_retried_and_the_connection_forms() {
    lost_message_is_retried("cmlreq", 0, attr::REQ);
}

#[test]
fn a_lost_rep_is_retried_and_the_connection_forms() {
    lost_message_is_retried("cmlrep", 1, attr::REP);
}

#[test]
fn a_lost_rtu_is_replaced_by_the_repeated_rep_and_the_connection_forms() {
    lost_message_is_retried("cmlrtu", 0, attr::RTU);
}

/// Loses every QP 1 frame the port sends while the flag is up: a peer
/// whose CM has vanished.
struct Vanish(Arc<AtomicBool>);

impl Interceptor for Vanish {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate {
        let lost = self.0.load(Ordering::SeqCst)
            && wire::RoceRepr::parse(frame).is_ok_and(|r| r.bth.dest_qp == 1);
        Fate {
            lost,
            ..Fate::default()
        }
    }
}

/// Short CM timers (rnicd --cm-response-timeout 17 --cm-retries 4): each
/// wait 4.096 µs × 2^17 (about 0.5 s), five sends in all.
const SHORT: CmTimers = CmTimers {
    response_timeout: 17,
    max_retries: 4,
};

#[test]
fn a_connect_to_a_peer_that_never_answers_ends_unreachable() {
    let gone = Arc::new(AtomicBool::new(true));
    let servers = pair_with("cmgone", 1, Box::new(Vanish(gone)), SHORT);
    let c = Side::new(servers[0].socket_path(), QpKind::Rc);
    let _s = Side::new(servers[1].socket_path(), QpKind::Rc);
    let cid = c.resolved(7400);
    c.move_qp(cid, QpState::Init);
    c.cm.connect(cid, &param(c.qp.qpn, b"anyone?")).unwrap();
    // IBA 12.6.5: the REQ goes 1 + Max CM Retries times, then the attempt
    // ends; rdma_cm reports UNREACHABLE with -ETIMEDOUT
    let e = c.expect(CmEventKind::UNREACHABLE);
    assert_eq!(e.id, cid);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_req"), 5, "{st:?}");
    assert_eq!(count(&st, "cm_retries"), 4, "{st:?}");
    assert_eq!(count(&st, "cm_timeouts"), 1, "{st:?}");
    // the ID is free for another attempt
    assert!(c.cm.init_qp_attr(cid, QpState::Rtr).is_err());
}

#[test]
fn an_established_connection_whose_peer_vanishes_ends_disconnected() {
    let gone = Arc::new(AtomicBool::new(false));
    let servers = pair_with("cmvanish", 1, Box::new(Vanish(gone.clone())), SHORT);
    let mut c = Side::new(servers[0].socket_path(), QpKind::Rc);
    let mut s = Side::new(servers[1].socket_path(), QpKind::Rc);
    let (cid, _) = establish(&mut c, &mut s, 7500);
    send_data(&mut c, &mut s);
    gone.store(true, Ordering::SeqCst);
    c.cm.disconnect(cid).unwrap();
    // IBA 12.9: the DREQ goes 1 + Max CM Retries times unanswered; rdma_cm
    // reports DISCONNECTED with -ETIMEDOUT
    let e = c.expect(CmEventKind::DISCONNECTED);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_dreq"), 5, "{st:?}");
    assert_eq!(count(&st, "cm_timeouts"), 1, "{st:?}");
    // the vanished side heard the DREQ: disconnected as well
    s.expect(CmEventKind::DISCONNECTED);
}

#[test]
fn rnicd_cm_timers_bound_the_wait_for_a_peer_that_does_not_accept() {
    // the server's application never answers the REQ: the active side's
    // REQ retries run out (rnicd --cm-response-timeout 16, about 0.27 s a
    // wait, --cm-retries 2) and it reports UNREACHABLE. The engine parks
    // for up to 10 minutes when idle: the CM's timers must end its park.
    let (_d, s0, s1) = daemon_with(
        "cm-timers",
        &[
            "--cm-response-timeout",
            "16",
            "--cm-retries",
            "2",
            "--spin",
            "1",
            "--park-us",
            "600000000",
        ],
    );
    let (c, s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    s.listening(7700);
    let cid = c.resolved(7700);
    c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
    s.expect(CmEventKind::CONNECT_REQUEST);
    let e = c.expect(CmEventKind::UNREACHABLE);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_req"), 3, "{st:?}");
    // the passive side saw the repeats as duplicates of a REQ it holds
    let st = s.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_rx_req"), 3, "{st:?}");
    // out-of-range timers are refused at the command line
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rnicd"))
        .args(["--mem-pair", "--cm-response-timeout", "32"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A connection on `port` that the passive side (its QP in RTS) has
/// accepted and the active side has heard ESTABLISHED of, its QP still in
/// INIT: (daemon, active side, passive side, the active side's ID).
fn accepted(tag: &str, port: u16) -> (Daemon, Side, Side, CmIdNo) {
    let (d, s0, s1) = daemon(tag);
    let (c, s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    s.listening(port);
    let cid = c.resolved(port);
    c.move_qp(cid, QpState::Init);
    c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
    let sid = s.expect(CmEventKind::CONNECT_REQUEST).id;
    s.move_qp(sid, QpState::Init);
    s.move_qp(sid, QpState::Rtr);
    s.move_qp(sid, QpState::Rts);
    s.cm.accept(sid, &param(s.qp.qpn, b"")).unwrap();
    c.expect(CmEventKind::ESTABLISHED);
    (d, c, s, cid)
}

#[test]
fn an_active_side_that_moves_its_own_qp_sends_the_rtu_with_establish() {
    let (_d, c, s, cid) = accepted("cm-estab", 7600);
    // the QP is the caller's business (rdma_establish after moving it
    // with attributes of its own): the RTU waits for establish
    assert_eq!(count(&c.ctx.stats().unwrap().cm, "cm_tx_rtu"), 0);
    c.cm.establish(cid).unwrap();
    s.expect(CmEventKind::ESTABLISHED);
    assert_eq!(count(&c.ctx.stats().unwrap().cm, "cm_tx_rtu"), 1);
    // once is enough: a second establish is refused
    assert!(c.cm.establish(cid).is_err());
}

#[test]
fn establish_after_asking_for_the_rts_attributes_succeeds_once() {
    let (_d, c, s, cid) = accepted("cm-estab2", 7610);
    // a program moving its own QP by rdma_init_qp_attr (RTR, RTS): the
    // RTU goes with the RTS attributes ...
    c.move_qp(cid, QpState::Rtr);
    c.move_qp(cid, QpState::Rts);
    s.expect(CmEventKind::ESTABLISHED);
    // ... and its rdma_establish then has nothing left to do, once
    c.cm.establish(cid).unwrap();
    assert!(c.cm.establish(cid).is_err());
    assert_eq!(count(&c.ctx.stats().unwrap().cm, "cm_tx_rtu"), 1);
}

#[test]
fn connect_and_accept_take_only_the_callers_qps_of_the_ids_type() {
    let (_d, s0, s1) = daemon("cm-qpn");
    let (mut c, mut s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    let ud_qp = |side: &Side| {
        side.pd
            .create_qp(&QpInitAttr {
                qp_type: QpKind::Ud,
                send_cq: side.cq.handle,
                recv_cq: side.cq.handle,
                max_send_wr: 4,
                max_recv_wr: 4,
                sq_sig_all: true,
                srq: None,
            })
            .unwrap()
    };
    let (c_ud, s_ud) = (ud_qp(&c), ud_qp(&s));
    let refused = |r: softrnic::client::Result<()>| {
        let e = r.unwrap_err();
        assert!(e.to_string().contains("is not one of this process"), "{e}");
    };
    s.listening(7600);
    let cid = c.resolved(7600);
    c.move_qp(cid, QpState::Init);
    // a QP number nobody holds, the caller's UD QP for an RC ID
    refused(c.cm.connect(cid, &param(0x00AB_CDEF, b"")));
    refused(c.cm.connect(cid, &param(c_ud.qpn, b"")));
    assert_eq!(count(&c.ctx.stats().unwrap().cm, "cm_tx_req"), 0);
    // the ID is unharmed: the caller's RC QP connects
    c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
    let req = s.expect(CmEventKind::CONNECT_REQUEST);
    let sid = req.id;
    refused(s.cm.accept(sid, &param(0x00AB_CDEF, b"")));
    refused(s.cm.accept(sid, &param(s_ud.qpn, b"")));
    s.move_qp(sid, QpState::Init);
    s.move_qp(sid, QpState::Rtr);
    s.move_qp(sid, QpState::Rts);
    s.cm.accept(sid, &param(s.qp.qpn, b"")).unwrap();
    let est = c.expect(CmEventKind::ESTABLISHED);
    assert_eq!(est.conn.unwrap().qp_num, s.qp.qpn);
    c.move_qp(cid, QpState::Rtr);
    c.move_qp(cid, QpState::Rts);
    s.expect(CmEventKind::ESTABLISHED);
    send_data(&mut c, &mut s);
}

#[test]
fn hostile_mads_are_counted_drops_and_connections_still_form() {
    let (_d, s0, s1) = daemon("cm-hostile");
    let (mut c, mut s) = (Side::new(&s0, QpKind::Rc), Side::new(&s1, QpKind::Rc));
    // a UD QP on the client's device sends junk to the server's QP 1 with
    // the GSI Q_Key: MADs of the wrong class, version, and random bytes
    let ctx = Context::open(&s0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buffer(1 << 12).unwrap();
    let mr = pd.reg_mr(&buf, 0, 1 << 12, ACCESS_ALL).unwrap();
    let mut cq = ctx.create_cq(64).unwrap();
    let mut ud = pd
        .create_qp(&QpInitAttr {
            qp_type: QpKind::Ud,
            send_cq: cq.handle,
            recv_cq: cq.handle,
            max_send_wr: 16,
            max_recv_wr: 16,
            sq_sig_all: true,
            srq: None,
        })
        .unwrap();
    ud.ud_ready(0x8001_0000, 0).unwrap();
    let peer = Context::open(&s1).unwrap();
    let ah = pd
        .create_ah(&nic::verbs::AhAttr::new(peer.device.gid, peer.device.mac))
        .unwrap();
    let mut junk = vec![[0u8; 256]; 4];
    junk[0][1] = 0x04; // not the CM class
    junk[1][..4].copy_from_slice(&[1, 7, 9, 3]); // CM class version 9
    junk[2][..4].copy_from_slice(&[1, 7, 2, 3]); // REQ header, body of zeros
    junk[2][16..18].copy_from_slice(&attr::REQ.to_be_bytes());
    junk[3][..4].copy_from_slice(&[1, 7, 2, 3]); // a DREP nobody knows
    junk[3][16..18].copy_from_slice(&attr::DREP.to_be_bytes());
    for (k, j) in junk.iter().enumerate() {
        buf.write(k * 256, j);
        let wr = SendWr::new(
            k as u64,
            SendOp::Send,
            Sgl::single(mr.addr + (k * 256) as u64, 256, mr.lkey),
        );
        ud.post_send_ud(&wr, &ah, 1, 0x8001_0000).unwrap();
    }
    let st = testkit::wait_for(T, "the junk counted", || {
        let st = peer.stats().unwrap().cm;
        let n: u64 = [
            "cm_not_cm_class",
            "cm_bad_class_version",
            "cm_unknown_comm_id",
        ]
        .iter()
        .map(|k| st.get(*k).copied().unwrap_or(0))
        .sum();
        if n >= 3 {
            Ok(st)
        } else {
            Err(format!("{st:?}"))
        }
    });
    assert_eq!(st.get("cm_not_cm_class"), Some(&1), "{st:?}");
    assert_eq!(st.get("cm_bad_class_version"), Some(&1), "{st:?}");

    // a REQ flood on a listener (backlog 8, its own channel) whose
    // application answers none of them: 8 wait, the rest are dropped
    let flood_ch = EventChannel::open(&s1).unwrap();
    let fl =
        s.cm.create_id(flood_ch.token(), PortSpace::TCP, CmQpType::Rc, 99)
            .unwrap();
    s.cm.bind(fl, server_addr(7350)).unwrap();
    s.cm.listen(fl, 8).unwrap();
    const FLOOD: u64 = 200;
    let mut forger = nic::cm::Cm::new(
        nic::cm::CmAddr {
            gid: ctx.device.gid.0,
        },
        1,
        0xF100D,
    );
    let mut pd_hdr = vec![0u8; wire::mad::IpCmPrivateData::LEN];
    wire::mad::IpCmPrivateData {
        major_version: 0,
        minor_version: 0,
        ip_version: 4,
        reserved: 0,
        src_port: 40000,
        src_ip: Ipv4Addr::new(192, 0, 2, 1).to_ipv6_compatible().octets(),
        dst_ip: SERVER_IP.to_ipv6_compatible().octets(),
    }
    .emit(&mut pd_hdr)
    .unwrap();
    let sid = wire::mad::ip_cm_service_id(PortSpace::TCP.0 as u8, 7350);
    let to = nic::cm::CmAddr::from_ip(IpAddr::V4(SERVER_IP));
    let mut out = Vec::new();
    while cq.poll(16, &mut out) > 0 {}
    for k in 0..FLOOD {
        let mut p = nic::cm::ConnectParams::new(to, sid, 0x100 + k as u32, 0);
        p.private_data = pd_hdr.clone();
        forger.connect(nic::Instant::ZERO, &p);
        let (_, mad) = forger.poll_transmit(nic::Instant::ZERO).unwrap();
        let mut b = [0u8; wire::mad::MAD_LEN];
        mad.emit(&mut b).unwrap();
        buf.write(0, &b);
        let wr = SendWr::new(100 + k, SendOp::Send, Sgl::single(mr.addr, 256, mr.lkey));
        ud.post_send_ud(&wr, &ah, 1, 0x8001_0000).unwrap();
        testkit::wait_until(T, "the REQ sent", || cq.poll(1, &mut out) > 0);
    }
    let st = testkit::wait_for(T, "the flood counted", || {
        let st = peer.stats().unwrap().cm;
        if count(&st, "cm_req_backlog_full") >= FLOOD - 8 {
            Ok(st)
        } else {
            Err(format!("{st:?}"))
        }
    });
    assert_eq!(count(&st, "cm_req_backlog_full"), FLOOD - 8, "{st:?}");
    for _ in 0..8 {
        let mut p = libc::pollfd {
            fd: flood_ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd that lives across the call.
        assert_eq!(unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) }, 1);
        let e = flood_ch.next(true).unwrap().unwrap();
        assert_eq!(e.kind, CmEventKind::CONNECT_REQUEST);
        assert_eq!(e.listen_id, Some(fl));
    }
    assert!(flood_ch.next(true).unwrap().is_none(), "only 8 wait");

    // the daemon serves on: a connection forms
    let (cid, _) = establish(&mut c, &mut s, 7300);
    send_data(&mut c, &mut s);
    c.cm.disconnect(cid).unwrap();
    c.expect(CmEventKind::DISCONNECTED);
}

/// A classic pcap file of Ethernet frames.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    // (the version's two halves and the zone/sigfigs words are written as
    // two u32s above: 2,4 then 0,0; snaplen; LINKTYPE_ETHERNET)
    out[4..8].copy_from_slice(&[2, 0, 4, 0]);
    for (k, f) in frames.iter().enumerate() {
        for v in [1_000_000u32 + k as u32, 0, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn the_cm_conversation_through_rnicd_has_rxe_layout_and_decodes_in_tshark() {
    let frames = Arc::new(Mutex::new(Vec::new()));
    let servers = pair_with(
        "cmtap",
        0,
        Box::new(Record(frames.clone())),
        CmTimers::default(),
    );
    let mut c = Side::new(servers[0].socket_path(), QpKind::Rc);
    let mut s = Side::new(servers[1].socket_path(), QpKind::Rc);
    let (cid, _) = establish(&mut c, &mut s, 7400);
    let (c_rtr, _) = c.cm.init_qp_attr(cid, QpState::Rtr).unwrap();
    c.cm.disconnect(cid).unwrap();
    c.expect(CmEventKind::DISCONNECTED);
    s.expect(CmEventKind::DISCONNECTED);
    let frames: Vec<Vec<u8>> = frames
        .lock()
        .unwrap()
        .iter()
        .filter(|f| wire::RoceRepr::parse(f).is_ok_and(|r| r.bth.dest_qp == 1))
        .cloned()
        .collect();
    // the client's REQ, RTU and DREQ
    let kinds: Vec<u16> = frames
        .iter()
        .map(|f| {
            let r = wire::RoceRepr::parse(f).unwrap();
            MadHeader::parse(r.payload).unwrap().attribute_id
        })
        .collect();
    assert_eq!(kinds, [attr::REQ, attr::RTU, attr::DREQ]);
    // rxe's REQ (rdma_cm.pcap): 322 bytes; the service ID of RDMA_PS_TCP
    // and the port; the CA GUID the EUI-64 of the MAC; the RDMA IP CM
    // header: version 0, IPv4, then both addresses IPv4-compatible
    let req = wire::RoceRepr::parse(&frames[0]).unwrap();
    assert_eq!(frames[0].len(), 322);
    let mad = wire::mad::Mad::parse(req.payload).unwrap();
    let Some(wire::mad::CmMessage::Req(r)) = mad.cm() else {
        panic!("a REQ")
    };
    assert_eq!(r.service_id, 0x0000_0000_0106_0000 | 7400);
    assert_eq!(r.local_ca_guid, 0x0053_52ff_fe00_0001);
    assert_eq!(r.local_qpn, c.qp.qpn);
    // as Linux's CM: the REQ's Starting PSN is where the active side's
    // receive queue starts (the passive side sends from it)
    assert_eq!(c_rtr.rq_psn, Some(r.starting_psn));
    assert_eq!(&r.private_data[..2], &[0x00, 0x40]);
    assert_eq!(
        &r.private_data[4..20],
        &Ipv4Addr::new(192, 0, 2, 1).to_ipv6_compatible().octets()
    );
    assert_eq!(
        &r.private_data[20..36],
        &SERVER_IP.to_ipv6_compatible().octets()
    );
    assert_eq!(&r.private_data[36..41], b"hello");
    let path = std::env::temp_dir().join(format!("softrnic-cm-{}.pcap", std::process::id()));
    write_pcap(&path, &frames);
    if !testkit::tshark_runs(
        "the_cm_conversation_through_rnicd_has_rxe_layout_and_decodes_in_tshark",
    ) {
        return;
    }
    let judge = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/tshark-judge");
    if judge.exists() {
        let out = std::process::Command::new(&judge)
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "tshark-judge: {text}");
    }
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "_ws.expert",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows, ["0x0010\t", "0x0014\t", "0x0015\t"], "{text}");
    let _ = std::fs::remove_file(&path);
}
