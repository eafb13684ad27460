//! wire: a verified parse (headers + ICRC) and a build (emit + ICRC) of an
//! RC RDMA WRITE ONLY frame (BTH + RETH + payload), against the bare CRC-32
//! of the same frame bytes in the same run. Figures: BENCHMARKS.md.
//!
//! `cargo bench -p benches --bench wire`
//!
//! Cases: payloads of 64 B, 1 KiB and 4 KiB over IPv4 with a zero UDP
//! checksum (what rxe sends), and 4 KiB over IPv6 twice: with the UDP
//! checksum softrnic sends over IPv6 by default (`4096-ipv6`: the parse
//! verifies it, the build computes it) and with a zero one
//! (`4096-ipv6-csum0`).
//!
//! - `crc32/<case>`: `crc32fast::hash` over the whole frame, the baseline;
//! - `parse_verify/<case>`: `RoceRepr::parse`, i.e. `RocePacket::new_checked`
//!   + `verify_icrc` + `RoceRepr::from_packet`, on a pre-built frame;
//! - `build_icrc/<case>`: `RoceRepr::emit` into a pre-allocated buffer.
//!
//! All three report throughput in frame bytes. For each case they run back
//! to back, so that a ratio compares measurements taken close together on a
//! noisy machine.
//!
//! `std::hint::black_box` is used throughout: criterion 0.5's own
//! `black_box` (without its nightly feature) is a volatile read, which on the
//! 232-byte `RoceRepr` costs more than building it. The parse result is
//! therefore consumed by reference and the closure returns nothing.

use benches::{frame, payload, rdma_write_only, PAYLOAD_SIZES};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use wire::{RoceRepr, UdpChecksum};

struct Case {
    id: String,
    payload: Vec<u8>,
    v6: bool,
    udp_checksum: UdpChecksum,
}

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = PAYLOAD_SIZES
        .iter()
        .map(|&n| Case {
            id: n.to_string(),
            payload: payload(n),
            v6: false,
            udp_checksum: UdpChecksum::Zero,
        })
        .collect();
    v.push(Case {
        id: "4096-ipv6".into(),
        payload: payload(4096),
        v6: true,
        udp_checksum: UdpChecksum::Computed,
    });
    v.push(Case {
        id: "4096-ipv6-csum0".into(),
        payload: payload(4096),
        v6: true,
        udp_checksum: UdpChecksum::Zero,
    });
    v
}

fn wire_benches(c: &mut Criterion) {
    for case in cases() {
        let repr = rdma_write_only(&case.payload, case.v6, case.udp_checksum);
        let f = frame(&repr);
        // The frame is what the benchmarks claim it is, and emit reproduces it.
        assert_eq!(RoceRepr::parse(&f), Ok(repr));
        let mut buf = vec![0u8; f.len()];
        assert_eq!(repr.emit(&mut buf), Ok(f.len()));
        assert_eq!(buf, f);
        let bytes = Throughput::Bytes(f.len() as u64);

        let mut g = c.benchmark_group("crc32");
        g.throughput(bytes.clone());
        g.bench_with_input(BenchmarkId::from_parameter(&case.id), &f[..], |b, f| {
            b.iter(|| crc32fast::hash(black_box(f)))
        });
        g.finish();

        let mut g = c.benchmark_group("parse_verify");
        g.throughput(bytes.clone());
        g.bench_with_input(BenchmarkId::from_parameter(&case.id), &f[..], |b, f| {
            b.iter(|| {
                let r = RoceRepr::parse(black_box(f));
                black_box(&r);
            })
        });
        g.finish();

        let mut g = c.benchmark_group("build_icrc");
        g.throughput(bytes);
        g.bench_function(BenchmarkId::from_parameter(&case.id), |b| {
            b.iter(|| {
                let n = black_box(&repr).emit(black_box(&mut buf[..]));
                black_box(&n);
            })
        });
        g.finish();
    }
}

/// 2 noisy vCPUs: short warm-up, 3 s of measurement per benchmark.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = wire_benches
}
criterion_main!(benches);
