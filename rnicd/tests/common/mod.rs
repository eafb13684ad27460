//! Test harness: start rnicd, spawn client processes, relay their lines.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// How long a test waits for anything (a line, a state, a count): far
/// more than a loaded machine needs, so only a stuck run reaches it.
pub const T: Duration = Duration::from_secs(60);
/// How long a test waits for the end of a long run whose client has its
/// own stall guard.
pub const LONG_RUN: Duration = Duration::from_secs(600);

pub mod cm;

// each test binary uses some of them
#[allow(unused_imports)]
pub use testkit::{poll_within, wait_for, wait_until};

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softrnic-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// A running rnicd, stopped with SIGTERM on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub name: String,
}

impl Daemon {
    /// `netns`: run it inside that namespace (`ip netns exec`).
    pub fn start(netns: Option<&str>, args: &[&str], dir: &Path) -> Daemon {
        let bin = env!("CARGO_BIN_EXE_rnicd");
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(args)
            .arg("--sock-dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn rnicd");
        let rx = lines(&mut child);
        let l = rx.recv_timeout(T).expect("rnicd did not start");
        assert_eq!(l, "READY");
        let name = args
            .iter()
            .position(|a| *a == "--name")
            .map(|i| args[i + 1].to_string())
            .unwrap_or_else(|| "srnic0".into());
        Daemon {
            child,
            dir: dir.to_path_buf(),
            name,
        }
    }

    pub fn sock(&self, dev: &str) -> String {
        self.dir.join(format!("{dev}.sock")).display().to_string()
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, and the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: a signal to the daemon process this harness started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.alive() {
            self.stop();
        }
    }
}

/// A `testclient` process (examples/testclient: a client of the device
/// driven line by line on its stdin).
pub struct Client {
    pub child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    pub name: String,
}

impl Client {
    pub fn spawn(
        name: &str,
        netns: Option<&str>,
        mode: &str,
        sock: &str,
        extra: &[&str],
    ) -> Client {
        let bin = testclient();
        let bin = bin.to_str().expect("utf-8 path");
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg(mode)
            .args(["--sock", sock])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn client");
        let stdin = child.stdin.take();
        let rx = lines(&mut child);
        Client {
            child,
            stdin,
            rx,
            name: name.into(),
        }
    }

    pub fn line(&self) -> String {
        self.line_within(T)
    }

    fn line_within(&self, d: Duration) -> String {
        self.rx
            .recv_timeout(d)
            .unwrap_or_else(|_| panic!("{}: no line within {d:?}", self.name))
    }

    /// The next line, which must start with `word`; returns the rest.
    pub fn expect(&self, word: &str) -> String {
        self.expect_within(word, T)
    }

    /// `expect` for a line that comes after a long run whose client guards
    /// itself against stalls (a loaded machine makes it slow, not stuck).
    pub fn expect_within(&self, word: &str, d: Duration) -> String {
        let l = self.line_within(d);
        assert!(
            l.starts_with(word),
            "{}: expected {word}, got {l:?}",
            self.name
        );
        l[word.len()..].trim().to_string()
    }

    pub fn send(&mut self, l: &str) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{l}").unwrap();
        s.flush().unwrap();
    }

    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes stdin and waits; returns the exit code.
    pub fn finish(&mut self) -> Option<i32> {
        self.stdin.take();
        self.child.wait().unwrap().code()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Exchanges INFO lines: each gets the other's as PEER.
pub fn pair(a: &mut Client, b: &mut Client) {
    let ia = a.expect("INFO");
    let ib = b.expect("INFO");
    a.send(&format!("PEER {ib}"));
    b.send(&format!("PEER {ia}"));
}

/// Whether this test can run here (root + ip). Under CI it must.
pub fn can_run(test: &str) -> bool {
    testkit::runs_here(test, testkit::netns::available())
}

/// The daemon's stats through a fresh client connection.
pub fn stats(sock: &str) -> softrnic::Stats {
    softrnic::Context::open(sock).unwrap().stats().unwrap()
}

/// The example `testclient`, which `cargo test` builds beside the tests
/// (a test run on its own with `--test` builds no examples).
fn testclient() -> std::path::PathBuf {
    let bin = testkit::abi::profile_dir()
        .join("examples")
        .join("testclient");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --release -p rnicd --examples`",
        bin.display()
    );
    bin
}
