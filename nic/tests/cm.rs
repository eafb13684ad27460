//! The CM protocol (nic::cm) between two CMs on a virtual clock, joined by
//! an in-test link that can drop chosen messages; Service ID Resolution
//! (SIDR) for UD QPs; hostile input; and the REQ of the rxe rdma_cm
//! capture answered field by field.

use nic::cm::{
    iba_timeout, AcceptParams, Cm, CmAddr, CmDrop, CmEvent, CmId, ConnectParams, RejectReason,
    SidrParams,
};
use nic::Instant;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use wire::mad::{self, attr, CmMessage, Mad, MadBody, MadHeader};

const LAT: Duration = Duration::from_micros(10);
const SERVICE: u64 = 0x0106_0000_0000_4e20;
const A_QPN: u32 = 0x11;
const B_QPN: u32 = 0x22;
/// The RDMA CM's Q_Key for RDMA_PS_UDP (librdmacm's RDMA_UDP_QKEY).
const UDP_QKEY: u32 = 0x0123_4567;
/// An RDMA_PS_UDP service ID (IBA A11), port 7174.
const UDP_SERVICE: u64 = 0x0111_1c06;

fn addr(last: u8) -> CmAddr {
    CmAddr::from_ip(std::net::Ipv4Addr::new(10, 0, 0, last).into())
}

/// Which message the link drops: (sent by A?, attribute ID, n-th such
/// message from that side, counting from 1).
type DropRule = Box<dyn FnMut(bool, u16, usize) -> bool>;

struct Net {
    now: Instant,
    a: Cm,
    b: Cm,
    inflight: Vec<(Instant, bool, Mad)>,
    drop: DropRule,
    /// (time, sent by A?, attribute, dropped?, the MAD)
    log: Vec<(Instant, bool, u16, bool, Mad)>,
    ev_a: Vec<(Instant, CmEvent)>,
    ev_b: Vec<(Instant, CmEvent)>,
    auto_accept: bool,
}

fn accept_params() -> AcceptParams {
    AcceptParams {
        local_qpn: B_QPN,
        starting_psn: 0x00bb_bbbb,
        responder_resources: 4,
        initiator_depth: 4,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        end_to_end_flow_control: false,
        private_data: b"accepted".to_vec(),
    }
}

fn connect_params() -> ConnectParams {
    let mut p = ConnectParams::new(addr(2), SERVICE, A_QPN, 0x00aa_aaaa);
    p.cm_response_timeout = 16; // ~268 ms
    p.max_cm_retries = 3;
    p.private_data = b"hello".to_vec();
    p
}

impl Net {
    fn new(drop: DropRule) -> Net {
        let mut b = Cm::new(addr(2), 0xb, 2);
        b.listen(SERVICE);
        b.listen(UDP_SERVICE);
        Net {
            now: Instant::ZERO,
            a: Cm::new(addr(1), 0xa, 1),
            b,
            inflight: Vec::new(),
            drop,
            log: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            auto_accept: true,
        }
    }

    fn sent(&self, by_a: bool, attribute: u16) -> usize {
        self.log
            .iter()
            .filter(|l| l.1 == by_a && l.2 == attribute)
            .count()
    }

    fn flush(&mut self) {
        loop {
            let mut any = false;
            for by_a in [true, false] {
                loop {
                    let cm = if by_a { &mut self.a } else { &mut self.b };
                    let Some((to, m)) = cm.poll_transmit(self.now) else {
                        break;
                    };
                    any = true;
                    assert_eq!(to, if by_a { addr(2) } else { addr(1) });
                    let at = m.header.attribute_id;
                    let n = self.sent(by_a, at) + 1;
                    let dropped = (self.drop)(by_a, at, n);
                    self.log.push((self.now, by_a, at, dropped, m));
                    if !dropped {
                        self.inflight.push((self.now + LAT, by_a, m));
                    }
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push((self.now, e));
            }
            while let Some(e) = self.b.poll_event() {
                if let CmEvent::ConnectRequest { id, .. } = &e {
                    if self.auto_accept {
                        any = true;
                        self.b.accept(self.now, *id, &accept_params()).unwrap();
                    }
                }
                if let CmEvent::SidrRequest { id, .. } = &e {
                    if self.auto_accept {
                        any = true;
                        self.b
                            .sidr_accept(self.now, *id, B_QPN, UDP_QKEY, b"ud accepted")
                            .unwrap();
                    }
                }
                self.ev_b.push((self.now, e));
            }
            if !any {
                break;
            }
        }
    }

    /// Advances the clock to the next delivery or timer; false when there
    /// is none.
    fn next_time(&self) -> Option<Instant> {
        self.inflight
            .iter()
            .map(|f| f.0)
            .chain(self.a.poll_timeout())
            .chain(self.b.poll_timeout())
            .min()
    }

    /// Runs everything due up to `t`, then sets the clock to `t`.
    fn run_to(&mut self, t: Instant) {
        self.flush();
        while self.next_time().is_some_and(|n| n <= t) {
            self.step();
        }
        self.now = t;
    }

    fn step(&mut self) -> bool {
        self.flush();
        let Some(next) = self.next_time() else {
            return false;
        };
        self.now = next;
        let mut due = Vec::new();
        self.inflight.retain(|f| {
            if f.0 <= next {
                due.push((f.1, f.2));
                false
            } else {
                true
            }
        });
        for (to_b, m) in due {
            if to_b {
                self.b.handle_mad(next, addr(1), &m);
            } else {
                self.a.handle_mad(next, addr(2), &m);
            }
        }
        self.a.handle_timeout(next);
        self.b.handle_timeout(next);
        self.flush();
        true
    }

    /// Steps until `done` holds (panics after many steps).
    fn run_until(&mut self, mut done: impl FnMut(&Net) -> bool) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            if !self.step() {
                break;
            }
        }
        assert!(done(self), "condition never held; log: {:?}", self.names());
    }

    fn run_to_quiet(&mut self) {
        while self.step() {}
    }

    fn names(&self) -> Vec<String> {
        self.log
            .iter()
            .map(|l| {
                format!(
                    "{:?} {}{} {}",
                    l.0,
                    if l.1 { "A>" } else { "B>" },
                    mad::attribute_name(l.2),
                    if l.3 { "(dropped)" } else { "" }
                )
            })
            .collect()
    }

    fn established(&self) -> bool {
        let a = self
            .ev_a
            .iter()
            .any(|e| matches!(e.1, CmEvent::Established { .. }));
        let b = self
            .ev_b
            .iter()
            .any(|e| matches!(e.1, CmEvent::Established { .. }));
        a && b
    }

    fn b_id(&self) -> CmId {
        self.ev_b
            .iter()
            .find_map(|e| match &e.1 {
                CmEvent::ConnectRequest { id, .. } => Some(*id),
                _ => None,
            })
            .expect("B saw a REQ")
    }
}

fn no_drops() -> DropRule {
    Box::new(|_, _, _| false)
}

fn connected(drop: DropRule) -> (Net, CmId, CmId) {
    let mut net = Net::new(drop);
    let a = net.a.connect(net.now, &connect_params());
    net.run_until(Net::established);
    let b = net.b_id();
    (net, a, b)
}

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
/// REP's. rnicd's CM gives its QPs the same (daemon/tests/cm.rs).
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
