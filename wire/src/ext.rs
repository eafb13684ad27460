//! The extension headers that follow the BTH (IBA 9.3-9.5; FETH from the IBA
//! 1.5 Memory Placement Extensions) and the set of them one packet carries.

use crate::bytes::{array, be24, be32, be64, put24, put32, put64};
use crate::opcode::{Header, Headers, OpcodeInfo};
use core::fmt;

/// RDMA Extended Transport Header (IBA 9.3.3), 16 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Reth {
    /// Virtual address of the first byte of the remote buffer.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// Length of the whole RDMA operation in bytes (not of this packet).
    pub dma_len: u32,
}

/// Atomic Extended Transport Header (IBA 9.3.4), 28 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AtomicEth {
    /// Virtual address of the 8-byte target; must be 8-byte aligned.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// The swap value (CMP_SWAP) or the addend (FETCH_ADD).
    pub swap_add: u64,
    /// The value compared with the target (CMP_SWAP; unused by FETCH_ADD).
    pub compare: u64,
}

/// Datagram Extended Transport Header (IBA 9.3.2), 8 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Deth {
    /// Q_Key, checked by the receiving UD QP against its own.
    pub qkey: u32,
    /// 24-bit source QP number.
    pub src_qp: u32,
}

/// Flush Extended Transport Header, 4 bytes: selectivity level (bits 5:4)
/// and placement type (bits 3:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Feth {
    /// Selectivity level (2 bits): how much memory the FLUSH covers.
    pub selectivity: u8,
    /// Placement type (4 bits): the persistence or visibility requested.
    pub placement_type: u8,
}

/// NAK codes of the AETH syndrome (IBA 9.7.5.2.2, Table 45).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NakCode {
    /// Code 0: PSN sequence error; the requester resends from the PSN in
    /// the NAK's BTH.
    PsnSequenceError,
    /// Code 1: invalid request (an opcode or length the responder refuses).
    InvalidRequest,
    /// Code 2: remote access error (an R_Key, bounds or access-right fault).
    RemoteAccessError,
    /// Code 3: remote operational error (the responder could not complete).
    RemoteOperationalError,
    /// Code 4: invalid RD request (Reliable Datagram only).
    InvalidRdRequest,
    /// A reserved code, kept so the header re-emits byte for byte.
    Reserved(u8),
}

impl NakCode {
    /// The NAK code in the low 5 bits of `v`.
    pub fn from_bits(v: u8) -> NakCode {
        match v & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            v => NakCode::Reserved(v),
        }
    }
    /// The 5-bit code, for the low bits of the syndrome.
    pub fn bits(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1F,
        }
    }
}

/// The AETH syndrome (IBA 9.7.5.2.2, Table 44): bits 7:5 select ACK (000),
/// RNR NAK (001), reserved (010) or NAK (011); bits 4:0 are a credit code, an
/// RNR timer code or a NAK code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Syndrome {
    /// Credit count code; 0x1F means "invalid / no end-to-end flow control".
    Ack {
        /// The 5-bit credit count code.
        credits: u8,
    },
    /// Encoded minimum RNR NAK timer (IBA Table 45).
    RnrNak {
        /// The 5-bit timer code.
        timer: u8,
    },
    /// Negative acknowledgement (type 011) with its code.
    Nak(NakCode),
    /// Reserved syndrome values (types 010, 1xx), kept raw.
    Reserved(u8),
}

impl Syndrome {
    /// Credit code for "no end-to-end credits are being tracked".
    pub const UNLIMITED_CREDITS: u8 = 0x1F;

    /// Decodes the first byte of an AETH.
    pub fn from_byte(b: u8) -> Syndrome {
        let low = b & 0x1F;
        match b >> 5 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(NakCode::from_bits(low)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome as the first byte of an AETH.
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(code) => 0x60 | code.bits(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// True for a positive acknowledgement (type 000).
    pub fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            Syndrome::RnrNak { timer } => write!(f, "RNR-NAK timer={timer}"),
            Syndrome::Nak(NakCode::PsnSequenceError) => f.write_str("NAK psn-seq-error"),
            Syndrome::Nak(NakCode::InvalidRequest) => f.write_str("NAK invalid-request"),
            Syndrome::Nak(NakCode::RemoteAccessError) => f.write_str("NAK remote-access-error"),
            Syndrome::Nak(NakCode::RemoteOperationalError) => f.write_str("NAK remote-op-error"),
            Syndrome::Nak(NakCode::InvalidRdRequest) => f.write_str("NAK invalid-rd-request"),
            Syndrome::Nak(NakCode::Reserved(v)) => write!(f, "NAK reserved({v})"),
            Syndrome::Reserved(b) => write!(f, "reserved-syndrome({b:#04x})"),
        }
    }
}

/// ACK Extended Transport Header (IBA 9.3.5), 4 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Aeth {
    /// ACK, RNR NAK or NAK, with its code (byte 0).
    pub syndrome: Syndrome,
    /// 24-bit message sequence number.
    pub msn: u32,
}

/// The extension headers of one packet. Exactly those the opcode names are
/// present (`ExtHeaders::matches`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ExtHeaders {
    /// DETH: in every UD packet.
    pub deth: Option<Deth>,
    /// FETH: in a FLUSH request.
    pub feth: Option<Feth>,
    /// RETH: in the first (or only) packet of an RDMA WRITE, and in RDMA
    /// READ, FLUSH and ATOMIC_WRITE requests.
    pub reth: Option<Reth>,
    /// AtomicETH: in a CMP_SWAP or FETCH_ADD request.
    pub atomic: Option<AtomicEth>,
    /// AETH: in every acknowledgement and in the first, last and only RDMA
    /// READ response packets.
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original value at the target address.
    pub atomic_ack: Option<u64>,
    /// ImmDt: immediate data, carried as the big-endian 32-bit value.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// The set of headers present.
    #[inline]
    fn present(&self) -> Headers {
        let mut h = Headers::NONE;
        for (some, header) in [
            (self.deth.is_some(), Header::Deth),
            (self.feth.is_some(), Header::Feth),
            (self.reth.is_some(), Header::Reth),
            (self.atomic.is_some(), Header::AtomicEth),
            (self.aeth.is_some(), Header::Aeth),
            (self.atomic_ack.is_some(), Header::AtomicAckEth),
            (self.imm.is_some(), Header::ImmDt),
            (self.ieth.is_some(), Header::Ieth),
        ] {
            if some {
                h = h.with(header);
            }
        }
        h
    }

    /// True when exactly the headers the opcode calls for are present (the
    /// CNP's reserved bytes are not a field of `ExtHeaders`).
    #[inline]
    pub fn matches(&self, info: &OpcodeInfo) -> bool {
        self.present() == info.headers.without(Header::CnpReserved)
    }

    /// Parses the headers `info` names from `b`, which starts right after
    /// the BTH and holds at least `info.ext_len()` bytes.
    ///
    /// The shapes of the data path (none, RETH alone, AETH alone) are built
    /// in one expression each; every other set goes through `parse_any`.
    #[inline]
    pub fn parse(info: &OpcodeInfo, b: &[u8]) -> ExtHeaders {
        const RETH: Headers = Headers::NONE.with(Header::Reth);
        const AETH: Headers = Headers::NONE.with(Header::Aeth);
        match info.headers {
            Headers::NONE => ExtHeaders::default(),
            RETH => {
                let h: [u8; 16] = array(b, 0);
                ExtHeaders {
                    reth: Some(Reth {
                        va: be64(&h, 0),
                        rkey: be32(&h, 8),
                        dma_len: be32(&h, 12),
                    }),
                    ..ExtHeaders::default()
                }
            }
            AETH => {
                let h: [u8; 4] = array(b, 0);
                ExtHeaders {
                    aeth: Some(Aeth {
                        syndrome: Syndrome::from_byte(h[0]),
                        msn: be24(&h, 1),
                    }),
                    ..ExtHeaders::default()
                }
            }
            _ => Self::parse_any(info, b),
        }
    }

    /// `parse` for any set of headers. Each header is taken as one
    /// fixed-size array (one bounds check) and its fields are read from it.
    #[inline(never)]
    fn parse_any(info: &OpcodeInfo, b: &[u8]) -> ExtHeaders {
        let mut x = ExtHeaders::default();
        if let Some(o) = info.offset(Header::Deth) {
            let h: [u8; 8] = array(b, o);
            x.deth = Some(Deth {
                qkey: be32(&h, 0),
                src_qp: be24(&h, 5),
            });
        }
        if let Some(o) = info.offset(Header::Feth) {
            let v = u32::from_be_bytes(array(b, o));
            x.feth = Some(Feth {
                selectivity: ((v >> 4) & 3) as u8,
                placement_type: (v & 0xF) as u8,
            });
        }
        if let Some(o) = info.offset(Header::Reth) {
            let h: [u8; 16] = array(b, o);
            x.reth = Some(Reth {
                va: be64(&h, 0),
                rkey: be32(&h, 8),
                dma_len: be32(&h, 12),
            });
        }
        if let Some(o) = info.offset(Header::AtomicEth) {
            let h: [u8; 28] = array(b, o);
            x.atomic = Some(AtomicEth {
                va: be64(&h, 0),
                rkey: be32(&h, 8),
                swap_add: be64(&h, 12),
                compare: be64(&h, 20),
            });
        }
        if let Some(o) = info.offset(Header::Aeth) {
            let h: [u8; 4] = array(b, o);
            x.aeth = Some(Aeth {
                syndrome: Syndrome::from_byte(h[0]),
                msn: be24(&h, 1),
            });
        }
        if let Some(o) = info.offset(Header::AtomicAckEth) {
            x.atomic_ack = Some(u64::from_be_bytes(array(b, o)));
        }
        if let Some(o) = info.offset(Header::ImmDt) {
            x.imm = Some(u32::from_be_bytes(array(b, o)));
        }
        if let Some(o) = info.offset(Header::Ieth) {
            x.ieth = Some(u32::from_be_bytes(array(b, o)));
        }
        x
    }

    /// Writes the headers `info` names into `b` (at least `info.ext_len()`
    /// bytes). Headers the opcode does not name are not written; a missing
    /// one is written as zeros (callers check `matches` first).
    pub fn emit(&self, info: &OpcodeInfo, b: &mut [u8]) {
        let hs = info;
        if let Some(o) = hs.offset(Header::Deth) {
            let d = self.deth.unwrap_or_default();
            put32(b, o, d.qkey);
            b[o + 4] = 0;
            put24(b, o + 5, d.src_qp);
        }
        if let Some(o) = hs.offset(Header::Feth) {
            let f = self.feth.unwrap_or_default();
            put32(
                b,
                o,
                (((f.selectivity & 3) as u32) << 4) | (f.placement_type & 0xF) as u32,
            );
        }
        if let Some(o) = hs.offset(Header::Reth) {
            let r = self.reth.unwrap_or_default();
            put64(b, o, r.va);
            put32(b, o + 8, r.rkey);
            put32(b, o + 12, r.dma_len);
        }
        if let Some(o) = hs.offset(Header::AtomicEth) {
            let a = self.atomic.unwrap_or_default();
            put64(b, o, a.va);
            put32(b, o + 8, a.rkey);
            put64(b, o + 12, a.swap_add);
            put64(b, o + 20, a.compare);
        }
        if let Some(o) = hs.offset(Header::Aeth) {
            let a = self.aeth.unwrap_or(Aeth {
                syndrome: Syndrome::Ack { credits: 0 },
                msn: 0,
            });
            b[o] = a.syndrome.to_byte();
            put24(b, o + 1, a.msn);
        }
        if let Some(o) = hs.offset(Header::AtomicAckEth) {
            put64(b, o, self.atomic_ack.unwrap_or(0));
        }
        if let Some(o) = hs.offset(Header::ImmDt) {
            put32(b, o, self.imm.unwrap_or(0));
        }
        if let Some(o) = hs.offset(Header::Ieth) {
            put32(b, o, self.ieth.unwrap_or(0));
        }
        if let Some(o) = hs.offset(Header::CnpReserved) {
            // RoCEv2 A17.9.2: the 16 bytes after the BTH of a CNP are reserved, zero.
            b[o..o + 16].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `matches` against the header-by-header definition, for every opcode
    /// and every subset of the eight optional headers.
    #[test]
    fn matches_exactly_the_opcode_headers() {
        let fields = [
            Header::Deth,
            Header::Feth,
            Header::Reth,
            Header::AtomicEth,
            Header::Aeth,
            Header::AtomicAckEth,
            Header::ImmDt,
            Header::Ieth,
        ];
        for info in crate::Opcode::all() {
            for subset in 0u32..256 {
                let has = |i: usize| subset & (1 << i) != 0;
                let x = ExtHeaders {
                    deth: has(0).then(Deth::default),
                    feth: has(1).then(Feth::default),
                    reth: has(2).then(Reth::default),
                    atomic: has(3).then(AtomicEth::default),
                    aeth: has(4).then_some(Aeth {
                        syndrome: Syndrome::Ack { credits: 0 },
                        msn: 0,
                    }),
                    atomic_ack: has(5).then_some(0),
                    imm: has(6).then_some(0),
                    ieth: has(7).then_some(0),
                };
                let want = fields
                    .iter()
                    .enumerate()
                    .all(|(i, h)| has(i) == info.headers.contains(*h));
                assert_eq!(x.matches(info), want, "{} {subset:#010b}", info.name);
            }
        }
    }

    #[test]
    fn syndromes_round_trip_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
        assert_eq!(Syndrome::from_byte(0x1F), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_byte(0x2E), Syndrome::RnrNak { timer: 14 });
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
    }
}
