//! `rnic perf {write|read|send|atomic} {bw|lat}`: checks the request, then
//! runs on the in-process loopback (here) or on a real interface
//! ([`crate::devperf`]).

use crate::loopback::{Loopback, LOOPBACK_NOTE};
use crate::perf::loopback::run_sizes;
use crate::perf::request::{settings, PerfRequest};
use crate::perf::{conn_name, title, Settings, SizeResult};
use crate::progress::Progress;
use crate::{report, stats, CliError};
use serde_json::Value;

/// The parameter block printed before the results.
pub fn header(s: &Settings) -> String {
    let conn = conn_name(s.qp_type);
    let runs = match s.duration {
        Some(d) => format!("{} s per size", d.as_secs()),
        None => format!("{} per size", s.iters),
    };
    format!(
        "{line}\n{:>20}{}\n {LOOPBACK_NOTE}\n Method          : {}\n Device          : srnic0 <-> srnic1 (in-memory wire: no latency, unlimited bandwidth)\n local address   : srnic0 192.0.2.1 02:00:00:00:00:01 port 1\n remote address  : srnic1 192.0.2.2 02:00:00:00:00:02 port 1\n Number of qps   : {:<12} Transport type : RoCEv2 (UDP 4791, ICRC computed and verified)\n Connection type : {conn:<12} Mtu            : {}[B]\n TX depth        : {:<12} Iterations     : {runs}\n",
        "",
        title(s.verb, s.mode),
        s.method(),
        s.qps,
        s.mtu,
        s.tx_depth,
        line = report::RESULT_LINE
    )
}

/// The JSON document of a run.
pub fn json_doc(req: &PerfRequest, s: &Settings, results: &[SizeResult], lb: &Loopback) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|r| report::result_json(s, r, req.report_gbits))
        .collect();
    report::json_head(
        req,
        s,
        LOOPBACK_NOTE,
        results.into(),
        report::devices_json(lb),
    )
}

/// Runs `rnic perf`.
pub fn run(req: &PerfRequest) -> Result<(), CliError> {
    let s = settings(req)?;
    report::check_dirs(
        [&req.json, &req.hgrm, &req.plot, &req.pcap, &req.dump_mem]
            .into_iter()
            .flatten()
            .map(|p| p.as_path()),
    )?;
    crate::netdev::parse_cc(&req.cc, req.pfc_tx.as_deref())?;
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
        return crate::devperf::run(req, s);
    }
    crate::say(&header(&s))?;
    let mut lb = Loopback::new(s.mem_len());
    let mut progress = Progress::new(!req.no_progress);
    let results = run_sizes(&mut lb, &s, &mut progress, 0.0, 1.0)?;
    progress.finish();
    crate::say(&report::text(&s, &results, req.report_gbits))?;
    if let Some(p) = &req.hgrm {
        report::write_hgrms(p, &results)?;
    }
    if let Some(p) = &req.plot {
        report::write_plot(p, &s, LOOPBACK_NOTE, &results)?;
    }
    if let Some(p) = &req.pcap {
        let frames = std::mem::take(&mut lb.wire.borrow_mut().recorded);
        crate::capture::write_pcap(p, &frames)
            .map_err(|e| CliError::new(format!("cannot write {}: {e}", p.display())))?;
        eprintln!(
            "rnic: wrote {} ({} frames of the warm-up)",
            p.display(),
            frames.len()
        );
    }
    if let Some(p) = &req.json {
        report::write_json(p, &json_doc(req, &s, &results, &lb))?;
    }
    stats::save_or_warn(&req.command, report::devices_json(&lb));
    Ok(())
}
