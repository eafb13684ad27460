//! IPv6 (RFC 8200) as RoCEv2 uses it: the fixed header with next header UDP.

use crate::bytes::{be16, be32, put16, put32};
use crate::error::{need, Error, Layer, Result};
use std::net::Ipv6Addr;

pub(crate) mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// Length of the IPv6 fixed header; RoCEv2 uses no extension headers.
pub const HEADER_LEN: usize = 40;
/// The IPv6 Next Header value of UDP.
pub const NEXT_HEADER_UDP: u8 = 17;

/// Marks the header Congestion Experienced (ECN 11, RFC 3168 5; the ECN
/// bits are the low two of the traffic class, bits 21:20 of the first
/// word); a Not-ECT header is left alone. False when the header is too
/// short or Not-ECT.
pub fn mark_ce(h: &mut [u8]) -> bool {
    if h.len() < HEADER_LEN {
        return false;
    }
    let w = be32(h, field::VER_TC_FLOW);
    if (w >> 20) & 3 == 0 {
        return false;
    }
    put32(h, field::VER_TC_FLOW, w | 3 << 20);
    true
}

/// A zero-copy view of an IPv6 header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` without checks; the accessors then panic on a buffer
    /// shorter than [`HEADER_LEN`]. Use [`Self::new_checked`] on untrusted input.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Validates the length of the fixed header, the version, and that the
    /// payload length fits in the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        need(Layer::Ipv6, b, HEADER_LEN)?;
        if p.version() != 6 {
            return Err(Error::Ipv6BadVersion(p.version()));
        }
        let payload = p.payload_len() as usize;
        if HEADER_LEN + payload > b.len() {
            return Err(Error::Ipv6BadPayloadLen {
                payload,
                have: b.len(),
            });
        }
        Ok(p)
    }

    #[inline(always)]
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// Version, the top 4 bits of the first word (6 for IPv6).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic Class, bits 27:20 of the first word: DSCP in its high 6 bits,
    /// ECN in its low 2 (RFC 8200 7).
    #[inline(always)]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow Label, the low 20 bits of the first word.
    #[inline(always)]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000F_FFFF
    }
    /// Payload Length: the bytes after the 40-byte fixed header.
    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next Header: the protocol of the payload ([`NEXT_HEADER_UDP`] for RoCEv2).
    #[inline(always)]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop Limit.
    #[inline(always)]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address; a RoCEv2 GID.
    #[inline(always)]
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::bytes::array::<16>(self.buffer.as_ref(), field::SRC))
    }
    /// Destination address; a RoCEv2 GID.
    #[inline(always)]
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::bytes::array::<16>(self.buffer.as_ref(), field::DST))
    }
    /// The bytes after the fixed header, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }
}

/// The parsed form of an IPv6 header. Next header is always UDP; the payload
/// length is derived on emit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Differentiated services code point (6 bits), the high bits of the
    /// traffic class.
    pub dscp: u8,
    /// ECN codepoint (2 bits): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// 20-bit flow label.
    pub flow_label: u32,
    /// Hop Limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Reads the fields of a checked header; [`Error::NotUdp`] when the next
    /// header is not UDP.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        if p.next_header() != NEXT_HEADER_UDP {
            return Err(Error::NotUdp(p.next_header()));
        }
        let tc = p.traffic_class();
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: tc >> 2,
            ecn: tc & 3,
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
        })
    }

    /// Writes a 40-byte fixed header for a payload of `payload_len` bytes;
    /// `buf` must hold at least [`HEADER_LEN`] bytes.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        let h = &mut buf[..HEADER_LEN];
        let tc = ((self.dscp << 2) | (self.ecn & 3)) as u32;
        put32(
            h,
            field::VER_TC_FLOW,
            (6 << 28) | (tc << 20) | (self.flow_label & 0x000F_FFFF),
        );
        put16(h, field::PAYLOAD_LEN, payload_len as u16);
        h[field::NEXT_HEADER] = NEXT_HEADER_UDP;
        h[field::HOP_LIMIT] = self.hop_limit;
        h[field::SRC..field::SRC + 16].copy_from_slice(&self.src.octets());
        h[field::DST..field::DST + 16].copy_from_slice(&self.dst.octets());
    }
}

/// RoCEv2 A17.4.3.1: for IPv6 the ICRC replaces traffic class, flow label
/// and hop limit by ones; the version nibble stays.
pub(crate) fn icrc_mask(h: &mut [u8]) {
    h[0] |= 0x0F;
    h[1..4].fill(0xFF);
    h[field::HOP_LIMIT] = 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 26,
            ecn: 2,
            flow_label: 0xABCDE,
            hop_limit: 64,
        };
        let mut buf = [0u8; 48];
        r.emit(&mut buf, 8);
        assert_eq!(&buf[..4], &[0x66, 0xAA, 0xBC, 0xDE]);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
        assert!(matches!(
            Ipv6Packet::new_checked(&buf[..47]),
            Err(Error::Ipv6BadPayloadLen { .. })
        ));
    }
}
