//! The CM's vocabulary: addresses, IDs, parameters, events, reasons.

use std::fmt;
use wire::mad::{sidr_status, CmRep, CmReq, CmSidrRep, CmSidrReq, IpCmPrivateData};

/// A peer CM's address: its port GID (for RoCEv2 the IP address, IPv4 as
/// an IPv4-mapped IPv6 address).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct CmAddr {
    pub gid: [u8; 16],
}

impl CmAddr {
    pub fn from_ip(ip: core::net::IpAddr) -> CmAddr {
        let gid = match ip {
            core::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            core::net::IpAddr::V6(v6) => v6.octets(),
        };
        CmAddr { gid }
    }
}

/// A connection's local communication ID (IBA 12.6.2).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CmId(pub u32);

/// What the active side puts in its REQ (IBA 12.6.5).
#[derive(Clone, Debug)]
pub struct ConnectParams {
    pub remote: CmAddr,
    pub service_id: u64,
    pub local_qpn: u32,
    /// Where the active side's receive queue starts (the passive side
    /// sends from it), as Linux's CM reads the field.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// IBA MTU encoding (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// 5 bits, 4.096 µs × 2^n: how long each side waits for the other.
    pub cm_response_timeout: u8,
    /// 4 bits: retransmissions of REQ/REP/DREQ before giving up.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// The REQ's end-to-end flow control bit (librdmacm's
    /// `rdma_conn_param.flow_control`).
    pub end_to_end_flow_control: bool,
    /// The path's local ACK timeout (5 bits).
    pub local_ack_timeout: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// The path's flow label (20 bits; Linux derives one per connection).
    pub flow_label: u32,
    /// At most 92 bytes (the REQ's private data); longer is cut.
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// Defaults close to what librdmacm asks for: 4096-byte MTU, 7 retries,
    /// CM response timeout 20 (about 4.3 s), 15 CM retries.
    pub fn new(remote: CmAddr, service_id: u64, local_qpn: u32, starting_psn: u32) -> Self {
        ConnectParams {
            remote,
            service_id,
            local_qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            path_mtu: 5,
            retry_count: 7,
            rnr_retry_count: 7,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            srq: false,
            end_to_end_flow_control: false,
            local_ack_timeout: 14,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            private_data: Vec::new(),
        }
    }
}

/// What the passive side puts in its REP (IBA 12.6.8).
#[derive(Clone, Debug)]
pub struct AcceptParams {
    pub local_qpn: u32,
    /// Where the passive side's receive queue starts (the active side
    /// sends from it), as Linux's CM reads the field.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The REP's end-to-end flow control bit.
    pub end_to_end_flow_control: bool,
    /// At most 196 bytes (the REP's private data); longer is cut.
    pub private_data: Vec<u8>,
}

/// What the active side puts in its SIDR_REQ (IBA 12.11.2) and how long
/// it waits for the SIDR_REP.
#[derive(Clone, Debug)]
pub struct SidrParams {
    pub remote: CmAddr,
    pub service_id: u64,
    /// The partition the requester sends in (0xFFFF, the default one).
    pub pkey: u16,
    /// 5 bits, 4.096 µs × 2^n: the wait for the SIDR_REP after each try.
    pub response_timeout: u8,
    /// 4 bits: repeats of the SIDR_REQ before the resolution fails.
    pub max_retries: u8,
    /// At most 216 bytes (the SIDR_REQ's private data); longer is cut.
    pub private_data: Vec<u8>,
}

impl SidrParams {
    /// Librdmacm's timers: response timeout 20 (about 4.3 s, the kernel's
    /// 4096 ms), 15 retries; the default partition.
    pub fn new(remote: CmAddr, service_id: u64) -> Self {
        SidrParams {
            remote,
            service_id,
            pkey: 0xFFFF,
            response_timeout: 20,
            max_retries: 15,
            private_data: Vec::new(),
        }
    }
}

/// An IBA REJ reason (IBA 12.6.7, Table 104).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RejectReason(pub u16);

impl RejectReason {
    pub const NO_QP: RejectReason = RejectReason(1);
    pub const NO_RESOURCES: RejectReason = RejectReason(3);
    pub const TIMEOUT: RejectReason = RejectReason(4);
    pub const INVALID_COMM_ID: RejectReason = RejectReason(6);
    pub const INVALID_SERVICE_ID: RejectReason = RejectReason(8);
    pub const INVALID_TRANSPORT_TYPE: RejectReason = RejectReason(9);
    pub const STALE_CONNECTION: RejectReason = RejectReason(10);
    pub const CONSUMER_REJECT: RejectReason = RejectReason(28);

    /// The SIDR_REP status (IBA 12.11.3) that says what this reason says
    /// of a SIDR_REQ: no such service, no QP, else rejected.
    pub fn sidr_status(self) -> u8 {
        match self {
            RejectReason::INVALID_SERVICE_ID => sidr_status::SERVICE_ID_NOT_SUPPORTED,
            RejectReason::NO_QP | RejectReason::NO_RESOURCES => sidr_status::NO_QP,
            _ => sidr_status::REJECTED,
        }
    }
}

/// What the CM tells its owner. The QP transitions are the owner's: on
/// `ConnectRequest` (passive) it creates the QP and moves it to RTR before
/// `accept`; on `Established` with a REP (active) it moves its QP to RTR
/// and RTS with the REP's values (the RTU is already queued); on
/// `Established` without a REP (passive) to RTS; on `Unreachable`,
/// `Rejected`, `DisconnectRequest` or `Disconnected` to error.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CmEvent {
    /// A REQ for a listened service ID (IBA 12.9); `ip` is its RDMA IP
    /// CM private data when it parses.
    ConnectRequest {
        id: CmId,
        from: CmAddr,
        req: Box<CmReq>,
        ip: Option<IpCmPrivateData>,
    },
    /// The connection is established: on the active side with the peer's
    /// REP, on the passive side after the RTU or `established`.
    Established { id: CmId, rep: Option<Box<CmRep>> },
    /// The peer rejected the REQ or REP; the ID is freed (at once while
    /// connecting; after TimeWait when the active side was established).
    Rejected {
        id: CmId,
        reason: RejectReason,
        private_data: Box<[u8]>,
    },
    /// REQ, REP or SIDR_REQ went unanswered `max_cm_retries + 1` times;
    /// the ID is freed.
    Unreachable { id: CmId },
    /// A SIDR_REQ for a listened service ID (IBA 12.11); `ip` is its RDMA
    /// IP CM private data when it parses. The owner answers with
    /// [`Cm::sidr_accept`](super::Cm::sidr_accept) or
    /// [`Cm::sidr_reject`](super::Cm::sidr_reject).
    SidrRequest {
        id: CmId,
        from: CmAddr,
        req: Box<CmSidrReq>,
        ip: Option<IpCmPrivateData>,
    },
    /// The SIDR_REP that answers our SIDR_REQ, whatever its status
    /// (0: its QPN and Q_Key are valid); the ID is freed.
    SidrReply { id: CmId, rep: Box<CmSidrRep> },
    /// The peer sent a DREQ (the DREP is queued).
    DisconnectRequest { id: CmId },
    /// The connection is down (DREP received or DREQ answered); the ID is
    /// in TimeWait.
    Disconnected { id: CmId },
    /// The DREQ went unanswered `max_cm_retries + 1` times: the connection
    /// is down all the same; the ID is in TimeWait.
    DreqTimeout { id: CmId },
    /// TimeWait is over; the ID is freed.
    TimeWaitExit { id: CmId },
}

/// Why an incoming MAD was dropped (stable names for counters).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum CmDrop {
    /// The bytes are no MAD (length, truncation).
    Malformed,
    NotCmClass,
    BadBaseVersion,
    BadClassVersion,
    BadMethod,
    /// LAP, APR, ClassPortInfo: not served.
    UnsupportedAttribute,
    /// No connection has the message's remote communication ID (or the
    /// sender or its communication ID does not match it); no SIDR_REQ
    /// of ours has a SIDR_REP's request ID.
    UnknownCommId,
    /// A message the connection's state does not expect.
    OutOfState,
    /// A REQ or SIDR_REQ repeated while the owner has not answered the
    /// first.
    DuplicateReq,
    /// A REQ that is not RC (transport service type).
    UnsupportedTransport,
    /// A SIDR_REP whose service ID is not the one its SIDR_REQ asked for.
    WrongServiceId,
}

impl CmDrop {
    pub const ALL: [CmDrop; 11] = [
        CmDrop::Malformed,
        CmDrop::NotCmClass,
        CmDrop::BadBaseVersion,
        CmDrop::BadClassVersion,
        CmDrop::BadMethod,
        CmDrop::UnsupportedAttribute,
        CmDrop::UnknownCommId,
        CmDrop::OutOfState,
        CmDrop::DuplicateReq,
        CmDrop::UnsupportedTransport,
        CmDrop::WrongServiceId,
    ];

    /// The counter name.
    pub fn name(self) -> &'static str {
        match self {
            CmDrop::Malformed => "cm_malformed",
            CmDrop::NotCmClass => "cm_not_cm_class",
            CmDrop::BadBaseVersion => "cm_bad_base_version",
            CmDrop::BadClassVersion => "cm_bad_class_version",
            CmDrop::BadMethod => "cm_bad_method",
            CmDrop::UnsupportedAttribute => "cm_unsupported_attribute",
            CmDrop::UnknownCommId => "cm_unknown_comm_id",
            CmDrop::OutOfState => "cm_out_of_state",
            CmDrop::DuplicateReq => "cm_duplicate_req",
            CmDrop::UnsupportedTransport => "cm_unsupported_transport",
            CmDrop::WrongServiceId => "cm_wrong_service_id",
        }
    }
}

impl fmt::Display for CmDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an application call failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum CmError {
    #[error("no such CM ID")]
    UnknownId,
    #[error("the CM ID is not in a state that allows this call")]
    WrongState,
}
