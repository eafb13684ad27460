//! The fused copy + CRC-32 of `wire::crc_copy` against a copy followed by
//! a CRC pass, interleaved like `crc.rs`: per round, one batch of each case
//! over the same buffers; min / median over the rounds.
//!
//! - `fused`: `copy_and_update` (the best kernel on this CPU);
//! - `fused-pclmul`: the 128-bit PCLMULQDQ kernel forced;
//! - `copy+crc`: `copy_from_slice`, then `crc32fast` over the copy (two
//!   passes);
//! - `memcpy`: `copy_from_slice` alone (the floor);
//! - `crc`: `crc32fast` alone;
//! - `update`: `wire::crc_copy::update` (CRC alone, this module's kernel
//!   from 1 KiB).
//!
//! The destination sits at offset 70 of its buffer, where an RDMA WRITE
//! payload starts in an IPv4 frame (14 + 20 + 8 + 12 + 16 bytes of
//! headers).
//!
//! `cargo bench -p benches --bench crc_copy`

use benches::{batch, min_median};
use std::hint::black_box;
use wire::crc_copy::{copy_and_update, copy_and_update_with, update, Kernel};

const ROUNDS: usize = 400;

fn main() {
    println!(
        "{ROUNDS} interleaved rounds; ns per buffer min / median (GB/s from the median); kernel {:?}",
        Kernel::best()
    );
    const CASES: [&str; 6] = [
        "fused",
        "fused-pclmul",
        "copy+crc",
        "memcpy",
        "crc",
        "update",
    ];
    print!("{:>6}", "bytes");
    for c in CASES {
        print!(" {c:>24}");
    }
    println!();
    for len in [
        64usize, 128, 256, 384, 512, 768, 1024, 2048, 4096, 4136, 65536,
    ] {
        let src: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ 0x5A)
            .collect();
        let mut frame = vec![0u8; len + 128];
        let at = 70;
        let n = 200_000 / (len / 64 + 10);
        let mut t: [Vec<f64>; 6] = Default::default();
        let base = crc32fast::Hasher::new();
        for _ in 0..ROUNDS {
            t[0].push(batch(n, || {
                let mut h = base.clone();
                copy_and_update(&mut h, black_box(&src), &mut frame[at..at + len]);
                black_box(h.finalize());
            }));
            t[1].push(batch(n, || {
                let mut h = base.clone();
                copy_and_update_with(
                    Kernel::Pclmul,
                    &mut h,
                    black_box(&src),
                    &mut frame[at..at + len],
                );
                black_box(h.finalize());
            }));
            t[2].push(batch(n, || {
                let mut h = base.clone();
                let dst = &mut frame[at..at + len];
                dst.copy_from_slice(black_box(&src));
                h.update(dst);
                black_box(h.finalize());
            }));
            t[3].push(batch(n, || {
                black_box(&mut frame[at..at + len]).copy_from_slice(black_box(&src));
            }));
            t[4].push(batch(n, || {
                let mut h = base.clone();
                h.update(black_box(&src));
                black_box(h.finalize());
            }));
            t[5].push(batch(n, || {
                let mut h = base.clone();
                update(&mut h, black_box(&src));
                black_box(h.finalize());
            }));
        }
        print!("{len:>6}");
        for v in t {
            let (min, med) = min_median(v);
            print!(" {min:>7.1} / {med:>7.1} ({:>5.1})", len as f64 / med);
        }
        println!();
    }
}
