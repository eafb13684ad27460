//! Reports: perftest's tables, HDR percentiles, HdrHistogram's
//! percentile-distribution text (`.hgrm`), the JSON of results and
//! devices, an SVG plot ([`svg`]) and the files they go to ([`write_file`],
//! [`write_json`], ...).

mod files;
mod plot;
mod xyplot;

pub use files::{
    check_dirs, per_size_path, write_file, write_hgrms, write_json, write_plot, WriteError,
};
pub use plot::svg;
pub use xyplot::{parse_csv, read_csv, xy_svg, CsvError, Labels, Series};

use crate::loopback::Loopback;
use crate::perf::request::PerfRequest;
use crate::perf::{title, Mode, Settings, SizeResult};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// perftest's separator line.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's MB is 2^20 bytes (format_factor 0x100000); its Gb is 10^9 bits.
pub fn bw_unit(gbits: bool) -> &'static str {
    if gbits {
        "Gb/sec"
    } else {
        "MB/sec"
    }
}

pub fn bw_value(bytes_per_sec: f64, gbits: bool) -> f64 {
    if gbits {
        bytes_per_sec * 8.0 / 1e9
    } else {
        bytes_per_sec / 1_048_576.0
    }
}

/// Columns: each value starts where its heading starts.
fn table(headings: &[String], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = headings
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.len()))
                .max()
                .unwrap_or(0)
                .max(h.len())
        })
        .collect();
    let line = |cells: &[String]| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s += c;
            } else {
                let _ = write!(s, "{c:<w$}    ", w = widths[i]);
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headings);
    for r in rows {
        out += &line(r);
    }
    out
}

fn headings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// ib_write_lat's table.
pub fn lat_table(results: &[SizeResult]) -> String {
    let h = headings(&[
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]",
    ]);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let s = r.lat_stats();
            vec![
                r.bytes.to_string(),
                r.iterations.to_string(),
                format!("{:.2}", s.t_min),
                format!("{:.2}", s.t_max),
                format!("{:.2}", s.t_typical),
                format!("{:.2}", s.t_avg),
                format!("{:.2}", s.t_stdev),
                format!("{:.2}", s.p99),
                format!("{:.2}", s.p999),
            ]
        })
        .collect();
    format!("{RESULT_LINE}\n{}{RESULT_LINE}\n", table(&h, &rows))
}

/// ib_write_bw's table.
pub fn bw_table(results: &[SizeResult], gbits: bool) -> String {
    let u = bw_unit(gbits);
    let h = vec![
        "#bytes".to_string(),
        "#iterations".to_string(),
        format!("BW peak[{u}]"),
        format!("BW average[{u}]"),
        "MsgRate[Mpps]".to_string(),
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.bytes.to_string(),
                r.iterations.to_string(),
                format!("{:.2}", bw_value(r.peak_bps, gbits)),
                format!("{:.2}", bw_value(r.avg_bps, gbits)),
                format!("{:.6}", r.msg_rate / 1e6),
            ]
        })
        .collect();
    format!("{RESULT_LINE}\n{}{RESULT_LINE}\n", table(&h, &rows))
}

/// The HDR histogram's percentiles, one row per size.
pub fn hdr_table(results: &[SizeResult]) -> String {
    let h = headings(&[
        "#bytes",
        "p50[usec]",
        "p90[usec]",
        "p99[usec]",
        "p99.9[usec]",
        "p99.99[usec]",
        "max[usec]",
    ]);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let mut row = vec![r.bytes.to_string()];
            row.extend(r.hdr_percentiles().iter().map(|(_, v)| format!("{v:.3}")));
            row
        })
        .collect();
    format!("{}{RESULT_LINE}\n", table(&h, &rows))
}

/// The whole printed report of a run.
pub fn text(s: &Settings, results: &[SizeResult], gbits: bool) -> String {
    let mut out = String::new();
    match s.mode {
        Mode::Lat => {
            out += &lat_table(results);
            out += " HDR histogram of the samples above:\n";
        }
        Mode::Bw => {
            out += &bw_table(results, gbits);
            out += " HDR histogram of each operation's time from post to completion:\n";
        }
    }
    out += &hdr_table(results);
    out
}

/// HdrHistogram's `outputPercentileDistribution` text, values in
/// microseconds (the histogram holds nanoseconds), five ticks per half
/// distance, as the Java and C implementations print it.
pub fn hgrm(h: &Histogram<u64>) -> String {
    const SCALE: f64 = 1000.0;
    const DIGITS: usize = 3;
    let mut out = format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let value = v.value_iterated_to() as f64 / SCALE;
        let q = v.quantile_iterated_to();
        if q < 1.0 {
            let _ = writeln!(
                out,
                "{value:12.DIGITS$} {q:2.12} {total:10} {:14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(out, "{value:12.DIGITS$} {q:2.12} {total:10}");
        }
    }
    let sub_buckets = 1u64 << (2.0 * 10f64.powi(DIGITS as i32)).log2().ceil() as u32;
    let _ = writeln!(
        out,
        "#[Mean    = {:12.DIGITS$}, StdDeviation   = {:12.DIGITS$}]",
        h.mean() / SCALE,
        h.stdev() / SCALE
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.DIGITS$}, Total count    = {:12}]",
        h.max() as f64 / SCALE,
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_buckets
    );
    out
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The results of one size as JSON, with the numbers the table prints.
pub fn result_json(s: &Settings, r: &SizeResult, gbits: bool) -> Value {
    let mut m = Map::new();
    m.insert("bytes".into(), json!(r.bytes));
    m.insert("iterations".into(), json!(r.iterations));
    m.insert("elapsed_sec".into(), json!(r.elapsed.as_secs_f64()));
    match s.mode {
        Mode::Lat => {
            let l = r.lat_stats();
            for (k, v) in [
                ("t_min_usec", l.t_min),
                ("t_max_usec", l.t_max),
                ("t_typical_usec", l.t_typical),
                ("t_avg_usec", l.t_avg),
                ("t_stdev_usec", l.t_stdev),
                ("p99_usec", l.p99),
                ("p99_9_usec", l.p999),
            ] {
                m.insert(k.into(), json!(round(v, 3)));
            }
        }
        Mode::Bw => {
            m.insert("bw_unit".into(), json!(bw_unit(gbits)));
            m.insert(
                "bw_peak".into(),
                json!(round(bw_value(r.peak_bps, gbits), 3)),
            );
            m.insert(
                "bw_average".into(),
                json!(round(bw_value(r.avg_bps, gbits), 3)),
            );
            m.insert("msg_rate_mpps".into(), json!(round(r.msg_rate / 1e6, 7)));
            m.insert("bytes_per_sec".into(), json!(r.avg_bps));
        }
    }
    let mut p = Map::new();
    for (k, v) in r.hdr_percentiles() {
        p.insert(k.into(), json!(round(v, 4)));
    }
    p.insert("mean".into(), json!(round(r.hist.mean() / 1000.0, 4)));
    p.insert("count".into(), json!(r.hist.len()));
    m.insert("percentiles_usec".into(), Value::Object(p));
    Value::Object(m)
}

/// Device, port and per-QP counters of both nodes, named as `rdma
/// statistic` and `ethtool -S` name them.
pub fn devices_json(lb: &Loopback) -> Value {
    let wire = lb.wire.borrow();
    let mut devs = Vec::new();
    for i in 0..2 {
        let node = &lb.nodes[i];
        let r = &lb.sim.nodes[i];
        let counters: Map<String, Value> = r
            .counters()
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let drops: Map<String, Value> = r
            .drops()
            .iter()
            .map(|(k, v)| (format!("rx_drop_{k}"), json!(v)))
            .collect();
        let dropped: u64 = r.drops().values().sum();
        let mut qps = Vec::new();
        for c in &lb.conns {
            let Ok(q) = r.query_qp(c.qpn[i]) else {
                continue;
            };
            let qc: Map<String, Value> = q
                .counters
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            qps.push(json!({
                "lqpn": q.qpn,
                "rqpn": q.dest_qpn,
                "type": format!("{:?}", q.qp_type).to_uppercase(),
                "state": format!("{:?}", q.state).to_uppercase(),
                "mtu": q.mtu,
                "counters": qc,
            }));
        }
        devs.push(json!({
            "name": node.name,
            "port": 1,
            "mac": format!("{}", mac(node.mac.0)),
            "ip": node.gid.to_ip().to_string(),
            "port_counters": {
                "tx_packets": wire.tx_packets[i],
                "tx_bytes": wire.tx_bytes[i],
                // the in-memory wire loses nothing: what one node sends, the other receives
                "rx_packets": wire.tx_packets[1 - i],
                "rx_bytes": wire.tx_bytes[1 - i],
                "rx_dropped": dropped,
                "rx_drops_by_reason": drops,
            },
            "counters": counters,
            "qps": qps,
        }));
    }
    Value::Array(devs)
}

pub fn mac(b: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// What every run's JSON document holds (the tool, the test, its settings,
/// the results and the devices); a run on real interfaces adds its role,
/// interface and backend.
pub fn json_head(
    req: &PerfRequest,
    s: &Settings,
    transport: &str,
    results: Value,
    devices: Value,
) -> Value {
    json!({
        "tool": "rnic",
        "version": env!("CARGO_PKG_VERSION"),
        "command": req.command,
        "test": s.verb.name(),
        "mode": s.mode.name(),
        "title": title(s.verb, s.mode),
        "transport": transport,
        "method": s.method(),
        "settings": {
            "connection": format!("{:?}", s.qp_type).to_uppercase(),
            "qps": s.qps,
            "mtu": s.mtu,
            "tx_depth": s.tx_depth,
            "iterations": s.iters,
            "duration_sec": s.duration.map(|d| d.as_secs()),
            "sizes": s.sizes,
            "report_gbits": req.report_gbits,
        },
        "results": results,
        "devices": devices,
    })
}
