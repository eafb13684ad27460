//! The checker's rules on synthetic frames.

use super::*;
use crate::capture::LINKTYPE_ETHERNET;
use std::net::Ipv4Addr;
use std::time::Duration;
use wire::{
    Aeth, BthRepr, EthernetAddress, EthernetRepr, ExtHeaders, IpRepr, Ipv4Repr, NakCode, Opcode,
    Psn, Reth, Syndrome, UdpChecksum, UdpRepr,
};

const A: u8 = 1;
const B: u8 = 2;

/// A frame from host `from` to host `to`'s QP `qp`.
fn frame(
    from: u8,
    to: u8,
    op: Opcode,
    qp: u32,
    psn: u32,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let r = RoceRepr {
        eth: EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, to]),
            src: EthernetAddress([2, 0, 0, 0, 0, from]),
            vlan: None,
            ethertype: 0x0800,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, from),
            dst: Ipv4Addr::new(192, 0, 2, to),
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
        }),
        udp: UdpRepr {
            src_port: 50000,
            dst_port: 4791,
        },
        udp_checksum: UdpChecksum::Zero,
        bth: BthRepr::new(op, qp, Psn::new(psn)),
        ext,
        payload,
        trailer_len: 0,
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf).expect("a valid test frame");
    buf
}

fn reth(len: u32) -> ExtHeaders {
    ExtHeaders {
        reth: Some(Reth {
            va: 0x1000,
            rkey: 0x42,
            dma_len: len,
        }),
        ..Default::default()
    }
}

fn aeth(syndrome: Syndrome, msn: u32) -> ExtHeaders {
    ExtHeaders {
        aeth: Some(Aeth { syndrome, msn }),
        ..Default::default()
    }
}

const ACK: Syndrome = Syndrome::Ack { credits: 31 };

/// Runs the frames through a checker: the index and problem of the first
/// broken one, and every note.
fn run(frames: &[Vec<u8>]) -> (Option<(usize, String)>, Vec<String>) {
    run_with(Checker::new(), frames)
}

fn run_with(mut c: Checker, frames: &[Vec<u8>]) -> (Option<(usize, String)>, Vec<String>) {
    let mut notes = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let rec = Record {
            number: i as u64 + 1,
            ts: Duration::ZERO,
            data: f.clone(),
            orig_len: f.len() as u32,
            linktype: LINKTYPE_ETHERNET,
        };
        let out = c.frame(&rec);
        notes.extend(out.notes.clone());
        if let Some(p) = out.problem {
            return (Some((i, p.to_string())), notes);
        }
    }
    (None, notes)
}

fn write_only(psn: u32, len: usize) -> Vec<u8> {
    frame(
        A,
        B,
        Opcode::RC_RDMA_WRITE_ONLY,
        0x11,
        psn,
        reth(len as u32),
        &vec![7u8; len],
    )
}

fn ack(psn: u32, msn: u32) -> Vec<u8> {
    frame(B, A, Opcode::RC_ACKNOWLEDGE, 0x12, psn, aeth(ACK, msn), &[])
}

#[test]
fn a_clean_conversation_passes() {
    let f = vec![
        write_only(10, 8),
        ack(10, 1),
        write_only(11, 8),
        write_only(12, 8),
        ack(12, 3),
    ];
    assert_eq!(run(&f).0, None);
}

#[test]
fn go_back_n_is_legal_and_annotated() {
    let f = vec![
        write_only(10, 8),
        write_only(11, 8),
        write_only(12, 8),
        frame(
            B,
            A,
            Opcode::RC_ACKNOWLEDGE,
            0x12,
            11,
            aeth(Syndrome::Nak(NakCode::PsnSequenceError), 1),
            &[],
        ),
        write_only(11, 8),
        write_only(12, 8),
        ack(12, 3),
        write_only(13, 8),
    ];
    let (problem, notes) = run(&f);
    assert_eq!(problem, None);
    assert!(
        notes.iter().any(|n| n.starts_with("retransmission")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("PSN sequence error")),
        "{notes:?}"
    );
}

#[test]
fn a_psn_gap_fails() {
    let f = vec![write_only(10, 8), write_only(12, 8)];
    let (p, _) = run(&f);
    let (i, why) = p.expect("a gap");
    assert_eq!(i, 1);
    assert!(why.contains("PSN gap: expected PSN 11, found 12"), "{why}");
}

#[test]
fn an_ack_of_an_unsent_psn_fails() {
    let f = vec![write_only(10, 8), ack(11, 1)];
    let (i, why) = run(&f).0.expect("an inconsistent ACK");
    assert_eq!(i, 1);
    assert!(why.contains("only up to PSN 10"), "{why}");
}

#[test]
fn a_nak_of_an_unsent_psn_fails() {
    let f = vec![
        write_only(10, 8),
        frame(
            B,
            A,
            Opcode::RC_ACKNOWLEDGE,
            0x12,
            30,
            aeth(Syndrome::RnrNak { timer: 3 }, 0),
            &[],
        ),
    ];
    assert!(run(&f).0.is_some());
}

#[test]
fn an_msn_that_skips_a_message_fails() {
    let f = vec![write_only(10, 8), ack(10, 1), write_only(11, 8), ack(11, 3)];
    let (i, why) = run(&f).0.expect("a wrong MSN");
    assert_eq!(i, 3);
    assert!(why.contains("the MSN should be 2"), "{why}");
}

#[test]
fn a_lossy_capture_stops_checking_msns_after_a_gap() {
    // PSN 11 is missing from the capture: whether a message ended there
    // is unknown, so the MSN of the next ACK may count it
    let f = vec![write_only(10, 8), ack(10, 1), write_only(12, 8), ack(12, 3)];
    let (p, notes) = run_with(Checker::lossy(), &f);
    assert!(p.is_none(), "{p:?}");
    assert!(notes.iter().any(|n| n.contains("PSN gap")), "{notes:?}");
    // without a gap the same checker still counts messages
    let f = vec![write_only(10, 8), ack(10, 1), write_only(11, 8), ack(11, 3)];
    let (p, _) = run_with(Checker::lossy(), &f);
    assert!(p.expect("a wrong MSN").1.contains("the MSN should be 2"));
}

#[test]
fn message_rules() {
    let mid = |psn, len: usize| {
        frame(
            A,
            B,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            0x11,
            psn,
            ExtHeaders::default(),
            &vec![1u8; len],
        )
    };
    let first = |psn, dma: u32| {
        frame(
            A,
            B,
            Opcode::RC_RDMA_WRITE_FIRST,
            0x11,
            psn,
            reth(dma),
            &[1u8; 1024],
        )
    };
    let last = |psn, len: usize| {
        frame(
            A,
            B,
            Opcode::RC_RDMA_WRITE_LAST,
            0x11,
            psn,
            ExtHeaders::default(),
            &vec![1u8; len],
        )
    };
    // a whole message
    assert_eq!(run(&[first(1, 2500), mid(2, 1024), last(3, 452)]).0, None);
    // the RETH says otherwise
    let (_, why) = run(&[first(1, 3000), mid(2, 1024), last(3, 452)])
        .0
        .unwrap();
    assert!(why.contains("RETH DMA length is 3000"), "{why}");
    // a MIDDLE of another size than the MTU
    let (_, why) = run(&[first(1, 3000), mid(2, 1000)]).0.unwrap();
    assert!(why.contains("exactly the path MTU (1024)"), "{why}");
    // a new message before the LAST
    let (i, why) = run(&[first(1, 3000), mid(2, 1024), write_only(3, 8)])
        .0
        .unwrap();
    assert_eq!(i, 2);
    assert!(why.contains("unfinished"), "{why}");
    // a MIDDLE outside a message
    let (_, why) = run(&[write_only(1, 8), mid(2, 1024)]).0.unwrap();
    assert!(why.contains("outside a message"), "{why}");
    // a stream that starts mid-message is fine
    assert_eq!(run(&[mid(2, 1024), last(3, 10), write_only(4, 8)]).0, None);
}

#[test]
fn a_lossy_capture_learns_no_mtu_from_a_read_followed_by_a_reordered_packet() {
    let read = frame(
        A,
        B,
        Opcode::RC_RDMA_READ_REQUEST,
        0x11,
        100,
        reth(300),
        &[],
    );
    // 300 bytes span one PSN at any MTU but 256; PSN 101 was reordered
    // behind 102 upstream, so 102 seems to say MTU 256
    let f = vec![
        read,
        write_only(102, 8),
        write_only(101, 8),
        write_only(103, 777),
    ];
    let (p, notes) = run_with(Checker::lossy(), &f);
    assert_eq!(p, None, "{notes:?}");
    // a capture that is not lossy takes the span at its word
    let (p, _) = run(&f);
    let (i, why) = p.expect("777 bytes over MTU 256");
    assert_eq!(i, 3);
    assert!(why.contains("more than the path MTU (256)"), "{why}");
}

#[test]
fn reads_span_psns_and_teach_the_mtu() {
    let read = |psn, len| {
        frame(
            A,
            B,
            Opcode::RC_RDMA_READ_REQUEST,
            0x11,
            psn,
            reth(len),
            &[],
        )
    };
    let resp = |op, psn, msn, len: usize| {
        let ext = if op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            ExtHeaders::default()
        } else {
            aeth(ACK, msn)
        };
        frame(B, A, op, 0x12, psn, ext, &vec![3u8; len])
    };
    let f = vec![
        read(100, 5000),
        // 5000 bytes span 5 PSNs at MTU 1024: the next request is at 105
        write_only(105, 8),
        resp(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 100, 1, 1024),
        resp(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 101, 1, 1024),
        resp(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 102, 1, 1024),
        resp(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 103, 1, 1024),
        resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 104, 1, 904),
        ack(105, 2),
    ];
    let (problem, notes) = run(&f);
    assert_eq!(problem, None, "{notes:?}");
    // a missing middle response
    let mut g = f.clone();
    g.remove(4);
    let (i, why) = run(&g).0.unwrap();
    assert_eq!(i, 4);
    assert!(why.contains("read response PSN gap"), "{why}");
    // a short read response
    let mut g = f.clone();
    g[6] = resp(Opcode::RC_RDMA_READ_RESPONSE_LAST, 104, 1, 900);
    let (_, why) = run(&g).0.unwrap();
    assert!(why.contains("the READ asked for 5000"), "{why}");
    // a read response that answers nothing
    let (_, why) = run(&[
        read(100, 5000),
        write_only(105, 8),
        resp(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 103, 1, 1024),
    ])
    .0
    .unwrap();
    assert!(why.contains("answers no RDMA READ request"), "{why}");
}

#[test]
fn ud_cnp_and_other_frames() {
    let ud = frame(
        A,
        B,
        Opcode::UD_SEND_ONLY,
        1,
        77,
        ExtHeaders {
            deth: Some(wire::Deth {
                qkey: 0x8001_0000,
                src_qp: 1,
            }),
            ..Default::default()
        },
        &[0u8; 256],
    );
    // UD PSNs jump (one QP, many peers): fine
    let mut ud2 = ud.clone();
    let r = RoceRepr::parse(&ud).unwrap();
    let mut r2 = r;
    r2.bth.psn = Psn::new(90);
    r2.emit(&mut ud2).unwrap();
    let mut arp = vec![0xFFu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let mut c = Checker::new();
    for (i, f) in [ud, ud2, arp].iter().enumerate() {
        let rec = Record {
            number: i as u64 + 1,
            ts: Duration::ZERO,
            data: f.clone(),
            orig_len: f.len() as u32,
            linktype: LINKTYPE_ETHERNET,
        };
        assert_eq!(c.frame(&rec).problem, None);
    }
    assert_eq!(c.stats.ud, 2);
    assert_eq!(c.stats.skipped.get("ARP"), Some(&1));
}

#[test]
fn linux_cooked_captures_are_read() {
    let f = write_only(5, 8);
    // SLL: packet type, ARPHRD, address length, 8 address bytes, protocol
    let mut sll = vec![0, 4, 0, 1, 0, 6];
    sll.extend_from_slice(&f[6..12]);
    sll.extend_from_slice(&[0, 0]);
    sll.extend_from_slice(&f[12..14]);
    sll.extend_from_slice(&f[14..]);
    let mut c = Checker::new();
    let out = c.frame(&Record {
        number: 1,
        ts: Duration::ZERO,
        orig_len: sll.len() as u32,
        data: sll,
        linktype: 113,
    });
    assert_eq!(out.problem, None);
    assert_eq!(out.icrc_ok, Some(true));
    let out = c.frame(&Record {
        number: 2,
        ts: Duration::ZERO,
        orig_len: 60,
        data: vec![0; 60],
        linktype: 105,
    });
    assert_eq!(out.problem, Some(Violation::LinkType(105)));
    assert!(Violation::LinkType(105)
        .to_string()
        .contains("link type 105 is not supported"));
}

#[test]
fn an_atomic_ack_without_its_request_fails_unless_the_capture_is_lossy() {
    let atomic_ack = |psn: u32, msn: u32| {
        let ext = ExtHeaders {
            aeth: Some(Aeth { syndrome: ACK, msn }),
            atomic_ack: Some(5),
            ..Default::default()
        };
        frame(B, A, Opcode::RC_ATOMIC_ACKNOWLEDGE, 0x12, psn, ext, &[])
    };
    // PSN 10 was a WRITE: its answer cannot be an atomic ACK
    let f = vec![write_only(10, 8), atomic_ack(10, 1)];
    let (p, _) = run(&f);
    assert!(
        p.as_ref()
            .is_some_and(|(i, why)| *i == 1 && why.contains("not an atomic request")),
        "{p:?}"
    );
    // behind a lossy hop the request may be the missing frame: a counted loss
    let (p, notes) = run_with(Checker::lossy(), &f);
    assert_eq!(p, None);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("not an atomic request") && n.contains("lossy path")),
        "{notes:?}"
    );
}

#[test]
fn a_frame_cut_after_its_headers_is_summed_up_and_one_cut_inside_them_is_not() {
    let f = write_only(5, 8);
    let whole = RoceRepr::parse(&f).unwrap().to_string();
    let cut = |keep: usize| {
        Checker::new().frame(&Record {
            number: 1,
            ts: Duration::ZERO,
            data: f[..keep].to_vec(),
            orig_len: f.len() as u32,
            linktype: LINKTYPE_ETHERNET,
        })
    };
    // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 = 70 bytes of headers
    let out = cut(70);
    assert_eq!(out.summary.as_deref(), Some(whole.as_str()));
    assert_eq!(
        out.problem,
        Some(Violation::CutBeforeIcrc {
            captured: 70,
            orig: f.len() as u32
        })
    );
    let out = cut(69);
    assert_eq!(out.summary, None);
    assert!(matches!(
        out.problem,
        Some(Violation::Cut { captured: 69, .. })
    ));
}
