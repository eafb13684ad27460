//! Congestion control inside the transport, on the simulator's virtual
//! clock: CE marks become CNPs (notification point), CNPs cut the sender's
//! rate (reaction point) and its packets are paced; a PFC frame silences
//! the paused priority for exactly its pause time.

use nic::io::impair::Impairments;
use nic::verbs::{SendOp, SendWr, Sgl, WcStatus};
use sim::{LinkConfig, Pair, PairConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wire::{EthernetAddress, MacControlRepr, Opcode, RoceRepr};

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
    let (qa, la, ba, bb, rb) = (
        p.sides[0].qpn,
        p.sides[0].lkey,
        p.sides[0].base,
        p.sides[1].base,
        p.sides[1].rkey,
    );
    for i in 0..n {
        let wr = SendWr::new(
            i,
            SendOp::Write {
                remote_addr: bb,
                rkey: rb,
            },
            Sgl::single(ba, 65536, la),
        );
        p.sim.nodes[0].post_send(qa, wr).unwrap();
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

#[test]
fn a_pfc_frame_pauses_the_data_priority_for_exactly_its_time() {
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
    // data is DSCP 26 → priority 3; pause it for 0xFFFF quanta (335.54 us at 100 Gb/s)
    let mut pfc = [0u8; 64];
    let mut quanta = [0u16; 8];
    quanta[3] = 0xFFFF;
    let n = MacControlRepr::pfc(EthernetAddress([2, 0, 0, 0, 0, 9]), 1 << 3, quanta)
        .emit(&mut pfc)
        .unwrap();
    p.sim.inject(1, &pfc[..n]);
    let arrival = p.sim.now + Duration::from_micros(1);
    p.sim.now = arrival;
    p.sim.step();
    let (qa, la, ba, bb, rb) = (
        p.sides[0].qpn,
        p.sides[0].lkey,
        p.sides[0].base,
        p.sides[1].base,
        p.sides[1].rkey,
    );
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: bb,
                    rkey: rb,
                },
                Sgl::single(ba, 4096, la),
            ),
        )
        .unwrap();
    let mut done = Vec::new();
    assert!(p.sim.run_until(Duration::from_millis(10), |s| {
        let _ = s.nodes[0].poll_cq(0, 10, &mut done);
        !done.is_empty()
    }));
    let first = sent.lock().unwrap()[0];
    assert_eq!(
        first - arrival,
        Duration::from_nanos(335_540),
        "paused for exactly 0xFFFF quanta at 100 Gb/s"
    );
    let c = p.sim.nodes[0].pfc_counters(p.sim.now);
    assert_eq!(c.rx_pause[3], 1);
    assert_eq!(c.rx_pause.iter().sum::<u64>(), 1);
}
