//! Replaying a trace ([`super::trace`]): each flow is an unmodified
//! perftest program (`ib_write_bw`, or `ib_send_bw` for `send`) through
//! the drop-in, `-n` messages of `-s` bytes making the flow's bytes. Every
//! flow's server starts first (one TCP port each, [`BASE_PORT`] + its
//! index) and, once all listen, a thread starts each client at its
//! `start_ms` and notes when it ended. A flow's completion time (FCT) is
//! the lab's view, from starting its client to its exit: perftest's
//! process start and connection setup over TCP are in it, which dominates
//! a small flow; the transfer time beside it comes from perftest's own
//! average rate. The results: `flows.csv`, the FCT-vs-size plot `fct`
//! and the page's flow table.

use super::endpoint::Endpoint;
use super::incast::{failed, reported_gbits};
use super::run_info::{Plot, RunInfo};
use super::sys::{self, Proc};
use super::trace::{FlowResult, Trace, TraceFlow};
use super::{LabConfig, LabError};
use crate::report::{write_file, xy_svg, Labels, Series};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Flow k's server listens on BASE_PORT + k.
pub const BASE_PORT: u16 = 19515;
/// perftest's fewest iterations.
pub const MIN_ITERS: u64 = 5;

/// How a flow's bytes are sent: `-s` bytes, `-n` times (at least
/// [`MIN_ITERS`]; messages of at most `max_size`).
pub fn messages(bytes: u64, max_size: u32) -> (u64, u64) {
    let size = bytes.min(u64::from(max_size).max(1));
    let n = bytes.div_ceil(size);
    if n >= MIN_ITERS {
        (size, n)
    } else {
        (bytes.div_ceil(MIN_ITERS).max(1), MIN_ITERS)
    }
}

/// A flow being replayed.
struct Running {
    flow: TraceFlow,
    size: u64,
    iterations: u64,
    server: Proc,
    client: Option<(Proc, Instant)>,
    end: Option<Instant>,
    server_log: PathBuf,
    client_log: PathBuf,
}

/// The running replay: its launcher thread.
pub struct Replay {
    stop: Arc<AtomicBool>,
    ended: Arc<AtomicUsize>,
    total: usize,
    server_pids: Vec<u32>,
    thread: Option<JoinHandle<Result<Vec<FlowResult>, LabError>>>,
    results: Option<Vec<FlowResult>>,
}

/// The perftest command line of flow `k` (`size` × `n`) on host `h`;
/// to `peer` for a client.
fn argv(
    h: &Endpoint,
    (f, size, n): (&TraceFlow, u64, u64),
    k: usize,
    peer: Option<&str>,
) -> Vec<String> {
    let args = [
        "--report_gbits".to_string(),
        "-n".into(),
        n.to_string(),
        "-s".into(),
        size.to_string(),
    ];
    h.perftest(f.op.program(), &args, BASE_PORT + k as u16, peer)
}

impl Replay {
    /// Starts every flow's server on `hosts` (h0, h1...), waits until
    /// each listens, then starts the thread that starts the clients (the
    /// flows' times count from `t0`, the workload's start).
    pub fn start(
        hosts: Vec<Endpoint>,
        cfg: &LabConfig,
        trace: &Trace,
        logs: &Path,
        t0: Instant,
    ) -> Result<Replay, LabError> {
        let mut flows = Vec::new();
        for (k, f) in trace.flows.iter().enumerate() {
            let (size, iterations) = messages(f.bytes, cfg.size);
            let dst = &hosts[f.dst];
            let tag = format!(
                "{}-flow{k}-{}-{}",
                f.op.program(),
                hosts[f.src].name,
                dst.name
            );
            let server_log = logs.join(format!("{tag}-server.txt"));
            let server = dst.spawn(
                &format!("flow{k}-server"),
                &argv(dst, (f, size, iterations), k, None),
                &server_log,
                format!("{} server of flow {k}", f.op.program()),
            )?;
            flows.push(Running {
                flow: f.clone(),
                size,
                iterations,
                server,
                client: None,
                end: None,
                server_log,
                client_log: logs.join(format!("{tag}-client.txt")),
            });
        }
        for (k, r) in flows.iter_mut().enumerate() {
            let host = &hosts[r.flow.dst];
            sys::wait(&format!("the server of flow {k} listening"), 60, || {
                if let Some(st) = r.server.ended() {
                    return Err(failed("perftest server", &host.name, st, &r.server_log));
                }
                Ok(host
                    .listening(&r.server, BASE_PORT + k as u16)?
                    .then_some(()))
            })?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicUsize::new(0));
        let server_pids = flows.iter().map(|r| r.server.child.id()).collect();
        let (s, e) = (stop.clone(), ended.clone());
        let total = flows.len();
        let thread = std::thread::Builder::new()
            .name("lab-replay".into())
            .spawn(move || launch(&hosts, flows, (t0, Instant::now()), (&s, &e)))
            .map_err(|source| LabError::Io {
                what: "the replay's thread".into(),
                source,
            })?;
        Ok(Replay {
            stop,
            ended,
            total,
            server_pids,
            thread: Some(thread),
            results: None,
        })
    }

    /// The servers' pids (the clients start later).
    pub fn pids(&self) -> Vec<u32> {
        self.server_pids.clone()
    }

    /// `  flows E/N ended`, for the progress line.
    pub fn progress(&self) -> String {
        format!(
            "  flows {}/{} ended",
            self.ended.load(Ordering::Acquire),
            self.total
        )
    }

    /// Whether every flow has ended; an error for one that failed.
    pub fn done(&mut self) -> Result<bool, LabError> {
        if self.results.is_some() {
            return Ok(true);
        }
        match &self.thread {
            Some(t) if !t.is_finished() => return Ok(false),
            _ => {}
        }
        let r = self.thread.take().map(JoinHandle::join);
        match r {
            Some(Ok(Ok(v))) => {
                self.results = Some(v);
                Ok(true)
            }
            Some(Ok(Err(e))) => Err(e),
            _ => Err(LabError::Io {
                what: "the replay's thread ended abnormally".into(),
                source: std::io::ErrorKind::Other.into(),
            }),
        }
    }

    /// The flows' results (those that ended, once it is done).
    pub fn results(&self) -> Vec<FlowResult> {
        self.results.clone().unwrap_or_default()
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The launcher: starts each client at its time after `launch` (times
/// reported from `t0`), notes each end, and returns once all ended (or
/// on `stop`: those that ended so far), or on a failed flow or a signal;
/// the processes stop when it returns.
fn launch(
    hosts: &[Endpoint],
    mut flows: Vec<Running>,
    (t0, launch): (Instant, Instant),
    (stop, ended): (&AtomicBool, &AtomicUsize),
) -> Result<Vec<FlowResult>, LabError> {
    let mut next = 0;
    loop {
        if stop.load(Ordering::Acquire) {
            break;
        }
        sys::stopped()?;
        while next < flows.len()
            && launch.elapsed() >= Duration::from_millis(flows[next].flow.start_ms)
        {
            start_client(hosts, &mut flows[next], next)?;
            next += 1;
        }
        let mut done = 0;
        for r in flows.iter_mut() {
            if r.end.is_some() {
                done += 1;
                continue;
            }
            let Some((c, _)) = r.client.as_mut() else {
                continue;
            };
            if let Some(st) = c.ended() {
                let host = &hosts[r.flow.src].name;
                if !st.success() {
                    return Err(failed("perftest client", host, st, &r.client_log));
                }
                r.end = Some(Instant::now());
                done += 1;
            }
        }
        ended.store(done, Ordering::Release);
        if done == flows.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(flows
        .iter()
        .filter(|r| r.end.is_some())
        .map(|r| result(r, hosts, t0))
        .collect())
}

fn start_client(hosts: &[Endpoint], r: &mut Running, k: usize) -> Result<(), LabError> {
    let f = &r.flow;
    let (src, peer) = (&hosts[f.src], &hosts[f.dst].addr);
    let a = argv(src, (f, r.size, r.iterations), k, Some(peer));
    let at = Instant::now();
    let p = src.spawn(
        &format!("flow{k}-client"),
        &a,
        &r.client_log,
        format!("{} flow {k}", f.op.program()),
    )?;
    r.client = Some((p, at));
    Ok(())
}

fn result(r: &Running, hosts: &[Endpoint], t0: Instant) -> FlowResult {
    let at = r.client.as_ref().map(|c| c.1).unwrap_or(t0);
    let end = r.end.unwrap_or(at);
    FlowResult {
        src: hosts[r.flow.src].name.clone(),
        dst: hosts[r.flow.dst].name.clone(),
        op: r.flow.op,
        bytes: r.flow.bytes,
        size: r.size,
        iterations: r.iterations,
        start_s: at.saturating_duration_since(t0).as_secs_f64(),
        fct_s: end.saturating_duration_since(at).as_secs_f64(),
        reported_gbits: reported_gbits(&std::fs::read_to_string(&r.client_log).unwrap_or_default()),
    }
}

/// `flows.csv`: one row a flow.
pub fn csv(flows: &[FlowResult]) -> String {
    let mut s = String::from(
        "src,dst,op,bytes,size,iterations,start_s,fct_ms,transfer_ms,reported_mbits\n",
    );
    for f in flows {
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{:.3},{:.3},{},{}",
            f.src,
            f.dst,
            f.op.word(),
            f.bytes,
            f.size,
            f.iterations,
            f.start_s,
            f.fct_s * 1e3,
            opt(f.transfer_s().map(|t| t * 1e3)),
            opt(f.reported_gbits.map(|g| g * 1e3)),
        );
    }
    s
}

/// The FCT-vs-size plot's series: the FCT and the transfer time, ms,
/// over the flow's bytes.
pub fn fct_series(flows: &[FlowResult]) -> Vec<Series> {
    let mut by_size: Vec<&FlowResult> = flows.iter().collect();
    by_size.sort_by_key(|f| f.bytes);
    vec![
        Series {
            name: "FCT (client start to exit)".into(),
            points: by_size
                .iter()
                .map(|f| (f.bytes as f64, f.fct_s * 1e3))
                .collect(),
        },
        Series {
            name: "transfer (perftest's average rate)".into(),
            points: by_size
                .iter()
                .filter_map(|f| Some((f.bytes as f64, f.transfer_s()? * 1e3)))
                .collect(),
        },
    ]
}

/// A trace's results: `flows.csv`, the plot `fct` (first on the page) and
/// the summary's `trace` entry.
pub fn add(
    out: &Path,
    info: &RunInfo,
    plots: &mut Vec<Plot>,
    sum: &mut Value,
) -> Result<(), LabError> {
    let Some(flows) = info.trace else {
        return Ok(());
    };
    write_file(&out.join("flows.csv"), csv(flows))?;
    let plot = Plot {
        stem: "fct",
        title: "Flow completion time against flow size",
        y: "time [ms]",
        series: fct_series(flows),
    };
    write_file(&out.join("fct.csv"), plot.csv().replace("time_s", "bytes"))?;
    let labels = Labels {
        title: plot.title,
        x: "flow size [bytes]",
        y: plot.y,
        log_y: true,
        log_x: true,
    };
    write_file(&out.join("fct.svg"), xy_svg(&labels, &plot.series))?;
    plots.insert(0, plot);
    sum["trace"] = json!(flows
        .iter()
        .map(|f| json!({
            "src": f.src, "dst": f.dst, "op": f.op.word(), "bytes": f.bytes,
            "start_s": f.start_s, "fct_ms": f.fct_s * 1e3,
            "transfer_ms": f.transfer_s().map(|t| t * 1e3),
            "reported_mbits": f.reported_gbits.map(|g| g * 1e3),
        }))
        .collect::<Vec<_>>());
    Ok(())
}

/// The page's flow table (empty without a trace).
pub fn html(sum: &Value, esc: fn(&str) -> String) -> String {
    let Some(flows) = sum["trace"].as_array() else {
        return String::new();
    };
    let mut s = String::from(
        "<h2>Replayed flows</h2>\n<p>FCT: from starting the flow's client to its exit (perftest's \
         start and connection setup included); transfer: its bytes at perftest's own average rate \
         (<a href=\"flows.csv\">flows.csv</a>).</p>\n<table>\n<tr><th>flow</th><th>op</th><th>bytes</th>\
         <th>start [s]</th><th>FCT [ms]</th><th>transfer [ms]</th><th>rate [Mbit/s]</th></tr>\n",
    );
    let num = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    for f in flows {
        let _ = writeln!(
            s,
            "<tr><td>{}→{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(f["src"].as_str().unwrap_or("?")),
            esc(f["dst"].as_str().unwrap_or("?")),
            esc(f["op"].as_str().unwrap_or("?")),
            f["bytes"],
            f["start_s"].as_f64().unwrap_or(0.0),
            num(&f["fct_ms"]),
            num(&f["transfer_ms"]),
            num(&f["reported_mbits"]),
        );
    }
    s + "</table>\n"
}

/// One output line per flow.
pub fn report(sum: &Value) -> Vec<String> {
    sum["trace"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "flow {}→{} {} B: FCT {:.1} ms, transfer {:.1} ms at {:.1} Mbit/s",
                f["src"].as_str().unwrap_or("?"),
                f["dst"].as_str().unwrap_or("?"),
                f["bytes"],
                f["fct_ms"].as_f64().unwrap_or(0.0),
                f["transfer_ms"].as_f64().unwrap_or(0.0),
                f["reported_mbits"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::trace::Op;

    #[test]
    fn a_flows_bytes_become_messages() {
        assert_eq!(messages(1_000_000, 65536), (65536, 16));
        assert_eq!(messages(65536 * 10, 65536), (65536, 10));
        assert_eq!(messages(100_000, 65536), (20_000, 5));
        assert_eq!(messages(3, 65536), (1, 5));
    }

    #[test]
    fn flows_csv_and_the_fct_plot() {
        let f = FlowResult {
            src: "h1".into(),
            dst: "h0".into(),
            op: Op::Write,
            bytes: 1_000_000,
            size: 65536,
            iterations: 16,
            start_s: 0.5,
            fct_s: 0.25,
            reported_gbits: Some(0.0838861),
        };
        let mut small = f.clone();
        (
            small.bytes,
            small.size,
            small.iterations,
            small.reported_gbits,
        ) = (100, 20, 5, None);
        let c = csv(&[f.clone(), small.clone()]);
        assert!(
            c.contains("h1,h0,write,1000000,65536,16,0.500,250.000,100.000,83.886\n"),
            "{c}"
        );
        assert!(c.contains("h1,h0,write,100,20,5,0.500,250.000,,\n"), "{c}");
        let s = fct_series(&[f, small]);
        assert_eq!(s[0].points, vec![(100.0, 250.0), (1_000_000.0, 250.0)]);
        assert_eq!(s[1].points.len(), 1);
        assert!((s[1].points[0].1 - 100.0).abs() < 1e-3);
    }
}
