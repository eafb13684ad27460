//! The `rnic` command's library: thin commands over one QP bring-up
//! ([`qp`]) and one report module ([`report`]). The engine can reuse
//! [`check`].
//!
//! The modules in layers; each imports only from later entries of its own
//! layer and from the layers below it:
//!
//! | layer | modules |
//! |---|---|
//! | commands | [`lab`] (`rnic lab`: a fabric of namespaces, its workload and results folder), [`demo`], [`perf`]'s command (`rnic perf`: [`perf::run`]; on the in-process loopback [`perf::local`], on a real interface [`perf::dev`], which also holds `rnic memcheck`), [`pingpong`], [`pcapcmd`], [`stats`], [`exec`] |
//! | views | [`view`] (the devices in `/sys/class` and `/dev`, and the table the netlink shim answers RDMA netlink from, for `rnic exec`) |
//! | runs | [`netdev`] (an RNIC on a real interface), [`report`], [`perf`]'s vocabulary (the settings and results of a run, and [`perf::request`], which the reports and `pingpong` share), [`loopback`] (two RNICs in this process), [`oob`] (the TCP exchange) |
//! | QP bring-up | [`qp`] |
//! | captures | [`check`], [`capture`] (the `conform` crate's) |
//! | plumbing | [`progress`], [`out`], [`error`] |

pub mod demo;
pub mod error;
pub mod exec;
pub mod lab;
pub mod loopback;
pub mod netdev;
pub mod oob;
pub mod out;
pub mod pcapcmd;
pub mod perf;
pub mod pingpong;
pub mod progress;
pub mod qp;
pub mod report;
pub mod stats;
pub mod view;

pub use conform::{capture, check};
pub use error::{CliError, Failure};
pub use out::say;
