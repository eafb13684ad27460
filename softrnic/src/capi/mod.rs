//! The C API (`include/softrnic.h`, built into `libsoftrnic.so`): verbs
//! with ibverbs-like names over the Rust client. Objects are opaque
//! pointers; functions return 0 or an errno value (or NULL). Panics never
//! cross the boundary.
//!
//! Every function takes its pointers from C. Each one's `# Safety`
//! section states what the caller promises; within that promise a NULL
//! pointer is always allowed and answered with EINVAL (or NULL), so the
//! `as_ref`/`as_mut` calls on handles below only ever see NULL or an
//! object this library boxed and has not freed.
//!
//! - [`device`]: open, close, device and port queries, asynchronous events.
//! - [`memory`]: protection domains, shared buffers, memory regions.
//! - [`cq`]: completion queues, polling and completion events.
//! - [`qp`]: queue pairs, address handles, shared receive queues.
//! - [`post`]: posting send and receive work requests.
//! - [`types`]: the `#[repr(C)]` structures of the header.
#![deny(missing_docs)]

pub mod cq;
pub mod device;
pub mod memory;
pub mod post;
pub mod qp;
pub mod types;

pub use cq::*;
pub use device::*;
pub use memory::*;
pub use post::*;
pub use qp::*;
pub use types::*;

use crate::client::Buffer;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// The shared buffers of one context (`srnic_alloc_buf`), freed with it.
type Bufs = Arc<Mutex<Vec<Buffer>>>;

/// Runs `f`, answering `fallback` if it panics: no unwinding crosses into C.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The object as a pointer C owns (NULL for none).
fn boxed<T>(v: Option<T>) -> *mut T {
    v.map(|v| Box::into_raw(Box::new(v)))
        .unwrap_or(std::ptr::null_mut())
}

/// Takes back a handle the C side gives up and destroys its object:
/// EINVAL for a null handle, `on_err` when the daemon refuses, EIO when
/// the destructor panics.
///
/// # Safety
/// `h` is null or came from [`boxed`] (`Box::into_raw`) and is not used
/// afterwards.
unsafe fn release<T, E>(
    h: *mut T,
    on_err: c_int,
    destroy: impl FnOnce(T) -> Result<(), E>,
) -> c_int {
    if h.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: per the contract `h` came from Box::into_raw and its owner
    // gives it up, so this is the one Box that owns it.
    let b = unsafe { Box::from_raw(h) };
    guard(libc::EIO, || match destroy(*b) {
        Ok(()) => 0,
        Err(_) => on_err,
    })
}

/// How long a C caller's `timeout_ms` waits at a time (negative: no limit;
/// the caller loops in hour-long waits).
fn wait_time(timeout_ms: c_int) -> std::time::Duration {
    if timeout_ms < 0 {
        std::time::Duration::from_secs(3600)
    } else {
        std::time::Duration::from_millis(timeout_ms as u64)
    }
}
