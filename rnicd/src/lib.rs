//! rnicd: the daemon that owns a soft-RNIC and serves client processes
//! (the `softrnic` library) over the `ipc` crate's socket and rings. See
//! README.md.
//!
//! - [`server`]: one `Server` per device: the control socket, a thread per
//!   client, what each client owns and its cleanup, the RDMA CM service.
//! - [`dataplane`]: the engine hook that takes doorbells, fetches work
//!   requests from the rings and writes completions into CQ rings.
//! - [`line_rate`]: `--line-rate`, a port's link speed given rather than
//!   the interface's.
//! - `main.rs`: the `rnicd` binary (flags, ports, signals).

pub mod dataplane;
pub mod line_rate;
pub mod server;
