//! # testkit — what the workspace's tests share
//!
//! A leaf crate (no workspace dependency, so every crate's tests can use
//! it, `wire`'s included, without a cycle):
//!
//! - waiting: real-I/O tests wait on conditions, never on sleeps:
//!   [`poll_within`] polls a probe at growing intervals until it answers or
//!   a deadline passes; [`wait_for`] and [`wait_until`] fail the test with
//!   what was awaited and what was seen last. The deadlines are the
//!   callers' (generous, so only a stuck run reaches them);
//! - the rule for what cannot run here: [`skip_or_fail`] — a loud SKIPPED
//!   line, or a failure saying why when `CI` is set; [`Missing`] is
//!   the error that says what is missing;
//! - [`netns`]: network namespaces and veth pairs a test creates and
//!   removes itself;
//! - [`rnicd_pair`]: two rnicd daemons, one per namespace, on the two
//!   ends of a veth pair;
//! - [`switched`]: hosts on a bridge in a switch namespace, an rnicd on
//!   each host's veth;
//! - [`pcap`]: the capture files the tests read;
//! - [`proc`]: a program a test runs, with a deadline, killed on drop;
//! - [`abi`]: C structure layouts against the system's headers;
//! - [`rnicd`]: a `rnicd --mem-pair` of a test's own, for the drop-in
//!   libraries' tests.
//!
//! The simulators (two RNICs on impaired links, the switch fabric) are the
//! `sim` crate's; the pcap conformance checker is the `conform` crate's.

pub mod abi;
pub mod netns;
pub mod pcap;
pub mod proc;
pub mod rnicd;
pub mod rnicd_pair;
pub mod switched;

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The folder of what the project keeps beside the repository (the
/// third-party captures, `tools/tshark-judge`, the rxe guest recipe):
/// `$SOFTRNIC_SHARED`, or `../shared` beside the repository.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("SOFTRNIC_SHARED") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
    }
}

/// `tools/tshark-judge` of the [shared folder](shared_dir) (Wireshark's
/// verdict with its payload heuristics off) when it is there; otherwise
/// `None` after [`skip_or_fail`] for `test`.
pub fn tshark_judge(test: &str) -> Option<PathBuf> {
    let judge = shared_dir().join("tools/tshark-judge");
    if judge.is_file() {
        return Some(judge);
    }
    skip_or_fail(
        test,
        &format!(
            "{} is missing (set SOFTRNIC_SHARED to the folder beside the repository): \
             tshark-judge did NOT check this test's frames",
            judge.display()
        ),
    );
    None
}

/// Whether the tests run under CI (`CI` set, and not to `false` or `0`):
/// there, every test must run.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "false" | "0"))
}

/// For a test (or part of one, named by `test`) that cannot run here:
/// under CI it fails, saying `why`; elsewhere it prints a loud SKIPPED
/// line and returns, and the caller skips.
pub fn skip_or_fail(test: &str, why: &str) {
    if under_ci() {
        panic!("{test}: {why} — and CI is set, where every test must run");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

/// Why a test (or part of one) cannot run here: a program, a privilege
/// or a build it needs is missing. The message says what and how to get
/// it; [`runs_here`] and [`skip_or_fail`] print it. (Namespaces have
/// their own reasons, [`netns::Unavailable`], which convert into it.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Missing(pub String);

impl Missing {
    /// The reason `why`.
    pub fn new(why: impl Into<String>) -> Self {
        Missing(why.into())
    }
}

/// The message, where a reason is taken as text ([`skip_or_fail`]).
impl std::ops::Deref for Missing {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Missing {
    fn from(why: String) -> Self {
        Missing(why)
    }
}

impl From<netns::Unavailable> for Missing {
    fn from(why: netns::Unavailable) -> Self {
        Missing(why.to_string())
    }
}

impl From<&str> for Missing {
    fn from(why: &str) -> Self {
        Missing(why.into())
    }
}

/// Whether `test` can run here, as `ready` says; when not, the reason goes
/// through [`skip_or_fail`] and the answer is `false`.
pub fn runs_here<E: Display>(test: &str, ready: Result<(), E>) -> bool {
    match ready {
        Ok(()) => true,
        Err(why) => {
            skip_or_fail(test, &why.to_string());
            false
        }
    }
}

/// Whether `tshark` runs here; when not, [`skip_or_fail`] says so (and
/// that Wireshark did not check the test's frames) and the answer is
/// `false`.
pub fn tshark_runs(test: &str) -> bool {
    let ok = std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail(
            test,
            "tshark is not installed (Debian package `tshark`; .ci/run installs it): \
             Wireshark did NOT check this test's frames",
        );
    }
    ok
}

/// Polls `probe` until it gives `Some`, at growing intervals (1 ms, then
/// doubling up to 20 ms); `None` once `limit` has passed.
pub fn poll_within<R>(limit: Duration, mut probe: impl FnMut() -> Option<R>) -> Option<R> {
    let t0 = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(r) = probe() {
            return Some(r);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Waits until `probe` gives `Ok`; a wait over `limit` fails the test,
/// naming `what` and the last `Err` (what was seen instead).
pub fn wait_for<R, E: Display>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<R, E>,
) -> R {
    let mut last = String::new();
    let got = poll_within(limit, || probe().map_err(|e| last = e.to_string()).ok());
    got.unwrap_or_else(|| panic!("{what}: not within {limit:?}; last seen: {last}"))
}

/// Waits until `cond` holds; a wait over `limit` fails the test, naming
/// `what`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let got = poll_within(limit, || cond().then_some(()));
    assert!(got.is_some(), "{what}: not within {limit:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_answers_ends_the_wait_and_one_that_never_does_times_out() {
        let mut n = 0;
        let got = poll_within(Duration::from_secs(60), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, Some(3));
        assert_eq!(poll_within(Duration::ZERO, || None::<()>), None);
        let r = std::panic::catch_unwind(|| {
            wait_for(Duration::ZERO, "a thing", || Err::<(), _>("no".to_string()))
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("a thing") && msg.contains("last seen: no"),
            "{msg}"
        );
    }

    #[test]
    fn what_cannot_run_is_skipped_or_fails_as_ci_says() {
        assert!(runs_here("ready", Ok::<(), String>(())));
        if under_ci() {
            let r = std::panic::catch_unwind(|| runs_here("t", Err("no tool")));
            let msg = *r.unwrap_err().downcast::<String>().unwrap();
            assert!(msg.contains("t: no tool"), "{msg}");
        } else {
            assert!(!runs_here("t", Err("no tool")));
        }
    }
}
