//! Wireshark decodes a pcap that our codec
//! writes, field for field as our reprs say, and finds nothing malformed.
//!
//! `pcaps/wire-samples.pcap` is (re)written from `common::sample_frames`:
//! every opcode of the table over IPv4 and IPv6, tagged and untagged, every
//! AETH syndrome class, CNPs over both IP versions, PFC and PAUSE. Then
//!
//! - `tshark -T fields` prints, for every frame, the Ethernet, VLAN, IP and
//!   UDP fields, every BTH field, every extension header field it knows, the
//!   ICRC, the payload and the MAC control fields; each must equal the value
//!   in our repr, and a field our repr does not have must be absent.
//!   Wireshark also checks the IPv4 header checksums and the (IPv6) UDP
//!   checksums we computed (`udp.check_checksum`, `ip.check_checksum`).
//! - `../shared/tools/tshark-judge` must report no malformed or error frame.
//!
//! Known exception, asserted exactly: Wireshark 4.0 has no decoder for
//! RC_FLUSH (0x1C), RC_ATOMIC_WRITE (0x1D) and CNP (0x81). It shows
//! "Unknown (N)", decodes the BTH, and puts every byte after the BTH (our
//! extension headers, payload, pad and ICRC) in one `infiniband.vendor`
//! item, without an `infiniband.invariant.crc`. That is not malformed.
//!
//! Without tshark the tests print SKIPPED, unless `CI` is set: then they
//! fail, because `.ci/run` must install tshark.

mod common;

use common::sample_frames::{samples, Sample, SampleRepr};
use common::tshark::{pcap_of, tshark};
use common::tshark_fields::Pick::*;
use common::tshark_fields::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use wire::{
    bth, pad_for, udp, Header, IpRepr, MacControl, Opcode, RocePacket, RoceRepr, Syndrome,
    UdpChecksum,
};

/// Opcodes Wireshark 4.0 shows as "Unknown (N)" with the bytes after the
/// BTH as one `infiniband.vendor` item (see the module comment and
/// pcaps/README.md).
const WIRESHARK_UNKNOWN_OPCODES: [u8; 3] = [0x1C, 0x1D, 0x81];

fn pcap_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps/wire-samples.pcap")
}

/// The pcap file's bytes: classic pcap, Ethernet link type, microsecond
/// timestamps, little-endian header.
fn pcap_bytes(samples: &[Sample]) -> Vec<u8> {
    pcap_of(&samples.iter().map(Sample::frame).collect::<Vec<_>>())
}

/// Writes pcaps/wire-samples.pcap once per test run (only when its bytes
/// change, via a rename so a reader never sees half a file) and returns
/// its path.
fn written_pcap() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = pcap_path();
        let bytes = pcap_bytes(&samples());
        if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let tmp = path.with_extension(format!("pcap.tmp{}", std::process::id()));
            std::fs::write(&tmp, &bytes).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        path
    })
}

// ---------------------------------------------------------------------------
// What each frame should show, from our reprs.

type Expected = BTreeMap<&'static str, Val>;

fn num(e: &mut Expected, field: &'static str, v: impl Into<u64>) {
    e.insert(field, Val::Num(v.into()));
}

/// Wireshark's `udp.checksum.status` and `ip.checksum.status` values.
const STATUS_GOOD: u64 = 1;
const STATUS_NOT_PRESENT: u64 = 3;

fn expect_roce(e: &mut Expected, r: &RoceRepr<'_>, frame: &[u8]) {
    let p = RocePacket::new_checked(frame).expect("our frame parses");
    p.verify_icrc().expect("our ICRC verifies");
    e.insert("eth.src", Val::Mac(r.eth.src.0));
    e.insert("eth.dst", Val::Mac(r.eth.dst.0));
    if let Some(v) = r.eth.vlan {
        num(e, "vlan.priority", v.pcp);
        num(e, "vlan.dei", v.dei);
        num(e, "vlan.id", v.vid);
    }
    match &r.ip {
        IpRepr::V4(ip) => {
            e.insert("ip.src", Val::Ip(ip.src.into()));
            e.insert("ip.dst", Val::Ip(ip.dst.into()));
            num(e, "ip.dsfield.dscp", ip.dscp);
            num(e, "ip.dsfield.ecn", ip.ecn);
            num(e, "ip.id", ip.ident);
            num(e, "ip.flags.df", ip.dont_frag);
            num(e, "ip.ttl", ip.ttl);
            num(e, "ip.checksum.status", STATUS_GOOD);
        }
        IpRepr::V6(ip) => {
            e.insert("ipv6.src", Val::Ip(ip.src.into()));
            e.insert("ipv6.dst", Val::Ip(ip.dst.into()));
            num(e, "ipv6.tclass.dscp", ip.dscp);
            num(e, "ipv6.tclass.ecn", ip.ecn);
            num(e, "ipv6.flow", ip.flow_label);
            num(e, "ipv6.hlim", ip.hop_limit);
        }
    }
    num(e, "udp.srcport", r.udp.src_port);
    num(e, "udp.dstport", r.udp.dst_port);
    let udp_at = p.ethernet().header_len() + r.ip.header_len();
    let udp_sum = u16::from_be_bytes([frame[udp_at + 6], frame[udp_at + 7]]);
    match r.udp_checksum {
        UdpChecksum::Zero => {
            assert_eq!(udp_sum, 0);
            num(e, "udp.checksum", 0u16);
            num(e, "udp.checksum.status", STATUS_NOT_PRESENT);
        }
        UdpChecksum::Computed => {
            assert_ne!(udp_sum, 0);
            num(e, "udp.checksum", udp_sum);
            // Wireshark verifies it independently (udp.check_checksum).
            num(e, "udp.checksum.status", STATUS_GOOD);
        }
    }

    let b = &r.bth;
    let pad = pad_for(r.payload.len());
    assert_eq!(b.pad, pad, "sample reprs carry their pad");
    num(e, "infiniband.bth.opcode", b.opcode.0);
    num(e, "infiniband.bth.se", b.solicited);
    num(e, "infiniband.bth.m", b.migreq);
    num(e, "infiniband.bth.padcnt", pad);
    num(e, "infiniband.bth.tver", 0u8);
    num(e, "infiniband.bth.p_key", b.pkey);
    let byte4 = ((b.fecn as u8) << 7) | ((b.becn as u8) << 6) | b.resv6;
    e.insert("infiniband.reserved", Val::Bytes(vec![byte4]));
    num(e, "infiniband.bth.destqp", b.dest_qp);
    num(e, "infiniband.bth.a", b.ack_req);
    num(e, "infiniband.bth.reserved7", b.resv7);
    num(e, "infiniband.bth.psn", b.psn.value());

    let info = r.opcode_info().expect("sample opcodes are in the table");
    let bth_end = p.ethernet().header_len() + r.ip.header_len() + udp::HEADER_LEN + bth::HEADER_LEN;
    let icrc_end = frame.len() - r.trailer_len;
    if WIRESHARK_UNKNOWN_OPCODES.contains(&info.opcode) {
        // Known exception: everything after the BTH is one opaque item.
        e.insert(
            "infiniband.vendor",
            Val::Bytes(frame[bth_end..icrc_end].to_vec()),
        );
        return;
    }
    let x = &r.ext;
    if let Some(d) = x.deth {
        num(e, "infiniband.deth.q_key", d.qkey);
        num(e, "infiniband.deth.srcqp", d.src_qp);
    }
    assert!(x.feth.is_none() || WIRESHARK_UNKNOWN_OPCODES.contains(&info.opcode));
    if let Some(reth) = x.reth {
        num(e, "infiniband.reth.va", reth.va);
        num(e, "infiniband.reth.r_key", reth.rkey);
        num(e, "infiniband.reth.dmalen", reth.dma_len);
    }
    if let Some(a) = x.atomic {
        num(e, "infiniband.reth.va", a.va);
        num(e, "infiniband.reth.r_key", a.rkey);
        num(e, "infiniband.atomiceth.swapdt", a.swap_add);
        num(e, "infiniband.atomiceth.cmpdt", a.compare);
    }
    if let Some(a) = x.aeth {
        let s = a.syndrome.to_byte();
        num(e, "infiniband.aeth.syndrome", s);
        // Wireshark: bit 7 reserved, bits 6:5 the ACK type.
        num(e, "infiniband.aeth.syndrome.opcode", (s >> 5) & 3);
        match a.syndrome {
            Syndrome::Ack { credits } => num(e, "infiniband.aeth.syndrome.credit_count", credits),
            Syndrome::RnrNak { timer } => num(e, "infiniband.aeth.syndrome.timer", timer),
            Syndrome::Nak(code) => num(e, "infiniband.aeth.syndrome.error_code", code.bits()),
            Syndrome::Reserved(_) => panic!("no reserved syndromes among the samples"),
        }
        num(e, "infiniband.aeth.msn", a.msn);
    }
    if let Some(v) = x.atomic_ack {
        num(e, "infiniband.atomicacketh.origremdt", v);
    }
    if let Some(imm) = x.imm {
        e.insert("infiniband.immdt", Val::Bytes(imm.to_be_bytes().to_vec()));
    }
    if let Some(rkey) = x.ieth {
        e.insert("infiniband.ieth", Val::Bytes(rkey.to_be_bytes().to_vec()));
    }
    // The ICRC is sent least-significant byte first (as rxe does, see
    // wire::icrc); Wireshark prints its four bytes as a big-endian number.
    let icrc_wire: [u8; 4] = frame[icrc_end - 4..icrc_end].try_into().unwrap();
    assert_eq!(u32::from_be_bytes(icrc_wire), p.stored_icrc().swap_bytes());
    num(e, "infiniband.invariant.crc", u32::from_be_bytes(icrc_wire));
    if !r.payload.is_empty() {
        // Wireshark shows the payload with its pad bytes.
        let mut d = r.payload.to_vec();
        d.resize(r.payload.len() + pad as usize, 0);
        e.insert("data.data", Val::Bytes(d));
    }
    assert!(!info.headers.contains(Header::CnpReserved));
}

fn expected(index: usize, s: &Sample) -> Expected {
    let mut e = Expected::new();
    num(&mut e, "frame.number", index as u64 + 1);
    let frame = s.frame();
    match &s.repr {
        SampleRepr::Roce(r) => expect_roce(&mut e, r, &frame),
        SampleRepr::MacControl(m) => {
            e.insert("eth.src", Val::Mac(m.src.0));
            e.insert("eth.dst", Val::Mac(m.dst.0));
            match m.control {
                MacControl::Pause { quanta } => {
                    num(&mut e, "macc.opcode", wire::mac_control::OPCODE_PAUSE);
                    num(&mut e, "macc.pause_time", quanta);
                }
                MacControl::Pfc {
                    class_enable,
                    quanta,
                } => {
                    const ENBV: [&str; 8] = [
                        "macc.cbfc.enbv.c0",
                        "macc.cbfc.enbv.c1",
                        "macc.cbfc.enbv.c2",
                        "macc.cbfc.enbv.c3",
                        "macc.cbfc.enbv.c4",
                        "macc.cbfc.enbv.c5",
                        "macc.cbfc.enbv.c6",
                        "macc.cbfc.enbv.c7",
                    ];
                    const TIME: [&str; 8] = [
                        "macc.cbfc.pause_time.c0",
                        "macc.cbfc.pause_time.c1",
                        "macc.cbfc.pause_time.c2",
                        "macc.cbfc.pause_time.c3",
                        "macc.cbfc.pause_time.c4",
                        "macc.cbfc.pause_time.c5",
                        "macc.cbfc.pause_time.c6",
                        "macc.cbfc.pause_time.c7",
                    ];
                    num(&mut e, "macc.opcode", wire::mac_control::OPCODE_PFC);
                    num(&mut e, "macc.cbfc.enbv", class_enable);
                    for p in 0..8 {
                        num(&mut e, ENBV[p], class_enable & (1 << p) != 0);
                        num(&mut e, TIME[p], quanta[p]);
                    }
                }
            }
        }
    }
    for k in e.keys() {
        assert!(
            FIELDS.iter().any(|(f, _, _)| f == k),
            "{k} is expected but not asked of tshark"
        );
    }
    e
}

// ---------------------------------------------------------------------------
// The tests.

/// Our own codec agrees with itself on every sample, and the set covers
/// what the Wireshark check asks for. Needs no tshark.
#[test]
fn samples_cover_the_table_and_round_trip() {
    let all = samples();
    let mut shapes: BTreeMap<u8, [bool; 4]> = BTreeMap::new(); // [v4, v6, untagged, vlan]
    let mut syndromes = Vec::new();
    let (mut pfc, mut pause) = (0, 0);
    for s in &all {
        let f = s.frame();
        match (&s.repr, wire::Frame::parse(&f)) {
            (SampleRepr::Roce(r), Ok(wire::Frame::Roce(got))) => {
                assert_eq!(&got, r, "{}: parse(emit(repr)) != repr", s.label);
                assert_eq!(
                    r.udp_checksum,
                    UdpChecksum::default_for(&r.ip),
                    "{}",
                    s.label
                );
                assert!(f.len() >= wire::ethernet::MIN_FRAME_LEN, "{}", s.label);
                let sh = shapes.entry(r.bth.opcode.0).or_default();
                sh[matches!(r.ip, IpRepr::V6(_)) as usize] = true;
                sh[2 + r.eth.vlan.is_some() as usize] = true;
                if r.bth.opcode == Opcode::RC_ACKNOWLEDGE {
                    syndromes.push(r.ext.aeth.unwrap().syndrome);
                }
            }
            (SampleRepr::MacControl(m), Ok(wire::Frame::MacControl(got))) => {
                assert_eq!(&got, m, "{}", s.label);
                match m.control {
                    MacControl::Pfc {
                        class_enable,
                        quanta,
                    } => {
                        pfc += 1;
                        // mixed: some priorities paused, one resumed, some off
                        assert!(class_enable != 0 && class_enable != 0xFF);
                        assert!((0..8).any(|p| class_enable & (1 << p) != 0 && quanta[p] == 0));
                        assert!((0..8).any(|p| class_enable & (1 << p) != 0 && quanta[p] != 0));
                    }
                    MacControl::Pause { .. } => pause += 1,
                }
            }
            (_, got) => panic!("{}: parses as {got:?}", s.label),
        }
    }
    for info in Opcode::all() {
        let sh = shapes
            .get(&info.opcode)
            .unwrap_or_else(|| panic!("no sample of {}", info.name));
        assert_eq!(
            sh, &[true; 4],
            "{}: not over v4, v6, untagged and tagged",
            info.name
        );
    }
    for s in common::sample_frames::ack_syndromes() {
        assert!(syndromes.contains(&s), "no RC_ACKNOWLEDGE with {s}");
    }
    assert_eq!((pfc, pause), (1, 1));
    // Every field value that identifies a frame is distinct across frames.
    let roce: Vec<&RoceRepr> = all
        .iter()
        .filter_map(|s| match &s.repr {
            SampleRepr::Roce(r) => Some(r),
            _ => None,
        })
        .collect();
    let distinct = |v: Vec<u64>| {
        let n = v.len();
        let set: std::collections::BTreeSet<u64> = v.into_iter().collect();
        set.len() == n
    };
    assert!(distinct(
        roce.iter().map(|r| r.bth.dest_qp as u64).collect()
    ));
    assert!(distinct(
        roce.iter()
            .filter(|r| r.bth.opcode != Opcode::CNP)
            .map(|r| r.bth.psn.value() as u64)
            .collect()
    ));
    assert!(distinct(
        roce.iter()
            .filter_map(|r| r.ext.reth.map(|x| x.va))
            .collect()
    ));
    assert!(distinct(
        roce.iter()
            .filter_map(|r| r.ext.aeth.map(|x| x.msn as u64))
            .collect()
    ));
}

/// The pcap on disk is exactly what the samples give (and is rewritten
/// when they change).
#[test]
fn pcap_holds_exactly_the_samples() {
    let path = written_pcap();
    let frames = common::read_frames(path);
    let want = common::sample_frames::sample_frames();
    assert_eq!(frames.len(), want.len());
    for (i, (got, (label, f))) in frames.iter().zip(&want).enumerate() {
        assert_eq!(got, f, "frame {} ({label})", i + 1);
    }
    assert_eq!(std::fs::read(path).unwrap(), pcap_bytes(&samples()));
}

#[test]
fn tshark_fields_equal_our_reprs() {
    if !testkit::tshark_runs("tshark_fields_equal_our_reprs") {
        return;
    }
    let path = written_pcap();
    let all = samples();
    let mut args: Vec<&str> = vec![
        "-r",
        path.to_str().unwrap(),
        // Let Wireshark verify the checksums we computed.
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ];
    for (f, _, _) in FIELDS {
        args.extend(["-e", f]);
    }
    let out = tshark(&args);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), all.len(), "tshark printed one line per frame");

    let mut mismatches = Vec::new();
    let mut checked = 0usize;
    let mut unknown_seen = BTreeMap::new();
    for (i, (line, s)) in lines.iter().zip(&all).enumerate() {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), FIELDS.len(), "frame {}: {line}", i + 1);
        let want = expected(i, s);
        for ((field, kind, pick), col) in FIELDS.iter().zip(&cols) {
            let occ: Vec<&str> = if col.is_empty() {
                vec![]
            } else {
                col.split(',').collect()
            };
            let raw = match (pick, occ.len()) {
                (_, 0) => None,
                (Only, 1) | (First, _) => Some(occ[0]),
                (Same, _) if occ.iter().all(|o| *o == occ[0]) => Some(occ[0]),
                (Same, _) => {
                    mismatches.push(format!(
                        "frame {} ({}): {field} occurrences differ: {col}",
                        i + 1,
                        s.label
                    ));
                    continue;
                }
                (Last, n) => Some(occ[n - 1]),
                (Only, _) => {
                    mismatches.push(format!(
                        "frame {} ({}): {field} occurs {} times: {col}",
                        i + 1,
                        s.label,
                        occ.len()
                    ));
                    continue;
                }
            };
            let got = raw.map(|r| {
                parse_val(*kind, r).unwrap_or_else(|| {
                    panic!("frame {}: cannot read {field} = {r:?} as {kind:?}", i + 1)
                })
            });
            let exp = want.get(field);
            if got.as_ref() != exp {
                let show = |v: Option<&Val>| v.map_or("(absent)".to_string(), |v| v.to_string());
                mismatches.push(format!(
                    "frame {} ({}): {field}: tshark {} / ours {}",
                    i + 1,
                    s.label,
                    show(got.as_ref()),
                    show(exp)
                ));
            } else if exp.is_some() {
                checked += 1;
            }
        }
        if let SampleRepr::Roce(r) = &s.repr {
            if WIRESHARK_UNKNOWN_OPCODES.contains(&r.bth.opcode.0) {
                *unknown_seen.entry(r.bth.opcode.0).or_insert(0) += 1;
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} field(s) differ between tshark and our reprs:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert_eq!(
        unknown_seen.keys().copied().collect::<Vec<_>>(),
        WIRESHARK_UNKNOWN_OPCODES,
        "every known exception is exercised"
    );

    // The info column states the exception in Wireshark's own words.
    let info = tshark(&[
        "-r",
        path.to_str().unwrap(),
        "-T",
        "fields",
        "-e",
        "_ws.col.Info",
    ]);
    for (line, s) in info.lines().zip(&all) {
        if let SampleRepr::Roce(r) = &s.repr {
            let unknown = line.starts_with("Unknown OpCode");
            assert_eq!(
                unknown,
                WIRESHARK_UNKNOWN_OPCODES.contains(&r.bth.opcode.0),
                "{}: Wireshark says {line:?}; if Wireshark now decodes this opcode, update \
                 WIRESHARK_UNKNOWN_OPCODES and pcaps/README.md",
                s.label
            );
        }
    }
    eprintln!(
        "tshark: {} frames, {checked} field values equal our reprs; opcodes Wireshark shows as \
         Unknown (bytes after the BTH as infiniband.vendor, checked exactly): {:?}",
        all.len(),
        unknown_seen
    );
}

#[test]
fn tshark_judge_finds_nothing_malformed() {
    if !testkit::tshark_runs("tshark_judge_finds_nothing_malformed") {
        return;
    }
    let path = written_pcap();
    let all = samples();
    let roce = all
        .iter()
        .filter(|s| matches!(s.repr, SampleRepr::Roce(_)))
        .count();

    // Our own count first, with the judge's settings, so this half runs even
    // without ../shared.
    let bad = tshark(&[
        "-r",
        path.to_str().unwrap(),
        "-Y",
        "_ws.malformed || _ws.expert.severity >= error",
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "_ws.expert.message",
    ]);
    assert!(bad.trim().is_empty(), "malformed or error frames:\n{bad}");

    // A stock profile (payload heuristics on) is reported, not asserted:
    // heuristics vary between Wireshark versions.
    let out = Command::new("tshark")
        .args(["-n", "-r", path.to_str().unwrap(), "-Y"])
        .arg("_ws.malformed || _ws.expert.severity >= error")
        .output()
        .expect("run tshark");
    eprintln!(
        "tshark with default heuristics: {} malformed/error frame(s)",
        String::from_utf8_lossy(&out.stdout).lines().count()
    );

    let Some(judge) = testkit::tshark_judge("tshark_judge_finds_nothing_malformed") else {
        return;
    };
    let out = Command::new(&judge)
        .arg(path)
        .output()
        .expect("run tshark-judge");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("tshark-judge: {}", stdout.trim());
    assert!(
        out.status.success(),
        "tshark-judge failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let verdict: BTreeMap<&str, u64> = stdout
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k, v.parse().expect("judge prints numbers")))
        .collect();
    assert_eq!(verdict.get("malformed_or_error"), Some(&0), "{stdout}");
    assert_eq!(verdict.get("frames"), Some(&(all.len() as u64)), "{stdout}");
    assert_eq!(verdict.get("roce"), Some(&(roce as u64)), "{stdout}");
    // Our IPv6 frames carry a computed UDP checksum (UdpChecksum::default_for).
    assert_eq!(verdict.get("ipv6_udp_zero"), Some(&0), "{stdout}");
}

/// Why IPv6 frames carry a computed UDP checksum: Wireshark (like RFC 8200
/// 8.1) calls a zero one illegal. Our parser still accepts it, as rxe sends
/// it. The file goes to the temp directory, not to pcaps/.
#[test]
fn tshark_calls_a_zero_udp_checksum_over_ipv6_illegal() {
    if !testkit::tshark_runs("tshark_calls_a_zero_udp_checksum_over_ipv6_illegal") {
        return;
    }
    let all = samples();
    let v6 = all
        .iter()
        .find_map(|s| match &s.repr {
            SampleRepr::Roce(r) if matches!(r.ip, IpRepr::V6(_)) => Some(*r),
            _ => None,
        })
        .unwrap();
    assert_eq!(v6.udp_checksum, UdpChecksum::Computed);
    let mut rxe_style = v6;
    rxe_style.udp_checksum = UdpChecksum::Zero;
    let sample = Sample {
        label: "rxe-style zero UDP checksum over IPv6".into(),
        repr: SampleRepr::Roce(rxe_style),
    };
    let frame = sample.frame();
    assert_eq!(
        RoceRepr::parse(&frame).unwrap().udp_checksum,
        UdpChecksum::Zero
    );

    let path = std::env::temp_dir().join(format!("softrnic-v6-zero-{}.pcap", std::process::id()));
    std::fs::write(&path, pcap_bytes(std::slice::from_ref(&sample))).unwrap();
    let out = tshark(&[
        "-r",
        path.to_str().unwrap(),
        "-T",
        "fields",
        "-e",
        "udp.checksum",
        "-e",
        "udp.checksum.status",
        "-e",
        "_ws.expert.severity",
        "-e",
        "_ws.expert.message",
    ]);
    std::fs::remove_file(&path).ok();
    // udp.checksum.status 4 = "Illegal"; severity 8388608 = error.
    assert_eq!(
        out.trim_end(),
        "0x0000\t4\t8388608\tIllegal checksum value (0)",
        "Wireshark's verdict on a zero UDP checksum over IPv6 changed; update pcaps/README.md"
    );
}
