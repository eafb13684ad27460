//! `index.html`: the run's settings, what is measured and what is a
//! proxy, the totals, and every plot (`<img>` of the SVG beside it) with
//! its CSV. Plain HTML and CSS: it opens offline, with no script.

use super::run_info::{Plot, RunInfo};
use serde_json::Value;
use std::fmt::Write as _;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A table of `rows` (already escaped cells) under `head`.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s += "</tr>\n";
    for r in rows {
        s += "<tr>";
        for c in r {
            let _ = write!(s, "<td>{c}</td>");
        }
        s += "</tr>\n";
    }
    s + "</table>\n"
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if v.is_f64() => format!("{f:.3}"),
        Some(_) => v.to_string(),
        None => "-".into(),
    }
}

/// The totals of `summary.json` as tables.
fn totals(sum: &Value) -> String {
    let rows = |key: &str, cols: &[&str]| -> Vec<Vec<String>> {
        sum[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                cols.iter()
                    .map(|c| match &f[*c] {
                        Value::String(s) => esc(s),
                        v => num(v),
                    })
                    .collect()
            })
            .collect()
    };
    let flows = [
        "from",
        "to",
        "mbits_average",
        "ib_write_bw_gbits",
        "rp_cnp_handled",
        "retransmitted_pkts",
    ];
    let ports = [
        "to",
        "roce_frames",
        "ce_marked",
        "drops",
        "max_backlog_bytes",
    ];
    let r = &sum["receiver"];
    let switch = match sum["switch"].as_str() {
        Some(why) => format!("<p class=\"proxy\">{}</p>\n", esc(why)),
        None => table(&ports, &rows("switch_ports", &ports)),
    };
    format!(
        "<h2>Flows</h2>\n{}<h2>Switch egress queues</h2>\n{}<h2>Receiver ({})</h2>\n<p>np_ecn_marked_roce_packets {} · np_cnp_sent {}</p>\n",
        table(&flows, &rows("flows", &flows)),
        switch,
        esc(r["host"].as_str().unwrap_or("?")),
        num(&r["np_ecn_marked_roce_packets"]),
        num(&r["np_cnp_sent"]),
    )
}

/// The run's trustworthiness ([`super::scale`]) as a box: red when the
/// hosts were the bottleneck, yellow for caution; for a collective, why it
/// has none.
fn trust(sum: &Value) -> String {
    let t = &sum["trust"];
    let Some(level) = t["level"].as_str() else {
        if sum["collective"].is_null() {
            return String::new();
        }
        return format!("<p><b>Trust:</b> {}.</p>\n", esc(super::scale::NO_VERDICT));
    };
    let class = match level {
        "untrustworthy" => "untrusted",
        "caution" => "proxy",
        _ => "ok",
    };
    format!(
        "<p class=\"{class}\"><b>Trust: {}.</b> {}</p>\n",
        esc(level),
        esc(t["why"].as_str().unwrap_or(""))
    )
}

/// The latency probe's percentiles ([`super::probe`]), when it ran.
fn probe(sum: &Value) -> String {
    let p = &sum["probe"];
    if p.is_null() {
        return String::new();
    }
    let cols = ["samples", "rounds", "p50_us", "p99_us", "p999_us", "max_us"];
    let row = vec![cols.iter().map(|c| num(&p[*c])).collect()];
    format!(
        "<h2>Latency probe ({} {} → {}, {} B, half round trip)</h2>\n{}",
        esc(p["program"].as_str().unwrap_or("?")),
        esc(p["from"].as_str().unwrap_or("?")),
        esc(p["to"].as_str().unwrap_or("?")),
        num(&p["size"]),
        table(&cols, &row)
    )
}

/// The page.
pub fn html(info: &RunInfo, plots: &[Plot], sum: &Value) -> String {
    let traced = sum["trace"].is_array();
    let kind = match sum["collective"]["kind"].as_str() {
        Some(k) => k,
        None if traced => "trace",
        None => "incast",
    };
    let what = match sum["collective"]["kind"].as_str() {
        Some(k) => format!(
            "MPI {k} over UCX {}",
            sum["collective"]["ucx_tls"].as_str().unwrap_or("?")
        ),
        None if traced => "a replayed trace of perftest flows".into(),
        None => "ib_write_bw incast".into(),
    };
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>rnic lab: {kind}</title>\n"
    );
    s += "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
         .proxy{background:#fff3cd;border:2px solid #e0a800;padding:.5em 1em}img{max-width:100%}\
         .untrusted{background:#f8d7da;border:2px solid #c82333;padding:.5em 1em}\
         .ok{border:1px solid #ccc;padding:.5em 1em}\
         .fallback{background:#f8d7da;border:2px solid #c82333;padding:.5em 1em}\
         .through{background:#d4edda;border:2px solid #28a745;padding:.5em 1em}\
         pre{background:#f4f4f4;padding:.5em}</style>\n</head>\n<body>\n";
    let _ = writeln!(s, "<h1>rnic lab: {}</h1>", esc(&what));
    let backends: Vec<String> = info
        .hosts
        .iter()
        .zip(info.backends)
        .map(|(h, b)| format!("{h}: {b}"))
        .collect();
    let _ = write!(
        s,
        "<p>Hosts {} through {}; rnicd ports: {}.</p>\n<p class=\"proxy\"><b>ECN marking:</b> {}</p>\n\
         <p>DCQCN: each sender QP's reaction point (current rate Rc, target rate Rt, α) is read from its rnicd \
         every sample (<a href=\"dcqcn.csv\">dcqcn.csv</a>); {}</p>\n",
        esc(&match (info.collective, info.trace) {
            (Some(_), _) => format!("{}, one MPI rank each,", info.hosts.join(", ")),
            (_, Some(_)) => format!("{} (a replayed trace)", info.hosts.join(", ")),
            _ => format!("{} → {}", info.hosts[1..].join(", "), info.hosts[0]),
        }),
        if sum["switch"].is_string() {
            "the real network"
        } else if info.trunk.is_empty() {
            "one switch"
        } else {
            "two switches joined by a trunk (its egress queues: the ports to sw0 and sw1)"
        },
        esc(&backends.join(", ")),
        esc(&info.marking),
        if sum["dcqcn"]["reaction_point"] == "off" {
            "the reaction points are <b>off</b> (rnicd --dcqcn-rp off): the senders count CNPs as \
             ignored (rp_cnp_ignored) and never cut their rate."
        } else {
            "a CNP cuts Rc, and Rc climbs back toward Rt while none arrives."
        }
    );
    s += &trust(sum);
    s += &super::collective_results::html(sum, esc);
    s += &super::replay::html(sum, esc);
    s += &totals(sum);
    s += &probe(sum);
    for p in plots {
        let (stem, title) = (p.stem, esc(p.title));
        let _ = write!(
            s,
            "<h2>{title}</h2>\n<img src=\"{stem}.svg\" alt=\"{title}\" width=\"960\" height=\"540\">\n\
             <p>Data: <a href=\"{stem}.csv\">{stem}.csv</a></p>\n"
        );
    }
    let _ = write!(
        s,
        "<h2>Files</h2>\n<p><a href=\"samples.csv\">samples.csv</a> (every sample: t_s,source,name,value), \
         <a href=\"summary.json\">summary.json</a>, <a href=\"lab.toml\">lab.toml</a> (run it again with \
         <code>rnic lab --file lab.toml</code>), logs/ (rnicd and the workload: ib_write_bw, or mpirun).</p>\n<h2>Settings</h2>\n<pre>{}</pre>\n</body>\n</html>\n",
        esc(&info.config_toml)
    );
    s
}
