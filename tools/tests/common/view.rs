//! Running a program in `rnic exec`'s view of a test rnicd's devices, as
//! the test's user or as `nobody` (the exec_view tests).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::abi::profile_dir;
use testkit::proc::{Finished, Running};
use testkit::rnicd::{built, have, is_root, Daemon};
use testkit::Missing;

/// The system's Python, the one pyverbs (and so rdma-core's test suite)
/// is installed for.
pub const PYTHON: &str = "/usr/bin/python3";

/// How long one program may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The users a program runs as: the test's own, and `nobody` (no root,
/// so the view needs a user namespace) when the test runs as root.
pub fn users() -> Vec<bool> {
    if is_root() {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// `rnic exec --sock-dir D [extra] -- argv`, as `nobody` when asked.
pub fn exec(d: &Daemon, nobody: bool, extra: &[&str], argv: &[&str]) -> Command {
    let rnic = profile_dir().join("rnic");
    let mut c = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(rnic);
        c
    } else {
        Command::new(rnic)
    };
    c.arg("exec")
        .arg("--sock-dir")
        .arg(d.sock_dir())
        .args(extra)
        .arg("--")
        .args(argv)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    c
}

pub fn run(what: &str, c: Command) -> Finished {
    Running::spawn(what, c).finish(Instant::now() + DEADLINE)
}

pub fn prerequisites(progs: &[&str]) -> Result<(), Missing> {
    built()?;
    for p in progs {
        if !have(p) {
            return Err(format!("{p} not installed").into());
        }
    }
    Ok(())
}

/// A test rnicd when the build and `progs` are here; None after a loud
/// SKIPPED line (a failure under CI) naming `test`.
pub fn daemon_for(test: &str, progs: &[&str]) -> Option<Daemon> {
    match prerequisites(progs) {
        Ok(()) => Some(Daemon::start()),
        Err(why) => {
            testkit::skip_or_fail(test, &why);
            None
        }
    }
}

/// A folder `nobody` may read and write.
pub fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: chmod of our own temp folder, a NUL-terminated path.
    unsafe { libc::chmod(p.as_ptr(), 0o777) };
    dir
}

/// The `key=value` lines of `out`.
pub fn lines(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
