//! The rules a captured frame can break, one variant each, with the
//! sentence `rnic pcap check` prints for it.

use std::net::IpAddr;
use wire::{Operation, Psn, Transport};

/// The rule a frame breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The capture's link type is neither Ethernet nor Linux cooked.
    #[error("link type {0} is not supported (Ethernet and Linux cooked captures are)")]
    LinkType(u32),
    /// A Linux cooked capture header shorter than its layout.
    #[error("Linux cooked capture header cut short")]
    CookedHeaderCut,
    /// The frame does not parse, or its ICRC is wrong (wire's reason).
    #[error("{0}")]
    Wire(#[from] wire::Error),
    /// The capture kept too few bytes of the frame to parse it.
    #[error("only {captured} of the frame's {orig} bytes were captured (snap length): {error}")]
    Cut {
        /// Bytes in the capture.
        captured: usize,
        /// Bytes on the wire.
        orig: u32,
        /// What the short frame broke.
        error: wire::Error,
    },
    /// The capture kept too few bytes of the frame to reach its ICRC.
    #[error("only {captured} of the frame's {orig} bytes were captured (snap length): the ICRC cannot be checked")]
    CutBeforeIcrc {
        /// Bytes in the capture.
        captured: usize,
        /// Bytes on the wire.
        orig: u32,
    },
    /// A UD message larger than any path MTU (IBA 9.7.1: one packet).
    #[error("UD payload of {0} bytes exceeds the largest MTU (4096)")]
    UdTooLong(usize),
    /// A datagram to QP1 that is no MAD (IBA 13.4.1).
    #[error("to QP1: {0}")]
    NotAMad(wire::Error),
    /// A datagram to QP1 without the GSI's Q_Key (IBA 13.5.1).
    #[error("to QP1 with Q_Key {0:#010x}, not the GSI's {gsi:#010x}", gsi = wire::mad::GSI_QKEY)]
    GsiQkey(u32),
    /// Requests of another transport to a QP (a QP has one service type).
    #[error("{op} to QP {qp:#x}, which has been receiving {was:?} requests")]
    TransportChanged {
        /// The request's opcode.
        op: &'static str,
        /// The destination QP.
        qp: u32,
        /// The transport of the requests before.
        was: Transport,
    },
    /// A PSN after a READ that no path MTU explains.
    #[error("PSN {psn} after the READ of {len} bytes at PSN {read} fits no path MTU")]
    AfterReadFitsNoMtu {
        /// The PSN found.
        psn: Psn,
        /// The READ's length.
        len: u32,
        /// The READ's PSN.
        read: Psn,
    },
    /// A PSN beyond what the READ before it can occupy.
    #[error("PSN gap: PSN {psn} follows the READ of {len} bytes at PSN {read}, which spans at most {span} PSNs: packets are missing from the capture")]
    GapAfterRead {
        /// The PSN found.
        psn: Psn,
        /// The READ's length.
        len: u32,
        /// The READ's PSN.
        read: Psn,
        /// The most PSNs the READ occupies.
        span: u32,
    },
    /// Request PSNs that skip ahead (IBA 9.7.1: consecutive PSNs).
    #[error("PSN gap: expected PSN {expected}, found {found}: {missing} packet{s} to QP {qp:#x} missing from the capture", s = if *missing == 1 { "" } else { "s" })]
    PsnGap {
        /// The next PSN of the stream.
        expected: Psn,
        /// The PSN found.
        found: Psn,
        /// How many PSNs are skipped.
        missing: u32,
        /// The destination QP.
        qp: u32,
    },
    /// A MIDDLE or LAST packet with no message begun (IBA 9.7.5.1.2).
    #[error("{op} outside a message: no {kind} message is in progress on QP {qp:#x}", kind = op_name(*kind))]
    OutsideMessage {
        /// The packet's opcode.
        op: &'static str,
        /// Its operation.
        kind: Operation,
        /// The destination QP.
        qp: u32,
    },
    /// A MIDDLE or LAST packet of another operation than the message's
    /// (IBA 9.7.5.1.2).
    #[error("{op} inside an unfinished {open} message", open = op_name(*open))]
    InsideOtherMessage {
        /// The packet's opcode.
        op: &'static str,
        /// The operation of the unfinished message.
        open: Operation,
    },
    /// A FIRST or ONLY packet while a message is unfinished (IBA 9.7.5.1.2).
    #[error("{op} begins a message while the {open} message begun{at} is unfinished (its LAST packet is missing)", open = op_name(*open), at = at.map_or(String::new(), |s| format!(" at PSN {s}")))]
    BeginsInsideMessage {
        /// The packet's opcode.
        op: &'static str,
        /// The operation of the unfinished message.
        open: Operation,
        /// Where it began, when seen.
        at: Option<Psn>,
    },
    /// A packet before the last of a message (a read response's included)
    /// that does not carry the path MTU (IBA 9.7.5.1.4, 9.7.5.1.6).
    #[error("{op} carries {len} bytes; every packet but the last of a message carries exactly the path MTU ({mtu})")]
    NotPathMtu {
        /// The packet's opcode.
        op: &'static str,
        /// Its payload.
        len: u32,
        /// The stream's path MTU.
        mtu: u32,
    },
    /// A first or middle packet whose payload is no IBA path MTU.
    #[error("{op} carries {len} bytes, which is no path MTU (256, 512, 1024, 2048, 4096)")]
    NoPathMtu {
        /// The packet's opcode.
        op: &'static str,
        /// Its payload.
        len: u32,
    },
    /// A packet larger than the path MTU (IBA 9.7.5.1.4).
    #[error("{op} carries {len} bytes, more than the path MTU ({mtu})")]
    OverPathMtu {
        /// The packet's opcode.
        op: &'static str,
        /// Its payload.
        len: u32,
        /// The stream's path MTU.
        mtu: u32,
    },
    /// An RDMA WRITE whose packets carry other than its RETH DMA length
    /// (IBA 9.7.5.1.4).
    #[error("the RDMA WRITE begun at PSN {start} carried {total} bytes, but its RETH DMA length is {want}")]
    WriteLength {
        /// Its first PSN.
        start: Psn,
        /// The bytes its packets carried.
        total: u64,
        /// The RETH's DMA length.
        want: u64,
    },
    /// A read response whose packets carry other than the READ's DMA
    /// length (IBA 9.7.5.1.6).
    #[error(
        "the read response begun at PSN {start} carried {total} bytes, the READ asked for {want}"
    )]
    ReadLength {
        /// Its first PSN.
        start: Psn,
        /// The bytes its packets carried.
        total: u64,
        /// The READ's DMA length.
        want: u64,
    },
    /// A WRITE ONLY whose payload is not its RETH DMA length.
    #[error("{op} carries {len} bytes, but its RETH DMA length is {want}")]
    WriteOnlyLength {
        /// The packet's opcode.
        op: &'static str,
        /// Its payload.
        len: u32,
        /// The RETH's DMA length.
        want: u32,
    },
    /// An AETH with a reserved syndrome (IBA 9.3.5, table 45).
    #[error("{op} carries the reserved AETH syndrome {syndrome:#04x}")]
    ReservedSyndrome {
        /// The packet's opcode.
        op: &'static str,
        /// The syndrome byte.
        syndrome: u8,
    },
    /// A response for a PSN the requester has not sent.
    #[error(
        "{op} for PSN {psn}, but QP {qp:#x} of {host} has been sent requests only up to PSN {upto}"
    )]
    ResponseAhead {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
        /// The QP the requests went to.
        qp: u32,
        /// The host of that QP.
        host: IpAddr,
        /// The last PSN sent to it.
        upto: Psn,
    },
    /// An MSN that does not count the messages completed (IBA 9.7.5.1.3).
    #[error("{op} for PSN {psn} carries MSN {msn}, but {n} message{s} ended after PSN {since}, answered with MSN {since_msn}: the MSN should be {want}", s = if *n == 1 { "" } else { "s" })]
    WrongMsn {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
        /// Its MSN.
        msn: u32,
        /// Messages that ended between the two responses.
        n: u32,
        /// The PSN of the earlier response.
        since: Psn,
        /// The MSN of the earlier response.
        since_msn: u32,
        /// The MSN this response should carry.
        want: u32,
    },
    /// An atomic ACK for a PSN that carried no atomic request.
    #[error("{op} for PSN {psn}, which is not an atomic request")]
    AtomicAckWithoutAtomic {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
    },
    /// A read response that begins while another one stopped short.
    #[error("{op} at PSN {psn} while the read response begun at PSN {start} stopped at PSN {last}: packets are missing from the capture")]
    ReadResponseCutShort {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
        /// Where the earlier read response began.
        start: Psn,
        /// Its last PSN seen.
        last: Psn,
    },
    /// A read response that answers no READ request.
    #[error("{op} at PSN {psn} answers no RDMA READ request (none was sent with that PSN)")]
    ReadResponseUnasked {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
    },
    /// A MIDDLE or LAST read response with none in progress.
    #[error("{op} at PSN {psn}, but no read response is in progress")]
    NoReadResponseInProgress {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
    },
    /// A read response packet whose PSN goes back.
    #[error("{op} at PSN {psn} goes back inside the read response (expected PSN {expected})")]
    ReadResponseBack {
        /// The packet's opcode.
        op: &'static str,
        /// Its PSN.
        psn: Psn,
        /// The next PSN of the read response.
        expected: Psn,
    },
    /// Read response PSNs that skip ahead.
    #[error("read response PSN gap: expected PSN {expected}, found {found}: packets are missing from the capture")]
    ReadResponseGap {
        /// The next PSN of the read response.
        expected: Psn,
        /// The PSN found.
        found: Psn,
    },
}

/// How a rule's sentence names an operation.
pub(super) fn op_name(op: Operation) -> &'static str {
    match op {
        Operation::Send => "SEND",
        Operation::Write => "RDMA WRITE",
        Operation::ReadRequest => "RDMA READ",
        Operation::ReadResponse => "RDMA READ response",
        Operation::Acknowledge => "ACK",
        Operation::AtomicAcknowledge => "atomic ACK",
        Operation::CompareSwap => "CMP_SWAP",
        Operation::FetchAdd => "FETCH_ADD",
        Operation::Flush => "FLUSH",
        Operation::AtomicWrite => "ATOMIC WRITE",
        Operation::Cnp => "CNP",
    }
}
