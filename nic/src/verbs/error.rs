//! Why a verb was refused.

use super::{ModifyError, MwError, QpState};

/// Why a verb was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    #[error("no CQ {0}")]
    NoSuchCq(u32),
    #[error("no SRQ {0}")]
    NoSuchSrq(u32),
    #[error("SRQ {0} still has QPs")]
    SrqInUse(u32),
    #[error("no PD {0}")]
    NoSuchPd(u32),
    #[error("modify_qp: {0}")]
    Modify(#[from] ModifyError),
    #[error("the work queue is full")]
    QueueFull,
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    #[error("the QP is in state {0:?}, which does not accept this")]
    BadState(QpState),
    #[error("memory registration refused: {0}")]
    BadMr(&'static str),
    #[error("completion queue overrun")]
    CqOverrun,
    #[error("{0}")]
    Mw(#[from] MwError),
}
