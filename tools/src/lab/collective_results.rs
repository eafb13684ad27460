//! A collective's results: each iteration's completion time as
//! `collective.csv` (`iteration,time_us`) and `collective.svg`, its
//! statistics in `summary.json` (`collective`), on the page and in the
//! output.

use super::run_info::{CollectiveRun, Plot, RunInfo};
use super::LabError;
use crate::report::{write_file, xy_svg, Labels, Series};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// The `q` quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[i - 1]
}

/// The statistics of the completion times, and the bandwidths at the
/// median: algorithm bandwidth = bytes / time (as nccl-tests reports
/// it), bus bandwidth = that × 2(N−1)/N for an allreduce (a ring moves
/// each byte that often over each link) and × (N−1)/N for an alltoall.
pub fn summary(run: &CollectiveRun, ranks: usize) -> Value {
    let mut v = run.times_us.clone();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return json!({ "kind": run.workload.word(), "iterations": 0 });
    }
    let median = quantile(&v, 0.5);
    let factor = run.bus_factor(ranks);
    let algbw = f64::from(run.size) * 8.0 / median; // bits per µs = Mbit/s
    let mut endpoints = run.endpoints.clone();
    endpoints.sort();
    endpoints.dedup();
    json!({
        "kind": run.workload.word(),
        "ranks": ranks,
        "size_bytes": run.size,
        "ucx_tls": run.ucx_tls.word(),
        "iterations": v.len(),
        "median_us": median,
        "p99_us": quantile(&v, 0.99),
        "min_us": v[0],
        "max_us": v[v.len() - 1],
        "algbw_mbits": algbw,
        "busbw_mbits": algbw * factor,
        "ucx_endpoints": endpoints,
    })
}

/// Writes `collective.csv` and `collective.svg` (completion time per
/// iteration); the plot, for the page.
pub fn write(out: &Path, info: &RunInfo, run: &CollectiveRun) -> Result<Plot, LabError> {
    let mut csv = String::from("iteration,time_us\n");
    for (i, t) in run.times_us.iter().enumerate() {
        let _ = writeln!(csv, "{i},{t:.1}");
    }
    write_file(&out.join("collective.csv"), csv)?;
    let series = vec![Series {
        name: format!(
            "{} of {} B, {} ranks, UCX {}",
            run.workload.word(),
            run.size,
            info.hosts.len(),
            run.ucx_tls.word()
        ),
        points: run
            .times_us
            .iter()
            .enumerate()
            .map(|(i, t)| (i as f64, *t))
            .collect(),
    }];
    let labels = Labels {
        title: "Collective completion time per iteration (slowest rank)",
        x: "iteration",
        y: "µs",
        log_y: false,
        log_x: false,
    };
    write_file(&out.join("collective.svg"), xy_svg(&labels, &series))?;
    Ok(Plot {
        stem: "collective",
        title: "Collective completion time per iteration (slowest rank)",
        y: "µs",
        series,
    })
}

/// The collective's statistics, one line.
pub fn line(c: &Value) -> String {
    if c["iterations"].as_u64().unwrap_or(0) == 0 {
        return format!(
            "{}: no iteration completed",
            c["kind"].as_str().unwrap_or("?")
        );
    }
    let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
    format!(
        "{} of {} B on {} ranks over UCX {}: {} iterations, completion median {:.0} µs, p99 {:.0}, min {:.0}, max {:.0}; algbw {:.1} Mbit/s, busbw {:.1} Mbit/s",
        c["kind"].as_str().unwrap_or("?"),
        c["size_bytes"],
        c["ranks"],
        c["ucx_tls"].as_str().unwrap_or("?"),
        c["iterations"],
        f("median_us"),
        f("p99_us"),
        f("min_us"),
        f("max_us"),
        f("algbw_mbits"),
        f("busbw_mbits"),
    )
}

/// Adds a collective run's plot (first) and its `collective` and
/// `fallback` entries to the results `write` makes.
pub fn add(
    out: &Path,
    info: &RunInfo,
    snaps: &[super::sample::Snapshot],
    plots: &mut Vec<Plot>,
    sum: &mut Value,
) -> Result<(), LabError> {
    let Some(run) = info.collective else {
        return Ok(());
    };
    plots.insert(0, write(out, info, run)?);
    let c = summary(run, info.hosts.len());
    sum["fallback"] = super::fallback::signs(info, snaps, &c["ucx_endpoints"]);
    sum["collective"] = c;
    Ok(())
}

/// The page's part for a collective: its statistics and the fallback box.
pub fn html(sum: &Value, esc: fn(&str) -> String) -> String {
    let c = &sum["collective"];
    if c.is_null() {
        return String::new();
    }
    format!(
        "<h2>Collective</h2>\n<p>{}</p>\n{}",
        esc(&line(c)),
        super::fallback::html(&sum["fallback"], esc)
    )
}

/// The collective's lines in the output: its statistics and the signs.
pub fn report(sum: &Value) -> Vec<String> {
    if sum["collective"].is_null() {
        return Vec::new();
    }
    let mut v = vec![line(&sum["collective"])];
    v.extend(super::fallback::lines(&sum["fallback"]));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::workload::{UcxTls, Workload};

    #[test]
    fn statistics_and_bandwidths_of_the_times() {
        let run = CollectiveRun {
            workload: Workload::Allreduce,
            size: 1_000_000,
            ucx_tls: UcxTls::Rdma,
            times_us: (1..=100).rev().map(|i| f64::from(i) * 1000.0).collect(),
            endpoints: vec!["tcp/a".into(), "tcp/a".into()],
        };
        let s = summary(&run, 4);
        assert_eq!(s["median_us"], 50_000.0);
        assert_eq!(s["p99_us"], 99_000.0);
        assert_eq!(
            (s["min_us"].as_f64(), s["max_us"].as_f64()),
            (Some(1000.0), Some(100_000.0))
        );
        // 8 Mbit in 50 ms: 160 Mbit/s; a 4-rank ring: × 1.5
        assert_eq!(s["algbw_mbits"], 160.0);
        assert_eq!(s["busbw_mbits"], 240.0);
        assert_eq!(s["ucx_endpoints"], json!(["tcp/a"]));
        assert!(line(&s).contains("median 50000 µs"), "{}", line(&s));
    }
}
