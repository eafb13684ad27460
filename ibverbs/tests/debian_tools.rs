//! Debian's unmodified RDMA tools (ibverbs-utils, perftest) on softrnic,
//! through the drop-in libibverbs.so.1 found by LD_LIBRARY_PATH, as a
//! server process and a client process (they swap QP numbers over TCP).
//!
//! - Setting 1 (no root needed): both on one `rnicd --mem-pair` (devices
//!   t0 and t1). When the test runs as root, the daemon and the tools run
//!   as `nobody` (setpriv): no privilege is needed.
//! - Setting 2 (root): two rnicd, each in its own network namespace on one
//!   end of a veth pair, over AF_XDP and over AF_PACKET; each daemon drops
//!   to `nobody` once its port is open, and the tools run as `nobody` in
//!   the daemon's namespace.
//!
//! Each run has a deadline; both sides must exit 0 and the client print
//! its result line. A tool that is not installed, or no root for setting
//! 2, is a loud SKIPPED — and a failure under CI=true.

mod common;

use common::{cmd, have, is_root, missing, poll_within, profile_dir, Daemon, STUCK};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::netns::{self, free_port, listening};
use testkit::rnicd::counter;
use testkit::rnicd_pair::{NetRnicd, RnicdPair, Veth};

/// How long one tool process may run.
const DEADLINE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------- harness

/// Where one tool process runs: a network namespace (None: ours), the
/// socket folder of its rnicd, and the ibverbs device it opens.
#[derive(Clone, Debug)]
struct Side {
    ns: Option<String>,
    sock_dir: PathBuf,
    dev: String,
    /// The tool hosts its device on this interface itself
    /// (`SOFTRNIC_LOCAL`; it runs as root then: its port needs
    /// CAP_NET_RAW).
    local: Option<String>,
}

/// A server side, a client side and the address the client connects to
/// (the server's, seen from the client's namespace).
#[derive(Clone, Debug)]
struct Setting {
    server: Side,
    client: Side,
    addr: String,
}

impl Setting {
    /// Both sides on one `rnicd --mem-pair`: t0 serves, t1 connects.
    fn mem_pair(d: &Daemon) -> Setting {
        let side = |dev: &str| Side {
            ns: None,
            sock_dir: d.sock_dir().to_path_buf(),
            dev: dev.into(),
            local: None,
        };
        Setting {
            server: side("t0"),
            client: side("t1"),
            addr: "127.0.0.1".into(),
        }
    }

    /// Server and client on ONE device (`side`): its two QPs talk through
    /// the device's loopback; the client reaches the server's TCP port at
    /// `addr`.
    fn one_device(side: &Side, addr: &str) -> Setting {
        Setting {
            server: side.clone(),
            client: side.clone(),
            addr: addr.into(),
        }
    }
}

/// `prog args` on `side`: in its namespace (`ip netns exec`), as nobody
/// when we are root, with the drop-in first on the library path and the
/// side's rnicd as the only devices.
fn tool(side: &Side, prog: &str, args: &[String]) -> Command {
    let mut c = match &side.ns {
        Some(ns) if side.local.is_some() => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, prog]);
            c
        }
        Some(ns) => {
            // namespaces need root: the tool then runs as nobody
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "setpriv"]);
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg(prog);
            c
        }
        None => cmd(prog),
    };
    // a program hosting its device finds its RDMA CM through the
    // librdmacm drop-in too (rnicd's sides have theirs tested elsewhere)
    let mut path = std::ffi::OsString::from(profile_dir().join("softrnic-ibverbs"));
    if side.local.is_some() {
        path.push(":");
        path.push(profile_dir().join("softrnic-rdmacm"));
    }
    c.args(args)
        .env("LD_LIBRARY_PATH", path)
        .env("SOFTRNIC_SOCK_DIR", &side.sock_dir)
        .env("SOFTRNIC_LOCAL", side.local.as_deref().unwrap_or(""))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` until `deadline`, killing it then (`true`: killed).
fn finish(mut child: Child, deadline: Instant) -> (Output, bool) {
    // drain the pipes meanwhile: a chatty tool (perftest -a) must not
    // block on a full pipe
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let (status, late) = exit_by(&mut child, deadline);
    let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    };
    let o = Output {
        status,
        stdout: join(out),
        stderr: join(err),
    };
    (o, late)
}

/// Waits for `child` to exit until `deadline`, killing it then (`true`: killed).
fn exit_by(child: &mut Child, deadline: Instant) -> (std::process::ExitStatus, bool) {
    let left = deadline.saturating_duration_since(Instant::now());
    match poll_within(left, || child.try_wait().ok().flatten()) {
        Some(s) => (s, false),
        None => {
            let _ = child.kill();
            (child.wait().expect("wait"), true)
        }
    }
}

fn drain(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn show(o: &Output, late: bool) -> String {
    format!(
        "{}status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        if late {
            format!("KILLED after {DEADLINE:?}, ")
        } else {
            String::new()
        },
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `prog` as server (`-d <server dev>`) and client (`-d <client dev>
/// <addr>`) of `s` with a fresh TCP port given by `port_flag`, both with
/// `args`; both must exit 0 within the deadline and the client's output
/// contain `expect`. Returns the client's stdout.
///
/// perftest calibrates its cycle clock against the wall clock before it
/// reports, and under heavy CPU load it may find the two too poorly
/// correlated ("Correlation coefficient r^2 ... < 0.9", "Can't produce a
/// report") and exit 1 after a complete run: only that failure is tried
/// again, twice at most, saying so.
///
/// perftest 4.5 with `-R` connects twice on one port: its parameters
/// over a first RDMA CM connection, then the test's QPs. Its server
/// destroys the first listener and listens again; a client quicker than
/// that gets its REQ rejected with reason 8 (no listener: IBA 12.6.7, as
/// the kernel's CM answers too), and its retry then fails on IDs it has
/// already freed (perftest fixed that retry after 4.5, in 3d9d8d0). That
/// lost race is tried again as well, under the same limit.
fn pair(s: &Setting, prog: &str, port_flag: &str, args: &[&str], expect: &str) -> String {
    let mut tries = 0;
    loop {
        match try_pair(s, prog, port_flag, args, expect) {
            Ok(out) => return out,
            Err(e) => match e.retryable(args) {
                Some(why) if tries < 2 => {
                    tries += 1;
                    eprintln!("{why}; again:\n{e}");
                }
                _ => panic!("{e}"),
            },
        }
    }
}

/// A run of a tool pair that failed: both sides' output and both
/// daemons' counters.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PairFailed(String);

impl PairFailed {
    /// Why the run may be tried again, if it may: perftest could not
    /// calibrate its clock (a loaded machine), or with `-R` its client's
    /// REQ was rejected for want of a listener (reason 8).
    fn retryable(&self, args: &[&str]) -> Option<&'static str> {
        if self.0.contains("Can't produce a report") {
            Some("perftest could not calibrate its clock (load)")
        } else if args.contains(&"-R") && self.0.contains("RDMA_CM_EVENT_REJECTED; error: 8.") {
            Some("perftest's client connected before its server listened again")
        } else {
            None
        }
    }
}

/// One run of [`pair`]; the failure's report as the error.
fn try_pair(
    s: &Setting,
    prog: &str,
    port_flag: &str,
    args: &[&str],
    expect: &str,
) -> Result<String, PairFailed> {
    let port = free_port();
    let with = |dev: &str| -> Vec<String> {
        let mut v: Vec<String> = vec!["-d".into(), dev.into(), port_flag.into(), port.to_string()];
        v.extend(args.iter().map(|a| a.to_string()));
        v
    };
    let sargs = with(&s.server.dev);
    let mut cargs = with(&s.client.dev);
    cargs.push(s.addr.clone());
    let what = format!("{prog} {}", args.join(" "));
    let started = Instant::now();
    let mut server = tool(&s.server, prog, &sargs)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: start the server: {e}"));
    // the clients do not retry their TCP connect: wait until the server
    // listens (without connecting: it accepts one connection only), or
    // has given up (then the client fails and the check below shows both)
    // (a server on the RDMA CM, -R, has no TCP port: a hosted device's CM
    // says when it listens)
    let cm = args.contains(&"-R") && s.server.local.is_some();
    poll_within(STUCK, || {
        let listens = if cm {
            cm_listening(server.id())
        } else {
            listening(s.server.ns.as_deref(), port)
        };
        let ready = listens || server.try_wait().ok().flatten().is_some();
        ready.then_some(())
    });
    let deadline = Instant::now() + DEADLINE;
    let client = match tool(&s.client, prog, &cargs).spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            panic!("{what}: start the client: {e}")
        }
    };
    let (c, c_late) = finish(client, deadline);
    // a server whose client failed may wait for ever: give it a moment
    let s_deadline = if c.status.success() {
        deadline
    } else {
        deadline.min(Instant::now() + Duration::from_secs(5))
    };
    let (sv, s_late) = finish(server, s_deadline);
    if c_late || s_late || !c.status.success() || !sv.status.success() {
        return Err(PairFailed(format!(
            "{what} ({s:?})\n=== server: {}\n=== client: {}\n=== counters of the server's rnicd\n{}\n=== counters of the client's rnicd\n{}",
            show(&sv, s_late),
            show(&c, c_late),
            testkit::rnicd::counters(&s.server.sock_dir),
            testkit::rnicd::counters(&s.client.sock_dir)
        )));
    }
    let out = String::from_utf8_lossy(&c.stdout).to_string();
    let all = out.clone() + &String::from_utf8_lossy(&c.stderr);
    assert!(
        all.contains(expect),
        "{what}: no {expect:?} in the client's output:\n{}",
        show(&c, false)
    );
    eprintln!(
        "ok: {what} on {} -> {} ({:.1} s)",
        s.server.dev,
        s.client.dev,
        started.elapsed().as_secs_f64()
    );
    Ok(out)
}

/// Whether the RDMA CM of the device that process `pid` hosts
/// (`SOFTRNIC_LOCAL`, device `srnic0`) has a listener.
fn cm_listening(pid: u32) -> bool {
    let sock = std::env::temp_dir()
        .join(format!("softrnic-local-{pid}"))
        .join("srnic0.sock");
    softrnic::Context::open(&sock)
        .ok()
        .and_then(|c| c.stats().ok())
        .is_some_and(|st| st.cm.get("cm_listeners").copied().unwrap_or(0) > 0)
}

/// Whether the tools can run here: the drop-in and rnicd are built (a
/// failure otherwise), the tools installed (SKIPPED / CI failure).
fn ready(progs: &[&str]) -> bool {
    let lib = profile_dir().join("softrnic-ibverbs/libibverbs.so.1");
    assert!(
        lib.exists(),
        "{}: libibverbs.so.1 not found: build the drop-in (cargo build --release -p softrnic-ibverbs)",
        lib.display()
    );
    let rnicd = profile_dir().join("rnicd");
    assert!(
        rnicd.exists(),
        "{}: not found: build the daemon (cargo build --release -p rnicd)",
        rnicd.display()
    );
    for p in progs {
        if !have(p) {
            return !missing(&format!(
                "{p} not installed (Debian packages ibverbs-utils, perftest): cannot run the unmodified tools"
            ));
        }
    }
    if is_root() && !have("setpriv") {
        return !missing("setpriv (util-linux) not installed: cannot run the tools as nobody");
    }
    true
}

// ------------------------------------------------------ the tool lists

const PINGPONGS: [&str; 4] = [
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
];
const PERFTESTS: [&str; 8] = [
    "ib_write_bw",
    "ib_read_bw",
    "ib_send_bw",
    "ib_atomic_bw",
    "ib_write_lat",
    "ib_read_lat",
    "ib_send_lat",
    "ib_atomic_lat",
];

/// ibv_*_pingpong: the plain run, data check (-c), completion events
/// (-e), a large message.
fn pingpongs(s: &Setting) {
    // ibv_*_pingpong print "<n> bytes in <t> seconds = ..." and "<n> iters
    // in <t> seconds = ..." on both sides
    let done = "bytes in";
    let g = ["-g", "3"];
    let runs: &[(&str, &[&str])] = &[
        ("ibv_rc_pingpong", &["-n", "200"]),
        ("ibv_rc_pingpong", &["-n", "200", "-c"]),
        ("ibv_rc_pingpong", &["-n", "200", "-e"]),
        ("ibv_rc_pingpong", &["-n", "100", "-s", "65536", "-c"]),
        ("ibv_uc_pingpong", &["-n", "200", "-c"]),
        ("ibv_uc_pingpong", &["-n", "200", "-e"]),
        ("ibv_ud_pingpong", &["-n", "200", "-c"]),
        ("ibv_ud_pingpong", &["-n", "200", "-e"]),
        ("ibv_srq_pingpong", &["-n", "200", "-c"]),
        ("ibv_srq_pingpong", &["-n", "100", "-e"]),
    ];
    for (prog, args) in runs {
        let a: Vec<&str> = g.iter().chain(args.iter()).copied().collect();
        pair(s, prog, "-p", &a, done);
    }
}

/// perftest's bandwidth tests, every size (-a) and in Gb/s.
fn perftest_bw(s: &Setting, iters: &str) {
    let table = "BW average";
    for p in ["ib_write_bw", "ib_read_bw", "ib_send_bw"] {
        pair(s, p, "-p", &["-x", "3", "-n", iters, "-a"], table);
        pair(
            s,
            p,
            "-p",
            &["-x", "3", "-n", iters, "--report_gbits"],
            "Gb/sec",
        );
    }
    // perftest refuses -a for atomics (the size is 8 bytes)
    pair(s, "ib_atomic_bw", "-p", &["-x", "3", "-n", "200"], table);
    pair(
        s,
        "ib_atomic_bw",
        "-p",
        &["-x", "3", "-n", "200", "--report_gbits"],
        "Gb/sec",
    );
}

/// perftest's latency tests, every size (-a); --report_gbits too (the
/// latency tests accept it and print the same table); ib_send_lat on
/// completion events (-e: one channel for its send and receive CQs, so
/// the events must come in the order of the completions).
fn perftest_lat(s: &Setting, iters: &str) {
    let table = "t_typical";
    for p in ["ib_write_lat", "ib_read_lat", "ib_send_lat"] {
        pair(s, p, "-p", &["-x", "3", "-n", iters, "-a"], table);
        pair(
            s,
            p,
            "-p",
            &["-x", "3", "-n", "100", "--report_gbits"],
            table,
        );
    }
    pair(
        s,
        "ib_send_lat",
        "-p",
        &["-x", "3", "-n", "5000", "-e"],
        table,
    );
    pair(s, "ib_atomic_lat", "-p", &["-x", "3", "-n", "100"], table);
    pair(
        s,
        "ib_atomic_lat",
        "-p",
        &["-x", "3", "-n", "100", "--report_gbits"],
        table,
    );
}

// ------------------------------------------------ setting 1: --mem-pair

#[test]
fn ibv_devices_and_devinfo_describe_the_devices() {
    if !ready(&["ibv_devices", "ibv_devinfo"]) {
        return;
    }
    let d = Daemon::start();
    let s = Setting::mem_pair(&d);
    let out = tool(&s.server, "ibv_devices", &[])
        .output()
        .expect("ibv_devices");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out, false));
    assert!(text.contains("t0") && text.contains("t1"), "{text}");
    for (dev, addr, v1) in [
        ("t0", "127.0.0.1", "7f00:0001"),
        ("t1", "127.0.0.2", "7f00:0002"),
    ] {
        let out = tool(
            &s.server,
            "ibv_devinfo",
            &["-v".into(), "-d".into(), dev.into()],
        )
        .output()
        .expect("ibv_devinfo");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", show(&out, false));
        for want in [
            format!("hca_id:\t{dev}"),
            "PORT_ACTIVE (4)".into(),
            "link_layer:\t\tEthernet".into(),
            format!("GID[  3]:\t\t::ffff:{addr}, RoCE v2"),
            // (ibv_devinfo prints RoCE v1 GIDs uncompressed)
            format!("GID[  2]:\t\t0000:0000:0000:0000:0000:ffff:{v1}, RoCE v1"),
            "GID[  1]:".into(),
            "vendor_id:\t\t\t0xffffff".into(),
        ] {
            assert!(text.contains(&want), "no {want:?} in:\n{text}");
        }
    }
}

#[test]
fn ibverbs_pingpongs_run_between_two_processes() {
    if !ready(&PINGPONGS) {
        return;
    }
    let d = Daemon::start();
    pingpongs(&Setting::mem_pair(&d));
}

#[test]
fn perftest_bandwidth_tests_run_both_roles() {
    if !ready(&PERFTESTS[..4]) {
        return;
    }
    let d = Daemon::start();
    perftest_bw(&Setting::mem_pair(&d), "100");
}

#[test]
fn the_tools_run_with_both_ends_on_one_device() {
    if !ready(&PINGPONGS) || !ready(&PERFTESTS) {
        return;
    }
    let d = Daemon::start();
    let s = Setting::one_device(&Setting::mem_pair(&d).server, "127.0.0.1");
    pingpongs(&s);
    perftest_bw(&s, "20");
    perftest_lat(&s, "5");
    let report = testkit::rnicd::counters(d.sock_dir());
    assert!(counter(&report, "t0", "rcvd_pkts") > 0, "{report}");
    // nothing crossed the wire to the other device
    assert_eq!(counter(&report, "t1", "rcvd_pkts"), 0, "{report}");
}

#[test]
fn perftest_latency_tests_run_both_roles() {
    if !ready(&PERFTESTS[4..]) {
        return;
    }
    let d = Daemon::start();
    perftest_lat(&Setting::mem_pair(&d), "20");
}

#[test]
fn a_tool_killed_mid_transfer_leaves_the_daemon_serving_others() {
    if !ready(&["ib_write_bw", "ibv_rc_pingpong", "stdbuf"]) {
        return;
    }
    let mut d = Daemon::start();
    let s = Setting::mem_pair(&d);
    let mut run = WriteBwRun::start(&s);
    let _ = run.client.kill();
    let _ = run.client.wait();
    let _ = run.server.kill();
    let _ = run.server.wait();
    assert!(run.started, "ib_write_bw never started its run");
    assert!(
        d.child.try_wait().expect("try_wait").is_none(),
        "rnicd died with its client"
    );
    // other programs still get the devices, and whole runs
    pair(
        &s,
        "ibv_rc_pingpong",
        "-p",
        &["-g", "3", "-n", "100", "-c"],
        "bytes in",
    );
    assert!(d.child.try_wait().expect("try_wait").is_none());
}

#[test]
fn a_peer_killed_mid_transfer_ends_the_writers_run_in_error_completions() {
    if !ready(&["ib_write_bw", "stdbuf"]) {
        return;
    }
    let mut d = Daemon::start();
    let s = Setting::mem_pair(&d);
    let mut run = WriteBwRun::start(&s);
    // the responder's process dies: its QP goes with it, as a kernel
    // device destroys a dead process's QPs, and nothing acknowledges the
    // WRITEs any more
    let _ = run.server.kill();
    let _ = run.server.wait();
    let (status, late, out, err) = run.end_client(Instant::now() + DEADLINE);
    assert!(
        run.started,
        "ib_write_bw never started its run:\n{out}\n{err}"
    );
    assert!(
        !late,
        "the writer still runs {DEADLINE:?} after its peer died:\n{out}\n{err}"
    );
    assert!(
        !status.success(),
        "the writer succeeded without its peer:\n{out}\n{err}"
    );
    // IBA 9.7.6.1.3: retries exhausted → the WQE completes with
    // IBV_WC_RETRY_EXC_ERR (12), which perftest reports as "Failed status 12"
    assert!(
        err.contains("Failed status 12"),
        "no retry-exceeded completion:\n{out}\n{err}"
    );
    assert!(
        d.child.try_wait().expect("try_wait").is_none(),
        "rnicd died with its client"
    );
}

#[test]
fn a_daemon_killed_mid_transfer_fails_both_sides_and_a_new_one_serves() {
    if !ready(&["ib_write_bw", "stdbuf"]) {
        return;
    }
    let mut d = Daemon::start();
    let s = Setting::mem_pair(&d);
    let mut run = WriteBwRun::start(&s);
    // rnicd dies as a crash ends it: to the two programs, a device that
    // fails under them
    d.kill();
    // far less than the 60 s the run still had: the device's failure ends it
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, late, out, err) = run.end_client(deadline);
    let (s_status, s_late) = exit_by(&mut run.server, deadline);
    assert!(
        run.started,
        "ib_write_bw never started its run:\n{out}\n{err}"
    );
    assert!(
        !late && !s_late,
        "ib_write_bw still ran 20 s after its device failed (client late: {late}, \
         server late: {s_late}):\n{out}\n{err}"
    );
    assert!(
        !status.success() && !s_status.success(),
        "ib_write_bw succeeded on a failed device (client {status}, server {s_status}):\n{out}\n{err}"
    );
    // the outstanding WRITEs complete flushed: IBV_WC_WR_FLUSH_ERR (5)
    assert!(
        err.contains("Failed status 5"),
        "no flushed completion:\n{out}\n{err}"
    );
    // no figures: the only line naming the size is the header's
    let figures: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("65536"))
        .collect();
    assert!(figures.is_empty(), "figures of a failed run: {figures:?}");
    // a new daemon on the same socket folder serves new programs
    d.restart();
    pair(
        &s,
        "ib_write_bw",
        "-p",
        &["-x", "3", "-n", "200", "-s", "65536"],
        "BW average",
    );
}

/// `ib_write_bw -D 60 -s 65536` from t1 (client) to t0 (server), returned
/// once the client printed its result header: the timed run is under way.
struct WriteBwRun {
    server: Child,
    client: Child,
    /// The client's stdout, read on a thread until it ends.
    out: Option<std::thread::JoinHandle<String>>,
    started: bool,
}

impl WriteBwRun {
    fn start(s: &Setting) -> WriteBwRun {
        let port = free_port();
        let args = |dev: &str| -> Vec<String> {
            let p = port.to_string();
            ["-d", dev, "-x", "3", "-p", &p, "-D", "60", "-s", "65536"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        };
        let server = tool(&s.server, "ib_write_bw", &args("t0"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server");
        // (a server that never listens: the client fails, and `started`
        // says so)
        poll_within(STUCK, || listening(None, port).then_some(()));
        let mut cargs = args("t1");
        cargs.push("127.0.0.1".into());
        // line-buffered stdout (a pipe is block-buffered otherwise)
        let mut cargs2 = vec!["-oL".to_string(), "ib_write_bw".to_string()];
        cargs2.extend(cargs);
        let mut client = tool(&s.client, "stdbuf", &cargs2).spawn().expect("client");
        // perftest prints the result columns as it starts the timed run
        let out = client.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let out = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut text = String::new();
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("#bytes") {
                    let _ = tx.send(());
                }
                text += &line;
                text.push('\n');
            }
            text
        });
        let started = rx.recv_timeout(Duration::from_secs(60)).is_ok();
        WriteBwRun {
            server,
            client,
            out: Some(out),
            started,
        }
    }

    /// Waits for the client to exit until `deadline`, killing it then:
    /// its status, whether it was killed, its stdout and its stderr.
    fn end_client(
        &mut self,
        deadline: Instant,
    ) -> (std::process::ExitStatus, bool, String, String) {
        let err = self.client.stderr.take().map(drain);
        let (status, late) = exit_by(&mut self.client, deadline);
        let err = err
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let out = self.out.take().map(|h| h.join().unwrap_or_default());
        (
            status,
            late,
            out.unwrap_or_default(),
            String::from_utf8_lossy(&err).into_owned(),
        )
    }
}

// ------------------------------ setting 2: two namespaces, a veth pair

/// The two-namespace rnicd pair of testkit ([`RnicdPair`]: A serves,
/// B connects) and its setting.
struct NetPair {
    pair: RnicdPair,
    setting: Setting,
}

impl NetPair {
    /// None (after a loud SKIPPED) when this machine cannot run it: not
    /// root, or no AF_XDP. Under CI=true those fail instead.
    fn start(tag: &str, backend: &str, mtu: u32) -> Option<NetPair> {
        if let Err(why) = netns::available() {
            missing(&format!("setting 2 over {backend}: {why}"));
            return None;
        }
        let veth = Veth::create(tag, mtu).expect("namespaces and veth");
        let pair = match RnicdPair::try_start(veth, backend) {
            Ok(p) => p,
            Err(why) => {
                missing(&format!("setting 2 over {backend}: {why}"));
                return None;
            }
        };
        let side = |d: &NetRnicd| Side {
            ns: Some(d.ns.clone()),
            sock_dir: d.sock_dir().to_path_buf(),
            dev: d.dev.clone(),
            local: None,
        };
        let setting = Setting {
            server: side(&pair.a),
            client: side(&pair.b),
            addr: pair.a.addr.to_string(),
        };
        Some(NetPair { pair, setting })
    }

    /// Waits until each side's port is active.
    fn wait_active(&self) {
        self.pair.wait_active();
    }

    /// Both daemons still running (a failure message with their logs
    /// otherwise).
    fn check_alive(&mut self) {
        self.pair.check_alive();
    }
}

/// `ibv_devinfo -v` on `side`: it succeeds and prints every line of
/// `wants`; its output.
fn devinfo_shows(side: &Side, wants: &[&str]) -> String {
    let out = tool(side, "ibv_devinfo", &["-v".into()])
        .output()
        .expect("ibv_devinfo");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", show(&out, false));
    for want in wants {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    text
}

/// Every tool of setting 1 between the two namespaces over `backend`.
fn over_veth(tag: &str, backend: &str, mtu: u32) {
    if !ready(&PINGPONGS) || !ready(&PERFTESTS) || !ready(&["ibv_devinfo"]) {
        return;
    }
    let Some(mut net) = NetPair::start(tag, backend, mtu) else {
        return;
    };
    net.wait_active();
    let s = net.setting.clone();
    // each namespace sees its own daemon's device
    let text = devinfo_shows(
        &s.client,
        &[
            "hca_id:\trb",
            "PORT_ACTIVE (4)",
            "link_layer:\t\tEthernet",
            "GID[  3]:\t\t::ffff:192.0.2.2, RoCE v2",
        ],
    );
    assert!(!text.contains("hca_id:\tra"), "{text}");
    pingpongs(&s);
    net.check_alive();
    perftest_bw(&s, "20");
    net.check_alive();
    perftest_lat(&s, "5");
    net.check_alive();
}

/// Every tool between two namespaces of a veth pair, each process hosting
/// its device on its end (`SOFTRNIC_LOCAL`, no rnicd): the posting and
/// polling threads turn the engine; perftest over the RDMA CM (`-R`) too.
#[test]
fn the_tools_run_with_each_process_hosting_its_device() {
    if !ready(&PINGPONGS) || !ready(&PERFTESTS) || !ready(&["ibv_devinfo"]) {
        return;
    }
    if let Err(why) = netns::available() {
        missing(&format!("each process hosting its device: {why}"));
        return;
    }
    let veth = Veth::create("lo", 1500).expect("namespaces and veth");
    let side = |ns: &str, ifname: &str| Side {
        ns: Some(ns.into()),
        // no daemon's folder: the device is the process's own
        sock_dir: std::env::temp_dir().join("softrnic-no-daemon"),
        dev: "srnic0".into(),
        local: Some(ifname.into()),
    };
    let s = Setting {
        server: side(&veth.ns_a, &veth.if_a),
        client: side(&veth.ns_b, &veth.if_b),
        addr: testkit::rnicd_pair::ADDR_A.to_string(),
    };
    devinfo_shows(
        &s.client,
        &[
            "hca_id:\tsrnic0",
            "PORT_ACTIVE (4)",
            "GID[  3]:\t\t::ffff:192.0.2.2, RoCE v2",
        ],
    );
    pingpongs(&s);
    perftest_bw(&s, "20");
    perftest_lat(&s, "5");
    // connected through the RDMA CM the program hosts too
    pair(&s, "ib_send_bw", "-p", &["-R", "-n", "100"], "BW average");
    pair(&s, "ib_write_lat", "-p", &["-R", "-n", "100"], "t_typical");
}

/// Server and client on device `ra` of a veth pair's side A over
/// `backend`: their frames loop back inside the device and never reach
/// the wire (A's port sends nothing, B's QPs receive nothing).
fn one_device_over_veth(tag: &str, backend: &str) {
    if !ready(&PINGPONGS) || !ready(&PERFTESTS[..4]) {
        return;
    }
    let Some(mut net) = NetPair::start(tag, backend, 9000) else {
        return;
    };
    net.wait_active();
    let s = Setting::one_device(&net.setting.server, &net.setting.addr);
    pingpongs(&s);
    net.check_alive();
    perftest_bw(&s, "20");
    net.check_alive();
    let a = testkit::rnicd::counters(&s.server.sock_dir);
    let b = testkit::rnicd::counters(&net.setting.client.sock_dir);
    assert!(counter(&a, "ra", "rcvd_pkts") > 0, "{a}");
    assert_eq!(counter(&a, "ra", "tx_packets"), 0, "{a}");
    assert_eq!(counter(&b, "rb", "rcvd_pkts"), 0, "{b}");
}

#[test]
fn the_tools_run_on_one_device_over_af_xdp() {
    one_device_over_veth("ldx", "afxdp");
}

#[test]
fn the_tools_run_on_one_device_over_af_packet() {
    one_device_over_veth("ldp", "afpacket");
}

#[test]
fn debian_tools_across_namespaces_over_af_xdp() {
    over_veth("dtx", "afxdp", 1500);
}

#[test]
fn debian_tools_across_namespaces_over_af_packet() {
    over_veth("dtp", "afpacket", 9000);
}
