//! The PFC stage's results ([`super::pfc`]): `pfc.csv`, the plots
//! `pfc_frames` and `pfc_paused`, the totals in `summary.json` and the
//! output.

use super::pfc::ROCE_PRIORITY;
use super::run_info::{Plot, RunInfo};
use super::sample::{counter, Snapshot};
use super::LabError;
use crate::report::{write_file, Series};
use nic::cc::PRIORITIES;
use std::fmt::Write as _;
use std::path::Path;

/// Host counters drawn per priority [`ROCE_PRIORITY`].
fn rx_names() -> (String, String) {
    (
        format!("rx_prio{ROCE_PRIORITY}_pause"),
        format!("rx_prio{ROCE_PRIORITY}_pause_duration"),
    )
}

/// `pfc.csv`: per sample, each port's PFC frames sent (every priority),
/// each host's PFC frames received and paused time (µs) on
/// [`ROCE_PRIORITY`], and each trunk port's pause frames received and
/// the time its queue was held (µs).
pub fn csv(info: &RunInfo, snaps: &[Snapshot]) -> String {
    let (frames, paused) = rx_names();
    let ports = info.port_names();
    let mut s = String::from("time_s");
    for h in &ports {
        for p in 0..PRIORITIES {
            let _ = write!(s, ",switch_to_{h}_prio{p}_pause_sent");
        }
    }
    for h in info.hosts {
        let _ = write!(s, ",{h}_{frames},{h}_{paused}_us");
    }
    for t in info.trunk {
        let _ = write!(s, ",trunk_to_{t}_pause_received,trunk_to_{t}_held_us");
    }
    s.push('\n');
    let t0 = snaps.first().map_or(0.0, |x| x.t);
    for snap in snaps {
        let _ = write!(s, "{:.3}", snap.t - t0);
        for i in 0..ports.len() {
            for p in 0..PRIORITIES {
                let n = snap.pfc_sent.get(i).map_or(0, |c| c[p]);
                let _ = write!(s, ",{n}");
            }
        }
        for i in 0..info.hosts.len() {
            let _ = write!(
                s,
                ",{},{}",
                counter(snap, i, &frames),
                counter(snap, i, &paused)
            );
        }
        for j in info.hosts.len()..ports.len() {
            let h = snap.pfc_held.get(j).copied().unwrap_or_default();
            let _ = write!(s, ",{},{}", h.frames, h.paused_us);
        }
        s.push('\n');
    }
    s
}

/// The two plots: PFC frames sent by the switch per port and received by
/// each host, and each host's paused time, on [`ROCE_PRIORITY`].
pub fn plots(info: &RunInfo, snaps: &[Snapshot]) -> Vec<Plot> {
    let (frames, paused) = rx_names();
    let t0 = snaps.first().map_or(0.0, |x| x.t);
    let over = |name: String, f: &dyn Fn(&Snapshot) -> f64| Series {
        name,
        points: snaps.iter().map(|s| (s.t - t0, f(s))).collect(),
    };
    let p = ROCE_PRIORITY as usize;
    let ports = info.port_names();
    let mut sent: Vec<Series> = (0..ports.len())
        .map(|i| {
            over(format!("switch → {}", ports[i]), &|s| {
                s.pfc_sent.get(i).map_or(0, |c| c[p]) as f64
            })
        })
        .collect();
    sent.extend((0..info.hosts.len()).map(|i| {
        over(format!("{} received", info.hosts[i]), &|s| {
            counter(s, i, &frames) as f64
        })
    }));
    let mut held: Vec<Series> = (0..info.hosts.len())
        .map(|i| {
            over(info.hosts[i].clone(), &|s| {
                counter(s, i, &paused) as f64 / 1e3
            })
        })
        .collect();
    held.extend((info.hosts.len()..ports.len()).map(|j| {
        over(format!("queue to {} (trunk) held", ports[j]), &|s| {
            s.pfc_held.get(j).map_or(0, |h| h.paused_us) as f64 / 1e3
        })
    }));
    vec![
        Plot {
            stem: "pfc_frames",
            title: "PFC frames on priority 3 (switch sent per port, hosts received)",
            y: "PFC frames",
            series: sent,
        },
        Plot {
            stem: "pfc_paused",
            title: "Time each host's priority 3 was paused by PFC (and each trunk queue held)",
            y: "paused [ms]",
            series: held,
        },
    ]
}

/// The PFC totals (`null` without PFC): per host, the frames the switch
/// sent toward it and those it received on [`ROCE_PRIORITY`], and the
/// time it was paused, ms.
pub fn summary(info: &RunInfo, snaps: &[Snapshot]) -> serde_json::Value {
    let (Some(a), Some(b)) = (snaps.first(), snaps.last()) else {
        return serde_json::Value::Null;
    };
    if b.pfc_sent.is_empty() {
        return serde_json::Value::Null;
    }
    let (frames, paused) = rx_names();
    let p = ROCE_PRIORITY as usize;
    let d = |i: usize, k: &str| counter(b, i, k).saturating_sub(counter(a, i, k));
    let hosts: Vec<serde_json::Value> = (0..info.hosts.len())
        .map(|i| {
            let sent = |s: &Snapshot| s.pfc_sent.get(i).map_or(0, |c| c[p]);
            serde_json::json!({
                "host": info.hosts[i],
                "switch_sent": sent(b).saturating_sub(sent(a)),
                "received": d(i, &frames),
                "paused_ms": d(i, &paused) as f64 / 1e3,
            })
        })
        .collect();
    let ports = info.port_names();
    let trunk: Vec<serde_json::Value> = (info.hosts.len()..ports.len())
        .map(|j| {
            let sent = |s: &Snapshot| s.pfc_sent.get(j).map_or(0, |c| c[p]);
            let held = |s: &Snapshot| s.pfc_held.get(j).copied().unwrap_or_default();
            serde_json::json!({
                "to": ports[j],
                "switch_sent": sent(b).saturating_sub(sent(a)),
                "received": held(b).frames.saturating_sub(held(a).frames),
                "held_ms": held(b).paused_us.saturating_sub(held(a).paused_us) as f64 / 1e3,
            })
        })
        .collect();
    serde_json::json!({ "priority": ROCE_PRIORITY, "hosts": hosts, "trunk": trunk })
}

/// With PFC: one line per host of the totals of [`summary`].
pub fn report(sum: &serde_json::Value) {
    for h in sum["pfc"]["hosts"].as_array().into_iter().flatten() {
        super::say(&format!(
            "PFC {}: switch sent {}, received {}, paused {:.0} ms",
            h["host"].as_str().unwrap_or("?"),
            h["switch_sent"],
            h["received"],
            h["paused_ms"].as_f64().unwrap_or(0.0)
        ));
    }
    for t in sum["pfc"]["trunk"].as_array().into_iter().flatten() {
        super::say(&format!(
            "PFC trunk queue to {}: switch sent {}, received {}, held {:.0} ms",
            t["to"].as_str().unwrap_or("?"),
            t["switch_sent"],
            t["received"],
            t["held_ms"].as_f64().unwrap_or(0.0)
        ));
    }
}

/// With PFC on (the stage counted into the snapshots): writes `pfc.csv`,
/// each plot's CSV and SVG; returns the plots for the page.
pub fn write(out: &Path, info: &RunInfo, snaps: &[Snapshot]) -> Result<Vec<Plot>, LabError> {
    if snaps.iter().all(|s| s.pfc_sent.is_empty()) {
        return Ok(Vec::new());
    }
    write_file(&out.join("pfc.csv"), csv(info, snaps))?;
    let plots = plots(info, snaps);
    for p in &plots {
        p.write(out, false)?;
    }
    Ok(plots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(t: f64, sent_to_h1: u64, got: u64, paused_us: u64) -> Snapshot {
        let mut h1 = std::collections::BTreeMap::new();
        h1.insert("rx_prio3_pause".to_string(), got);
        h1.insert("rx_prio3_pause_duration".to_string(), paused_us);
        let mut to_h1 = [0; PRIORITIES];
        to_h1[3] = sent_to_h1;
        Snapshot {
            t,
            hosts: vec![Default::default(), h1],
            ports: vec![Default::default(); 2],
            cc: Vec::new(),
            pfc_sent: vec![[0; PRIORITIES], to_h1],
            pfc_held: Vec::new(),
        }
    }

    #[test]
    fn the_totals_csv_and_plots_count_from_the_first_sample() {
        let hosts = ["h0".to_string(), "h1".to_string()];
        let info = RunInfo {
            hosts: &hosts,
            backends: &[],
            config_toml: String::new(),
            marking: String::new(),
            reported_gbits: Vec::new(),
            probe: None,
            trust: None,
            collective: None,
            trunk: &[],
            trace: None,
        };
        let snaps = [snap(1.0, 2, 1, 0), snap(1.5, 12, 11, 40_000)];
        let sum = summary(&info, &snaps);
        assert_eq!(sum["priority"], 3);
        assert_eq!(sum["hosts"][1]["switch_sent"], 10);
        assert_eq!(sum["hosts"][1]["received"], 10);
        assert_eq!(sum["hosts"][1]["paused_ms"], 40.0);
        assert_eq!(sum["hosts"][0]["switch_sent"], 0);
        let csv = csv(&info, &snaps);
        let last = csv.lines().last().unwrap();
        // time, 8 priorities toward h0, 8 toward h1, then h0's and h1's pair
        assert_eq!(last, "0.500,0,0,0,0,0,0,0,0,0,0,0,12,0,0,0,0,0,0,11,40000");
        let plots = plots(&info, &snaps);
        assert_eq!(plots[0].series[1].points, vec![(0.0, 2.0), (0.5, 12.0)]);
        assert_eq!(plots[1].series[1].points, vec![(0.0, 0.0), (0.5, 40.0)]);
        let none = [snap(0.0, 0, 0, 0)].map(|mut s| {
            s.pfc_sent.clear();
            s
        });
        assert!(summary(&info, &none).is_null());
    }
}
