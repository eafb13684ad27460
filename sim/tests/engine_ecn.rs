//! ECN and DCQCN on real ports: A ── R ── B where
//! R's egress towards B is shaped (tbf, 400 Mbit/s) and CE-marks RoCEv2
//! frames above 30 MB/s with nftables (`limit rate over … ip ecn set ce`;
//! the kernels here have no RED). B counts the CE-marked packets and sends
//! CNPs, A's reaction point handles them, and A's rate stays below the
//! shaped rate with no retransmission storm. (With a shaper queue smaller
//! than the requester's window — 2 ms here — go-back-N overflows it before
//! DCQCN has cut the rate, and retransmissions pile up; see the notes in
//! docs/congestion-control.md.)

mod enginecommon;

use enginecommon::{can_run, start_cc, Routed};
use nic::io::Backend;
use nic::transport::{CcConfig, Counters};
use nic::verbs::{SendOp, SendWr, Sgl, WcStatus};
use sim::PairConfig;
use std::time::{Duration, Instant};

const MSG: u32 = 65536;

/// Streams 64 KiB WRITEs A→B for `secs`, and on until B has counted a
/// CE-marked packet and A has handled a CNP (nftables' `limit` starts with
/// a second's worth of tokens, so on a busy machine whose stream is barely
/// over the marking rate the first mark can take several seconds); returns
/// (A's counters, B's counters, goodput in bit/s).
fn stream(net: &Routed, cc: CcConfig, secs: f64) -> (Counters, Counters, f64) {
    let (pa, mac_a) = net.open(0, Backend::Auto);
    let (pb, mac_b) = net.open(1, Backend::Auto);
    let cfg = PairConfig {
        mtu: 4096,
        timeout: 14,
        unlimited_retries: true,
        ..PairConfig::default()
    };
    let nodes = start_cc(vec![pa, pb], net.gids(), vec![mac_a, mac_b], cfg, cc);
    let (a, b) = (&nodes[0], &nodes[1]);
    let t0 = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = Vec::new();
    let mut reacted = false;
    let mut looked = Instant::now();
    // (a stream that draws no mark in a minute ends, and the test says so)
    let going = |reacted: bool| {
        let t = t0.elapsed().as_secs_f64();
        t < secs || (!reacted && t < 60.0)
    };
    while going(reacted) || done < posted {
        if looked.elapsed() > Duration::from_millis(100) {
            looked = Instant::now();
            let (ca, cb) = (a.dev.counters().unwrap(), b.dev.counters().unwrap());
            reacted = cb.np_ecn_marked_roce_packets > 0 && ca.rp_cnp_handled > 0;
        }
        while posted - done < 16 && going(reacted) {
            let wr = SendWr::new(
                posted,
                SendOp::Write {
                    remote_addr: b.base,
                    rkey: b.rkey,
                },
                Sgl::single(a.base, MSG, a.lkey),
            );
            a.dev.post_send(a.qpn, wr).unwrap();
            posted += 1;
        }
        wcs.clear();
        if a.cq.poll(64, &mut wcs) == 0 {
            // a poll loop, as `enginecommon::wait`: nothing completed yet,
            // let the engines run (the stream's length is wall time; what
            // is checked is counts)
            std::thread::yield_now();
        }
        for w in &wcs {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done += 1;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "stuck: {done} of {posted}"
        );
    }
    let rate = done as f64 * MSG as f64 * 8.0 / t0.elapsed().as_secs_f64();
    let (ca, cb) = (a.dev.counters().unwrap(), b.dev.counters().unwrap());
    for n in nodes {
        n.engine.stop();
    }
    (ca, cb, rate)
}

#[test]
fn ce_marks_on_a_shaped_router_drive_dcqcn_on_real_ports() {
    if !can_run(
        "ce_marks_on_a_shaped_router_drive_dcqcn_on_real_ports",
        &["nft", "tc"],
    ) {
        return;
    }
    let net = Routed::new("e0");
    net.ecn_bottleneck("400mbit", Some("30 mbytes/second"))
        .expect("shaper and marking");
    let (a, b, rate) = stream(&net, CcConfig::default(), 2.0);
    eprintln!(
        "DCQCN on: {:.0} Mbit/s; B: ecn_marked {} cnp_sent {}; A: cnp_handled {} sent {} retransmitted {} timeouts {}",
        rate / 1e6, b.np_ecn_marked_roce_packets, b.np_cnp_sent, a.rp_cnp_handled, a.sent_pkts, a.retransmitted_pkts, a.local_ack_timeout_err
    );
    assert!(
        b.np_ecn_marked_roce_packets > 0,
        "the router marked nothing"
    );
    assert!(b.np_cnp_sent > 0 && b.np_cnp_sent <= b.np_ecn_marked_roce_packets);
    assert!(a.rp_cnp_handled > 0, "A's reaction point saw no CNP");
    assert!(rate < 400e6 * 1.05, "faster than the shaper: {rate}");
    assert!(
        a.retransmitted_pkts * 20 < a.sent_pkts,
        "a retransmission storm: {} of {}",
        a.retransmitted_pkts,
        a.sent_pkts
    );
}
