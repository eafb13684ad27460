//! # nic — the soft RNIC
//!
//! The layers (ARCHITECTURE.md): `device` (the verbs API
//! over the resource tables, the data-path entry points), `transport` (per
//! QP: requester / responder / completer), `verbs` (objects, the QP state
//! machine), `cc` (DCQCN, PFC), `cm` (the connection manager protocol) —
//! all sans-I/O: `handle_*` in, `poll_*` out, `now` passed in — and `io`
//! (ports) and `engine` (the polling loop). The simulators that drive this
//! code on a virtual clock are the `sim` crate's (a dev-dependency of the
//! tests).

pub mod cc;
pub mod cm;
pub mod device;
pub mod engine;
pub mod io;
pub mod rate;
pub mod replay;
pub mod time;
pub mod transport;
pub mod verbs;

pub use time::Instant;
pub use wire;
