//! The rnicd of each machine of a lab across machines
//! ([`super::machines`]): started through the machine's launcher in a
//! session of its own, its output into the results folder's `logs/`
//! through the launcher's pipe, its counters read with `rnic stats
//! --daemon --json --qp` run there, and every program the lab started
//! there ended on drop by one teardown command through the launcher.

use super::machines::{teardown_script, Machine};
use super::sys::Proc;
use super::{LabConfig, LabError};
use serde_json::Value;
use softrnic::proto::{CcStates, QpCcState};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What reads a station's counters.
const STATS: &str = "rnic stats --daemon";

/// How long a daemon may take to be READY with its port active.
const START_S: u64 = 60;

/// How long a command through a launcher may take before the lab gives up
/// on it (kills the launcher's process group) with an error naming the
/// machine and the command: a machine that stops answering ends the run
/// instead of hanging it. The teardown script itself waits up to 5 s.
const ANSWER: Duration = Duration::from_secs(30);

/// The error of `what`, a command through `m`'s launcher, in one line
/// naming the machine.
pub fn failed(m: &Machine, what: &'static str, why: impl Into<String>) -> LabError {
    LabError::Machine {
        machine: m.name.clone(),
        what,
        launcher: m.launcher.join(" "),
        why: why.into(),
    }
}

/// Its output once `what` (a command through `m`'s launcher) has ended,
/// an error naming `m` unless it succeeded.
fn checked(
    m: &Machine,
    what: &'static str,
    out: std::io::Result<Output>,
) -> Result<String, LabError> {
    let out = out.map_err(|e| failed(m, what, e.to_string()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().rev().find(|l| !l.trim().is_empty());
    Err(failed(
        m,
        what,
        format!("{} ({})", last.unwrap_or("no message").trim(), out.status),
    ))
}

/// `argv` started in a process group of its own (a Ctrl-C on the
/// terminal reaches the lab alone, which tears down in order), its stdout
/// and stderr piped.
fn start(argv: &[String]) -> std::io::Result<Child> {
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
}

/// What `child` (started by [`start`]) wrote and its status once it has
/// ended and closed its pipes, or an error at `deadline` (its process
/// group killed then).
fn output_by(mut child: Child, deadline: Instant) -> std::io::Result<Output> {
    let (tx, rx) = std::sync::mpsc::channel();
    let pipes: [Option<Box<dyn Read + Send>>; 2] = [
        child.stdout.take().map(|p| Box::new(p) as _),
        child.stderr.take().map(|p| Box::new(p) as _),
    ];
    for (i, pipe) in pipes.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            let _ = tx.send((i, buf));
        });
    }
    let mut got: [Vec<u8>; 2] = Default::default();
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, buf)) => got[i] = buf,
            Err(_) => return Err(gave_up(child)),
        }
    }
    loop {
        if let Some(status) = child.try_wait()? {
            let [stdout, stderr] = got;
            return Ok(Output {
                status,
                stdout,
                stderr,
            });
        }
        if Instant::now() >= deadline {
            return Err(gave_up(child));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills the process group of `child` (a launcher that did not answer in
/// time), reaps it: the error that says so.
fn gave_up(mut child: Child) -> std::io::Error {
    // SAFETY: kill(2) on the process group our own unreaped child leads
    // (started with process_group(0)).
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {} s", ANSWER.as_secs()),
    )
}

/// Runs `argv` to its end, within [`ANSWER`].
fn output(argv: &[String]) -> std::io::Result<Output> {
    output_by(start(argv)?, Instant::now() + ANSWER)
}

/// Runs `cmd` (doing `what`) on `m` to its end; its stdout.
pub fn run_on(m: &Machine, what: &'static str, cmd: &[String]) -> Result<String, LabError> {
    checked(m, what, output(&m.argv(cmd)))
}

/// Writes `text` into file `path` on `m` (doing `what`), executable when
/// `exec`.
pub fn put_file(
    m: &Machine,
    what: &'static str,
    path: &str,
    text: &str,
    exec: bool,
) -> Result<(), LabError> {
    let script = if exec {
        "printf %s \"$1\" > \"$2\" && chmod 755 \"$2\""
    } else {
        "printf %s \"$1\" > \"$2\""
    };
    run_on(m, what, &words(&["sh", "-c", script, "sh", text, path])).map(drop)
}

/// Whether a process on `m` listens on TCP `port` (its `/proc/net/tcp`
/// and `tcp6` read there).
pub fn listens(m: &Machine, port: u16) -> Result<bool, LabError> {
    let table = words(&[
        "sh",
        "-c",
        "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true",
    ]);
    let t = run_on(m, "reading its TCP sockets", &table)?;
    Ok(super::sys::listens_in(&t, port))
}

/// The programs the workload of `cfg` runs on a machine: ib_write_bw
/// (a trace: the perftest programs of its flows), or for a collective
/// mpirun and mpicc; with the probe ib_send_lat.
fn programs(cfg: &LabConfig) -> String {
    let mut p: Vec<&str> = match &cfg.trace {
        _ if cfg.workload.is_collective() => vec!["mpirun", "mpicc"],
        Some(t) => {
            let mut v: Vec<&str> = t.flows.iter().map(|f| f.op.program()).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
        None => vec!["ib_write_bw"],
    };
    if cfg.probe {
        p.push("ib_send_lat");
    }
    p.join(" ")
}

/// Words from string slices.
pub fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// A machine's programs as the lab runs them there.
pub struct Station {
    pub machine: Machine,
    /// Its scratch folder there ([`Machine::scratch`]).
    pub scratch: String,
    /// rnicd's socket folder there.
    pub sock_dir: String,
    /// `rnic` there.
    pub rnic: String,
    /// The launcher's local end of its rnicd.
    pub rnicd: Option<Proc>,
    pub log: PathBuf,
    /// The port backend rnicd reports.
    pub backend: String,
}

impl Station {
    /// Checks that `m` runs commands and has rnicd, rnic, setsid and the
    /// programs the workload runs there (ib_write_bw; mpirun and mpicc;
    /// ib_send_lat...); starts its rnicd and waits for its READY and an
    /// active port.
    pub fn start(
        m: &Machine,
        cfg: &LabConfig,
        lab_id: &str,
        local_rnic: &Path,
        logs: &Path,
    ) -> Result<Station, LabError> {
        let rnicd = m.program("rnicd", local_rnic);
        let rnic = m.program("rnic", local_rnic);
        let check = format!(
            "for p in {} {}; do [ -x \"$p\" ] || {{ echo \"$p: not there (set bin_dir)\" >&2; exit 1; }}; done; \
             for p in {} setsid; do command -v $p >/dev/null || {{ echo \"$p: not installed\" >&2; exit 1; }}; done",
            super::machines::quote(&rnicd),
            super::machines::quote(&rnic),
            programs(cfg)
        );
        run_on(m, "looking for its programs", &words(&["sh", "-c", &check]))?;
        let scratch = m.scratch(lab_id);
        let mut st = Station {
            machine: m.clone(),
            sock_dir: format!("{scratch}/sock"),
            scratch,
            rnic,
            rnicd: None,
            log: logs.join(format!("rnicd-{}.log", m.name)),
            backend: String::new(),
        };
        let mut cmd = vec![
            rnicd,
            "--iface".into(),
            m.iface.clone(),
            "--gid".into(),
            m.addr.to_string(),
            "--name".into(),
            m.name.clone(),
            "--sock-dir".into(),
            st.sock_dir.clone(),
            "--backend".into(),
            cfg.backend.arg().into(),
            // a fabric carries frames, not UDP GSO super-frames
            "--gso".into(),
            "off".into(),
        ];
        if !cfg.dcqcn {
            cmd.extend(["--dcqcn-rp".into(), "off".into()]);
        }
        if let Some(r) = m.rate_bps {
            cmd.extend(["--line-rate".into(), r.to_string()]);
        }
        st.rnicd = Some(st.spawn("rnicd", &cmd, &st.log.clone(), "rnicd")?);
        st.wait_ready()?;
        Ok(st)
    }

    /// Starts `cmd` there in a session of its own recorded as `tag`, its
    /// output into `log`.
    pub fn spawn(
        &self,
        tag: &str,
        cmd: &[String],
        log: &Path,
        what: &str,
    ) -> Result<Proc, LabError> {
        let argv = self.machine.session(&self.scratch, tag, cmd);
        let args: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
        Proc::spawn_via(&args, log, format!("{what} on {}", self.machine.name))
    }

    /// Waits for rnicd's READY and its port active.
    fn wait_ready(&mut self) -> Result<(), LabError> {
        let name = self.machine.name.clone();
        super::sys::wait(&format!("rnicd of {name} READY"), START_S, || {
            self.check_alive()?;
            Ok(self.said().contains("READY").then_some(()))
        })?;
        self.backend = super::host::backend_of(&self.said(), &self.machine.iface)
            .unwrap_or_else(|| "unknown".into());
        super::sys::wait(&format!("{name}: port active"), START_S, || {
            self.check_alive()?;
            // IBV_PORT_ACTIVE
            Ok((self.device()?["port_state"] == 4).then_some(()))
        })
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An error with its log's last line once its rnicd has ended.
    pub fn check_alive(&mut self) -> Result<(), LabError> {
        match self.rnicd.as_mut().and_then(Proc::ended) {
            None => Ok(()),
            Some(st) => Err(LabError::Rnicd {
                host: self.machine.name.clone(),
                status: st.to_string(),
                log: self.said().lines().last().unwrap_or("").to_string(),
            }),
        }
    }

    /// The command line of `rnic stats --daemon --json --qp` there.
    fn stats_argv(&self) -> Vec<String> {
        self.machine.argv(&[
            self.rnic.clone(),
            "stats".into(),
            "--daemon".into(),
            "--json".into(),
            "--qp".into(),
            "--sock-dir".into(),
            self.sock_dir.clone(),
        ])
    }

    /// Its device as `rnic stats --daemon --json --qp` reports it.
    fn device(&self) -> Result<Value, LabError> {
        let argv = self.stats_argv();
        let out = checked(&self.machine, STATS, output(&argv))?;
        device_of(&out, &self.machine.name)
            .ok_or_else(|| failed(&self.machine, STATS, "no device of that name in its answer"))
    }
}

impl Drop for Station {
    /// Ends every program the lab started there (the sessions recorded in
    /// its scratch folder) and removes the folder, through the launcher.
    fn drop(&mut self) {
        let cmd = words(&["sh", "-c", &teardown_script(&self.scratch)]);
        if let Err(e) = run_on(&self.machine, "ending the lab's programs", &cmd) {
            super::say(&format!("teardown: {e}"));
        }
    }
}

/// A host's counters and its QPs' DCQCN state at one instant.
pub type HostSample = (BTreeMap<String, u64>, CcStates);

/// Device `name` of `rnic stats --daemon --json` output.
fn device_of(out: &str, name: &str) -> Option<Value> {
    let doc: Value = serde_json::from_str(out).ok()?;
    doc["devices"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)
        .cloned()
}

/// A device's counters and its QPs' DCQCN state from its `rnic stats
/// --daemon --json --qp` entry.
pub fn counters_of(d: &Value) -> HostSample {
    let counters = d["counters"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect();
    let cc = &d["dcqcn"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let qps = cc["qps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            let s = &q["state"];
            QpCcState {
                qpn: n(q, "lqpn") as u32,
                state: nic::cc::RpState {
                    enabled: n(s, "enabled") != 0,
                    limited: n(s, "limited") != 0,
                    rc_bps: n(s, "rc_bps"),
                    rt_bps: n(s, "rt_bps"),
                    alpha: s["alpha"].as_f64().unwrap_or(0.0),
                    cuts: n(s, "cuts"),
                    cnps_handled: n(s, "rp_cnp_handled"),
                },
            }
        })
        .collect();
    let states = CcStates {
        now_ns: n(cc, "now_ns"),
        line_bps: n(cc, "line_bps"),
        qps,
        next_qpn: None,
    };
    (counters, states)
}

/// Every station's counters and DCQCN state now, asked of all at once.
pub fn sample(stations: &mut [Station]) -> Result<Vec<HostSample>, LabError> {
    let asks = stations
        .iter()
        .map(|s| start(&s.stats_argv()))
        .collect::<Vec<_>>();
    let deadline = Instant::now() + ANSWER;
    let mut all = Vec::new();
    for (s, child) in stations.iter_mut().zip(asks) {
        let out = child.and_then(|c| output_by(c, deadline));
        let text = checked(&s.machine, STATS, out);
        s.check_alive()?;
        let d = device_of(&text?, &s.machine.name)
            .ok_or_else(|| failed(&s.machine, STATS, "no device of that name in its answer"))?;
        all.push(counters_of(&d));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Child {
        start(&words(&["sh", "-c", script])).unwrap()
    }

    #[test]
    fn a_launcher_command_answers_or_is_given_up_on() {
        let soon = || Instant::now() + Duration::from_millis(300);
        let out = output_by(sh("echo out; echo err >&2; exit 3"), soon()).unwrap();
        assert_eq!(
            (out.stdout, out.stderr),
            (b"out\n".to_vec(), b"err\n".to_vec())
        );
        assert_eq!(out.status.code(), Some(3));
        // one that never ends, and one whose background child keeps its
        // pipe open after it has ended: both given up on, their group
        // killed (the background sleep too: nothing keeps the pipe)
        for script in ["sleep 30", "sleep 30 & echo started"] {
            let c = sh(script);
            let group = c.id() as libc::pid_t;
            let e = output_by(c, soon()).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{script}");
            let gone = (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                // SAFETY: kill(2) with signal 0 only asks whether the
                // group exists.
                let there = unsafe { libc::kill(-group, 0) } == 0;
                !there
            });
            assert!(gone, "the group of `{script}` is still there");
        }
    }

    #[test]
    fn counters_and_dcqcn_state_come_from_rnic_stats_json() {
        let out = r#"{"devices":[{"name":"h9","counters":{"tx_bytes":1}},
            {"name":"h1","port":1,"port_state":4,"active_mtu":1024,
             "counters":{"tx_bytes":5000,"rp_cnp_handled":3},
             "dcqcn":{"now_ns":7,"line_bps":100,"qps":[{"lqpn":17,"state":{"rc_bps":50,
               "rt_bps":60,"alpha":0.5,"limited":1,"enabled":1,"cuts":2,"rp_cnp_handled":3}}]}}]}"#;
        let d = super::device_of(out, "h1").unwrap();
        assert_eq!(d["active_mtu"], 1024);
        let (c, cc) = super::counters_of(&d);
        assert_eq!((c["tx_bytes"], c["rp_cnp_handled"]), (5000, 3));
        assert_eq!((cc.now_ns, cc.line_bps, cc.qps.len()), (7, 100, 1));
        let q = cc.qps[0];
        assert_eq!(q.qpn, 17);
        assert!(q.state.limited && q.state.enabled);
        assert_eq!(
            (
                q.state.rc_bps,
                q.state.rt_bps,
                q.state.cuts,
                q.state.cnps_handled
            ),
            (50, 60, 2, 3)
        );
        assert_eq!(q.state.alpha, 0.5);
        assert!(super::device_of(out, "h2").is_none());
        assert!(super::device_of("garbage", "h1").is_none());
    }
}
