//! A drop-in `librdmacm.so.1`: rdma-core 44's ABI (exported names, symbol
//! versions, struct layouts) with softrnic's rnicd as the connection
//! manager, so an unmodified program linked against librdmacm finds its
//! IDs, events and connections there.
//!
//! - [`abi`]: the header's structures and constants (checked against the
//!   installed `<rdma/rdma_cma.h>` by `tests/abi_layout.rs`).
//! - `symbols`: which function carries which versioned name.
//! - [`backend`]: the CM commands and events this library needs from the
//!   daemon ([`backend::CmBackend`]), and what answers when none is there;
//!   [`rnicd`]: rnicd's, the one [`global`] (this file, the library's
//!   edge) passes to [`state::Lib::new`].
//! - [`state`]: what the library keeps: [`state::Lib`] (the backend,
//!   libibverbs, the ID table), each ID's state and each event handed
//!   out, and their acknowledgement count.
//! - [`id`]: IDs made and destroyed; [`channel`]: event channels (a real
//!   descriptor: poll/epoll/O_NONBLOCK work) and the daemon's events on
//!   them; [`deliver`]: those events turned into `rdma_cm_event`s, getting
//!   and acknowledging them.
//! - `conn`: bind, resolve, listen, connect, accept, reject, disconnect
//!   and the small verbs on an ID.
//! - [`qp`]: an ID's QP, CQs and SRQ and the QP's state changes;
//!   [`ep`]: `rdma_create_ep`; [`verbs`]: the libibverbs calls they make
//!   (looked up at run time in `libibverbs.so.1`).
//! - [`addrinfo`]: `rdma_getaddrinfo` / `rdma_freeaddrinfo`.
//! - [`ud`]: the address of a UD ID's events.
//! - [`unsupported`]: rsocket, multicast, ECE — a clear error each.
//!
//! The files' imports form no cycle (`tests/file_graph.rs`). Each arrow
//! reads "uses"; the leaves `abi`, `backend`, `errno`, `live` and
//! `sockaddr`, which most use, are left out:
//!
//! ```text
//! ep ─────→ conn ─→ deliver ─→ id ─→ channel ─→ state ─→ verbs
//! unsupported ─┘       └─→ qp, ud ─────────────→ state
//! ep, conn ─→ id, qp, state      conn ─→ channel
//! lib.rs ─→ state, rnicd, verbs  ep, id, channel, qp ─→ lib.rs (global)
//! ```
//!
//! Every exported function takes pointers from the application: each
//! checks them for NULL, and an ID or event channel pointer must name one
//! this library made and has not destroyed ([`live::Live`]: a stale one
//! is EINVAL, never dereferenced); errors come back as rdma-core returns
//! them (-1 with `errno` set, or NULL) with a one-line reason on stderr
//! where the errno alone would leave a caller guessing ([`errno`]).

pub mod abi;
pub mod addrinfo;
pub mod backend;
pub mod channel;
mod conn;
pub mod deliver;
pub mod ep;
pub mod errno;
pub mod id;
pub mod live;
pub mod qp;
pub mod rnicd;
mod sockaddr;
pub mod state;
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

use state::Lib;
use std::sync::{Arc, OnceLock};

/// The process's library: rnicd's connection manager and the
/// `libibverbs.so.1` the process loaded. The one place the backend is
/// chosen; the unit tests give [`Lib::new`] their fake instead.
pub fn global() -> &'static Arc<Lib> {
    static LIB: OnceLock<Arc<Lib>> = OnceLock::new();
    LIB.get_or_init(|| {
        Lib::new(
            Box::new(rnicd::Rnicd::default()),
            Box::new(verbs::Libibverbs::default()),
        )
    })
}
