//! Acceptance 3 of the transport issue: the requests of the RC captures of
//! Linux Soft-RoCE, replayed into our responder, produce the capture's
//! responses field by field (opcode, PSN, destination QP, AETH syndrome and
//! MSN, READ response lengths and data, atomic ACK values).

use nic::replay::{drive_engine, replay, replay_with};
use nic::Instant;
use std::path::PathBuf;

fn capture(name: &str) -> Option<Vec<(Instant, Vec<u8>)>> {
    let dir = match std::env::var_os("SOFTRNIC_RXE_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/pcaps/rxe-public"),
    };
    let path = dir.join(name);
    if !path.is_file() {
        eprintln!(
            "SKIPPED replay of {name}: {} is missing (../shared is not beside the repository)",
            path.display()
        );
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
    // Acceptance 4 of the engine issue: the same capture through the pcap
    // replay port into a polling engine gives the same responses.
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
