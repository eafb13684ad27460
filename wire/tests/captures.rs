//! Acceptance 1 of the wire issue: every RoCEv2 frame of the third-party
//! Linux Soft-RoCE captures parses, its ICRC verifies, and emitting the
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
