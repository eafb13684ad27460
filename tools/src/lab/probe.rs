//! The latency probe (`[workload] probe = true`, `--probe`): unmodified
//! `ib_send_lat` from h1 to h0 while the incast runs, so that its small
//! messages wait in the same switch queue toward h0 as the incast's
//! writes. It runs in rounds: h0 starts a server, h1 a client of `-n`
//! ping-pongs of 64 B SENDs with `-e` (perftest sleeps on completion
//! events instead of polling, so the probe takes next to no CPU from the
//! engines) and `-U` (it prints every sample); the next round starts
//! when one ends, until the incast's flows have ended. (perftest's
//! latency tests print their samples only for a number of iterations,
//! and `-D` does not work with events: hence the rounds.) Each round's
//! iterations are sized to last about [`ROUND_S`] at the latency of the
//! previous round's last samples, and are few ([`ITERS`]), so that a
//! round begun before the queue built ends soon after. perftest reports
//! half the round trip of each ping-pong: out through the queue toward
//! h0 and back through the idle queue toward h1.
//!
//! Each sample's time is reckoned back from its round's end (when the
//! client ended), a round trip (twice the sample) per ping-pong; the
//! percentiles count the samples within the incast ([`incast_window`]:
//! from the first sample interval in which every sender sent to the last
//! one), not those of the flows' start-up and end. A ping-pong is a
//! closed loop: while the queue is long, samples come slowly, so the
//! percentiles are of ping-pongs, not of time.
//!
//! The probe shares h1's rnicd with h1's incast flow: its QP is another
//! QP of that engine, paced on its own (DCQCN cuts the rate of the QP
//! that got the CNP, not the probe's).
//!
//! Across machines ([`Probe::start_across`]) each round's server and
//! client run through the machines' launchers, each in a session
//! recorded in its machine's scratch folder as every program of the lab
//! there, and the server is seen listening in the first machine's
//! `/proc/net/tcp`.

use super::endpoint::Endpoint;
use super::host::Daemon;
use super::incast::{failed, BASE_PORT};
use super::remote::Station;
use super::run_info::{Plot, Round};
use super::sample::{counter, Snapshot};
use super::{config::MAX_HOSTS, sys, LabError};
use crate::report::Series;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The probe's message size, bytes.
pub const SIZE: u32 = 64;
/// How long a round should take, seconds.
pub const ROUND_S: f64 = 0.5;
/// The iterations of the first round.
const FIRST_ITERS: u32 = 20;
/// The fewest and the most iterations of a round (perftest wants 5 or
/// more).
pub const ITERS: (u32, u32) = (5, 50);
/// The samples of a round's end that size the next one.
const RECENT: usize = 5;
/// How long the last round may run on after the incast's end before it is
/// stopped (its samples are then lost: perftest prints them at its end).
pub const GRACE: Duration = Duration::from_secs(10);
/// The probe's servers listen on this many ports above the incast's.
const PORTS: u16 = 100;

/// What the rounds are run from.
struct Setup {
    sink: Endpoint,
    src: Endpoint,
    logs: PathBuf,
    t0: Instant,
}

/// A running probe: a thread of the lab that runs the rounds.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<Round>, LabError>>,
}

impl Probe {
    /// Starts the rounds from `src` to `sink`; `t0` is the workload's
    /// start.
    pub fn start(rnic: &Path, sink: &Daemon, src: &Daemon, logs: &Path, t0: Instant) -> Probe {
        Probe::run(Setup {
            sink: Endpoint::of_daemon(rnic, sink),
            src: Endpoint::of_daemon(rnic, src),
            logs: logs.to_path_buf(),
            t0,
        })
    }

    /// Starts the rounds from machine `src` to machine `sink`, through
    /// their launchers; `t0` is the workload's start.
    pub fn start_across(sink: &Station, src: &Station, logs: &Path, t0: Instant) -> Probe {
        Probe::run(Setup {
            sink: Endpoint::of_station(sink),
            src: Endpoint::of_station(src),
            logs: logs.to_path_buf(),
            t0,
        })
    }

    fn run(setup: Setup) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || rounds(&setup, &flag));
        Probe { stop, thread }
    }

    /// The rounds of `probe` if one ran ([`Probe::finish`]); its error,
    /// if any, joins `ran`'s.
    pub fn finish_any(probe: Option<Probe>, ran: &mut Result<(), LabError>) -> Option<Vec<Round>> {
        match probe.map(Probe::finish) {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                if ran.is_ok() {
                    *ran = Err(e);
                }
                None
            }
            None => None,
        }
    }

    /// Starts no other round, lets the one under way end (within
    /// [`GRACE`]); the rounds' samples.
    pub fn finish(self) -> Result<Vec<Round>, LabError> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or(Err(LabError::ProbeThread))
    }
}

/// Rounds until `stop`.
fn rounds(s: &Setup, stop: &AtomicBool) -> Result<Vec<Round>, LabError> {
    let mut done = Vec::new();
    let mut iters = FIRST_ITERS;
    let mut k = 0u32;
    while !stop.load(Ordering::Acquire) {
        let Some(samples_us) = round(s, k, iters, stop)? else {
            break;
        };
        let recent = &samples_us[samples_us.len().saturating_sub(RECENT)..];
        iters = next_iters(recent);
        done.push(Round {
            end_s: s.t0.elapsed().as_secs_f64(),
            samples_us,
        });
        k += 1;
    }
    Ok(done)
}

/// The iterations that last about [`ROUND_S`] at the mean of `samples`
/// (half round trips, µs).
fn next_iters(samples: &[f64]) -> u32 {
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    let n = ROUND_S * 1e6 / (2.0 * mean.max(1.0));
    (n as u32).clamp(ITERS.0, ITERS.1)
}

/// The command line of `h`'s side of round `iters` on `port`.
fn argv(h: &Endpoint, iters: u32, port: u16, peer: Option<&str>) -> Vec<String> {
    let args = [
        "-e".to_string(),
        "-U".into(),
        "-s".into(),
        SIZE.to_string(),
        "-n".into(),
        iters.to_string(),
    ];
    h.perftest("ib_send_lat", &args, port, peer)
}

/// Round `k`: the server on the sink, once it listens the client on the
/// source, to the client's end; its samples, or `None` when it was still
/// running [`GRACE`] after `stop`.
fn round(s: &Setup, k: u32, iters: u32, stop: &AtomicBool) -> Result<Option<Vec<f64>>, LabError> {
    let port = BASE_PORT + MAX_HOSTS as u16 + (k % u32::from(PORTS)) as u16;
    let log = |role: &str| s.logs.join(format!("ib_send_lat-{role}-{k}.txt"));
    let (slog, clog) = (log("server"), log("client"));
    let server_argv = argv(&s.sink, iters, port, None);
    let what = format!("ib_send_lat server (probe round {k})");
    let mut server = s.sink.spawn("probe-server", &server_argv, &slog, what)?;
    sys::wait("the probe's server listening", 60, || {
        if let Some(st) = server.ended() {
            return Err(failed("ib_send_lat server", &s.sink.name, st, &slog));
        }
        Ok(s.sink.listening(&server, port)?.then_some(()))
    })?;
    let client_argv = argv(&s.src, iters, port, Some(&s.sink.addr));
    let what = format!(
        "ib_send_lat {} → {} (probe round {k})",
        s.src.name, s.sink.name
    );
    let mut client = s.src.spawn("probe-client", &client_argv, &clog, what)?;
    let mut asked: Option<Instant> = None;
    loop {
        sys::stopped()?;
        if let Some(st) = client.ended() {
            if !st.success() {
                return Err(failed("ib_send_lat client", &s.src.name, st, &clog));
            }
            break;
        }
        if stop.load(Ordering::Acquire) && asked.get_or_insert_with(Instant::now).elapsed() > GRACE
        {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = std::fs::read_to_string(&clog).map_err(|source| LabError::Io {
        what: clog.display().to_string(),
        source,
    })?;
    Ok(Some(unsorted(&out)))
}

/// The samples perftest's `-U` prints: the `N, usec` rows under `#, usec`.
/// A row of `inf` (perftest could not calibrate its clock, under load)
/// measured nothing and is left out.
pub fn unsorted(out: &str) -> Vec<f64> {
    out.lines()
        .skip_while(|l| l.trim() != "#, usec")
        .skip(1)
        .map_while(|l| {
            let (n, us) = l.split_once(',')?;
            n.trim().parse::<u64>().ok()?;
            us.trim().parse::<f64>().ok()
        })
        .filter(|us| us.is_finite())
        .collect()
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied()
}

/// The window of the incast in `snaps` (seconds since the first): from
/// the start of the first sample interval in which every sender (hosts 1
/// and up) sent bytes to the end of the last such.
pub fn incast_window(snaps: &[Snapshot]) -> Option<(f64, f64)> {
    let t0 = snaps.first()?.t;
    let n = snaps[0].hosts.len();
    let all_sent = |a: &Snapshot, b: &Snapshot| {
        n > 1 && (1..n).all(|h| counter(b, h, "tx_bytes") > counter(a, h, "tx_bytes"))
    };
    let busy: Vec<(f64, f64)> = snaps
        .windows(2)
        .filter(|w| all_sent(&w[0], &w[1]))
        .map(|w| (w[0].t - t0, w[1].t - t0))
        .collect();
    Some((busy.first()?.0, busy.last()?.1))
}

/// The totals for `summary.json`: the rounds, the samples, and the
/// median, 99th and 99.9th percentile and maximum, µs, of the samples
/// within `window` (seconds; all of them without one).
pub fn summary(rounds: &[Round], window: Option<(f64, f64)>, from: &str, to: &str) -> Value {
    let all: Vec<(f64, f64)> = rounds.iter().flat_map(Round::timed).collect();
    let mut inside: Vec<f64> = all
        .iter()
        .filter(|(t, _)| window.is_none_or(|(a, b)| (a..=b).contains(t)))
        .map(|p| p.1)
        .collect();
    inside.sort_by(f64::total_cmp);
    json!({
        "program": "ib_send_lat -e",
        "from": from, "to": to, "size": SIZE,
        "rounds": rounds.len(), "samples_all": all.len(),
        "window_s": window.map(|(a, b)| [a, b]),
        "samples": inside.len(),
        "p50_us": quantile(&inside, 0.5), "p99_us": quantile(&inside, 0.99),
        "p999_us": quantile(&inside, 0.999), "max_us": inside.last(),
    })
}

/// The plot of every sample over time (log scale, µs).
pub fn plot(rounds: &[Round], from: &str, to: &str) -> Plot {
    let points = rounds.iter().flat_map(Round::timed).collect();
    Plot {
        stem: "probe",
        title: "Latency probe: ib_send_lat 64 B, half round trip (log scale)",
        y: "µs",
        series: vec![Series {
            name: format!("{from}→{to} ib_send_lat"),
            points,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_come_from_perftests_unsorted_rows() {
        let out = " #bytes #iterations    t_min[usec]\n#, usec\n1, 96.0283\n2, 45.8935\n3, 29.19\n\
                   ---------------------------------------------------------------------------------------\n \
                   #bytes #iterations    t_min[usec]\n 64      3          16.70\n";
        assert_eq!(unsorted(out), vec![96.0283, 45.8935, 29.19]);
        assert!(unsorted("Couldn't connect").is_empty());
        assert_eq!(unsorted("#, usec\n1, inf\n2, 30.5\n3, inf\n"), vec![30.5]);
    }

    #[test]
    fn percentiles_pool_the_rounds_within_the_window_by_nearest_rank() {
        let r = |end_s, samples_us: Vec<f64>| Round { end_s, samples_us };
        // 1..=1000 µs over two rounds: 501..=1000 ending at 10 s (0.7505 s
        // of round trips), 1..=500 ending at 20 s
        let rounds = [
            r(10.0, (501..=1000).map(f64::from).collect()),
            r(20.0, (1..=500).map(f64::from).collect()),
        ];
        let s = summary(&rounds, None, "h1", "h0");
        assert_eq!(
            (s["samples"].as_u64(), s["rounds"].as_u64()),
            (Some(1000), Some(2))
        );
        assert_eq!(s["p50_us"], 500.0);
        assert_eq!(s["p99_us"], 990.0);
        assert_eq!(s["p999_us"], 999.0);
        assert_eq!(s["max_us"], 1000.0);
        let s = summary(&rounds, Some((9.0, 10.0)), "h1", "h0");
        assert_eq!(
            (s["samples"].as_u64(), s["samples_all"].as_u64()),
            (Some(500), Some(1000))
        );
        assert_eq!(
            (s["p50_us"].as_f64(), s["max_us"].as_f64()),
            (Some(750.0), Some(1000.0))
        );
        let a = rounds[0].timed();
        assert_eq!(a[499], (10.0, 1000.0));
        assert!((a[498].0 - (10.0 - 2e-3)).abs() < 1e-9, "{:?}", a[498]);
        assert!(
            (a[0].0 - (10.0 - 0.7505 + 2.0 * 501e-6)).abs() < 1e-9,
            "{:?}",
            a[0]
        );
        assert_eq!(plot(&rounds, "h1", "h0").series[0].points.len(), 1000);
        let empty = summary(&[], None, "h1", "h0");
        assert_eq!(
            (empty["samples"].as_u64(), empty["p99_us"].is_null()),
            (Some(0), true)
        );
    }

    #[test]
    fn the_window_is_while_every_sender_sends() {
        let snap = |t: f64, tx: [u64; 2]| Snapshot {
            t,
            hosts: std::iter::once(0)
                .chain(tx)
                .map(|v| [("tx_bytes".to_string(), v)].into_iter().collect())
                .collect(),
            ports: Vec::new(),
            cc: Vec::new(),
            pfc_sent: Vec::new(),
            pfc_held: Vec::new(),
        };
        let snaps = [
            snap(5.0, [0, 0]),
            snap(5.5, [10, 0]),
            snap(6.0, [20, 10]),
            snap(6.5, [30, 20]),
            snap(7.0, [30, 30]),
        ];
        assert_eq!(incast_window(&snaps), Some((0.5, 1.5)));
        assert_eq!(incast_window(&snaps[..2]), None);
    }

    #[test]
    fn a_round_lasts_about_half_a_second_at_the_last_latency() {
        assert_eq!(next_iters(&[50.0; 4]), 50);
        assert_eq!(next_iters(&[10_000.0]), 25);
        assert_eq!(next_iters(&[200_000.0]), 5);
        assert_eq!(next_iters(&[]), 50);
    }
}
