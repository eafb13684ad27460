//! A profiling driver (no timing of its own): runs WRITE batches of one size
//! through the simulator for `perf record`.
//!
//! `cargo bench -p benches --bench transport_prof --no-run`, then
//! `perf record -g target/release/deps/transport_prof-* 64 20000`
//! (size in bytes, batches).

#[path = "transport_pair.rs"]
mod transport_pair;
use transport_pair::{ready_pair, write_batch};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let size: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(64);
    let batches: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let (mut p, mut wcs) = ready_pair(size);
    for _ in 0..batches {
        write_batch(&mut p, size, &mut wcs);
    }
    println!("{batches} batches of {size}-byte WRITEs done");
}
