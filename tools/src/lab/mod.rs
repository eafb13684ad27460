//! `rnic lab`: a RoCE fabric on one machine. N hosts (network namespaces,
//! each with its own rnicd on a veth) around one switch namespace (a
//! bridge whose egress queue toward each host is a tbf of the link rate,
//! with nftables CE-marking above a threshold), an unmodified
//! `ib_write_bw` incast N-1 → 1 through the drop-in, the hosts' and the
//! switch's counters sampled while it runs, and a results folder of CSV,
//! SVG and one HTML page. Everything it made is torn down on exit, on
//! error, and on SIGINT/SIGTERM. With `[[machine]]` tables the same
//! workload runs across real hosts instead ([`across`]).
//!
//! | module | job |
//! |---|---|
//! | [`config`] | the lab file (TOML), flags over it, the checks |
//! | [`net`] | namespaces, bridge, veths, tbf queues, the nftables marking |
//! | [`host`] | each host's rnicd |
//! | [`workload`] | what a lab runs: the kind, a collective's UCX transports |
//! | [`incast`] | the ib_write_bw workload |
//! | [`mpi`], [`collective`] | Open MPI across the hosts; the allreduce and alltoall workloads |
//! | [`collective_results`], [`fallback`] | a collective's completion times; the signs of a fallback to TCP |
//! | [`sample`] | the counters of hosts and switch, and the senders' DCQCN state, at one instant |
//! | [`capture`] | a pcap per link (tcpdump on each switch port) |
//! | [`trunk`] | two switches: the second switch and the trunk between them |
//! | [`pfc`] | the switches' stage: PFC (802.1Qbb) and CE marking from the egress backlogs |
//! | [`packet`] | the priority PFC pauses; AF_PACKET sockets on a switch port |
//! | [`pfc_hold`] | a trunk port honouring the pauses it receives: its queue held |
//! | [`mark`] | CE marking on a queue's depth: the nftables set of deep ports, changed over nfnetlink |
//! | [`pfc_results`] | its `pfc.csv`, plots and totals |
//! | [`dcqcn`] | the senders' DCQCN state (Rc, Rt, α per QP) over time: `dcqcn.csv`, its plots |
//! | [`trace`], [`replay`] | a trace of flows: its format; replaying it (perftest per flow), FCTs |
//! | [`probe`] | the latency probe: ib_send_lat h1 → h0 in rounds alongside the incast |
//! | [`endpoint`] | a host as the probe's and a trace's perftest programs need it: a namespace here, or a machine through its launcher |
//! | [`scale`] | the CPU time of the machine, the engines and the programs; whether the hosts, not the fabric, were the bottleneck |
//! | [`run_info`], [`results`], [`page`] | what a run was and drew; the results folder |
//! | [`sys`] | running tools and children, signals, waiting |
//! | [`machines`], [`remote`], [`across`], [`remote_collective`] | a lab across machines: the `[[machine]]` tables and their launchers; each machine's rnicd and programs; any workload over the real network; a collective's mpirun, orteds and builds there |

pub mod across;
pub mod capture;
pub mod collective;
pub mod collective_results;
pub mod config;
pub mod dcqcn;
pub mod endpoint;
mod error;
pub mod fallback;
pub mod host;
pub mod incast;
pub mod machines;
pub mod mark;
pub mod mpi;
pub mod net;
pub mod packet;
pub mod page;
pub mod pfc;
pub mod pfc_hold;
pub mod pfc_results;
pub mod probe;
pub mod remote;
pub mod remote_collective;
pub mod replay;
pub mod results;
pub mod run_info;
pub mod sample;
pub mod scale;
pub mod setting;
pub mod sys;
pub mod trace;
pub mod trunk;
pub mod workload;

pub use config::{LabConfig, LabFile};
pub use error::LabError;

use host::Daemon;
use net::Fabric;
use sample::{counter, Snapshot};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lab's scratch folder (the daemons' sockets): removed on drop.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn say(line: &str) {
    eprintln!("lab: {line}");
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}

/// `rnic lab`: builds the lab of `file` with `flags` over it, runs the
/// workload, writes the results into `out`, and tears everything down.
pub fn run(file: Option<&Path>, flags: LabFile, out: &Path) -> Result<(), crate::CliError> {
    lab(file, flags, out).map_err(|e| crate::CliError {
        code: if matches!(e, LabError::Interrupted(_)) {
            130
        } else {
            1
        },
        msg: e.to_string(),
    })
}

/// rnicd: `$SOFTRNIC_RNICD`, else beside this rnic.
fn rnicd_path() -> Result<PathBuf, LabError> {
    let p = match std::env::var_os("SOFTRNIC_RNICD") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(io("this program's path"))?
            .with_file_name("rnicd"),
    };
    if p.is_file() {
        Ok(p)
    } else {
        Err(LabError::Missing {
            prog: p.display().to_string(),
            package: "build it: cargo build --release -p rnicd, or set SOFTRNIC_RNICD",
            source: std::io::ErrorKind::NotFound.into(),
        })
    }
}

fn lab(file: Option<&Path>, flags: LabFile, out: &Path) -> Result<(), LabError> {
    let base = match file {
        Some(f) => LabFile::read(f)?,
        None => LabFile::default(),
    };
    let cfg = LabConfig::from_file(base.overridden_by(flags))?;
    if !cfg.machines.is_empty() {
        let rnic = std::env::current_exe().map_err(io("this program's path"))?;
        sys::catch_signals();
        return across::run(&cfg, &rnic, out);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LabError::NotRoot);
    }
    for (prog, flag) in [("ip", "-V"), ("tc", "-V"), ("nft", "--version")] {
        sys::require(prog, flag)?;
    }
    if cfg.workload.is_collective() {
        collective::require()?;
    } else if let Some(t) = &cfg.trace {
        for op in [trace::Op::Write, trace::Op::Send] {
            if t.flows.iter().any(|f| f.op == op) {
                sys::require(op.program(), "--version")?;
            }
        }
    } else {
        sys::require("ib_write_bw", "--version")?;
    }
    let rnicd = rnicd_path()?;
    let rnic = std::env::current_exe().map_err(io("this program's path"))?;
    sys::catch_signals();
    for gone in net::reap_stale() {
        say(&format!(
            "removed {gone}, left by a lab run that no longer exists"
        ));
    }
    let result = build_and_run(&cfg, &rnicd, &rnic, out);
    say(&format!(
        "torn down: no namespace, link or process of {} is left",
        net::lab_id()
    ));
    result
}

/// The fabric, the daemons and the workload; everything made here is
/// gone when it returns, whatever it returns: the daemons stop, then the
/// namespaces (and their links) go, then the scratch folder.
fn build_and_run(cfg: &LabConfig, rnicd: &Path, rnic: &Path, out: &Path) -> Result<(), LabError> {
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(logs.display().to_string()))?;
    let run_dir = RunDir(std::env::temp_dir().join(net::lab_id()));
    std::fs::create_dir_all(&run_dir.0).map_err(io(run_dir.0.display().to_string()))?;
    say(&format!(
        "{} hosts on {} ({} queues of {} KB, {}), namespaces {}-*",
        cfg.hosts,
        match &cfg.trunk {
            None => "one switch".to_string(),
            Some(t) => format!(
                "two switches (h0..h{} | h{}..h{}; trunk {}, {} KB queues)",
                t.split - 1,
                t.split,
                cfg.hosts - 1,
                config::rate_text(t.rate_bps),
                t.queue_bytes / 1000
            ),
        },
        config::rate_text(cfg.rate_bps),
        cfg.queue_bytes / 1000,
        if cfg.ecn_bytes > 0 {
            format!("CE marks above {} KB of queue", cfg.ecn_bytes / 1000)
        } else {
            "no marking".into()
        },
        net::lab_id()
    ));
    let fabric = Fabric::build(cfg)?;
    sys::wait("carrier on every host's link", 30, || {
        Ok(fabric.all_up().then_some(()))
    })?;
    let mut daemons = Vec::new();
    for h in &fabric.hosts {
        let d = Daemon::start(rnicd, h, cfg, &run_dir.0, &logs)?;
        say(&format!(
            "{} {} rnicd on {} ({})",
            h.name, h.addr, d.backend, h.iface
        ));
        daemons.push(d);
    }
    fabric.shape(cfg.mtu)?;
    let captures = capture::start(&fabric, out, &logs)?;
    let stage = pfc::start(cfg, &fabric, &daemons)?;
    let result = workload(
        rnic,
        cfg,
        &fabric,
        &mut daemons,
        out,
        &run_dir.0,
        stage.as_ref(),
    );
    drop(stage);
    drop(captures);
    drop(daemons);
    drop(fabric);
    drop(run_dir);
    result
}

/// A running workload.
enum Job {
    Incast(Vec<incast::Flow>),
    Collective(collective::Job),
    Trace(replay::Replay),
}

impl Job {
    /// Starts the workload of `cfg` (a collective's program built in
    /// `scratch` first).
    fn start(
        rnic: &Path,
        daemons: &[Daemon],
        cfg: &LabConfig,
        scratch: &Path,
        logs: &Path,
        t0: Instant,
    ) -> Result<Job, LabError> {
        if let Some(trace) = &cfg.trace {
            let hosts = daemons
                .iter()
                .map(|d| endpoint::Endpoint::of_daemon(rnic, d))
                .collect();
            let r = replay::Replay::start(hosts, cfg, trace, logs, t0)?;
            say(&format!(
                "workload running: {} flows of {}",
                trace.flows.len(),
                trace.path.display()
            ));
            return Ok(Job::Trace(r));
        }
        if !cfg.workload.is_collective() {
            let flows = incast::start(rnic, daemons, cfg, logs)?;
            say(&format!(
                "workload running: ib_write_bw h1..h{} → h0 for {} s",
                cfg.hosts - 1,
                cfg.duration_s
            ));
            return Ok(Job::Incast(flows));
        }
        let bin = collective::build(scratch)?;
        let job = collective::start(rnic, daemons, cfg, (bin, scratch), logs)?;
        let hosts = format!("h0..h{}", cfg.hosts - 1);
        say(&format!(
            "workload running: {}",
            collective::running_line(cfg, &hosts)
        ));
        Ok(Job::Collective(job))
    }

    /// How far a collective is (`  iteration I/N`), for the progress line.
    fn progress(&self) -> String {
        match self {
            Job::Incast(_) => String::new(),
            Job::Collective(job) => job.progress(),
            Job::Trace(r) => r.progress(),
        }
    }

    /// The programs it runs (their CPU time is sampled): the perftest
    /// servers and clients, or `mpirun`.
    fn pids(&self) -> Vec<u32> {
        match self {
            Job::Incast(flows) => flows
                .iter()
                .flat_map(|f| {
                    std::iter::once(f.server.child.id())
                        .chain(f.client.as_ref().map(|c| c.child.id()))
                })
                .collect(),
            Job::Collective(job) => vec![job.mpirun.child.id()],
            Job::Trace(r) => r.pids(),
        }
    }

    /// Ends what is left of it; what a collective or a trace did.
    fn finish(
        self,
        cfg: &LabConfig,
    ) -> (
        Option<run_info::CollectiveRun>,
        Option<Vec<trace::FlowResult>>,
    ) {
        match &self {
            Job::Incast(_) => (None, None),
            Job::Collective(j) => (Some(j.run(cfg)), None),
            Job::Trace(r) => (None, Some(r.results())),
        }
    }

    /// Whether it has ended; an error for a part that failed.
    fn done(&mut self) -> Result<bool, LabError> {
        match self {
            Job::Incast(flows) => incast::all_done(flows),
            Job::Collective(job) => job.done(),
            Job::Trace(r) => r.done(),
        }
    }
}

/// The workload with its sampling; writes the results (also of a run cut
/// short by a signal, as far as it went).
fn workload(
    rnic: &Path,
    cfg: &LabConfig,
    fabric: &Fabric,
    daemons: &mut [Daemon],
    out: &Path,
    scratch: &Path,
    stage: Option<&pfc::PfcStage>,
) -> Result<(), LabError> {
    let logs = &out.join("logs");
    let from = cfg.workload.first_sender();
    let mut rec = Record {
        snaps: Vec::new(),
        cpu: Vec::new(),
        watch: scale::CpuWatch::new(daemons.iter().map(|d| d.proc.child.id()).collect()),
    };
    rec.take(0.0, daemons, fabric, stage, from)?;
    let t0 = Instant::now();
    let mut job = Job::start(rnic, daemons, cfg, scratch, logs, t0)?;
    rec.watch.add_programs(job.pids());
    if cfg.probe {
        say("latency probe ib_send_lat h1 → h0");
    }
    let probe = cfg
        .probe
        .then(|| probe::Probe::start(rnic, &daemons[0], &daemons[1], logs, t0));
    let mut ran = sample_until_done(cfg, fabric, daemons, &mut job, &mut rec, t0, stage);
    let (collective, trace) = job.finish(cfg);
    let rounds = probe::Probe::finish_any(probe, &mut ran);
    let frame = daemons[0].data_frame_bytes()?;
    let snaps = rec.snaps;
    let info = run_info::RunInfo {
        hosts: &fabric
            .hosts
            .iter()
            .map(|h| h.name.clone())
            .collect::<Vec<_>>(),
        backends: &daemons
            .iter()
            .map(|d| d.backend.clone())
            .collect::<Vec<_>>(),
        config_toml: cfg.to_toml(),
        marking: marking(cfg),
        reported_gbits: incast::reported_all(
            logs,
            &fabric.hosts[1..]
                .iter()
                .map(|h| h.name.clone())
                .collect::<Vec<_>>(),
        ),
        probe: rounds.as_deref(),
        // the verdict's rules read an incast (senders toward h0's queue)
        trust: (cfg.workload == workload::Workload::Incast)
            .then(|| scale::evidence(cfg, frame, &snaps, &rec.cpu)),
        collective: collective.as_ref(),
        trunk: &fabric
            .trunk
            .as_ref()
            .map(|t| t.ports.iter().map(|p| p.name.clone()).collect::<Vec<_>>())
            .unwrap_or_default(),
        trace: trace.as_deref(),
    };
    if snaps.len() >= 2 {
        let sum = results::write(out, &info, &snaps)?;
        report(&sum, out);
    }
    ran
}

/// Samples every `sample_ms` until every flow has ended (or one failed,
/// a daemon died, a signal came, or the run overstayed its duration by a
/// minute), drawing the progress line.
fn sample_until_done(
    cfg: &LabConfig,
    fabric: &Fabric,
    daemons: &mut [Daemon],
    job: &mut Job,
    rec: &mut Record,
    t0: Instant,
    stage: Option<&pfc::PfcStage>,
) -> Result<(), LabError> {
    let limit = collective::time_limit(cfg);
    every_sample(cfg, job, (t0, limit), |t, job, progress| {
        for d in daemons.iter_mut() {
            d.check_alive()?;
        }
        rec.take(t, daemons, fabric, stage, cfg.workload.first_sender())?;
        progress.draw(&rec.snaps, job);
        Ok(())
    })
}

/// Calls `sample` (with the time since `t0`, the job and the progress
/// line) every `sample_ms` until the job has ended, a signal came, or
/// `limit` has passed since `t0`.
fn every_sample(
    cfg: &LabConfig,
    job: &mut Job,
    (t0, limit): (Instant, Duration),
    mut sample: impl FnMut(f64, &Job, &mut ProgressLine) -> Result<(), LabError>,
) -> Result<(), LabError> {
    let period = Duration::from_millis(u64::from(cfg.sample_ms));
    let mut progress = ProgressLine::new(cfg);
    let mut next = t0 + period;
    loop {
        sys::stopped()?;
        let done = job.done()?;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        next += period;
        sample(t0.elapsed().as_secs_f64(), job, &mut progress)?;
        if done {
            return Ok(());
        }
        if t0.elapsed() > limit {
            return Err(LabError::Timeout {
                what: "the workload's end".into(),
                secs: limit.as_secs(),
            });
        }
    }
}

/// The samples of a run: the counters and, at the same instants, the CPU
/// times.
struct Record {
    snaps: Vec<Snapshot>,
    cpu: Vec<scale::CpuSample>,
    watch: scale::CpuWatch,
}

impl Record {
    /// One sample at `t`; the senders' DCQCN state from host `from` on.
    fn take(
        &mut self,
        t: f64,
        daemons: &[Daemon],
        fabric: &Fabric,
        stage: Option<&pfc::PfcStage>,
        from: usize,
    ) -> Result<(), LabError> {
        self.snaps
            .push(sample::snapshot(t, daemons, fabric, stage, from)?);
        self.cpu.push(self.watch.sample());
        Ok(())
    }
}

/// What the CE marking is, for the output and the page.
pub fn marking(cfg: &LabConfig) -> String {
    if cfg.ecn_bytes == 0 {
        return "off: nothing is marked".into();
    }
    format!(
        "on the queue's real depth, sampled: the switch stage reads each tbf queue's backlog every \
         {} µs and, while a queue holds more than {} KB, nftables CE-marks the ECN-capable RoCEv2 \
         frames toward that port (one threshold, as DCTCP's K). This kernel has no RED, codel or \
         pie qdisc, so the marking follows the sampled backlog; the queue's depth is plotted too \
         (queue.svg).",
        pfc::POLL.as_micros(),
        cfg.ecn_bytes / 1000,
    )
}

/// The run's totals on stderr, and where the page is.
fn report(sum: &serde_json::Value, out: &Path) {
    for f in sum["flows"].as_array().into_iter().flatten() {
        say(&format!(
            "{}→{}: {:.1} Mbit/s, {} CNPs handled, {} retransmitted",
            f["from"].as_str().unwrap_or("?"),
            f["to"].as_str().unwrap_or("?"),
            f["mbits_average"].as_f64().unwrap_or(0.0),
            f["rp_cnp_handled"],
            f["retransmitted_pkts"]
        ));
    }
    let r = &sum["receiver"];
    let marks: u64 = sum["switch_ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["ce_marked"].as_u64())
        .sum();
    let marks = match sum["switch"].as_str() {
        Some(_) => "switch CE marks not observable (the real network's)".to_string(),
        None => format!("switch CE marks {marks}"),
    };
    say(&format!(
        "{marks}; {} received {} marked packets, sent {} CNPs",
        r["host"].as_str().unwrap_or("?"),
        r["np_ecn_marked_roce_packets"],
        r["np_cnp_sent"]
    ));
    pfc_results::report(sum);
    let p = &sum["probe"];
    if p["samples"] == 0 {
        say(&format!(
            "latency probe: no sample while the workload ran ({} in all)",
            p["samples_all"]
        ));
    } else if !p.is_null() {
        say(&format!(
            "latency probe {}→{} ({} samples, half round trip): p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs",
            p["from"].as_str().unwrap_or("?"),
            p["to"].as_str().unwrap_or("?"),
            p["samples"],
            p["p50_us"],
            p["p99_us"],
            p["p999_us"],
            p["max_us"]
        ));
    }
    let t = &sum["trust"];
    if let Some(level) = t["level"].as_str() {
        let level = if level == "untrustworthy" {
            "UNTRUSTWORTHY"
        } else {
            level
        };
        say(&format!(
            "trust: {level}: {}",
            t["why"].as_str().unwrap_or("")
        ));
    } else if !sum["collective"].is_null() {
        say(&format!("trust: {}", scale::NO_VERDICT));
    }
    for l in collective_results::report(sum)
        .into_iter()
        .chain(replay::report(sum))
    {
        say(&l);
    }
    say(&format!("results: {}", out.join("index.html").display()));
}

/// The one-line progress of a run: rewritten in place on a terminal,
/// a line a second otherwise.
struct ProgressLine {
    tty: bool,
    /// The first sending host: h1 in the incast, h0 in a collective.
    from: usize,
    /// The hosts' names: h0.., or the machines'.
    names: Vec<String>,
    total: u32,
    last: Option<Instant>,
}

impl ProgressLine {
    fn new(cfg: &LabConfig) -> ProgressLine {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            from: cfg.workload.first_sender(),
            names: match &cfg.machines[..] {
                [] => (0..cfg.hosts).map(|i| format!("h{i}")).collect(),
                m => m.iter().map(|m| m.name.clone()).collect(),
            },
            total: cfg.duration_s,
            last: None,
        }
    }

    fn draw(&mut self, snaps: &[Snapshot], job: &Job) {
        let every = if self.tty { 200 } else { 1000 };
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_millis(every))
        {
            return;
        }
        let [.., a, b] = snaps else { return };
        self.last = Some(Instant::now());
        let dt = (b.t - a.t).max(1e-6);
        let rates: Vec<String> = (self.from..b.hosts.len())
            .map(|i| {
                let bytes = counter(b, i, "tx_bytes").saturating_sub(counter(a, i, "tx_bytes"));
                let name = self.names.get(i).map_or("?", String::as_str);
                format!("{name} {:.0}", bytes as f64 * 8.0 / dt / 1e6)
            })
            .collect();
        let first = &snaps[0];
        let marks: u64 = b
            .ports
            .iter()
            .zip(&first.ports)
            .map(|(p, q)| p.marked - q.marked.min(p.marked))
            .sum();
        let cnps = counter(b, 0, "np_cnp_sent").saturating_sub(counter(first, 0, "np_cnp_sent"));
        let queue = match b.ports.first() {
            Some(p) => format!(
                "queue→h0 {:.0} KB  CE marks {marks}",
                p.backlog as f64 / 1e3
            ),
            None => "switch not observable".into(),
        };
        let line = format!(
            "lab: {:.1}/{} s{}  Mbit/s: {}  {queue}  CNPs {cnps}",
            b.t,
            self.total,
            job.progress(),
            rates.join(" "),
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r{line:<100}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }
}

/// Ends the line on a terminal, so what follows starts a line of its own.
impl Drop for ProgressLine {
    fn drop(&mut self) {
        if self.tty && self.last.is_some() {
            eprintln!();
        }
    }
}
