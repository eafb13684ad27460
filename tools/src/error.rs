//! The error the command reports before exiting non-zero: one line and an
//! exit status. Typed errors below the command line become one through
//! [`Failure`].

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

/// A typed error that ends the command as a failure (exit status 1) with
/// its message.
pub trait Failure: std::error::Error {}

impl<E: Failure> From<E> for CliError {
    fn from(e: E) -> CliError {
        CliError::new(e.to_string())
    }
}
