//! The results folder: the samples as CSV, a `series,x,y` CSV and an SVG
//! per plot (the `rnic plot` format and drawing), `summary.json`, and
//! `index.html`, which shows them all and opens offline (no script, no
//! remote resource).

use super::run_info::{Plot, RunInfo};
use super::sample::{counter, Snapshot};
use super::LabError;
use crate::report::{write_file, Series};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// A series of `f(snapshot)` over time, one point per snapshot after the
/// first (`f` sees the previous snapshot and the current one).
fn over_time(name: String, snaps: &[Snapshot], f: impl Fn(&Snapshot, &Snapshot) -> f64) -> Series {
    let t0 = snaps.first().map_or(0.0, |s| s.t);
    Series {
        name,
        points: snaps
            .windows(2)
            .map(|w| (w[1].t - t0, f(&w[0], &w[1])))
            .collect(),
    }
}

/// Mbit/s of counter `name` of host `i` between two snapshots.
fn mbits(a: &Snapshot, b: &Snapshot, i: usize, name: &str) -> f64 {
    let dt = (b.t - a.t).max(1e-6);
    (counter(b, i, name).saturating_sub(counter(a, i, name))) as f64 * 8.0 / dt / 1e6
}

/// The plots of a run: per-flow rate, switch queues, marks and drops,
/// and the congestion counters (marked packets, CNPs sent and handled).
pub fn plots(info: &RunInfo, snaps: &[Snapshot]) -> Vec<Plot> {
    let n = info.hosts.len();
    let first = snaps.first();
    let since = |s: &Snapshot, i: usize, name: &str| {
        counter(s, i, name).saturating_sub(first.map_or(0, |f| counter(f, i, name))) as f64
    };
    // a collective's or a trace's every host sends; the incast's h1..h(N-1)
    let from = usize::from(info.incast());
    let mut rate: Vec<Series> = (from..n)
        .map(|i| {
            let name = match info.incast() {
                false => format!("{} sent", info.hosts[i]),
                true => format!("{}→{}", info.hosts[i], info.hosts[0]),
            };
            over_time(name, snaps, |a, b| mbits(a, b, i, "tx_bytes"))
        })
        .collect();
    rate.push(over_time(
        format!("{} received", info.hosts[0]),
        snaps,
        |a, b| mbits(a, b, 0, "rx_bytes"),
    ));
    let mut cnp = vec![
        over_time(
            format!("{} np_ecn_marked_roce_packets", info.hosts[0]),
            snaps,
            |_, b| since(b, 0, "np_ecn_marked_roce_packets"),
        ),
        over_time(format!("{} np_cnp_sent", info.hosts[0]), snaps, |_, b| {
            since(b, 0, "np_cnp_sent")
        }),
    ];
    for i in from..n {
        if !info.incast() && i > 0 {
            cnp.push(over_time(
                format!("{} np_cnp_sent", info.hosts[i]),
                snaps,
                |_, b| since(b, i, "np_cnp_sent"),
            ));
        }
        cnp.push(over_time(
            format!("{} rp_cnp_handled", info.hosts[i]),
            snaps,
            |_, b| since(b, i, "rp_cnp_handled"),
        ));
    }
    let mut plots = vec![Plot {
        stem: "flows",
        title: "Per-flow rate (sender's transmitted bytes)",
        y: "Mbit/s",
        series: rate,
    }];
    plots.extend(switch_plots(info, snaps));
    plots.push(Plot {
        stem: "cnp",
        title: "ECN-marked packets received, CNPs sent and handled (cumulative)",
        y: "packets",
        series: cnp,
    });
    plots
}

/// The switch's plots: each egress queue's depth, its CE marks and
/// drops; none when no switch was sampled ([`switch_seen`]).
fn switch_plots(info: &RunInfo, snaps: &[Snapshot]) -> Vec<Plot> {
    if !switch_seen(snaps) {
        return Vec::new();
    }
    let first = snaps.first();
    let names = info.port_names();
    let queue = (0..names.len())
        .map(|i| {
            over_time(format!("to {}", names[i]), snaps, |_, b| {
                b.ports.get(i).map_or(0, |p| p.backlog) as f64 / 1e3
            })
        })
        .collect();
    let mut marks: Vec<Series> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let p0 = first
            .and_then(|f| f.ports.get(i).cloned())
            .unwrap_or_default();
        let port = move |b: &Snapshot| b.ports.get(i).cloned().unwrap_or_default();
        marks.push(over_time(format!("CE marks to {name}"), snaps, |_, b| {
            port(b).marked.saturating_sub(p0.marked) as f64
        }));
        marks.push(over_time(format!("drops to {name}"), snaps, |_, b| {
            port(b).drops.saturating_sub(p0.drops) as f64
        }));
    }
    vec![
        Plot {
            stem: "queue",
            title: "Switch egress queue depth (tbf backlog)",
            y: "KB",
            series: queue,
        },
        Plot {
            stem: "marks",
            title: "Switch CE marks and drops (cumulative)",
            y: "frames",
            series: marks,
        },
    ]
}

/// Whether the run sampled a switch: the lab's own, not a real network's
/// ([`super::across`]), whose queues and marks the hosts cannot see.
pub fn switch_seen(snaps: &[Snapshot]) -> bool {
    snaps.first().is_some_and(|s| !s.ports.is_empty())
}

/// Every sample in long form: `t_s,source,name,value` (sources: the hosts
/// and `switch:to_<port>`, the ports named after a host or, across the
/// trunk, the switch at the other end).
fn samples_csv(info: &RunInfo, snaps: &[Snapshot]) -> String {
    let t0 = snaps.first().map_or(0.0, |s| s.t);
    let names = info.port_names();
    let mut s = String::from("t_s,source,name,value\n");
    for snap in snaps {
        let t = snap.t - t0;
        for (i, c) in snap.hosts.iter().enumerate() {
            for (k, v) in c {
                let _ = writeln!(s, "{t:.3},{},{k},{v}", info.hosts[i]);
            }
        }
        for (i, p) in snap.ports.iter().enumerate() {
            let src = format!("switch:to_{}", names.get(i).map_or("?", |n| n));
            for (k, v) in [
                ("backlog_bytes", p.backlog),
                ("qlen_frames", p.qlen),
                ("drops", p.drops),
                ("sent_bytes", p.sent),
                ("roce_frames", p.seen),
                ("ce_marked", p.marked),
            ] {
                let _ = writeln!(s, "{t:.3},{src},{k},{v}");
            }
        }
    }
    s
}

/// The run's totals: per flow, per switch port, and the congestion
/// counters.
pub fn summary(info: &RunInfo, snaps: &[Snapshot]) -> Value {
    let (Some(a), Some(b)) = (snaps.first(), snaps.last()) else {
        return json!({});
    };
    let d = |i: usize, k: &str| counter(b, i, k).saturating_sub(counter(a, i, k));
    let secs = (b.t - a.t).max(1e-6);
    let from = usize::from(info.incast());
    let flows: Vec<Value> = (from..info.hosts.len())
        .map(|i| {
            json!({
                "from": info.hosts[i],
                "to": if info.incast() { &info.hosts[0] } else { "all" },
                "mbits_average": d(i, "tx_bytes") as f64 * 8.0 / secs / 1e6,
                "ib_write_bw_gbits": i.checked_sub(1).and_then(|j| info.reported_gbits.get(j)).copied().flatten(),
                "rp_cnp_handled": d(i, "rp_cnp_handled"),
                "retransmitted_pkts": d(i, "retransmitted_pkts"),
            })
        })
        .collect();
    let names = info.port_names();
    let ports: Vec<Value> = (0..names.len().min(a.ports.len()).min(b.ports.len()))
        .map(|i| {
            let (p, q) = (&a.ports[i], &b.ports[i]);
            let max = snaps.iter().filter_map(|s| s.ports.get(i)).map(|p| p.backlog).max().unwrap_or(0);
            json!({
                "to": names[i], "roce_frames": q.seen - p.seen.min(q.seen),
                "ce_marked": q.marked.saturating_sub(p.marked), "drops": q.drops.saturating_sub(p.drops),
                "max_backlog_bytes": max,
            })
        })
        .collect();
    json!({
        "seconds": secs,
        "backends": info.backends,
        "marking": info.marking,
        "flows": flows,
        "switch_ports": ports,
        "switch": (!switch_seen(snaps)).then_some("not observable: the real network's"),
        "receiver": {
            "host": info.hosts[0],
            "np_ecn_marked_roce_packets": d(0, "np_ecn_marked_roce_packets"),
            "np_cnp_sent": d(0, "np_cnp_sent"),
        },
        "dcqcn": super::dcqcn::summary(info, snaps),
        "pfc": super::pfc_results::summary(info, snaps),
        "probe": info.probe.map(|r| {
            let window = super::probe::incast_window(snaps);
            super::probe::summary(r, window, &info.hosts[1], &info.hosts[0])
        }),
        "trust": info.trust.as_ref().map(super::scale::summary),
    })
}

/// Writes the CSVs, the SVGs, `summary.json` and `index.html` into `out`.
pub fn write(out: &Path, info: &RunInfo, snaps: &[Snapshot]) -> Result<Value, LabError> {
    write_file(&out.join("samples.csv"), samples_csv(info, snaps))?;
    let mut plots = plots(info, snaps);
    for p in &plots {
        p.write(out, false)?;
    }
    plots.extend(super::dcqcn::write(out, info, snaps)?);
    plots.extend(super::pfc_results::write(out, info, snaps)?);
    if let Some(rounds) = info.probe {
        let p = super::probe::plot(rounds, &info.hosts[1], &info.hosts[0]);
        p.write(out, true)?;
        plots.push(p);
    }
    let mut sum = summary(info, snaps);
    super::collective_results::add(out, info, snaps, &mut plots, &mut sum)?;
    super::replay::add(out, info, &mut plots, &mut sum)?;
    let text = serde_json::to_string_pretty(&sum).expect("JSON of plain values");
    write_file(&out.join("summary.json"), text + "\n")?;
    write_file(&out.join("lab.toml"), &info.config_toml)?;
    write_file(
        &out.join("index.html"),
        super::page::html(info, &plots, &sum),
    )?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sample::PortStat;
    use std::collections::BTreeMap;

    fn snap(t: f64, tx1: u64, rx0: u64, cnps: u64, marked: u64) -> Snapshot {
        let host = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        Snapshot {
            pfc_sent: Vec::new(),
            pfc_held: Vec::new(),
            t,
            hosts: vec![
                host(&[("rx_bytes", rx0), ("np_cnp_sent", cnps)]),
                host(&[("tx_bytes", tx1), ("rp_cnp_handled", cnps)]),
            ],
            ports: vec![
                PortStat {
                    backlog: 30_000,
                    marked,
                    seen: 2 * marked,
                    ..PortStat::default()
                },
                PortStat::default(),
            ],
            cc: Vec::new(),
        }
    }

    #[test]
    fn rates_and_totals_count_from_the_first_snapshot() {
        let hosts = ["h0".to_string(), "h1".to_string()];
        let backends = ["AfXdp".to_string(), "AfXdp".to_string()];
        let info = RunInfo {
            hosts: &hosts,
            backends: &backends,
            config_toml: String::new(),
            marking: "proxy".into(),
            reported_gbits: vec![Some(0.05)],
            probe: None,
            trust: None,
            collective: None,
            trunk: &[],
            trace: None,
        };
        // 1.25 MB in 0.1 s: 100 Mbit/s
        let snaps = [
            snap(1.0, 500, 0, 7, 10),
            snap(1.1, 1_250_500, 1_250_000, 9, 14),
            snap(1.2, 1_250_500, 1_250_000, 10, 20),
        ];
        let p = plots(&info, &snaps);
        let flows = &p[0].series;
        assert_eq!(flows[0].name, "h1→h0");
        let (t, r) = flows[0].points[0];
        assert!(
            (t - 0.1).abs() < 1e-9 && (r - 100.0).abs() < 1e-6,
            "{t} {r}"
        );
        assert_eq!(flows[0].points[1].1, 0.0);
        let marks = &p[2].series[0];
        let ys: Vec<f64> = marks.points.iter().map(|p| p.1).collect();
        assert_eq!(
            (marks.name.as_str(), ys),
            ("CE marks to h0", vec![4.0, 10.0])
        );
        let s = summary(&info, &snaps);
        assert_eq!(s["switch_ports"][0]["ce_marked"], 10);
        assert_eq!(s["switch_ports"][0]["roce_frames"], 20);
        assert_eq!(s["receiver"]["np_cnp_sent"], 3);
        assert_eq!(s["flows"][0]["rp_cnp_handled"], 3);
        assert_eq!(s["flows"][0]["ib_write_bw_gbits"], 0.05);
        let avg = s["flows"][0]["mbits_average"].as_f64().unwrap();
        assert!((avg - 50.0).abs() < 1e-6, "{avg}");
        let csv = p[0].csv();
        assert!(
            csv.starts_with("series,time_s,value\nh1→h0,0.100,100.000\n"),
            "{csv}"
        );
        assert_eq!(s["switch"], Value::Null);
        // no switch sampled (a lab across machines): no queue or mark
        // plot, no port, and the summary says why
        let unseen: Vec<Snapshot> = snaps
            .iter()
            .cloned()
            .map(|mut s| {
                s.ports.clear();
                s
            })
            .collect();
        let stems: Vec<&str> = plots(&info, &unseen).iter().map(|p| p.stem).collect();
        assert_eq!(stems, ["flows", "cnp"]);
        let s = summary(&info, &unseen);
        assert!(s["switch"].as_str().unwrap().contains("not observable"));
        assert_eq!(s["switch_ports"], json!([]));
        assert_eq!(s["receiver"]["np_cnp_sent"], 3);
    }
}
