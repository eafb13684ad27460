//! The command line itself: every subcommand has --help with examples;
//! bad flags, bad values and impossible requests end in one line on stderr
//! and a non-zero exit, never a panic or a backtrace.

mod common;

use common::rnic;
use predicates::prelude::*;

fn one_line_error(args: &[&str], code: i32, needles: &[&str]) {
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path()).args(args).assert().failure().code(code);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(
        err.lines().count(),
        1,
        "rnic {args:?}: one line expected:\n{err}"
    );
    assert!(err.starts_with("rnic: "), "rnic {args:?}: {err}");
    for bad in ["panicked", "RUST_BACKTRACE", "Usage:"] {
        assert!(!err.contains(bad), "rnic {args:?}: {err}");
    }
    for n in needles {
        assert!(err.contains(n), "rnic {args:?}: {n:?} missing from {err}");
    }
    assert!(
        out.get_output().stdout.is_empty() || code == 1,
        "rnic {args:?}"
    );
}

#[test]
fn every_subcommand_has_help_with_examples() {
    let state = tempfile::tempdir().unwrap();
    for args in [
        vec!["--help"],
        vec!["demo", "--help"],
        vec!["perf", "--help"],
        vec!["pingpong", "--help"],
        vec!["pcap", "--help"],
        vec!["pcap", "check", "--help"],
        vec!["pcap", "dump", "--help"],
        vec!["pcap", "replay", "--help"],
        vec!["stats", "--help"],
        vec!["memcheck", "--help"],
    ] {
        let out = rnic(state.path()).args(&args).assert().success();
        let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        assert!(text.contains("Usage: rnic"), "{args:?}:\n{text}");
        assert!(
            text.contains("Examples:"),
            "{args:?} has no examples:\n{text}"
        );
    }
    // the loopback's nature is said where it is used
    for args in [["perf", "--help"], ["demo", "--help"]] {
        rnic(state.path())
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains(
            "in-process loopback: both NICs in one thread; wall-clock time of the software path",
        ));
    }
    rnic(state.path())
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("rnic "));
}

#[test]
fn bad_invocations_fail_in_one_line() {
    one_line_error(
        &["frobnicate"],
        2,
        &["unrecognized subcommand 'frobnicate'", "rnic --help"],
    );
    one_line_error(
        &["demo", "--bogus"],
        2,
        &["unexpected argument '--bogus'", "rnic demo --help"],
    );
    one_line_error(
        &["perf", "write", "lat", "--loopback", "-j", "3"],
        2,
        &["unexpected argument '-j'", "rnic perf --help"],
    );
    one_line_error(
        &["perf", "fly", "lat"],
        2,
        &[
            "invalid value 'fly'",
            "possible values: write, read, send, atomic",
        ],
    );
    one_line_error(
        &["perf", "write", "fast"],
        2,
        &["invalid value 'fast'", "bw, lat"],
    );
    one_line_error(&["perf", "write"], 2, &["required"]);
    one_line_error(
        &["perf", "write", "bw", "--loopback", "-s", "lots"],
        2,
        &["invalid value 'lots'"],
    );
    one_line_error(
        &["perf", "write", "bw", "--loopback", "-s", "-5"],
        2,
        &["-5"],
    );
    one_line_error(&["pcap", "check"], 2, &["FILE", "rnic pcap check --help"]);
    one_line_error(
        &["pcap", "dump", "-c", "x", "f.pcap"],
        2,
        &["invalid value 'x'"],
    );
    one_line_error(&["stats", "--jsn"], 2, &["unexpected argument '--jsn'"]);
}

#[test]
fn perf_rejects_impossible_requests_in_one_line() {
    let lb = ["--loopback"];
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["write", "bw", "-m", "1500"],
            2,
            "-m 1500: the MTU is one of 256, 512, 1024, 2048, 4096",
        ),
        (
            vec!["write", "lat", "-q", "2"],
            2,
            "latency tests use one QP",
        ),
        (vec!["write", "bw", "-q", "0"], 2, "-q 0"),
        (
            vec!["atomic", "lat", "-s", "16"],
            2,
            "atomic operations move 8 bytes",
        ),
        (vec!["read", "bw", "-c", "UC"], 2, "read needs RC"),
        (vec!["send", "bw", "-c", "UD"], 2, "UD is not supported"),
        (vec!["send", "bw", "-c", "XRC"], 2, "RC or UC"),
        (vec!["write", "bw", "-s", "0"], 2, "-s 0"),
        (
            vec!["write", "bw", "-s", "4294967296"],
            2,
            "the message size is 1 to",
        ),
        (vec!["write", "bw", "-n", "0"], 2, "at least one iteration"),
        (vec!["write", "bw", "-D", "0"], 2, "-D 0"),
        (
            vec!["write", "bw", "-a", "-s", "64"],
            2,
            "-a runs every size",
        ),
        (vec!["write", "bw", "-t", "0"], 2, "-t 0"),
        (
            vec!["write", "bw", "--cc", "dctcp"],
            2,
            "--cc dctcp: nvidia, sigcomm15 or off",
        ),
        (
            vec!["write", "bw", "--pfc-tx", "100:200"],
            2,
            "--pfc-tx 100:200: XOFF:XON in bytes, XON < XOFF",
        ),
        (
            vec!["write", "bw", "--cc", "off"],
            2,
            "--cc and --pfc-tx set up a real interface's NIC (--dev)",
        ),
        (vec!["write", "lat", "-t", "4"], 2, "-t is for bw tests"),
        (
            vec!["write", "bw", "--dump-mem", "x"],
            2,
            "--dump-mem records a real interface's test (--dev)",
        ),
        (
            vec!["write", "bw", "--json", "/nonexistent-dir/x.json"],
            1,
            "/nonexistent-dir is not a directory",
        ),
    ];
    for (args, code, why) in cases {
        let mut all: Vec<&str> = vec!["perf"];
        all.extend(&args);
        all.extend(&lb);
        one_line_error(&all, code, &[why]);
    }
}

#[test]
fn memcheck_without_dumps_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("case.rnic");
    let theirs = dir.path().join("case.rxe");
    let (o, t) = (ours.to_str().unwrap(), theirs.to_str().unwrap());
    one_line_error(&["memcheck", o, t], 1, &["case.rnic.json"]);
    std::fs::write(dir.path().join("case.rnic.json"), "{not json").unwrap();
    one_line_error(&["memcheck", o, t], 1, &["case.rnic.json"]);
}

#[test]
fn real_interfaces_fail_in_one_line_without_touching_the_network() {
    // a server needs its interface; a missing interface is a clear error
    // (the device is opened before any TCP connection is tried)
    one_line_error(
        &["perf", "write", "bw"],
        2,
        &["the server needs its interface: --dev IFACE"],
    );
    for args in [
        vec!["perf", "read", "bw", "--dev", "rnicnone0", "-p", "20000"],
        vec!["perf", "send", "lat", "192.0.2.2", "-d", "rnicnone0"],
        vec!["pingpong", "-d", "rnicnone0"],
        vec!["pingpong", "--ud", "-d", "rnicnone0", "192.0.2.2"],
    ] {
        one_line_error(&args, 1, &["interface rnicnone0: no such interface"]);
    }
    // every backend name is accepted (a bad one is a usage error, below)
    for backend in ["afpacket", "afpacket-v2", "afpacket-v3", "afxdp-generic"] {
        one_line_error(
            &[
                "perf",
                "write",
                "bw",
                "--dev",
                "rnicnone0",
                "--backend",
                backend,
            ],
            1,
            &["interface rnicnone0: no such interface"],
        );
    }
    one_line_error(
        &["pingpong"],
        2,
        &["the server needs its interface: -d IFACE"],
    );
    one_line_error(&["pingpong", "-m", "3000", "-d", "x"], 2, &["-m 3000"]);
    one_line_error(
        &["perf", "write", "bw", "--dev", "x", "--backend", "dpdk"],
        2,
        &["--backend dpdk: one of auto, afxdp, afxdp-generic, afpacket, afpacket-v3"],
    );
    one_line_error(
        &["perf", "write", "bw", "--dev", "x", "--engine", "fast"],
        2,
        &["--engine fast: inline or thread"],
    );
    one_line_error(
        &["perf", "write", "bw", "--dev", "eth0", "--loopback"],
        2,
        &["--dev and --loopback exclude each other"],
    );
    one_line_error(
        &["perf", "write", "bw", "192.0.2.2", "--loopback"],
        2,
        &["give no peer address"],
    );
}

#[test]
fn stats_without_a_run_is_a_clear_error_and_after_one_prints_counters() {
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path()).arg("stats").assert().failure().code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no counters") && err.contains("last-run.json"),
        "{err}"
    );

    rnic(state.path())
        .args([
            "perf",
            "send",
            "bw",
            "--loopback",
            "-s",
            "4096",
            "-n",
            "300",
        ])
        .assert()
        .success();
    let out = rnic(state.path()).arg("stats").assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("rnic perf send bw --loopback"), "{text}");
    for needle in [
        "link srnic0/1 sent_pkts ",
        "link srnic1/1 sent_pkts ",
        " rdma_sends ",
        " rdma_recvs ",
        " out_of_sequence 0",
        " local_ack_timeout_err 0",
        " tx_packets ",
        " rx_bytes ",
        " lqpn 17 rqpn 17 type RC state RTS",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    let out = rnic(state.path())
        .args(["stats", "--json"])
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2);
    // the warm-up's SENDs count too
    let sends = devs[0]["counters"]["rdma_sends"].as_u64().unwrap();
    assert!(sends >= 300, "{sends}");
    assert_eq!(devs[1]["counters"]["rdma_recvs"].as_u64(), Some(sends));
    assert!(devs[0]["port_counters"]["tx_packets"].as_u64().unwrap() >= 300);

    // a damaged saved run
    let bad = state.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    one_line_error(
        &["stats", "--file", bad.to_str().unwrap()],
        1,
        &["is not a saved run"],
    );
}

#[test]
fn broken_pipes_end_quietly() {
    let state = tempfile::tempdir().unwrap();
    // `rnic perf ... | head -1`: stdout closed early is not an error
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rnic"))
        .args([
            "perf",
            "write",
            "lat",
            "--loopback",
            "-a",
            "-n",
            "20",
            "--no-progress",
        ])
        .env("SOFTRNIC_STATE_DIR", state.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
}
