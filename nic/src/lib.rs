//! # nic — the soft RNIC
//!
//! Layers (see `../shared/DESIGN.md`): `verbs` (PD, MR, CQ, SRQ, QP state
//! machine), `transport` (requester / responder / completer, sans-I/O),
//! `cc` (DCQCN, PFC, pacing), `io` (ports), `engine` (polling threads).
//!
//! Status: the transport and everything above it are the subject of the
//! open transport, engine and congestion issues; this crate only re-exports
//! the codec so far.

pub use wire;
