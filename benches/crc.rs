//! CRC-32 (ISO-HDLC, the Ethernet/zlib CRC that the ICRC uses) engines side
//! by side, interleaved like `wire_ratio`: `crc32fast` and `crc-fast`, over
//! the frame sizes of the wire benchmarks and a 64 KiB buffer.
//!
//! `cargo bench -p benches --bench crc`

use benches::{batch, min_median};
use std::hint::black_box;

const ROUNDS: usize = 500;

fn main() {
    println!("{ROUNDS} interleaved rounds; ns per buffer, min / median; GB/s from the median");
    println!(
        "{:>7} {:>24} {:>24} {:>8}",
        "bytes", "crc32fast", "crc-fast", "speed-up"
    );
    for len in [64usize, 138, 1098, 4170, 4190, 65536] {
        let buf: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ 0x5A)
            .collect();
        assert_eq!(
            crc32fast::hash(&buf),
            crc_fast::crc32_iso_hdlc(&buf),
            "the engines agree"
        );
        let n = 100_000 / (len / 64 + 10);
        let (mut a, mut b) = (vec![], vec![]);
        for _ in 0..ROUNDS {
            a.push(batch(n, || {
                black_box(crc32fast::hash(black_box(&buf)));
            }));
            b.push(batch(n, || {
                black_box(crc_fast::crc32_iso_hdlc(black_box(&buf)));
            }));
        }
        let (a, b) = (min_median(a), min_median(b));
        println!(
            "{len:>7} {:>8.1} / {:>6.1} ({:>5.1}) {:>8.1} / {:>6.1} ({:>5.1}) {:>7.2}x",
            a.0,
            a.1,
            len as f64 / a.1,
            b.0,
            b.1,
            len as f64 / b.1,
            a.1 / b.1
        );
    }
}
