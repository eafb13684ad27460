//! The measurements of `transport.rs`, interleaved like `wire_ratio.rs`:
//! each round times one batch of `TX_DEPTH` WRITEs through the simulator
//! and, straight after, memcpy of the same size for about as long; the
//! ratios come from the minima and medians over the rounds. On a shared,
//! noisy machine this is steadier than comparing criterion runs made
//! seconds apart.
//!
//! `cargo bench -p benches --bench transport_ratio`

use benches::min_median;
use std::hint::black_box;
use std::time::Instant;

#[path = "transport_pair.rs"]
mod transport_pair;
use transport_pair::{pattern, ready_pair, write_batch, SIZES, TX_DEPTH};

/// Rounds per size (each about 2 ms of WRITEs and as much memcpy at 64 KiB).
const ROUNDS: usize = 300;

fn main() {
    // `cargo bench` passes `--bench`; a name filter is not supported.
    println!("{ROUNDS} interleaved rounds of {TX_DEPTH} WRITEs on one QP vs memcpy; min / median");
    for size in SIZES {
        let (mut p, mut wcs) = ready_pair(size);
        let src = pattern(size);
        let mut dst = vec![0u8; size];
        // memcpy repetitions per round: about the time of one WRITE batch
        let copies = TX_DEPTH * if size == 64 { 64 } else { 4 };
        let (mut write_ns, mut copy_ns) = (vec![], vec![]);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            write_batch(&mut p, size, &mut wcs);
            write_ns.push(t.elapsed().as_nanos() as f64 / TX_DEPTH as f64);
            let t = Instant::now();
            for _ in 0..copies {
                black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]));
            }
            copy_ns.push(t.elapsed().as_nanos() as f64 / copies as f64);
        }
        black_box(&dst);
        let (w, c) = (min_median(write_ns), min_median(copy_ns));
        let gib = |ns: f64| size as f64 / ns * 1e9 / (1u64 << 30) as f64;
        if size == 64 {
            println!(
                "write/64       {:>8.1} / {:>8.1} ns per WRITE = {:.2} / {:.2} M WRITEs/s",
                w.0,
                w.1,
                1e3 / w.0,
                1e3 / w.1
            );
            println!(
                "memcpy/64      {:>8.1} / {:>8.1} ns per copy  = {:.0} / {:.0} M copies/s",
                c.0,
                c.1,
                1e3 / c.0,
                1e3 / c.1
            );
        } else {
            println!(
                "write/{size:<8} {:>8.1} / {:>8.1} ns per WRITE = {:.2} / {:.2} GiB/s",
                w.0,
                w.1,
                gib(w.0),
                gib(w.1)
            );
            println!(
                "memcpy/{size:<7} {:>8.1} / {:>8.1} ns per copy  = {:.2} / {:.2} GiB/s",
                c.0,
                c.1,
                gib(c.0),
                gib(c.1)
            );
            println!(
                "write / memcpy throughput: {:.1} % (minima) / {:.1} % (medians)",
                100.0 * c.0 / w.0,
                100.0 * c.1 / w.1
            );
        }
    }
}
