//! Verbs objects: each is the `ibv_*` structure the application sees
//! (first, so the application's pointer is the object) followed by the
//! client library's handle. Control verbs are requests to the daemon;
//! QP attributes are checked there against the IBA state machine (IBA
//! 10.3.1, the attribute tables of 11.2.4.2 / `ibv_modify_qp(3)`).
//!
//! One module per object kind: [`memory`] (PD, MR, MW, fork), [`cq`]
//! (completion channels and CQs), [`qp`], [`srq`], [`ah`], [`events`]
//! (asynchronous events), [`outstanding`] (the WRs a failed device
//! flushes).

pub mod ah;
pub mod cq;
pub mod events;
pub mod memory;
pub mod outstanding;
pub mod qp;
pub mod srq;

pub use ah::*;
pub use cq::*;
pub use events::*;
pub use memory::*;
pub use outstanding::*;
pub use qp::*;
pub use srq::*;

use crate::abi::*;
use crate::device::{resolve_mac, Ctx, ROCE_V2_GID_INDEX};
use crate::{complain, errno_of, null_errno, set_errno};
use libc::{c_int, c_void};
use nic::verbs::{AhAttr, QpAttr, QpState};
use softrnic::client::{Buffer, QpInitAttr};
use softrnic::QpKind;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use wire::Gid;

/// Most bytes one inline send may carry (`cap.max_inline_data`).
pub const MAX_INLINE: u32 = 512;

/// The object as a pointer the application owns.
fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Locks `m`, taking the data of a poisoned lock as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
