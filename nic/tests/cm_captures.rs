//! The REQ of the rxe rdma_cm captures answered field by field, and our
//! REQ against the captures' layout.

use nic::cm::{AcceptParams, Cm, CmAddr, CmEvent, ConnectParams};
use nic::Instant;
use wire::mad::{self, attr, CmMessage, Mad, MadBody};

/// The CM MADs of `name` in ../shared/pcaps/rxe-public, in order.
fn capture_mads(name: &str) -> Option<Vec<Mad>> {
    let path = testkit::pcap::rxe_pcaps(&format!("the CM capture test of {name}"))?.join(name);
    if !path.is_file() {
        testkit::skip_or_fail(
            &format!("the CM capture test of {name}"),
            &format!("{} is missing from the rxe captures", path.display()),
        );
        return None;
    }
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let Ok(f) = wire::RoceRepr::parse(&p.data) else {
            continue;
        };
        if f.bth.dest_qp == mad::GSI_QPN {
            out.push(Mad::parse(f.payload).unwrap());
        }
    }
    Some(out)
}

#[test]
fn rxe_capture_req_gets_a_rep_consistent_with_the_captures() {
    let Some(mads) = capture_mads("rdma_cm.pcap") else {
        return;
    };
    let (req_mad, req) = mads
        .iter()
        .find_map(|m| match m.cm() {
            Some(CmMessage::Req(r)) => Some((*m, *r)),
            _ => None,
        })
        .expect("a REQ in rdma_cm.pcap");
    let (rep_mad, rep) = mads
        .iter()
        .find_map(|m| match m.cm() {
            Some(CmMessage::Rep(r)) if r.remote_comm_id == req.local_comm_id => Some((*m, *r)),
            _ => None,
        })
        .expect("the REP to it");
    let from = CmAddr {
        gid: req.primary.local_gid,
    };
    let mut cm = Cm::new(
        CmAddr {
            gid: req.primary.remote_gid,
        },
        rep.local_ca_guid,
        7,
    );
    cm.listen(req.service_id);
    cm.handle_mad(Instant::ZERO, from, &req_mad);
    let Some(CmEvent::ConnectRequest {
        id, ip, req: got, ..
    }) = cm.poll_event()
    else {
        panic!("no connect request");
    };
    assert_eq!(*got, req);
    let (s, d) = ip.expect("IP CM private data").addrs().unwrap();
    assert_eq!(CmAddr::from_ip(s), from);
    assert_eq!(CmAddr::from_ip(d), cm.local());
    // the values that are the passive side's choice, taken from rxe's REP
    let p = AcceptParams {
        local_qpn: rep.local_qpn,
        starting_psn: rep.starting_psn,
        responder_resources: rep.responder_resources,
        initiator_depth: rep.initiator_depth,
        target_ack_delay: rep.target_ack_delay,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        end_to_end_flow_control: rep.end_to_end_flow_control,
        private_data: rep.private_data.to_vec(),
    };
    cm.accept(Instant::ZERO, id, &p).unwrap();
    let (to, ours) = cm.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(to, from);
    let Some(CmMessage::Rep(our)) = ours.cm() else {
        panic!("not a REP: {ours:?}");
    };
    // IBA 12.6.8: the REP answers the REQ's comm ID, in a CM Send()
    assert_eq!(our.remote_comm_id, req.local_comm_id);
    assert_eq!(our.remote_comm_id, rep.remote_comm_id);
    assert_eq!(our.local_comm_id, id.0);
    assert_ne!(our.local_comm_id, 0);
    let h = (
        ours.header.base_version,
        ours.header.mgmt_class,
        ours.header.class_version,
        ours.header.method,
        ours.header.attribute_id,
    );
    let rh = rep_mad.header;
    assert_eq!(
        h,
        (
            rh.base_version,
            rh.mgmt_class,
            rh.class_version,
            rh.method,
            rh.attribute_id
        )
    );
    // IBA 12.6.8: resources are bounded by the REQ's, as in rxe's REP
    assert!(our.responder_resources <= req.initiator_depth);
    assert!(our.initiator_depth <= req.responder_resources);
    // every field but our own comm ID is rxe's
    let mut theirs = rep;
    theirs.local_comm_id = our.local_comm_id;
    assert_eq!(*our, theirs);
    // and the REP rides on the REQ's transaction ID, as rxe's does when it
    // does
    if rep_mad.header.transaction_id == req_mad.header.transaction_id {
        assert_eq!(ours.header.transaction_id, req_mad.header.transaction_id);
    }

    // the capture's RTU, addressed to our comm ID, establishes it
    let find = |pick: &dyn Fn(&CmMessage) -> bool| {
        *mads
            .iter()
            .find(|m| m.cm().is_some_and(pick))
            .expect("message in the capture")
    };
    let mut rtu = find(&|m| matches!(m, CmMessage::Rtu(i) if i.local_comm_id == req.local_comm_id));
    if let MadBody::Cm(CmMessage::Rtu(i)) = &mut rtu.body {
        i.remote_comm_id = id.0;
    }
    cm.handle_mad(Instant::ZERO, from, &rtu);
    assert_eq!(
        cm.poll_event(),
        Some(CmEvent::Established { id, rep: None })
    );

    // rxe's passive side disconnected this connection: our DREQ names what
    // its DREQ names
    let Some(CmMessage::Dreq(their_dreq)) =
        find(&|m| matches!(m, CmMessage::Dreq(d) if d.remote_comm_id == req.local_comm_id))
            .cm()
            .copied()
    else {
        unreachable!()
    };
    cm.disconnect(Instant::ZERO, id).unwrap();
    let (_, dreq) = cm.poll_transmit(Instant::ZERO).unwrap();
    let Some(CmMessage::Dreq(our_dreq)) = dreq.cm() else {
        panic!("not a DREQ: {dreq:?}");
    };
    assert_eq!(
        (our_dreq.remote_comm_id, our_dreq.remote_qpn),
        (their_dreq.remote_comm_id, their_dreq.remote_qpn)
    );
    let mut drep =
        find(&|m| matches!(m, CmMessage::Drep(i) if i.local_comm_id == req.local_comm_id));
    if let MadBody::Cm(CmMessage::Drep(i)) = &mut drep.body {
        i.remote_comm_id = id.0;
    }
    cm.handle_mad(Instant::ZERO, from, &drep);
    assert_eq!(cm.poll_event(), Some(CmEvent::Disconnected { id }));
    assert!(cm.drops().is_empty(), "{:?}", cm.drops());

    // and a DREQ from the peer is answered under its own transaction ID,
    // as rxe answers
    let mut second =
        find(&|m| matches!(m, CmMessage::Req(r) if r.local_comm_id != req.local_comm_id));
    let Some(CmMessage::Req(req2)) = second.cm().copied() else {
        unreachable!()
    };
    cm.handle_mad(Instant::ZERO, from, &second);
    let Some(CmEvent::ConnectRequest { id: id2, .. }) = cm.poll_event() else {
        panic!("no second connect request");
    };
    let rep2 = find(&|m| matches!(m, CmMessage::Rep(r) if r.remote_comm_id == req2.local_comm_id));
    let Some(CmMessage::Rep(rep2)) = rep2.cm().copied() else {
        unreachable!()
    };
    let mut p2 = p.clone();
    p2.local_qpn = rep2.local_qpn;
    cm.accept(Instant::ZERO, id2, &p2).unwrap();
    cm.established(id2).unwrap();
    while cm.poll_transmit(Instant::ZERO).is_some() {}
    while cm.poll_event().is_some() {}
    let peer_dreq =
        find(&|m| matches!(m, CmMessage::Dreq(d) if d.local_comm_id == req2.local_comm_id));
    let their_drep =
        find(&|m| matches!(m, CmMessage::Drep(i) if i.remote_comm_id == req2.local_comm_id));
    second = peer_dreq;
    if let MadBody::Cm(CmMessage::Dreq(d)) = &mut second.body {
        d.remote_comm_id = id2.0;
    }
    cm.handle_mad(Instant::ZERO, from, &second);
    let (_, our_drep) = cm.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(our_drep.header.attribute_id, attr::DREP);
    assert_eq!(
        our_drep.header.transaction_id,
        peer_dreq.header.transaction_id
    );
    assert_eq!(
        their_drep.header.transaction_id,
        peer_dreq.header.transaction_id
    );
    assert!(cm.drops().is_empty(), "{:?}", cm.drops());
}

/// The REQ we build from rxe's choices is rxe's REQ but for our comm ID,
/// CA GUID and what librdmacm chose (timeouts, retries, private data).
#[test]
fn our_req_has_the_layout_of_the_captures_req() {
    let Some(mads) = capture_mads("rdma_cm.pcap") else {
        return;
    };
    let theirs = mads
        .iter()
        .find_map(|m| match m.cm() {
            Some(CmMessage::Req(r)) => Some(*r),
            _ => None,
        })
        .expect("a REQ in rdma_cm.pcap");
    let remote = CmAddr {
        gid: theirs.primary.remote_gid,
    };
    let mut p = ConnectParams::new(
        remote,
        theirs.service_id,
        theirs.local_qpn,
        theirs.starting_psn,
    );
    p.responder_resources = theirs.responder_resources;
    p.initiator_depth = theirs.initiator_depth;
    p.path_mtu = theirs.path_mtu;
    p.retry_count = theirs.retry_count;
    p.rnr_retry_count = theirs.rnr_retry_count;
    p.cm_response_timeout = theirs.remote_cm_response_timeout;
    p.max_cm_retries = theirs.max_cm_retries;
    p.srq = theirs.srq;
    p.end_to_end_flow_control = theirs.end_to_end_flow_control;
    p.local_ack_timeout = theirs.primary.local_ack_timeout;
    p.hop_limit = theirs.primary.hop_limit;
    p.traffic_class = theirs.primary.traffic_class;
    p.flow_label = theirs.primary.flow_label;
    p.private_data = theirs.private_data.to_vec();
    let mut cm = Cm::new(
        CmAddr {
            gid: theirs.primary.local_gid,
        },
        theirs.local_ca_guid,
        3,
    );
    let id = cm.connect(Instant::ZERO, &p);
    let (to, mad) = cm.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(to, remote);
    let Some(CmMessage::Req(ours)) = mad.cm() else {
        panic!("not a REQ");
    };
    assert_eq!(ours.local_comm_id, id.0);
    let mut want = theirs;
    want.local_comm_id = id.0;
    assert_eq!(ours.primary, want.primary);
    assert_eq!(*ours, want);
}

/// In Linux's CM (rxe on both ends of the third-party captures) the
/// Starting PSN of a REQ or REP is where its sender's receive queue
/// starts: the passive side sends from the REQ's, the active side from the
/// REP's. rnicd's CM gives its QPs the same (rnicd/tests/cm.rs).
#[test]
fn rxe_captures_send_from_the_peers_starting_psn() {
    for name in ["rping.pcap", "rdma_cm.pcap"] {
        let Some(dir) = testkit::pcap::rxe_pcaps("rxe_captures_send_from_the_peers_starting_psn")
        else {
            return;
        };
        let file = std::fs::File::open(dir.join(name)).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
        let (mut req, mut rep) = (None, None);
        // the first RC request each address sent after the REP
        let mut first: Vec<(std::net::IpAddr, u32)> = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let Ok(f) = wire::RoceRepr::parse(&p.data) else {
                continue;
            };
            if f.bth.dest_qp == mad::GSI_QPN {
                match Mad::parse(f.payload).unwrap().cm() {
                    Some(CmMessage::Req(m)) if req.is_none() => req = Some((f.ip.src(), *m)),
                    Some(CmMessage::Rep(m)) if rep.is_none() => rep = Some(*m),
                    _ => {}
                }
                continue;
            }
            let request = f.bth.opcode.info().is_some_and(|i| i.is_request());
            if rep.is_some() && request && !first.iter().any(|(a, _)| *a == f.ip.src()) {
                first.push((f.ip.src(), f.bth.psn.value()));
            }
        }
        let (active, req) = req.unwrap_or_else(|| panic!("{name}: no REQ"));
        let rep = rep.unwrap_or_else(|| panic!("{name}: no REP"));
        let sent_by = |ours: bool| {
            first
                .iter()
                .find(|(a, _)| (*a == active) == ours)
                .unwrap_or_else(|| panic!("{name}: no request from both sides: {first:?}"))
                .1
        };
        assert_eq!(sent_by(true), rep.starting_psn, "{name}: the active side");
        assert_eq!(sent_by(false), req.starting_psn, "{name}: the passive side");
    }
}
