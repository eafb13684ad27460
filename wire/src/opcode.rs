//! The one opcode table: for every RC, UC, UD and CNP opcode, its name,
//! transport, operation, position in a message, which extension headers
//! follow the BTH and at which offsets, whether it carries an immediate,
//! an invalidate key or a payload, and whether it is a request or a response.
//!
//! IBA 9.2.1 (Table 39 "OpCode field") lays out the opcode space: the top
//! three bits select the transport (000 RC, 001 UC, 010 RD, 011 UD,
//! 100 CNP, 101 XRC), the low five bits the operation. RoCEv2 A17.9.2
//! assigns 0x81 (1000_0001b) to the Congestion Notification Packet.
//! FLUSH (0x1C) and ATOMIC_WRITE (0x1D) come from the IBA 1.5 Memory
//! Placement Extensions. RD and XRC are not implemented and parse as
//! unknown opcodes.
//!
//! Length: The table has a row per opcode and stays in one file (one place to
//! read or change an opcode); about 70 of its lines are tests.

use core::fmt;

/// Transport service of an opcode.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// Reliable Connected (opcodes 000xxxxx).
    Rc,
    /// Unreliable Connected (opcodes 001xxxxx).
    Uc,
    /// Unreliable Datagram (opcodes 011xxxxx).
    Ud,
    /// RoCEv2 Congestion Notification Packet.
    Cnp,
}

/// The QP types a packet may be delivered to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum QpType {
    /// A Reliable Connected QP.
    Rc,
    /// An Unreliable Connected QP.
    Uc,
    /// An Unreliable Datagram QP.
    Ud,
}

/// What the packet does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Operation {
    /// SEND: the payload lands in the buffer of the responder's next
    /// receive WQE.
    Send,
    /// RDMA WRITE: the payload lands at the address the RETH names.
    Write,
    /// RDMA READ request: asks for the bytes the RETH names.
    ReadRequest,
    /// RDMA READ response: carries the bytes read.
    ReadResponse,
    /// ACK, RNR NAK or NAK (the AETH's syndrome tells which).
    Acknowledge,
    /// The response to an atomic, with the target's original value.
    AtomicAcknowledge,
    /// Atomic compare and swap on 8 bytes.
    CompareSwap,
    /// Atomic fetch and add on 8 bytes.
    FetchAdd,
    /// FLUSH: make earlier writes visible or persistent (IBA 1.5 MPE).
    Flush,
    /// ATOMIC_WRITE: write 8 bytes as one unit (IBA 1.5 MPE).
    AtomicWrite,
    /// Congestion notification (RoCEv2 A17.9.2).
    Cnp,
}

/// Position of a packet in a multi-packet message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    /// The first packet of a message of two or more.
    First,
    /// Neither first nor last.
    Middle,
    /// The last packet of a message of two or more.
    Last,
    /// The message's only packet.
    Only,
}

impl Position {
    /// Starts a message (FIRST or ONLY).
    pub const fn is_start(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Ends a message (LAST or ONLY).
    pub const fn is_end(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Which side of a connection consumes the packet.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Direction {
    /// Requester → responder.
    Request,
    /// Responder → requester (ACK, READ response, atomic ACK).
    Response,
    /// Notification point → reaction point.
    Congestion,
}

/// The payload an opcode carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PayloadRule {
    /// No payload and a pad count of 0.
    None,
    /// Any length (bounded by the path MTU, which is not checked here).
    Any,
    /// Exactly this many bytes (ATOMIC_WRITE: 8).
    Exactly(u16),
}

/// Extension headers that may follow the BTH, in wire order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Header {
    /// Datagram ETH, 8 bytes: Q_Key and source QP (IBA 9.3.2).
    Deth,
    /// Flush ETH, 4 bytes: selectivity and placement type (IBA 1.5 MPE).
    Feth,
    /// RDMA ETH, 16 bytes: VA, R_Key, DMA length (IBA 9.3.3).
    Reth,
    /// Atomic ETH, 28 bytes: VA, R_Key, swap/add and compare (IBA 9.3.4).
    AtomicEth,
    /// ACK ETH, 4 bytes: syndrome and MSN (IBA 9.3.5).
    Aeth,
    /// Atomic ACK ETH, 8 bytes: the original value at the target.
    AtomicAckEth,
    /// Immediate data, 4 bytes, delivered in the receive completion.
    ImmDt,
    /// Invalidate ETH, 4 bytes: the R_Key to invalidate.
    Ieth,
    /// The 16 reserved bytes of a CNP (RoCEv2 A17.9.2).
    CnpReserved,
}

impl Header {
    /// All headers in the order they appear after the BTH.
    pub const ORDER: [Header; 9] = [
        Header::Deth,
        Header::Feth,
        Header::Reth,
        Header::AtomicEth,
        Header::Aeth,
        Header::AtomicAckEth,
        Header::ImmDt,
        Header::Ieth,
        Header::CnpReserved,
    ];

    /// The header's length on the wire (never empty, hence no `is_empty`).
    #[allow(clippy::len_without_is_empty)]
    pub const fn len(self) -> usize {
        match self {
            Header::Deth => 8,
            Header::Feth => 4,
            Header::Reth => 16,
            Header::AtomicEth => 28,
            Header::Aeth => 4,
            Header::AtomicAckEth => 8,
            Header::ImmDt => 4,
            Header::Ieth => 4,
            Header::CnpReserved => 16,
        }
    }

    const fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// The header's IBA abbreviation, e.g. `RETH`.
    pub const fn name(self) -> &'static str {
        match self {
            Header::Deth => "DETH",
            Header::Feth => "FETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::CnpReserved => "CNP reserved",
        }
    }
}

/// A set of extension headers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// The empty set.
    pub const NONE: Headers = Headers(0);

    /// The set with `h` added.
    pub const fn with(self, h: Header) -> Headers {
        Headers(self.0 | h.bit())
    }

    /// The set without `h`.
    pub const fn without(self, h: Header) -> Headers {
        Headers(self.0 & !h.bit())
    }

    /// Whether `h` is in the set.
    pub const fn contains(self, h: Header) -> bool {
        self.0 & h.bit() != 0
    }

    /// Total length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut i = 0;
        let mut n = 0;
        while i < Header::ORDER.len() {
            if self.contains(Header::ORDER[i]) {
                n += Header::ORDER[i].len();
            }
            i += 1;
        }
        n
    }

    /// True for the empty set: the BTH is followed by the payload.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of `h` from the end of the BTH, if it is in the set.
    pub const fn offset(self, h: Header) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        let mut i = 0;
        let mut off = 0;
        while i < Header::ORDER.len() {
            let o = Header::ORDER[i];
            if o as u16 == h as u16 {
                return Some(off);
            }
            if self.contains(o) {
                off += o.len();
            }
            i += 1;
        }
        None
    }

    /// The headers in the set, in wire order.
    pub fn iter(self) -> impl Iterator<Item = Header> {
        Header::ORDER.into_iter().filter(move |h| self.contains(*h))
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(Header::name))
            .finish()
    }
}

/// One row of the opcode table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The BTH OpCode byte.
    pub opcode: u8,
    /// The IBA name with its transport, e.g. `RC_SEND_FIRST`.
    pub name: &'static str,
    /// Transport service: the top three bits of the opcode.
    pub transport: Transport,
    /// What the packet does.
    pub operation: Operation,
    /// Where in its message the packet lies.
    pub position: Position,
    /// The extension headers between the BTH and the payload.
    pub headers: Headers,
    /// The payload the opcode allows.
    pub payload: PayloadRule,
    /// Who sends it: requester, responder, or congestion notifier.
    pub direction: Direction,
    /// `headers`' total length and per-header offsets, worked out once when
    /// the table is built (`ext_len` and `offset` are on every parse).
    layout: ExtLayout,
}

/// Where the extension headers of an opcode lie after the BTH.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ExtLayout {
    len: u8,
    /// Offset of each header, indexed by `Header as usize`; `ABSENT` when the
    /// opcode does not carry it.
    offsets: [u8; Header::ORDER.len()],
}

const ABSENT: u8 = u8::MAX;

impl ExtLayout {
    const fn of(headers: Headers) -> ExtLayout {
        let mut offsets = [ABSENT; Header::ORDER.len()];
        let mut i = 0;
        while i < Header::ORDER.len() {
            let h = Header::ORDER[i];
            if let Some(o) = headers.offset(h) {
                offsets[h as usize] = o as u8;
            }
            i += 1;
        }
        let len = headers.len();
        assert!(len < ABSENT as usize);
        ExtLayout {
            len: len as u8,
            offsets,
        }
    }
}

impl OpcodeInfo {
    /// Carries immediate data (ImmDt).
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(Header::ImmDt)
    }
    /// Carries an IETH (SEND with Invalidate).
    pub const fn has_invalidate(&self) -> bool {
        self.headers.contains(Header::Ieth)
    }
    /// May carry a payload.
    pub const fn has_payload(&self) -> bool {
        !matches!(self.payload, PayloadRule::None)
    }
    /// Sent by a requester, consumed by a responder.
    pub const fn is_request(&self) -> bool {
        matches!(self.direction, Direction::Request)
    }
    /// Sent by a responder, consumed by a requester.
    pub const fn is_response(&self) -> bool {
        matches!(self.direction, Direction::Response)
    }
    /// Length of all headers after the BTH.
    #[inline(always)]
    pub const fn ext_len(&self) -> usize {
        self.layout.len as usize
    }
    /// Offset of an extension header from the end of the BTH.
    #[inline(always)]
    pub const fn offset(&self, h: Header) -> Option<usize> {
        match self.layout.offsets[h as usize] {
            ABSENT => None,
            o => Some(o as usize),
        }
    }
    /// IBA Table 39 and transport header validation (IBA 9.6.1): an opcode
    /// is accepted only by a QP of its own service. CNPs address a QP of
    /// any type (RoCEv2 A17.9.2).
    pub const fn valid_for(&self, qp: QpType) -> bool {
        matches!(
            (self.transport, qp),
            (Transport::Rc, QpType::Rc)
                | (Transport::Uc, QpType::Uc)
                | (Transport::Ud, QpType::Ud)
                | (Transport::Cnp, _)
        )
    }
}

const fn h(list: &[Header]) -> Headers {
    let mut s = Headers::NONE;
    let mut i = 0;
    while i < list.len() {
        s = s.with(list[i]);
        i += 1;
    }
    s
}

use Direction::{Congestion as Cg, Request as Rq, Response as Rs};
use Header::*;
use Operation as Op;
use PayloadRule::{Any, Exactly, None as NoPayload};
use Position::*;

#[rustfmt::skip]
const ENTRIES: &[OpcodeInfo] = &[
    // ---- RC (IBA Table 39, 000xxxxx) ----
    e(0x00, "RC_SEND_FIRST", Transport::Rc, Op::Send, First, &[], Any, Rq),
    e(0x01, "RC_SEND_MIDDLE", Transport::Rc, Op::Send, Middle, &[], Any, Rq),
    e(0x02, "RC_SEND_LAST", Transport::Rc, Op::Send, Last, &[], Any, Rq),
    e(0x03, "RC_SEND_LAST_WITH_IMMEDIATE", Transport::Rc, Op::Send, Last, &[ImmDt], Any, Rq),
    e(0x04, "RC_SEND_ONLY", Transport::Rc, Op::Send, Only, &[], Any, Rq),
    e(0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", Transport::Rc, Op::Send, Only, &[ImmDt], Any, Rq),
    e(0x06, "RC_RDMA_WRITE_FIRST", Transport::Rc, Op::Write, First, &[Reth], Any, Rq),
    e(0x07, "RC_RDMA_WRITE_MIDDLE", Transport::Rc, Op::Write, Middle, &[], Any, Rq),
    e(0x08, "RC_RDMA_WRITE_LAST", Transport::Rc, Op::Write, Last, &[], Any, Rq),
    e(0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Transport::Rc, Op::Write, Last, &[ImmDt], Any, Rq),
    e(0x0A, "RC_RDMA_WRITE_ONLY", Transport::Rc, Op::Write, Only, &[Reth], Any, Rq),
    e(0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Transport::Rc, Op::Write, Only, &[Reth, ImmDt], Any, Rq),
    e(0x0C, "RC_RDMA_READ_REQUEST", Transport::Rc, Op::ReadRequest, Only, &[Reth], NoPayload, Rq),
    e(0x0D, "RC_RDMA_READ_RESPONSE_FIRST", Transport::Rc, Op::ReadResponse, First, &[Aeth], Any, Rs),
    e(0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", Transport::Rc, Op::ReadResponse, Middle, &[], Any, Rs),
    e(0x0F, "RC_RDMA_READ_RESPONSE_LAST", Transport::Rc, Op::ReadResponse, Last, &[Aeth], Any, Rs),
    e(0x10, "RC_RDMA_READ_RESPONSE_ONLY", Transport::Rc, Op::ReadResponse, Only, &[Aeth], Any, Rs),
    e(0x11, "RC_ACKNOWLEDGE", Transport::Rc, Op::Acknowledge, Only, &[Aeth], NoPayload, Rs),
    e(0x12, "RC_ATOMIC_ACKNOWLEDGE", Transport::Rc, Op::AtomicAcknowledge, Only, &[Aeth, AtomicAckEth], NoPayload, Rs),
    e(0x13, "RC_CMP_SWAP", Transport::Rc, Op::CompareSwap, Only, &[AtomicEth], NoPayload, Rq),
    e(0x14, "RC_FETCH_ADD", Transport::Rc, Op::FetchAdd, Only, &[AtomicEth], NoPayload, Rq),
    e(0x16, "RC_SEND_LAST_WITH_INVALIDATE", Transport::Rc, Op::Send, Last, &[Ieth], Any, Rq),
    e(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", Transport::Rc, Op::Send, Only, &[Ieth], Any, Rq),
    e(0x1C, "RC_FLUSH", Transport::Rc, Op::Flush, Only, &[Feth, Reth], NoPayload, Rq),
    e(0x1D, "RC_ATOMIC_WRITE", Transport::Rc, Op::AtomicWrite, Only, &[Reth], Exactly(8), Rq),
    // ---- UC (001xxxxx) ----
    e(0x20, "UC_SEND_FIRST", Transport::Uc, Op::Send, First, &[], Any, Rq),
    e(0x21, "UC_SEND_MIDDLE", Transport::Uc, Op::Send, Middle, &[], Any, Rq),
    e(0x22, "UC_SEND_LAST", Transport::Uc, Op::Send, Last, &[], Any, Rq),
    e(0x23, "UC_SEND_LAST_WITH_IMMEDIATE", Transport::Uc, Op::Send, Last, &[ImmDt], Any, Rq),
    e(0x24, "UC_SEND_ONLY", Transport::Uc, Op::Send, Only, &[], Any, Rq),
    e(0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", Transport::Uc, Op::Send, Only, &[ImmDt], Any, Rq),
    e(0x26, "UC_RDMA_WRITE_FIRST", Transport::Uc, Op::Write, First, &[Reth], Any, Rq),
    e(0x27, "UC_RDMA_WRITE_MIDDLE", Transport::Uc, Op::Write, Middle, &[], Any, Rq),
    e(0x28, "UC_RDMA_WRITE_LAST", Transport::Uc, Op::Write, Last, &[], Any, Rq),
    e(0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Transport::Uc, Op::Write, Last, &[ImmDt], Any, Rq),
    e(0x2A, "UC_RDMA_WRITE_ONLY", Transport::Uc, Op::Write, Only, &[Reth], Any, Rq),
    e(0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Transport::Uc, Op::Write, Only, &[Reth, ImmDt], Any, Rq),
    // ---- UD (011xxxxx) ----
    e(0x64, "UD_SEND_ONLY", Transport::Ud, Op::Send, Only, &[Deth], Any, Rq),
    e(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", Transport::Ud, Op::Send, Only, &[Deth, ImmDt], Any, Rq),
    // ---- CNP (RoCEv2 A17.9.2) ----
    e(0x81, "CNP", Transport::Cnp, Op::Cnp, Only, &[CnpReserved], NoPayload, Cg),
];

#[allow(clippy::too_many_arguments)]
const fn e(
    opcode: u8,
    name: &'static str,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: &[Header],
    payload: PayloadRule,
    direction: Direction,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        transport,
        operation,
        position,
        headers: h(headers),
        payload,
        direction,
        layout: ExtLayout::of(h(headers)),
    }
}

const fn build() -> [Option<OpcodeInfo>; 256] {
    let mut t = [None; 256];
    let mut i = 0;
    while i < ENTRIES.len() {
        t[ENTRIES[i].opcode as usize] = Some(ENTRIES[i]);
        i += 1;
    }
    t
}

static TABLE: [Option<OpcodeInfo>; 256] = build();

/// A BTH opcode byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Opcode(pub u8);

impl Opcode {
    /// RC: first packet of a SEND that spans several packets.
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC: middle packet of a multi-packet SEND.
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC: last packet of a multi-packet SEND.
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC: last packet of a multi-packet SEND, with ImmDt.
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC: a SEND in one packet.
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC: a SEND in one packet, with ImmDt.
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC: first packet of a multi-packet RDMA WRITE; carries the RETH.
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC: middle packet of a multi-packet RDMA WRITE.
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC: last packet of a multi-packet RDMA WRITE.
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC: last packet of a multi-packet RDMA WRITE, with ImmDt; consumes a receive WQE.
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC: an RDMA WRITE in one packet; carries the RETH.
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC: an RDMA WRITE in one packet with RETH and ImmDt; consumes a receive WQE.
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    /// RC: RDMA READ request: a RETH naming the remote buffer, no payload.
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC: first packet of a multi-packet READ response; carries an AETH.
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC: middle packet of a READ response; no AETH.
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC: last packet of a multi-packet READ response; carries an AETH.
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC: a READ response in one packet; carries an AETH.
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC: ACK, RNR NAK or NAK: an AETH and no payload.
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC: response to an atomic: AETH and AtomicAckETH with the original value.
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC: atomic compare and swap of 8 bytes: an AtomicETH, no payload.
    pub const RC_CMP_SWAP: Opcode = Opcode(0x13);
    /// RC: atomic fetch and add on 8 bytes: an AtomicETH, no payload.
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC: last packet of a multi-packet SEND, with an IETH naming an R_Key to invalidate.
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC: a SEND in one packet, with an IETH naming an R_Key to invalidate.
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC: FLUSH (IBA 1.5 Memory Placement Extensions): FETH and RETH, no payload.
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    /// RC: ATOMIC_WRITE (IBA 1.5 Memory Placement Extensions): RETH and an
    /// 8-byte payload.
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    /// UC: first packet of a SEND that spans several packets.
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC: a SEND in one packet.
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC: an RDMA WRITE in one packet; carries the RETH.
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    /// A UD SEND (every UD message is one packet). Carries a DETH.
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// A UD SEND (every UD message is one packet), with ImmDt. Carries a DETH.
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// RoCEv2 Congestion Notification Packet (RoCEv2 A17.9.2).
    pub const CNP: Opcode = Opcode(0x81);

    /// The request opcode of `transport` for `operation` at `position`,
    /// with or without ImmDt and IETH, as the table has it (IBA 9.2.1,
    /// Table 39); `None` when the table has no such row. A `const fn`, so
    /// that a sender can build its own lookup from this table at compile
    /// time.
    pub const fn request(
        transport: Transport,
        operation: Operation,
        position: Position,
        immediate: bool,
        invalidate: bool,
    ) -> Option<Opcode> {
        let mut i = 0;
        while i < ENTRIES.len() {
            let r = &ENTRIES[i];
            if r.transport as u8 == transport as u8
                && r.operation as u8 == operation as u8
                && r.position as u8 == position as u8
                && r.direction as u8 == Direction::Request as u8
                && r.has_immediate() == immediate
                && r.has_invalidate() == invalidate
            {
                return Some(Opcode(r.opcode));
            }
            i += 1;
        }
        None
    }

    /// The table row, or `None` for an opcode we do not implement.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The IBA name, e.g. `RC_SEND_ONLY`, or `UNKNOWN`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }

    /// Every opcode in the table.
    pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
        ENTRIES.iter()
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "UNKNOWN({:#04x})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for i in Opcode::all() {
            // the transport bits of the opcode agree with the row
            let t = match i.opcode >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                4 => Transport::Cnp,
                _ => panic!("{} in an unexpected range", i.name),
            };
            assert_eq!(t, i.transport, "{}", i.name);
            assert!(i.name.contains(match i.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
            }));
            assert_eq!(Opcode(i.opcode).info(), Some(i));
            assert_eq!(
                i.has_immediate(),
                i.name.contains("IMMEDIATE"),
                "{}",
                i.name
            );
            assert_eq!(
                i.has_invalidate(),
                i.name.contains("INVALIDATE"),
                "{}",
                i.name
            );
            // RC and UC share the low five bits for the same operation
            if i.transport == Transport::Uc {
                let rc = Opcode(i.opcode & 0x1F).info().unwrap();
                assert_eq!(rc.name[3..], i.name[3..]);
                assert_eq!(rc.headers, i.headers);
            }
        }
        assert_eq!(Opcode::all().count(), 40);
        // the precomputed layout agrees with the header set it came from
        for i in Opcode::all() {
            assert_eq!(i.ext_len(), i.headers.len(), "{}", i.name);
            for h in Header::ORDER {
                assert_eq!(i.offset(h), i.headers.offset(h), "{} {h:?}", i.name);
            }
        }
        assert!(Opcode(0x15).info().is_none());
        assert!(Opcode(0x40).info().is_none());
    }

    #[test]
    fn request_finds_the_row() {
        let find = Opcode::request;
        assert_eq!(
            find(Transport::Rc, Op::Send, Last, true, false),
            Some(Opcode::RC_SEND_LAST_WITH_IMMEDIATE)
        );
        assert_eq!(
            find(Transport::Rc, Op::Send, Only, false, true),
            Some(Opcode::RC_SEND_ONLY_WITH_INVALIDATE)
        );
        assert_eq!(
            find(Transport::Uc, Op::Write, Only, false, false),
            Some(Opcode::UC_RDMA_WRITE_ONLY)
        );
        assert_eq!(
            find(Transport::Ud, Op::Send, Only, true, false),
            Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE)
        );
        // UC has no SEND with invalidate, UD no multi-packet SEND
        assert_eq!(find(Transport::Uc, Op::Send, Only, false, true), None);
        assert_eq!(find(Transport::Ud, Op::Send, First, false, false), None);
        // every request row is found by its own attributes
        for i in Opcode::all().filter(|i| i.is_request()) {
            let o = find(
                i.transport,
                i.operation,
                i.position,
                i.has_immediate(),
                i.has_invalidate(),
            );
            assert_eq!(o, Some(Opcode(i.opcode)), "{}", i.name);
        }
    }

    #[test]
    fn offsets_follow_wire_order() {
        let flush = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(flush.offset(Header::Feth), Some(0));
        assert_eq!(flush.offset(Header::Reth), Some(4));
        assert_eq!(flush.ext_len(), 20);
        let wi = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(wi.offset(Header::Reth), Some(0));
        assert_eq!(wi.offset(Header::ImmDt), Some(16));
        let ack = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(ack.offset(Header::AtomicAckEth), Some(4));
        assert_eq!(ack.offset(Header::Reth), None);
        let ud = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(ud.offset(Header::ImmDt), Some(8));
        assert!(ud.valid_for(QpType::Ud) && !ud.valid_for(QpType::Rc));
        assert!(Opcode::CNP.info().unwrap().valid_for(QpType::Rc));
    }
}
