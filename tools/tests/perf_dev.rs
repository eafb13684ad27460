//! `rnic perf ... --dev IFACE [PEER]` between two network namespaces
//! joined by a veth pair: server and client are two `rnic` processes run
//! with `ip netns exec` that meet on TCP port 18515 and speak perftest's
//! out-of-band exchange. Between two rnic sides (which recognise each
//! other and add their settings line and data checks): WRITE bandwidth and
//! latency with `--json` parsed (results, and both devices' port, device
//! and per-QP counters under their `rdma statistic` / `ethtool -S`
//! names); every other verb and mode; UC; several QPs; every size; the
//! engine on its own thread; AF_PACKET; a server started for another
//! test refusing the client; `--pcap` passing `rnic pcap check`. As plain
//! perftest (SOFTRNIC_PERFTEST_PLAIN=1 on both sides: exactly what the
//! real tools exchange): every verb × bw/lat, both sides given the same
//! flags, each printing what perftest prints. A fake peer sending
//! malformed preambles and handshakes is refused with the reason. Needs
//! root (namespaces): a loud SKIPPED line without it, a failure under CI.

mod common;

use common::netns::{can_run, link, pair, rnic_in, spawn, text, Link};
use common::{wait_for, STUCK};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;

fn ok(l: &Link, state: &Path, server: &[&str], client: &[&str]) -> (String, String) {
    let (s, c) = pair(l, state, server, client, STUCK);
    let ctx = format!(
        "rnic {}\n-- server --\n{}\n-- client --\n{}",
        client.join(" "),
        text(&s),
        text(&c)
    );
    assert!(s.status.success() && c.status.success(), "{ctx}");
    (
        String::from_utf8_lossy(&s.stdout).into_owned(),
        String::from_utf8_lossy(&c.stdout).into_owned(),
    )
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Every device carries the counters scripts written for real RNICs read.
fn check_devices(doc: &Value, first_role: &str) {
    let devs = doc["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 2, "{doc}");
    assert_eq!(devs[0]["role"], first_role);
    for d in devs {
        common::assert_device_counters(
            d,
            &[
                "np_cnp_sent",
                "np_ecn_marked_roce_packets",
                "rp_cnp_handled",
            ],
        );
        assert!(
            d["port_counters"]["rx_packets"].as_u64().unwrap() > 0,
            "{d}"
        );
        assert!(
            d["port_counters"]["tx_packets"].as_u64().unwrap() > 0,
            "{d}"
        );
        assert!(d["port_counters"]["rx_prio0_pause"].is_u64(), "{d}");
        let qps = d["qps"].as_array().expect("qps");
        assert_eq!(qps.len(), 1, "{d}");
        assert_eq!(qps[0]["state"], "RTS");
        assert!(qps[0]["counters"]["out_of_sequence"].is_u64(), "{d}");
        assert!(d["backend"].as_str().unwrap().starts_with("AF_"), "{d}");
    }
    let ips: Vec<&str> = devs.iter().map(|d| d["ip"].as_str().unwrap()).collect();
    assert!(
        ips.contains(&"192.0.2.1") && ips.contains(&"192.0.2.2"),
        "{ips:?}"
    );
}

#[test]
fn write_bw_and_lat_between_namespaces_with_json_counters() {
    let test = "write_bw_and_lat_between_namespaces_with_json_counters";
    if !can_run(test) {
        return;
    }
    let l = link("fw");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let (cj, sj) = (
        dir.path().join("client.json"),
        dir.path().join("server.json"),
    );
    let (cjs, sjs) = (cj.to_str().unwrap(), sj.to_str().unwrap());

    // bandwidth: 64 KiB messages, IB MTU 4096 over the 9000-byte veth
    let (so, co) = ok(
        &l,
        state,
        &["perf", "write", "bw", "--json", sjs],
        &[
            "perf", "write", "bw", "-m", "4096", "-n", "2000", "--json", cjs,
        ],
    );
    assert!(co.contains("BW peak[MB/sec]"), "{co}");
    assert!(
        so.contains("BW peak[MB/sec]"),
        "the server prints the report too: {so}"
    );
    let doc = read_json(&cj);
    assert_eq!(doc["role"], "client");
    assert_eq!(doc["settings"]["mtu"], 4096);
    let r = &doc["results"][0];
    assert_eq!(r["bytes"], 65536);
    assert_eq!(r["iterations"], 2000);
    assert!(r["bw_average"].as_f64().unwrap() > 0.0, "{r}");
    check_devices(&doc, "client");
    let client = &doc["devices"][0];
    let server = &doc["devices"][1];
    // every WRITE reached the server's responder: 16 packets of 4096 bytes each
    assert!(server["counters"]["rx_write_requests"].as_u64().unwrap() >= 2000);
    assert!(client["port_counters"]["tx_packets"].as_u64().unwrap() >= 2000 * 16);
    assert_eq!(client["qps"][0]["mtu"], 4096);
    let sdoc = read_json(&sj);
    assert_eq!(sdoc["role"], "server");
    assert_eq!(sdoc["results"], doc["results"]);
    check_devices(&sdoc, "server");

    // latency: 64-byte WRITE ping-pong
    let (_, co) = ok(
        &l,
        state,
        &["perf", "write", "lat"],
        &[
            "perf", "write", "lat", "-s", "64", "-n", "1000", "--json", cjs,
        ],
    );
    assert!(co.contains("t_typical[usec]"), "{co}");
    let doc = read_json(&cj);
    let r = &doc["results"][0];
    assert_eq!(
        (r["bytes"].as_u64(), r["iterations"].as_u64()),
        (Some(64), Some(1000))
    );
    let p50 = r["percentiles_usec"]["p50"].as_f64().unwrap();
    assert!(
        p50 > 0.0 && p50 <= r["percentiles_usec"]["p99"].as_f64().unwrap(),
        "{r}"
    );
    check_devices(&doc, "client");

    // rnic stats shows the last run's two devices
    let out = common::rnic(state)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 2);
}

#[test]
fn every_verb_and_mode_between_namespaces() {
    let test = "every_verb_and_mode_between_namespaces";
    if !can_run(test) {
        return;
    }
    let l = link("fv");
    let state = tempfile::tempdir().unwrap();
    for (verb, mode, extra) in [
        ("read", "bw", vec!["-s", "16384"]),
        ("read", "lat", vec![]),
        ("send", "bw", vec!["-s", "4096", "-t", "64"]),
        ("send", "lat", vec!["-s", "1000"]),
        ("atomic", "bw", vec![]),
        ("atomic", "lat", vec![]),
        ("write", "bw", vec!["-c", "UC", "-s", "8192"]),
        ("write", "bw", vec!["-q", "3", "-s", "4096", "-t", "16"]),
        ("write", "lat", vec!["-a", "-n", "20"]),
        ("write", "lat", vec!["--engine", "thread"]),
        ("read", "bw", vec!["--backend", "afpacket", "-m", "4096"]),
    ] {
        let mut server = vec!["perf", verb, mode];
        let mut client = server.clone();
        if extra.contains(&"-c") {
            server.extend(["-c", "UC"]);
        }
        if !extra.contains(&"-n") {
            client.extend(["-n", "200"]);
        }
        client.extend(extra.iter().copied());
        let (_, co) = ok(&l, state.path(), &server, &client);
        let heading = if mode == "bw" {
            "BW average"
        } else {
            "t_typical"
        };
        assert!(co.contains(heading), "{verb} {mode} {extra:?}:\n{co}");
    }
}

#[test]
fn a_server_refuses_a_client_asking_for_another_test() {
    let test = "a_server_refuses_a_client_asking_for_another_test";
    if !can_run(test) {
        return;
    }
    let l = link("fr");
    let state = tempfile::tempdir().unwrap();
    let (s, c) = pair(
        &l,
        state.path(),
        &["perf", "write", "bw"],
        &["perf", "read", "bw", "-n", "10"],
        STUCK,
    );
    assert!(
        !s.status.success() && !c.status.success(),
        "{}\n{}",
        text(&s),
        text(&c)
    );
    let cerr = String::from_utf8_lossy(&c.stderr);
    assert!(
        cerr.contains(
            "the peer refused: the server runs write bw RC, the client asked for read bw RC"
        ),
        "{cerr}"
    );
    assert_eq!(cerr.lines().count(), 1, "one line: {cerr}");

    // a client may not make the server allocate more than perftest's
    // largest size (8 MiB) unless the server was started with a larger -s
    let (s, c) = pair(
        &l,
        state.path(),
        &["perf", "write", "bw"],
        &["perf", "write", "bw", "-n", "10", "-s", "16777216"],
        STUCK,
    );
    assert!(
        !s.status.success() && !c.status.success(),
        "{}\n{}",
        text(&s),
        text(&c)
    );
    let cerr = String::from_utf8_lossy(&c.stderr);
    assert!(
        cerr.contains(
            "the client asks for 16777216-byte messages; this server takes at most 8388608"
        ),
        "{cerr}"
    );
}

#[test]
fn pcap_of_the_port_passes_rnic_pcap_check() {
    let test = "pcap_of_the_port_passes_rnic_pcap_check";
    if !can_run(test) {
        return;
    }
    let l = link("fp");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("port.pcap");
    let p = pcap.to_str().unwrap();
    ok(
        &l,
        dir.path(),
        &["perf", "send", "bw"],
        &[
            "perf",
            "send",
            "bw",
            "-s",
            "10000",
            "-n",
            "100",
            "-m",
            "2048",
            "--pcap",
            p,
            "--pcap-frames",
            "300",
        ],
    );
    let out = common::rnic(dir.path())
        .args(["pcap", "check", p])
        .output()
        .unwrap();
    let msg =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{msg}");
    // the capture holds both directions: SENDs out, ACKs in
    assert!(msg.contains("300 frames"), "{msg}");
}

/// Runs server and client with SOFTRNIC_PERFTEST_PLAIN=1: each side
/// behaves as the real perftest tool towards the other.
fn plain_pair(l: &Link, state: &Path, server: &[&str], client: &[&str]) -> (String, String) {
    let mut sa: Vec<&str> = server.to_vec();
    sa.extend(["--dev", &l.ifs[0]]);
    let mut sc = rnic_in(&l.ns[0], state, &sa);
    sc.env("SOFTRNIC_PERFTEST_PLAIN", "1");
    let srv = spawn(sc, "the rnic server");
    let mut ca: Vec<&str> = client.to_vec();
    ca.extend(["--dev", &l.ifs[1], l.ips[0]]);
    let mut cc = rnic_in(&l.ns[1], state, &ca);
    cc.env("SOFTRNIC_PERFTEST_PLAIN", "1");
    let c = spawn(cc, "the rnic client").finish(STUCK);
    let s = srv.finish(STUCK);
    let ctx = format!(
        "rnic {}\n-- server --\n{}\n-- client --\n{}",
        client.join(" "),
        text(&s),
        text(&c)
    );
    assert!(s.status.success() && c.status.success(), "{ctx}");
    (
        String::from_utf8_lossy(&s.stdout).into_owned(),
        String::from_utf8_lossy(&c.stdout).into_owned(),
    )
}

/// A result line of perftest's tables: size, iterations, figures.
fn result_line(out: &str) -> Option<&str> {
    out.lines().find(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() >= 5 && w[0].parse::<u64>().is_ok() && w[1].parse::<u64>().is_ok()
    })
}

#[test]
fn plain_perftest_exchange_every_verb_and_mode() {
    let test = "plain_perftest_exchange_every_verb_and_mode";
    if !can_run(test) {
        return;
    }
    let l = link("fq");
    let state = tempfile::tempdir().unwrap();
    for (verb, mode, flags) in [
        ("write", "bw", vec!["-s", "8192", "-n", "300"]),
        ("read", "bw", vec!["-s", "16384", "-n", "200"]),
        ("send", "bw", vec!["-s", "4096", "-n", "300", "-q", "2"]),
        ("atomic", "bw", vec!["-n", "300"]),
        ("write", "lat", vec!["-s", "64", "-n", "300"]),
        ("read", "lat", vec!["-n", "300"]),
        ("send", "lat", vec!["-s", "1000", "-n", "300", "-m", "1024"]),
        ("atomic", "lat", vec!["-n", "300"]),
        ("send", "bw", vec!["-a", "-n", "5"]),
    ] {
        let mut args = vec!["perf", verb, mode, "--no-progress"];
        args.extend(flags.iter().copied());
        let (so, co) = plain_pair(&l, state.path(), &args, &args);
        let what = format!("{verb} {mode} {flags:?}");
        assert!(
            co.contains("the peer is perftest 6.06") && so.contains("the peer is perftest 6.06"),
            "{what}: both sides see plain perftest:\n{co}\n{so}"
        );
        let cl = result_line(&co).unwrap_or_else(|| panic!("{what}: no result line:\n{co}"));
        // perftest's servers: the bw ones print the client's report, the
        // SEND bw server and the ping-pong servers their own, the READ and
        // atomic latency servers nothing
        let sl = result_line(&so);
        match (verb, mode) {
            ("read" | "atomic", "lat") => assert!(sl.is_none(), "{what}: {so}"),
            ("send", "bw") => {
                let sl = sl.unwrap_or_else(|| panic!("{what}: {so}"));
                let w: Vec<&str> = sl.split_whitespace().collect();
                assert!(
                    w[1].parse::<u64>().unwrap() > 0,
                    "{what}: receives counted: {sl}"
                );
            }
            (_, "bw") => assert_eq!(
                sl,
                Some(cl),
                "{what}: the server prints the client's report"
            ),
            _ => {
                let sl = sl.unwrap_or_else(|| panic!("{what}: {so}"));
                assert_eq!(
                    sl.split_whitespace().take(2).collect::<Vec<_>>(),
                    cl.split_whitespace().take(2).collect::<Vec<_>>(),
                    "{what}: both sides ping-pong the same count"
                );
            }
        }
        if flags.contains(&"-a") {
            let n = co.lines().filter(|l| result_line(l).is_some()).count();
            assert!(n >= 23, "{what}: every size from 2 to 2^23: {co}");
        }
    }
}

/// A fake client in the client namespace sends `bytes` (a printf(1)
/// format) to an rnic write bw server, which must refuse with `want` in
/// its one-line error. The client then ends its half of the stream, so the
/// server sees the bytes followed by the end, and reads what the server
/// says until the server closes its end.
fn refused(l: &Link, state: &Path, bytes: &str, want: &str) {
    let srv = spawn(
        rnic_in(
            &l.ns[0],
            state,
            &["perf", "write", "bw", "--dev", &l.ifs[0]],
        ),
        "the rnic server",
    );
    let printf = std::process::Command::new("printf")
        .arg(bytes)
        .output()
        .expect("printf");
    assert!(printf.status.success(), "printf {bytes:?}");
    let ip = l.ips[0];
    let heard = testkit::netns::run_in(&l.ns[1], move || {
        let mut s = wait_for(STUCK, "the rnic server listening", || {
            std::net::TcpStream::connect((ip, 18515)).map_err(|e| e.to_string())
        });
        s.write_all(&printf.stdout).expect("send the bytes");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        s.set_read_timeout(Some(STUCK)).unwrap();
        let mut heard = Vec::new();
        let r = s.read_to_end(&mut heard);
        format!("{} bytes from the server, then {r:?}", heard.len())
    })
    .unwrap();
    let s = srv.finish(STUCK);
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(
        !s.status.success() && err.contains(want),
        "{want:?}:\n{}\n-- fake client --\n{heard}",
        text(&s),
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_peer_messages_are_refused() {
    let test = "malformed_peer_messages_are_refused";
    if !can_run(test) {
        return;
    }
    let l = link("fm");
    let state = tempfile::tempdir().unwrap();
    // printf(1) escapes: \000 is a NUL (three digits, so that a digit after it stays a digit)
    let nul = |n: usize| r"\000".repeat(n);
    let version = format!("6.06{}", nul(12));
    let sys = format!(r"{}\020{}{}\100", nul(2), nul(1), nul(3)); // 4096 and 64, big-endian
    let good_hs = "0000:0001:000011:abcdef:00001234:0000000010010000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:02:00000000:";
    refused(
        &l,
        state.path(),
        "rnic-perf 1\nrole client\n",
        "not perftest",
    );
    refused(
        &l,
        state.path(),
        &format!("5.60{}", nul(12)),
        "older than 5.70",
    );
    refused(
        &l,
        state.path(),
        &format!("{version}{}", nul(8)),
        "cycle buffer size is 0",
    );
    refused(
        &l,
        state.path(),
        &format!("{version}{sys}9{}", nul(1)),
        "MTU field",
    );
    let bad_hs = good_hs.replacen("abcdef", "abcdeg", 1);
    refused(
        &l,
        state.path(),
        &format!("{version}{sys}3{}{bad_hs}{}", nul(1), nul(1)),
        "the peer's handshake",
    );
    let short_hs = &good_hs[..58];
    refused(
        &l,
        state.path(),
        &format!("{version}{sys}3{}{short_hs}{}", nul(1), nul(1)),
        "handshake",
    );
}
