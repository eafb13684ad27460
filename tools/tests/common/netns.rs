//! Two network namespaces joined by a veth pair (MTU 9000, 192.0.2.1 and
//! .2), and `rnic` run inside them with `ip netns exec`: a server in the
//! background, a client in the foreground, both killed if they overrun.
//! The namespaces go away when the `Link` drops, even when a test fails.

use super::{poll_within, STUCK};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;
use testkit::netns::{self, Namespaces};

/// Namespaces need root; CI runs as root and must not skip.
pub fn can_run(test: &str) -> bool {
    testkit::runs_here(test, netns::available())
}

pub struct Link {
    pub ns: [String; 2],
    pub ifs: [String; 2],
    pub ips: [&'static str; 2],
    _guard: Namespaces,
    // last: the namespaces go before the next test may start
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// One link at a time per test binary: each side of a run is a busy-polling
/// process, and two runs at once on a two-core machine would only time-share.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Namespaces `rnic-<tag>a-<pid>` and `...b-<pid>` joined by a veth pair.
pub fn link(tag: &str) -> Link {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let id = std::process::id() % 100_000;
    let ns = [
        netns::ns_name(&format!("{tag}a")),
        netns::ns_name(&format!("{tag}b")),
    ];
    let guard = Namespaces::create(&ns).expect("create namespaces");
    let ifs = [format!("r{tag}a{id}"), format!("r{tag}b{id}")];
    netns::veth(
        &ns[0],
        &ifs[0],
        "192.0.2.1/24",
        &ns[1],
        &ifs[1],
        "192.0.2.2/24",
        9000,
    )
    .expect("veth pair");
    Link {
        ns,
        ifs,
        ips: ["192.0.2.1", "192.0.2.2"],
        _guard: guard,
        _serial: serial,
    }
}

/// `ip netns exec NS rnic ARGS...` with a private state directory.
pub fn rnic_in(ns: &str, state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_rnic")])
        .args(args)
        .env("SOFTRNIC_STATE_DIR", state)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A child whose output is collected as it comes; killed on drop.
pub struct Running {
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    what: String,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

pub fn spawn(mut c: Command, what: &str) -> Running {
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    Running {
        child,
        out,
        err,
        what: what.to_string(),
    }
}

impl Running {
    /// Waits for the exit; a child still running after `limit` is killed
    /// (its stderr then ends with a line saying so, and its status is a
    /// failure).
    pub fn finish(mut self, limit: Duration) -> Output {
        if let Some(s) = poll_within(limit, || self.child.try_wait().expect("wait")) {
            return self.collect(s);
        }
        let _ = self.child.kill();
        let s = self.child.wait().expect("wait");
        let mut out = self.collect(s);
        out.stderr.extend_from_slice(
            format!("\n[{} killed: still running after {limit:?}]\n", self.what).as_bytes(),
        );
        out
    }

    fn collect(&mut self, status: std::process::ExitStatus) -> Output {
        Output {
            status,
            stdout: self
                .out
                .take()
                .map(|h| h.join().unwrap())
                .unwrap_or_default(),
            stderr: self
                .err
                .take()
                .map(|h| h.join().unwrap())
                .unwrap_or_default(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `server_args` in namespace a and `client_args` (followed by the
/// server's address) in namespace b; both must finish within `limit`.
pub fn pair(
    l: &Link,
    state: &Path,
    server_args: &[&str],
    client_args: &[&str],
    limit: Duration,
) -> (Output, Output) {
    let mut sa: Vec<&str> = server_args.to_vec();
    sa.extend(["--dev", &l.ifs[0]]);
    let server = spawn(rnic_in(&l.ns[0], state, &sa), "the rnic server");
    let mut ca: Vec<&str> = client_args.to_vec();
    ca.extend(["--dev", &l.ifs[1], l.ips[0]]);
    // the client retries while the server is not listening yet
    let client = spawn(rnic_in(&l.ns[1], state, &ca), "the rnic client").finish(limit);
    let server = server.finish(STUCK);
    (server, client)
}
