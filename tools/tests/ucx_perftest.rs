//! Debian's unmodified `ucx_perftest` (ucx-utils, UCX 1.13) through
//! `rnic exec` on an `rnicd --mem-pair` of the test's own: a server on t0
//! and a client on t1 (they meet over TCP on 127.0.0.1), with UCX_TLS
//! limited to the verbs transports, so that nothing can fall back to TCP
//! or shared memory.
//!
//! - UCP tag matching (`tag_lat`, `tag_bw`, the latter with 1 MiB
//!   messages, sent by rendezvous: RDMA READ) over `rc_verbs` with
//!   `ud_verbs` for wireup, and `tag_lat` over `ud_verbs` alone.
//! - UCT one-sided `put_lat` and `put_bw` over `rc_verbs` (RDMA WRITE,
//!   `-x rc_verbs`). The client sends its parameters to the server, its
//!   device (`-d t1:1`) among them: both processes use t1, their QPs
//!   talking through the device's loopback.
//!
//! ucx_perftest checks no data (1.13 defines UCX_PERF_TEST_FLAG_VALIDATE
//! and never reads it; `put_lat` does wait for the peer's RDMA WRITE to
//! land the iteration's number in the last byte of its buffer). The data
//! check is `tests/c/ucp_check.c`, a UCP program of ours run the same way
//! (server on t0, client on t1): tagged messages from 8 B to 1 MiB
//! (eager and rendezvous) and their answers, then a 1 MiB PUT, every
//! byte checked.
//!
//! Each run must end with exit 0 on both sides and the client's `Final:`
//! line, UCX must say it chose the verbs transport asked for (for the UCP
//! tests; the UCT ones name theirs with `-x`), and the daemon's counters
//! must show the device carried the traffic. Without
//! ucx_perftest: a loud SKIPPED, a failure under CI=true.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::abi::{build_c, profile_dir};
use testkit::netns::{free_port, listening};
use testkit::proc::{Finished, Running};
use testkit::rnicd::{built, counter, counters, have, Daemon, STUCK};

/// How long one ucx_perftest process may run.
const DEADLINE: Duration = Duration::from_secs(180);

/// One ucx_perftest run: its test, its transports, its extra arguments
/// (`{dev}` stands for the side's device, for the UCT tests' `-d`), the
/// lane UCX must say it chose (the UCP tests; the UCT ones name their
/// transport with `-x`), the device counters that must grow.
struct Run {
    test: &'static str,
    tls: &'static str,
    args: &'static [&'static str],
    lane: Option<&'static str>,
    moved: &'static [&'static str],
}

const RC: &str = "rc_verbs,ud_verbs";
const RC_TAG: Option<&str> = Some("tag(rc_verbs/t1:1)");
const SENDS: &[&str] = &["rdma_sends", "rdma_recvs"];

/// The runs, in order.
const RUNS: &[Run] = &[
    Run {
        test: "tag_lat",
        tls: RC,
        args: &["-n", "300", "-w", "30"],
        lane: RC_TAG,
        moved: SENDS,
    },
    Run {
        test: "tag_bw",
        tls: RC,
        args: &["-n", "300", "-w", "30", "-s", "65536"],
        lane: RC_TAG,
        moved: SENDS,
    },
    // 1 MiB: past the rendezvous threshold, the receiver READs the data
    Run {
        test: "tag_bw",
        tls: RC,
        args: &["-n", "30", "-w", "3", "-s", "1048576"],
        lane: RC_TAG,
        moved: &["rx_read_requests"],
    },
    Run {
        test: "tag_lat",
        tls: "ud_verbs",
        args: &["-n", "300", "-w", "30"],
        lane: Some("tag(ud_verbs/t1:1)"),
        moved: SENDS,
    },
    Run {
        test: "put_lat",
        tls: RC,
        args: &[
            "-d", "{dev}", "-x", "rc_verbs", "-n", "300", "-w", "30", "-s", "4096", "-D", "zcopy",
        ],
        lane: None,
        moved: &["rx_write_requests"],
    },
    Run {
        test: "put_bw",
        tls: RC,
        args: &[
            "-d", "{dev}", "-x", "rc_verbs", "-n", "1000", "-w", "100", "-s", "65536", "-D",
            "zcopy",
        ],
        lane: None,
        moved: &["rx_write_requests"],
    },
];

/// `rnic exec --sock-dir D -- ucx_perftest ...` on device `dev`.
fn perftest(d: &Daemon, run: &Run, dev: &str, port: u16, server: Option<&str>) -> Command {
    let mut c = Command::new(profile_dir().join("rnic"));
    c.arg("exec")
        .arg("--sock-dir")
        .arg(d.sock_dir())
        .args(["--", "ucx_perftest", "-t", run.test, "-p"])
        .arg(port.to_string())
        .args(run.args.iter().map(|a| a.replace("{dev}", dev)))
        .args(server)
        .env("UCX_TLS", run.tls)
        .env("UCX_NET_DEVICES", dev)
        .env("UCX_LOG_LEVEL", "info")
        .env("UCX_WARN_UNUSED_ENV_VARS", "n")
        .stdin(Stdio::null());
    c
}

/// Runs `run` with a server on t0 and a client on t1; both outputs.
fn pair(d: &Daemon, run: &Run) -> (Finished, Finished) {
    let port = free_port();
    let what = |side: &str| format!("ucx_perftest -t {} ({side}, {})", run.test, run.tls);
    let mut server = Running::spawn(what("server"), perftest(d, run, "t0:1", port, None));
    // the client does not retry its TCP connect: wait until the server
    // listens (without connecting: it takes one connection only)
    testkit::poll_within(STUCK, || {
        (listening(None, port) || server.ended()).then_some(())
    });
    let deadline = Instant::now() + DEADLINE;
    let client = Running::spawn(
        what("client"),
        perftest(d, run, "t1:1", port, Some("127.0.0.1")),
    )
    .finish(deadline);
    (server.finish(deadline), client)
}

/// Counter `name` summed over both devices.
fn both(report: &str, name: &str) -> u64 {
    counter(report, "t0", name) + counter(report, "t1", name)
}

/// Runs `run` and checks it: both sides exit 0, the client reports its
/// figures, UCX chose the run's lane, and the device counters it names
/// grew. The client's `Final:` line.
fn check(d: &Daemon, run: &Run) -> String {
    let before = counters(d.sock_dir());
    let (server, client) = pair(d, run);
    let after = counters(d.sock_dir());
    let say = || format!("{server}\n{client}\ncounters before:\n{before}\nafter:\n{after}");
    assert!(server.ok() && client.ok(), "{}", say());
    let last = client
        .stdout
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line\n{}", say()))
        .to_string();
    if let Some(lane) = run.lane {
        assert!(
            client.text().contains(lane),
            "UCX did not choose {lane}\n{}",
            say()
        );
    }
    for name in run.moved {
        assert!(
            both(&after, name) > both(&before, name),
            "counter {name} did not move\n{}",
            say()
        );
    }
    eprintln!("{} {} ({}): {last}", run.test, run.args.join(" "), run.tls);
    last
}

/// Whether the build and UCX (ucx-utils, and with it libucx0) are here.
fn ucx_ready() -> Result<(), testkit::Missing> {
    built()?;
    have("ucx_perftest")
        .then_some(())
        .ok_or_else(|| "ucx_perftest not installed (ucx-utils)".into())
}

#[test]
fn ucx_perftest_runs_over_the_verbs_transports() {
    if !testkit::runs_here("ucx_perftest over rnic exec", ucx_ready()) {
        return;
    }
    let d = Daemon::start();
    for run in RUNS {
        check(&d, run);
    }
}

/// `rnic exec --sock-dir D -- prog args` with UCX on the verbs
/// transports of device `dev`.
fn in_view(d: &Daemon, dev: &str, prog: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(profile_dir().join("rnic"));
    c.arg("exec")
        .arg("--sock-dir")
        .arg(d.sock_dir())
        .arg("--")
        .arg(prog)
        .args(args)
        .env("UCX_TLS", RC)
        .env("UCX_NET_DEVICES", dev)
        .env("UCX_WARN_UNUSED_ENV_VARS", "n")
        .stdin(Stdio::null());
    c
}

/// tests/c/ucp_check.c built in `dir`, linked to UCX's libucp.so.0 and
/// libucs.so.0 (ucx-utils' libucx0: no headers or .so links needed).
fn ucp_check(dir: &Path) -> PathBuf {
    let bin = dir.join("ucp_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/ucp_check.c");
    build_c(
        &src,
        &bin,
        &["-l:libucp.so.0".into(), "-l:libucs.so.0".into()],
    );
    bin
}

#[test]
fn ucp_moves_data_that_checks_over_rc_verbs() {
    if !testkit::runs_here("ucp_check over rnic exec", ucx_ready()) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = ucp_check(dir.path());
    let d = Daemon::start();
    let before = counters(d.sock_dir());
    let at = dir.path().to_str().expect("utf-8 temp path");
    let deadline = Instant::now() + DEADLINE;
    let server = Running::spawn(
        "ucp_check server",
        in_view(&d, "t0:1", &bin, &["server", at]),
    );
    let client = Running::spawn(
        "ucp_check client",
        in_view(&d, "t1:1", &bin, &["client", at]),
    )
    .finish(deadline);
    let server = server.finish(deadline);
    let after = counters(d.sock_dir());
    let say = format!("{server}\n{client}\ncounters before:\n{before}\nafter:\n{after}");
    assert!(server.ok() && client.ok(), "{say}");
    assert!(
        server.stdout.contains("ucp_check ok") && client.stdout.contains("ucp_check ok"),
        "{say}"
    );
    // the rendezvous READ and the PUT went through the device
    for name in ["rx_read_requests", "rx_write_requests", "rdma_recvs"] {
        assert!(both(&after, name) > both(&before, name), "{name}: {say}");
    }
}
