//! Debian's unmodified RDMA CM tools between two network namespaces joined
//! by a veth pair, an rnicd in each (testkit's [`RnicdPair`]: device `ra`
//! at 192.0.2.1 in A, `rb` at 192.0.2.2 in B), over AF_PACKET and over
//! AF_XDP: each tool runs as `nobody` in its namespace through both
//! drop-ins (librdmacm.so.1, libibverbs.so.1) and talks to its own
//! namespace's daemon, which resolves the peer's MAC through the kernel's
//! neighbour table of that namespace.
//!
//! - `rping -v -V` (data printed and verified on both sides), the server
//!   in either namespace;
//! - `ucmatose`, `rdma_server`/`rdma_client`, `rdma_xserver`/`rdma_xclient`
//!   (RC), the server in either;
//! - `udaddy` (UD IDs: Service ID Resolution), the server in either;
//! - perftest over the CM (`-R`): `ib_write_bw`, `ib_send_bw`,
//!   `ib_send_lat` and `ib_write_lat`, the server in either.
//!
//! Every tool run has a deadline and is killed at it (and on drop). A
//! client starts once its server's rnicd counts the server's listening CM
//! ID; a client refused anyway (perftest's own race, or a request before
//! the listener: RC REJ, no such service; UD SIDR_REP, unsupported service
//! ID) runs again until it is heard. Needs root, the tools and AF_XDP for its
//! part: otherwise a loud SKIPPED, and a failure under CI=true.

mod common;

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use testkit::abi::profile_dir;
use testkit::netns;
use testkit::proc::{Finished, Running};
use testkit::rnicd_pair::{NetRnicd, RnicdPair, Veth, STUCK};

/// How long one tool process may run.
const DEADLINE: Duration = Duration::from_secs(90);

/// What the test needs, or why it cannot run here.
fn prerequisites() -> Result<(), testkit::Missing> {
    netns::available()?;
    for (prog, pkg) in [
        ("rping", "rdmacm-utils"),
        ("ucmatose", "rdmacm-utils"),
        ("rdma_server", "rdmacm-utils"),
        ("rdma_client", "rdmacm-utils"),
        ("rdma_xserver", "rdmacm-utils"),
        ("rdma_xclient", "rdmacm-utils"),
        ("udaddy", "rdmacm-utils"),
        ("ib_write_bw", "perftest"),
        ("ib_send_bw", "perftest"),
        ("ib_send_lat", "perftest"),
        ("ib_write_lat", "perftest"),
        ("ibv_devinfo", "ibverbs-utils"),
        ("setpriv", "util-linux"),
    ] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {prog}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!("{prog} not installed ({pkg})").into());
        }
    }
    testkit::rnicd::built()
}

// ---------------------------------------------------------------- harness

/// `prog args` on `side`, both drop-ins first on the library path.
fn start(side: &NetRnicd, prog: &str, args: &[String]) -> Running {
    let what = format!("{prog} {} (in {})", args.join(" "), side.ns);
    let path = format!(
        "{}:{}",
        profile_dir().join("softrnic-rdmacm").display(),
        profile_dir().join("softrnic-ibverbs").display()
    );
    let mut cmd = side.command(prog);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", path)
        .env("LD_BIND_NOW", "1");
    Running::spawn(what, cmd)
}

/// One run of a server and a client: `sprog sargs` on `server`; once its
/// rnicd has its listening CM ID (a request before that is refused, and a
/// tool with several connections may then fail half-connected), `cprog
/// cargs` on `client`, again while the client fails saying `unheard` and
/// the server still runs. Then the server's end (soon after a failed
/// client: it may wait for ever) and its listeners gone. Returns (server,
/// client).
fn server_and_client(
    server: &NetRnicd,
    client: &NetRnicd,
    (sprog, sargs): (&str, &[&str]),
    (cprog, cargs): (&str, &[&str]),
    unheard: &str,
) -> (Finished, Finished) {
    let owned = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let sock = server.sock_dir().join(format!("{}.sock", server.dev));
    let before = common::listeners_at(&sock).expect("rnicd's CM counters");
    let mut s = start(server, sprog, &owned(sargs));
    common::wait_listening(&sock, before, &mut s);
    let mut tries = 0;
    let c = testkit::wait_for(STUCK, &format!("{cprog}'s client heard"), || {
        tries += 1;
        let c = start(client, cprog, &owned(cargs)).finish(Instant::now() + DEADLINE);
        let text = c.text();
        assert!(!text.contains("symbol lookup error"), "{c}");
        if !c.ok() && text.contains(unheard) && !s.ended() {
            Err(format!("try {tries}: {c}"))
        } else {
            Ok(c)
        }
    });
    let grace = if c.ok() {
        DEADLINE
    } else {
        Duration::from_secs(5)
    };
    let s = s.finish(Instant::now() + grace);
    common::wait_listeners_gone(&sock, before);
    (s, c)
}

/// Both ended well, or the test fails showing both.
fn both_ok(s: &Finished, c: &Finished) {
    assert!(
        s.ok() && c.ok(),
        "=== server {s}\n=== client {c}\n(the daemons' logs follow)"
    );
}

// ------------------------------------------------------------ the tools

/// `rping -v -V -C 200` with the server on `srv`, the client on `cli`: every
/// ping printed by the client and checked by both.
fn rping(srv: &NetRnicd, cli: &NetRnicd) {
    let (a, p) = (srv.addr.to_string(), port());
    let common = ["-v", "-V", "-C", "200", "-a", &a, "-p", &p];
    let sargs: Vec<&str> = ["-s"].iter().chain(&common).copied().collect();
    let cargs: Vec<&str> = ["-c"].iter().chain(&common).copied().collect();
    let (s, c) = server_and_client(srv, cli, ("rping", &sargs), ("rping", &cargs), "REJECTED");
    both_ok(&s, &c);
    // -v prints each ping; -V has each side check the data it got
    for i in [0, 100, 199] {
        let line = format!("rdma-ping-{i}: ");
        assert!(c.stdout.contains(&format!("ping data: {line}")), "{c}");
        assert!(
            s.stdout.contains(&format!("server ping data: {line}")),
            "{s}"
        );
    }
    eprintln!("ok: rping, server in {}", srv.ns);
}

/// `udaddy` with the server bound to `srv`'s address, `args` more for both.
fn udaddy(srv: &NetRnicd, cli: &NetRnicd, args: &[&str]) {
    let a = srv.addr.to_string();
    let sargs: Vec<&str> = ["-b", &a].iter().chain(args).copied().collect();
    let cargs: Vec<&str> = ["-s", &a].iter().chain(args).copied().collect();
    let (s, c) = server_and_client(
        srv,
        cli,
        ("udaddy", &sargs),
        ("udaddy", &cargs),
        "RDMA_CM_EVENT_UNREACHABLE",
    );
    both_ok(&s, &c);
    // each side sends its messages and receives the other's
    for f in [&c, &s] {
        let text = f.text();
        assert!(text.contains("data transfers complete"), "{f}");
        assert!(text.contains("return status 0"), "{f}");
    }
    assert!(c.text().contains("initiating data transfers"), "{c}");
    assert!(s.text().contains("sending replies"), "{s}");
    eprintln!("ok: udaddy {}, server in {}", args.join(" "), srv.ns);
}

/// `ucmatose` (two RC connections, ten messages each way on each), then
/// `rdma_server`/`rdma_client` and `rdma_xserver`/`rdma_xclient` over RC
/// (one message with the `rdma_verbs.h` helpers), the server on `srv`.
fn rc_tools(srv: &NetRnicd, cli: &NetRnicd) {
    let (a, p) = (srv.addr.to_string(), port());
    let opts = ["-c", "2", "-C", "10", "-S", "1000", "-p", &p];
    let sargs: Vec<&str> = ["-b", &a].iter().chain(&opts).copied().collect();
    let cargs: Vec<&str> = ["-s", &a].iter().chain(&opts).copied().collect();
    let (s, c) = server_and_client(
        srv,
        cli,
        ("ucmatose", &sargs),
        ("ucmatose", &cargs),
        "RDMA_CM_EVENT_REJECTED",
    );
    both_ok(&s, &c);
    for f in [&s, &c] {
        assert!(f.stdout.contains("data transfers complete"), "{f}");
        assert!(f.stdout.contains("return status 0"), "{f}");
    }
    let p = port();
    let (s, c) = server_and_client(
        srv,
        cli,
        ("rdma_server", &["-s", &a, "-p", &p]),
        ("rdma_client", &["-s", &a, "-p", &p]),
        "Connection refused",
    );
    both_ok(&s, &c);
    assert!(s.stdout.contains("rdma_server: end 0"), "{s}");
    assert!(c.stdout.contains("rdma_client: end 0"), "{c}");
    let p = port();
    let (s, c) = server_and_client(
        srv,
        cli,
        ("rdma_xserver", &["-p", &p, "-c", "r"]),
        ("rdma_xclient", &["-s", &a, "-p", &p, "-c", "r"]),
        "Connection refused",
    );
    both_ok(&s, &c);
    assert!(s.stdout.contains("rdma_xserver: end 0"), "{s}");
    assert!(c.stdout.contains("rdma_xclient: end 0"), "{c}");
    eprintln!(
        "ok: ucmatose, rdma_server, rdma_xserver, server in {}",
        srv.ns
    );
}

/// perftest `prog -R` (the CM) with the server on `srv`: both exit 0 and
/// the client prints `expect` (its result table). A client before its
/// server's listener is refused at its control connection ("Unexpected CM
/// event", exit 1) and runs again.
///
/// Two failures of perftest's own are tried again, four times at most,
/// saying so:
/// - it calibrates its cycle clock against the wall clock before it
///   reports; under heavy load it may find them too poorly correlated
///   ("Can't produce a report") and exit 1 after a complete run;
/// - once the control connection is up, the server listens anew for the
///   test's QPs while the client connects them at once: a client that is
///   first is refused (REJECTED, reason 8: no such service yet) and ends
///   its run; its server then waits for ever and is killed.
fn perftest(srv: &NetRnicd, cli: &NetRnicd, prog: &str, expect: &str) {
    let srv_addr = srv.addr.to_string();
    for tries in 0.. {
        let port = port();
        let common = ["-R", "-x", "3", "-n", "20", "-p", &port];
        let sargs: Vec<&str> = ["-d", &srv.dev].iter().chain(&common).copied().collect();
        let cargs: Vec<&str> = ["-d", &cli.dev]
            .iter()
            .chain(&common)
            .copied()
            .chain([srv_addr.as_str()])
            .collect();
        let (s, c) = server_and_client(
            srv,
            cli,
            (prog, &sargs),
            (prog, &cargs),
            "Unexpected CM event",
        );
        let calibration = |f: &Finished| f.text().contains("Can't produce a report");
        let early = !c.ok() && c.stderr.contains("RDMA_CM_EVENT_REJECTED; error: 8");
        if tries < 4 && (calibration(&s) || calibration(&c) || early) {
            eprintln!(
                "perftest's own failure (clock calibration, or its client first); again:\n{s}\n{c}"
            );
            continue;
        }
        both_ok(&s, &c);
        assert!(c.stdout.contains(expect), "no {expect:?} in:\n{c}");
        eprintln!("ok: {prog} -R, server in {}", srv.ns);
        return;
    }
}

/// A port of its own for each server (the daemons' CM port spaces are
/// theirs alone: no other test's server can hold it).
fn port() -> String {
    static NEXT: AtomicU16 = AtomicU16::new(18515);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

/// Every CM tool between the namespaces over `backend`, the server in A,
/// then in B.
fn over_veth(tag: &str, backend: &str, mtu: u32) {
    let test = format!("the CM tools over veth ({backend})");
    if let Err(why) = prerequisites() {
        return testkit::skip_or_fail(&test, &why);
    }
    let veth = Veth::create(tag, mtu).expect("namespaces and veth");
    let mut net = match RnicdPair::try_start(veth, backend) {
        Ok(n) => n,
        Err(why) => return testkit::skip_or_fail(&test, &why),
    };
    net.wait_active();
    for server_in_b in [false, true] {
        let (srv, cli) = if server_in_b {
            (&net.b, &net.a)
        } else {
            (&net.a, &net.b)
        };
        rping(srv, cli);
        rc_tools(srv, cli);
        udaddy(srv, cli, &[]);
        udaddy(srv, cli, &["-c", "3", "-C", "40", "-S", "1000"]);
        perftest(srv, cli, "ib_write_bw", "BW average");
        perftest(srv, cli, "ib_send_bw", "BW average");
        perftest(srv, cli, "ib_send_lat", "t_typical");
        perftest(srv, cli, "ib_write_lat", "t_typical");
        net.check_alive();
    }
}

#[test]
fn cm_tools_across_namespaces_over_af_packet() {
    over_veth("cmv", "afpacket", 9000);
}

#[test]
fn cm_tools_across_namespaces_over_af_xdp() {
    over_veth("cmx", "afxdp", 1500);
}
