//! The RDMA CM's UD IDs (RDMA_PS_UDP) through rnicd: `connect` resolves
//! the listener's service ID with SIDR_REQ / SIDR_REP (IBA 12.11) and the
//! client's ESTABLISHED carries the server's QPN, the UD Q_Key and its
//! address, with which a datagram reaches the server's QP; a reject and a
//! port nobody listens on end UNREACHABLE with the SIDR status; a lost
//! SIDR_REQ or SIDR_REP is repeated on rnicd's CM timers, and a peer that
//! never answers ends UNREACHABLE with -ETIMEDOUT.

mod common;

use common::cm::{count, daemon, pair_with, server_addr, Side, SERVER_IP};
use nic::io::impair::{Fate, Interceptor};
use nic::verbs::{AhAttr, QpAttr, RecvWr, SendOp, SendWr, Sgl, WcStatus};
use rnicd::server::CmTimers;
use softrnic::client::cm::{CmEventKind, CmIdNo, ConnParam, QpState};
use softrnic::QpKind;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use wire::mad::{attr, MadHeader};

/// librdmacm's RDMA_UDP_QKEY.
const UDP_QKEY: u32 = 0x0123_4567;
/// The GRH a UD receive starts with.
const GRH: usize = 40;

/// INIT, RTR, RTS with the CM's attributes, as librdmacm does for a UD
/// QP when it is made; returns the INIT attributes.
fn ready(s: &Side, id: CmIdNo) -> QpAttr {
    let init = s.move_qp(id, QpState::Init);
    s.move_qp(id, QpState::Rtr);
    s.move_qp(id, QpState::Rts);
    init
}

fn param(qpn: u32, pd: &[u8]) -> ConnParam {
    ConnParam {
        qpn,
        private_data: pd.to_vec(),
        ..Default::default()
    }
}

#[test]
fn a_ud_connect_resolves_the_listeners_qp_and_a_datagram_reaches_it() {
    let (_d, s0, s1) = daemon("cm-ud");
    let (mut c, mut s) = (Side::new(&s0, QpKind::Ud), Side::new(&s1, QpKind::Ud));
    let l = s.listening(7174);
    let cid = c.resolved(7174);
    // the UD QP is ready before connect, with the RDMA CM's Q_Key
    let init = ready(&c, cid);
    assert_eq!(init.qkey, Some(UDP_QKEY));
    c.cm.connect(cid, &param(c.qp.qpn, b"udp hello")).unwrap();

    let req = s.expect(CmEventKind::CONNECT_REQUEST);
    assert_eq!((req.listen_id, req.user_ctx), (Some(l), 7));
    assert!(req.conn.is_none());
    let ud = req.ud.clone().expect("UD parameters");
    assert_eq!(&ud.private_data[..9], b"udp hello");
    // a SIDR_REQ's private data less the IP CM header (216 - 36)
    assert_eq!(ud.private_data.len(), 180);
    assert_eq!(ud.dgid, wire::Gid::from_ipv4(Ipv4Addr::new(192, 0, 2, 1)).0);
    let (local, remote) = req.addrs.unwrap();
    assert_eq!(local, server_addr(7174));
    assert_eq!(remote.ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    ready(&s, req.id);
    s.cm.accept(req.id, &param(s.qp.qpn, b"welcome")).unwrap();

    let est = c.expect(CmEventKind::ESTABLISHED);
    assert_eq!((est.id, est.status), (cid, 0));
    let ud = est.ud.expect("UD parameters");
    assert_eq!((ud.qp_num, ud.qkey), (s.qp.qpn, UDP_QKEY));
    assert_eq!(ud.dgid, wire::Gid::from_ipv4(SERVER_IP).0);
    assert_eq!(&ud.private_data[..7], b"welcome");
    assert_eq!(ud.private_data.len(), 136);

    // with those, a datagram lands in the server's QP
    s.qp.post_recv(&RecvWr {
        wr_id: 1,
        sgl: Sgl::single(s.mr.addr, 4096, s.mr.lkey),
    })
    .unwrap();
    let data: Vec<u8> = (0..100u8).collect();
    c.buf.write(0, &data);
    let ah = AhAttr::new(wire::Gid(ud.dgid), wire::EthernetAddress(ud.dmac));
    let ah = c.pd.create_ah(&ah).unwrap();
    let wr = SendWr::new(
        2,
        SendOp::Send,
        Sgl::single(c.mr.addr, data.len() as u32, c.mr.lkey),
    );
    c.qp.post_send_ud(&wr, &ah, ud.qp_num, ud.qkey).unwrap();
    assert_eq!(c.wait_wc().status, WcStatus::Success);
    let wc = s.wait_wc();
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(s.buf.to_vec(GRH, data.len()), data);

    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_sidr_req"), 1, "{st:?}");
    assert_eq!(count(&st, "cm_rx_sidr_rep"), 1, "{st:?}");
    let st = s.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_rx_sidr_req"), 1, "{st:?}");
    assert_eq!(count(&st, "cm_tx_sidr_rep"), 1, "{st:?}");
    // ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED; CONNECT_REQUEST
    assert_eq!(c.cm.destroy_id(cid).unwrap(), 3);
    assert_eq!(s.cm.destroy_id(req.id).unwrap(), 1);
}

#[test]
fn a_rejected_or_unheard_ud_connect_ends_unreachable_with_the_sidr_status() {
    let (_d, s0, s1) = daemon("cm-ud-rej");
    let (c, s) = (Side::new(&s0, QpKind::Ud), Side::new(&s1, QpKind::Ud));
    s.listening(7000);
    let cid = c.resolved(7000);
    c.cm.connect(cid, &param(c.qp.qpn, b"please")).unwrap();
    let req = s.expect(CmEventKind::CONNECT_REQUEST);
    s.cm.reject(req.id, b"go away").unwrap();
    // IBA 12.11.3: status 2, rejected; the kernel's RDMA CM reports it as
    // UNREACHABLE with the status
    let e = c.expect(CmEventKind::UNREACHABLE);
    assert_eq!((e.id, e.status), (cid, 2));

    // a port nobody listens on: status 1, service ID not supported
    let cid = c.resolved(7001);
    c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
    let e = c.expect(CmEventKind::UNREACHABLE);
    assert_eq!((e.id, e.status), (cid, 1));
    // more private data than a SIDR_REQ carries after the IP CM header
    let cid = c.resolved(7000);
    let e = c.cm.connect(cid, &param(c.qp.qpn, &[0; 181])).unwrap_err();
    assert!(e.to_string().contains("private data"), "{e}");
    let st = s.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_sidr_rep"), 2, "{st:?}");
    assert_eq!(count(&st, "cm_sidr_req_refused"), 0, "{st:?}");
}

/// Loses the CM MADs of kind `attribute` this port sends: the first
/// `limit` of them.
struct Lose {
    attribute: u16,
    limit: usize,
    lost: Arc<AtomicUsize>,
}

impl Interceptor for Lose {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate {
        let lost = self.lost.load(Ordering::SeqCst) < self.limit
            && wire::RoceRepr::parse(frame).is_ok_and(|r| {
                r.bth.dest_qp == 1
                    && MadHeader::parse(r.payload).is_ok_and(|h| h.attribute_id == self.attribute)
            });
        if lost {
            self.lost.fetch_add(1, Ordering::SeqCst);
        }
        Fate {
            lost,
            ..Fate::default()
        }
    }
}

/// rnicd --cm-response-timeout 14 --cm-retries 4: each wait 4.096 µs ×
/// 2^14 (about 67 ms), five tries in all.
const SHORT: CmTimers = CmTimers {
    response_timeout: 14,
    max_retries: 4,
};

/// Two devices in this process on an in-memory wire, device `which`
/// sending through `lose`, both on the CM timers `cm`.
#[test]
fn a_lost_sidr_req_or_sidr_rep_is_repeated_and_the_id_resolves() {
    for (tag, which, attribute) in [("udlreq", 0, attr::SIDR_REQ), ("udlrep", 1, attr::SIDR_REP)] {
        let lost = Arc::new(AtomicUsize::new(0));
        let servers = pair_with(
            tag,
            which,
            Box::new(Lose {
                attribute,
                limit: 1,
                lost: lost.clone(),
            }),
            // each wait about 0.5 s, room for a slow accept on a busy
            // machine
            CmTimers {
                response_timeout: 17,
                max_retries: 15,
            },
        );
        let c = Side::new(servers[0].socket_path(), QpKind::Ud);
        let s = Side::new(servers[1].socket_path(), QpKind::Ud);
        s.listening(7300);
        let cid = c.resolved(7300);
        c.cm.connect(cid, &param(c.qp.qpn, b"")).unwrap();
        let req = s.expect(CmEventKind::CONNECT_REQUEST);
        ready(&s, req.id);
        s.cm.accept(req.id, &param(s.qp.qpn, b"")).unwrap();
        let est = c.expect(CmEventKind::ESTABLISHED);
        assert_eq!(est.ud.unwrap().qp_num, s.qp.qpn, "{tag}");
        assert_eq!(lost.load(Ordering::SeqCst), 1, "{tag}: the MAD was lost");
        // the SIDR_REQ went again; a repeat of an answered request gets
        // the same SIDR_REP, never a second CONNECT_REQUEST
        let st = c.ctx.stats().unwrap().cm;
        let reqs = count(&st, "cm_tx_sidr_req");
        assert!(reqs >= 2, "{tag}: {st:?}");
        assert_eq!(count(&st, "cm_retries"), reqs - 1, "{tag}: {st:?}");
        assert!(s.ch.next(true).unwrap().is_none(), "{tag}");
        if attribute == attr::SIDR_REP {
            let st = s.ctx.stats().unwrap().cm;
            assert!(count(&st, "cm_tx_sidr_rep") >= 2, "{tag}: {st:?}");
        }
    }
}

#[test]
fn a_ud_connect_to_a_peer_that_never_answers_ends_unreachable() {
    let servers = pair_with(
        "udgone",
        0,
        Box::new(Lose {
            attribute: attr::SIDR_REQ,
            limit: usize::MAX,
            lost: Arc::new(AtomicUsize::new(0)),
        }),
        SHORT,
    );
    let c = Side::new(servers[0].socket_path(), QpKind::Ud);
    let s = Side::new(servers[1].socket_path(), QpKind::Ud);
    s.listening(7400);
    let cid = c.resolved(7400);
    c.cm.connect(cid, &param(c.qp.qpn, b"anyone?")).unwrap();
    // IBA 12.11: the SIDR_REQ goes 1 + retries times; the kernel's RDMA
    // CM reports UNREACHABLE with -ETIMEDOUT
    let e = c.expect(CmEventKind::UNREACHABLE);
    assert_eq!((e.id, e.status), (cid, -libc::ETIMEDOUT));
    let st = c.ctx.stats().unwrap().cm;
    assert_eq!(count(&st, "cm_tx_sidr_req"), 5, "{st:?}");
    assert_eq!(count(&st, "cm_retries"), 4, "{st:?}");
    assert_eq!(count(&st, "cm_timeouts"), 1, "{st:?}");
    assert!(s.ch.next(true).unwrap().is_none());
}
