//! `rnic demo`: completes, prints the suite's tables and percentiles, and
//! writes a pcap that `rnic pcap check` and Wireshark (tshark) accept.

mod common;

use common::{rnic, tshark_verdict};
use predicates::prelude::*;
use std::time::{Duration, Instant};

#[test]
fn demo_runs_the_suite_and_writes_a_clean_pcap() {
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // the README's command, as a user runs it: no flags, demo.pcap in the
    // current directory
    let out = rnic(state.path())
        .current_dir(work.path())
        .arg("demo")
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let took = started.elapsed();
    eprintln!("rnic demo took {took:?}");
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for title in [
        "RDMA_Write Latency Test",
        "RDMA_Read Latency Test",
        "Send Latency Test",
        "RDMA_Write BW Test",
        "RDMA_Read BW Test",
        "Send BW Test",
    ] {
        assert!(text.contains(title), "{title} missing:\n{text}");
    }
    assert!(text.contains(
        "in-process loopback: both NICs in one thread; wall-clock time of the software path"
    ));
    assert!(text.contains("t_typical[usec]") && text.contains("BW average[MB/sec]"));
    assert!(text.contains("p99.99[usec]"));
    assert!(text.contains("rnic pcap check: ok: "), "{text}");
    let pcap = work.path().join("demo.pcap");
    assert!(pcap.is_file());

    // our own checker
    rnic(state.path())
        .args(["pcap", "check"])
        .arg(&pcap)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 retransmissions"));

    // Wireshark's dissectors
    if let Some(verdict) = tshark_verdict("demo_runs_the_suite_and_writes_a_clean_pcap", &pcap) {
        match verdict {
            Ok(v) => eprintln!("tshark: {}", v.trim()),
            Err(v) => panic!("tshark refuses demo.pcap:\n{v}"),
        }
    }

    // and the counters of the run are there for `rnic stats`
    rnic(state.path())
        .arg("stats")
        .assert()
        .success()
        .stdout(predicate::str::contains("rnic demo"))
        .stdout(predicate::str::contains("link srnic1/1"));
}

#[test]
fn demo_quick_with_json_and_a_chosen_path() {
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("sub.pcap");
    let json = work.path().join("demo.json");
    rnic(state.path())
        .args(["demo", "--quick", "--out"])
        .arg(&pcap)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    assert!(pcap.is_file());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let tests = doc["tests"].as_array().unwrap();
    assert!(tests.len() >= 6);
    assert!(tests
        .iter()
        .all(|t| !t["results"].as_array().unwrap().is_empty()));
    assert_eq!(doc["devices"].as_array().unwrap().len(), 2);
    // an output path in a missing directory is refused before the run
    let state2 = tempfile::tempdir().unwrap();
    let out = rnic(state2.path())
        .args(["demo", "--out", "/nonexistent-dir/demo.pcap"])
        .assert()
        .failure()
        .code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a directory"), "{err}");
}
