//! Debian's unmodified RDMA tools (ibverbs-utils, perftest) on softrnic:
//! two processes on one `rnicd --mem-pair`, through the drop-in
//! libibverbs.so.1 found by LD_LIBRARY_PATH. When the test runs as root,
//! the daemon and the tools run as `nobody` (setpriv): no privilege is
//! needed. Each run has a deadline; both sides must exit 0 and print their
//! result line.

mod common;

use common::{cmd, have, is_root, missing, profile_dir, Daemon};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn tool(d: &Daemon, prog: &str, args: &[String]) -> Command {
    let mut c = cmd(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", profile_dir().join("softrnic-ibverbs"))
        .env("SOFTRNIC_SOCK_DIR", d.sock_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` until `deadline`, killing it then.
fn finish(mut child: Child, deadline: Instant) -> (Output, bool) {
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return (child.wait_with_output().expect("output"), false);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return (child.wait_with_output().expect("output"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `prog` as server (`-d t0`) and client (`-d t1 127.0.0.1`) with a
/// fresh TCP port given by `port_flag`; both must exit 0 and the client's
/// output contain `expect`.
fn pair(d: &Daemon, prog: &str, port_flag: &str, args: &[&str], expect: &str) {
    let port = free_port().to_string();
    let mut sargs: Vec<String> = vec!["-d".into(), "t0".into(), port_flag.into(), port.clone()];
    sargs.extend(args.iter().map(|s| s.to_string()));
    let mut cargs: Vec<String> = vec!["-d".into(), "t1".into(), port_flag.into(), port.clone()];
    cargs.extend(args.iter().map(|s| s.to_string()));
    cargs.push("127.0.0.1".into());
    let deadline = Instant::now() + Duration::from_secs(120);
    let server = tool(d, prog, &sargs).spawn().expect("start the server");
    // the clients do not retry their TCP connect: wait until the server
    // listens (without connecting: it accepts one connection only)
    let t0 = Instant::now();
    while !listening(port.parse().expect("port")) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = tool(d, prog, &cargs).spawn().expect("start the client");
    let (c, c_late) = finish(client, deadline);
    let (s, s_late) = finish(server, deadline);
    let what = format!("{prog} {}", args.join(" "));
    assert!(
        !c_late && !s_late && c.status.success() && s.status.success(),
        "{what}\n=== server: {}\n=== client: {}",
        show(&s),
        show(&c)
    );
    let out = String::from_utf8_lossy(&c.stdout).to_string() + &String::from_utf8_lossy(&c.stderr);
    assert!(
        out.contains(expect),
        "{what}: no {expect:?} in the client's output:\n{}",
        show(&c)
    );
}

/// Whether some socket listens on TCP `port` (/proc/net/tcp and tcp6,
/// state 0A).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && format!("{} ", w[1]).ends_with(&want) && w[3] == "0A"
            })
        })
    })
}

fn ready(progs: &[&str]) -> bool {
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

#[test]
fn ibv_devices_and_devinfo_describe_the_devices() {
    if !ready(&["ibv_devices", "ibv_devinfo"]) {
        return;
    }
    let d = Daemon::start();
    let out = tool(&d, "ibv_devices", &[]).output().expect("ibv_devices");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.contains("t0") && text.contains("t1"), "{text}");
    let out = tool(&d, "ibv_devinfo", &["-v".into(), "-d".into(), "t1".into()])
        .output()
        .expect("ibv_devinfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    for want in [
        "hca_id:\tt1",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  3]:\t\t::ffff:192.0.2.2, RoCE v2",
        "GID[  1]:",
        "RoCE v1",
        "vendor_id:\t\t\t0xffffff",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
}

#[test]
fn ibverbs_pingpongs_run_between_two_processes() {
    let progs = [
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
    ];
    if !ready(&progs) {
        return;
    }
    let d = Daemon::start();
    let done = "iters in";
    pair(&d, "ibv_rc_pingpong", "-p", &["-g", "3", "-n", "200"], done);
    pair(
        &d,
        "ibv_rc_pingpong",
        "-p",
        &["-g", "3", "-n", "200", "-c"],
        done,
    );
    pair(
        &d,
        "ibv_rc_pingpong",
        "-p",
        &["-g", "3", "-n", "200", "-e"],
        done,
    );
    pair(
        &d,
        "ibv_rc_pingpong",
        "-p",
        &["-g", "3", "-n", "100", "-s", "65536", "-c"],
        done,
    );
    pair(
        &d,
        "ibv_uc_pingpong",
        "-p",
        &["-g", "3", "-n", "200", "-c"],
        done,
    );
    pair(
        &d,
        "ibv_ud_pingpong",
        "-p",
        &["-g", "3", "-n", "200", "-c"],
        done,
    );
    pair(
        &d,
        "ibv_srq_pingpong",
        "-p",
        &["-g", "3", "-n", "200", "-c"],
        done,
    );
    pair(
        &d,
        "ibv_srq_pingpong",
        "-p",
        &["-g", "3", "-n", "100", "-e"],
        done,
    );
}

#[test]
fn perftest_bandwidth_tests_run_both_roles() {
    let progs = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"];
    if !ready(&progs) {
        return;
    }
    let d = Daemon::start();
    let table = "BW average";
    for p in ["ib_write_bw", "ib_read_bw", "ib_send_bw"] {
        pair(&d, p, "-p", &["-x", "3", "-n", "100", "-a"], table);
        pair(
            &d,
            p,
            "-p",
            &["-x", "3", "-n", "100", "--report_gbits"],
            "Gb/sec",
        );
    }
    // perftest refuses -a for atomics (the size is 8 bytes)
    pair(&d, "ib_atomic_bw", "-p", &["-x", "3", "-n", "200"], table);
    pair(
        &d,
        "ib_atomic_bw",
        "-p",
        &["-x", "3", "-n", "200", "--report_gbits"],
        "Gb/sec",
    );
}

#[test]
fn perftest_latency_tests_run_both_roles() {
    let progs = [
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ];
    if !ready(&progs) {
        return;
    }
    let d = Daemon::start();
    let table = "t_typical";
    for p in ["ib_write_lat", "ib_read_lat", "ib_send_lat"] {
        pair(&d, p, "-p", &["-x", "3", "-n", "20", "-a"], table);
    }
    pair(&d, "ib_atomic_lat", "-p", &["-x", "3", "-n", "100"], table);
    pair(
        &d,
        "ib_write_lat",
        "-p",
        &["-x", "3", "-n", "100", "--report_gbits"],
        table,
    );
}

#[test]
fn a_tool_killed_mid_transfer_leaves_the_daemon_serving_others() {
    if !ready(&["ib_write_bw", "ibv_rc_pingpong"]) {
        return;
    }
    let mut d = Daemon::start();
    let port = free_port().to_string();
    let args = |dev: &str| -> Vec<String> {
        ["-d", dev, "-x", "3", "-p", &port, "-D", "60", "-s", "65536"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let mut server = tool(&d, "ib_write_bw", &args("t0"))
        .spawn()
        .expect("server");
    let t0 = Instant::now();
    while !listening(port.parse().expect("port")) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cargs = args("t1");
    cargs.push("127.0.0.1".into());
    // line-buffered stdout (a pipe is block-buffered otherwise)
    let mut cargs2 = vec!["-oL".to_string(), "ib_write_bw".to_string()];
    cargs2.extend(cargs);
    let mut client = tool(&d, "stdbuf", &cargs2).spawn().expect("client");
    // kill it once the measurement is under way (perftest prints the
    // result columns as it starts the timed run)
    let out = client.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("#bytes") {
                let _ = tx.send(());
            }
        }
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "ib_write_bw never started its run"
    );
    let _ = client.kill();
    let _ = client.wait();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        d.child.try_wait().expect("try_wait").is_none(),
        "rnicd died with its client"
    );
    // other programs still get the devices, and whole runs
    pair(
        &d,
        "ibv_rc_pingpong",
        "-p",
        &["-g", "3", "-n", "100", "-c"],
        "iters in",
    );
    assert!(d.child.try_wait().expect("try_wait").is_none());
}
