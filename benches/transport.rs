//! transport: two RNICs joined by the deterministic simulator
//! (`sim::Pair`) over a zero-latency, infinitely fast link with no
//! impairments, so that only the transport and the simulator's frame
//! handling are measured: no sockets, no threads, no clock reads.
//!
//! `cargo bench -p benches --bench transport`
//!
//! - `write/64` and `write/65536`: RC RDMA WRITEs on one QP, every one
//!   signaled. One iteration posts `TX_DEPTH` (128, perftest's default
//!   `--tx-depth`) WRITEs from the same 64 B / 64 KiB source to the same
//!   remote destination (as `ib_write_bw` reuses one buffer), then runs
//!   `Sim::step` until all of them have completed at the requester. Path
//!   MTU 4096, so a 64 KiB WRITE is 16 packets. Throughput: messages per
//!   second for 64 B, payload bytes per second for 64 KiB.
//! - `memcpy/64` and `memcpy/65536`: `copy_from_slice` of a buffer of the
//!   same size on one core, in the same run, as the baseline.
//!
//! Targets: at least 3 M 64 B WRITEs per second; 64 KiB WRITE throughput
//! at least 50 % of memcpy throughput.
//! Figures: BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

#[path = "transport_pair.rs"]
mod transport_pair;
use transport_pair::{pattern, ready_pair, write_batch, SIZES, TX_DEPTH};

fn transport(c: &mut Criterion) {
    let mut g = c.benchmark_group("transport");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    for size in SIZES {
        // the WRITEs through the simulator
        let (mut p, mut wcs) = ready_pair(size);
        g.throughput(if size == 64 {
            Throughput::Elements(TX_DEPTH as u64)
        } else {
            Throughput::Bytes((TX_DEPTH * size) as u64)
        });
        g.bench_function(BenchmarkId::new("write", size), |bch| {
            bch.iter(|| write_batch(&mut p, size, &mut wcs))
        });

        // memcpy of the same size, same units
        let src = pattern(size);
        let mut dst = vec![0u8; size];
        g.throughput(if size == 64 {
            Throughput::Elements(1)
        } else {
            Throughput::Bytes(size as u64)
        });
        g.bench_function(BenchmarkId::new("memcpy", size), |bch| {
            bch.iter(|| {
                black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]));
            })
        });
        black_box(&dst);
    }
    g.finish();
}

criterion_group!(benches, transport);
criterion_main!(benches);
