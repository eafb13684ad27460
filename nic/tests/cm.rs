//! The CM protocol (nic::cm) between two CMs on a virtual clock, joined by
//! an in-test link that can drop chosen messages (`common::Net`):
//! connection establishment, retries and timeouts, disconnection, and
//! hostile input. SIDR is in cm_sidr.rs, the rxe captures in
//! cm_captures.rs.

mod common;

use common::*;
use nic::cm::{iba_timeout, CmDrop, CmEvent, RejectReason};
use nic::Instant;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use wire::mad::{self, attr, CmMessage, Mad, MadBody, MadHeader};

#[test]
fn connection_forms_with_req_rep_rtu_and_carries_the_qp_values() {
    let (net, a, b) = connected(no_drops());
    assert_eq!(net.names().len(), 3, "{:?}", net.names());
    let order: Vec<u16> = net.log.iter().map(|l| l.2).collect();
    assert_eq!(order, [attr::REQ, attr::REP, attr::RTU]);
    let (req, ip) = net
        .ev_b
        .iter()
        .find_map(|e| match &e.1 {
            CmEvent::ConnectRequest { req, ip, .. } => Some((req.clone(), *ip)),
            _ => None,
        })
        .unwrap();
    assert_eq!(req.local_qpn, A_QPN);
    assert_eq!(req.starting_psn, 0x00aa_aaaa);
    assert_eq!(req.path_mtu, 5);
    assert_eq!(req.primary.local_gid, addr(1).gid);
    assert_eq!(req.primary.remote_gid, addr(2).gid);
    assert_eq!(&req.private_data[..5], b"hello");
    assert!(ip.is_none(), "b\"hello\" is no IP CM private data");
    let rep = net
        .ev_a
        .iter()
        .find_map(|e| match &e.1 {
            CmEvent::Established { id, rep: Some(r) } if *id == a => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(rep.local_qpn, B_QPN);
    assert_eq!(rep.starting_psn, 0x00bb_bbbb);
    assert_eq!(rep.remote_comm_id, a.0);
    assert_eq!(rep.local_comm_id, b.0);
    // the REP's resources are bounded by the REQ's (1 and 1)
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    assert_eq!(&rep.private_data[..8], b"accepted");
    assert!(net.a.is_established(a) && net.b.is_established(b));
    assert!(net.a.drops().is_empty() && net.b.drops().is_empty());
}

#[test]
fn ip_cm_private_data_reaches_the_listener() {
    let mut net = Net::new(no_drops());
    let mut p = connect_params();
    let pd = mad::IpCmPrivateData {
        major_version: 0,
        minor_version: 0,
        ip_version: 4,
        reserved: 0,
        src_port: 5555,
        src_ip: addr(1).gid,
        dst_ip: addr(2).gid,
    };
    let mut b = [0u8; mad::IpCmPrivateData::LEN];
    pd.emit(&mut b).unwrap();
    p.private_data = b.to_vec();
    p.service_id = mad::ip_cm_service_id(0x06, 7174);
    net.b.listen(p.service_id);
    net.a.connect(net.now, &p);
    net.run_until(Net::established);
    let ip = net
        .ev_b
        .iter()
        .find_map(|e| match &e.1 {
            CmEvent::ConnectRequest { ip, .. } => Some(*ip),
            _ => None,
        })
        .unwrap();
    assert_eq!(ip, Some(pd));
}

#[test]
fn lost_req_rep_and_rtu_are_retried_and_the_connection_forms() {
    for (lost, by_a) in [(attr::REQ, true), (attr::REP, false), (attr::RTU, true)] {
        let (mut net, _, b) =
            connected(Box::new(move |s, at, n| s == by_a && at == lost && n == 1));
        net.run_until(|n| n.b.is_established(b));
        let name = mad::attribute_name(lost);
        assert_eq!(net.log.iter().filter(|l| l.3).count(), 1, "{name}");
        assert_eq!(net.sent(by_a, lost), 2, "{name} resent: {:?}", net.names());
    }
}

#[test]
fn lost_rtu_is_replaced_by_any_packet_on_the_qp() {
    let mut net = Net::new(Box::new(|_, at, _| at == attr::RTU));
    net.a.connect(net.now, &connect_params());
    net.run_until(|n| {
        n.ev_a
            .iter()
            .any(|e| matches!(e.1, CmEvent::Established { .. }))
    });
    let b = net.b_id();
    assert!(!net.b.is_established(b));
    // the owner saw a packet from the peer on the QP
    net.b.established(b).unwrap();
    net.flush();
    assert!(net.b.is_established(b));
    assert_eq!(net.b.poll_timeout(), None, "no REP retransmission left");
}

#[test]
fn vanished_peer_times_out_after_max_retries_plus_one_reqs_at_the_iba_interval() {
    let mut net = Net::new(Box::new(|by_a, _, _| by_a));
    let p = connect_params();
    let t0 = net.now;
    let a = net.a.connect(t0, &p);
    net.run_to_quiet();
    let reqs: Vec<Instant> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::REQ)
        .map(|l| l.0)
        .collect();
    let w = iba_timeout(p.cm_response_timeout);
    assert_eq!(w, Duration::from_nanos(4096 << 16));
    let want: Vec<Instant> = (0..=u32::from(p.max_cm_retries))
        .map(|k| t0 + w * k)
        .collect();
    assert_eq!(reqs, want);
    let ev: Vec<_> = net.ev_a.iter().collect();
    assert_eq!(
        ev,
        [&(
            t0 + w * (u32::from(p.max_cm_retries) + 1),
            CmEvent::Unreachable { id: a }
        )]
    );
    assert!(net.a.is_empty());
}

#[test]
fn unanswered_rep_times_out_after_max_retries_plus_one_reps() {
    // every RTU is lost and the owner never reports a packet on the QP
    let mut net = Net::new(Box::new(|_, at, _| at == attr::RTU));
    let p = connect_params();
    let a = net.a.connect(net.now, &p);
    net.run_to_quiet();
    let b = net.b_id();
    let reps: Vec<Instant> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::REP)
        .map(|l| l.0)
        .collect();
    // the REP waits the REQ's local CM response timeout each time
    let w = iba_timeout(p.cm_response_timeout);
    let t_rep = reps[0];
    let want: Vec<Instant> = (0..=u32::from(p.max_cm_retries))
        .map(|k| t_rep + w * k)
        .collect();
    assert_eq!(reps, want);
    assert!(net
        .ev_b
        .iter()
        .any(|e| e.1 == CmEvent::Unreachable { id: b }));
    // A, established by the first REP, learns from the timeout REJ
    let tail: Vec<&CmEvent> = net.ev_a.iter().map(|e| &e.1).collect();
    assert!(matches!(tail[..], [
        CmEvent::Established { .. },
        CmEvent::Rejected { id, reason, .. },
        CmEvent::TimeWaitExit { id: id2 },
    ] if *id == a && *id2 == a && *reason == RejectReason::TIMEOUT));
    let rej = net.log.iter().find(|l| l.2 == attr::REJ).unwrap().4;
    let Some(CmMessage::Rej(rej)) = rej.cm() else {
        panic!()
    };
    assert_eq!(rej.reject_info_length, 8);
    assert_eq!(rej.ari[..8], 0xbu64.to_be_bytes());
    assert!(net.a.is_empty() && net.b.is_empty());
}

#[test]
fn req_for_an_unknown_service_is_rejected_with_invalid_service_id() {
    let mut net = Net::new(no_drops());
    net.b.unlisten(SERVICE);
    let a = net.a.connect(net.now, &connect_params());
    net.run_to_quiet();
    assert!(matches!(
        &net.ev_a[..],
        [(_, CmEvent::Rejected { id, reason, .. })]
            if *id == a && *reason == RejectReason::INVALID_SERVICE_ID
    ));
    assert!(net.a.is_empty() && net.b.is_empty());
    assert_eq!(net.sent(true, attr::REQ), 1);
}

#[test]
fn mra_extends_the_wait_for_the_rep() {
    let mut net = Net::new(no_drops());
    net.auto_accept = false;
    let p = connect_params();
    let w = iba_timeout(p.cm_response_timeout);
    net.a.connect(net.now, &p);
    net.run_until(|n| !n.ev_b.is_empty());
    let b = net.b_id();
    net.b.mra(b, 20).unwrap(); // ~4.3 s, far beyond the REQ's wait
    net.flush();
    // the owner answers after 8 of A's response waits
    net.run_to(net.now + w * 8);
    assert_eq!(net.sent(true, attr::REQ), 1, "{:?}", net.names());
    assert!(net.ev_a.is_empty());
    net.b.accept(net.now, b, &accept_params()).unwrap();
    net.run_until(Net::established);
    assert_eq!(net.sent(true, attr::REQ), 1, "{:?}", net.names());
}

#[test]
fn duplicate_req_is_answered_with_the_same_rep() {
    let (net, _, _) = connected(Box::new(|by_a, at, n| !by_a && at == attr::REP && n == 1));
    let reps: Vec<Mad> = net
        .log
        .iter()
        .filter(|l| l.2 == attr::REP)
        .map(|l| l.4)
        .collect();
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0], reps[1]);
    assert_eq!(net.b.len(), 1, "one connection for both REQs");

    // and a REQ repeated by hand while the REP is outstanding
    let mut net = Net::new(Box::new(|_, at, _| at == attr::RTU));
    net.a.connect(net.now, &connect_params());
    net.run_until(|n| n.sent(false, attr::REP) == 1);
    let req = net.log[0].4;
    net.b.handle_mad(net.now, addr(1), &req);
    let (_, again) = net.b.poll_transmit(net.now).unwrap();
    assert_eq!(again, net.log.iter().find(|l| l.2 == attr::REP).unwrap().4);
    assert_eq!(net.b.len(), 1);
}

#[test]
fn stale_req_for_an_established_qp_is_rejected() {
    let (mut net, a, b) = connected(no_drops());
    // A forgets the connection and asks again for the same QP
    net.a.destroy(a);
    let a2 = net.a.connect(net.now, &connect_params());
    net.run_to_quiet();
    assert!(net.ev_a.iter().any(|e| matches!(&e.1,
        CmEvent::Rejected { id, reason, .. }
            if *id == a2 && *reason == RejectReason::STALE_CONNECTION)));
    assert!(net.b.is_established(b));
}

fn disconnect(from_a: bool, drop: DropRule) -> Net {
    let (mut net, a, b) = connected(drop);
    if from_a {
        net.a.disconnect(net.now, a).unwrap();
    } else {
        net.b.disconnect(net.now, b).unwrap();
    }
    net.run_to_quiet();
    for (ev, id, initiator) in [(&net.ev_a, a, from_a), (&net.ev_b, b, !from_a)] {
        let tail: Vec<&CmEvent> = ev
            .iter()
            .map(|e| &e.1)
            .skip_while(|e| !matches!(e, CmEvent::Established { .. }))
            .skip(1)
            .collect();
        let want: Vec<CmEvent> = if initiator {
            vec![CmEvent::Disconnected { id }, CmEvent::TimeWaitExit { id }]
        } else {
            vec![
                CmEvent::DisconnectRequest { id },
                CmEvent::Disconnected { id },
                CmEvent::TimeWaitExit { id },
            ]
        };
        assert_eq!(tail, want.iter().collect::<Vec<_>>(), "{:?}", net.names());
    }
    assert!(net.a.is_empty() && net.b.is_empty());
    net
}

#[test]
fn dreq_drep_from_either_side() {
    for from_a in [true, false] {
        let net = disconnect(from_a, no_drops());
        assert_eq!(net.sent(from_a, attr::DREQ), 1);
        assert_eq!(net.sent(!from_a, attr::DREP), 1);
    }
}

#[test]
fn lost_drep_is_answered_again_when_the_dreq_is_retried() {
    let net = disconnect(
        true,
        Box::new(|by_a, at, n| !by_a && at == attr::DREP && n == 1),
    );
    assert_eq!(net.sent(true, attr::DREQ), 2);
    assert_eq!(net.sent(false, attr::DREP), 2);
}

#[test]
fn unanswered_dreq_ends_in_disconnected_after_the_retries() {
    let (mut net, a, _) = connected(Box::new(|by_a, at, _| by_a && at == attr::DREQ));
    net.a.disconnect(net.now, a).unwrap();
    net.run_to_quiet();
    assert_eq!(net.sent(true, attr::DREQ), 4);
    assert!(net
        .ev_a
        .iter()
        .any(|e| e.1 == CmEvent::DreqTimeout { id: a }));
    assert!(net.a.is_empty());
}

fn random_cm_message(rng: &mut impl Rng, ids: &[u32]) -> CmMessage {
    let mut data = [0u8; mad::MAD_DATA_LEN];
    rng.fill(&mut data[..]);
    // comm IDs: often real ones, so the state checks are what stops them
    let id = |rng: &mut dyn rand::RngCore| {
        if rng.gen_bool(0.7) {
            ids[rng.gen_range(0..ids.len())]
        } else {
            rng.gen()
        }
    };
    data[0..4].copy_from_slice(&id(rng).to_be_bytes());
    data[4..8].copy_from_slice(&id(rng).to_be_bytes());
    let at = [
        attr::REQ,
        attr::MRA,
        attr::REJ,
        attr::REP,
        attr::RTU,
        attr::DREQ,
        attr::DREP,
        attr::SIDR_REQ,
        attr::SIDR_REP,
        attr::LAP,
    ][rng.gen_range(0..10)];
    CmMessage::parse(at, &data).unwrap()
}

/// Random bytes and random well-formed CM messages (real comm IDs mixed in)
/// from the peer's address and from a stranger: no panic, every one a
/// counted drop or an answer, and the established connection is untouched
/// and still disconnects cleanly.
#[test]
fn hostile_mads_never_panic_nor_touch_an_established_connection() {
    for seed in 0..64u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut net, a, b) = connected(no_drops());
        let ids = [a.0, b.0, 0, 1];
        for _ in 0..200 {
            let from = if rng.gen_bool(0.5) { addr(1) } else { addr(9) };
            match rng.gen_range(0..3) {
                0 => {
                    let len = rng.gen_range(0..300);
                    let mut bytes = vec![0u8; len];
                    rng.fill(&mut bytes[..]);
                    net.b.handle_bytes(net.now, from, &bytes);
                }
                1 => {
                    let mut bytes = [0u8; mad::MAD_LEN];
                    rng.fill(&mut bytes[..]);
                    // a CM header with one field perhaps wrong
                    let mut h = MadHeader::cm(rng.gen(), rng.gen());
                    match rng.gen_range(0..5) {
                        0 => h.base_version = rng.gen(),
                        1 => h.class_version = rng.gen(),
                        2 => h.method = rng.gen(),
                        3 => h.mgmt_class = rng.gen(),
                        _ => {}
                    }
                    h.emit(&mut bytes).unwrap();
                    net.b.handle_bytes(net.now, from, &bytes);
                }
                _ => {
                    let m = random_cm_message(&mut rng, &ids);
                    // the messages that are no attack: the peer's own DREQ
                    // or REJ for the connection
                    let own = match &m {
                        CmMessage::Dreq(d) => d.remote_comm_id == b.0,
                        CmMessage::Rej(r) => r.remote_comm_id == b.0 && r.local_comm_id == a.0,
                        _ => false,
                    };
                    if from == addr(1) && own {
                        continue;
                    }
                    let mad = Mad {
                        header: MadHeader::cm(m.attribute_id(), rng.gen()),
                        body: MadBody::Cm(m),
                    };
                    net.b.handle_mad(net.now, from, &mad);
                }
            }
            assert!(net.b.is_established(b), "seed {seed}");
        }
        // answers (REJs, REPs) go out, events (connect requests from the
        // stranger) come; none of them is about the connection
        while net.b.poll_transmit(net.now).is_some() {}
        while let Some(e) = net.b.poll_event() {
            if let CmEvent::ConnectRequest { id, .. } | CmEvent::SidrRequest { id, .. } = e {
                net.b.destroy(id);
            }
            assert!(
                !matches!(e, CmEvent::Disconnected { id } | CmEvent::DisconnectRequest { id } if id == b)
            );
        }
        assert!(net.b.drops().values().sum::<u64>() > 0);
        for d in net.b.drops().keys() {
            assert!(CmDrop::ALL.contains(d) && d.name().starts_with("cm_"));
        }
        net.a.disconnect(net.now, a).unwrap();
        net.run_to_quiet();
        assert!(net
            .ev_b
            .iter()
            .any(|e| e.1 == CmEvent::Disconnected { id: b }));
        assert!(net.a.is_empty(), "seed {seed}");
    }
}
