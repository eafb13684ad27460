//! What ends a lab run early: one line each, with what failed and where.

use crate::report::WriteError;
use std::path::PathBuf;

/// Why `rnic lab` stopped.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces, veths, tc and nft need CAP_SYS_ADMIN and CAP_NET_ADMIN.
    #[error("rnic lab needs root (it creates network namespaces, links, qdiscs and nftables rules): run it with sudo")]
    NotRoot,
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    File {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    /// A setting out of its range or of the wrong form.
    #[error("{what}: {why}")]
    Setting { what: &'static str, why: String },
    /// A program the lab needs is not installed.
    #[error("`{prog}` is not installed ({package}): {source}")]
    Missing {
        prog: String,
        package: &'static str,
        source: std::io::Error,
    },
    /// A setup command (ip, tc, nft) failed.
    #[error("{cmd}: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("cannot start {prog}: {source}")]
    Spawn {
        prog: String,
        source: std::io::Error,
    },
    /// A command through a machine's launcher failed ([`super::machines`]).
    #[error("machine {machine}: {what} through `{launcher}` failed: {why}")]
    Machine {
        machine: String,
        what: &'static str,
        launcher: String,
        why: String,
    },
    /// An rnicd ended before or during the run.
    #[error("rnicd of {host} ended ({status}): {log}")]
    Rnicd {
        host: String,
        status: String,
        log: String,
    },
    /// A workload process failed.
    #[error("{what} on {host} failed ({status}); its output is in {}", .log.display())]
    Workload {
        what: &'static str,
        host: String,
        status: String,
        log: PathBuf,
    },
    /// A condition the run waits for did not come.
    #[error("{what}: not within {secs} s")]
    Timeout { what: String, secs: u64 },
    /// SIGINT or SIGTERM: the lab was torn down.
    #[error("interrupted by signal {0}: the lab was torn down")]
    Interrupted(i32),
    /// The daemon's statistics could not be read.
    #[error("statistics of {host}: {source}")]
    Stats {
        host: String,
        source: softrnic::Error,
    },
    /// The switch stage could not read the qdiscs or its ports.
    #[error("the switch stage: {0}")]
    Netlink(#[from] nic::io::netlink::NetlinkError),
    /// The latency probe's thread panicked.
    #[error("the latency probe's thread ended abnormally")]
    ProbeThread,
    /// The switch stage ended before the run did.
    #[error("the switch stage stopped: {0}")]
    PfcStage(String),
    /// A trace file that does not parse ([`super::trace`]): the line's
    /// number from 1, 0 for the whole file.
    #[error("{}{}: {why}", .path.display(), super::trace::line_suffix(*.line))]
    Trace {
        path: PathBuf,
        line: usize,
        why: super::trace::TraceError,
    },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl crate::Failure for LabError {}
