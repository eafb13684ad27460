//! A lab across machines: the workload of a lab file with `[[machine]]`
//! tables, one rnicd per real host over the real network. No namespace,
//! switch or queue is built; each machine's rnicd, the incast's perftest
//! servers (on the first machine) and clients (on the others), a
//! collective's MPI job ([`super::remote_collective`]), a trace's flows
//! or the probe's rounds ([`super::endpoint`]) are started through the
//! machines' launchers ([`super::remote`]), the hosts' counters are
//! sampled through them, and the results folder is the same as on the
//! lab's own fabric but for the switch, whose queues and marks are not
//! observable from the hosts (the page and the output say so).

use super::collective;
use super::endpoint::Endpoint;
use super::incast::{self, Flow, BASE_PORT};
use super::probe;
use super::remote::{self, Station};
use super::remote_collective;
use super::replay;
use super::sample::Snapshot;
use super::workload::Workload;
use super::{io, say, sys, Job, LabConfig, LabError};
use std::path::Path;
use std::time::Instant;

/// Why the switch is missing from the results, for the page and the
/// output.
pub const NETWORK: &str = "the real network's: its switches queue, mark (or not) and drop as they \
    are configured, and none of it is observable from the hosts (no queue or CE-mark plot); \
    what the hosts count is: the receiver's ECN-marked packets and CNPs, the senders' CNPs \
    handled and their DCQCN state";

/// Runs the workload of `cfg` across its machines, writes the results into
/// `out`, and ends every program it started there, whatever it returns.
pub fn run(cfg: &LabConfig, rnic: &Path, out: &Path) -> Result<(), LabError> {
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(logs.display().to_string()))?;
    let id = super::net::lab_id();
    say(&format!(
        "{} machines over the real network, scratch folders {id}-<name> in their /tmp",
        cfg.machines.len()
    ));
    let mut stations: Vec<Station> = Vec::new();
    let result = start_all(cfg, (&id, rnic, &logs), &mut stations)
        .and_then(|()| workload(cfg, &mut stations, out));
    // the flows went with the workload; now every machine's rnicd
    drop(stations);
    say(&format!(
        "torn down: every program {id} started on the machines is ended and its scratch folder gone"
    ));
    result
}

/// Starts each machine's rnicd, in order, into `stations`.
fn start_all(
    cfg: &LabConfig,
    (id, rnic, logs): (&str, &Path, &Path),
    stations: &mut Vec<Station>,
) -> Result<(), LabError> {
    for m in &cfg.machines {
        let st = Station::start(m, cfg, id, rnic, logs)?;
        say(&format!(
            "{} {} rnicd on {} ({}) via `{}`",
            m.name,
            m.addr,
            m.iface,
            st.backend,
            m.launcher.join(" ")
        ));
        stations.push(st);
    }
    Ok(())
}

/// Starts the first station's servers, one per sender, waits until each
/// listens there, then the senders' clients.
fn start_flows(cfg: &LabConfig, st: &[Station], logs: &Path) -> Result<Vec<Flow>, LabError> {
    let sink = &st[0];
    let args = incast::perftest_args(cfg);
    let mut flows = Vec::new();
    for (i, h) in st.iter().enumerate().skip(1) {
        let port = BASE_PORT + i as u16;
        let name = &h.machine.name;
        let server_log = logs.join(format!("ib_write_bw-server-{name}.txt"));
        let argv = argv(sink, &args, port, None);
        let server = sink.spawn(&format!("server-{name}"), &argv, &server_log, "ib_write_bw")?;
        flows.push(Flow {
            from: name.clone(),
            server,
            client: None,
            server_log,
            client_log: logs.join(format!("ib_write_bw-client-{name}.txt")),
        });
    }
    for (i, f) in flows.iter_mut().enumerate() {
        let port = BASE_PORT + 1 + i as u16;
        let what = format!(
            "the server for {} listening on {}",
            f.from, sink.machine.name
        );
        sys::wait(&what, 60, || {
            if let Some(st) = f.server.ended() {
                let host = &sink.machine.name;
                return Err(incast::failed(
                    "ib_write_bw server",
                    host,
                    st,
                    &f.server_log,
                ));
            }
            Ok(remote::listens(&sink.machine, port)?.then_some(()))
        })?;
    }
    let peer = sink.machine.addr.to_string();
    for (i, f) in flows.iter_mut().enumerate() {
        let h = &st[i + 1];
        let argv = argv(h, &args, BASE_PORT + 1 + i as u16, Some(&peer));
        let tag = format!("client-{}", h.machine.name);
        f.client = Some(h.spawn(&tag, &argv, &f.client_log, "ib_write_bw")?);
    }
    Ok(flows)
}

/// The perftest command line on station `s` through its `rnic exec`.
fn argv(s: &Station, args: &[String], port: u16, peer: Option<&str>) -> Vec<String> {
    let dev = (Path::new(&s.sock_dir), s.machine.name.as_str());
    incast::perftest_argv(Path::new(&s.rnic), dev, "ib_write_bw", args, port, peer)
}

/// Starts the workload of `cfg`: the incast's flows, a collective, or a
/// trace's flows (their times from `t0`).
fn start(cfg: &LabConfig, st: &[Station], logs: &Path, t0: Instant) -> Result<Job, LabError> {
    let names = |from: usize| {
        st[from..]
            .iter()
            .map(|s| s.machine.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(trace) = &cfg.trace {
        let hosts = st.iter().map(Endpoint::of_station).collect();
        let r = replay::Replay::start(hosts, cfg, trace, logs, t0)?;
        say(&format!(
            "workload running: {} flows of {} on {}",
            trace.flows.len(),
            trace.path.display(),
            names(0)
        ));
        return Ok(Job::Trace(r));
    }
    if cfg.workload.is_collective() {
        let job = remote_collective::start(cfg, st, logs)?;
        let line = collective::running_line(cfg, &names(0));
        say(&format!("workload running: {line}"));
        return Ok(Job::Collective(job));
    }
    let job = Job::Incast(start_flows(cfg, st, logs)?);
    say(&format!(
        "workload running: ib_write_bw {} → {} for {} s",
        names(1),
        st[0].machine.name,
        cfg.duration_s
    ));
    Ok(job)
}

/// The workload with its sampling; writes the results (also of a run cut
/// short, as far as it went).
fn workload(cfg: &LabConfig, st: &mut [Station], out: &Path) -> Result<(), LabError> {
    let logs = &out.join("logs");
    let mut snaps = vec![snapshot(cfg, 0.0, st)?];
    let t0 = Instant::now();
    let mut job = start(cfg, st, logs, t0)?;
    if cfg.probe {
        say(&format!(
            "latency probe ib_send_lat {} → {}",
            st[1].machine.name, st[0].machine.name
        ));
    }
    let probe = cfg
        .probe
        .then(|| probe::Probe::start_across(&st[0], &st[1], logs, t0));
    let mut ran = sample_until_done(cfg, st, &mut job, &mut snaps, t0);
    let (collective, trace) = job.finish(cfg);
    let rounds = probe::Probe::finish_any(probe, &mut ran);
    let hosts: Vec<String> = st.iter().map(|s| s.machine.name.clone()).collect();
    let backends: Vec<String> = st.iter().map(|s| s.backend.clone()).collect();
    let info = super::run_info::RunInfo {
        hosts: &hosts,
        backends: &backends,
        config_toml: cfg.to_toml(),
        marking: NETWORK.into(),
        reported_gbits: match cfg.workload {
            Workload::Incast => incast::reported_all(logs, &hosts[1..]),
            _ => Vec::new(),
        },
        collective: collective.as_ref(),
        trace: trace.as_deref(),
        probe: rounds.as_deref(),
        ..Default::default()
    };
    if snaps.len() >= 2 {
        let sum = super::results::write(out, &info, &snaps)?;
        super::report(&sum, out);
    }
    ran
}

/// Samples every `sample_ms` until every flow has ended (or one failed,
/// an rnicd died, a signal came, or the run overstayed its duration by a
/// minute).
fn sample_until_done(
    cfg: &LabConfig,
    st: &mut [Station],
    job: &mut Job,
    snaps: &mut Vec<Snapshot>,
    t0: Instant,
) -> Result<(), LabError> {
    let limit = super::collective::time_limit(cfg);
    super::every_sample(cfg, job, (t0, limit), |t, job, progress| {
        snaps.push(snapshot(cfg, t, st)?);
        progress.draw(snaps, job);
        Ok(())
    })
}

/// The hosts' counters and DCQCN state at `t`; no switch port (none is
/// observable).
fn snapshot(cfg: &LabConfig, t: f64, st: &mut [Station]) -> Result<Snapshot, LabError> {
    let (hosts, mut cc): (Vec<_>, Vec<_>) = remote::sample(st)?.into_iter().unzip();
    // the senders' DCQCN state; none for the incast's receiver
    for c in &mut cc[..cfg.workload.first_sender()] {
        *c = Default::default();
    }
    Ok(Snapshot {
        t,
        hosts,
        ports: Vec::new(),
        cc,
        pfc_sent: Default::default(),
        pfc_held: Vec::new(),
    })
}
