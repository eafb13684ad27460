//! The Base Transport Header (IBA 9.2), 12 bytes:
//!
//! ```text
//!  0: OpCode(8)
//!  1: SE(1) M(1) PadCnt(2) TVer(4)
//!  2: P_Key(16)
//!  4: FECN(1) BECN(1) Resv6(6)   -- RoCEv2 A17.9: FECN/BECN carry ECN feedback
//!  5: DestQP(24)
//!  8: A(1) Resv7(7)
//!  9: PSN(24)
//! ```

use crate::bytes::{be16, be24, put16, put24};
use crate::error::{need, Error, Layer, Result};
use crate::opcode::Opcode;
use crate::psn::Psn;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const BECN_FECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// Length of the BTH in bytes.
pub const HEADER_LEN: usize = 12;
/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// Whether two P_Keys match (IBA 10.9.3): the same partition (low 15 bits)
/// and at least one of the two a full member (bit 15 set). Two limited
/// members of one partition do not match.
#[inline(always)]
pub const fn pkey_matches(a: u16, b: u16) -> bool {
    (a ^ b) & 0x7FFF == 0 && (a | b) & 0x8000 != 0
}

/// A zero-copy view of a BTH.
#[derive(Debug, Clone, Copy)]
pub struct BthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthHeader<T> {
    /// Wraps `buffer` without checks; the accessors then panic on a buffer
    /// shorter than [`HEADER_LEN`]. Use [`Self::new_checked`] on untrusted input.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        BthHeader { buffer }
    }

    /// Validates the length and the transport header version.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        need(Layer::Bth, h.buffer.as_ref(), HEADER_LEN)?;
        // IBA 9.2.6 (TVer): only version 0 is defined; packets with another
        // version are dropped.
        if h.tver() != 0 {
            return Err(Error::BadTver(h.tver()));
        }
        Ok(h)
    }

    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode (byte 0): transport service in bits 7:5, operation in bits 4:0.
    #[inline(always)]
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited Event (SE), byte 1 bit 7: the responder raises a solicited
    /// completion event for this message, IBA 9.2.
    #[inline(always)]
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// MigReq, byte 1 bit 6: the path migration state, IBA 9.2.
    #[inline(always)]
    pub fn migreq(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// PadCnt (0-3), byte 1 bits 5:4: pad bytes between the payload and the
    /// ICRC that bring it to a multiple of four, IBA 9.2.
    #[inline(always)]
    pub fn pad(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 3
    }
    /// TVer, byte 1 bits 3:0: the transport header version, always 0.
    #[inline(always)]
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0F
    }
    /// P_Key, bytes 2-3: the partition key (bit 15 full membership).
    #[inline(always)]
    pub fn pkey(&self) -> u16 {
        be16(self.b(), field::PKEY)
    }
    /// FECN, byte 4 bit 7: forward explicit congestion notification.
    #[inline(always)]
    pub fn fecn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x80 != 0
    }
    /// BECN, byte 4 bit 6: backward explicit congestion notification; set in
    /// a RoCEv2 CNP (RoCEv2 A17.9).
    #[inline(always)]
    pub fn becn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x40 != 0
    }
    /// Resv6, byte 4 bits 5:0: reserved.
    #[inline(always)]
    pub fn resv6(&self) -> u8 {
        self.b()[field::BECN_FECN] & 0x3F
    }
    /// DestQP, bytes 5-7: the 24-bit number of the destination queue pair.
    #[inline(always)]
    pub fn dest_qp(&self) -> u32 {
        be24(self.b(), field::DEST_QP)
    }
    /// AckReq, byte 8 bit 7: the requester asks for an acknowledgement of this
    /// packet, IBA 9.2.
    #[inline(always)]
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// Resv7, byte 8 bits 6:0: reserved.
    #[inline(always)]
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK_REQ] & 0x7F
    }
    /// PSN, bytes 9-11: the 24-bit packet sequence number.
    #[inline(always)]
    pub fn psn(&self) -> Psn {
        Psn::new(be24(self.b(), field::PSN))
    }
}

/// Every field of the BTH. `pad` is derived from the payload length when a
/// whole packet is emitted (`RoceRepr::emit`); the reserved fields are kept so
/// that a parsed header re-emits byte for byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct BthRepr {
    /// OpCode: transport service and operation.
    pub opcode: Opcode,
    /// Solicited Event (SE).
    pub solicited: bool,
    /// MigReq: the path migration state.
    pub migreq: bool,
    /// PadCnt (0-3): pad bytes after the payload.
    pub pad: u8,
    /// P_Key: the partition key.
    pub pkey: u16,
    /// FECN: forward explicit congestion notification.
    pub fecn: bool,
    /// BECN: backward explicit congestion notification (set in a CNP).
    pub becn: bool,
    /// Resv6: 6 reserved bits after FECN and BECN.
    pub resv6: u8,
    /// DestQP: the destination queue pair (24 bits).
    pub dest_qp: u32,
    /// AckReq: acknowledge request.
    pub ack_req: bool,
    /// Resv7: 7 reserved bits after AckReq.
    pub resv7: u8,
    /// PSN: the packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Reads every field of a checked header.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(h: &BthHeader<T>) -> BthRepr {
        BthRepr {
            opcode: h.opcode(),
            solicited: h.solicited(),
            migreq: h.migreq(),
            pad: h.pad(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            resv6: h.resv6(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            resv7: h.resv7(),
            psn: h.psn(),
        }
    }

    /// A BTH with the defaults real RNICs send: full-member P_Key, no
    /// migration request, TVer 0.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            pkey: DEFAULT_PKEY,
            dest_qp: dest_qp & 0xFF_FFFF,
            psn,
            ..Default::default()
        }
    }

    /// Writes the 12-byte header into the front of `buf` with TVer 0; `buf`
    /// must hold at least [`HEADER_LEN`] bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::OPCODE] = self.opcode.0;
        b[field::FLAGS] =
            ((self.solicited as u8) << 7) | ((self.migreq as u8) << 6) | ((self.pad & 3) << 4);
        put16(b, field::PKEY, self.pkey);
        b[field::BECN_FECN] =
            ((self.fecn as u8) << 7) | ((self.becn as u8) << 6) | (self.resv6 & 0x3F);
        put24(b, field::DEST_QP, self.dest_qp);
        b[field::ACK_REQ] = ((self.ack_req as u8) << 7) | (self.resv7 & 0x7F);
        put24(b, field::PSN, self.psn.value());
    }
}

/// RoCEv2 A17.4.3.1: the ICRC replaces FECN, BECN and Resv6 (byte 4) by ones.
pub(crate) fn icrc_mask(b: &mut [u8]) {
    b[field::BECN_FECN] = 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkeys_match_by_partition_with_one_full_member() {
        assert!(pkey_matches(0xFFFF, 0xFFFF));
        assert!(pkey_matches(0xFFFF, 0x7FFF));
        assert!(pkey_matches(0x7FFF, 0xFFFF));
        assert!(!pkey_matches(0x7FFF, 0x7FFF), "two limited members");
        assert!(!pkey_matches(0xFFFF, 0x1234));
        assert!(!pkey_matches(0xFFFF, 0xFFFE));
        assert!(!pkey_matches(0xFFFF, 0x8000));
    }

    #[test]
    fn every_field_round_trips() {
        let r = BthRepr {
            opcode: Opcode(0x0A),
            solicited: true,
            migreq: true,
            pad: 3,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            resv6: 0x15,
            dest_qp: 0xABCDEF,
            ack_req: true,
            resv7: 0x55,
            psn: Psn::new(0x123456),
        };
        let mut b = [0u8; 12];
        r.emit(&mut b);
        assert_eq!(
            b,
            [0x0A, 0xF0, 0x80, 0x01, 0x95, 0xAB, 0xCD, 0xEF, 0xD5, 0x12, 0x34, 0x56]
        );
        assert_eq!(BthRepr::parse(&BthHeader::new_checked(&b[..]).unwrap()), r);
        b[1] |= 1;
        assert_eq!(
            BthHeader::new_checked(&b[..]).unwrap_err(),
            Error::BadTver(1)
        );
    }
}
