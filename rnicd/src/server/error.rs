//! Why the daemon refused a client's request. The client gets the
//! message (`Response::Error`); nothing a client sends is an error of the
//! daemon itself.

use nic::engine::EngineError;
use nic::verbs::AhError;
use nic::verbs::VerbsError;
use std::fmt;

/// A client's object, as error messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// A protection domain by handle.
    Pd(u32),
    /// A memory region by lkey.
    Mr(u32),
    /// A memory window by handle (`rkey >> 8`).
    Mw(u32),
    /// A completion queue by handle.
    Cq(u32),
    /// A queue pair by number.
    Qp(u32),
    /// An address handle.
    Ah(u32),
    /// A shared receive queue by handle.
    Srq(u32),
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::Pd(n) => write!(f, "PD {n}"),
            Object::Mr(n) => write!(f, "MR {n:#x}"),
            Object::Mw(n) => write!(f, "MW {n:#x}"),
            Object::Cq(n) => write!(f, "CQ {n}"),
            Object::Qp(n) => write!(f, "QP {n:#x}"),
            Object::Ah(n) => write!(f, "AH {n}"),
            Object::Srq(n) => write!(f, "SRQ {n}"),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Descriptors came with a request that takes none.
    #[error("unexpected file descriptors")]
    UnexpectedFds,
    /// A request that takes one descriptor came with none or several.
    #[error("{op} needs exactly one {what}")]
    OneFd {
        /// The request.
        op: &'static str,
        /// The kind of descriptor it takes.
        what: &'static str,
    },
    /// The descriptor is not an eventfd.
    #[error("not an eventfd: {0}")]
    NotEventFd(String),
    /// The descriptor could not be inspected or set up.
    #[error("the descriptor: {0}")]
    Descriptor(#[source] std::io::Error),
    /// The client holds as many objects as one client may.
    #[error("too many objects")]
    TooManyObjects,
    /// The daemon runs with `--no-bell`.
    #[error("the bell is off (rnicd --no-bell)")]
    BellOff,
    /// The engine has no eventfd to share.
    #[error("this engine has no bell")]
    NoBell,
    /// The client has no such object.
    #[error("no {0}")]
    NotFound(Object),
    /// `create_qp` named a PD or CQ the client does not have.
    #[error("PD or CQ not found")]
    NoPdOrCq,
    /// `create_qp` named an SRQ the client does not have on that PD.
    #[error("no SRQ {srq} on PD {pd}")]
    SrqNotOnPd {
        /// The SRQ asked for.
        srq: u32,
        /// The QP's PD.
        pd: u32,
    },
    /// Objects still use the PD.
    #[error("the PD still has MRs, MWs, QPs, AHs or SRQs")]
    PdInUse,
    /// QPs still use the CQ.
    #[error("the CQ still has QPs")]
    CqInUse,
    /// QPs still use the SRQ.
    #[error("the SRQ still has QPs")]
    SrqInUse,
    /// Access flags this device does not know.
    #[error("unknown access flags {0:#x}")]
    AccessFlags(u32),
    /// A region of length 0, too long, or wrapping around.
    #[error("bad region: offset {offset:#x} length {len:#x}")]
    BadRegion {
        /// Where it starts in the memfd.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// The region's virtual address range wraps around.
    #[error("bad address {addr:#x} for length {len:#x}")]
    BadAddress {
        /// The client's address of the region.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// `ibv_mw_type` other than 1 or 2.
    #[error("unknown memory window type {0}")]
    MwType(u32),
    /// A queue size that is 0 or beyond the device's limit.
    #[error("bad {what}: {value}")]
    BadSize {
        /// Which size.
        what: &'static str,
        /// The size asked for.
        value: u32,
    },
    /// The device has one port, 1.
    #[error("no port {0} (the device has one port: 1)")]
    NoPort(u8),
    /// An address vector the wire cannot carry.
    #[error(transparent)]
    Ah(#[from] AhError),
    /// The transport refused the verb.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The engine could not run the verb.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Shared memory or a descriptor operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The RDMA CM refused the request.
    #[error(transparent)]
    Cm(#[from] super::cm::CmRequestError),
}
