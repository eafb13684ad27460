//! A program a test runs: its output drained while it runs (a chatty one
//! must not block on a full pipe), waited for until a deadline and killed
//! there, and killed on drop, so that a hung tool never hangs a test.

use std::fmt;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Instant;

/// A running program; killed on drop.
pub struct Running {
    what: String,
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
}

/// How a program ended.
pub struct Finished {
    /// The program and its arguments, as the test names it.
    pub what: String,
    /// None: killed at its deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Ended by itself with exit code 0.
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Ended by itself with a non-zero exit code (not by a signal).
    pub fn failed_cleanly(&self) -> bool {
        self.status
            .is_some_and(|s| s.code().is_some_and(|c| c != 0))
    }

    /// Its standard output, then its standard error.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl fmt::Display for Finished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match self.status {
            Some(s) => format!("{s}"),
            None => "KILLED at its deadline".to_string(),
        };
        write!(
            f,
            "{}: {status}\n--- stdout\n{}--- stderr\n{}",
            self.what, self.stdout, self.stderr
        )
    }
}

fn drain(r: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    r.map(|mut r| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    })
}

impl Running {
    /// Starts `cmd` (named `what` in messages) with its output piped.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn spawn(what: impl Into<String>, mut cmd: Command) -> Running {
        let what = what.into();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
        Running {
            what,
            child,
            out,
            err,
        }
    }

    /// Sends it SIGKILL, as a crash ends it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Whether it has ended.
    pub fn ended(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Waits for its end until `deadline`, killing it then.
    pub fn finish(mut self, deadline: Instant) -> Finished {
        let left = deadline.saturating_duration_since(Instant::now());
        let status = crate::poll_within(left, || self.child.try_wait().ok().flatten());
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let text = |h: Option<JoinHandle<Vec<u8>>>| {
            let v = h.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
            String::from_utf8_lossy(&v).into_owned()
        };
        Finished {
            what: std::mem::take(&mut self.what),
            status,
            stdout: text(self.out.take()),
            stderr: text(self.err.take()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads lines from `r` until one is `line` (its newline aside) or the
/// stream ends: everything read, `line` last if it came.
pub fn read_until_line(r: &mut impl std::io::BufRead, line: &str) -> String {
    let mut text = String::new();
    let want = format!("{line}\n");
    while !text.ends_with(&want) {
        match r.read_line(&mut text) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    text
}
