//! Replay: the requests of the RC captures of
//! Linux Soft-RoCE, replayed into our responder, produce the capture's
//! responses field by field (opcode, PSN, destination QP, AETH syndrome and
//! MSN, READ response lengths and data, atomic ACK values).
//!
//! And the replay judges only what a capture shows: the same captures cut
//! short (before a final ACK, inside a multi-packet WRITE or READ) give no
//! difference for what precedes the cut and count our responses the
//! capture stops before apart; a response altered or missing inside the
//! capture is still a difference. A responder that went silent while its
//! requester kept sending has its missing answers after the end of the
//! capture: only the responder's own frames show the capture still saw it.

use nic::replay::{drive_engine, replay, replay_with, ConnectionReport};
use nic::Instant;
use std::net::Ipv4Addr;
use wire::{
    Aeth, BthRepr, EthernetAddress, EthernetRepr, ExtHeaders, IpRepr, Ipv4Repr, Opcode, Psn,
    RoceRepr, Syndrome, UdpChecksum, UdpRepr,
};

type Frames = Vec<(Instant, Vec<u8>)>;

/// The frames of one of the rxe captures in `../shared/pcaps/rxe-public`
/// (or `$SOFTRNIC_RXE_PCAPS`). None (with a SKIPPED line) when the folder
/// is not there; under `CI=true` a missing capture fails the test instead.
fn capture(name: &str) -> Option<Frames> {
    let path = testkit::pcap::rxe_pcaps_path().join(name);
    if !path.is_file() {
        let why = format!(
            "{} is missing (../shared is not beside the repository)",
            path.display()
        );
        testkit::skip_or_fail(&format!("replay of {name}"), &why);
        return None;
    }
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        out.push((
            Instant::from_nanos(p.timestamp.as_nanos() as u64),
            p.data.into_owned(),
        ));
    }
    Some(out)
}

fn check(name: &str, min_responses: usize) {
    let Some(frames) = capture(name) else { return };
    let reports = replay(&frames);
    // the same capture through the pcap replay port into a polling engine gives the same responses.
    let via_engine = replay_with(&frames, &mut drive_engine);
    for (a, b) in reports.iter().zip(&via_engine) {
        assert!(
            b.matches(),
            "{name} through the engine: {}",
            b.mismatches.join("\n")
        );
        assert_eq!(
            (a.expected, a.produced),
            (b.expected, b.produced),
            "{name}: engine and direct replay differ"
        );
    }
    assert!(!reports.is_empty(), "{name}: no RC connection found");
    let mut total = 0;
    for r in &reports {
        eprintln!(
            "{name}: {} -> {} sport {:#x} mtu {}: {} requests, {} responses expected, {} produced",
            r.requester, r.responder, r.udp_sport, r.mtu, r.requests, r.expected, r.produced
        );
        assert!(
            r.matches(),
            "{name}: {} -> {}:\n{}",
            r.requester,
            r.responder,
            r.mismatches.join("\n")
        );
        assert_eq!(
            (r.matched, r.differed, r.after_end.len()),
            (r.expected, 0, 0),
            "{name}: every response of a whole capture pairs with ours"
        );
        total += r.expected;
    }
    assert!(
        total >= min_responses,
        "{name}: only {total} responses compared"
    );
}

#[test]
fn rdma_write_bw() {
    check("rdma_write_bw.pcap", 5);
}

#[test]
fn rdma_write_lat() {
    check("rdma_write_lat.pcap", 5);
}

#[test]
fn rdma_read_bw() {
    check("rdma_read_bw.pcap", 5);
}

#[test]
fn rdma_read_lat() {
    check("rdma_read_lat.pcap", 5);
}

#[test]
fn rdma_send_bw() {
    check("rdma_send_bw.pcap", 5);
}

#[test]
fn rdma_atomic_bw() {
    check("rdma_atomic_bw.pcap", 5);
}

#[test]
fn pingpong_rc() {
    check("pingpong_rc.pcap", 10);
}

fn opcode_of(f: &[u8]) -> Option<&'static str> {
    RoceRepr::parse(f).ok().map(|r| r.bth.opcode.name())
}

/// Index of the last frame whose opcode is `name`.
fn last_of(frames: &Frames, name: &str) -> usize {
    frames
        .iter()
        .rposition(|(_, f)| opcode_of(f) == Some(name))
        .unwrap_or_else(|| panic!("no {name} frame"))
}

/// Index of the first frame whose opcode is `name`.
fn first_of(frames: &Frames, name: &str) -> usize {
    frames
        .iter()
        .position(|(_, f)| opcode_of(f) == Some(name))
        .unwrap_or_else(|| panic!("no {name} frame"))
}

/// The one report of a single-connection capture.
fn only(reports: Vec<ConnectionReport>) -> ConnectionReport {
    assert_eq!(reports.len(), 1, "{reports:#?}");
    reports.into_iter().next().unwrap()
}

/// `(matched, differed, after the end)`
fn tally(r: &ConnectionReport) -> (usize, usize, usize) {
    (r.matched, r.differed, r.after_end.len())
}

#[test]
fn a_capture_cut_right_before_the_final_ack_has_it_after_the_end() {
    for name in ["rdma_write_bw.pcap", "rdma_send_bw.pcap"] {
        let Some(frames) = capture(name) else { return };
        let last_ack = last_of(&frames, "RC_ACKNOWLEDGE");
        let r = only(replay(&frames[..last_ack]));
        assert!(r.matches(), "{name}: {}", r.mismatches.join("\n"));
        assert_eq!(tally(&r), (r.expected, 0, 1), "{name}: {r:#?}");
        assert!(
            r.after_end[0].contains("RC_ACKNOWLEDGE"),
            "{name}: {:?}",
            r.after_end
        );
        // the engine-driven replay judges the same
        let e = only(replay_with(&frames[..last_ack], &mut drive_engine));
        assert_eq!(tally(&e), tally(&r), "{name} through the engine");
    }
    // both directions of ibv_rc_pingpong: only the connection whose ACK
    // was cut off has a response after the end
    let Some(frames) = capture("pingpong_rc.pcap") else {
        return;
    };
    let cut = last_of(&frames, "RC_ACKNOWLEDGE");
    let reports = replay(&frames[..cut]);
    assert_eq!(reports.len(), 2);
    let tallies: Vec<_> = reports.iter().map(tally).collect();
    assert!(reports.iter().all(|r| r.matches()), "{reports:#?}");
    assert_eq!(
        tallies
            .iter()
            .map(|t| t.2)
            .collect::<Vec<_>>()
            .iter()
            .sum::<usize>(),
        1,
        "{tallies:?}"
    );
    assert_eq!(tallies.iter().map(|t| t.1).sum::<usize>(), 0);
}

#[test]
fn a_capture_cut_inside_a_write_is_clean_before_the_cut() {
    let Some(frames) = capture("rdma_write_bw.pcap") else {
        return;
    };
    // the last WRITE message: FIRST and MIDDLE kept, LAST and both ACKs
    // after it cut off
    let first = last_of(&frames, "RC_RDMA_WRITE_FIRST");
    let middle = first
        + frames[first..]
            .iter()
            .position(|(_, f)| opcode_of(f) == Some("RC_RDMA_WRITE_MIDDLE"))
            .unwrap();
    let r = only(replay(&frames[..=middle]));
    assert!(r.matches(), "{}", r.mismatches.join("\n"));
    let (matched, differed, after) = tally(&r);
    assert_eq!(differed, 0, "{r:#?}");
    assert_eq!(matched, r.expected);
    assert!(matched >= 3 && after >= 1, "{r:#?}");
    assert_eq!(matched + after, r.produced);
    // every WRITE of the capture targets the same 3000 bytes; the last
    // writes of each byte are unacknowledged in the cut capture, so none
    // is judged — and in the whole capture, all are
    assert_eq!((r.judged_bytes, r.unjudged_bytes), (0, 3000), "{r:#?}");
    let whole = only(replay(&frames));
    assert_eq!((whole.judged_bytes, whole.unjudged_bytes), (3000, 0));
}

#[test]
fn a_capture_cut_inside_a_read_response_is_clean_before_the_cut() {
    let Some(frames) = capture("rdma_read_bw.pcap") else {
        return;
    };
    // cut after the first READ's FIRST and MIDDLE responses
    let first = first_of(&frames, "RC_RDMA_READ_RESPONSE_FIRST");
    let r = only(replay(&frames[..first + 2]));
    assert!(r.matches(), "{}", r.mismatches.join("\n"));
    assert_eq!(tally(&r), (2, 0, 13), "{r:#?}");
    assert!(r.after_end[0].contains("RC_RDMA_READ_RESPONSE_LAST"));
}

/// Every prefix of a capture our responder answers identically replays
/// without a difference, and our responses are either matched or after
/// the end.
#[test]
fn every_prefix_of_an_identical_capture_has_no_difference() {
    for name in [
        "rdma_write_bw.pcap",
        "rdma_write_lat.pcap",
        "rdma_read_bw.pcap",
        "rdma_read_lat.pcap",
        "rdma_send_bw.pcap",
        "rdma_atomic_bw.pcap",
        "pingpong_rc.pcap",
        "rdma_cm.pcap",
    ] {
        let Some(frames) = capture(name) else { return };
        let mut after_end = 0;
        for n in 1..=frames.len() {
            for r in replay(&frames[..n]) {
                assert!(
                    r.matches(),
                    "{name} cut after frame {n}: {} -> {}:\n{}",
                    r.requester,
                    r.responder,
                    r.mismatches.join("\n")
                );
                assert_eq!(r.matched, r.expected, "{name} cut after frame {n}");
                assert_eq!(
                    r.matched + r.after_end.len(),
                    r.produced,
                    "{name} cut after frame {n}"
                );
                after_end += r.after_end.len();
            }
        }
        assert!(
            after_end > 0,
            "{name}: no cut left a response after the end"
        );
    }
}

/// Replaces frame `i` by its re-emitted repr after `change` (so its ICRC
/// stays valid).
fn rewrite(frames: &mut Frames, i: usize, change: impl FnOnce(&mut RoceRepr<'_>)) {
    let old = frames[i].1.clone();
    let mut r = RoceRepr::parse(&old).unwrap();
    change(&mut r);
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    frames[i].1 = buf;
}

#[test]
fn an_altered_response_is_still_a_difference() {
    let Some(mut frames) = capture("rdma_read_bw.pcap") else {
        return;
    };
    // a byte of the second READ response's payload flipped (its ICRC no
    // longer verifies), in a capture cut before the last READ's responses
    let second = first_of(&frames, "RC_RDMA_READ_RESPONSE_FIRST") + 1;
    let at = frames[second].1.len() - 100;
    frames[second].1[at] ^= 0x40;
    let cut = last_of(&frames, "RC_RDMA_READ_RESPONSE_FIRST");
    let r = only(replay(&frames[..cut]));
    assert!(!r.matches());
    assert_eq!(tally(&r), (11, 1, 3), "{r:#?}");
    let name = format!("frame {} ", second + 1);
    assert!(
        r.mismatches
            .iter()
            .any(|m| m.starts_with(&name) && m.contains("payload bytes differ")),
        "{:?}",
        r.mismatches
    );
    assert!(
        r.mismatches
            .iter()
            .any(|m| m.starts_with(&name) && m.contains("icrc: ours valid, capture invalid")),
        "{:?}",
        r.mismatches
    );

    // an ACK re-emitted with another MSN, its ICRC valid, in a capture cut
    // before the final ACK
    let Some(mut frames) = capture("rdma_write_bw.pcap") else {
        return;
    };
    let ack = first_of(&frames, "RC_ACKNOWLEDGE");
    rewrite(&mut frames, ack, |r| {
        let mut aeth = r.ext.aeth.unwrap();
        aeth.msn += 7;
        r.ext.aeth = Some(aeth);
    });
    let cut = last_of(&frames, "RC_ACKNOWLEDGE");
    let r = only(replay(&frames[..cut]));
    assert_eq!(tally(&r), (3, 1, 1), "{r:#?}");
    assert_eq!(
        r.mismatches,
        [format!(
            "frame {} (RC_ACKNOWLEDGE psn 5454385): aeth.msn: ours Some(1), capture Some(8)",
            ack + 1
        )]
    );
}

#[test]
fn a_response_missing_inside_the_capture_is_a_difference() {
    let Some(frames) = capture("rdma_write_bw.pcap") else {
        return;
    };
    // the first ACK dropped: ours has no counterpart, the rest pair up
    let ack = first_of(&frames, "RC_ACKNOWLEDGE");
    let mut cut = frames.clone();
    cut.remove(ack);
    let r = only(replay(&cut));
    assert_eq!(tally(&r), (4, 1, 0), "{r:#?}");
    assert_eq!(
        r.mismatches,
        ["our response 1 (RC_ACKNOWLEDGE psn 5454385): the capture has no such response"]
    );
    // the final ACK dropped from a capture in which the responder's host
    // goes on (perftest's TCP teardown, 0.2 s later): it shows it missing
    let last = last_of(&frames, "RC_ACKNOWLEDGE");
    let mut cut = frames.clone();
    cut.remove(last);
    let r = only(replay(&cut));
    assert_eq!(tally(&r), (4, 1, 0), "{r:#?}");
    assert!(
        r.mismatches[0]
            .contains("the capture has no such response, and the responder's frames go on"),
        "{:?}",
        r.mismatches
    );
}

/// NCCL all-reduce over rxe on three nodes: RDMA WRITEs with immediate
/// (each consuming a receive) in both directions of every connection.
#[test]
fn nccl_all_reduce() {
    for name in [
        "nccl/nccl_node0.pcap",
        "nccl/nccl_node1.pcap",
        "nccl/nccl_node2.pcap",
        "nccl/ring2_node0.pcap",
        "nccl/ring2_node1.pcap",
        "nccl/ring2_node2.pcap",
        "nccl/tree2_node0.pcap",
        "nccl/tree2_node1.pcap",
        "nccl/tree2_node2.pcap",
    ] {
        check(name, 8);
    }
}

/// The NCCL captures interleave four connections with other traffic: cut
/// right before each of their RoCE frames, each replays without a
/// difference.
#[test]
fn every_cut_of_the_nccl_captures_has_no_difference() {
    for name in [
        "nccl/nccl_node0.pcap",
        "nccl/ring2_node1.pcap",
        "nccl/tree2_node2.pcap",
    ] {
        let Some(frames) = capture(name) else { return };
        let mut after_end = 0;
        for n in 1..frames.len() {
            if opcode_of(&frames[n].1).is_none() {
                continue;
            }
            for r in replay(&frames[..n]) {
                assert!(
                    r.matches(),
                    "{name} cut after frame {n}: {} -> {}:\n{}",
                    r.requester,
                    r.responder,
                    r.mismatches.join("\n")
                );
                assert_eq!(r.matched + r.after_end.len(), r.produced);
                after_end += r.after_end.len();
            }
        }
        assert!(
            after_end > 0,
            "{name}: no cut left a response after the end"
        );
    }
}

/// Damaged captures never make the replay panic: seeded random changes to
/// the RC captures' frames, both raw (a flipped byte, a cut, extra bytes)
/// and in their headers re-emitted with a valid ICRC (PSNs, VAs, R_Keys,
/// DMA lengths, payload lengths, QPNs, syndromes), and cuts of the
/// capture.
#[test]
fn damaged_captures_never_panic_the_replay() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    };
    let mut replays = 0;
    for name in [
        "rdma_write_bw.pcap",
        "rdma_read_bw.pcap",
        "rdma_send_bw.pcap",
        "rdma_atomic_bw.pcap",
        "rping.pcap",
        "nccl/tree2_node1.pcap",
    ] {
        let Some(frames) = capture(name) else { return };
        for _ in 0..100 {
            let mut f = frames.clone();
            let n = f.len() as u64;
            for _ in 0..=rand(6) {
                let i = rand(n) as usize;
                let d = &mut f[i].1;
                match rand(4) {
                    0 if !d.is_empty() => {
                        let at = rand(d.len() as u64) as usize;
                        d[at] ^= 1 << rand(8);
                    }
                    1 => d.truncate(rand(d.len() as u64 + 1) as usize),
                    2 => d.extend((0..rand(64)).map(|_| rand(256) as u8)),
                    _ if RoceRepr::parse(d).is_ok() => {
                        let pick = rand(9);
                        let big = rand(1 << 40) | (rand(u32::MAX as u64) << 40);
                        let small = rand(1 << 16) as u32;
                        rewrite(&mut f, i, |r| match pick {
                            0 => r.bth.psn = wire::Psn::new(r.bth.psn.value() ^ small),
                            1 => r.bth.dest_qp ^= small,
                            2 => r.payload = &r.payload[..r.payload.len() / 2],
                            3 => {
                                if let Some(x) = r.ext.reth.as_mut() {
                                    x.va = if small & 1 == 0 {
                                        big
                                    } else {
                                        x.va ^ small as u64
                                    };
                                }
                            }
                            4 => {
                                if let Some(x) = r.ext.reth.as_mut() {
                                    x.dma_len = if small & 1 == 0 {
                                        u32::MAX - small
                                    } else {
                                        small
                                    };
                                }
                            }
                            5 => {
                                if let Some(x) = r.ext.reth.as_mut() {
                                    x.rkey ^= small;
                                }
                            }
                            6 => {
                                if let Some(a) = r.ext.atomic.as_mut() {
                                    a.va = big;
                                }
                            }
                            7 => {
                                if let Some(a) = r.ext.aeth.as_mut() {
                                    a.syndrome = wire::Syndrome::from_byte(small as u8);
                                }
                            }
                            _ => r.bth.psn = wire::Psn::new(small),
                        });
                    }
                    _ => {}
                }
            }
            let cut = f.len() - rand(f.len() as u64 / 2) as usize;
            let _ = replay(&f[..cut]);
            replays += 1;
        }
    }
    assert!(replays >= 600, "{replays}");
}

// ------------------------------------------ a responder that went silent

/// Host `n`'s MAC and IPv4 address (192.0.2.n).
fn host(n: u8) -> (EthernetAddress, Ipv4Addr) {
    (
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Addr::new(192, 0, 2, n),
    )
}

/// The Ethernet and IPv4 headers of a frame from host `from` to host `to`.
fn l2_l3(from: u8, to: u8) -> (EthernetRepr, Ipv4Repr) {
    let ((smac, sip), (dmac, dip)) = (host(from), host(to));
    let eth = EthernetRepr {
        dst: dmac,
        src: smac,
        vlan: None,
        ethertype: 0x0800,
    };
    let ip = Ipv4Repr {
        src: sip,
        dst: dip,
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: true,
        ttl: 64,
    };
    (eth, ip)
}

/// An RC frame from host `from` to host `to`'s QP `qp` at `at_us`.
fn rc_frame(
    at_us: u64,
    from: u8,
    to: u8,
    op: Opcode,
    qp: u32,
    psn: u32,
    ext: ExtHeaders,
) -> (Instant, Vec<u8>) {
    let (eth, ip) = l2_l3(from, to);
    let ack = op == Opcode::RC_ACKNOWLEDGE;
    let r = RoceRepr {
        eth,
        ip: IpRepr::V4(ip),
        udp: UdpRepr {
            src_port: 50000,
            dst_port: 4791,
        },
        udp_checksum: UdpChecksum::Zero,
        // every request asks for its ACK (the BTH's AckReq bit)
        bth: BthRepr {
            ack_req: !ack,
            ..BthRepr::new(op, qp, Psn::new(psn))
        },
        ext,
        payload: if ack { &[] } else { &[7u8; 64] },
        trailer_len: 0,
    };
    let mut buf = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut buf).expect("a valid test frame");
    buf.truncate(n);
    (Instant::from_nanos(at_us * 1000), buf)
}

/// A UDP datagram (to the discard port, not RoCE) from host `from` to
/// host `to` at `at_us`: a program's other traffic.
fn other_frame(at_us: u64, from: u8, to: u8) -> (Instant, Vec<u8>) {
    let (eth, ip) = l2_l3(from, to);
    let payload = [0u8; 8];
    let udp_len = 8 + payload.len();
    let mut buf = vec![0u8; eth.header_len() + 20 + udp_len];
    eth.emit(&mut buf);
    let l3 = eth.header_len();
    ip.emit(&mut buf[l3..], udp_len);
    let u = l3 + 20;
    buf[u..u + 2].copy_from_slice(&40000u16.to_be_bytes());
    buf[u + 2..u + 4].copy_from_slice(&9u16.to_be_bytes());
    buf[u + 4..u + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    (Instant::from_nanos(at_us * 1000), buf)
}

/// Host 1 SENDs to host 2's QP 0x11 (PSN 100, 101, 102), host 2 ACKs the
/// first two and then goes silent (its QP destroyed), while host 1
/// retries PSN 102 for 1.5 s and ends with other traffic of its own.
fn silent_responder() -> Vec<(Instant, Vec<u8>)> {
    let send = |at, psn| {
        rc_frame(
            at,
            1,
            2,
            Opcode::RC_SEND_ONLY,
            0x11,
            psn,
            Default::default(),
        )
    };
    let ack = |at, psn, msn| {
        let ext = ExtHeaders {
            aeth: Some(Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn,
            }),
            ..Default::default()
        };
        rc_frame(at, 2, 1, Opcode::RC_ACKNOWLEDGE, 0x22, psn, ext)
    };
    vec![
        send(0, 100),
        ack(10, 100, 1),
        send(1000, 101),
        ack(1010, 101, 2),
        send(2000, 102),
        // the requester's retries (IBA 9.7.6.1.3: the same PSN again)
        send(502_000, 102),
        send(1_002_000, 102),
        send(1_502_000, 102),
        other_frame(3_000_000, 1, 2),
    ]
}

#[test]
fn a_responder_that_went_silent_has_its_missing_answers_after_the_end() {
    let frames = silent_responder();
    let r = only(replay(&frames));
    // the first two ACKs pair; the rest of ours (PSN 102 and its
    // duplicates) come after the last frame host 2 sent
    assert!(r.matches(), "{}", r.mismatches.join("\n"));
    assert_eq!(r.matched, 2, "{r:#?}");
    assert_eq!(r.differed, 0, "{r:#?}");
    assert!(!r.after_end.is_empty(), "{r:#?}");
    assert!(
        r.after_end
            .iter()
            .all(|a| a.contains("RC_ACKNOWLEDGE psn 102")),
        "{:?}",
        r.after_end
    );
    assert_eq!(r.matched + r.after_end.len(), r.produced);
    // the engine-driven replay judges the same
    let e = only(replay_with(&frames, &mut drive_engine));
    assert_eq!(tally(&e), tally(&r));

    // the same capture with a frame of host 2's own after the answers
    // were due (its other traffic): it shows them missing
    let mut alive = frames.clone();
    alive.push(other_frame(3_500_000, 2, 1));
    let r = only(replay(&alive));
    assert!(r.after_end.is_empty(), "{r:#?}");
    assert_eq!(r.differed, r.produced - 2, "{r:#?}");
    assert!(
        r.mismatches[0].contains(
            "(RC_ACKNOWLEDGE psn 102): the capture has no such response, and the responder's frames go on"
        ),
        "{:?}",
        r.mismatches
    );
}
