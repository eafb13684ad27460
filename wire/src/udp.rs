//! UDP (RFC 768) with the RoCEv2 destination port and source-port rule.

use crate::bytes::{be16, fold_checksum, ones_complement_sum, put16};
use crate::error::{need, Error, Layer, Result};
use std::net::{Ipv4Addr, Ipv6Addr};

pub(crate) mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LEN: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header in bytes.
pub const HEADER_LEN: usize = 8;
/// RoCEv2 A17.2.2: the IANA-assigned destination port.
pub const ROCEV2_PORT: u16 = 4791;

/// A zero-copy view of a UDP header.
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` without checks; the accessors then panic on a buffer
    /// shorter than [`HEADER_LEN`]. Use [`Self::new_checked`] on untrusted input.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Validates the header length and that the UDP length equals the IP
    /// payload length (the buffer is exactly the IP payload).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        need(Layer::Udp, b, HEADER_LEN)?;
        let len = p.len() as usize;
        if len != b.len() {
            return Err(Error::UdpBadLength {
                udp: len,
                ip: b.len(),
            });
        }
        Ok(p)
    }

    /// Source port; RoCEv2 uses it for flow entropy ([`rdma_udp_sport`]).
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port ([`ROCEV2_PORT`] for RoCEv2).
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field: header and payload, in bytes.
    #[inline(always)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LEN)
    }
    /// True when the datagram carries no payload.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    /// Checksum as carried; 0 means none was computed (RFC 768).
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The bytes after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// The parsed form of a UDP header. The length is derived on emit; the
/// checksum is written as zero here and filled in by whoever knows the
/// pseudo-header (`RoceRepr::emit`, by its `UdpChecksum` policy).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads the ports of a checked header.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> UdpRepr {
        UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        }
    }

    /// Writes the 8-byte header for a payload of `payload_len` bytes, with a
    /// zero checksum; `buf` must hold at least [`HEADER_LEN`] bytes.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        put16(buf, field::SRC_PORT, self.src_port);
        put16(buf, field::DST_PORT, self.dst_port);
        put16(buf, field::LEN, (HEADER_LEN + payload_len) as u16);
        put16(buf, field::CHECKSUM, 0);
    }
}

/// Writes a checksum into an emitted UDP header.
pub(crate) fn set_checksum(header: &mut [u8], checksum: u16) {
    put16(header, field::CHECKSUM, checksum);
}

/// The UDP checksum of `datagram` (header and payload, checksum field
/// included as it stands) over an IPv4 pseudo-header. A result of 0 is sent
/// as 0xFFFF (RFC 768). Verify by computing over a datagram whose checksum
/// field holds the received value: the result is then 0xFFFF or 0.
pub fn checksum_ipv4(src: Ipv4Addr, dst: Ipv4Addr, datagram: &[u8]) -> u16 {
    let mut acc = ones_complement_sum(0, &src.octets());
    acc = ones_complement_sum(acc, &dst.octets());
    acc += 17 + datagram.len() as u32;
    finish(ones_complement_sum(acc, datagram))
}

/// The UDP checksum over an IPv6 pseudo-header (RFC 8200 8.1).
pub fn checksum_ipv6(src: Ipv6Addr, dst: Ipv6Addr, datagram: &[u8]) -> u16 {
    let mut acc = ones_complement_sum(0, &src.octets());
    acc = ones_complement_sum(acc, &dst.octets());
    acc += 17 + datagram.len() as u32;
    finish(ones_complement_sum(acc, datagram))
}

/// The pseudo-header's one's-complement sum for a datagram of `len`
/// bytes between `src` and `dst` (IPv4 or IPv6 addresses' octets), folded
/// and not complemented: what a checksum left for offload holds until the
/// device finishes it (Linux's CHECKSUM_PARTIAL).
pub fn pseudo_header_sum(src: &[u8], dst: &[u8], len: usize) -> u16 {
    let acc = ones_complement_sum(ones_complement_sum(0, src), dst);
    let mut acc = acc + 17 + len as u32;
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

fn finish(acc: u32) -> u16 {
    match fold_checksum(acc) {
        0 => 0xFFFF,
        c => c,
    }
}

/// Whether a received, non-zero checksum is right, given `checksum_ipv4`/
/// `checksum_ipv6` computed over the datagram as received (checksum field
/// included): the one's-complement sum of a correct datagram is all ones, so
/// the complement folds to zero, which `finish` reports as 0xFFFF.
pub fn checksum_ok(computed_over_received: u16) -> bool {
    computed_over_received == 0xFFFF
}

/// The UDP source port Linux gives a RoCEv2 QP (`rdma_get_udp_sport`): a
/// 20-bit flow label (the given one, or one folded from the product of the
/// two QPNs, which is symmetric so both ends of a connection agree) mapped
/// into 0xC000..=0xFFFF.
pub fn rdma_udp_sport(flow_label: u32, local_qpn: u32, remote_qpn: u32) -> u16 {
    let fl = if flow_label != 0 {
        flow_label
    } else {
        rdma_flow_label(local_qpn, remote_qpn)
    };
    let low = fl & 0x3FFF;
    let high = fl & 0xF_C000;
    ((low ^ (high >> 14)) | 0xC000) as u16
}

/// `rdma_calc_flow_label`: the folded product of the two QPNs, 20 bits.
pub fn rdma_flow_label(local_qpn: u32, remote_qpn: u32) -> u32 {
    let mut v = (local_qpn as u64) * (remote_qpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0x000F_FFFF) as u32
}

/// RoCEv2 A17.4.3.1: the ICRC replaces the UDP checksum by ones.
pub(crate) fn icrc_mask(h: &mut [u8]) {
    h[field::CHECKSUM] = 0xFF;
    h[field::CHECKSUM + 1] = 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sport_is_symmetric_and_in_range() {
        for (a, b) in [(0x11, 0x12), (0xd2, 0xd3), (0xFF_FFFF, 1), (0, 0)] {
            let s = rdma_udp_sport(0, a, b);
            assert_eq!(s, rdma_udp_sport(0, b, a));
            assert!(s >= 0xC000);
        }
        // With a flow label given, the QPNs do not matter.
        // low 14 bits 0x2345, high bits 0x10000 >> 14 = 4: 0x2345 ^ 4 = 0x2341
        assert_eq!(rdma_udp_sport(0x12345, 1, 2), 0xE341);
    }

    #[test]
    fn checksum_verifies() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mut d = [0u8; 13];
        UdpRepr {
            src_port: 1,
            dst_port: ROCEV2_PORT,
        }
        .emit(&mut d, 5);
        d[8..].copy_from_slice(b"hello");
        let c = checksum_ipv4(src, dst, &d);
        d[6..8].copy_from_slice(&c.to_be_bytes());
        assert!(checksum_ok(checksum_ipv4(src, dst, &d)));
        d[9] ^= 0x40;
        assert!(!checksum_ok(checksum_ipv4(src, dst, &d)));
    }
}
