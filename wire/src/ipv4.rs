//! IPv4 (RFC 791) as RoCEv2 uses it: a 20-byte header, no options, no
//! fragments, protocol UDP.

use crate::bytes::{be16, put16};
use crate::error::{need, Error, Layer, Result};
use std::net::Ipv4Addr;

pub(crate) mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// Length of the IPv4 header without options (IHL 5), the only form RoCEv2
/// uses.
pub const HEADER_LEN: usize = 20;
/// The IPv4 Protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1FFF;

/// A zero-copy view of an IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` without checks; the accessors then panic on a buffer
    /// shorter than [`HEADER_LEN`]. Use [`Self::new_checked`] on untrusted input.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Validates version, header length, total length against the buffer,
    /// the absence of fragmentation and the header checksum.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        need(Layer::Ipv4, b, HEADER_LEN)?;
        // The checks read a fixed-size copy of the header: no bounds checks.
        let h = Ipv4Packet::new_unchecked(crate::bytes::array::<HEADER_LEN>(b, 0));
        if h.version() != 4 {
            return Err(Error::Ipv4BadVersion(h.version()));
        }
        let hl = h.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Ipv4BadHeaderLen(hl));
        }
        if hl > HEADER_LEN {
            return Err(Error::Ipv4Options);
        }
        let total = h.total_len() as usize;
        if total < hl || total > b.len() {
            return Err(Error::Ipv4BadTotalLen {
                total,
                have: b.len(),
            });
        }
        if h.more_frags() || h.frag_offset() != 0 {
            return Err(Error::Ipv4Fragment);
        }
        let expected = header_checksum_of(&h.buffer);
        if !checksum_holds(h.checksum(), expected) {
            return Err(Error::Ipv4BadChecksum {
                found: h.checksum(),
                expected,
            });
        }
        Ok(p)
    }

    /// Version, the high nibble of byte 0 (4 for IPv4).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes: the IHL field (low nibble of byte 0) × 4.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0F) as usize) * 4
    }
    /// Differentiated Services Code Point, the high 6 bits of the TOS byte
    /// (RFC 2474).
    #[inline(always)]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::TOS] >> 2
    }
    /// ECN codepoint, the low 2 bits of the TOS byte (RFC 3168 5).
    #[inline(always)]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::TOS] & 3
    }
    /// Total Length: header and payload, in bytes.
    #[inline(always)]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LEN)
    }
    /// Identification field.
    #[inline(always)]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't Fragment (DF) flag.
    #[inline(always)]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }
    /// More Fragments (MF) flag.
    #[inline(always)]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }
    /// Fragment Offset, in units of 8 bytes (13 bits).
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FRAG_OFFSET
    }
    /// Time to Live.
    #[inline(always)]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload ([`PROTOCOL_UDP`] for RoCEv2).
    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum as carried.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    #[inline(always)]
    pub fn src(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(
            b[field::SRC],
            b[field::SRC + 1],
            b[field::SRC + 2],
            b[field::SRC + 3],
        )
    }
    /// Destination address.
    #[inline(always)]
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(
            b[field::DST],
            b[field::DST + 1],
            b[field::DST + 2],
            b[field::DST + 3],
        )
    }

    /// The header checksum this header should carry.
    #[inline(always)]
    pub fn compute_checksum(&self) -> u16 {
        header_checksum(&self.buffer.as_ref()[..HEADER_LEN])
    }

    /// The bytes after the header, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

/// Marks the header Congestion Experienced (ECN 11, RFC 3168 5) and
/// updates its checksum, as an ECN-capable switch does; a Not-ECT header
/// (ECN 00) is left alone. False when the header is too short or Not-ECT.
pub fn mark_ce(h: &mut [u8]) -> bool {
    if h.len() < HEADER_LEN || h[field::TOS] & 3 == 0 {
        return false;
    }
    h[field::TOS] |= 3;
    let c = header_checksum(h);
    put16(h, field::CHECKSUM, c);
    true
}

/// The checksum the 20-byte header at the start of `h` should carry
/// (whatever its checksum field holds now).
pub(crate) fn header_checksum(h: &[u8]) -> u16 {
    header_checksum_of(&crate::bytes::array(h, 0))
}

/// The checksum a 20-byte header should carry (RFC 791, RFC 1071): the
/// one's-complement sum of its 32-bit words as they lie in memory, with the
/// checksum field (bytes 10 and 11) left out, folded, byte-swapped and
/// complemented (the identities `bytes::ones_complement_sum` describes).
#[inline(always)]
fn header_checksum_of(h: &[u8; HEADER_LEN]) -> u16 {
    let w = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    // bytes 8 and 9 (TTL, protocol) of the third word, without the checksum
    let ttl_proto = u16::from_le_bytes([h[8], h[9]]) as u64;
    let mut acc = w(0) + w(4) + ttl_proto + w(12) + w(16);
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16).swap_bytes()
}

/// Whether a header carrying `found` is intact when its other fields ask
/// for `expected` ([`header_checksum_of`]). RFC 1071: a header is intact
/// when the one's-complement sum of all its 16-bit words, the checksum
/// included, is all ones. Computed afresh the checksum is never 0xFFFF,
/// but RFC 1624 §3's incremental update (what a switch does when it
/// rewrites the ECN field to CE, RFC 3168 §5) carries a zero sum as
/// 0xFFFF, "-0": both 0x0000 and 0xFFFF then hold.
#[inline(always)]
fn checksum_holds(found: u16, expected: u16) -> bool {
    found == expected || (expected == 0 && found == 0xFFFF)
}

/// The parsed form of an IPv4 header. The protocol is always UDP; the total
/// length and checksum are derived on emit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Differentiated services code point (6 bits).
    pub dscp: u8,
    /// ECN codepoint (2 bits): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// Identification field.
    pub ident: u16,
    /// Don't Fragment (DF) flag.
    pub dont_frag: bool,
    /// Time to Live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Reads the fields of a checked header; [`Error::NotUdp`] when the
    /// protocol is not UDP.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        if p.protocol() != PROTOCOL_UDP {
            return Err(Error::NotUdp(p.protocol()));
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
        })
    }

    /// Writes a 20-byte header for a datagram of `payload_len` bytes.
    ///
    /// The checksum is summed from the fields, not read back from the
    /// header just written: a 4-byte load over several narrower stores
    /// cannot be forwarded from them and waits until they reach the cache.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        let h = &mut buf[..HEADER_LEN];
        let tos = (self.dscp << 2) | (self.ecn & 3);
        let len = (HEADER_LEN + payload_len) as u16;
        let flags = if self.dont_frag { FLAG_DF } else { 0 };
        let (src, dst) = (self.src.octets(), self.dst.octets());
        h[field::VER_IHL] = 0x45;
        h[field::TOS] = tos;
        put16(h, field::LEN, len);
        put16(h, field::IDENT, self.ident);
        put16(h, field::FLAGS_FRAG, flags);
        h[field::TTL] = self.ttl;
        h[field::PROTOCOL] = PROTOCOL_UDP;
        h[field::SRC..field::SRC + 4].copy_from_slice(&src);
        h[field::DST..field::DST + 4].copy_from_slice(&dst);
        // RFC 791 / RFC 1071: the one's-complement sum of the header's
        // 16-bit big-endian words, the checksum's own word taken as zero.
        let word = |b: [u8; 2]| u16::from_be_bytes(b) as u32;
        let sum = (0x45u32 << 8 | tos as u32)
            + len as u32
            + self.ident as u32
            + flags as u32
            + ((self.ttl as u32) << 8 | PROTOCOL_UDP as u32)
            + word([src[0], src[1]])
            + word([src[2], src[3]])
            + word([dst[0], dst[1]])
            + word([dst[2], dst[3]]);
        // at most 9 × 0xFFFF: two folds bring it to 16 bits
        let sum = (sum & 0xFFFF) + (sum >> 16);
        let sum = (sum & 0xFFFF) + (sum >> 16);
        put16(h, field::CHECKSUM, !(sum as u16));
    }
}

/// Where the ICRC masks fields of an IPv4 header (RoCEv2 A17.4.3.1): TOS,
/// TTL and the header checksum are replaced by ones.
pub(crate) fn icrc_mask(h: &mut [u8]) {
    h[field::TOS] = 0xFF;
    h[field::TTL] = 0xFF;
    h[field::CHECKSUM] = 0xFF;
    h[field::CHECKSUM + 1] = 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{array, fold_checksum, ones_complement_sum};

    // The IPv4 header of the known-good CNP from the issue.
    const CNP_IP: [u8; 20] = [
        0x45, 0x89, 0x00, 0x3C, 0x98, 0xC6, 0x40, 0x00, 0x20, 0x11, 0x69, 0x27, 0x16, 0x16, 0x16,
        0x08, 0x16, 0x16, 0x16, 0x07,
    ];

    #[test]
    fn parse_and_emit_known_header() {
        let mut frame = [0u8; 60];
        frame[..20].copy_from_slice(&CNP_IP);
        let p = Ipv4Packet::new_checked(&frame[..]).unwrap();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.dscp, 34);
        assert_eq!(r.ecn, 1);
        assert_eq!(r.ttl, 0x20);
        assert!(r.dont_frag);
        let mut out = [0u8; 20];
        r.emit(&mut out, 40);
        assert_eq!(out, CNP_IP);
    }

    /// The word-wise header checksum against the generic RFC 1071 sum.
    #[test]
    fn emit_writes_the_checksum_of_what_it_wrote() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = Ipv4Repr {
                src: Ipv4Addr::from((x >> 32) as u32),
                dst: Ipv4Addr::from(x as u32),
                dscp: (x >> 7) as u8 & 0x3F,
                ecn: (x >> 13) as u8 & 3,
                ident: (x >> 17) as u16,
                dont_frag: round % 2 == 0,
                ttl: match round {
                    0 => 0,
                    1 => 0xFF,
                    _ => (x >> 40) as u8,
                },
            };
            let mut h = [0u8; HEADER_LEN];
            r.emit(&mut h, (x >> 48) as usize % 65000);
            let acc = ones_complement_sum(0, &h[..field::CHECKSUM]);
            let want = fold_checksum(ones_complement_sum(acc, &h[field::CHECKSUM + 2..]));
            assert_eq!(be16(&h, field::CHECKSUM), want, "{h:02x?}");
        }
    }

    #[test]
    fn header_checksum_matches_the_generic_sum() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..2000 {
            let mut h = [0u8; HEADER_LEN];
            for b in h.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = match round {
                    0 => 0,
                    1 => 0xFF,
                    _ => x as u8,
                };
            }
            let acc = ones_complement_sum(0, &h[..field::CHECKSUM]);
            let want = fold_checksum(ones_complement_sum(acc, &h[field::CHECKSUM + 2..]));
            assert_eq!(header_checksum_of(&h), want, "{h:02x?}");
        }
        assert_eq!(header_checksum_of(&CNP_IP), 0x6927);
    }

    /// A header whose checksum computes to 0x0000 also holds as 0xFFFF
    /// (RFC 1624's "-0", from a CE remark), and no other checksum does.
    #[test]
    fn a_checksum_of_minus_zero_holds() {
        let mut frame = [0u8; 60];
        frame[..20].copy_from_slice(&CNP_IP);
        // make the other fields sum to 0xFFFF: the identification takes
        // up what the checksum held
        let id = u16::from_be_bytes([frame[4], frame[5]]);
        let ck = u16::from_be_bytes([frame[10], frame[11]]);
        let (sum, carry) = id.overflowing_add(ck);
        frame[4..6].copy_from_slice(&(sum + u16::from(carry)).to_be_bytes());
        frame[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(header_checksum_of(&array(&frame, 0)), 0);
        assert!(Ipv4Packet::new_checked(&frame[..]).is_ok());
        frame[10..12].copy_from_slice(&[0xFF, 0xFF]);
        assert!(Ipv4Packet::new_checked(&frame[..]).is_ok());
        frame[10..12].copy_from_slice(&[0xFF, 0xFE]);
        assert!(matches!(
            Ipv4Packet::new_checked(&frame[..]),
            Err(Error::Ipv4BadChecksum { .. })
        ));
        // 0xFFFF holds only for a zero checksum
        frame[..20].copy_from_slice(&CNP_IP);
        frame[10..12].copy_from_slice(&[0xFF, 0xFF]);
        assert!(matches!(
            Ipv4Packet::new_checked(&frame[..]),
            Err(Error::Ipv4BadChecksum { .. })
        ));
    }

    #[test]
    fn refuses_bad_headers() {
        let mut frame = [0u8; 60];
        frame[..20].copy_from_slice(&CNP_IP);
        frame[10] ^= 1;
        assert!(matches!(
            Ipv4Packet::new_checked(&frame[..]),
            Err(Error::Ipv4BadChecksum { .. })
        ));
        frame[10] ^= 1;
        frame[0] = 0x46;
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).unwrap_err(),
            Error::Ipv4Options
        );
        frame[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).unwrap_err(),
            Error::Ipv4BadHeaderLen(16)
        );
        frame[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&frame[..]).unwrap_err(),
            Error::Ipv4BadVersion(6)
        );
        frame[0] = 0x45;
        assert!(matches!(
            Ipv4Packet::new_checked(&frame[..59 - 40 + 20]),
            Err(Error::Ipv4BadTotalLen { total: 60, .. })
        ));
    }
}
