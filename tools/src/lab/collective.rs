//! The MPI collectives (`kind = "allreduce"` or `"alltoall"`): our
//! program `tools/lab/collective.c`, built with `mpicc` into the lab's
//! scratch folder, run by Open MPI over UCX with one rank per host
//! (launched as [`super::mpi`] says), every host sending and receiving.
//! An allreduce is Open MPI's ring (its tuned algorithm 4, forced); an
//! alltoall is what Open MPI's tuned decision picks.
//! Rank 0 prints each iteration's completion time (the slowest rank's,
//! an MPI_Allreduce of the maximum after each iteration); the lab reads
//! them from `logs/mpirun.txt` ([`iteration_times`]).
//!
//! With `ucx_tls = "tcp"` UCX may use TCP sockets only (`UCX_TLS=tcp,self`,
//! each host's `UCX_NET_DEVICES` its veth): the job runs as before while
//! the RNICs carry nothing — the silent fallback [`super::fallback`]
//! shows.

use super::host::Daemon;
use super::mpi::{self, AgentHost};
use super::run_info::CollectiveRun;
use super::sys::{self, Proc};
use super::workload::{UcxTls, Workload};
use super::{LabConfig, LabError};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program's source, written into the scratch folder and built there.
pub const SOURCE: &str = include_str!("../../lab/collective.c");

/// The hosts' subnet, for Open MPI's out-of-band TCP.
const OOB_NET: &str = "192.0.2.0/24";

/// A running collective job: `mpirun` in h0.
pub struct Job {
    pub mpirun: Proc,
    /// Its output (rank 0's lines, UCX's endpoint report).
    pub log: PathBuf,
    /// The iterations asked for (0: for a duration).
    pub iterations: u32,
}

/// Builds the program with `mpicc` in `dir` (the lab's scratch folder);
/// its path.
pub fn build(dir: &Path) -> Result<PathBuf, LabError> {
    let src = dir.join("collective.c");
    let bin = dir.join("collective");
    std::fs::write(&src, SOURCE).map_err(|source| LabError::Io {
        what: src.display().to_string(),
        source,
    })?;
    let out = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|source| sys::missing("mpicc", source))?;
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: format!("mpicc -O2 -o {} {}", bin.display(), src.display()),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(bin)
}

/// Whether `mpicc` and `mpirun` are here (before anything is built).
pub fn require() -> Result<(), LabError> {
    sys::require("mpicc", "--version")?;
    sys::require("mpirun", "--version")
}

/// Each host as the launcher agent reaches it; with TCP, its
/// `UCX_NET_DEVICES` is its veth.
fn agent_hosts<'a>(daemons: &'a [Daemon], cfg: &LabConfig, dir: &Path) -> Vec<AgentHost<'a>> {
    daemons
        .iter()
        .map(|d| AgentHost {
            addr: d.net.addr,
            ns: &d.net.ns,
            sock_dir: &d.sock_dir,
            session: dir.join(format!("session-{}", d.net.name)),
            env: net_devices(cfg, d),
        })
        .collect()
}

/// `UCX_NET_DEVICES` of host `d` with TCP: its veth (UCX's TCP transport
/// would otherwise also take the loopback).
fn net_devices(cfg: &LabConfig, d: &Daemon) -> Vec<(String, String)> {
    match cfg.ucx_tls {
        UcxTls::Rdma => Vec::new(),
        UcxTls::Tcp => vec![("UCX_NET_DEVICES".into(), d.net.iface.clone())],
    }
}

/// Starts `mpirun` in h0 through `rnic exec`: program `bin` ([`build`])
/// running the collective of `cfg` over every host, launched from `dir`
/// (the lab's scratch folder: the agent, the session folders), its output
/// into `logs/mpirun.txt`.
pub fn start(
    rnic: &Path,
    daemons: &[Daemon],
    cfg: &LabConfig,
    (bin, dir): (PathBuf, &Path),
    logs: &Path,
) -> Result<Job, LabError> {
    let io = |source| LabError::Io {
        what: dir.join("agent.sh").display().to_string(),
        source,
    };
    let agent = mpi::write_agent(dir, rnic, &agent_hosts(daemons, cfg, dir)).map_err(io)?;
    let h0 = &daemons[0];
    // mpirun runs rank 0 itself: it takes h0's environment from here
    let mut argv: Vec<OsString> = vec!["env".into()];
    for (k, v) in mpi::AS_ROOT.iter().copied().chain(
        net_devices(cfg, h0)
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    ) {
        argv.push(format!("{k}={v}").into());
    }
    argv.extend([rnic.into(), "exec".into(), "--sock-dir".into()]);
    argv.extend([h0.sock_dir.clone().into(), "--".into()]);
    let addrs: Vec<_> = daemons.iter().map(|d| d.net.addr).collect();
    argv.extend(mpi::mpirun_args(&addrs, &agent, OOB_NET, cfg.ucx_tls.tls()));
    argv.extend(algorithm_options(cfg));
    argv.push(bin.into_os_string());
    argv.extend(program_args(cfg));
    let log = logs.join("mpirun.txt");
    let args: Vec<&std::ffi::OsStr> = argv.iter().map(OsString::as_os_str).collect();
    let name = format!("mpirun {} on {} hosts", cfg.workload.word(), daemons.len());
    let mpirun = Proc::spawn(&h0.net.ns, &args, &log, name)?;
    Ok(Job {
        mpirun,
        log,
        iterations: cfg.iterations,
    })
}

/// What runs, for the output: `MPI allreduce of S B on HOSTS over UCX
/// rdma (TLS), N iterations` (or `for D s`).
pub fn running_line(cfg: &LabConfig, hosts: &str) -> String {
    let length = match cfg.iterations {
        0 => format!("for {} s", cfg.duration_s),
        n => format!("{n} iterations"),
    };
    format!(
        "MPI {} of {} B on {hosts} over UCX {} ({}), {length}",
        cfg.workload.word(),
        cfg.size,
        cfg.ucx_tls.word(),
        cfg.ucx_tls.tls()
    )
}

/// `mpirun`'s options that pick the collective's algorithm: for an
/// allreduce the ring (Open MPI's tuned algorithm 4), whatever its
/// decision table would pick for the size and the ranks.
pub fn algorithm_options(cfg: &LabConfig) -> Vec<OsString> {
    if cfg.workload != Workload::Allreduce {
        return Vec::new();
    }
    [
        "--mca",
        "coll_tuned_use_dynamic_rules",
        "1",
        "--mca",
        "coll_tuned_allreduce_algorithm",
        "4",
    ]
    .map(OsString::from)
    .to_vec()
}

/// The program's arguments: the collective, the size, the iterations and
/// the duration of `cfg`.
pub fn program_args(cfg: &LabConfig) -> Vec<OsString> {
    vec![
        cfg.workload.word().into(),
        cfg.size.to_string().into(),
        cfg.iterations.to_string().into(),
        cfg.duration_s.to_string().into(),
    ]
}

impl Job {
    /// Whether the job has ended; an error if it failed or reported no
    /// iteration.
    pub fn done(&mut self) -> Result<bool, LabError> {
        let status = match self.mpirun.ended() {
            None => return Ok(false),
            Some(st) if st.success() && !iteration_times(&self.output()).is_empty() => {
                return Ok(true)
            }
            Some(st) if st.success() => "it reported no iteration".into(),
            Some(st) => st.to_string(),
        };
        Err(LabError::Workload {
            what: "mpirun",
            host: "h0".into(),
            status,
            log: self.log.clone(),
        })
    }

    /// What it did, as far as it went.
    pub fn run(&self, cfg: &LabConfig) -> CollectiveRun {
        let out = self.output();
        CollectiveRun {
            workload: cfg.workload,
            size: cfg.size,
            ucx_tls: cfg.ucx_tls,
            times_us: iteration_times(&out),
            endpoints: mpi::endpoint_transports(&out),
        }
    }

    /// `  iteration I/N` (`I` when run for a duration): the iterations
    /// rank 0 has reported so far.
    pub fn progress(&self) -> String {
        let done = iteration_times(&self.output()).len();
        match self.iterations {
            0 => format!("  iteration {done}"),
            n => format!("  iteration {done}/{n}"),
        }
    }

    /// What it said so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// How long a run may take before the lab gives up: the duration and a
/// minute, or with a count of iterations ten minutes.
pub fn time_limit(cfg: &LabConfig) -> std::time::Duration {
    std::time::Duration::from_secs(if cfg.iterations > 0 {
        600
    } else {
        u64::from(cfg.duration_s) + 60
    })
}

/// Rank 0's completion times, µs, in order (`iteration I time_us T`).
pub fn iteration_times(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["iteration", _, "time_us", t] => t.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_come_from_rank_0s_lines() {
        let out = "iteration 0 time_us 812.5\n[1] ucp INFO ep_cfg[0]: tag(rc_verbs/h1:1)\niteration 1 time_us 790\niteration 2 time_us x\ncollective done: 2 iterations\n";
        assert_eq!(super::iteration_times(out), [812.5, 790.0]);
    }
}
