//! Service ID Resolution (SIDR) for UD QPs between two CMs on a virtual
//! clock (`common::Net`): resolution, lost and unanswered requests,
//! rejections, and hostile SIDR MADs.

mod common;

use common::*;
use nic::cm::{iba_timeout, CmDrop, CmEvent, CmId, RejectReason, SidrParams};
use nic::Instant;
use wire::mad::{self, attr, CmMessage, Mad, MadBody, MadHeader};

fn sidr_params() -> SidrParams {
    let mut p = SidrParams::new(addr(2), UDP_SERVICE);
    p.response_timeout = 16; // ~268 ms
    p.max_retries = 3;
    let mut pd = vec![0u8; mad::IpCmPrivateData::LEN];
    mad::IpCmPrivateData {
        major_version: 0,
        minor_version: 0,
        ip_version: 4,
        reserved: 0,
        src_port: 0xc001,
        src_ip: std::net::Ipv4Addr::new(10, 0, 0, 1)
            .to_ipv6_compatible()
            .octets(),
        dst_ip: std::net::Ipv4Addr::new(10, 0, 0, 2)
            .to_ipv6_compatible()
            .octets(),
    }
    .emit(&mut pd)
    .unwrap();
    pd.extend_from_slice(b"udp hello");
    p.private_data = pd;
    p
}

/// A's SIDR replies.
fn sidr_replies(net: &Net) -> Vec<(CmId, wire::mad::CmSidrRep)> {
    net.ev_a
        .iter()
        .filter_map(|e| match &e.1 {
            CmEvent::SidrReply { id, rep } => Some((*id, **rep)),
            _ => None,
        })
        .collect()
}

#[test]
fn sidr_resolves_the_service_id_to_the_listeners_qpn_and_qkey() {
    let mut net = Net::new(no_drops());
    let p = sidr_params();
    let a = net.a.sidr_request(net.now, &p);
    net.run_until(|n| !sidr_replies(n).is_empty());
    // B's owner saw the request with its RDMA IP CM header and data
    let req = net
        .ev_b
        .iter()
        .find_map(|e| match &e.1 {
            CmEvent::SidrRequest { req, ip, from, .. } => Some((req.clone(), *ip, *from)),
            _ => None,
        })
        .expect("B saw the SIDR_REQ");
    assert_eq!(req.2, addr(1));
    assert_eq!((req.0.request_id, req.0.pkey), (a.0, 0xFFFF));
    assert_eq!(req.0.service_id, UDP_SERVICE);
    assert_eq!(&req.0.private_data[36..45], b"udp hello");
    let ip = req.1.expect("the IP CM header parses");
    assert_eq!(ip.src_port, 0xc001);
    // A's answer: status 0, B's QP and the Q_Key, B's private data
    let [(id, rep)] = sidr_replies(&net)[..] else {
        panic!("one reply: {:?}", net.names());
    };
    assert_eq!(id, a);
    assert_eq!((rep.status, rep.qpn, rep.qkey), (0, B_QPN, UDP_QKEY));
    assert_eq!((rep.request_id, rep.service_id), (a.0, UDP_SERVICE));
    assert_eq!(&rep.private_data[..11], b"ud accepted");
    assert!(net.a.is_empty(), "the resolution is over at A");
    // one SIDR_REQ, one SIDR_REP with the request's transaction ID
    let tids: Vec<(u16, u64)> = net
        .log
        .iter()
        .map(|l| (l.2, l.4.header.transaction_id))
        .collect();
    assert_eq!(tids.len(), 2, "{:?}", net.names());
    assert_eq!((tids[0].0, tids[1].0), (attr::SIDR_REQ, attr::SIDR_REP));
    assert_eq!(tids[0].1, tids[1].1);
    // B keeps its answer for a repeated request a while, then forgets it
    assert_eq!(net.b.len(), 1);
    net.run_to_quiet();
    assert!(net.b.is_empty());
    assert_eq!(net.ev_a.len(), 1);
}

#[test]
fn lost_sidr_req_is_repeated_after_the_response_timeout() {
    let mut net = Net::new(Box::new(|by_a, at, n| {
        by_a && at == attr::SIDR_REQ && n == 1
    }));
    let p = sidr_params();
    let t0 = net.now;
    let a = net.a.sidr_request(t0, &p);
    net.run_until(|n| !sidr_replies(n).is_empty());
    let reqs: Vec<Instant> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::SIDR_REQ)
        .map(|l| l.0)
        .collect();
    assert_eq!(reqs, [t0, t0 + iba_timeout(p.response_timeout)]);
    let [(id, rep)] = sidr_replies(&net)[..] else {
        panic!("one reply");
    };
    assert_eq!((id, rep.status, rep.qpn), (a, 0, B_QPN));
}

#[test]
fn lost_sidr_rep_is_sent_again_for_the_repeated_request() {
    let mut net = Net::new(Box::new(|by_a, at, n| {
        !by_a && at == attr::SIDR_REP && n == 1
    }));
    let a = net.a.sidr_request(net.now, &sidr_params());
    net.run_until(|n| !sidr_replies(n).is_empty());
    assert_eq!(sidr_replies(&net)[0].0, a);
    // the owner was asked once; the second SIDR_REP is the first's copy
    let asked = net
        .ev_b
        .iter()
        .filter(|e| matches!(e.1, CmEvent::SidrRequest { .. }))
        .count();
    assert_eq!(asked, 1);
    let reps: Vec<&Mad> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::SIDR_REP)
        .map(|l| &l.4)
        .collect();
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0], reps[1]);
}

#[test]
fn unanswered_sidr_req_is_unreachable_after_max_retries_plus_one_tries() {
    let mut net = Net::new(Box::new(|by_a, _, _| by_a));
    let p = sidr_params();
    let t0 = net.now;
    let a = net.a.sidr_request(t0, &p);
    net.run_to_quiet();
    let w = iba_timeout(p.response_timeout);
    let reqs: Vec<Instant> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::SIDR_REQ)
        .map(|l| l.0)
        .collect();
    let want: Vec<Instant> = (0..=u32::from(p.max_retries)).map(|k| t0 + w * k).collect();
    assert_eq!(reqs, want);
    assert_eq!(
        net.ev_a,
        [(
            t0 + w * (u32::from(p.max_retries) + 1),
            CmEvent::Unreachable { id: a }
        )]
    );
    // no REJ: SIDR has none
    assert_eq!(net.log.len(), want.len());
    assert!(net.a.is_empty());
}

#[test]
fn sidr_req_for_a_service_nobody_serves_gets_status_1() {
    let mut net = Net::new(no_drops());
    let mut p = sidr_params();
    p.service_id = 0x0111_0001;
    let a = net.a.sidr_request(net.now, &p);
    net.run_to_quiet();
    let [(id, rep)] = sidr_replies(&net)[..] else {
        panic!("one reply");
    };
    assert_eq!(id, a);
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey, rep.service_id),
        (
            mad::sidr_status::SERVICE_ID_NOT_SUPPORTED,
            0,
            0,
            0x0111_0001
        )
    );
    assert!(net.ev_b.is_empty(), "B's owner is not asked");
    assert!(net.a.is_empty() && net.b.is_empty());
}

#[test]
fn rejected_sidr_req_gets_the_owners_status_and_private_data() {
    // a consumer's reject is status 2; sidr_reject gives any other
    for (how, want) in [(0, 2u8), (1, 3)] {
        let mut net = Net::new(no_drops());
        net.auto_accept = false;
        let a = net.a.sidr_request(net.now, &sidr_params());
        net.run_until(|n| !n.ev_b.is_empty());
        let Some(CmEvent::SidrRequest { id, .. }) = net.ev_b.first().map(|e| e.1.clone()) else {
            panic!("a SIDR request");
        };
        // a connection's REP is no answer to a SIDR_REQ
        assert_eq!(
            net.b.accept(net.now, id, &accept_params()),
            Err(nic::cm::CmError::WrongState)
        );
        if how == 0 {
            net.b
                .reject(id, RejectReason::CONSUMER_REJECT, b"go away")
                .unwrap();
        } else {
            net.b
                .sidr_reject(id, mad::sidr_status::NO_QP, b"go away")
                .unwrap();
        }
        net.run_to_quiet();
        let [(got, rep)] = sidr_replies(&net)[..] else {
            panic!("one reply");
        };
        assert_eq!((got, rep.status, rep.qpn), (a, want, 0));
        assert_eq!(&rep.private_data[..7], b"go away");
        assert!(net.a.is_empty() && net.b.is_empty());
    }
}

/// SIDR_REPs that answer nothing of ours, or answer from elsewhere or for
/// another service, and SIDR_REQs repeated while the owner decides are
/// counted drops; the genuine answer still resolves.
#[test]
fn hostile_sidr_mads_are_counted_drops() {
    let mut net = Net::new(no_drops());
    net.auto_accept = false;
    let a = net.a.sidr_request(net.now, &sidr_params());
    net.run_until(|n| !n.ev_b.is_empty());
    let rep = |request_id: u32, service_id: u64| Mad {
        header: MadHeader::cm(attr::SIDR_REP, 7),
        body: MadBody::Cm(CmMessage::SidrRep(mad::CmSidrRep {
            request_id,
            status: 0,
            additional_info_length: 0,
            reserved0: 0,
            qpn: 0x99,
            reserved1: 0,
            service_id,
            qkey: 1,
            additional_info: [0; 72],
            private_data: [0; mad::CmSidrRep::PRIVATE_DATA_LEN],
        })),
    };
    net.a
        .handle_mad(net.now, addr(2), &rep(a.0 ^ 1, UDP_SERVICE));
    net.a.handle_mad(net.now, addr(9), &rep(a.0, UDP_SERVICE));
    assert_eq!(net.a.drops()[&CmDrop::UnknownCommId], 2);
    net.a
        .handle_mad(net.now, addr(2), &rep(a.0, UDP_SERVICE + 1));
    assert_eq!(net.a.drops()[&CmDrop::WrongServiceId], 1);
    // the request again, as a retry would bring it
    let req = net.log[0].4;
    net.b.handle_mad(net.now, addr(1), &req);
    assert_eq!(net.b.drops()[&CmDrop::DuplicateReq], 1);
    assert!(sidr_replies(&net).is_empty());
    let Some(CmEvent::SidrRequest { id, .. }) = net.ev_b.first().map(|e| e.1.clone()) else {
        panic!("a SIDR request");
    };
    net.b
        .sidr_accept(net.now, id, B_QPN, UDP_QKEY, &[])
        .unwrap();
    net.run_until(|n| !sidr_replies(n).is_empty());
    assert_eq!(sidr_replies(&net)[0].1.qpn, B_QPN);
    // a late copy of the answer finds nothing
    let late = *net
        .log
        .iter()
        .rev()
        .find(|l| l.2 == attr::SIDR_REP)
        .map(|l| &l.4)
        .unwrap();
    net.a.handle_mad(net.now, addr(2), &late);
    assert_eq!(net.a.drops()[&CmDrop::UnknownCommId], 3);
}
