//! `rnic perf write lat|bw --loopback`: perftest's columns and the HDR
//! percentiles are printed; --json parses and agrees with the table and
//! carries the devices' counters; --hgrm is HdrHistogram's format; --plot
//! is an SVG.

mod common;

use common::rnic;
use serde_json::Value;

/// The row of numbers under the heading line that starts with `first`
/// and contains `contains`.
fn row_under(text: &str, first: &str, contains: &str) -> Vec<f64> {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t.starts_with(first) && t.contains(contains) {
            let row = lines.next().expect("a row under the heading");
            return row
                .split_whitespace()
                .map(|x| x.parse().unwrap_or_else(|_| panic!("{x:?} in {row:?}")))
                .collect();
        }
    }
    panic!("no heading {first}…{contains} in:\n{text}");
}

fn close(printed: f64, json: &Value, decimals: i32, what: &str) {
    let j = json
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {json} is not a number"));
    // the table rounds to `decimals`, the JSON to one more
    let tol = 0.5 * 10f64.powi(-decimals) + 0.5 * 10f64.powi(-decimals - 1) + 1e-9;
    assert!(
        (printed - j).abs() <= tol,
        "{what}: printed {printed}, JSON {j}"
    );
}

fn check_counters(doc: &Value) {
    let devs = doc["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 2);
    for d in devs {
        common::assert_device_counters(d, &[]);
        let qps = d["qps"].as_array().expect("qps");
        assert!(!qps.is_empty());
        for q in qps {
            assert!(
                q["lqpn"].is_u64() && q["counters"]["sent_pkts"].is_u64(),
                "{q}"
            );
        }
        // a clean wire: nothing lost, nothing resent
        assert_eq!(d["counters"]["retransmitted_pkts"], 0);
        assert_eq!(d["counters"]["out_of_sequence"], 0);
        assert_eq!(d["port_counters"]["rx_dropped"], 0);
    }
    assert_eq!(
        devs[0]["port_counters"]["tx_packets"],
        devs[1]["port_counters"]["rx_packets"]
    );
    assert_eq!(
        devs[0]["counters"]["sent_pkts"],
        devs[1]["counters"]["rcvd_pkts"]
    );
}

/// The structure of HdrHistogram's `outputPercentileDistribution`.
fn check_hgrm(text: &str, count: u64) {
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("       Value     Percentile TotalCount 1/(1-Percentile)")
    );
    assert_eq!(lines.next(), Some(""));
    let mut rows = Vec::new();
    let mut footer = Vec::new();
    for l in lines {
        if l.starts_with('#') {
            footer.push(l);
        } else {
            assert!(footer.is_empty(), "a value line after the footer: {l}");
            rows.push(l);
        }
    }
    assert!(rows.len() > 10, "{text}");
    let mut prev = (0.0f64, 0.0f64, 0u64);
    for (i, r) in rows.iter().enumerate() {
        let last = i + 1 == rows.len();
        // %12.3f %2.12f %10d %14.2f (the last line has no fourth column)
        assert_eq!(&r[12..13], " ", "{r}");
        let cols: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(cols.len(), if last { 3 } else { 4 }, "{r}");
        let v: f64 = cols[0].parse().unwrap();
        assert_eq!(cols[0].split('.').nth(1).map(str::len), Some(3), "{r}");
        assert_eq!(cols[1].split('.').nth(1).map(str::len), Some(12), "{r}");
        let p: f64 = cols[1].parse().unwrap();
        let n: u64 = cols[2].parse().unwrap();
        assert!(
            v >= prev.0 && p >= prev.1 && n >= prev.2,
            "not monotonic at {r}"
        );
        if !last {
            let inv: f64 = cols[3].parse().unwrap();
            assert!((inv - 1.0 / (1.0 - p)).abs() <= 0.01 * inv.max(1.0), "{r}");
            assert_eq!(r.len(), 12 + 1 + 14 + 1 + 10 + 1 + 14, "{r:?}");
        } else {
            assert_eq!(p, 1.0, "{r}");
            assert_eq!(n, count, "{r}");
        }
        prev = (v, p, n);
    }
    assert_eq!(footer.len(), 3, "{footer:?}");
    assert!(
        footer[0].starts_with("#[Mean    = ") && footer[0].contains(", StdDeviation   = "),
        "{}",
        footer[0]
    );
    assert!(
        footer[1].starts_with("#[Max     = ")
            && footer[1].ends_with(&format!("Total count    = {count:>12}]")),
        "{}",
        footer[1]
    );
    assert!(
        footer[2].starts_with("#[Buckets = ")
            && footer[2].ends_with("SubBuckets     =         2048]"),
        "{}",
        footer[2]
    );
}

#[test]
fn write_lat_prints_perftest_columns_and_percentiles_and_json_agrees() {
    let state = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("lat.json");
    let hgrm = out_dir.path().join("lat.hgrm");
    let svg = out_dir.path().join("lat.svg");
    let out = rnic(state.path())
        .args(["perf", "write", "lat", "--loopback", "-n", "3000", "--json"])
        .arg(&json)
        .arg("--hgrm")
        .arg(&hgrm)
        .arg("--plot")
        .arg(&svg)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("RDMA_Write Latency Test"), "{text}");
    assert!(text.contains(
        "in-process loopback: both NICs in one thread; wall-clock time of the software path"
    ));
    assert!(text.contains("t = round trip / 2"), "{text}");
    assert!(text.contains(
        "#bytes    #iterations    t_min[usec]    t_max[usec]    t_typical[usec]    t_avg[usec]    t_stdev[usec]    99% percentile[usec]    99.9% percentile[usec]"
    ), "{text}");
    let lat = row_under(&text, "#bytes", "t_typical[usec]");
    assert_eq!(lat.len(), 9, "{lat:?}");
    assert_eq!(lat[0], 2.0);
    assert_eq!(lat[1], 3000.0);
    let (min, max, typ, avg, p99, p999) = (lat[2], lat[3], lat[4], lat[5], lat[7], lat[8]);
    assert!(
        min > 0.0 && min <= typ && typ <= p99 && p99 <= p999 && p999 <= max,
        "{lat:?}"
    );
    assert!(min <= avg && avg <= max, "{lat:?}");
    let hdr = row_under(&text, "#bytes", "p99.99[usec]");
    assert_eq!(hdr.len(), 7, "{hdr:?}");
    assert!(hdr[1..].windows(2).all(|w| w[0] <= w[1]), "{hdr:?}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["test"], "write");
    assert_eq!(doc["mode"], "lat");
    let r = &doc["results"][0];
    assert_eq!(r["bytes"], 2);
    assert_eq!(r["iterations"], 3000);
    for (i, k) in [
        (2, "t_min_usec"),
        (3, "t_max_usec"),
        (4, "t_typical_usec"),
        (5, "t_avg_usec"),
        (6, "t_stdev_usec"),
        (7, "p99_usec"),
        (8, "p99_9_usec"),
    ] {
        close(lat[i], &r[k], 2, k);
    }
    for (i, k) in [
        (1, "p50"),
        (2, "p90"),
        (3, "p99"),
        (4, "p99.9"),
        (5, "p99.99"),
        (6, "max"),
    ] {
        close(hdr[i], &r["percentiles_usec"][k], 3, k);
    }
    assert_eq!(r["percentiles_usec"]["count"], 3000);
    check_counters(&doc);

    check_hgrm(&std::fs::read_to_string(&hgrm).unwrap(), 3000);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")
            && svg.trim_end().ends_with("</svg>")
    );
    assert!(svg.contains("<polyline") && svg.contains("2 bytes"));
}

#[test]
fn write_bw_prints_perftest_columns_and_percentiles_and_json_agrees() {
    let state = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("bw.json");
    let hgrm = out_dir.path().join("bw.hgrm");
    let out = rnic(state.path())
        .args([
            "perf",
            "write",
            "bw",
            "--loopback",
            "-n",
            "2000",
            "-q",
            "2",
            "-t",
            "64",
            "--json",
        ])
        .arg(&json)
        .arg("--hgrm")
        .arg(&hgrm)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("RDMA_Write BW Test"), "{text}");
    assert!(
        text.contains(
            "#bytes    #iterations    BW peak[MB/sec]    BW average[MB/sec]    MsgRate[Mpps]"
        ),
        "{text}"
    );
    let bw = row_under(&text, "#bytes", "BW peak[MB/sec]");
    assert_eq!(bw.len(), 5, "{bw:?}");
    assert_eq!(bw[0], 65536.0);
    assert_eq!(bw[1], 2000.0);
    assert!(bw[2] >= bw[3] && bw[3] > 0.0 && bw[4] > 0.0, "{bw:?}");
    // MB/s = 2^20 bytes/s: the average and the message rate agree
    assert!(
        (bw[3] * 1_048_576.0 / 65536.0 / 1e6 - bw[4]).abs() < 0.0001 + bw[4] * 0.001,
        "{bw:?}"
    );
    let hdr = row_under(&text, "#bytes", "p99.99[usec]");
    assert_eq!(hdr.len(), 7, "{hdr:?}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["mode"], "bw");
    assert_eq!(doc["settings"]["qps"], 2);
    assert_eq!(doc["settings"]["tx_depth"], 64);
    let r = &doc["results"][0];
    assert_eq!(r["iterations"], 2000);
    assert_eq!(r["bw_unit"], "MB/sec");
    close(bw[2], &r["bw_peak"], 2, "bw_peak");
    close(bw[3], &r["bw_average"], 2, "bw_average");
    close(bw[4], &r["msg_rate_mpps"], 6, "msg_rate_mpps");
    for (i, k) in [
        (1, "p50"),
        (2, "p90"),
        (3, "p99"),
        (4, "p99.9"),
        (5, "p99.99"),
        (6, "max"),
    ] {
        close(hdr[i], &r["percentiles_usec"][k], 3, k);
    }
    check_counters(&doc);
    // two QPs of this run on each device
    assert_eq!(doc["devices"][0]["qps"].as_array().unwrap().len(), 2);
    check_hgrm(&std::fs::read_to_string(&hgrm).unwrap(), 2000);
}

#[test]
fn every_operation_runs_in_both_modes() {
    let state = tempfile::tempdir().unwrap();
    for verb in ["write", "read", "send", "atomic"] {
        for (mode, heading) in [("lat", "t_typical[usec]"), ("bw", "BW average[MB/sec]")] {
            let out = rnic(state.path())
                .args(["perf", verb, mode, "--loopback", "-n", "200"])
                .assert()
                .success();
            let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
            let row = row_under(&text, "#bytes", heading);
            assert_eq!(row[1], 200.0, "{verb} {mode}: {text}");
            row_under(&text, "#bytes", "p99.99[usec]");
        }
    }
}

#[test]
fn report_gbits_all_sizes_duration_and_uc() {
    let state = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    // -a: every size 2 .. 2^23, one hgrm per size
    let out = rnic(state.path())
        .args([
            "perf",
            "read",
            "bw",
            "--loopback",
            "-a",
            "-n",
            "8",
            "-t",
            "4",
            "--report_gbits",
            "--hgrm",
        ])
        .arg(out_dir.path().join("r.hgrm"))
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("BW peak[Gb/sec]    BW average[Gb/sec]"),
        "{text}"
    );
    for k in 1..=23 {
        let size = 1u64 << k;
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{size} "))),
            "{size} missing:\n{text}"
        );
        assert!(out_dir.path().join(format!("r-{size}B.hgrm")).is_file());
    }
    // -D: time instead of iterations
    let out = rnic(state.path())
        .args(["perf", "send", "lat", "--loopback", "-D", "1"])
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let row = row_under(&text, "#bytes", "t_typical[usec]");
    assert!(row[1] > 100.0, "{row:?}");
    // UC WRITE and SEND
    for verb in ["write", "send"] {
        rnic(state.path())
            .args([
                "perf",
                verb,
                "bw",
                "--loopback",
                "-c",
                "UC",
                "-n",
                "300",
                "-s",
                "4096",
            ])
            .assert()
            .success()
            .stdout(predicates::str::contains("Connection type : UC"));
    }
}

#[test]
fn perf_pcap_is_checked_clean() {
    let state = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let pcap = out_dir.path().join("perf.pcap");
    rnic(state.path())
        .args([
            "perf",
            "read",
            "bw",
            "--loopback",
            "-n",
            "500",
            "-s",
            "10000",
            "-m",
            "4096",
            "-q",
            "3",
            "--pcap",
        ])
        .arg(&pcap)
        .assert()
        .success();
    rnic(state.path())
        .args(["pcap", "check"])
        .arg(&pcap)
        .assert()
        .success()
        .stdout(predicates::str::contains("in 3 QP streams"));
}
