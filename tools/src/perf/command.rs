//! `rnic perf`'s command, apart from the vocabulary in `mod.rs`: the
//! reports use that vocabulary, and the command uses the reports.

use super::request::{self, PerfRequest};
use super::{dev, local};
use crate::{netdev, report, CliError};

/// Runs `rnic perf`: checks what it was asked, then runs it on the
/// in-process loopback ([`local::run`]) or a real interface ([`dev::run`]).
pub fn run(req: &PerfRequest) -> Result<(), CliError> {
    let s = request::settings(req)?;
    report::check_dirs(
        [&req.json, &req.hgrm, &req.plot, &req.pcap, &req.dump_mem]
            .into_iter()
            .flatten()
            .map(|p| p.as_path()),
    )?;
    netdev::parse_cc(&req.cc, req.pfc_tx.as_deref())?;
    if req.loopback && (req.cc != "nvidia" || req.pfc_tx.is_some()) {
        return Err(CliError::usage(
            "--cc and --pfc-tx set up a real interface's NIC (--dev); the loopback has no congestion",
        ));
    }
    if req.loopback && req.dump_mem.is_some() {
        return Err(CliError::usage(
            "--dump-mem records a real interface's test (--dev) for `rnic memcheck`; the loopback checks its own data",
        ));
    }
    if !req.loopback {
        if req.peer.is_none() && req.dev.is_none() {
            return Err(CliError::usage(
                "the server needs its interface: --dev IFACE (or --loopback for the in-process loopback)",
            ));
        }
        return dev::run(req, s);
    }
    local::run(req, &s)
}
