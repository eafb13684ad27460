//! # nic — the soft RNIC
//!
//! Layers (see `../shared/DESIGN.md`): `verbs` (PD, MR, CQ, SRQ, QP state
//! machine), `transport` (requester / responder / completer, sans-I/O:
//! `handle_*` in, `poll_*` out, `now` passed in), `cc` (DCQCN, PFC), `io`
//! (ports), `engine` (the polling loop). The simulators that drive this code
//! on a virtual clock are the `sim` crate's (a dev-dependency of the tests).

pub mod cc;
pub mod engine;
pub mod io;
pub mod replay;
pub mod time;
pub mod transport;
pub mod verbs;

pub use time::Instant;
pub use wire;
