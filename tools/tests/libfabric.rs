//! Debian's unmodified libfabric tools (libfabric-bin, libfabric 1.17)
//! on the verbs provider through `rnic exec`:
//!
//! - `fi_info -p verbs` lists a device's domains: `DEV` (FI_EP_MSG) and
//!   `DEV-dgram` (FI_EP_DGRAM), of the device at "localhost" (t0 on the
//!   mem-pair, whose addresses are loopback ones; `-s 127.0.0.2` for t1)
//!   or of the namespace's device;
//! - `fi_pingpong -p verbs -e msg` (RC QPs connected by the RDMA CM) and
//!   `fi_pingpong -p 'verbs;ofi_rxm' -e rdm` (RDM layered on MSG), with
//!   `-c`: each side checks every byte it receives.
//!
//! Two settings: an `rnicd --mem-pair` of the test's own (the server on
//! t0, at 127.0.0.1; the client resolves towards it from t1), and two
//! network namespaces joined by a veth pair, an rnicd on each end
//! (testkit's [`RnicdPair`], over AF_PACKET; needs root).
//!
//! Each run must end with exit 0 on both sides and the figures of every
//! size, and the daemons' counters must show that the devices carried
//! the data (RC sends and receives on both ends; for RDM, RDMA READs:
//! ofi_rxm's rendezvous of the 1 MiB messages) and the connection (a CM
//! REQ received). Without fi_pingpong: a loud SKIPPED, a failure
//! under CI=true.
//!
//! `tests/c/fi_check.c` is a libfabric program of ours (built against
//! libfabric-dev) on the verbs MSG endpoint, run the same ways: rounds of
//! messages of 64 B to 1 MiB and their answers, every byte checked, and
//! its EQ read while it waits, so that a peer's disconnect (FI_SHUTDOWN)
//! ends it with exit 2: the survivor of the killed-peer test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::abi::build_c;
use testkit::netns::{self, free_port, listening};
use testkit::proc::{Finished, Running};
use testkit::rnicd::{built, counter, counters, have, rnic_exec, Daemon, STUCK};
use testkit::rnicd_pair::{RnicdPair, Veth};

/// How long one libfabric tool may run.
const DEADLINE: Duration = Duration::from_secs(120);

/// The sizes `fi_pingpong -S all` runs, as its table names them.
const SIZES: [&str; 6] = ["64", "256", "1k", "4k", "64k", "1m"];

/// Iterations per size.
const ITERS: &str = "10";

/// Where a tool runs: a network namespace (None: ours; there it runs as
/// nobody) and the socket folder of its rnicd.
struct Side {
    ns: Option<String>,
    sock_dir: PathBuf,
}

/// `rnic exec --sock-dir D -- args` on `side`.
fn in_view(side: &Side, args: &[&str]) -> Command {
    let mut c = rnic_exec(side.ns.as_deref(), &side.sock_dir);
    c.args(args);
    c
}

/// Whether the build and libfabric-bin are here.
fn fabric_ready() -> Result<(), testkit::Missing> {
    built()?;
    for p in ["fi_info", "fi_pingpong"] {
        if !have(p) {
            return Err(format!("{p} not installed (libfabric-bin)").into());
        }
    }
    Ok(())
}

/// `fi_info -p verbs ARGS` on `side`, which must list `dev`'s MSG and
/// DGRAM domains.
fn fi_info_lists(side: &Side, args: &[&str], dev: &str) {
    let mut a = vec!["fi_info", "-p", "verbs"];
    a.extend(args);
    let out = Running::spawn(a.join(" "), in_view(side, &a)).finish(Instant::now() + DEADLINE);
    assert!(out.ok(), "{out}");
    let text = &out.stdout;
    for (domain, ty) in [
        (dev.to_string(), "FI_EP_MSG"),
        (format!("{dev}-dgram"), "FI_EP_DGRAM"),
    ] {
        let listed = text.split("provider: ").any(|entry| {
            entry
                .lines()
                .any(|l| l.trim() == format!("domain: {domain}"))
                && entry.lines().any(|l| l.trim() == format!("type: {ty}"))
        });
        assert!(listed, "no {ty} domain {domain} in:\n{out}");
    }
}

/// One `fi_pingpong` run: its endpoint type and provider, and whether
/// its large messages go by RDMA READ (ofi_rxm's rendezvous: the
/// receiver reads what the sender announced).
struct Run {
    ep: &'static str,
    prov: &'static str,
    reads: bool,
}

const MSG: Run = Run {
    ep: "msg",
    prov: "verbs",
    reads: false,
};
const RDM: Run = Run {
    ep: "rdm",
    prov: "verbs;ofi_rxm",
    reads: true,
};

/// `fi_pingpong` of `run` with its server on `server` and its client on
/// `client`, which reaches the server's control port at `addr`.
fn pingpong(run: &Run, server: &Side, client: &Side, addr: &str) -> (Finished, Finished) {
    let port = free_port().to_string();
    let args = |oob: &'static str| {
        let mut a = vec![
            "fi_pingpong",
            "-p",
            run.prov,
            "-e",
            run.ep,
            "-c",
            "-I",
            ITERS,
        ];
        a.extend([oob, port.as_str()]);
        a
    };
    let what = |side: &str| format!("fi_pingpong -p '{}' -e {} ({side})", run.prov, run.ep);
    let mut srv = Running::spawn(what("server"), in_view(server, &args("-B")));
    // the client does not retry its control connection: wait until the
    // server listens (without connecting: it accepts one connection)
    let p: u16 = port.parse().expect("port");
    testkit::poll_within(STUCK, || {
        (listening(server.ns.as_deref(), p) || srv.ended()).then_some(())
    });
    let deadline = Instant::now() + DEADLINE;
    let mut a = args("-P");
    a.push(addr);
    let cli = Running::spawn(what("client"), in_view(client, &a)).finish(deadline);
    (srv.finish(deadline), cli)
}

/// Whether `out` has the figures of every size, each with all its
/// iterations acknowledged (`=ITERS`).
fn has_figures(out: &str) -> bool {
    SIZES.iter().all(|size| {
        out.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 8 && w[0] == *size && w[1] == ITERS && w[2] == format!("={ITERS}")
        })
    })
}

/// CM counter `name` of device `dev` (`cm DEV/1 name value ...`; 0 when
/// the device counted none of it).
fn cm_counter(report: &str, dev: &str, name: &str) -> u64 {
    report
        .lines()
        .find(|l| l.starts_with(&format!("cm {dev}/")))
        .and_then(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.windows(2)
                .find(|p| p[0] == name)
                .and_then(|p| p[1].parse().ok())
        })
        .unwrap_or(0)
}

/// The devices of a setting: each with the folder of its rnicd.
type Devices<'a> = [(&'a str, &'a Path); 2];

/// The counters of every device's rnicd, one report.
fn report(devs: &Devices) -> String {
    let mut dirs: Vec<&Path> = devs.iter().map(|d| d.1).collect();
    dirs.dedup();
    dirs.iter().map(|d| counters(d)).collect()
}

/// That between the counter reports `before` and `after` the server's
/// device (the first) received a CM REQ and both devices sent and
/// received RC messages; a failure shows `say()`.
fn connected_and_carried(devs: &Devices, before: &str, after: &str, say: &dyn Fn() -> String) {
    let grew = |f: &dyn Fn(&str) -> u64| f(after) > f(before);
    assert!(
        grew(&|r| cm_counter(r, devs[0].0, "cm_rx_req")),
        "no CM REQ reached {}\n{}",
        devs[0].0,
        say()
    );
    for (dev, _) in devs {
        for name in ["rdma_sends", "rdma_recvs"] {
            assert!(
                grew(&|r| counter(r, dev, name)),
                "{dev}: {name} did not move\n{}",
                say()
            );
        }
    }
}

/// Runs `run` and checks it: both sides exit 0 with the figures of every
/// size; the server's device (the first) received a CM REQ, both
/// devices sent and received RC messages, and where the run says so a
/// device served RDMA READs.
fn check(run: &Run, server: &Side, client: &Side, addr: &str, devs: &Devices) {
    let before = report(devs);
    let (srv, cli) = pingpong(run, server, client, addr);
    let after = report(devs);
    let say = || format!("{srv}\n{cli}\ncounters before:\n{before}\nafter:\n{after}");
    assert!(srv.ok() && cli.ok(), "{}", say());
    assert!(
        has_figures(&srv.stdout) && has_figures(&cli.stdout),
        "{}",
        say()
    );
    connected_and_carried(devs, &before, &after, &say);
    let grew = |f: &dyn Fn(&str) -> u64| f(&after) > f(&before);
    let reads = |r: &str| {
        devs.iter()
            .map(|d| counter(r, d.0, "rx_read_requests"))
            .sum()
    };
    if run.reads {
        assert!(
            grew(&reads),
            "no RDMA READ for the 1 MiB messages\n{}",
            say()
        );
    }
    let last = cli.stdout.lines().rev().find(|l| l.starts_with("1m"));
    eprintln!(
        "fi_pingpong -e {} ({}): {}",
        run.ep,
        run.prov,
        last.unwrap_or("")
    );
}

#[test]
fn fi_info_and_fi_pingpong_run_on_the_mem_pair() {
    if !testkit::runs_here("libfabric on the mem-pair", fabric_ready()) {
        return;
    }
    let d = Daemon::start();
    let side = || Side {
        ns: None,
        sock_dir: d.sock_dir().to_path_buf(),
    };
    // without an address libfabric keeps the domains of the device that
    // "localhost" binds to: t0, at 127.0.0.1; t1 is the one at 127.0.0.2
    fi_info_lists(&side(), &[], "t0");
    fi_info_lists(&side(), &["-s", "127.0.0.2"], "t1");
    let devs = [("t0", d.sock_dir()), ("t1", d.sock_dir())];
    check(&MSG, &side(), &side(), "127.0.0.1", &devs);
    check(&RDM, &side(), &side(), "127.0.0.1", &devs);
}

#[test]
fn fi_pingpong_and_fi_check_run_between_namespaces_over_veth() {
    const TEST: &str = "libfabric between namespaces";
    if !testkit::runs_here(TEST, fabric_ready()) {
        return;
    }
    if !testkit::runs_here(TEST, netns::available()) {
        return;
    }
    let veth = Veth::create("lf", 1500).expect("namespaces and veth");
    let mut pair = match RnicdPair::try_start(veth, "afpacket") {
        Ok(p) => p,
        Err(why) => {
            testkit::skip_or_fail(TEST, &why);
            return;
        }
    };
    pair.wait_active();
    let side = |d: &testkit::rnicd_pair::NetRnicd| Side {
        ns: Some(d.ns.clone()),
        sock_dir: d.sock_dir().to_path_buf(),
    };
    let (a, b) = (side(&pair.a), side(&pair.b));
    fi_info_lists(&a, &[], "ra");
    fi_info_lists(&b, &[], "rb");
    let dirs = (
        pair.a.sock_dir().to_path_buf(),
        pair.b.sock_dir().to_path_buf(),
    );
    let devs = [("ra", dirs.0.as_path()), ("rb", dirs.1.as_path())];
    let addr = pair.a.addr.to_string();
    check(&MSG, &a, &b, &addr, &devs);
    pair.check_alive();
    check(&RDM, &a, &b, &addr, &devs);
    pair.check_alive();
    let Some((_dir, bin)) = fi_check_ready(TEST) else {
        return;
    };
    let fi_check = Check {
        bin: &bin,
        server: &a,
        client: &b,
        addr: &addr,
        rounds: "3",
    };
    fi_check.passes(&devs);
    pair.check_alive();
}

/// tests/c/fi_check.c built in a temp folder (which `nobody`, as whom
/// it runs in a namespace, may read), linked to libfabric: the folder and
/// the program; None after a SKIPPED (or a failure under CI) when the
/// build or libfabric-dev is not here.
fn fi_check_ready(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let ready = built().and_then(|()| {
        Path::new("/usr/include/rdma/fabric.h")
            .exists()
            .then_some(())
            .ok_or_else(|| "libfabric-dev (rdma/fabric.h) not installed".to_string())
    });
    if !testkit::runs_here(test, ready) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(dir.path(), mode).expect("chmod the temp folder");
    let bin = dir.path().join("fi_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fi_check.c");
    build_c(&src, &bin, &["-lfabric".into()]);
    Some((dir, bin))
}

/// A pair of fi_check processes to start: the program, its sides, the
/// server's address as the client reaches it, and how many rounds.
struct Check<'a> {
    bin: &'a Path,
    server: &'a Side,
    client: &'a Side,
    addr: &'a str,
    rounds: &'a str,
}

impl Check<'_> {
    /// Starts the server and the client (which asks again while the
    /// server is not yet listening), on a port of their own; `corrupt`
    /// makes the client send one wrong byte.
    fn spawn(&self, corrupt: bool) -> (Running, Running) {
        let port = free_port().to_string();
        let bin = self.bin.to_str().expect("utf-8 temp path");
        let srv = [bin, "server", port.as_str(), self.rounds];
        let mut cli = vec![bin, "client", self.addr, port.as_str(), self.rounds];
        if corrupt {
            cli.push("--corrupt");
        }
        let what = |role: &str| format!("fi_check {role} ({} rounds)", self.rounds);
        (
            Running::spawn(what("server"), in_view(self.server, &srv)),
            Running::spawn(what("client"), in_view(self.client, &cli)),
        )
    }

    /// Runs the pair and checks it: both sides exit 0 with every byte
    /// right, the server's device (the first) received a CM REQ, and both
    /// devices sent and received RC messages.
    fn passes(&self, devs: &Devices) {
        let before = report(devs);
        let (srv, cli) = self.spawn(false);
        let deadline = Instant::now() + DEADLINE;
        let (cli, srv) = (cli.finish(deadline), srv.finish(deadline));
        let after = report(devs);
        let say = || format!("{srv}\n{cli}\ncounters before:\n{before}\nafter:\n{after}");
        assert!(srv.ok() && cli.ok(), "{}", say());
        for out in [&srv, &cli] {
            assert!(out.stdout.contains("fi_check ok"), "{}", say());
        }
        connected_and_carried(devs, &before, &after, &say);
    }
}

#[test]
fn fi_check_moves_data_that_checks_on_the_mem_pair() {
    let Some((_dir, bin)) = fi_check_ready("fi_check on the mem-pair") else {
        return;
    };
    let d = Daemon::start();
    let side = Side {
        ns: None,
        sock_dir: d.sock_dir().to_path_buf(),
    };
    let check = Check {
        bin: &bin,
        server: &side,
        client: &side,
        addr: "127.0.0.1",
        rounds: "3",
    };
    check.passes(&[("t0", d.sock_dir()), ("t1", d.sock_dir())]);
    // one wrong byte in the client's first 4 KiB message: the server
    // names it and exits 1; its end disconnects the client (exit 2)
    let (srv, cli) = check.spawn(true);
    let deadline = Instant::now() + DEADLINE;
    let (srv, cli) = (srv.finish(deadline), cli.finish(deadline));
    let say = format!("{srv}\n{cli}");
    assert_eq!(srv.status.and_then(|s| s.code()), Some(1), "{say}");
    assert!(
        srv.stderr
            .contains("message of 4096 bytes, round 0: byte 2048 is"),
        "{say}"
    );
    assert_eq!(cli.status.and_then(|s| s.code()), Some(2), "{say}");
}

/// fi_check (tests/c/fi_check.c, libfabric's verbs MSG endpoint) between
/// t0 and t1 with the server killed mid-run. The daemon closes the dead
/// process's connection as the kernel's RDMA CM does when it destroys a
/// connected ID: a DREQ to the peer, whose device answers with a DREP and
/// reports RDMA_CM_EVENT_DISCONNECTED, which libfabric's verbs provider
/// reports as FI_SHUTDOWN on the endpoint's EQ. fi_check reads its EQ
/// while it waits for completions, and ends on FI_SHUTDOWN with exit 2
/// (Debian's fi_pingpong reads no EQ during its transfer and waits on
/// forever). The daemon must then serve a fresh pair.
#[test]
fn a_killed_fi_check_peer_ends_the_survivor_and_rnicd_serves_on() {
    let Some((_dir, bin)) = fi_check_ready("fi_check with its server killed") else {
        return;
    };
    let d = Daemon::start();
    let side = Side {
        ns: None,
        sock_dir: d.sock_dir().to_path_buf(),
    };
    let check = |rounds| Check {
        bin: &bin,
        server: &side,
        client: &side,
        addr: "127.0.0.1",
        rounds,
    };
    // rounds enough to outlast the test: only the kill ends the exchange
    let (mut srv, mut cli) = check("1000000000").spawn(false);
    let sends = || counter(&counters(d.sock_dir()), "t1", "rdma_sends");
    let start = sends();
    testkit::wait_for(STUCK, "the exchange under way", || {
        if srv.ended() || cli.ended() {
            panic!("fi_check ended before the kill");
        }
        (sends() > start + 100)
            .then_some(())
            .ok_or("too few sends yet")
    });
    srv.kill();
    let cli = cli.finish(Instant::now() + STUCK);
    let srv = srv.finish(Instant::now());
    let say = format!("{srv}\n{cli}\ncounters:\n{}", counters(d.sock_dir()));
    assert!(
        cm_counter(&counters(d.sock_dir()), "t1", "cm_rx_dreq") > 0,
        "no DREQ at the survivor's device\n{say}"
    );
    assert_eq!(cli.status.and_then(|s| s.code()), Some(2), "{say}");
    assert!(
        cli.stderr
            .contains("fi_check: peer failure: FI_SHUTDOWN (the peer disconnected)"),
        "{say}"
    );
    eprintln!("survivor: {}", cli.stderr.trim());
    // the daemon serves a fresh pair
    check("3").passes(&[("t0", d.sock_dir()), ("t1", d.sock_dir())]);
}
