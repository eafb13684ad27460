//! Debian's unmodified `ucx_perftest` (ucx-utils, UCX 1.13) through
//! `rnic exec` on an `rnicd --mem-pair` of the test's own: a server on t0
//! and a client on t1 (they meet over TCP on 127.0.0.1), with UCX_TLS
//! limited to the verbs transports, so that nothing can fall back to TCP
//! or shared memory. The same between two network namespaces joined by a
//! veth pair, an rnicd on each end (testkit's [`RnicdPair`], over
//! AF_PACKET; needs root): the server on `ra`, the client on `rb`
//! meeting it at 192.0.2.1, with UCP's `ucp_put_bw` for the puts (a UCT
//! test's server opens the device the client names, which only the
//! mem-pair's one daemon has). And between namespaces with no rnicd at
//! all, each program hosting its device (`SOFTRNIC_LOCAL`), which UCX
//! finds in `rnic exec`'s view.
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
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::abi::build_c;
use testkit::netns::{self, free_port, listening};
use testkit::proc::{Finished, Running};
use testkit::rnicd::{built, counter, counters, have, rnic_exec, rnic_exec_hosting, Daemon, STUCK};
use testkit::rnicd_pair::{RnicdPair, Veth};

/// How long one ucx_perftest process may run.
const DEADLINE: Duration = Duration::from_secs(180);

/// One ucx_perftest run: its test, its transports, its extra arguments
/// (`{dev}` stands for the side's device, for the UCT tests' `-d`), the
/// lane UCX must say it chose (the UCP tests, `{dev}` the client's
/// device; the UCT ones name their transport with `-x`), the device
/// counters that must grow.
#[derive(Clone, Copy)]
struct Run {
    test: &'static str,
    tls: &'static str,
    args: &'static [&'static str],
    lane: Option<&'static str>,
    moved: &'static [&'static str],
}

const RC: &str = "rc_verbs,ud_verbs";
const RC_TAG: Option<&str> = Some("tag(rc_verbs/{dev})");
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
        lane: Some("tag(ud_verbs/{dev})"),
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

/// The runs between two namespaces, in order: tag matching eager and by
/// rendezvous, and UCP puts (RDMA WRITE).
const VETH_RUNS: &[Run] = &[
    RUNS[0],
    RUNS[1],
    RUNS[2],
    Run {
        test: "ucp_put_bw",
        tls: RC,
        args: &["-n", "1000", "-w", "100", "-s", "65536"],
        lane: None,
        moved: &["rx_write_requests"],
    },
];

/// Where a process runs: a network namespace (None: ours), the socket
/// folder of its rnicd, its device as UCX names it (`t0:1`), and the
/// interface the program hosts that device on itself instead
/// (`SOFTRNIC_LOCAL`; no rnicd, its counters inside the program).
struct Side {
    ns: Option<String>,
    sock_dir: PathBuf,
    dev: String,
    local: Option<String>,
}

impl Side {
    /// The device's name as the daemon's counters say it (`t0`).
    fn dev_name(&self) -> &str {
        self.dev.split(':').next().unwrap_or(&self.dev)
    }
}

/// `rnic exec --sock-dir D -- prog args` on `side`, with UCX on the
/// transports `tls` of the side's device.
fn ucx_on(side: &Side, tls: &str, prog: &Path, args: &[String]) -> Command {
    let mut c = match &side.local {
        Some(iface) => rnic_exec_hosting(
            side.ns
                .as_deref()
                .expect("a program-hosted side has a namespace"),
            iface,
        ),
        None => rnic_exec(side.ns.as_deref(), &side.sock_dir),
    };
    c.arg(prog)
        .args(args)
        .env("UCX_TLS", tls)
        .env("UCX_NET_DEVICES", &side.dev)
        .env("UCX_WARN_UNUSED_ENV_VARS", "n");
    c
}

/// `ucx_perftest` of `run` on `side` (a server; the client with the
/// server's address).
fn perftest(side: &Side, run: &Run, port: u16, server: Option<&str>) -> Command {
    let mut args: Vec<String> = ["-t", run.test, "-p"].map(String::from).into();
    args.push(port.to_string());
    args.extend(run.args.iter().map(|a| a.replace("{dev}", &side.dev)));
    args.extend(server.map(String::from));
    let mut c = ucx_on(side, run.tls, Path::new("ucx_perftest"), &args);
    c.env("UCX_LOG_LEVEL", "info");
    c
}

/// Runs `run` with a server on `server` and a client on `client` that
/// reaches it at `addr`; both outputs.
fn pair(run: &Run, server: &Side, client: &Side, addr: &str) -> (Finished, Finished) {
    let port = free_port();
    let what = |side: &str| format!("ucx_perftest -t {} ({side}, {})", run.test, run.tls);
    let mut srv = Running::spawn(what("server"), perftest(server, run, port, None));
    // the client does not retry its TCP connect: wait until the server
    // listens (without connecting: it takes one connection only)
    testkit::poll_within(STUCK, || {
        (listening(server.ns.as_deref(), port) || srv.ended()).then_some(())
    });
    let deadline = Instant::now() + DEADLINE;
    let cli =
        Running::spawn(what("client"), perftest(client, run, port, Some(addr))).finish(deadline);
    (srv.finish(deadline), cli)
}

/// The counters of both sides' rnicd (one report when they share it;
/// none of a device a program hosts).
fn report(sides: [&Side; 2]) -> String {
    let mut dirs: Vec<&Path> = sides
        .iter()
        .filter(|s| s.local.is_none())
        .map(|s| s.sock_dir.as_path())
        .collect();
    dirs.dedup();
    dirs.iter().map(|d| counters(d)).collect()
}

/// Counter `name` summed over both sides' devices.
fn both(report: &str, sides: [&Side; 2], name: &str) -> u64 {
    sides
        .iter()
        .map(|s| counter(report, s.dev_name(), name))
        .sum()
}

/// Runs `run` and checks it: both sides exit 0, the client reports its
/// figures, UCX chose the run's lane, and the device counters it names
/// grew. The client's `Final:` line.
fn check(run: &Run, server: &Side, client: &Side, addr: &str) -> String {
    let sides = [server, client];
    let before = report(sides);
    let (server, client) = pair(run, server, client, addr);
    let after = report(sides);
    let say = || format!("{server}\n{client}\ncounters before:\n{before}\nafter:\n{after}");
    assert!(server.ok() && client.ok(), "{}", say());
    let last = client
        .stdout
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line\n{}", say()))
        .to_string();
    if let Some(lane) = run.lane {
        let lane = lane.replace("{dev}", &sides[1].dev);
        assert!(
            client.text().contains(&lane),
            "UCX did not choose {lane}\n{}",
            say()
        );
    }
    // a device a program hosts keeps its counters to itself: UCX's
    // lane on it, with UCX_TLS the verbs transports alone, is the proof
    for name in run.moved.iter().filter(|_| sides[0].local.is_none()) {
        assert!(
            both(&after, sides, name) > both(&before, sides, name),
            "counter {name} did not move\n{}",
            say()
        );
    }
    eprintln!("{} {} ({}): {last}", run.test, run.args.join(" "), run.tls);
    last
}

/// The mem-pair's devices t0 and t1 as sides (in our namespace).
fn mem_pair_sides(d: &Daemon) -> (Side, Side) {
    let side = |dev: &str| Side {
        ns: None,
        sock_dir: d.sock_dir().to_path_buf(),
        dev: dev.into(),
        local: None,
    };
    (side("t0:1"), side("t1:1"))
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
    let (server, client) = mem_pair_sides(&d);
    for run in RUNS {
        check(run, &server, &client, "127.0.0.1");
    }
}

/// Two namespaces over veth with an rnicd on each end (AF_PACKET), as
/// sides `ra:1` (the server's, at 192.0.2.1) and `rb:1`; None after
/// [`testkit::skip_or_fail`] when this machine cannot.
fn veth_pair(test: &str, tag: &str) -> Option<RnicdPair> {
    if !testkit::runs_here(test, netns::available()) {
        return None;
    }
    let veth = Veth::create(tag, 1500).expect("namespaces and veth");
    match RnicdPair::try_start(veth, "afpacket") {
        Ok(p) => {
            p.wait_active();
            Some(p)
        }
        Err(why) => {
            testkit::skip_or_fail(test, &why);
            None
        }
    }
}

/// The sides of a [`RnicdPair`]: the server's `ra:1`, the client's `rb:1`.
fn veth_sides(pair: &RnicdPair) -> (Side, Side) {
    let side = |d: &testkit::rnicd_pair::NetRnicd| Side {
        ns: Some(d.ns.clone()),
        sock_dir: d.sock_dir().to_path_buf(),
        dev: format!("{}:1", d.dev),
        local: None,
    };
    (side(&pair.a), side(&pair.b))
}

#[test]
fn ucx_perftest_runs_between_namespaces_over_veth() {
    const TEST: &str = "ucx_perftest between namespaces";
    if !testkit::runs_here(TEST, ucx_ready()) {
        return;
    }
    let Some(mut pair) = veth_pair(TEST, "ux") else {
        return;
    };
    let (server, client) = veth_sides(&pair);
    let addr = pair.a.addr.to_string();
    for run in VETH_RUNS {
        check(run, &server, &client, &addr);
        pair.check_alive();
    }
}

#[test]
fn ucx_perftest_runs_on_devices_the_programs_host() {
    const TEST: &str = "ucx_perftest on program-hosted devices";
    if !testkit::runs_here(TEST, ucx_ready()) || !testkit::runs_here(TEST, netns::available()) {
        return;
    }
    let veth = Veth::create("ul", 1500).expect("namespaces and veth");
    // each program hosts srnic0 on its end of the veth; rnic exec's view
    // shows UCX that device
    let side = |ns: &str, iface: &str| Side {
        ns: Some(ns.into()),
        sock_dir: std::env::temp_dir(),
        dev: "srnic0:1".into(),
        local: Some(iface.into()),
    };
    let (server, client) = (side(&veth.ns_a, &veth.if_a), side(&veth.ns_b, &veth.if_b));
    let addr = testkit::rnicd_pair::ADDR_A.to_string();
    for run in &VETH_RUNS[..2] {
        check(run, &server, &client, &addr);
    }
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

/// Runs ucp_check (`bin`, meeting through files in `dir`) with its
/// server on `server` and its client on `client`, and checks it: both
/// sides exit 0 with every byte right, and the rendezvous READ, the PUT
/// and the sends went through the devices.
fn ucp_check_between(bin: &Path, dir: &Path, server: &Side, client: &Side) {
    let sides = [server, client];
    let before = report(sides);
    let at = dir.to_str().expect("utf-8 temp path").to_string();
    let args = |role: &str| [role.to_string(), at.clone()];
    let deadline = Instant::now() + DEADLINE;
    let srv = Running::spawn("ucp_check server", ucx_on(server, RC, bin, &args("server")));
    let cli = Running::spawn("ucp_check client", ucx_on(client, RC, bin, &args("client")))
        .finish(deadline);
    let srv = srv.finish(deadline);
    let after = report(sides);
    let say = format!("{srv}\n{cli}\ncounters before:\n{before}\nafter:\n{after}");
    assert!(srv.ok() && cli.ok(), "{say}");
    assert!(
        srv.stdout.contains("ucp_check ok") && cli.stdout.contains("ucp_check ok"),
        "{say}"
    );
    for name in ["rx_read_requests", "rx_write_requests", "rdma_recvs"] {
        assert!(
            both(&after, sides, name) > both(&before, sides, name),
            "{name}: {say}"
        );
    }
}

/// For `test`: when UCX is here, a temp folder `nobody` may write in
/// with ucp_check built in it; None after a SKIPPED (or a failure under
/// CI).
fn ucp_check_ready(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    if !testkit::runs_here(test, ucx_ready()) {
        return None;
    }
    let dir = shared_tempdir();
    let bin = ucp_check(dir.path());
    Some((dir, bin))
}

/// A temp folder `nobody` may write in (ucp_check's meeting place when
/// it runs in a namespace as nobody).
fn shared_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(dir.path(), mode).expect("chmod the temp folder");
    dir
}

#[test]
fn ucp_moves_data_that_checks_over_rc_verbs() {
    let Some((dir, bin)) = ucp_check_ready("ucp_check over rnic exec") else {
        return;
    };
    let d = Daemon::start();
    let (server, client) = mem_pair_sides(&d);
    ucp_check_between(&bin, dir.path(), &server, &client);
}

/// UCX's documented timeouts, shortened for the killed-peer test: the
/// keepalive of endpoints with peer error handling, and the UD endpoint's
/// timeout (30 s by default), which ends the endpoint once the peer stops
/// answering.
const SHORT_TIMEOUTS: [(&str, &str); 2] = [
    ("UCX_KEEPALIVE_INTERVAL", "1s"),
    ("UCX_UD_VERBS_TIMEOUT", "5s"),
];

#[test]
fn a_ucp_peer_killed_mid_run_ends_the_survivor_with_an_error() {
    let Some((dir, bin)) = ucp_check_ready("ucp_check with its server killed") else {
        return;
    };
    let d = Daemon::start();
    let (server, client) = mem_pair_sides(&d);
    let at = dir.path().to_str().expect("utf-8 temp path").to_string();
    // rounds enough to outlast the test: only the kill ends the exchange
    let args = |role: &str| [role.to_string(), at.clone(), "1000000000".into()];
    let run = |side: &Side, role: &str| {
        let mut c = ucx_on(side, RC, &bin, &args(role));
        c.envs(SHORT_TIMEOUTS);
        Running::spawn(format!("ucp_check {role} (endless)"), c)
    };
    let mut srv = run(&server, "server");
    let mut cli = run(&client, "client");
    // the exchange is under way: t0 has received a good many messages
    let recvs = |r: &str| counter(r, "t0", "rdma_recvs");
    let start = recvs(&counters(d.sock_dir()));
    testkit::wait_for(STUCK, "the exchange under way", || {
        if srv.ended() || cli.ended() {
            panic!("ucp_check ended before the kill");
        }
        (recvs(&counters(d.sock_dir())) > start + 100)
            .then_some(())
            .ok_or("too few receives yet")
    });
    srv.kill();
    let cli = cli.finish(Instant::now() + DEADLINE);
    let srv = srv.finish(Instant::now());
    let say = format!("{srv}\n{cli}\ncounters:\n{}", counters(d.sock_dir()));
    // exit 2: UCX called the endpoint's error handler
    assert_eq!(cli.status.and_then(|s| s.code()), Some(2), "{say}");
    assert!(cli.stderr.contains("ucp_check: peer failure"), "{say}");
    eprintln!("survivor: {}", cli.stderr.trim());
    // the daemon serves the next pair
    let again = shared_tempdir();
    ucp_check_between(&bin, again.path(), &server, &client);
}

#[test]
fn ucp_moves_data_that_checks_between_namespaces_over_veth() {
    const TEST: &str = "ucp_check between namespaces";
    let Some((dir, bin)) = ucp_check_ready(TEST) else {
        return;
    };
    let Some(mut pair) = veth_pair(TEST, "uc") else {
        return;
    };
    let (server, client) = veth_sides(&pair);
    ucp_check_between(&bin, dir.path(), &server, &client);
    pair.check_alive();
}
