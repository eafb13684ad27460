//! Running the system's tools (ip, tc, nft) and the lab's child
//! processes: every child in a process group of its own (a Ctrl-C on the
//! terminal reaches the lab, which tears down in order) and told to end
//! when the lab ends (PR_SET_PDEATHSIG), so even a killed lab leaves no
//! process behind.

use super::LabError;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

/// The Debian package of a tool, for the message when it is missing.
fn package(prog: &str) -> &'static str {
    match prog {
        "ip" => "iproute2",
        "tc" => "iproute2",
        "nft" => "nftables",
        "ib_write_bw" => "perftest",
        "mpirun" => "openmpi-bin",
        "mpicc" => "libopenmpi-dev",
        _ => "see docs/lab.md",
    }
}

/// Runs `prog args`; a failure is an error with its stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String, LabError> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| missing(prog, source))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            cmd: format!("{prog} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `ip args`.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    run("ip", args)
}

/// `cmd` inside namespace `ns` (`ip netns exec`).
pub fn in_ns(ns: &str, cmd: &[&str]) -> Result<String, LabError> {
    let mut a = vec!["netns", "exec", ns];
    a.extend_from_slice(cmd);
    ip(&a)
}

/// The error for a program that could not be started.
pub fn missing(prog: &str, source: std::io::Error) -> LabError {
    if source.kind() == std::io::ErrorKind::NotFound {
        LabError::Missing {
            prog: prog.into(),
            package: package(prog),
            source,
        }
    } else {
        LabError::Spawn {
            prog: prog.into(),
            source,
        }
    }
}

/// Whether `prog` can be run (`prog --version` or `-V` starts).
pub fn require(prog: &str, version_flag: &str) -> Result<(), LabError> {
    Command::new(prog)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
        .map_err(|source| missing(prog, source))
}

/// A child of the lab: killed and reaped on drop.
pub struct Proc {
    pub child: Child,
    /// What it is, for messages (`rnicd h1`, `ib_write_bw server h0:18516`).
    pub name: String,
}

impl Proc {
    /// Starts `cmd` in namespace `ns` (`ip netns exec`, which execs it: the
    /// pid is the program's), its stdout and stderr into `log`.
    pub fn spawn(
        ns: &str,
        cmd: &[&std::ffi::OsStr],
        log: &Path,
        name: String,
    ) -> Result<Proc, LabError> {
        let mut argv: Vec<&std::ffi::OsStr> = ["ip", "netns", "exec", ns]
            .into_iter()
            .map(std::ffi::OsStr::new)
            .collect();
        argv.extend_from_slice(cmd);
        Proc::spawn_via(&argv, log, name)
    }

    /// Starts the command line `argv` (a program and its arguments), its
    /// stdout and stderr into `log`.
    pub fn spawn_via(
        argv: &[&std::ffi::OsStr],
        log: &Path,
        name: String,
    ) -> Result<Proc, LabError> {
        let io = |source| LabError::Io {
            what: format!("{}", log.display()),
            source,
        };
        let out = std::fs::File::create(log).map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        let prog = argv[0].to_string_lossy().into_owned();
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only sets this child's
        // parent-death signal between fork and exec.
        unsafe {
            c.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().map_err(|source| missing(&prog, source))?;
        Ok(Proc { child, name })
    }

    /// Its exit status once it has ended.
    pub fn ended(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL if it has not ended within `grace`.
    pub fn stop(&mut self, grace: std::time::Duration) {
        if self.ended().is_some() {
            return;
        }
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = std::time::Instant::now();
        while self.ended().is_none() && t0.elapsed() < grace {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(std::time::Duration::from_secs(2));
    }
}

/// The signal that asked the lab to stop (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(sig, Ordering::Release);
}

/// Routes SIGINT and SIGTERM (and SIGHUP) to [`stopped`]: the run notices,
/// tears everything down and ends.
pub fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Err(Interrupted) once a signal asked the lab to stop.
pub fn stopped() -> Result<(), LabError> {
    match STOP.load(Ordering::Acquire) {
        0 => Ok(()),
        sig => Err(LabError::Interrupted(sig)),
    }
}

/// Polls `probe` every 10 ms until it gives `Some`, a signal stops the
/// lab, or `secs` pass (then `Timeout` naming `what`).
pub fn wait<T>(
    what: &str,
    secs: u64,
    mut probe: impl FnMut() -> Result<Option<T>, LabError>,
) -> Result<T, LabError> {
    let t0 = std::time::Instant::now();
    loop {
        stopped()?;
        if let Some(v) = probe()? {
            return Ok(v);
        }
        if t0.elapsed().as_secs() >= secs {
            return Err(LabError::Timeout {
                what: what.into(),
                secs,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether some socket of process `pid`'s network namespace listens on
/// TCP `port` (its /proc/PID/net/tcp and tcp6, state 0A).
pub fn listening(pid: u32, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| listens_in(&t, port))
    })
}

/// Whether the socket table `t` (of /proc/net/tcp or tcp6) has a socket
/// listening (state 0A) on TCP `port`.
pub fn listens_in(t: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    t.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
    })
}
