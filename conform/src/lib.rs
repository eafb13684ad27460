//! # conform — is this capture conformant RoCEv2?
//!
//! Reads capture files ([`capture`]: classic pcap and pcapng) and checks
//! every frame against the rules of IBA and RoCEv2 ([`check`]). It sits
//! between `wire` (which it uses to parse) and its two users: the `rnic
//! pcap` commands in `tools`, and the tests of `nic` that check what a real
//! port sent — so neither has to depend on the other.

pub mod capture;
pub mod check;

use capture::{CaptureError, CaptureReader};
use check::{summary_line, Checker};
use std::path::{Path, PathBuf};

/// Why a capture file did not pass [`check_file`].
#[derive(Debug, thiserror::Error)]
pub enum CheckFileError {
    /// The file could not be opened or is not a capture.
    #[error("{0}")]
    Open(CaptureError),
    /// A record of the file could not be read.
    #[error("{}: {err}", path.display())]
    Read { path: PathBuf, err: CaptureError },
    /// A frame broke a rule: the first such frame, described.
    #[error("{}: {problem}", path.display())]
    Broken { path: PathBuf, problem: String },
    /// The file holds no frames at all.
    #[error("{}: the capture holds no frames", path.display())]
    Empty { path: PathBuf },
}

/// Checks every frame of the capture at `path`, stopping at the first one
/// that breaks a rule; on success, one line summing up what it held.
/// `lossy`: the capture was taken behind a lossy hop, so packets missing
/// from it are counted, not failures ([`Checker::lossy`]).
pub fn check_file(path: &Path, lossy: bool) -> Result<String, CheckFileError> {
    let reader = CaptureReader::open(path).map_err(CheckFileError::Open)?;
    let mut checker = if lossy {
        Checker::lossy()
    } else {
        Checker::new()
    };
    for rec in reader {
        let rec = rec.map_err(|err| CheckFileError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        if let Some(problem) = checker.frame(&rec).describe_problem() {
            return Err(CheckFileError::Broken {
                path: path.to_path_buf(),
                problem,
            });
        }
    }
    if checker.stats.frames == 0 {
        return Err(CheckFileError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(summary_line(&checker.stats, checker.streams()))
}
