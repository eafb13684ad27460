//! ECN and DCQCN seen through the tool: `rnic perf
//! write bw --dev` from A to B through a router namespace whose egress
//! towards B is shaped (tbf, 400 Mbit/s) and CE-marks RoCEv2 frames above
//! 30 MB/s with nftables (no RED here). B's notification point counts the
//! marks and sends CNPs, A's reaction point handles them and A's rate stays
//! under the shaper with no retransmission storm — and the `--json` files
//! of both sides carry those counters under their rdma-statistic names.
//! Needs root, tc and nft: a loud SKIPPED line without them, a failure
//! under CI.

mod common;

use common::netns::{can_run, rnic_in, spawn, text};
use common::STUCK;
use serde_json::Value;
use std::path::Path;
use testkit::netns::Routed;

fn have(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok()
}

/// The device this side ran: the one with our address in the JSON's
/// `devices` (both sides may be listed).
fn device<'a>(doc: &'a Value, ip: &str) -> &'a Value {
    doc["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["ip"] == ip)
        .unwrap_or_else(|| panic!("no device with ip {ip} in {doc}"))
}

fn counter(dev: &Value, name: &str) -> u64 {
    dev["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} missing from {dev}"))
}

fn sent_by(dev: &Value) -> u64 {
    counter(dev, "sent_pkts")
}

fn read_json(p: &Path) -> Value {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One run at a time: each side is a busy-polling process, and the
/// machine may have two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

type Setup = (
    Routed,
    tempfile::TempDir,
    std::sync::MutexGuard<'static, ()>,
);

fn setup(test: &str, tag: &str, mark_over: Option<&str>) -> Option<Setup> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !can_run(test) {
        return None;
    }
    for tool in ["tc", "nft"] {
        if !have(tool) {
            common::missing_tool(test, tool);
            return None;
        }
    }
    let net = Routed::create(tag).expect("A ── R ── B namespaces");
    net.ecn_bottleneck("400mbit", mark_over)
        .expect("shaper and CE marking on the router");
    Some((net, tempfile::tempdir().unwrap(), serial))
}

#[test]
fn perf_json_shows_cnps_through_an_ecn_marking_router() {
    let Some((net, dir, _serial)) = setup(
        "perf_json_shows_cnps_through_an_ecn_marking_router",
        "pe",
        // far below what even a sender slowed by a loaded machine sends
        // (a threshold near its rate marked nothing under load)
        Some("2 mbytes/second"),
    ) else {
        return;
    };
    let (sender, receiver, gbits) = run(&net, dir.path(), &[]);
    let (marked, cnps) = (
        counter(&receiver, "np_ecn_marked_roce_packets"),
        counter(&receiver, "np_cnp_sent"),
    );
    let (handled, sent, retx) = (
        counter(&sender, "rp_cnp_handled"),
        counter(&sender, "sent_pkts"),
        counter(&sender, "retransmitted_pkts"),
    );
    eprintln!(
        "{gbits:.3} Gbit/s; B: np_ecn_marked_roce_packets {marked} np_cnp_sent {cnps}; \
         A: rp_cnp_handled {handled} sent_pkts {sent} retransmitted_pkts {retx}"
    );
    assert!(marked > 0, "the router marked nothing");
    // IBTA RoCEv2 annex A17.9.3: at most one CNP per QP per
    // min_time_between_cnps, so never more CNPs than marked packets
    assert!(cnps > 0 && cnps <= marked, "{cnps} CNPs for {marked} marks");
    assert!(handled > 0, "A's reaction point saw no CNP");
    assert!(handled <= cnps, "{handled} handled of {cnps} sent");
    assert!(
        gbits < 0.4 * 1.05,
        "faster than the 400 Mbit/s shaper: {gbits}"
    );
    assert!(
        retx * 20 < sent,
        "a retransmission storm: {retx} of {sent} packets"
    );
}

/// `--cc off` (as Linux rxe): the router marks every RoCEv2 packet, yet the
/// receiver sends no CNP and the sender handles none.
#[test]
fn perf_with_cc_off_sends_and_handles_no_cnps() {
    let Some((net, dir, _serial)) = setup("perf_with_cc_off_sends_and_handles_no_cnps", "pf", None)
    else {
        return;
    };
    let (sender, receiver, gbits) = run(&net, dir.path(), &["--cc", "off"]);
    let cnps = counter(&receiver, "np_cnp_sent");
    let marked = counter(&receiver, "np_ecn_marked_roce_packets");
    let handled = counter(&sender, "rp_cnp_handled");
    eprintln!(
        "--cc off: {gbits:.3} Gbit/s; B: np_ecn_marked_roce_packets {marked} np_cnp_sent {cnps}; \
         A: rp_cnp_handled {handled}"
    );
    // nft's `ip ecn set ce` marks not-ECT packets too: they arrive marked
    assert!(
        marked * 2 > sent_by(&sender),
        "the router marked only {marked}"
    );
    assert_eq!(cnps, 0, "CNPs with the notification point off");
    assert_eq!(handled, 0, "CNPs handled with DCQCN off");
}

/// Runs `rnic perf write bw` A → B through the marking router with
/// `cc_args` on both sides; returns (the sender's device, the receiver's
/// device, Gbit/s) from their --json files.
fn run(net: &Routed, dir: &Path, cc_args: &[&str]) -> (Value, Value, f64) {
    let (sj, cj) = (dir.join("server.json"), dir.join("client.json"));
    let (ga, gb) = (net.ga.to_string(), net.gb.to_string());
    let mut sargs = vec![
        "perf",
        "write",
        "bw",
        "--no-progress",
        "--json",
        sj.to_str().unwrap(),
        "--dev",
        &net.vb,
    ];
    sargs.extend(cc_args);
    let server = spawn(rnic_in(&net.b, dir, &sargs), "the rnic server");
    let mut cargs = vec![
        "perf",
        "write",
        "bw",
        "--no-progress",
        "-m",
        "4096",
        "-D",
        "2",
        "--report_gbits",
        "--json",
        cj.to_str().unwrap(),
        "--dev",
        &net.va,
    ];
    cargs.extend(cc_args);
    cargs.push(&gb);
    // the client retries while the server is not listening yet
    let client = spawn(rnic_in(&net.a, dir, &cargs), "the rnic client").finish(STUCK);
    let server = server.finish(STUCK);
    let ctx = format!(
        "-- server --\n{}\n-- client --\n{}",
        text(&server),
        text(&client)
    );
    assert!(server.status.success() && client.status.success(), "{ctx}");
    let (c, s) = (read_json(&cj), read_json(&sj));
    let gbits = c["results"][0]["bytes_per_sec"]
        .as_f64()
        .expect("bytes_per_sec")
        * 8e-9;
    (device(&c, &ga).clone(), device(&s, &gb).clone(), gbits)
}
