//! What the CM library's tests share: a `rnicd --mem-pair`
//! (`testkit::rnicd`: t0 is 127.0.0.1, t1 127.0.0.2), programs run with
//! both drop-ins first on the library path, each with a deadline and
//! killed if it outlives it or the test, and a daemon's count of
//! listening CM IDs (so a client starts once its server listens; the
//! namespaces' test reads it from its own daemons too).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use testkit::abi::profile_dir;
pub use testkit::proc::{Finished, Running};
pub use testkit::rnicd::{have, Daemon, STUCK};
pub use testkit::Missing;

/// How long one tool process may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// What the test needs built or installed (`progs` on the PATH), or why
/// it cannot run.
pub fn prerequisites(progs: &[&str]) -> Result<(), Missing> {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        return Err("/usr/include/rdma/rdma_cma.h not installed (librdmacm-dev)".into());
    }
    for p in progs {
        if !have(p) {
            return Err(format!("{p} not installed (rdmacm-utils, perftest)").into());
        }
    }
    testkit::rnicd::built()
}

/// `prog args` with both drop-ins first on the library path, talking to
/// `d`'s devices only.
pub fn command(d: &Daemon, prog: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let path = format!(
        "{}:{}",
        profile_dir().join("softrnic-rdmacm").display(),
        profile_dir().join("softrnic-ibverbs").display()
    );
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", path)
        .env("LD_BIND_NOW", "1")
        .env("SOFTRNIC_SOCK_DIR", d.sock_dir())
        .stdin(Stdio::null());
    c
}

/// Starts `prog args` on `d`'s devices, its output piped.
pub fn start(d: &Daemon, prog: &str, args: &[&str]) -> Running {
    Running::spawn(format!("{prog} {}", args.join(" ")), command(d, prog, args))
}

/// Runs `prog args` to its end (at most [`DEADLINE`]).
pub fn run(d: &Daemon, prog: &str, args: &[&str]) -> Finished {
    start(d, prog, args).finish(Instant::now() + DEADLINE)
}

/// The CM IDs listening on the rnicd device whose socket is `sock`
/// (rnicd's `cm_listeners`).
pub fn listeners_at(sock: &Path) -> Result<u64, CountersError> {
    let at = || sock.display().to_string();
    let c = softrnic::Context::open(sock)
        .map_err(|source| CountersError::Open { sock: at(), source })?;
    let s = c
        .stats()
        .map_err(|source| CountersError::Stats { sock: at(), source })?;
    Ok(s.cm.get("cm_listeners").copied().unwrap_or(0))
}

/// Why a daemon's CM counters could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    /// The device's socket did not open.
    #[error("{sock}: {source}")]
    Open {
        sock: String,
        source: softrnic::Error,
    },
    /// The daemon did not answer the stats request.
    #[error("{sock}: stats: {source}")]
    Stats {
        sock: String,
        source: softrnic::Error,
    },
}

/// Waits until the device at `sock` has more than `before` listening CM
/// IDs, or `server` has ended (then its client fails and shows why).
pub fn wait_listening(sock: &Path, before: u64, server: &mut Running) {
    testkit::wait_for(STUCK, "the server listening", || {
        if server.ended() {
            return Ok(());
        }
        match listeners_at(sock) {
            Ok(n) if n > before => Ok(()),
            Ok(n) => Err(format!("{n} listeners at {}", sock.display())),
            Err(e) => Err(e.to_string()),
        }
    });
}

/// Waits until the device at `sock` has no more than `before` listening
/// CM IDs: the daemon forgets a process's listeners once it sees it gone,
/// and the next run may reuse the port.
pub fn wait_listeners_gone(sock: &Path, before: u64) {
    testkit::wait_for(
        STUCK,
        "the server's listeners gone",
        || match listeners_at(sock) {
            Ok(n) if n <= before => Ok(()),
            Ok(n) => Err(format!("{n} listeners at {}", sock.display())),
            Err(e) => Err(e.to_string()),
        },
    );
}

/// Starts `server` (whose listener is on device `dev`), waits until it
/// listens there, runs `client` to its end, then waits for the server
/// (briefly when the client failed: the server may wait for ever) and for
/// its listeners to be gone.
pub fn server_and_client(
    d: &Daemon,
    dev: &str,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
) -> (Finished, Finished) {
    let sock = d.sock_dir().join(format!("{dev}.sock"));
    let before = listeners_at(&sock).expect("rnicd's CM counters");
    let mut s = start(d, server.0, server.1);
    wait_listening(&sock, before, &mut s);
    let c = run(d, client.0, client.1);
    let grace = if c.ok() {
        DEADLINE
    } else {
        Duration::from_secs(5)
    };
    let s = s.finish(Instant::now() + grace);
    wait_listeners_gone(&sock, before);
    (s, c)
}

/// tests/c/NAME.c built in `dir` against rdma-core's headers, linked to
/// both drop-ins: the program's path.
pub fn c_program(dir: &Path, name: &str) -> std::path::PathBuf {
    let bin = dir.join(name);
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    testkit::abi::build_c(
        src.as_ref(),
        &bin,
        &[
            profile_dir().join("softrnic-rdmacm/librdmacm.so.1"),
            profile_dir().join("softrnic-ibverbs/libibverbs.so.1"),
        ],
    );
    bin
}
