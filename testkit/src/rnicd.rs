//! A `rnicd --mem-pair` of a test's own (devices t0 and t1 in one daemon,
//! its sockets in a fresh folder), as `nobody` when the test runs as root;
//! killed on drop.

use crate::{abi::profile_dir, wait_for};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a test waits for a condition (a socket, a log line, a port
/// state): far more than a loaded machine needs, so only a stuck run
/// reaches it.
pub const STUCK: Duration = Duration::from_secs(60);

/// `rnic stats --daemon` of the rnicd devices whose sockets are in `dir`
/// (transport, port, drop and CM counters), for the report of a failed
/// run.
pub fn counters(dir: &Path) -> String {
    match Command::new(profile_dir().join("rnic"))
        .args(["stats", "--daemon", "--sock-dir"])
        .arg(dir)
        .output()
    {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("(rnic stats --daemon: {e})"),
    }
}

/// Counter `name` of device `dev` in `rnic stats --daemon`'s report
/// (`link DEV/1 name value ...`).
pub fn counter(report: &str, dev: &str, name: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("link {dev}/")))
        .unwrap_or_else(|| panic!("no device {dev} in:\n{report}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    w.windows(2)
        .find(|p| p[0] == name)
        .and_then(|p| p[1].parse().ok())
        .unwrap_or_else(|| panic!("no counter {name} in:\n{line}"))
}

/// `rnic exec --sock-dir DIR --`, the program and its arguments the
/// caller's to add: in network namespace `ns` as `nobody` when one is
/// given (`ip netns exec NS setpriv ...`), else in ours; stdin empty.
pub fn rnic_exec(ns: Option<&str>, sock_dir: &Path) -> Command {
    let rnic = profile_dir().join("rnic");
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "setpriv"])
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(rnic);
            c
        }
        None => Command::new(rnic),
    };
    c.arg("exec")
        .arg("--sock-dir")
        .arg(sock_dir)
        .arg("--")
        .stdin(Stdio::null());
    c
}

/// `rnic exec --` in namespace `ns` as root, the program hosting its
/// device on `iface` itself (`SOFTRNIC_LOCAL`: its port needs
/// CAP_NET_RAW), its stdin empty.
pub fn rnic_exec_hosting(ns: &str, iface: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(profile_dir().join("rnic"))
        .args(["exec", "--"])
        .env("SOFTRNIC_LOCAL", iface)
        .stdin(Stdio::null());
    c
}

/// Whether `prog` is on the PATH.
pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// A command, as `nobody` when we are root.
pub fn cmd(prog: &str) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(prog);
        c
    } else {
        Command::new(prog)
    }
}

/// Whether rnicd and both drop-ins are built; why not otherwise.
pub fn built() -> Result<(), crate::Missing> {
    for p in [
        "rnicd",
        "softrnic-ibverbs/libibverbs.so.1",
        "softrnic-rdmacm/librdmacm.so.1",
        "softrnic-nlshim/libsoftrnic_nlshim.so",
    ] {
        if !profile_dir().join(p).exists() {
            return Err(crate::Missing(format!(
                "{p} not built (cargo build --release -p rnicd -p softrnic-ibverbs -p softrnic-rdmacm -p softrnic-nlshim)"
            )));
        }
    }
    Ok(())
}

/// `rnicd --mem-pair --name t` in its own socket folder; killed on drop.
pub struct Daemon {
    pub child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    pub fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: chmod of our own temp folder (a NUL-terminated path) so
        // `nobody` can use it.
        unsafe { libc::chmod(p.as_ptr(), 0o777) };
        let child = Daemon::spawn(dir.path());
        let mut d = Daemon { child, dir };
        d.wait_up();
        d
    }

    fn spawn(dir: &Path) -> Child {
        cmd(profile_dir().join("rnicd").to_str().expect("utf-8"))
            .args(["--mem-pair", "--name", "t", "--one-thread", "--sock-dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start rnicd")
    }

    fn wait_up(&mut self) {
        wait_for(STUCK, "rnicd's sockets t0 and t1", || {
            let up = ["t0.sock", "t1.sock"].map(|s| self.dir.path().join(s).exists());
            match self.child.try_wait() {
                Ok(Some(st)) => panic!("rnicd exited ({st})"),
                _ if up == [true, true] => Ok(()),
                _ => Err(format!("t0.sock, t1.sock exist: {up:?}")),
            }
        });
    }

    /// Kills the daemon with SIGKILL, as a crash ends it: its sockets stay
    /// behind, and its clients are on their own.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts rnicd again in the same socket folder (killed first if it
    /// still runs); returns once its sockets are there.
    pub fn restart(&mut self) {
        self.kill();
        for s in ["t0.sock", "t1.sock"] {
            let _ = std::fs::remove_file(self.dir.path().join(s));
        }
        self.child = Daemon::spawn(self.dir.path());
        self.wait_up();
    }

    pub fn sock_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
