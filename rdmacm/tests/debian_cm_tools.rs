//! Debian's unmodified RDMA CM tools (rdmacm-utils, perftest `-R`) on an
//! `rnicd --mem-pair` through both drop-ins: each server on t1
//! (127.0.0.2) or on every device, each client from t0; a client starts
//! once rnicd says its server listens. Every run is repeated, since a
//! race between the CM's events and the QP's state changes shows only in
//! some runs. What softrnic does not do (XRC, multicast) must fail
//! cleanly: a non-zero exit with a line saying why, never a signal or a
//! hang.

mod common;

use common::{server_and_client, Daemon, Finished};

/// How many times each pair runs.
const ROUNDS: usize = 3;

fn ready(progs: &[&str]) -> Option<Daemon> {
    match common::prerequisites(progs) {
        Ok(()) => Some(Daemon::start()),
        Err(why) => {
            testkit::skip_or_fail("the Debian CM tools test", &why);
            None
        }
    }
}

/// Both ended with exit status 0.
fn both_ok(s: &Finished, c: &Finished) {
    assert!(s.ok() && c.ok(), "=== server {s}\n=== client {c}");
}

#[test]
fn ucmatose_runs_several_rc_connections_with_data() {
    let Some(d) = ready(&["ucmatose"]) else {
        return;
    };
    // -c connections, -C messages each way on each, -S their size; -a
    // sets the ACK timeout with rdma_set_option; -m moves the IDs to a new
    // channel (rdma_migrate_id) before the disconnect, whose events may
    // already wait on the old one: several runs, as that race is won or
    // lost by timing.
    let runs: &[&[&str]] = &[
        &["-c", "4", "-C", "10"],
        &["-c", "4", "-C", "20", "-S", "4096"],
        &["-c", "2", "-C", "10", "-S", "64", "-a", "16"],
        &["-c", "2", "-C", "10", "-m"],
        &["-c", "2", "-C", "10", "-m"],
        &["-c", "2", "-C", "10", "-m"],
        &["-c", "2", "-C", "10", "-m"],
    ];
    for opts in runs {
        let mut sargs = vec!["-b", "127.0.0.2", "-p", "7000"];
        sargs.extend_from_slice(opts);
        let mut cargs = vec!["-s", "127.0.0.2", "-p", "7000"];
        cargs.extend_from_slice(opts);
        let (s, c) = server_and_client(&d, "t1", ("ucmatose", &sargs), ("ucmatose", &cargs));
        both_ok(&s, &c);
        for f in [&s, &c] {
            assert!(f.stdout.contains("data transfers complete"), "{f}");
            assert!(f.stdout.contains("return status 0"), "{f}");
        }
    }
}

#[test]
fn rdma_server_and_client_exchange_a_message() {
    let Some(d) = ready(&["rdma_server", "rdma_client"]) else {
        return;
    };
    for _ in 0..ROUNDS {
        let (s, c) = server_and_client(
            &d,
            "t1",
            ("rdma_server", &["-s", "127.0.0.2", "-p", "7001"]),
            ("rdma_client", &["-s", "127.0.0.2", "-p", "7001"]),
        );
        both_ok(&s, &c);
        assert!(s.stdout.contains("rdma_server: end 0"), "{s}");
        assert!(c.stdout.contains("rdma_client: end 0"), "{c}");
    }
}

#[test]
fn rdma_xserver_and_xclient_connect_over_rc_and_refuse_xrc() {
    let Some(d) = ready(&["rdma_xserver", "rdma_xclient"]) else {
        return;
    };
    // RC: the server listens on every device (no address), the client
    // sends 16 bytes inline
    for _ in 0..ROUNDS {
        let (s, c) = server_and_client(
            &d,
            "t1",
            ("rdma_xserver", &["-p", "7002", "-c", "r"]),
            (
                "rdma_xclient",
                &["-s", "127.0.0.2", "-p", "7002", "-c", "r"],
            ),
        );
        both_ok(&s, &c);
        assert!(s.stdout.contains("rdma_xserver: end 0"), "{s}");
        assert!(c.stdout.contains("rdma_xclient: end 0"), "{c}");
    }
    // XRC (port space RDMA_PS_IB, XRC QPs): refused on each side
    let refused = "port space 0x13f is not supported";
    let s = common::run(&d, "rdma_xserver", &["-p", "7003", "-c", "x"]);
    assert!(s.failed_cleanly() && s.stderr.contains(refused), "{s}");
    let c = common::run(
        &d,
        "rdma_xclient",
        &["-s", "127.0.0.2", "-p", "7003", "-c", "x"],
    );
    assert!(c.failed_cleanly() && c.stderr.contains(refused), "{c}");
}

#[test]
fn mckey_fails_cleanly_without_multicast() {
    let Some(d) = ready(&["mckey"]) else {
        return;
    };
    for role in [None, Some("-s")] {
        let mut args = vec!["-m", "239.1.2.3", "-b", "127.0.0.1", "-C", "5"];
        args.extend(role);
        let m = common::run(&d, "mckey", &args);
        assert!(m.failed_cleanly(), "{m}");
        assert!(
            m.stderr.contains(
                "softrnic-rdmacm: rdma_resolve_addr: 239.1.2.3: multicast is not supported"
            ),
            "{m}"
        );
    }
}

/// perftest `prog -R` (the connection over the CM), server on t1, client
/// on t0 towards 127.0.0.2; the client's output must contain `expect`.
///
/// Two failures of perftest's own are tried again, a few times at most:
/// - it calibrates its cycle clock against the wall clock before it
///   reports; under heavy load it may find them too poorly correlated
///   ("Can't produce a report") and exit 1 after a complete run;
/// - once the control connection is up, the server listens anew for the
///   test's QPs while the client connects them at once: a client that is
///   first is refused (REJECTED, reason 8: no such service yet), and
///   perftest's retry then uses the IDs it has just destroyed (the library
///   refuses them: the client exits 1).
fn perftest(d: &Daemon, prog: &str, iters: &str, expect: &str) {
    let common = ["-R", "-x", "3", "-n", iters, "-p", "18515"];
    let mut sargs = vec!["-d", "t1"];
    sargs.extend_from_slice(&common);
    let mut cargs = vec!["-d", "t0"];
    cargs.extend_from_slice(&common);
    cargs.push("127.0.0.2");
    for tries in 0.. {
        let (s, c) = server_and_client(d, "t1", (prog, &sargs), (prog, &cargs));
        let calibration = |f: &Finished| f.text().contains("Can't produce a report");
        let early = c.failed_cleanly() && c.stderr.contains("RDMA_CM_EVENT_REJECTED; error: 8");
        if tries < 4 && (calibration(&s) || calibration(&c) || early) {
            eprintln!(
                "perftest's own failure (clock calibration, or its client first); again:\n{s}\n{c}"
            );
            continue;
        }
        both_ok(&s, &c);
        assert!(c.stdout.contains(expect), "{c}");
        return;
    }
}

#[test]
fn perftest_connects_over_the_cm() {
    let Some(d) = ready(&["ib_write_bw", "ib_send_bw", "ib_send_lat", "ib_read_lat"]) else {
        return;
    };
    for _ in 0..ROUNDS {
        perftest(&d, "ib_write_bw", "100", "BW average");
        perftest(&d, "ib_send_bw", "100", "BW average");
        perftest(&d, "ib_send_lat", "100", "t_typical");
        perftest(&d, "ib_read_lat", "100", "t_typical");
    }
}
