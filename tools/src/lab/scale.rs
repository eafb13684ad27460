//! How far a run can be trusted: one machine emulates every host, so past
//! some number of hosts the hosts themselves — their engines and programs
//! competing for the CPUs — and not the switch become the bottleneck, and
//! the fabric's behaviour is no longer what is measured. At each sample
//! the lab reads the machine's CPU time (`/proc/stat`) and each rnicd's
//! and each incast program's (`/proc/PID/stat`, every thread); after the
//! run [`assess`] weighs, over the samples in which the senders sent:
//!
//! - **underfed**: the senders' aggregate rate (median of the samples)
//!   below 90 % of the switch's drain rate while the queue toward h0
//!   stays under two data frames (median): the link toward h0 is not
//!   busy, so the switch is not what limits the flows;
//! - **DCQCN-limited**: a cut of the senders' reaction points held in at
//!   least half the sender QPs' samples: then the fabric's congestion
//!   control explains the slack;
//! - **saturated**: the machine's CPUs at least 90 % busy;
//! - **starved**: the lab's own sampling fell behind, a gap between two
//!   samples longer than [`STARVED_S`] or ten periods (the engines run
//!   SCHED_FIFO; the lab, its `tc` and `nft` and the programs do not): the
//!   time series are no longer what happened.
//!
//! Starved, underfed and saturated, or underfed and not DCQCN-limited:
//! the run is **untrustworthy**. Saturated alone: the queue built or the
//! senders kept the link full, so the switch is a bottleneck, but the
//! rates and latencies also carry the hosts' own queueing: **caution**.

use super::sample::{counter, Snapshot};
use super::LabConfig;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// CPU time at one sample, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSample {
    /// Every CPU's busy time (all but idle and iowait).
    pub busy: u64,
    /// Every CPU's time.
    pub total: u64,
    /// The rnicd processes'.
    pub engines: u64,
    /// The workload's programs' (ib_write_bw).
    pub programs: u64,
}

/// Reads the CPU times of the machine and of the lab's processes.
pub struct CpuWatch {
    engines: Vec<u32>,
    programs: Vec<u32>,
    /// Each process's time when last read: a process that has ended (and
    /// been reaped) keeps what it used.
    last: BTreeMap<u32, u64>,
}

/// The machine's busy and total ticks (`/proc/stat`'s `cpu` line: user
/// nice system idle iowait irq softirq steal; guest time is in user).
pub fn machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A process's user + system ticks, all its threads (`/proc/PID/stat`
/// fields 14 and 15, after the parenthesised name).
pub fn process_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

impl CpuWatch {
    /// Watches the rnicd processes `engines`.
    pub fn new(engines: Vec<u32>) -> CpuWatch {
        CpuWatch {
            engines,
            programs: Vec::new(),
            last: BTreeMap::new(),
        }
    }

    /// Watches the workload's programs `pids` too.
    pub fn add_programs(&mut self, pids: impl IntoIterator<Item = u32>) {
        self.programs.extend(pids);
    }

    fn sum(&mut self, pids: &[u32]) -> u64 {
        pids.iter()
            .map(|&p| {
                let read = std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|s| process_ticks(&s));
                let t = self.last.entry(p).or_insert(0);
                if let Some(v) = read {
                    *t = (*t).max(v);
                }
                *t
            })
            .sum()
    }

    /// The CPU times now.
    pub fn sample(&mut self) -> CpuSample {
        let (busy, total) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| machine_ticks(&s))
            .unwrap_or((0, 0));
        let engines = self.engines.clone();
        let programs = self.programs.clone();
        CpuSample {
            busy,
            total,
            engines: self.sum(&engines),
            programs: self.sum(&programs),
        }
    }
}

/// A gap between samples longer than this (or ten periods) is a
/// starved sampler, seconds.
pub const STARVED_S: f64 = 2.0;

/// What a collective's run says in place of a verdict.
pub const NO_VERDICT: &str = "no verdict for a collective: the verdict's rules read an incast's \
senders filling the queue toward h0, and in a collective every host sends";

/// What the verdict is drawn from.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    /// The sampling period asked for and the longest gap between two
    /// samples in the window, seconds.
    pub period_s: f64,
    pub longest_gap_s: f64,
    pub cpus: usize,
    /// The machine's CPUs busy, share of all of them (0..=1).
    pub machine_busy: f64,
    /// The rnicd engines' and the programs' CPU time, share of the machine.
    pub engines: f64,
    pub programs: f64,
    /// The senders' aggregate rate, median of the samples, bit/s.
    pub offered_bps: f64,
    /// The switch's rate toward h0, bit/s.
    pub drain_bps: f64,
    /// The queue toward h0, median of the samples, bytes.
    pub median_queue: u64,
    /// A full data frame, bytes.
    pub frame: u64,
    /// The share of sender QP samples in which a DCQCN cut held.
    pub dcqcn_limited: f64,
}

/// How far the run can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Ok,
    Caution,
    Untrustworthy,
}

impl Level {
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Caution => "caution",
            Level::Untrustworthy => "untrustworthy",
        }
    }
}

/// The verdict on `e`, and why, one sentence.
pub fn assess(e: &Evidence) -> (Level, String) {
    let underfed = e.offered_bps < 0.9 * e.drain_bps && e.median_queue < 2 * e.frame;
    let saturated = e.machine_busy >= 0.9;
    let dcqcn = e.dcqcn_limited >= 0.5;
    let cpu = format!(
        "the machine's {} CPUs {:.0} % busy (rnicd engines {:.0} %, programs {:.0} %)",
        e.cpus,
        e.machine_busy * 100.0,
        e.engines * 100.0,
        e.programs * 100.0
    );
    let load = format!(
        "the senders offered {:.1} Mbit/s (median) to a {:.1} Mbit/s link while the queue toward h0 held {:.1} KB (median)",
        e.offered_bps / 1e6,
        e.drain_bps / 1e6,
        e.median_queue as f64 / 1e3
    );
    if e.longest_gap_s > STARVED_S.max(10.0 * e.period_s) {
        let text = format!(
            "the lab's own sampling was starved (a gap of {:.1} s between samples, every {:.0} ms asked), with {cpu}: the hosts' processes outnumber the CPUs; results untrustworthy (fewer hosts)",
            e.longest_gap_s,
            e.period_s * 1e3
        );
        (Level::Untrustworthy, text)
    } else if underfed && (saturated || !dcqcn) {
        let text = format!(
            "the hosts, not the fabric, are the bottleneck: {load}, with {cpu}{}: results untrustworthy (fewer hosts, a lower rate or more CPUs)",
            if dcqcn { "" } else { " and no DCQCN cut holding the senders back" }
        );
        (Level::Untrustworthy, text)
    } else if saturated {
        // not underfed: the queue built, or the senders kept the link full
        let bottleneck = if e.median_queue >= 2 * e.frame {
            format!(
                "the switch queue built ({:.1} KB median)",
                e.median_queue as f64 / 1e3
            )
        } else {
            format!(
                "the senders kept the link full ({:.1} of {:.1} Mbit/s, median)",
                e.offered_bps / 1e6,
                e.drain_bps / 1e6
            )
        };
        let text = format!(
            "{cpu}: {bottleneck}, so the fabric is a bottleneck, but rates and latencies also carry the hosts' own queueing for CPU"
        );
        (Level::Caution, text)
    } else {
        (Level::Ok, format!("{cpu}; {load}"))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The evidence of a run: over the sample intervals in which the senders
/// sent anything (from the first such to the last), with `cpu[i]` read
/// at `snaps[i]`.
pub fn evidence(cfg: &LabConfig, frame: u64, snaps: &[Snapshot], cpu: &[CpuSample]) -> Evidence {
    let n = snaps.first().map_or(0, |s| s.hosts.len());
    let offered = |i: usize| {
        let (a, b) = (&snaps[i - 1], &snaps[i]);
        let bytes: u64 = (1..n)
            .map(|h| counter(b, h, "tx_bytes").saturating_sub(counter(a, h, "tx_bytes")))
            .sum();
        bytes as f64 * 8.0 / (b.t - a.t).max(1e-6)
    };
    let active: Vec<usize> = (1..snaps.len()).filter(|&i| offered(i) > 0.0).collect();
    let (first, last) = (
        active.first().copied().unwrap_or(1),
        active.last().copied().unwrap_or(1),
    );
    let window: Vec<usize> = (first..=last.min(snaps.len().saturating_sub(1))).collect();
    let share = |f: fn(&CpuSample) -> u64| {
        let (a, b) = (cpu.get(first - 1), cpu.get(last));
        match (a, b) {
            (Some(a), Some(b)) if b.total > a.total => {
                f(b).saturating_sub(f(a)) as f64 / (b.total - a.total) as f64
            }
            _ => 0.0,
        }
    };
    let limited: Vec<bool> = window
        .iter()
        .flat_map(|&i| snaps[i].cc.iter().skip(1))
        .flat_map(|c| c.qps.iter().map(|q| q.state.limited))
        .collect();
    Evidence {
        period_s: f64::from(cfg.sample_ms) / 1e3,
        longest_gap_s: window
            .iter()
            .map(|&i| snaps[i].t - snaps[i - 1].t)
            .fold(0.0, f64::max),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        machine_busy: share(|c| c.busy),
        engines: share(|c| c.engines),
        programs: share(|c| c.programs),
        offered_bps: median(window.iter().map(|&i| offered(i)).collect()),
        drain_bps: cfg.rate_bps as f64,
        median_queue: median(
            window
                .iter()
                .map(|&i| snaps[i].ports[0].backlog as f64)
                .collect(),
        ) as u64,
        frame,
        dcqcn_limited: limited.iter().filter(|l| **l).count() as f64 / limited.len().max(1) as f64,
    }
}

/// The verdict and its evidence for `summary.json` (`trust`).
pub fn summary(e: &Evidence) -> Value {
    let (level, why) = assess(e);
    json!({
        "level": level.word(), "why": why,
        "cpus": e.cpus,
        "machine_busy_pct": e.machine_busy * 100.0,
        "engines_cpu_pct": e.engines * 100.0,
        "programs_cpu_pct": e.programs * 100.0,
        "offered_mbits_median": e.offered_bps / 1e6,
        "drain_mbits": e.drain_bps / 1e6,
        "queue_to_h0_median_kb": e.median_queue as f64 / 1e3,
        "longest_sample_gap_s": e.longest_gap_s,
        "dcqcn_limited_share": e.dcqcn_limited,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sample::PortStat;
    use softrnic::proto::{CcStates, QpCcState};

    fn ev(offered_mbits: f64, queue: u64, busy: f64, limited: f64) -> Evidence {
        Evidence {
            period_s: 0.1,
            longest_gap_s: 0.15,
            cpus: 2,
            machine_busy: busy,
            engines: busy / 2.0,
            programs: busy / 4.0,
            offered_bps: offered_mbits * 1e6,
            drain_bps: 100e6,
            median_queue: queue,
            frame: 1082,
            dcqcn_limited: limited,
        }
    }

    #[test]
    fn hosts_that_cannot_fill_the_link_make_a_run_untrustworthy() {
        // the senders reach the link and the queue builds: the fabric
        // is what is measured
        assert_eq!(assess(&ev(120.0, 300_000, 0.6, 0.0)).0, Level::Ok);
        // the CPUs are full but the queue still builds: caution
        let (l, why) = assess(&ev(110.0, 200_000, 0.97, 0.0));
        assert_eq!(l, Level::Caution, "{why}");
        assert!(why.contains("97 % busy"), "{why}");
        assert!(why.contains("the switch queue built (200.0 KB"), "{why}");
        // full CPUs, a short queue, the link kept full: caution, saying so
        let (l, why) = assess(&ev(95.0, 0, 0.99, 1.0));
        assert_eq!(l, Level::Caution, "{why}");
        assert!(why.contains("kept the link full (95.0 of 100.0"), "{why}");
        // a saturated machine whose senders leave the link idle
        let (l, why) = assess(&ev(40.0, 0, 0.99, 0.0));
        assert_eq!(l, Level::Untrustworthy);
        assert!(
            why.starts_with("the hosts, not the fabric, are the bottleneck"),
            "{why}"
        );
        // an idle link, no DCQCN cut to explain it, CPUs not full: still
        // the hosts (one engine's core, a program)
        assert_eq!(assess(&ev(40.0, 1000, 0.5, 0.1)).0, Level::Untrustworthy);
        // DCQCN holding the senders below the link: the fabric's doing
        assert_eq!(assess(&ev(60.0, 1000, 0.5, 0.8)).0, Level::Ok);
        // ... unless the CPUs are full too
        assert_eq!(assess(&ev(60.0, 1000, 0.95, 0.8)).0, Level::Untrustworthy);
        // a sampler that fell 3 s behind: whatever else holds
        let starved = Evidence {
            longest_gap_s: 3.0,
            ..ev(120.0, 300_000, 0.6, 0.0)
        };
        let (l, why) = assess(&starved);
        assert_eq!(l, Level::Untrustworthy);
        assert!(why.contains("a gap of 3.0 s"), "{why}");
        let s = summary(&ev(40.0, 0, 0.99, 0.0));
        assert_eq!(s["level"], "untrustworthy");
        assert_eq!(s["drain_mbits"], 100.0);
    }

    fn snap(t: f64, tx: [u64; 2], backlog: u64, limited: bool) -> Snapshot {
        let host = |v: u64| [("tx_bytes".to_string(), v)].into_iter().collect();
        let qp = |qpn| QpCcState {
            qpn,
            state: nic::cc::RpState {
                enabled: true,
                limited,
                rc_bps: 0,
                rt_bps: 0,
                alpha: 0.0,
                cuts: 0,
                cnps_handled: 0,
            },
        };
        let cc = |qpn| CcStates {
            qps: vec![qp(qpn)],
            ..CcStates::default()
        };
        Snapshot {
            t,
            hosts: vec![host(0), host(tx[0]), host(tx[1])],
            ports: vec![
                PortStat {
                    backlog,
                    ..PortStat::default()
                };
                3
            ],
            cc: vec![CcStates::default(), cc(17), cc(18)],
            pfc_sent: Vec::new(),
            pfc_held: Vec::new(),
        }
    }

    #[test]
    fn evidence_counts_the_samples_in_which_the_senders_sent() {
        let cfg = LabConfig::from_file(Default::default()).unwrap();
        // idle before and after: 1.25 MB per sender per 0.1 s (200 Mbit/s
        // in all) from 0.1 to 0.3 s
        let snaps = [
            snap(0.0, [0, 0], 0, false),
            snap(0.1, [0, 0], 0, false),
            snap(0.2, [1_250_000, 1_250_000], 50_000, true),
            snap(0.3, [2_500_000, 2_500_000], 70_000, true),
            snap(0.4, [2_500_000, 2_500_000], 0, false),
        ];
        let cpu = |busy, total, engines| CpuSample {
            busy,
            total,
            engines,
            programs: 0,
        };
        let cpus = [
            cpu(0, 0, 0),
            cpu(10, 100, 5),
            cpu(60, 150, 30),
            cpu(100, 200, 45),
            cpu(100, 300, 45),
        ];
        let e = evidence(&cfg, 1082, &snaps, &cpus);
        assert!((e.offered_bps - 200e6).abs() < 1.0, "{e:?}");
        assert_eq!(e.median_queue, 70_000);
        assert!((e.machine_busy - 0.9).abs() < 1e-9, "{e:?}");
        assert!((e.engines - 0.4).abs() < 1e-9, "{e:?}");
        assert_eq!(e.dcqcn_limited, 1.0);
        assert!((e.longest_gap_s - 0.1).abs() < 1e-9, "{e:?}");
        assert_eq!(e.period_s, 0.1);
        assert_eq!(e.drain_bps, 100e6);
    }

    #[test]
    fn proc_stat_lines_parse() {
        let stat = "cpu  100 5 50 800 20 1 2 3 0 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n";
        assert_eq!(machine_ticks(stat), Some((161, 981)));
        let p =
            "1234 (rnicd (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 -100 0 3 0 1 2 3";
        assert_eq!(process_ticks(p), Some(325));
        assert_eq!(process_ticks("garbage"), None);
    }
}
