//! A drop-in `librdmacm.so.1`: rdma-core 44's ABI (exported names, symbol
//! versions, struct layouts) with softrnic's rnicd as the connection
//! manager, so an unmodified program linked against librdmacm finds its
//! IDs, events and connections there.
//!
//! - [`abi`]: the header's structures and constants (checked against the
//!   installed `<rdma/rdma_cma.h>` by `tests/abi_layout.rs`).
//! - `symbols`: which function carries which versioned name.
//! - [`backend`]: the CM commands and events this library needs from the
//!   daemon ([`backend::CmBackend`]), and what answers when none is there.
//! - [`channel`]: event channels (a real descriptor: poll/epoll/O_NONBLOCK
//!   work), getting and acknowledging events.
//! - [`id`]: CM IDs, their per-ID state, the daemon's events turned into
//!   `rdma_cm_event`s; `conn`: bind, resolve, listen, connect, accept,
//!   reject, disconnect and the small verbs on an ID.
//! - [`qp`]: an ID's QP, CQs and SRQ and the QP's state changes;
//!   [`ep`]: `rdma_create_ep`; [`verbs`]: the libibverbs calls they make
//!   (looked up at run time in `libibverbs.so.1`).
//! - [`addrinfo`]: `rdma_getaddrinfo` / `rdma_freeaddrinfo`.
//! - [`ud`]: the address of a UD ID's events.
//! - [`unsupported`]: rsocket, multicast, ECE — a clear error each.
//!
//! Every exported function takes pointers from the application: each
//! checks them for NULL, and an ID or event channel pointer must name one
//! this library made and has not destroyed ([`Live`]: a stale one is
//! EINVAL, never dereferenced); errors come back as rdma-core returns
//! them (-1 with `errno` set, or NULL) with a one-line reason on stderr
//! where the errno alone would leave a caller guessing.

pub mod abi;
pub mod addrinfo;
pub mod backend;
pub mod channel;
mod conn;
pub mod ep;
pub mod id;
pub mod qp;
pub mod rnicd;
mod sockaddr;
mod strings;
mod symbols;
pub mod ud;
pub mod unsupported;
pub mod verbs;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

pub use symbols::TABLE as SYMBOL_TABLE;

use libc::c_int;

/// Sets `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with `errno` = `e`: how librdmacm reports a failure.
pub(crate) fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// One line on stderr: why a call failed, when the errno alone would not
/// say.
pub(crate) fn complain(verb: &str, why: impl std::fmt::Display) {
    eprintln!("softrnic-rdmacm: {verb}: {why}");
}

/// The addresses of the objects of one kind (IDs, event channels) this
/// library handed out and has not freed. An application may pass a pointer
/// after destroying its object (perftest's `-R` client retries a refused
/// connection on the IDs it has just destroyed): such a pointer is refused,
/// not dereferenced.
pub struct Live(std::sync::Mutex<Option<std::collections::HashSet<usize>>>);

impl Live {
    pub const fn new() -> Live {
        Live(std::sync::Mutex::new(None))
    }

    fn set(&self) -> std::sync::MutexGuard<'_, Option<std::collections::HashSet<usize>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `p` was handed out.
    pub fn add<T>(&self, p: *const T) {
        self.set()
            .get_or_insert_with(Default::default)
            .insert(p as usize);
    }

    /// `p` is about to be freed; false if it was not live.
    pub fn remove<T>(&self, p: *const T) -> bool {
        self.set().as_mut().is_some_and(|s| s.remove(&(p as usize)))
    }

    /// Whether `p` names a live object.
    pub fn has<T>(&self, p: *const T) -> bool {
        !p.is_null()
            && self
                .set()
                .as_ref()
                .is_some_and(|s| s.contains(&(p as usize)))
    }
}

impl Default for Live {
    fn default() -> Live {
        Live::new()
    }
}
