//! # nic — the soft RNIC
//!
//! Layers (see `../shared/DESIGN.md`): `verbs` (PD, MR, CQ, SRQ, QP state
//! machine), `transport` (requester / responder / completer, sans-I/O:
//! `handle_*` in, `poll_*` out, `now` passed in), `sim` (a deterministic
//! simulator driving endpoints built from the real code).

pub mod cc;
pub mod cm;
pub mod device;
pub mod engine;
pub mod fabric;
pub mod io;
pub mod replay;
pub mod sim;
pub mod time;
pub mod transport;
pub mod verbs;

pub use time::Instant;
pub use wire;
