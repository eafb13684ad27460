//! Big-endian field access on byte slices. Callers check lengths first (each
//! `new_checked` does), so these index directly.

// Each read takes its bytes as one sub-slice converted to an array: one
// bounds check and one (byte-swapped) load, where indexing byte by byte
// costs a check and a load per byte.

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array(b, at))
}

#[inline(always)]
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    let [x, y, z] = array(b, at);
    u32::from_be_bytes([0, x, y, z])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array(b, at))
}

#[inline(always)]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array(b, at))
}

/// `N` bytes of `b` from `at`; panics, as indexing does, when they are not
/// all there (every caller has checked the length first).
#[inline(always)]
pub(crate) fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    match b.get(at..at + N) {
        Some(s) => s.try_into().unwrap_or([0; N]),
        None => out_of_range(at + N, b.len()),
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn out_of_range(end: usize, len: usize) -> ! {
    panic!("range end index {end} out of range for slice of length {len}")
}

#[inline(always)]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// The Internet checksum (RFC 1071) over `data`, starting from `initial`
/// (a partial one's-complement sum, e.g. of a pseudo-header).
///
/// Returns a partial sum in `0..=0xFFFF` that is congruent modulo 0xFFFF to
/// `initial` plus the big-endian 16-bit words of `data` (a last odd byte
/// padded with zero), and zero only when that sum is zero: exactly what
/// `fold_checksum` needs. Two RFC 1071 (section 2) identities make it fast:
/// since 2^16 = 1 (mod 0xFFFF), 32-bit words give the same residue as
/// 16-bit ones (2(C), parallel summation), and the sum is byte-order
/// independent (2(B)), so the words are summed as they lie in memory and
/// only the folded result is swapped. The loop is then plain zero-extending
/// additions into a 64-bit accumulator, which the compiler vectorises and
/// which cannot overflow for any slice below 16 GiB.
pub(crate) fn ones_complement_sum(initial: u32, data: &[u8]) -> u32 {
    let mut acc = 0u64;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let mut halves = words.remainder().chunks_exact(2);
    for h in &mut halves {
        acc += u16::from_le_bytes([h[0], h[1]]) as u64;
    }
    if let [last] = halves.remainder() {
        acc += *last as u64;
    }
    // End-around carry: keeps the residue modulo 0xFFFF, and a non-zero
    // value stays non-zero (so does the byte swap).
    let swapped = (fold16(acc) as u16).swap_bytes();
    fold16(swapped as u64 + initial as u64) as u32
}

#[inline(always)]
fn fold16(mut acc: u64) -> u64 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc
}

pub(crate) fn fold_checksum(mut acc: u32) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071, word by word, as the reference.
    fn reference(mut acc: u32, data: &[u8]) -> u32 {
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            acc += u16::from_be_bytes([c[0], c[1]]) as u32;
            if acc > 0xFFFF_0000 {
                acc = (acc & 0xFFFF) + (acc >> 16);
            }
        }
        if let [last] = chunks.remainder() {
            acc += (*last as u32) << 8;
        }
        acc
    }

    #[test]
    fn ones_complement_sum_matches_rfc1071_word_by_word() {
        // A deterministic xorshift stream: lengths 0..=300 and a 9000-byte
        // slice, random, all-zero and all-ones data, several initial sums.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut data = vec![0u8; 9000];
        for round in 0..3 {
            for b in data.iter_mut() {
                *b = match round {
                    0 => next() as u8,
                    1 => 0,
                    _ => 0xFF,
                };
            }
            for len in (0..=300).chain([8999, 9000]) {
                for initial in [0, 1, 0xFFFF, 0x1_0000, next() as u32 & 0x0FFF_FFFF] {
                    for start in [0, 1] {
                        let d = &data[start..start + len.min(9000 - start)];
                        assert_eq!(
                            fold_checksum(ones_complement_sum(initial, d)),
                            fold_checksum(reference(initial, d)),
                            "round {round} len {len} initial {initial:#x} start {start}"
                        );
                    }
                }
            }
        }
    }
}
