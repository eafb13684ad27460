//! transport: two RNICs joined by the deterministic simulator
//! (`nic::sim::Pair`) over a zero-latency, infinitely fast link with no
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
//! Targets (transport issue, acceptance item 5): at least 3 M 64 B WRITEs
//! per second; 64 KiB WRITE throughput at least 50 % of memcpy throughput.
//! Figures: BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nic::sim::{LinkConfig, Pair, PairConfig};
use nic::verbs::{Memory, QpType, SendOp, SendWr, Sgl, Wc, WcStatus};
use std::hint::black_box;
use std::time::Duration;

/// WRITEs outstanding per iteration (perftest's default `--tx-depth`).
const TX_DEPTH: usize = 128;
const SIZES: [usize; 2] = [64, 64 * 1024];

/// A connected RC pair over an ideal link.
fn pair(size: usize) -> Pair {
    let link = LinkConfig {
        latency: Duration::ZERO,
        bandwidth_bps: 0,
        loss: 0.0,
        duplicate: 0.0,
        corrupt: 0.0,
        ce_mark: 0.0,
        reorder: 0.0,
        ..LinkConfig::default()
    };
    Pair::new(PairConfig {
        qp_type: QpType::Rc,
        mtu: 4096,
        mem_len: 2 * size.max(4096),
        link,
        max_wr: TX_DEPTH as u32,
        ..PairConfig::default()
    })
}

/// Posts `TX_DEPTH` WRITEs of `size` bytes from side 0 to side 1 and steps
/// the simulator until every one has completed.
fn write_batch(p: &mut Pair, size: usize, wcs: &mut Vec<Wc>) {
    let (a, b) = (&p.sides[0], &p.sides[1]);
    let (qpn, cq) = (a.qpn, a.cq);
    let sgl = Sgl::single(a.base, size as u32, a.lkey);
    let op = SendOp::Write {
        remote_addr: b.base + size as u64,
        rkey: b.rkey,
    };
    for i in 0..TX_DEPTH {
        p.sim.nodes[0]
            .post_send(qpn, SendWr::new(i as u64, op, sgl))
            .expect("post_send");
    }
    let mut done = 0;
    while done < TX_DEPTH {
        let busy = p.sim.step();
        wcs.clear();
        p.sim.nodes[0]
            .poll_cq(cq, usize::MAX, wcs)
            .expect("poll_cq");
        for wc in wcs.iter() {
            assert_eq!(wc.status, WcStatus::Success);
        }
        done += wcs.len();
        assert!(busy || done == TX_DEPTH, "the transport stalled");
    }
}

fn transport(c: &mut Criterion) {
    let mut g = c.benchmark_group("transport");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    for size in SIZES {
        // the WRITEs through the simulator
        let mut p = pair(size);
        p.sides[0].mem.write(0, &pattern(size));
        let mut wcs = Vec::with_capacity(TX_DEPTH);
        write_batch(&mut p, size, &mut wcs);
        assert_eq!(
            p.sides[1].mem.to_vec()[size..2 * size],
            pattern(size)[..],
            "the WRITEs landed"
        );
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

/// A non-trivial pattern of `len` bytes.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0x5A)
        .collect()
}

criterion_group!(benches, transport);
criterion_main!(benches);
