//! Congestion control inside the transport, on the simulator's virtual
//! clock: CE marks become CNPs (notification point), CNPs cut the sender's
//! rate (reaction point) and its packets are paced; a PFC frame silences
//! the paused priority for exactly its pause time, and one with pause time
//! 0 lets it send again at once.

use nic::io::impair::Impairments;
use nic::verbs::{SendOp, SendWr, Sgl, WcStatus};
use sim::{LinkConfig, Pair, PairConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wire::{EthernetAddress, MacControlRepr, Opcode, RoceRepr};

/// Side a's QPN, lkey and buffer; side b's buffer and rkey.
fn keys(p: &Pair) -> (u32, u32, u64, u64, u32) {
    let (a, b) = (&p.sides[0], &p.sides[1]);
    (a.qpn, a.lkey, a.base, b.base, b.rkey)
}

/// Posts a 64 KiB WRITE a→b, work request `id`.
fn post_write(p: &mut Pair, id: u64) {
    let (qa, la, ba, bb, rb) = keys(p);
    let wr = SendWr::new(
        id,
        SendOp::Write {
            remote_addr: bb,
            rkey: rb,
        },
        Sgl::single(ba, 65536, la),
    );
    p.sim.nodes[0].post_send(qa, wr).unwrap();
}

/// Posts `n` 64 KiB WRITEs a→b and runs to completion; returns (virtual
/// time taken, frames a sent, CNPs b sent).
fn run(ce_mark: f64, n: u64) -> (Duration, Pair, usize) {
    let link = LinkConfig {
        bandwidth_bps: 25_000_000_000,
        impair: Impairments {
            ce_mark,
            ..Default::default()
        },
        ..LinkConfig::default()
    };
    let mut p = Pair::new(PairConfig {
        mtu: 4096,
        link,
        ..PairConfig::default()
    });
    let cnps = Arc::new(Mutex::new(0usize));
    let c = cnps.clone();
    p.sim.tap = Some(Box::new(move |_, dir, f| {
        if dir == 1 && RoceRepr::parse(f).is_ok_and(|r| r.bth.opcode == Opcode::CNP) {
            *c.lock().unwrap() += 1;
        }
    }));
    for i in 0..n {
        post_write(&mut p, i);
    }
    let mut done = Vec::new();
    let start = p.sim.now;
    assert!(p.sim.run_until(Duration::from_secs(10), |s| {
        let _ = s.nodes[0].poll_cq(0, 1000, &mut done);
        done.len() as u64 == n
    }));
    assert!(done.iter().all(|w| w.status == WcStatus::Success));
    let t = p.sim.now - start;
    let cnps = *cnps.lock().unwrap();
    (t, p, cnps)
}

#[test]
fn ce_marks_make_cnps_which_slow_the_sender_down() {
    let (clean, p0, cnps0) = run(0.0, 200);
    assert_eq!(cnps0, 0);
    assert_eq!(p0.sim.nodes[0].counters().rp_cnp_handled, 0);
    let (marked, p, cnps) = run(0.05, 200);
    let (a, b) = (p.sim.nodes[0].counters(), p.sim.nodes[1].counters());
    eprintln!(
        "clean {clean:?}, marked {marked:?}; b: ecn_marked {} cnp_sent {}; a: cnp_handled {}; CNPs on the wire {cnps}",
        b.np_ecn_marked_roce_packets, b.np_cnp_sent, a.rp_cnp_handled
    );
    assert!(b.np_ecn_marked_roce_packets > 0);
    assert!(b.np_cnp_sent > 0 && b.np_cnp_sent <= b.np_ecn_marked_roce_packets);
    assert_eq!(
        b.np_cnp_sent as usize, cnps,
        "every CNP counted went on the wire"
    );
    assert_eq!(
        a.rp_cnp_handled, b.np_cnp_sent,
        "every CNP reached the reaction point"
    );
    assert!(
        marked > clean + clean / 10,
        "DCQCN must slow the marked flow down: {marked:?} vs {clean:?}"
    );
}

/// A pair on a 100 Gb/s link, and the times of the frames a sends.
fn tapped_pair() -> (Pair, Arc<Mutex<Vec<nic::time::Instant>>>) {
    let link = LinkConfig {
        latency: Duration::from_micros(1),
        bandwidth_bps: 100_000_000_000,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(PairConfig {
        mtu: 4096,
        link,
        ..PairConfig::default()
    });
    let sent = Arc::new(Mutex::new(Vec::new()));
    let s2 = sent.clone();
    p.sim.tap = Some(Box::new(move |t, dir, _| {
        if dir == 0 {
            s2.lock().unwrap().push(t);
        }
    }));
    (p, sent)
}

/// A PFC frame of pause time `quanta` for priority 3 (data is DSCP 26 →
/// priority 3), toward a; at `p.sim.now` plus the link's latency.
fn inject_pfc(p: &mut Pair, quanta: u16) -> nic::time::Instant {
    let mut f = [0u8; 64];
    let mut q = [0u16; 8];
    q[3] = quanta;
    let n = MacControlRepr::pfc(EthernetAddress([2, 0, 0, 0, 0, 9]), 1 << 3, q)
        .emit(&mut f)
        .unwrap();
    p.sim.inject(1, &f[..n]);
    let arrival = p.sim.now + Duration::from_micros(1);
    p.sim.now = arrival;
    p.sim.step();
    arrival
}

/// Runs until a's first WRITE completes; the time a's first frame left.
fn first_sent(p: &mut Pair, sent: &Mutex<Vec<nic::time::Instant>>) -> nic::time::Instant {
    let mut done = Vec::new();
    assert!(p.sim.run_until(Duration::from_millis(10), |s| {
        let _ = s.nodes[0].poll_cq(0, 10, &mut done);
        !done.is_empty()
    }));
    sent.lock().unwrap()[0]
}

#[test]
fn a_pfc_frame_pauses_the_data_priority_for_exactly_its_time() {
    let (mut p, sent) = tapped_pair();
    // 0xFFFF quanta: 335.54 us at 100 Gb/s
    let arrival = inject_pfc(&mut p, 0xFFFF);
    post_write(&mut p, 1);
    let first = first_sent(&mut p, &sent);
    assert_eq!(
        first - arrival,
        Duration::from_nanos(335_540),
        "paused for exactly 0xFFFF quanta at 100 Gb/s"
    );
    let c = p.sim.nodes[0].pfc_counters(p.sim.now);
    assert_eq!(c.rx_pause[3], 1);
    assert_eq!(c.rx_pause.iter().sum::<u64>(), 1);
}

#[test]
fn a_resume_frame_lets_the_paused_priority_send_at_once() {
    let (mut p, sent) = tapped_pair();
    // paused for 0xFFFF quanta, a WRITE posted, and 50 us later a PFC
    // frame with pause time 0 for priority 3
    inject_pfc(&mut p, 0xFFFF);
    post_write(&mut p, 1);
    p.sim.step();
    p.sim.now = p.sim.now + Duration::from_micros(50);
    p.sim.step();
    assert!(sent.lock().unwrap().is_empty(), "sent while paused");
    let resumed = inject_pfc(&mut p, 0);
    let first = first_sent(&mut p, &sent);
    assert!(
        first - resumed < Duration::from_micros(10),
        "the WRITE left {:?} after the resume, not at once",
        first - resumed
    );
    let c = p.sim.nodes[0].pfc_counters(p.sim.now);
    assert_eq!(c.rx_pause[3], 2);
}

/// One 8 MiB READ a←b over 25 Gb/s with IB MTU 4096. With `marked`,
/// every READ response b sends is CE-marked on the way, so a's
/// notification point sends CNPs and b's reaction point limits the QP:
/// its first CNP sets the rate to 1 Gb/s, which then stays (no increase
/// timer, no byte counter, at most one cut per second). Returns the
/// virtual time the READ took, the times and lengths of b's READ response
/// frames, and b's CNPs handled.
fn read_8mib(marked: bool) -> (Duration, Vec<(nic::time::Instant, usize)>, u64) {
    let mut cc = nic::transport::CcConfig::default();
    cc.dcqcn = Some(nic::cc::DcqcnParams {
        rate_to_set_on_first_cnp_kbps: 1_000_000,
        rpg_time_reset: Duration::ZERO,
        rpg_byte_reset: 0,
        rate_reduce_monitor_period: Duration::from_secs(1),
        ..nic::cc::DcqcnParams::nvidia()
    });
    let len = 8u32 << 20;
    let mut p = Pair::new(PairConfig {
        mtu: 4096,
        mem_len: len as usize,
        link: LinkConfig {
            bandwidth_bps: 25_000_000_000,
            ..LinkConfig::default()
        },
        cc,
        ..PairConfig::default()
    });
    if marked {
        p.sim.link_config_mut(1).impair.ce_mark = 1.0;
    }
    let frames = Arc::new(Mutex::new(Vec::new()));
    let f = frames.clone();
    p.sim.tap = Some(Box::new(move |now, dir, frame| {
        let read = RoceRepr::parse(frame).is_ok_and(|r| {
            matches!(
                r.bth.opcode,
                Opcode::RC_RDMA_READ_RESPONSE_FIRST
                    | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                    | Opcode::RC_RDMA_READ_RESPONSE_LAST
                    | Opcode::RC_RDMA_READ_RESPONSE_ONLY
            )
        });
        if dir == 1 && read {
            f.lock().unwrap().push((now, frame.len()));
        }
    }));
    let (qa, la, ba, bb, rb) = keys(&p);
    let wr = SendWr::new(
        1,
        SendOp::Read {
            remote_addr: bb,
            rkey: rb,
        },
        Sgl::single(ba, len, la),
    );
    p.sim.nodes[0].post_send(qa, wr).unwrap();
    let mut done = Vec::new();
    let start = p.sim.now;
    assert!(p.sim.run_until(Duration::from_secs(10), |s| {
        let _ = s.nodes[0].poll_cq(0, 10, &mut done);
        !done.is_empty()
    }));
    assert_eq!(done[0].status, WcStatus::Success, "{:?}", done[0]);
    let t = p.sim.now - start;
    let cnps = p.sim.nodes[1].counters().rp_cnp_handled;
    let frames = frames.lock().unwrap().clone();
    (t, frames, cnps)
}

#[test]
fn read_responses_leave_at_line_rate_and_at_a_limited_qps_rate_not_in_a_burst() {
    let wire_ns = |len: usize, gbps: u64| (len as u64 + 24) * 8 / gbps;
    let gap = |a: nic::time::Instant, b: nic::time::Instant| (b - a).as_nanos() as u64;
    // gaps shorter than 99 % of a frame's wire time at `gbps`
    let close = |frames: &[(nic::time::Instant, usize)], gbps: u64| {
        frames
            .windows(2)
            .filter(|w| gap(w[0].0, w[1].0) < wire_ns(w[0].1, gbps) * 99 / 100)
            .count()
    };
    let burst = (nic::transport::READ_BURST_BYTES / 4096) as usize;
    let (clean, frames0, cnps0) = read_8mib(false);
    assert_eq!(cnps0, 0);
    assert_eq!(frames0.len(), 2048, "8 MiB in 4 KiB responses");
    // unlimited: one burst of credit, then the line rate (25 Gb/s), so
    // the link's queue never holds more than the burst
    let c0 = close(&frames0, 25);
    assert!(
        c0 <= burst,
        "{c0} gaps shorter than the wire time at 25 Gb/s"
    );
    let (limited, frames, cnps) = read_8mib(true);
    assert!(cnps >= 1, "the marks reached b's reaction point");
    assert_eq!(frames.len(), 2048, "paced, not dropped or repeated");
    // from the first CNP on, one wire time at 1 Gb/s between responses;
    // only the burst and what left before that CNP came back are closer
    let c = close(&frames, 1);
    assert!(c <= 2 * burst, "{c} of 2047 gaps shorter than at 1 Gb/s");
    let floor = Duration::from_nanos((2048 - 2 * burst as u64) * wire_ns(4096 + 60, 1));
    assert!(
        limited >= floor && limited < floor * 2,
        "8 MiB at 1 Gb/s: {limited:?} (floor {floor:?})"
    );
    assert!(
        clean * 10 < limited,
        "clean {clean:?} vs limited {limited:?}"
    );
}

/// `Rnic::cc_states`: every QP's reaction point as tools read it. The
/// sender's QP runs at the line rate until the first CNP, shows the first
/// cut (NVIDIA's α₀ = 1023/1024: RC = 25·(1 − 1023/2048) Gb/s, RT the line
/// rate) once one arrived, and is back at the line rate, unlimited, once
/// the marks stop and its rate-increase timer has run; the receiver's QP
/// is never cut.
#[test]
fn cc_states_show_the_senders_cut_and_its_recovery() {
    const G25: u64 = 25_000_000_000;
    let link = LinkConfig {
        bandwidth_bps: G25,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(PairConfig {
        mtu: 4096,
        link,
        ..PairConfig::default()
    });
    let (qa, qb) = (p.sides[0].qpn, p.sides[1].qpn);
    let now = p.sim.now;
    let idle: Vec<_> = p.sim.nodes[0].cc_states(now).collect();
    assert_eq!(idle.len(), 1, "{idle:?}");
    assert_eq!(idle[0].0, qa);
    assert!(!idle[0].1.limited && idle[0].1.rc_bps == G25 && idle[0].1.rt_bps == G25);

    p.sim.link_config_mut(0).impair.ce_mark = 1.0;
    post_write(&mut p, 1);
    assert!(p.sim.run_until(Duration::from_secs(1), |s| {
        s.nodes[0].counters().rp_cnp_handled > 0
    }));
    let now = p.sim.now;
    let (q, cut) = p.sim.nodes[0].cc_states(now).next().unwrap();
    assert_eq!(q, qa);
    assert!(cut.enabled && cut.limited, "{cut:?}");
    assert_eq!((cut.cuts, cut.cnps_handled), (1, 1));
    assert_eq!((cut.rc_bps, cut.rt_bps), (12_512_207_031, G25));
    let alpha1 = 1_047_557.0 / 1_048_576.0; // (1 − g)·α₀ + g, g = 5/1024
    assert!(cut.alpha <= alpha1 && cut.alpha > 0.9, "{cut:?}");
    let (q, b) = p.sim.nodes[1].cc_states(now).next().unwrap();
    assert_eq!(q, qb);
    assert!(
        !b.limited && b.rc_bps == G25 && b.cnps_handled == 0,
        "{b:?}"
    );

    p.sim.link_config_mut(0).impair.ce_mark = 0.0;
    let mut done = Vec::new();
    assert!(p.sim.run_until(Duration::from_secs(1), |s| {
        let _ = s.nodes[0].poll_cq(0, 10, &mut done);
        !done.is_empty()
    }));
    assert_eq!(done[0].status, WcStatus::Success);
    // 16 timer events of 300 µs bring RC within 1 Mb/s of RT (see
    // nic/tests/cc_dcqcn.rs); 10 ms leaves room for more cuts in flight
    p.sim.run_until(Duration::from_millis(10), |_| false);
    let now = p.sim.now;
    let (_, back) = p.sim.nodes[0].cc_states(now).next().unwrap();
    assert!(!back.limited, "{back:?}");
    assert_eq!((back.rc_bps, back.rt_bps), (G25, G25));
    assert!(back.cnps_handled >= 1);
}
