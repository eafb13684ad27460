//! Copy and CRC-32 in one pass: `dst` gets `src`'s bytes while they are
//! folded into a running CRC-32, so a payload copied into a frame is not
//! read a second time for the ICRC.
//!
//! The CRC is the one the ICRC uses (RoCEv2 A17.4.3.1: IEEE 802.3 CRC-32,
//! polynomial 0x04C11DB7, bit-reflected, as `crc32fast` computes it); the
//! running state is a `crc32fast::Hasher`, so a caller mixes fused and plain
//! updates freely.
//!
//! The kernels fold with carry-less multiplication, after Intel's white
//! paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
//! Instruction" (Gopal et al., 2009), written here from the method:
//!
//! - In the bit-reflected domain a 16-byte block loaded little-endian holds
//!   the coefficients of x^127 (bit 0) down to x^0 (bit 127); its first
//!   8 bytes are the high half H, the last 8 the low half L.
//! - A block A followed by N more bits of message contributes
//!   A·x^N = H·x^(N+64) + L·x^N, which modulo P is congruent to
//!   H·(x^(N+64) mod P) + L·(x^N mod P): two 64×32-bit carry-less products
//!   that fit in 128 bits and are XOR-ed into the block N bits later.
//! - A carry-less product of two reflected 64-bit values comes out one bit
//!   short of a reflected 128-bit value (it is U·C·x), so the constants are
//!   x^(N+63) mod P and x^(N-1) mod P, reflected into 64 bits
//!   (`fold_consts`, checked against a bit-at-a-time CRC in the tests).
//! - The running register is XOR-ed into the first 4 bytes (the CRC is
//!   linear); once the bulk is folded down to one 16-byte value V, which is
//!   congruent to everything before it, the CRC so far is the CRC of V's
//!   16 bytes from a zero register, and `crc32fast` finishes V and the
//!   last < 16 bytes. No Barrett reduction is needed here.
//!
//! A short message (`fold_short`, at most 256 bytes: a frame's headers,
//! a small datagram) is laid out from the front of a multiple of 64 bytes
//! instead, zeros before it (leading zeros change no CRC from a zero
//! register), loaded straight into four lanes with masked loads and
//! folded there: no staging copy, and the blocks fold four at a time.
//!
//! Every bulk byte is loaded once and that register is both stored to
//! `dst` and folded; the tail is copied first and its CRC taken from `dst`.
//! So the CRC always covers the bytes that landed in `dst`, even if the
//! source changes during the copy (registered memory behaves like DMA).
//!
//! Length: About 230 of its lines are tests; the SIMD kernels stay beside the
//! portable path they must agree with.

use core::sync::atomic::{AtomicU8, Ordering};
use crc32fast::Hasher;

/// The CRC-32 polynomial without its x^32 term, normal (not reflected)
/// form: IEEE 802.3, the one the ICRC uses.
const POLY: u32 = 0x04C1_1DB7;

/// x^e mod P, normal form (bit i is the coefficient of x^i).
const fn xpow_mod(e: u32) -> u32 {
    let mut r: u32 = 1;
    let mut i = 0;
    while i < e {
        let top = r & 0x8000_0000 != 0;
        r <<= 1;
        if top {
            r ^= POLY;
        }
        i += 1;
    }
    r
}

/// The pair of 64-bit constants that folds a 16-byte block forward by
/// `bits`: [for the block's first 8 bytes, for its last 8] (module docs).
const fn fold_consts(bits: u32) -> [u64; 2] {
    [
        (xpow_mod(bits + 63) as u64).reverse_bits(),
        (xpow_mod(bits - 1) as u64).reverse_bits(),
    ]
}

const K128: [u64; 2] = fold_consts(128);
const K256: [u64; 2] = fold_consts(256);
const K384: [u64; 2] = fold_consts(384);
const K512: [u64; 2] = fold_consts(512);
const K2048: [u64; 2] = fold_consts(2048);
const K8192: [u64; 2] = fold_consts(8192);

/// Which implementation `copy_and_update_with` runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kernel {
    /// `copy_from_slice`, then `crc32fast` over the copy (two passes).
    Portable,
    /// 128-bit PCLMULQDQ, four 16-byte lanes (64 bytes a step).
    Pclmul,
    /// AVX-512 VPCLMULQDQ, four 64-byte lanes (256 bytes a step).
    Avx512,
}

impl Kernel {
    /// Every kernel, available on this CPU or not.
    pub const ALL: [Kernel; 3] = [Kernel::Portable, Kernel::Pclmul, Kernel::Avx512];

    /// Whether this CPU runs the kernel.
    pub fn available(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Pclmul => {
                is_x86_feature_detected!("pclmulqdq") && is_x86_feature_detected!("sse2")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("vpclmulqdq")
                    && Kernel::Pclmul.available()
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest kernel this CPU runs (detected once).
    #[inline]
    pub fn best() -> Kernel {
        match BEST.load(Ordering::Relaxed) {
            1 => Kernel::Portable,
            2 => Kernel::Pclmul,
            3 => Kernel::Avx512,
            _ => {
                let k = if Kernel::Avx512.available() {
                    Kernel::Avx512
                } else if Kernel::Pclmul.available() {
                    Kernel::Pclmul
                } else {
                    Kernel::Portable
                };
                BEST.store(k as u8 + 1, Ordering::Relaxed);
                k
            }
        }
    }
}

/// `Kernel::best()` once known, as `Kernel as u8 + 1`; 0: not yet.
static BEST: AtomicU8 = AtomicU8::new(0);

/// Shortest input the folding kernels take: below it, copy and `crc32fast`
/// are as fast (`crc_copy` bench: on an AVX-512 CPU the fused kernel
/// overtakes copy + `crc32fast` at about 256 bytes; crc32fast itself uses
/// AVX-512 there, so the AVX-512 kernel does not hand shorter inputs to the
/// 128-bit one).
const PCLMUL_MIN: usize = 64;
const AVX512_MIN: usize = 256;
/// From here the AVX-512 kernel runs sixteen lanes (1 KiB a step).
const WIDE_MIN: usize = 1024;
/// Shortest input `update` hands to the AVX-512 kernel: below it
/// `crc32fast` (AVX-512 as well, four lanes) is as fast (`crc` bench).
const UPDATE_MIN: usize = 1024;

/// Feeds `data` to `crc`, as `crc.update(data)` does, with this module's
/// kernel when that is faster (inputs of 1 KiB and more on an AVX-512
/// CPU: sixteen lanes in flight where `crc32fast` keeps four).
#[inline]
pub fn update(crc: &mut Hasher, data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= UPDATE_MIN && Kernel::best() == Kernel::Avx512 {
        let raw = !crc.clone().finalize();
        // SAFETY: the kernel is available; it reads `data.len()` bytes of
        // `data` and writes nothing (no copy: `dst` unused).
        let (v, done) = unsafe {
            x86::bulk_avx512::<false>(raw, data.as_ptr(), core::ptr::null_mut(), data.len())
        };
        finish(crc, v, done, &data[done..]);
        return;
    }
    crc.update(data);
}

/// Longest message (lead and data) [`fold_short`] takes.
pub const SHORT_MAX: usize = 256;
/// Length of [`fold_short`]'s table.
pub const SHORT_TABLE: usize = 192;

/// Whether `fold_short` runs here (AVX-512BW and VPCLMULQDQ; detected
/// once): 0 not yet known, 1 no, 2 yes.
static SHORT: AtomicU8 = AtomicU8::new(0);

fn short_available() -> bool {
    match SHORT.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            #[cfg(target_arch = "x86_64")]
            let yes = Kernel::Avx512.available() && is_x86_feature_detected!("avx512bw");
            #[cfg(not(target_arch = "x86_64"))]
            let yes = false;
            SHORT.store(1 + yes as u8, Ordering::Relaxed);
            yes
        }
    }
}

/// A short message folded to V in registers, the CRC-32 register starting
/// at zero: the message is `table[64..64 + lead]` followed by `data`, with
/// `table[64 + lead..]` OR-ed into `data` from its start (a mask over the
/// message's first 64 bytes: `table[128..]` must be zero). `table`'s
/// first 64 bytes must be zero. Returns V, whose CRC from a zero register
/// is the message's (module docs), or `None` when this CPU lacks the
/// kernel or the message is longer than [`SHORT_MAX`] (or `lead` over 64,
/// or `data` empty): one pass with no staging copy, where `crc32fast`
/// folds a short input one 16-byte block after another.
#[inline]
pub fn fold_short(table: &[u8; SHORT_TABLE], lead: usize, data: &[u8]) -> Option<[u8; 16]> {
    if data.is_empty() || lead > 64 || lead + data.len() > SHORT_MAX || !short_available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the features were detected and the lengths checked above.
        Some(unsafe { x86::fold_short(table, lead, data) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The CRC of everything before `done` is the CRC of V from a zero
/// register (module docs; crc32fast's state is the complement of the
/// register); V and the tail (under 16 bytes) go to crc32fast in one
/// update.
#[inline]
fn finish(crc: &mut Hasher, v: [u8; 16], done: usize, tail: &[u8]) {
    let mut last = [0u8; 32];
    last[..16].copy_from_slice(&v);
    last[16..16 + tail.len()].copy_from_slice(tail);
    let mut h = Hasher::new_with_initial_len(!0, crc.total_len() + done as u64 - 16);
    h.update(&last[..16 + tail.len()]);
    *crc = h;
}

/// Copies `src` into `dst` and feeds the same bytes to `crc`, as
/// `dst.copy_from_slice(src); crc.update(dst)` does, in one pass.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice`).
#[inline]
pub fn copy_and_update(crc: &mut Hasher, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "copy_and_update: lengths differ");
    // SAFETY: `src` is a slice of `dst.len()` bytes, and cannot overlap
    // `dst` (a `&mut`).
    unsafe { run(Kernel::best(), crc, src.as_ptr(), dst) }
}

/// `copy_and_update` with a chosen kernel, one this CPU runs (else the
/// portable one runs).
pub fn copy_and_update_with(kernel: Kernel, crc: &mut Hasher, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "copy_and_update: lengths differ");
    // SAFETY: `src` is a slice of `dst.len()` bytes, and cannot overlap
    // `dst` (a `&mut`).
    unsafe { copy_and_update_raw_with(kernel, crc, src.as_ptr(), dst) }
}

/// `copy_and_update` from a raw source, for memory that other parties may
/// write meanwhile (shared, DMA-like registered memory): the CRC covers
/// exactly the bytes stored into `dst`.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes and must not overlap
/// `dst`.
#[inline]
pub unsafe fn copy_and_update_raw(crc: &mut Hasher, src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller guarantees `src` is readable for `dst.len()` bytes and
    // does not overlap `dst`, which is `run`'s contract.
    unsafe { run(Kernel::best(), crc, src, dst) }
}

/// `copy_and_update_raw` with a chosen kernel (see `copy_and_update_with`).
///
/// # Safety
/// As `copy_and_update_raw`.
pub unsafe fn copy_and_update_raw_with(
    kernel: Kernel,
    crc: &mut Hasher,
    src: *const u8,
    dst: &mut [u8],
) {
    // SAFETY: `kernel` is available here (checked above) and the caller
    // guarantees `run`'s contract for `src` and `dst`.
    unsafe {
        let kernel = if kernel.available() {
            kernel
        } else {
            Kernel::Portable
        };
        run(kernel, crc, src, dst)
    }
}

/// The dispatch, `kernel` known to run here.
///
/// # Safety
/// As `copy_and_update_raw`.
#[inline]
unsafe fn run(kernel: Kernel, crc: &mut Hasher, src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller guarantees `src` is readable for `len` bytes and does
    // not overlap `dst`; the kernels run only when `kernel` is available (the
    // callers check), which is what their target features need.
    unsafe {
        let len = dst.len();
        #[cfg(target_arch = "x86_64")]
        {
            let bulk = match kernel {
                Kernel::Avx512 if len >= AVX512_MIN => {
                    let raw = !crc.clone().finalize();
                    Some(x86::bulk_avx512::<true>(raw, src, dst.as_mut_ptr(), len))
                }
                Kernel::Pclmul if len >= PCLMUL_MIN => {
                    let raw = !crc.clone().finalize();
                    Some(x86::bulk_pclmul(raw, src, dst.as_mut_ptr(), len))
                }
                _ => None,
            };
            if let Some((v, done)) = bulk {
                let tail = &mut dst[done..];
                core::ptr::copy_nonoverlapping(src.add(done), tail.as_mut_ptr(), tail.len());
                finish(crc, v, done, tail);
                return;
            }
        }
        let _ = kernel;
        core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), len);
        crc.update(dst);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{K128, K2048, K256, K384, K512, K8192, WIDE_MIN};
    use core::arch::x86_64::*;

    /// A fold-constant pair as a 128-bit lane (first constant in the low
    /// quadword, the one that multiplies a block's first 8 bytes).
    #[inline(always)]
    fn lane(k: [u64; 2]) -> (i64, i64) {
        (k[0] as i64, k[1] as i64)
    }

    /// `x` folded forward by the distance of `k`, XOR-ed into `next`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold128(x: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let hi = _mm_clmulepi64_si128::<0x00>(x, k);
        let lo = _mm_clmulepi64_si128::<0x11>(x, k);
        _mm_xor_si128(_mm_xor_si128(hi, lo), next)
    }

    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold512(x: __m512i, k: __m512i, next: __m512i) -> __m512i {
        let hi = _mm512_clmulepi64_epi128::<0x00>(x, k);
        let lo = _mm512_clmulepi64_epi128::<0x11>(x, k);
        // 0x96: the three-way XOR
        _mm512_ternarylogic_epi64::<0x96>(hi, lo, next)
    }

    /// Loads 16 bytes at `src + at` and, when `COPY`, stores them at
    /// `dst + at`.
    ///
    /// # Safety
    /// `src + at` readable and, when `COPY`, `dst + at` writable for 16
    /// bytes; SSE2 present.
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn copy16<const COPY: bool>(src: *const u8, dst: *mut u8, at: usize) -> __m128i {
        // SAFETY: the caller guarantees `src + at` readable and, when `COPY`,
        // `dst + at` writable for 16 bytes; unaligned loads and stores.
        unsafe {
            let v = _mm_loadu_si128(src.add(at) as *const __m128i);
            if COPY {
                _mm_storeu_si128(dst.add(at) as *mut __m128i, v);
            }
            v
        }
    }

    /// `N` 64-byte blocks from `src + at`, all loads first, then (when
    /// `COPY`) all stores: the loads need not wait for the stores'
    /// addresses.
    ///
    /// # Safety
    /// `src + at` readable and, when `COPY`, `dst + at` writable for `N` ×
    /// 64 bytes; AVX-512F present.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn copy64s<const N: usize, const COPY: bool>(
        src: *const u8,
        dst: *mut u8,
        at: usize,
    ) -> [__m512i; N] {
        // SAFETY: the caller guarantees `src + at` readable and, when `COPY`,
        // `dst + at` writable for `N` × 64 bytes; unaligned loads and stores.
        unsafe {
            let s = src.add(at) as *const __m512i;
            let mut v = [_mm512_setzero_si512(); N];
            for (i, v) in v.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(s.add(i));
            }
            if COPY {
                let d = dst.add(at) as *mut __m512i;
                for (i, v) in v.iter().enumerate() {
                    _mm512_storeu_si512(d.add(i), *v);
                }
            }
            v
        }
    }

    /// Folds whole 16-byte blocks from `at` on into `x`; returns V and
    /// where the blocks end.
    ///
    /// # Safety
    /// `src` readable and, when `COPY`, `dst` writable for `len` bytes;
    /// PCLMULQDQ present.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    unsafe fn finish_blocks<const COPY: bool>(
        mut x: __m128i,
        src: *const u8,
        dst: *mut u8,
        mut at: usize,
        len: usize,
    ) -> ([u8; 16], usize) {
        // SAFETY: the caller guarantees `src` readable and, when `COPY`, `dst`
        // writable up to `len`; every block read or written ends at or before
        // `len`.
        unsafe {
            let (a, b) = lane(K128);
            let k128 = _mm_set_epi64x(b, a);
            while at + 16 <= len {
                x = fold128(x, k128, copy16::<COPY>(src, dst, at));
                at += 16;
            }
            let mut v = [0u8; 16];
            _mm_storeu_si128(v.as_mut_ptr() as *mut __m128i, x);
            (v, at)
        }
    }

    /// Copies and folds the first whole 16-byte blocks of `len` bytes
    /// (at least 64), starting from register `raw`; returns V and the
    /// number of bytes done (the rest is under 16).
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `len` bytes; PCLMULQDQ present.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn bulk_pclmul(
        raw: u32,
        src: *const u8,
        dst: *mut u8,
        len: usize,
    ) -> ([u8; 16], usize) {
        // SAFETY: the caller guarantees `src` readable and `dst` writable for
        // `len` bytes (at least 64); every load and store below ends at or
        // before `len`.
        unsafe {
            debug_assert!(len >= super::PCLMUL_MIN);
            let (a, b) = lane(K512);
            let k512 = _mm_set_epi64x(b, a);
            let (a, b) = lane(K128);
            let k128 = _mm_set_epi64x(b, a);
            let mut x0 = _mm_xor_si128(copy16::<true>(src, dst, 0), _mm_cvtsi32_si128(raw as i32));
            let mut x1 = copy16::<true>(src, dst, 16);
            let mut x2 = copy16::<true>(src, dst, 32);
            let mut x3 = copy16::<true>(src, dst, 48);
            let mut at = 64;
            while at + 64 <= len {
                // four loads, then four stores (as in `copy64s`)
                let s = src.add(at) as *const __m128i;
                let d = dst.add(at) as *mut __m128i;
                let v = [
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                ];
                for (i, v) in v.iter().enumerate() {
                    _mm_storeu_si128(d.add(i), *v);
                }
                x0 = fold128(x0, k512, v[0]);
                x1 = fold128(x1, k512, v[1]);
                x2 = fold128(x2, k512, v[2]);
                x3 = fold128(x3, k512, v[3]);
                at += 64;
            }
            let x = fold128(x0, k128, x1);
            let x = fold128(x, k128, x2);
            let x = fold128(x, k128, x3);
            finish_blocks::<true>(x, src, dst, at, len)
        }
    }

    /// `bulk_pclmul` 256 bytes a step (`len` at least 256); without
    /// `COPY`, only the CRC (`dst` unused), 1 KiB a step while at least
    /// 1 KiB is left.
    ///
    /// For the CRC alone, sixteen 64-byte lanes keep more carry-less
    /// multiplies in flight than four (`crc_copy` bench, 4 KiB: 85 ns
    /// against crc32fast's 92 with four lanes). The sixteen are then
    /// folded onto four (lane i of a 256-byte group holds blocks i, i + 4,
    /// i + 8, i + 12 of the last 1 KiB) and the 256-byte loop goes on
    /// from there. With the copy, sixteen lanes are no faster than four
    /// (88 against 86 ns at 4 KiB), so the copy keeps four.
    ///
    /// # Safety
    /// As `bulk_pclmul`, `dst` only when `COPY`; AVX-512F and VPCLMULQDQ
    /// present.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse2")]
    pub(super) unsafe fn bulk_avx512<const COPY: bool>(
        raw: u32,
        src: *const u8,
        dst: *mut u8,
        len: usize,
    ) -> ([u8; 16], usize) {
        // SAFETY: the caller guarantees `src` readable and, when `COPY`, `dst`
        // writable for `len` bytes (at least 256); every load and store below
        // ends at or before `len`.
        unsafe {
            debug_assert!(len >= super::AVX512_MIN);
            let (a, b) = lane(K2048);
            let k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(b, a));
            let (a, b) = lane(K512);
            let k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(b, a));
            let init = _mm512_zextsi128_si512(_mm_cvtsi32_si128(raw as i32));
            let mut z: [__m512i; 4];
            let mut at;
            if !COPY && len >= WIDE_MIN {
                let (a, b) = lane(K8192);
                let k8192 = _mm512_broadcast_i32x4(_mm_set_epi64x(b, a));
                let mut w = [_mm512_setzero_si512(); 16];
                for g in 0..4 {
                    let d = copy64s::<4, COPY>(src, dst, 256 * g);
                    w[4 * g..4 * g + 4].copy_from_slice(&d);
                }
                w[0] = _mm512_xor_si512(w[0], init);
                at = 1024;
                while at + 1024 <= len {
                    // four groups of four loads (and stores, were this path
                    // taken with `COPY`: sixteen registers held for their
                    // stores would spill)
                    for g in 0..4 {
                        let d = copy64s::<4, COPY>(src, dst, at + 256 * g);
                        for (w, d) in w[4 * g..4 * g + 4].iter_mut().zip(d) {
                            *w = fold512(*w, k8192, d);
                        }
                    }
                    at += 1024;
                }
                z = [w[0], w[1], w[2], w[3]];
                for j in 1..4 {
                    for (i, z) in z.iter_mut().enumerate() {
                        *z = fold512(*z, k2048, w[4 * j + i]);
                    }
                }
            } else {
                z = copy64s::<4, COPY>(src, dst, 0);
                z[0] = _mm512_xor_si512(z[0], init);
                at = 256;
            }
            while at + 256 <= len {
                let d = copy64s::<4, COPY>(src, dst, at);
                for (z, d) in z.iter_mut().zip(d) {
                    *z = fold512(*z, k2048, d);
                }
                at += 256;
            }
            let [z0, z1, z2, z3] = z;
            let z = fold512(z0, k512, z1);
            let z = fold512(z, k512, z2);
            let mut z = fold512(z, k512, z3);
            while at + 64 <= len {
                let [d] = copy64s::<1, COPY>(src, dst, at);
                z = fold512(z, k512, d);
                at += 64;
            }
            finish_blocks::<COPY>(onto_last_lane(z), src, dst, at, len)
        }
    }

    /// The four 16-byte lanes of `z` folded onto the last: by 384, 256
    /// and 128 bits, XOR-ed together.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq,sse2")]
    fn onto_last_lane(z: __m512i) -> __m128i {
        let (a3, b3) = lane(K384);
        let (a2, b2) = lane(K256);
        let (a1, b1) = lane(K128);
        let k = _mm512_set_epi64(0, 0, b1, a1, b2, a2, b3, a3);
        let p = _mm512_xor_si512(
            _mm512_clmulepi64_epi128::<0x00>(z, k),
            _mm512_clmulepi64_epi128::<0x11>(z, k),
        );
        _mm_xor_si128(
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<0>(p),
                _mm512_extracti32x4_epi32::<1>(p),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(p),
                _mm512_extracti32x4_epi32::<3>(z),
            ),
        )
    }

    /// `super::fold_short` on this CPU: the message laid out from the
    /// front of a multiple of 64 bytes, zeros before it (which change no
    /// CRC from a zero register), each 64-byte block a masked load of
    /// `data` (the mask keeps out every byte before `data`, which is
    /// neither read nor faulted on) OR-ed with the table's lead and
    /// mask bytes, folded as `bulk_avx512`'s last loop does.
    ///
    /// # Safety
    /// AVX-512F, AVX-512BW and VPCLMULQDQ present; `lead + data.len()`
    /// at most `SHORT_MAX`, `lead` at most 64, and `data` not empty.
    #[target_feature(enable = "avx512f,avx512bw,vpclmulqdq,sse2")]
    pub(super) unsafe fn fold_short(
        table: &[u8; super::SHORT_TABLE],
        lead: usize,
        data: &[u8],
    ) -> [u8; 16] {
        // SAFETY: every unmasked byte a load below reads is inside `data`
        // (block j holds message bytes 64j - pad .. 64j + 64 - pad, the
        // message ends where `data` does, and the mask drops the bytes
        // before `data`'s start); the table loads stay inside its
        // SHORT_TABLE bytes (64 + 64 × 1 - pad + 64 <= 192); the caller
        // guarantees the CPU features. The table's mask covers the
        // message's first 64 bytes, which lie in blocks 0 and 1.
        unsafe {
            let total = lead + data.len();
            let n = total.div_ceil(64) * 64;
            let pad = n - total;
            let (a, b) = lane(K512);
            let k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(b, a));
            let mut z = _mm512_setzero_si512();
            for j in 0..n / 64 {
                // bytes of this block before `data` starts
                let before = (pad + lead).saturating_sub(64 * j);
                let keep: u64 = if before >= 64 { 0 } else { !0 << before };
                let from = data.as_ptr().wrapping_add(64 * j).wrapping_sub(pad + lead);
                let mut block = _mm512_maskz_loadu_epi8(keep, from as *const i8);
                if j < 2 {
                    let t = table.as_ptr().add(64 + 64 * j - pad);
                    block = _mm512_or_si512(block, _mm512_loadu_si512(t as *const __m512i));
                }
                z = if j == 0 {
                    block
                } else {
                    fold512(z, k512, block)
                };
            }
            let mut v = [0u8; 16];
            _mm_storeu_si128(v.as_mut_ptr() as *mut __m128i, onto_last_lane(z));
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC register after `data` from register `raw`, one bit at a
    /// time (reflected, polynomial 0xEDB88320 = 0x04C11DB7 reversed).
    fn bitwise(mut raw: u32, data: &[u8]) -> u32 {
        for &b in data {
            raw ^= b as u32;
            for _ in 0..8 {
                raw = if raw & 1 != 0 {
                    (raw >> 1) ^ POLY.reverse_bits()
                } else {
                    raw >> 1
                };
            }
        }
        raw
    }

    /// `fold_short` against the definition: every lead up to 8 bytes and
    /// every length, a mask over the first bytes, random contents.
    #[test]
    fn fold_short_folds_lead_masked_data() {
        if !short_available() {
            eprintln!("fold_short_folds_lead_masked_data: no AVX-512BW + VPCLMULQDQ here, fold_short returns None");
            assert!(fold_short(&[0; SHORT_TABLE], 4, &[1; 64]).is_none());
            return;
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        for lead in 0..=8usize {
            for mask_len in [0usize, 40, 56 - lead, 64 - lead] {
                let mut table = [0u8; SHORT_TABLE];
                for b in &mut table[64..64 + lead + mask_len] {
                    *b = next();
                }
                for len in 1..=SHORT_MAX - lead {
                    let data: Vec<u8> = (0..len).map(|_| next()).collect();
                    let mut message = table[64..64 + lead].to_vec();
                    message.extend(data.iter().enumerate().map(|(i, &d)| {
                        d | if lead + i < 64 {
                            table[64 + lead + i]
                        } else {
                            0
                        }
                    }));
                    let v = fold_short(&table, lead, &data).expect("available");
                    assert_eq!(
                        bitwise(0, &v),
                        bitwise(0, &message),
                        "lead {lead} mask {mask_len} len {len}"
                    );
                }
            }
        }
        assert!(fold_short(&[0; SHORT_TABLE], 4, &[1; SHORT_MAX - 3]).is_none());
        assert!(fold_short(&[0; SHORT_TABLE], 4, &[]).is_none());
    }

    #[test]
    fn xpow_mod_is_the_crc_of_a_one_bit() {
        // x^e mod P for e < 32 is x^e itself; x^32 mod P is P's low part.
        assert_eq!(xpow_mod(0), 1);
        assert_eq!(xpow_mod(31), 1 << 31);
        assert_eq!(xpow_mod(32), POLY);
        // A message that is a single 1 at the front, followed by k zero
        // bits, from a zero register, has the CRC (x^(k+32) mod P),
        // reflected: the definition the constants rest on.
        for bytes in 1..40usize {
            let mut m = vec![0u8; bytes];
            m[0] = 1; // bit 0 of byte 0: the highest coefficient
            let k = (bytes * 8 - 1) as u32;
            assert_eq!(
                bitwise(0, &m),
                xpow_mod(k + 32).reverse_bits(),
                "{bytes} bytes"
            );
        }
    }

    /// Folding a block by hand with the constants gives the CRC: a
    /// 16-byte block A then N/8 zero bytes has the same CRC as the
    /// 16 bytes of fold(A) (the two products XOR-ed), from a zero register.
    #[test]
    fn the_fold_constants_fold() {
        fn clmul(a: u64, b: u64) -> u128 {
            (0..64)
                .filter(|i| b >> i & 1 != 0)
                .fold(0u128, |acc, i| acc ^ ((a as u128) << i))
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for bits in [128u32, 256, 384, 512, 2048, 8192] {
            let k = fold_consts(bits);
            for _ in 0..20 {
                let mut a = [0u8; 16];
                for b in a.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                let hi = u64::from_le_bytes(a[..8].try_into().unwrap());
                let lo = u64::from_le_bytes(a[8..].try_into().unwrap());
                let folded = (clmul(hi, k[0]) ^ clmul(lo, k[1])).to_le_bytes();
                let mut m = a.to_vec();
                // A, then `bits` zero bits: the last 16 bytes are where the
                // folded block lands.
                m.resize(16 + bits as usize / 8, 0);
                assert_eq!(bitwise(0, &m), bitwise(0, &folded), "fold by {bits}");
            }
        }
    }

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_kernel_matches_copy_and_crc32fast() {
        for kernel in Kernel::ALL {
            if !kernel.available() {
                eprintln!("SKIPPED: kernel {kernel:?} is not available on this CPU");
                continue;
            }
            for len in (0..1200).chain([4095, 4096, 4097, 65536 + 13]) {
                let src = pattern(len + 7, len as u64);
                for (s_off, d_off) in [(0, 0), (3, 5), (7, 1)] {
                    let src = &src[s_off..s_off + len];
                    let mut dst = vec![0xA5u8; len + 8];
                    let init = 0x1234_5678u32 ^ len as u32;
                    let mut h = Hasher::new_with_initial(init);
                    copy_and_update_with(kernel, &mut h, src, &mut dst[d_off..d_off + len]);
                    let mut want = Hasher::new_with_initial(init);
                    want.update(src);
                    assert_eq!(
                        h.clone().finalize(),
                        want.finalize(),
                        "{kernel:?} len {len} offsets {s_off}/{d_off}"
                    );
                    assert!(
                        dst[d_off..d_off + len] == *src,
                        "{kernel:?} len {len} bytes"
                    );
                    assert!(dst[..d_off]
                        .iter()
                        .chain(&dst[d_off + len..])
                        .all(|&b| b == 0xA5));
                    assert_eq!(h.total_len(), len as u64);
                    // and it agrees with the bit-at-a-time definition
                    if len < 300 {
                        assert_eq!(!h.finalize(), bitwise(!init, src), "{kernel:?} len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn update_matches_crc32fast() {
        for len in (0..1300).chain([2047, 2048, 2049, 4095, 4096, 4112, 4136, 8191, 65536 + 13]) {
            let data = pattern(len + 3, len as u64 ^ 0x77);
            for off in [0, 3] {
                let data = &data[off..off + len];
                let init = 0x8765_4321u32 ^ len as u32;
                let mut h = Hasher::new_with_initial_len(init, 5);
                update(&mut h, data);
                let mut want = Hasher::new_with_initial_len(init, 5);
                want.update(data);
                assert_eq!(h.total_len(), want.total_len(), "len {len}");
                assert_eq!(h.finalize(), want.finalize(), "len {len} offset {off}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Random lengths, starting registers and alignments, the input cut
        /// into pieces (a gather over several buffers), each kernel: the
        /// bytes `copy_from_slice` gives and the CRC `crc32fast` gives.
        #[test]
        fn pieces_match_copy_and_crc32fast(
            len in 0usize..10000,
            init: u32,
            s_off in 0usize..64,
            d_off in 0usize..64,
            cuts in proptest::collection::vec(0usize..10000, 0..5),
            seed: u64,
        ) {
            let src = pattern(len + s_off, seed);
            let src = &src[s_off..];
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (len + 1)).collect();
            cuts.push(0);
            cuts.push(len);
            cuts.sort_unstable();
            let mut want = Hasher::new_with_initial(init);
            want.update(src);
            let want = want.finalize();
            for kernel in Kernel::ALL.into_iter().filter(|k| k.available()) {
                let mut dst = vec![0x3Cu8; len + d_off];
                let mut h = Hasher::new_with_initial(init);
                for w in cuts.windows(2) {
                    copy_and_update_with(
                        kernel,
                        &mut h,
                        &src[w[0]..w[1]],
                        &mut dst[d_off + w[0]..d_off + w[1]],
                    );
                }
                proptest::prop_assert_eq!(h.total_len(), len as u64);
                proptest::prop_assert_eq!(h.finalize(), want, "{:?} cuts {:?}", kernel, cuts);
                let bad = dst[d_off..].iter().zip(src).position(|(a, b)| a != b);
                proptest::prop_assert!(bad.is_none(), "{:?}: first differing byte {:?}", kernel, bad);
                proptest::prop_assert!(dst[..d_off].iter().all(|&b| b == 0x3C));
            }
        }
    }
}
