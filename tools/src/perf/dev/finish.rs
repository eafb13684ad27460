//! The end of a test on a real interface: the closing lines between two
//! rnic sides, the report each side prints, and the files it writes.

use super::exchange::{BwReport, Peer};
use super::{dev_note, rnic, Outcome};
use crate::netdev::NetDev;
use crate::perf::request::PerfRequest;
use crate::perf::{title, Mode, Settings, SizeResult, Verb};
use crate::{report, stats, CliError};
use serde_json::{json, Value};
use std::time::Duration;

/// perftest's report of one size: MB/s (2^20) or Gb/s, Mpps.
pub(super) fn bw_report_of(s: &Settings, r: &SizeResult, gbits: bool) -> BwReport {
    BwReport {
        size: r.bytes as u64,
        iters: if s.duration.is_some() {
            r.iterations
        } else {
            s.iters * s.qps as u64
        },
        bw_peak: report::bw_value(r.peak_bps, gbits),
        bw_avg: report::bw_value(r.avg_bps, gbits),
        msg_rate: r.msg_rate / 1e6,
    }
}

/// The client's report, as the server prints it: numbers, not garbage.
pub(super) fn check_report(r: &BwReport, s: &Settings) -> Result<(), CliError> {
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    if !(ok(r.bw_peak) && ok(r.bw_avg) && ok(r.msg_rate)) || r.size == 0 {
        return Err(CliError::new(format!(
            "the client's report is malformed: {r:?}"
        )));
    }
    if s.sizes.last().is_some_and(|&l| l as u64 != r.size) {
        eprintln!(
            "rnic: the client's last size is {} bytes, this server's {:?}: start both with the same -s/-a",
            r.size,
            s.sizes.last()
        );
    }
    Ok(())
}

/// A result line built from the numbers of perftest's report.
fn result_of_report(r: &BwReport, gbits: bool) -> SizeResult {
    let unit = if gbits {
        1e9 / 8.0
    } else {
        (1u64 << 20) as f64
    };
    SizeResult {
        bytes: r.size as usize,
        iterations: r.iters,
        elapsed: Duration::ZERO,
        samples: Vec::new(),
        hist: crate::perf::new_histogram(),
        peak_bps: r.bw_peak * unit,
        avg_bps: r.bw_avg * unit,
        msg_rate: r.msg_rate * 1e6,
    }
}

pub(super) fn finish(
    req: &PerfRequest,
    s: &Settings,
    mut nd: NetDev,
    mut peer: Peer,
    out: Outcome,
    ops: u64,
) -> Result<(), CliError> {
    let client = peer.client;
    let results_json: Vec<Value> = out
        .results
        .iter()
        .map(|r| report::result_json(s, r, req.report_gbits))
        .collect();
    let own_text = if out.results.is_empty() {
        String::new()
    } else if !client && s.mode == Mode::Bw {
        report::bw_table(&out.results, req.report_gbits)
    } else {
        report::text(s, &out.results, req.report_gbits)
    };
    let local = nd.json(if client { "client" } else { "server" });
    let mut remote = Value::Null;
    let mut shown = own_text.clone();
    let mut results_doc = Value::Array(results_json.clone());
    if peer.rnic() {
        if client {
            let done =
                json!({"results": results_json, "report": own_text, "device": local, "ops": ops});
            peer.ctrl.send_line(&format!("rnic-done {done}"))?;
            let v = rnic::recv_json(&mut peer, "rnic-done ")?;
            if let Some(e) = v["error"].as_str() {
                return Err(CliError::new(format!("the server's data check: {e}")));
            }
            remote = v["device"].clone();
        } else {
            let v = rnic::recv_json(&mut peer, "rnic-done ")?;
            let checked = rnic::server_checks(s, &nd, v["ops"].as_u64().unwrap_or(0));
            let err = checked.err().map(|e| e.to_string());
            peer.ctrl.send_line(&format!(
                "rnic-done {}",
                json!({"device": local, "error": err})
            ))?;
            if let Some(e) = err {
                return Err(CliError::new(format!("data check: {e}")));
            }
            remote = v["device"].clone();
            // the ping-pong and SEND servers measured for themselves
            if out.results.is_empty() {
                shown = v["report"].as_str().unwrap_or("").to_string();
                results_doc = v["results"].clone();
            }
        }
    } else if !client && s.mode == Mode::Lat && matches!(s.verb, Verb::Read | Verb::Atomic) {
        shown = format!(
            " (the client measures: a {} server only lends its memory and prints no result, as perftest's)\n{}\n",
            title(s.verb, s.mode),
            report::RESULT_LINE
        );
    } else if let Some(r) = &out.peer_report {
        let r = result_of_report(r, req.report_gbits);
        shown = report::bw_table(std::slice::from_ref(&r), req.report_gbits);
        results_doc = Value::Array(vec![report::result_json(s, &r, req.report_gbits)]);
    }
    nd.stop();
    crate::say(&shown)?;
    let mut devices = vec![local];
    if !remote.is_null() {
        devices.push(remote);
    }
    let devices = Value::Array(devices);
    if let Some(p) = &req.hgrm {
        if out.results.is_empty() {
            eprintln!("rnic: --hgrm: the client keeps the histograms; give it to the client");
        }
        report::write_hgrms(p, &out.results)?;
    }
    if let Some(p) = &req.plot {
        if out.results.is_empty() {
            eprintln!("rnic: --plot: the client keeps the histograms; give it to the client");
        } else {
            report::write_plot(p, s, &dev_note(&nd), &out.results)?;
        }
    }
    if let Some(p) = &req.pcap {
        eprintln!(
            "rnic: wrote {} (the first {} frames the port sent or received)",
            p.display(),
            req.pcap_frames
        );
    }
    if let Some(p) = &req.json {
        let doc = dev_json_doc(
            req,
            s,
            &nd,
            if client { "client" } else { "server" },
            peer.version.as_ref().map(|v| v.text.clone()),
            results_doc,
            devices.clone(),
        );
        report::write_json(p, &doc)?;
    }
    stats::save_or_warn(&req.command, devices);
    Ok(())
}

/// The JSON document of a run on real interfaces.
fn dev_json_doc(
    req: &PerfRequest,
    s: &Settings,
    nd: &NetDev,
    role: &str,
    peer_version: Option<String>,
    results: Value,
    devices: Value,
) -> Value {
    let mut doc = report::json_head(req, s, &dev_note(nd), results, devices);
    doc["role"] = role.into();
    doc["interface"] = nd.ifname.clone().into();
    doc["backend"] = json!(nd.backend);
    doc["peer_version"] = json!(peer_version);
    doc
}
