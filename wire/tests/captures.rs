//! Every RoCEv2 frame of the third-party Linux Soft-RoCE captures parses, its ICRC verifies, and emitting the
//! parsed repr reproduces the frame byte for byte.

mod common;

use std::collections::BTreeMap;
use wire::{udp, RoceRepr, Transport};

#[test]
fn every_rxe_frame_parses_verifies_and_reemits_byte_for_byte() {
    let Some(files) =
        common::rxe_frames("every_rxe_frame_parses_verifies_and_reemits_byte_for_byte")
    else {
        return;
    };
    assert!(
        files.len() >= 20,
        "expected the 11 top-level and 9 nccl captures, found {}",
        files.len()
    );
    let mut total = 0;
    let mut opcodes: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, frames) in &files {
        let mut roce_in_file = 0;
        for (i, f) in frames.iter().enumerate() {
            if !common::is_rocev2(f) {
                continue;
            }
            let r = RoceRepr::parse(f).unwrap_or_else(|e| panic!("{name} frame {}: {e}", i + 1));
            let mut out = vec![0u8; r.buffer_len()];
            let n = r.emit(&mut out).unwrap();
            assert_eq!(n, f.len(), "{name} frame {}: length", i + 1);
            assert_eq!(
                &out[..],
                &f[..],
                "{name} frame {}: re-emitted bytes differ\n{r}",
                i + 1
            );
            *opcodes.entry(r.bth.opcode.name()).or_default() += 1;
            roce_in_file += 1;
        }
        assert!(roce_in_file > 0, "{name}: no RoCEv2 frame found");
        total += roce_in_file;
    }
    eprintln!(
        "{total} RoCEv2 frames in {} captures; opcodes: {opcodes:?}",
        files.len()
    );
    assert!(total > 1000, "only {total} RoCE frames");
    for op in [
        "RC_SEND_ONLY",
        "RC_ACKNOWLEDGE",
        "UD_SEND_ONLY",
        "RC_RDMA_READ_RESPONSE_FIRST",
        "RC_FETCH_ADD",
    ] {
        assert!(opcodes.contains_key(op), "no {op} in the captures");
    }
}

/// rxe gives both directions of a connection the UDP source port of
/// `rdma_get_udp_sport(0, lqpn, rqpn)` when no flow label is set. Frames
/// carry only the destination QPN, so pair each (src ip, dst ip, dest QPN)
/// with the reverse direction. RDMA-CM connections (rdma_cm.pcap, rping.pcap)
/// are left out: the CM sets a flow label of its own (derived from the
/// connection's port space), which IPv4 frames do not show.
#[test]
fn rxe_source_ports_follow_the_linux_rule() {
    let Some(files) = common::rxe_frames("rxe_source_ports_follow_the_linux_rule") else {
        return;
    };
    let mut checked = 0;
    let mut mismatched = Vec::new();
    for (name, frames) in files
        .iter()
        .filter(|(n, _)| n != "rdma_cm.pcap" && n != "rping.pcap")
    {
        // (src, dst) -> {dest_qp -> sport}
        let mut seen: BTreeMap<(String, String), BTreeMap<u32, u16>> = BTreeMap::new();
        for f in frames.iter().filter(|f| common::is_rocev2(f)) {
            let r = RoceRepr::parse(f).unwrap();
            let info = r.opcode_info().unwrap();
            if info.transport != Transport::Rc {
                continue;
            }
            seen.entry((r.ip.src().to_string(), r.ip.dst().to_string()))
                .or_default()
                .insert(r.bth.dest_qp, r.udp.src_port);
        }
        for ((a, b), qps) in &seen {
            let Some(back) = seen.get(&(b.clone(), a.clone())) else {
                continue;
            };
            for (&qa, &sport) in qps {
                // a connection a->b to QP qa is answered b->a to some QP qb
                // with the same source port: find qb whose rule gives sport.
                let matched = back.iter().any(|(&qb, &back_sport)| {
                    back_sport == sport && udp::rdma_udp_sport(0, qa, qb) == sport
                });
                if !matched {
                    eprintln!("{name}: {a}->{b} qp {qa:#x} sport {sport:#x} matches no rule pair");
                    mismatched.push(name.clone());
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no RC connection seen in both directions");
    assert!(mismatched.is_empty(), "{mismatched:?}");
}

/// Every MAD to QP1 in the third-party captures (RDMA CM's connection
/// set-up and tear-down of rping and the rdma_cm test) parses as a CM
/// message, re-emits byte for byte, and its fields say what the frames
/// around it say: the REQ's primary GIDs and its IP CM private data are
/// the frame's addresses, each REP answers the REQ's communication ID, the
/// RTU the REP's, the DREQ names the peer's QP from the handshake and the
/// DREP mirrors the DREQ's IDs.
#[test]
fn every_cm_mad_in_the_rxe_captures_parses_and_tells_the_handshake() {
    use wire::mad::{self, CmMessage, IpCmPrivateData, Mad};
    let Some(files) =
        common::rxe_frames("every_cm_mad_in_the_rxe_captures_parses_and_tells_the_handshake")
    else {
        return;
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, frames) in &files {
        // the handshakes seen so far: REQ's (comm ID, QPN) by the REQ's ID,
        // then the REP's; the DREQs' (local, remote) IDs
        let mut reqs: BTreeMap<u32, u32> = BTreeMap::new();
        let mut conns: Vec<((u32, u32), (u32, u32))> = Vec::new();
        let mut dreqs: Vec<(u32, u32)> = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            if !common::is_rocev2(f) {
                continue;
            }
            let r = RoceRepr::parse(f).unwrap();
            if r.bth.dest_qp != mad::GSI_QPN {
                continue;
            }
            let at = format!("{name} frame {}", i + 1);
            assert_eq!(r.bth.opcode.name(), "UD_SEND_ONLY", "{at}");
            let deth = r.ext.deth.unwrap();
            assert_eq!(
                (deth.qkey, deth.src_qp),
                (mad::GSI_QKEY, mad::GSI_QPN),
                "{at}"
            );
            let m = Mad::parse(r.payload).unwrap_or_else(|e| panic!("{at}: {e}"));
            let mut out = [0u8; mad::MAD_LEN];
            m.emit(&mut out).unwrap();
            assert_eq!(&out[..], r.payload, "{at}: re-emitted MAD differs");
            let cm = m.cm().unwrap_or_else(|| panic!("{at}: not a CM MAD"));
            *seen.entry(cm.name()).or_default() += 1;
            let (src, dst) = match r.ip {
                wire::IpRepr::V4(v4) => (v4.src, v4.dst),
                wire::IpRepr::V6(_) => panic!("{at}: the captures are IPv4"),
            };
            let mapped = |a: std::net::Ipv4Addr| a.to_ipv6_mapped().octets();
            match cm {
                CmMessage::Req(q) => {
                    assert_eq!(q.primary.local_gid, mapped(src), "{at}");
                    assert_eq!(q.primary.remote_gid, mapped(dst), "{at}");
                    let (space, _port) = mad::ip_cm_service(q.service_id)
                        .unwrap_or_else(|| panic!("{at}: {:#x} is no IP CM ID", q.service_id));
                    assert_eq!(space, 0x06, "{at}: RDMA_PS_TCP");
                    let p = IpCmPrivateData::parse(&q.private_data).unwrap();
                    let (s, d) = p.addrs().unwrap();
                    assert_eq!((s, d), (src.into(), dst.into()), "{at}");
                    reqs.insert(q.local_comm_id, q.local_qpn);
                }
                CmMessage::Rep(p) => {
                    let qpn = *reqs
                        .get(&p.remote_comm_id)
                        .unwrap_or_else(|| panic!("{at}: REP to no REQ: {cm}"));
                    conns.push(((p.remote_comm_id, qpn), (p.local_comm_id, p.local_qpn)));
                }
                CmMessage::Rtu(u) => {
                    let ok = conns
                        .iter()
                        .any(|(q, p)| (u.local_comm_id, u.remote_comm_id) == (q.0, p.0));
                    assert!(ok, "{at}: RTU to no REP: {cm}");
                }
                CmMessage::Dreq(d) => {
                    // from the client (naming the server's QP) or the server
                    let ids = (d.local_comm_id, d.remote_comm_id, d.remote_qpn);
                    let ok = conns
                        .iter()
                        .any(|(q, p)| ids == (q.0, p.0, p.1) || ids == (p.0, q.0, q.1));
                    assert!(ok, "{at}: DREQ of no connection: {cm}");
                    dreqs.push((d.local_comm_id, d.remote_comm_id));
                }
                CmMessage::Drep(p) => {
                    let ok = dreqs.contains(&(p.remote_comm_id, p.local_comm_id));
                    assert!(ok, "{at}: DREP to no DREQ: {cm}");
                }
                other => panic!("{at}: unexpected {other}"),
            }
        }
    }
    eprintln!("CM messages in the captures: {seen:?}");
    for m in [
        "ConnectRequest",
        "ConnectReply",
        "ReadyToUse",
        "DisconnectRequest",
        "DisconnectReply",
    ] {
        assert!(seen.contains_key(m), "no {m} in the captures: {seen:?}");
    }
}

/// `mark_ce` on every sample frame (IPv4 and IPv6, tagged and untagged,
/// every opcode): an ECN-capable frame comes out CE-marked and otherwise
/// the same, its IPv4 checksum and ICRC still valid; a Not-ECT frame and a
/// MAC control frame are left alone.
#[test]
fn mark_ce_marks_ecn_capable_frames_and_nothing_else() {
    use common::sample_frames::{samples, SampleRepr};
    let mut marked = 0;
    for s in samples() {
        let mut f = s.frame();
        let SampleRepr::Roce(mut want) = s.repr else {
            let before = f.clone();
            assert!(!wire::mark_ce(&mut f), "{}", s.label);
            assert_eq!(f, before, "{}", s.label);
            continue;
        };
        assert_ne!(want.ip.ecn(), 0, "{}: the samples are ECN-capable", s.label);
        assert!(wire::mark_ce(&mut f), "{}", s.label);
        let got = RoceRepr::parse(&f).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        want.ip.set_ecn(3);
        assert_eq!(got, want, "{}", s.label);
        marked += 1;
        // Not-ECT: untouched
        let mut not_ect = want;
        not_ect.ip.set_ecn(0);
        let mut b = vec![0u8; not_ect.buffer_len()];
        let n = not_ect.emit(&mut b).unwrap();
        b.truncate(n);
        let before = b.clone();
        assert!(!wire::mark_ce(&mut b), "{}", s.label);
        assert_eq!(b, before, "{}", s.label);
    }
    assert!(marked > 50, "{marked}");
    // too short for its IP header
    let mut short = samples()[0].frame();
    short.truncate(20);
    assert!(!wire::mark_ce(&mut short));
}
