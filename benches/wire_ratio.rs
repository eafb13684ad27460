//! The same three measurements as `wire.rs` (bare CRC-32, verified parse,
//! build), interleaved: each round times a short batch of each back to back,
//! and the ratios are taken from the medians and minima over many rounds.
//! On a shared, noisy machine this is steadier than comparing criterion runs
//! made seconds apart, because load changes hit all three alike.
//!
//! A second table splits the verified parse of the 4 KiB IPv4 frame into
//! its parts, timed the same way: `RocePacket::new_checked`,
//! `RocePacket::verify_icrc`, `RoceRepr::from_packet`, and for comparison
//! the bare CRC-32 of the bytes the ICRC covers.
//!
//! `cargo bench -p benches --bench wire_ratio`

use benches::{batch, min_median};
use benches::{frame, payload, rdma_write_only, PAYLOAD_SIZES};
use std::hint::black_box;
use wire::{RocePacket, RoceRepr, UdpChecksum};

const ROUNDS: usize = 1000;

fn main() {
    // `cargo bench` passes `--bench`; a name filter is not supported.
    let cases = PAYLOAD_SIZES
        .iter()
        .map(|&n| (n.to_string(), n, false, UdpChecksum::Zero))
        .chain([
            ("4096-ipv6".to_string(), 4096, true, UdpChecksum::Computed),
            ("4096-ipv6-csum0".to_string(), 4096, true, UdpChecksum::Zero),
        ]);
    println!("{ROUNDS} interleaved rounds; ns per frame, min / median; ratios to crc32");
    println!(
        "{:<16} {:>15} {:>15} {:>15} {:>13} {:>13}",
        "case", "crc32", "parse_verify", "build_icrc", "parse/crc32", "build/crc32"
    );
    for (id, len, v6, udp_checksum) in cases {
        let p = payload(len);
        let repr = rdma_write_only(&p, v6, udp_checksum);
        let f = frame(&repr);
        assert_eq!(RoceRepr::parse(&f), Ok(repr));
        let mut buf = vec![0u8; f.len()];
        // About 0.1 ms per batch.
        let n = 100_000 / (f.len() / 64 + 10);
        let (mut crc, mut parse, mut build) = (vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            crc.push(batch(n, || {
                black_box(crc32fast::hash(black_box(&f)));
            }));
            parse.push(batch(n, || {
                let r = RoceRepr::parse(black_box(&f));
                black_box(&r);
            }));
            build.push(batch(n, || {
                let r = black_box(&repr).emit(black_box(&mut buf[..]));
                black_box(&r);
            }));
        }
        assert_eq!(buf, f);
        let (c, p, b) = (min_median(crc), min_median(parse), min_median(build));
        println!(
            "{id:<16} {:>6.1} / {:>6.1} {:>6.1} / {:>6.1} {:>6.1} / {:>6.1} {:>5.2} / {:>5.2} {:>5.2} / {:>5.2}",
            c.0,
            c.1,
            p.0,
            p.1,
            b.0,
            b.1,
            p.0 / c.0,
            p.1 / c.1,
            b.0 / c.0,
            b.1 / c.1
        );
    }
    breakdown();
}

/// The parts of a verified parse of the 4 KiB IPv4 frame, interleaved.
fn breakdown() {
    let p = payload(4096);
    let repr = rdma_write_only(&p, false, UdpChecksum::Zero);
    let f = frame(&repr);
    let pkt = RocePacket::new_checked(&f[..]).expect("benchmark frame parses");
    let covered = pkt.icrc_covered();
    let n = 100_000 / (f.len() / 64 + 10);
    let mut t: [Vec<f64>; 6] = Default::default();
    for _ in 0..ROUNDS {
        t[0].push(batch(n, || {
            black_box(crc32fast::hash(black_box(&f)));
        }));
        t[1].push(batch(n, || {
            black_box(crc32fast::hash(black_box(covered)));
        }));
        t[2].push(batch(n, || {
            let r = RocePacket::new_checked(black_box(&f[..]));
            black_box(&r);
        }));
        t[3].push(batch(n, || {
            let r = black_box(&pkt).verify_icrc();
            black_box(&r);
        }));
        t[4].push(batch(n, || {
            let r = RoceRepr::from_packet(black_box(&pkt));
            black_box(&r);
        }));
        t[5].push(batch(n, || {
            let r = RoceRepr::parse(black_box(&f));
            black_box(&r);
        }));
    }
    println!();
    println!("parse_verify/4096 in parts, ns, min / median of {ROUNDS} interleaved rounds");
    let names = [
        "crc32 of the frame",
        "crc32 of the ICRC-covered bytes",
        "RocePacket::new_checked",
        "RocePacket::verify_icrc",
        "RoceRepr::from_packet",
        "RoceRepr::parse (all of it)",
    ];
    for (name, v) in names.iter().zip(t) {
        let (min, med) = min_median(v);
        println!("{name:<34} {min:>6.1} / {med:>6.1}");
    }
}
