//! The invariant CRC (RoCEv2 A17.4.3.1, IBA 7.8.1).
//!
//! The ICRC is a CRC-32 (the Ethernet/zlib polynomial, initial value and
//! final complement) over: 8 bytes of 0xFF standing for the LRH that RoCEv2
//! does not carry, then the IP header, the UDP header and the BTH with the
//! fields a router may change replaced by ones (IPv4 TOS, TTL and header
//! checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum;
//! BTH byte 4 with FECN, BECN and Resv6), then everything after the BTH up to
//! the ICRC itself. It is sent least-significant byte first.

use crate::crc_copy::SHORT_TABLE;
use crate::{bth, ipv4, ipv6, udp};
use std::sync::LazyLock;

/// Length of the ICRC at the end of every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;

/// IP version of the datagram the ICRC covers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpVersion {
    /// IPv4, a 20-byte header.
    V4,
    /// IPv6, a 40-byte fixed header.
    V6,
}

impl IpVersion {
    /// The IP header length: 20 bytes for IPv4, 40 for IPv6.
    pub const fn header_len(self) -> usize {
        match self {
            IpVersion::V4 => ipv4::HEADER_LEN,
            IpVersion::V6 => ipv6::HEADER_LEN,
        }
    }
}

/// How many bytes at the front of the datagram `compute` copies and masks:
/// at least the IP and UDP headers and the BTH through its byte 4 (the last
/// masked byte), at most the shortest datagram (IP, UDP and BTH headers),
/// and 16k + 8 bytes long (see `masked_prefix`).
const V4_PREFIX: usize = ipv4::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN; // 40
const V6_PREFIX: usize = ipv6::HEADER_LEN + udp::HEADER_LEN + 8; // 56
const _: () = {
    assert!(V4_PREFIX % 16 == 8 && V6_PREFIX % 16 == 8);
    assert!(V4_PREFIX > ipv4::HEADER_LEN + udp::HEADER_LEN + 4);
    assert!(V6_PREFIX > ipv6::HEADER_LEN + udp::HEADER_LEN + 4);
    assert!(V6_PREFIX <= ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN);
};

/// What `compute` needs besides the datagram, derived once from the header
/// modules' own `icrc_mask` functions (every one of them only sets bits, so
/// applying a mask is OR-ing in the mask applied to zeros).
struct Masks {
    /// A hasher in the CRC-32 state after the 8 bytes of ones that stand
    /// for the LRH, cloned for each ICRC (`crc32fast` detects the CPU's
    /// features each time a hasher is made).
    lrh_ones: crc32fast::Hasher,
    v4: [u8; V4_PREFIX],
    v6: [u8; V6_PREFIX],
    /// `crc_copy::fold_short`'s tables, one per IP version: the LRH ones
    /// and the CRC register's initial ones cancel in the first 4 bytes,
    /// so the message from a zero register is 4 bytes of ones, then the
    /// datagram with the mask OR-ed in.
    short_v4: [u8; SHORT_TABLE],
    short_v6: [u8; SHORT_TABLE],
}

/// `fold_short`'s table: 64 zeros, the 4 bytes of ones, the mask.
fn short_table(mask: &[u8]) -> [u8; SHORT_TABLE] {
    let mut t = [0u8; SHORT_TABLE];
    t[64..68].fill(0xFF);
    t[68..68 + mask.len()].copy_from_slice(mask);
    t
}

static MASKS: LazyLock<Masks> = LazyLock::new(|| {
    let mut v4 = [0u8; V4_PREFIX];
    ipv4::icrc_mask(&mut v4[..ipv4::HEADER_LEN]);
    udp::icrc_mask(&mut v4[ipv4::HEADER_LEN..]);
    bth::icrc_mask(&mut v4[ipv4::HEADER_LEN + udp::HEADER_LEN..]);
    let mut v6 = [0u8; V6_PREFIX];
    ipv6::icrc_mask(&mut v6[..ipv6::HEADER_LEN]);
    udp::icrc_mask(&mut v6[ipv6::HEADER_LEN..]);
    bth::icrc_mask(&mut v6[ipv6::HEADER_LEN + udp::HEADER_LEN..]);
    Masks {
        lrh_ones: crc32fast::Hasher::new_with_initial(crc32fast::hash(&[0xFF; 8])),
        short_v4: short_table(&v4),
        short_v6: short_table(&v6),
        v4,
        v6,
    }
});

/// The first `N` bytes of `datagram` with `mask` OR-ed in, `N` being 16k + 8.
///
/// Written in whole 16-byte blocks and one 8-byte tail, the very loads
/// `crc32fast` makes when it reads the copy back: a load that spans several
/// smaller stores cannot be forwarded from them and stalls until they reach
/// the cache, which costs more than the rest of the masking.
#[inline(always)]
fn masked_prefix<const N: usize>(datagram: &[u8], mask: &[u8; N]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    while at + 16 <= N {
        let mut block: [u8; 16] = datagram[at..at + 16].try_into().unwrap();
        for (b, m) in block.iter_mut().zip(&mask[at..at + 16]) {
            *b |= *m;
        }
        out[at..at + 16].copy_from_slice(&block);
        at += 16;
    }
    let tail = u64::from_ne_bytes(datagram[at..at + 8].try_into().unwrap())
        | u64::from_ne_bytes(mask[at..at + 8].try_into().unwrap());
    out[at..at + 8].copy_from_slice(&tail.to_ne_bytes());
    out
}

/// Fronts up to this long are covered by one CRC update: the masked
/// prefix and the rest copied together into one buffer. Each update has a
/// fixed cost (the final reduction) that a copy of this many bytes
/// undercuts: the headers of a frame being built (at most 96 bytes), whole
/// short datagrams being checked (ACKs, 64-byte WRITEs).
const ONE_UPDATE_MAX: usize = 128;

/// Feeds `front` (at least `N` bytes) to `h` with `mask` OR-ed into its
/// first `N` bytes.
#[inline(always)]
fn masked_update<const N: usize>(h: &mut crc32fast::Hasher, front: &[u8], mask: &[u8; N]) {
    if front.len() <= ONE_UPDATE_MAX {
        let mut buf = [0u8; ONE_UPDATE_MAX];
        buf[..N].copy_from_slice(&masked_prefix(front, mask));
        buf[N..front.len()].copy_from_slice(&front[N..]);
        h.update(&buf[..front.len()]);
    } else {
        h.update(&masked_prefix(front, mask));
        crate::crc_copy::update(h, &front[N..]);
    }
}

/// The ICRC of `datagram`: the IP header through the last payload/pad byte
/// (the ICRC itself excluded). `datagram` must hold the IP, UDP and BTH
/// headers.
///
/// Two CRC updates, each with a fixed cost in `crc32fast` (folding set-up
/// and final reduction): a masked copy of the headers, then the rest of
/// `datagram` in place; a datagram of at most `ONE_UPDATE_MAX` bytes is
/// copied whole and takes one. The LRH ones are a precomputed starting
/// state.
#[inline]
pub fn compute(version: IpVersion, datagram: &[u8]) -> u32 {
    Icrc::new(version, datagram).finish()
}

/// An ICRC computed front to back while a frame is written: the headers
/// first, then the payload as it is copied into the frame
/// (`copy`, one pass with `crate::crc_copy`), then the pad.
#[derive(Clone)]
pub struct Icrc {
    h: crc32fast::Hasher,
}

impl Icrc {
    /// Starts an ICRC with the front of a datagram: from the IP header on,
    /// at least through the BTH (the masked fields, A17.4.3.1, are all in
    /// the IP, UDP and BTH headers), e.g. all the headers before the
    /// payload.
    ///
    /// # Panics
    /// If `front` is shorter than the IP, UDP and BTH headers.
    #[inline]
    pub fn new(version: IpVersion, front: &[u8]) -> Icrc {
        // The documented precondition, checked in full: the masked copy
        // below reads only part of it, and a shorter IPv6 datagram must not
        // slip through.
        assert!(
            front.len() >= version.header_len() + udp::HEADER_LEN + bth::HEADER_LEN,
            "ICRC over a datagram shorter than its IP, UDP and BTH headers"
        );
        let masks = &*MASKS;
        let table = match version {
            IpVersion::V4 => &masks.short_v4,
            IpVersion::V6 => &masks.short_v6,
        };
        if let Some(v) = crate::crc_copy::fold_short(table, 4, front) {
            // V stands for the LRH ones and `front` (8 + len bytes)
            let mut h = crc32fast::Hasher::new_with_initial_len(!0, (front.len() + 8 - 16) as u64);
            h.update(&v);
            return Icrc { h };
        }
        let mut h = masks.lrh_ones.clone();
        match version {
            IpVersion::V4 => masked_update(&mut h, front, &masks.v4),
            IpVersion::V6 => masked_update(&mut h, front, &masks.v6),
        }
        Icrc { h }
    }

    /// Covers the next bytes of the datagram, already in place (the pad,
    /// say).
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        crate::crc_copy::update(&mut self.h, bytes);
    }

    /// Copies the next bytes of the datagram from `src` into `dst` (in the
    /// frame) and covers them, in one pass. Panics if the lengths differ.
    #[inline]
    pub fn copy(&mut self, src: &[u8], dst: &mut [u8]) {
        crate::crc_copy::copy_and_update(&mut self.h, src, dst);
    }

    /// `copy` from memory that others may write meanwhile: the ICRC covers
    /// exactly what lands in `dst`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `dst.len()` bytes and must not
    /// overlap `dst`.
    #[inline]
    pub unsafe fn copy_raw(&mut self, src: *const u8, dst: &mut [u8]) {
        // SAFETY: the caller guarantees `src` is readable for `dst.len()` bytes
        // and does not overlap `dst`.
        unsafe {
            crate::crc_copy::copy_and_update_raw(&mut self.h, src, dst);
        }
    }

    /// The ICRC of everything covered, to store with `write`.
    #[inline]
    pub fn finish(self) -> u32 {
        self.h.finalize()
    }
}

/// Reads the ICRC stored after `datagram`'s covered bytes (little-endian).
pub fn read(icrc_bytes: &[u8]) -> u32 {
    u32::from_le_bytes([icrc_bytes[0], icrc_bytes[1], icrc_bytes[2], icrc_bytes[3]])
}

/// Stores an ICRC in wire order.
pub fn write(icrc_bytes: &mut [u8], icrc: u32) {
    icrc_bytes[..ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, step by step: ones, masked headers, the rest.
    fn reference(version: IpVersion, datagram: &[u8]) -> u32 {
        let ip_len = version.header_len();
        let masked_len = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
        let mut m = datagram[..masked_len].to_vec();
        match version {
            IpVersion::V4 => ipv4::icrc_mask(&mut m[..ip_len]),
            IpVersion::V6 => ipv6::icrc_mask(&mut m[..ip_len]),
        }
        udp::icrc_mask(&mut m[ip_len..]);
        bth::icrc_mask(&mut m[ip_len + udp::HEADER_LEN..]);
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xFF; 8]);
        h.update(&m);
        h.update(&datagram[masked_len..]);
        h.finalize()
    }

    #[test]
    fn compute_matches_the_definition() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut data = vec![0u8; 400];
        for round in 0..40 {
            for b in data.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = match round {
                    0 => 0,
                    1 => 0xFF,
                    _ => x as u8,
                };
            }
            for v in [IpVersion::V4, IpVersion::V6] {
                let min = v.header_len() + udp::HEADER_LEN + bth::HEADER_LEN;
                for len in min..data.len() {
                    let d = &data[..len];
                    let want = reference(v, d);
                    assert_eq!(compute(v, d), want, "{v:?} len {len}");
                    // built front to back: headers, a copied payload, a pad
                    for split in [min, min + 1, (min + len) / 2, len] {
                        let split = split.min(len);
                        let pad = (len - split).min(3);
                        let mut icrc = Icrc::new(v, &d[..split]);
                        let mut copy = vec![0u8; len - split - pad];
                        icrc.copy(&d[split..len - pad], &mut copy);
                        assert!(copy == d[split..len - pad]);
                        icrc.update(&d[len - pad..]);
                        assert_eq!(icrc.finish(), want, "{v:?} len {len} split {split}");
                    }
                }
            }
        }
    }
}
