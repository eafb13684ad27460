//! QP 1 on the wire (IBA 13.5.1): two devices exchange CM MADs through
//! their GSIs on the virtual clock (a REQ and its REJ; a Service ID
//! Resolution, SIDR_REQ and SIDR_REP); the frames have rxe's layout and
//! decode in Wireshark without warnings; what QP 1 must refuse is a counted
//! drop.

use nic::cm::{Cm, CmAddr, CmEvent, ConnectParams, SidrParams};
use nic::device::{DropReason, GsiError, Rnic, GSI_RX_DEPTH, GSI_TX_DEPTH};
use nic::transport::RnicConfig;
use nic::verbs::AhAttr;
use nic::wire::mad::{Mad, GSI_QKEY, MAD_LEN};
use nic::wire::{
    BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Gid, IpRepr, Ipv4Repr, Opcode, Psn,
    RoceRepr, UdpChecksum, UdpRepr, ROCEV2_PORT,
};
use nic::Instant;
use sim::{LinkConfig, Sim};
use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

const MACS: [EthernetAddress; 2] = [
    EthernetAddress([2, 0, 0, 0, 0, 1]),
    EthernetAddress([2, 0, 0, 0, 0, 2]),
];

fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, 1 + i as u8)
}

fn gid(i: usize) -> Gid {
    Gid::from_ipv4(ip(i))
}

fn sim() -> Sim {
    let dev = |i: usize| Rnic::new(RnicConfig::new(MACS[i], gid(i)));
    Sim::new(dev(0), dev(1), LinkConfig::ideal(), 1)
}

/// The address handle of node `i` as its peer sends to it.
fn ah(i: usize) -> AhAttr {
    AhAttr::new(gid(i), MACS[i])
}

fn mad_bytes(m: &Mad) -> Vec<u8> {
    let mut b = vec![0u8; MAD_LEN];
    m.emit(&mut b).unwrap();
    b
}

/// A CM REQ from node 0's CM to node 1.
fn req_mad() -> Vec<u8> {
    let mut cm = Cm::new(CmAddr::from_ip(ip(0).into()), 0xa, 1);
    let mut p = ConnectParams::new(
        CmAddr::from_ip(ip(1).into()),
        0x0106_0000_0000_4e20,
        0x11,
        7,
    );
    p.private_data = b"hello".to_vec();
    cm.connect(Instant::ZERO, &p);
    let (_, mad) = cm.poll_transmit(Instant::ZERO).unwrap();
    mad_bytes(&mad)
}

/// A frame to node 1's QP 1 from node 0, with the given opcode, Q_Key and
/// payload.
fn frame_to_qp1(opcode: Opcode, qkey: u32, payload: &[u8]) -> Vec<u8> {
    frame_to_qp1_pkey(opcode, qkey, 0xFFFF, payload)
}

/// [`frame_to_qp1`] with BTH P_Key `pkey`.
fn frame_to_qp1_pkey(opcode: Opcode, qkey: u32, pkey: u16, payload: &[u8]) -> Vec<u8> {
    let ud = opcode
        .info()
        .is_some_and(|i| i.transport == nic::wire::Transport::Ud);
    let repr = RoceRepr {
        eth: EthernetRepr {
            dst: MACS[1],
            src: MACS[0],
            vlan: None,
            ethertype: 0,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: ip(0),
            dst: ip(1),
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: true,
            ttl: 64,
        }),
        udp: UdpRepr {
            src_port: 0xc000,
            dst_port: ROCEV2_PORT,
        },
        udp_checksum: UdpChecksum::Zero,
        bth: BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad: 0,
            pkey,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qp: 1,
            ack_req: false,
            resv7: 0,
            psn: Psn::new(0),
        },
        ext: ExtHeaders {
            deth: ud.then_some(Deth { qkey, src_qp: 1 }),
            imm: (opcode == Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).then_some(0),
            ..ExtHeaders::default()
        },
        payload,
        trailer_len: 0,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

#[test]
fn two_devices_exchange_mads_through_qp1() {
    let mut s = sim();
    let frames = Rc::new(RefCell::new(Vec::new()));
    let f2 = frames.clone();
    s.tap = Some(Box::new(move |_, _, f: &[u8]| {
        f2.borrow_mut().push(f.to_vec())
    }));
    let req = req_mad();
    s.nodes[0].send_gsi(&ah(1), &req).unwrap();
    assert!(s.run_until(Duration::from_millis(1), |s| s.nodes[1]
        .gsi_counters()
        .gsi_rcvd
        == 1));
    let got = s.nodes[1].poll_gsi().expect("the REQ arrived");
    assert_eq!(got.src_gid, gid(0));
    assert_eq!(got.src_mac, MACS[0]);
    assert_eq!(got.src_qp, 1);
    assert_eq!(got.pkey, 0xFFFF);
    assert_eq!(&got.mad[..], &req[..]);
    assert!(s.nodes[1].poll_gsi().is_none());

    // node 1's CM answers through its QP 1: the MAD it sends is the one
    // node 0 takes
    let mut cm1 = Cm::new(CmAddr::from_ip(ip(1).into()), 0xb, 2);
    cm1.listen(0x0106_0000_0000_4e20);
    cm1.handle_mad(
        Instant::ZERO,
        CmAddr { gid: got.src_gid.0 },
        &Mad::parse(&got.mad[..]).unwrap(),
    );
    let Some(CmEvent::ConnectRequest { id, .. }) = cm1.poll_event() else {
        panic!("a connect request");
    };
    cm1.reject(id, nic::cm::RejectReason::CONSUMER_REJECT, b"no")
        .unwrap();
    let (to, rej) = cm1.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(to.gid, gid(0).0);
    let rej = mad_bytes(&rej);
    let back = AhAttr::new(got.src_gid, got.src_mac);
    s.nodes[1].send_gsi(&back, &rej).unwrap();
    assert!(s.run_until(Duration::from_millis(1), |s| s.nodes[0]
        .gsi_counters()
        .gsi_rcvd
        == 1));
    let got = s.nodes[0].poll_gsi().unwrap();
    assert_eq!(&got.mad[..], &rej[..]);
    assert_eq!(s.nodes[0].gsi_counters().gsi_sent, 1);
    assert_eq!(s.nodes[1].gsi_counters().gsi_sent, 1);

    // rxe's layout (the rdma_cm capture): UD SEND ONLY, P_Key 0xFFFF, dest
    // QP 1, DETH Q_Key 0x80010000 and source QP 1; 322 bytes over IPv4
    let frames = frames.borrow();
    assert_eq!(frames.len(), 2);
    for (k, f) in frames.iter().enumerate() {
        let r = RoceRepr::parse(f).unwrap();
        assert_eq!(f.len(), 322);
        assert_eq!(r.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(r.bth.pkey, 0xFFFF);
        assert_eq!(r.bth.dest_qp, 1);
        assert_eq!(r.bth.psn, Psn::new(0));
        assert_eq!(
            r.ext.deth,
            Some(Deth {
                qkey: GSI_QKEY,
                src_qp: 1
            })
        );
        assert_eq!(r.ip.src(), std::net::IpAddr::from(ip(k)));
        assert_eq!(r.udp.dst_port, ROCEV2_PORT);
    }
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gsi-cm.pcap");
    write_pcap(&path, &frames);
    judge(
        &path,
        "two_devices_exchange_mads_through_qp1",
        &["0x0010\t", "0x0012\t"],
    );
}

/// Hands the MADs `cm` (node `i`'s) has to send to node `i`'s QP 1 and
/// runs the wire until the peer's QP 1 has them; then the peer's CM takes
/// them.
fn deliver(s: &mut Sim, cms: &mut [Cm; 2], i: usize) {
    let j = 1 - i;
    let before = s.nodes[j].gsi_counters().gsi_rcvd;
    let mut n = 0;
    while let Some((to, mad)) = cms[i].poll_transmit(Instant::ZERO) {
        assert_eq!(to.gid, gid(j).0);
        s.nodes[i].send_gsi(&ah(j), &mad_bytes(&mad)).unwrap();
        n += 1;
    }
    assert!(s.run_until(Duration::from_millis(1), |s| s.nodes[j]
        .gsi_counters()
        .gsi_rcvd
        == before + n));
    while let Some(m) = s.nodes[j].poll_gsi() {
        cms[j].handle_bytes(s.now, CmAddr { gid: m.src_gid.0 }, &m.mad[..]);
    }
}

#[test]
fn a_service_id_resolution_through_qp1_decodes_in_wireshark() {
    let mut s = sim();
    let frames = Rc::new(RefCell::new(Vec::new()));
    let f2 = frames.clone();
    s.tap = Some(Box::new(move |_, _, f: &[u8]| {
        f2.borrow_mut().push(f.to_vec())
    }));
    let sid = nic::wire::mad::ip_cm_service_id(0x11, 7174);
    let mut cms = [
        Cm::new(CmAddr::from_ip(ip(0).into()), 0xa, 1),
        Cm::new(CmAddr::from_ip(ip(1).into()), 0xb, 2),
    ];
    cms[1].listen(sid);
    let mut p = SidrParams::new(CmAddr::from_ip(ip(1).into()), sid);
    p.private_data = b"udp".to_vec();
    let id = cms[0].sidr_request(Instant::ZERO, &p);
    deliver(&mut s, &mut cms, 0);
    let Some(CmEvent::SidrRequest { id: rid, req, .. }) = cms[1].poll_event() else {
        panic!("a SIDR request");
    };
    assert_eq!((req.service_id, &req.private_data[..3]), (sid, &b"udp"[..]));
    cms[1]
        .sidr_accept(Instant::ZERO, rid, 0x42, 0x0123_4567, b"ok")
        .unwrap();
    deliver(&mut s, &mut cms, 1);
    let Some(CmEvent::SidrReply { id: got, rep }) = cms[0].poll_event() else {
        panic!("a SIDR reply");
    };
    assert_eq!(got, id);
    assert_eq!((rep.status, rep.qpn, rep.qkey), (0, 0x42, 0x0123_4567));
    // rxe's GSI layout as for every MAD: 322 bytes over IPv4
    let frames = frames.borrow();
    assert_eq!(frames.len(), 2);
    for f in frames.iter() {
        let r = RoceRepr::parse(f).unwrap();
        assert_eq!((f.len(), r.bth.dest_qp), (322, 1));
    }
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gsi-sidr.pcap");
    write_pcap(&path, &frames);
    judge(
        &path,
        "a_service_id_resolution_through_qp1_decodes_in_wireshark",
        &["0x0017\t", "0x0018\t"],
    );
}

#[test]
fn the_rxe_capture_cm_frames_parse_as_gsi_mads() {
    // the third-party frames reach our QP 1 as MADs when replayed to a
    // device with the capture's destination address
    let Some(dir) = testkit::pcap::rxe_pcaps("the_rxe_capture_cm_frames_parse_as_gsi_mads") else {
        return;
    };
    let data = std::fs::read(dir.join("rdma_cm.pcap")).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(&data[..]).unwrap();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let Ok(repr) = RoceRepr::parse(&p.data) else {
            continue;
        };
        if repr.bth.dest_qp != 1 {
            continue;
        }
        let mut dev = Rnic::new(RnicConfig::new(repr.eth.dst, Gid::from_ip(repr.ip.dst())));
        dev.handle_frame(Instant::ZERO, &p.data);
        let got = dev.poll_gsi().expect("a MAD");
        assert_eq!(got.src_qp, 1);
        assert!(Mad::parse(&got.mad[..]).unwrap().cm().is_some());
        n += 1;
    }
    assert!(n >= 3, "the capture has REQ, REP and RTU");
}

#[test]
fn what_qp1_refuses_is_a_counted_drop() {
    let mut dev = Rnic::new(RnicConfig::new(MACS[1], gid(1)));
    let mad = req_mad();
    let t = Instant::ZERO;
    dev.handle_frame(t, &frame_to_qp1(Opcode::UD_SEND_ONLY, 0x1234, &mad));
    assert_eq!(dev.dropped(DropReason::GsiQkey), 1);
    dev.handle_frame(
        t,
        &frame_to_qp1(Opcode::UD_SEND_ONLY, GSI_QKEY, &mad[..200]),
    );
    assert_eq!(dev.dropped(DropReason::GsiLength), 1);
    let mut long = mad.clone();
    long.extend_from_slice(&[0; 4]);
    dev.handle_frame(t, &frame_to_qp1(Opcode::UD_SEND_ONLY, GSI_QKEY, &long));
    assert_eq!(dev.dropped(DropReason::GsiLength), 2);
    dev.handle_frame(t, &frame_to_qp1(Opcode::RC_SEND_ONLY, GSI_QKEY, &mad));
    dev.handle_frame(
        t,
        &frame_to_qp1(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, GSI_QKEY, &mad),
    );
    assert_eq!(dev.dropped(DropReason::GsiOpcode), 2);
    // C9-42: QP 1 compares the P_Key with the port's (the default
    // partition): another partition is dropped, its limited member taken
    dev.handle_frame(
        t,
        &frame_to_qp1_pkey(Opcode::UD_SEND_ONLY, GSI_QKEY, 0x8001, &mad),
    );
    assert_eq!(dev.dropped(DropReason::PkeyMismatch), 1);
    dev.handle_frame(
        t,
        &frame_to_qp1_pkey(Opcode::UD_SEND_ONLY, GSI_QKEY, 0x7FFF, &mad),
    );
    assert!(dev.poll_gsi().is_some());
    assert!(dev.poll_gsi().is_none());
    assert_eq!(dev.gsi_counters().gsi_rcvd, 1);
    for _ in 0..GSI_RX_DEPTH + 3 {
        dev.handle_frame(t, &frame_to_qp1(Opcode::UD_SEND_ONLY, GSI_QKEY, &mad));
    }
    assert_eq!(dev.dropped(DropReason::GsiQueueFull), 3);
    assert_eq!(dev.drops()["gsi_queue_full"], 3);
    assert_eq!(dev.drops()["gsi_qkey"], 1);
    let mut n = 0;
    while dev.poll_gsi().is_some() {
        n += 1;
    }
    assert_eq!(n, GSI_RX_DEPTH);
    // the owner's side: a MAD is 256 bytes; the send queue is bounded
    assert_eq!(dev.send_gsi(&ah(0), &mad[..10]), Err(GsiError::Length(10)));
    for _ in 0..GSI_TX_DEPTH {
        dev.send_gsi(&ah(0), &mad).unwrap();
    }
    assert_eq!(dev.send_gsi(&ah(0), &mad), Err(GsiError::QueueFull));
}

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for (k, f) in frames.iter().enumerate() {
        let ts = Duration::from_micros(1_000_000 + k as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
    std::fs::write(path, w.into_writer()).unwrap();
}

/// Wireshark's verdict: CM MADs of the attributes `rows` name (with an
/// empty expert column), no malformed frame, no expert warning.
fn judge(path: &std::path::Path, test: &str, rows: &[&str]) {
    if !testkit::tshark_runs(test) {
        return;
    }
    if let Some(judge) = testkit::tshark_judge(test) {
        let out = std::process::Command::new(&judge)
            .arg(path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "tshark-judge: {text}");
    }
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
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
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got, rows, "these MADs, no expert info:\n{text}");
}
