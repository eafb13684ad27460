//! Reports: perftest's tables, HDR percentiles, HdrHistogram's
//! percentile-distribution text (`.hgrm`), JSON and an SVG plot.

use crate::loopback::Loopback;
use crate::perf::{Mode, Settings, SizeResult};
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

/// A latency distribution plot: latency against percentile, the
/// percentile axis stretched as HdrHistogram's plotter does (by
/// 1/(1-percentile)), one line per message size.
pub fn svg(title: &str, results: &[SizeResult]) -> String {
    const W: f64 = 900.0;
    const H: f64 = 520.0;
    const L: f64 = 80.0;
    const R: f64 = 170.0;
    const T: f64 = 50.0;
    const B: f64 = 60.0;
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    ];
    // x: log10(1/(1-q)) from 0 (0 %) to 5 (99.999 %)
    let series: Vec<(usize, Vec<(f64, f64)>)> = results
        .iter()
        .map(|r| {
            let pts = r
                .hist
                .iter_quantiles(5)
                .map(|v| {
                    let q = v.quantile_iterated_to().min(0.99999);
                    (
                        (1.0 / (1.0 - q)).log10(),
                        v.value_iterated_to() as f64 / 1000.0,
                    )
                })
                .collect();
            (r.bytes, pts)
        })
        .collect();
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(2.0f64, f64::max)
        .ceil()
        .min(5.0);
    let ys = || series.iter().flat_map(|(_, p)| p.iter().map(|x| x.1));
    let ymax_raw = ys().fold(0.0f64, f64::max).max(0.001);
    let ymin_raw = ys()
        .filter(|&y| y > 0.0)
        .fold(f64::MAX, f64::min)
        .min(ymax_raw);
    // a log scale when the sizes' latencies span more than two decades
    let log = ymax_raw / ymin_raw > 100.0;
    let (ylo, yhi, step) = if log {
        (
            ymin_raw.log10().floor(),
            ymax_raw.log10().ceil().max(ymin_raw.log10().floor() + 1.0),
            1.0,
        )
    } else {
        let step = nice_step(ymax_raw / 5.0);
        (0.0, (ymax_raw / step).ceil() * step, step)
    };
    let yv = move |y: f64| if log { y.max(1e-9).log10() } else { y };
    let px = |x: f64| L + x / xmax * (W - L - R);
    let py = move |y: f64| H - B - (yv(y) - ylo) / (yhi - ylo) * (H - T - B);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{L}\" y=\"24\" font-size=\"13\">{}</text>\n",
        escape(title)
    );
    // grid and axes
    let mut k = 0.0;
    while k <= xmax + 1e-9 {
        let x = px(k);
        let label = match k as u32 {
            0 => "0%".to_string(),
            n => {
                let p = 100.0 - 100.0 / 10f64.powi(n as i32);
                format!("{}%", trim(p))
            }
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            H - B,
            H - B + 18.0
        );
        k += 1.0;
    }
    let mut k = ylo;
    while k <= yhi + step * 1e-6 {
        let value = if log { 10f64.powf(k) } else { k };
        let yy = py(value);
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 6.0,
            yy + 4.0,
            trim(value)
        );
        k += step;
    }
    let _ = writeln!(
        s,
        "<rect x=\"{L}\" y=\"{T}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"black\"/>",
        W - L - R,
        H - T - B
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile</text>",
        (W - R + L) / 2.0,
        H - 18.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(22 {:.1}) rotate(-90)\" text-anchor=\"middle\">latency [usec]{}</text>",
        (H - B + T) / 2.0,
        if log { " (log scale)" } else { "" }
    );
    for (i, (bytes, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(x.min(xmax)), py(*y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let ly = T + 10.0 + (H - T - B - 10.0) / series.len().max(1) as f64 * i as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{bytes} bytes</text>",
            W - R + 15.0,
            W - R + 40.0,
            W - R + 46.0,
            ly + 4.0
        );
    }
    s += "</svg>\n";
    s
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let n = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * mag
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
