//! QP bring-up, the one sequence every command follows: create a QP on the
//! device's PD and one CQ, RESET → INIT (receives may be posted from there
//! on), and — once the peer's QPN and first PSN are known — INIT → RTR →
//! RTS, with the attributes rdma-core's pingpong examples and perftest use.
//!
//! The steps are functions over a [`Rnic`]: the in-process loopback calls
//! them on its two devices directly, and `NetDev` (`netdev.rs`) runs them
//! on its engine's thread through the engine's control path.

use nic::device::Rnic;
use nic::engine::EngineError;
use nic::transport::QpInit;
use nic::verbs::VerbsError;
use nic::verbs::{access, AhAttr, QpAttr, QpState, QpType};

/// The Q_Key of ibv_ud_pingpong (and of our UD QPs).
pub const UD_QKEY: u32 = 0x1111_1111;

/// A step of the bring-up that failed.
#[derive(Debug, thiserror::Error)]
pub enum QpError {
    /// The device refused to create the QP.
    #[error("create_qp: {0}")]
    Create(#[source] VerbsError),
    /// RESET → INIT failed.
    #[error("QP {qpn:#x} to INIT: {source}")]
    Init { qpn: u32, source: VerbsError },
    /// INIT → RTR → RTS failed.
    #[error("connecting QP {qpn:#x}: {source}")]
    Connect { qpn: u32, source: VerbsError },
    /// The engine that runs the device did not take the call.
    #[error("the engine: {0}")]
    Engine(#[from] EngineError),
}

impl crate::Failure for QpError {}

/// How to connect a QP (INIT → RTR → RTS).
#[derive(Clone, Copy, Debug)]
pub struct Connect {
    pub qp_type: QpType,
    pub ah: AhAttr,
    pub mtu: u32,
    pub dest_qpn: u32,
    /// Our first PSN and the peer's.
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// Initiator depth (RTS) and responder resources (RTR).
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
}

impl Connect {
    /// perftest's attributes: 16 outstanding READs/atomics each way, RNR
    /// timer 12, local ACK timeout 14; PSNs 0 until set.
    pub fn new(qp_type: QpType, ah: AhAttr, mtu: u32, dest_qpn: u32) -> Connect {
        Connect {
            qp_type,
            ah,
            mtu,
            dest_qpn,
            sq_psn: 0,
            rq_psn: 0,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            timeout: 14,
        }
    }

    /// The same, with our first PSN and the peer's.
    pub fn with_psns(self, sq_psn: u32, rq_psn: u32) -> Connect {
        Connect {
            sq_psn,
            rq_psn,
            ..self
        }
    }
}

/// What a QP is created with: `depth` send and receive work requests, both
/// queues completing on `cq`, no SRQ, completions only where asked.
pub fn qp_init(qp_type: QpType, pd: u32, cq: u32, depth: u32) -> QpInit {
    QpInit {
        qp_type,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: depth,
        max_recv_wr: depth,
        sq_sig_all: false,
    }
}

/// Creates a QP (see [`qp_init`]); returns its number.
pub fn create(r: &mut Rnic, qp_type: QpType, pd: u32, cq: u32, depth: u32) -> Result<u32, QpError> {
    r.create_qp(qp_init(qp_type, pd, cq, depth))
        .map_err(QpError::Create)
}

/// RESET → INIT: every remote access right (RC, UC) or Q_Key
/// [`UD_QKEY`] (UD).
pub fn init(r: &mut Rnic, qpn: u32, qp_type: QpType) -> Result<(), QpError> {
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let ud = qp_type == QpType::Ud;
    r.modify_qp(
        qpn,
        &QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: (!ud).then_some(all),
            qkey: ud.then_some(UD_QKEY),
            ..Default::default()
        },
    )
    .map_err(|source| QpError::Init { qpn, source })
}

/// INIT → RTR → RTS with the peer's QPN and PSN (RC and UC), or with just
/// our send PSN (UD), as the pingpong examples and perftest do. Errors are
/// returned, never panics: this runs on the engine's thread too.
pub fn connect(r: &mut Rnic, qpn: u32, c: &Connect) -> Result<(), QpError> {
    let rtr = match c.qp_type {
        QpType::Rc => QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(c.ah),
            path_mtu: Some(c.mtu),
            dest_qpn: Some(c.dest_qpn),
            rq_psn: Some(c.rq_psn),
            max_dest_rd_atomic: Some(c.max_dest_rd_atomic),
            min_rnr_timer: Some(c.min_rnr_timer),
            ..Default::default()
        },
        QpType::Uc => QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(c.ah),
            path_mtu: Some(c.mtu),
            dest_qpn: Some(c.dest_qpn),
            rq_psn: Some(c.rq_psn),
            ..Default::default()
        },
        QpType::Ud => QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        },
    };
    let rts = match c.qp_type {
        QpType::Rc => QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(c.sq_psn),
            timeout: Some(c.timeout),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(c.max_rd_atomic),
            ..Default::default()
        },
        _ => QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(c.sq_psn),
            ..Default::default()
        },
    };
    r.modify_qp(qpn, &rtr)
        .and_then(|()| r.modify_qp(qpn, &rts))
        .map_err(|source| QpError::Connect { qpn, source })
}
