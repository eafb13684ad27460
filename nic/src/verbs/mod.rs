//! Verbs objects: memory, protection domains and memory regions, completion
//! queues, work requests and completions, QP attributes and state machine.

pub mod cq;
mod error;
mod events;
pub mod memory;
pub mod mr;
pub mod qp;
mod srq;
pub mod wr;

pub use cq::{Cq, CqOverrun};
pub use error::VerbsError;
pub use events::{Affiliated, AsyncEvent};
pub use memory::{HeapMemory, Memory};
pub use mr::{access, KeyError, Mr, MrSpec, MrTable, Mw, MwBind, MwBinding, MwError, MwType};
pub use qp::{check_modify, ModifyError, QpAttr, QpState, MTUS};
pub use srq::Srq;
pub use wire::QpType;
pub use wr::{
    AhAttr, AhError, RecvWr, SendFlags, SendOp, SendWr, Sge, Sgl, UdDest, Wc, WcOpcode, WcStatus,
    MAX_SGE,
};
