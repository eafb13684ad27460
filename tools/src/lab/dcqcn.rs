//! The senders' DCQCN reaction points over time: each sending host's QPs'
//! current rate RC, target rate RT and α, read from its rnicd every
//! sample ([`super::sample`]: `CcStates`, as `rnic stats --daemon --qp`
//! reads them), written
//! as `dcqcn.csv` and drawn as `dcqcn_rate.svg` (RC and RT per QP, log
//! scale: a cut halves the rate) and `dcqcn_alpha.svg`.

use super::run_info::{Plot, RunInfo};
use super::sample::Snapshot;
use super::LabError;
use crate::report::{write_file, Series};
use serde_json::{json, Value};
use softrnic::proto::QpCcState;
use std::fmt::Write as _;
use std::path::Path;

/// Every (host index, QP) sampled in the run, in order of first sight.
fn qps(snaps: &[Snapshot]) -> Vec<(usize, u32)> {
    let mut v = Vec::new();
    for s in snaps {
        for (h, states) in s.cc.iter().enumerate() {
            for q in &states.qps {
                if !v.contains(&(h, q.qpn)) {
                    v.push((h, q.qpn));
                }
            }
        }
    }
    v
}

/// `f` of QP `qpn` of host `h` over time (the samples that have it and
/// where `f` has a value).
fn series(
    name: String,
    snaps: &[Snapshot],
    (h, qpn): (usize, u32),
    f: impl Fn(&QpCcState) -> Option<f64>,
) -> Series {
    let t0 = snaps.first().map_or(0.0, |s| s.t);
    let points = snaps
        .iter()
        .filter_map(|s| {
            let q = s.cc.get(h)?.qps.iter().find(|q| q.qpn == qpn)?;
            Some((s.t - t0, f(q)?))
        })
        .collect();
    Series { name, points }
}

const MBIT: f64 = 1e6;

/// The two plots: RC and RT per QP (Mbit/s), and α per QP while a cut
/// holds (unlimited, a reaction point reports the α a first CNP would
/// start from, not an estimate of congestion).
pub fn plots(info: &RunInfo, snaps: &[Snapshot]) -> Vec<Plot> {
    let mut rate = Vec::new();
    let mut alpha = Vec::new();
    for (h, qpn) in qps(snaps) {
        let who = format!("{} QP {qpn:#x}", info.hosts[h]);
        rate.push(series(format!("{who} Rc"), snaps, (h, qpn), |q| {
            Some(q.state.rc_bps as f64 / MBIT)
        }));
        rate.push(series(format!("{who} Rt"), snaps, (h, qpn), |q| {
            Some(q.state.rt_bps as f64 / MBIT)
        }));
        alpha.push(series(who, snaps, (h, qpn), |q| {
            q.state.limited.then_some(q.state.alpha)
        }));
    }
    vec![
        Plot {
            stem: "dcqcn_rate",
            title: "DCQCN current rate Rc and target rate Rt per sender QP (log scale)",
            y: "Mbit/s",
            series: rate,
        },
        Plot {
            stem: "dcqcn_alpha",
            title: "DCQCN α per sender QP (while rate-limited)",
            y: "α",
            series: alpha,
        },
    ]
}

/// `t_s,host,qpn,rc_mbps,rt_mbps,alpha,limited,cuts`: one row per sender
/// QP per sample.
pub fn csv(info: &RunInfo, snaps: &[Snapshot]) -> String {
    let t0 = snaps.first().map_or(0.0, |s| s.t);
    let mut s = String::from("t_s,host,qpn,rc_mbps,rt_mbps,alpha,limited,cuts\n");
    for snap in snaps {
        for (h, states) in snap.cc.iter().enumerate() {
            for q in &states.qps {
                let _ = writeln!(
                    s,
                    "{:.3},{},{},{:.3},{:.3},{:.6},{},{}",
                    snap.t - t0,
                    info.hosts[h],
                    q.qpn,
                    q.state.rc_bps as f64 / MBIT,
                    q.state.rt_bps as f64 / MBIT,
                    q.state.alpha,
                    u8::from(q.state.limited),
                    q.state.cuts
                );
            }
        }
    }
    s
}

/// Per sender QP: the lowest RC sampled, the highest α while limited, and
/// the cuts over the run; and the senders' line rate.
pub fn summary(info: &RunInfo, snaps: &[Snapshot]) -> Value {
    let line_bps = snaps
        .iter()
        .flat_map(|s| s.cc.iter().map(|c| c.line_bps))
        .max()
        .unwrap_or(0);
    let qps: Vec<Value> = qps(snaps)
        .into_iter()
        .map(|(h, qpn)| {
            let seen = || {
                snaps
                    .iter()
                    .filter_map(move |s| s.cc.get(h)?.qps.iter().find(|q| q.qpn == qpn))
            };
            let min_rc = seen().map(|q| q.state.rc_bps).min().unwrap_or(0);
            let alpha = seen()
                .filter(|q| q.state.limited)
                .map(|q| q.state.alpha)
                .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))));
            let cuts = seen().map(|q| q.state.cuts).max().unwrap_or(0)
                - seen().map(|q| q.state.cuts).min().unwrap_or(0);
            json!({
                "host": info.hosts[h], "qpn": qpn,
                "min_rc_mbps": min_rc as f64 / MBIT,
                "max_alpha_limited": alpha,
                "cuts": cuts,
            })
        })
        .collect();
    // off (rnicd --dcqcn-rp off) when no sender QP's reaction point is on
    let on = snaps
        .iter()
        .flat_map(|s| s.cc.iter().flat_map(|c| c.qps.iter()))
        .any(|q| q.state.enabled);
    json!({
        "line_mbps": line_bps as f64 / MBIT,
        "reaction_point": if on { "on" } else { "off" },
        "qps": qps,
    })
}

/// Writes `dcqcn.csv`, each plot's `series,time_s,value` CSV and SVG;
/// returns the plots for the page.
pub fn write(out: &Path, info: &RunInfo, snaps: &[Snapshot]) -> Result<Vec<Plot>, LabError> {
    write_file(&out.join("dcqcn.csv"), csv(info, snaps))?;
    let plots = plots(info, snaps);
    for p in &plots {
        p.write(out, p.stem == "dcqcn_rate")?;
    }
    Ok(plots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic::proto::CcStates;

    fn qp(qpn: u32, rc_mbps: u64, alpha: f64, cuts: u64) -> QpCcState {
        let state = nic::cc::RpState {
            enabled: true,
            limited: rc_mbps < 10_000,
            rc_bps: rc_mbps * 1_000_000,
            rt_bps: 10_000_000_000,
            alpha,
            cuts,
            cnps_handled: cuts,
        };
        QpCcState { qpn, state }
    }

    fn snap(t: f64, h1: Vec<QpCcState>, h2: Vec<QpCcState>) -> Snapshot {
        let line = |qps| CcStates {
            line_bps: 10_000_000_000,
            qps,
            ..CcStates::default()
        };
        Snapshot {
            pfc_sent: Vec::new(),
            pfc_held: Vec::new(),
            t,
            hosts: vec![Default::default(); 3],
            ports: vec![Default::default(); 3],
            cc: vec![CcStates::default(), line(h1), line(h2)],
        }
    }

    #[test]
    fn each_sender_qp_gets_rows_series_and_totals() {
        let hosts = ["h0".to_string(), "h1".to_string(), "h2".to_string()];
        let backends = [
            "AfXdp".to_string(),
            "AfXdp".to_string(),
            "AfXdp".to_string(),
        ];
        let info = RunInfo {
            hosts: &hosts,
            backends: &backends,
            config_toml: String::new(),
            marking: String::new(),
            reported_gbits: vec![None, None],
            probe: None,
            trust: None,
            collective: None,
            trunk: &[],
            trace: None,
        };
        let snaps = [
            snap(2.0, vec![qp(17, 10_000, 0.999, 0)], vec![]),
            snap(
                2.1,
                vec![qp(17, 5_000, 0.9, 1)],
                vec![qp(18, 10_000, 0.5, 0)],
            ),
            snap(
                2.2,
                vec![qp(17, 7_500, 0.8, 1)],
                vec![qp(18, 2_500, 0.7, 2)],
            ),
        ];
        let text = csv(&info, &snaps);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[0], "t_s,host,qpn,rc_mbps,rt_mbps,alpha,limited,cuts");
        assert_eq!(rows.len(), 1 + 5, "{text}");
        assert_eq!(rows[2], "0.100,h1,17,5000.000,10000.000,0.900000,1,1");
        assert_eq!(rows[5], "0.200,h2,18,2500.000,10000.000,0.700000,1,2");

        let p = plots(&info, &snaps);
        let names: Vec<&str> = p[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "h1 QP 0x11 Rc",
                "h1 QP 0x11 Rt",
                "h2 QP 0x12 Rc",
                "h2 QP 0x12 Rt"
            ]
        );
        let rc1: Vec<(f64, f64)> = p[0].series[0].points.clone();
        assert_eq!(rc1.len(), 3);
        assert!(
            (rc1[1].0 - 0.1).abs() < 1e-9 && rc1[1].1 == 5000.0,
            "{rc1:?}"
        );
        assert_eq!(
            p[0].series[2].points.len(),
            2,
            "h2's QP from its first sample"
        );
        // α only while limited: h1's three samples but the first, h2's last
        let alphas: Vec<Vec<f64>> = p[1]
            .series
            .iter()
            .map(|s| s.points.iter().map(|p| p.1).collect())
            .collect();
        assert_eq!(alphas, [vec![0.9, 0.8], vec![0.7]]);

        let s = summary(&info, &snaps);
        assert_eq!(s["line_mbps"], 10_000.0);
        assert_eq!(s["reaction_point"], "on");
        assert_eq!(s["qps"][0]["min_rc_mbps"], 5000.0);
        assert_eq!(s["qps"][0]["max_alpha_limited"], 0.9);
        assert_eq!(s["qps"][0]["cuts"], 1);
        assert_eq!(s["qps"][1]["host"], "h2");
        assert_eq!(s["qps"][1]["cuts"], 2);
    }
}
