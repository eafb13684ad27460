//! The `rnic` command's library: capture checking, perftest-style runs on
//! the in-process loopback, reports. The capture reader and checker
//! are the `conform` crate's ([`capture`], [`check`]).

pub mod demo;
pub mod devperf;
pub mod exec;
pub mod loopback;
pub mod netdev;
pub mod oob;
pub mod pcapcmd;
pub mod perf;
pub mod perfcmd;
pub mod pingpong;
pub mod progress;
pub mod report;
pub mod stats;

pub use conform::{capture, check};

use std::fmt;

/// An error the command reports in one line before exiting non-zero.
#[derive(Debug)]
pub struct CliError {
    pub msg: String,
    /// Process exit status.
    pub code: i32,
}

impl CliError {
    /// A failure (exit status 1).
    pub fn new(msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            code: 1,
        }
    }

    /// A bad invocation (exit status 2, as for a usage error).
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            code: 2,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for CliError {}

/// Prints to stdout; when stdout is a closed pipe (`| head`), ends the
/// program quietly.
pub fn say(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    pcapcmd::write_or_quit(&mut out, format_args!("{text}"))?;
    let _ = out.flush();
    Ok(())
}
