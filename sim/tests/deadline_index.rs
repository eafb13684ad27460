//! The deadline index behind `Rnic::poll_timeout` against a scan of every
//! QP's deadline. A seeded random workload on several RC QP pairs — SENDs
//! with and without receives posted (RNR NAKs and the RNR timer, IBA
//! 9.7.5.2.8), WRITEs over a lossy, reordering, CE-marking link (local ACK
//! timeouts, IBA 9.7.6.1.3 / C9-140, and DCQCN timers), QPs moved to ERR or
//! RESET and reconnected, QPs destroyed and their slots reused — and after
//! every step the index must equal the scan.
//!
//! Replay one seed with `SOFTRNIC_DEADLINE_SEED=<seed> cargo test --release
//! -p sim --test deadline_index -- --nocapture`.

use nic::device::Rnic;
use nic::io::impair::Impairments;
use nic::transport::QpInit;
use nic::verbs::{AhAttr, QpAttr, QpState, QpType, RecvWr, SendOp, SendWr, Sgl};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{connect, Endpoint, LinkConfig, PairConfig, Sim};
use std::time::Duration;

const QPS: usize = 6;
const STEPS: usize = 6_000;

fn cfg(rng: &mut SmallRng) -> PairConfig {
    PairConfig {
        // 4.096 us * 2^4 = 65.5 us ACK timeout: many of them
        timeout: rng.gen_range(3..=6),
        retry_cnt: rng.gen_range(2..=7),
        rnr_retry: rng.gen_range(1..=6),
        min_rnr_timer: rng.gen_range(1..=4),
        max_wr: 64,
        ..PairConfig::default()
    }
}

fn new_qp(r: &mut Rnic, e: &Endpoint) -> u32 {
    r.create_qp(QpInit {
        qp_type: QpType::Rc,
        pd: e.pd,
        send_cq: e.cq,
        recv_cq: e.cq,
        srq: None,
        max_send_wr: 64,
        max_recv_wr: 64,
        sq_sig_all: false,
    })
    .expect("create qp")
}

/// Asserts that both nodes' index equals the scan of their QPs.
fn check(sim: &Sim, seed: u64, step: usize, what: &str) {
    for (i, n) in sim.nodes.iter().enumerate() {
        assert_eq!(
            n.poll_timeout(),
            n.poll_timeout_scan(),
            "seed {seed}, step {step} ({what}): node {i}'s poll_timeout differs from the scan"
        );
        assert!(
            n.deadline_index_is_exact(),
            "seed {seed}, step {step} ({what}): node {i}'s deadline index is not exact"
        );
    }
}

/// Totals of the counters this test needs to have exercised.
#[derive(Default, Debug)]
struct Seen {
    ack_timeouts: u64,
    rnr_naks: u64,
    retransmitted: u64,
    cnps: u64,
}

fn run(seed: u64) -> Seen {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut a, ea) = Endpoint::create(0, false, 1 << 16, 1 << 16, |_| {});
    let (mut b, eb) = Endpoint::create(1, false, 1 << 16, 1 << 16, |_| {});
    let mut qpns = [[0u32; QPS]; 2];
    let [qa, qb] = &mut qpns;
    for (qa, qb) in qa.iter_mut().zip(qb.iter_mut()) {
        *qa = new_qp(&mut a, &ea);
        *qb = new_qp(&mut b, &eb);
    }
    let eps = [ea, eb];
    let mut nodes = [a, b];
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.08,
            duplicate: 0.02,
            reorder: 0.05,
            ce_mark: 0.05,
            ..Default::default()
        },
        ..LinkConfig::default()
    };
    // connects pair `k` on both nodes afresh (sq_psn = rq_psn = 0)
    let reconnect = |nodes: &mut [Rnic; 2], qpns: &[[u32; QPS]; 2], k: usize, c: PairConfig| {
        for i in 0..2 {
            let peer = &eps[1 - i];
            let ah = AhAttr::new(peer.gid, peer.mac);
            let reset = QpAttr {
                state: Some(QpState::Reset),
                ..Default::default()
            };
            nodes[i].modify_qp(qpns[i][k], &reset).expect("reset");
            connect(&mut nodes[i], qpns[i][k], c, ah, qpns[1 - i][k], 0, 0);
        }
    };
    for k in 0..QPS {
        let c = cfg(&mut rng);
        reconnect(&mut nodes, &qpns, k, c);
    }
    let [a, b] = nodes;
    let mut sim = Sim::new(a, b, link, seed ^ 0x5EED);
    check(&sim, seed, 0, "set-up");
    let mut wcs = Vec::new();
    let mut wr_id = 0u64;
    for step in 1..=STEPS {
        let i = rng.gen_range(0..2usize);
        let k = rng.gen_range(0..QPS);
        let qpn = qpns[i][k];
        let e = &eps[i];
        let peer = &eps[1 - i];
        let what = match rng.gen_range(0..100) {
            0..=29 => {
                wr_id += 1;
                let len = rng.gen_range(0..3000u32);
                let op = if rng.gen_bool(0.5) {
                    SendOp::Send
                } else {
                    SendOp::Write {
                        remote_addr: peer.base,
                        rkey: peer.rkey,
                    }
                };
                let wr = SendWr::new(wr_id, op, Sgl::single(e.base, len, e.lkey));
                // refused when the QP is not in RTS or its queue is full;
                // a pair whose retries ran out is connected again
                if sim.nodes[i].post_send(qpn, wr).is_err()
                    && sim.nodes[i].query_qp(qpn).expect("live").state == QpState::Err
                {
                    let c = cfg(&mut rng);
                    reconnect(&mut sim.nodes, &qpns, k, c);
                    "post_send refused, reconnect"
                } else {
                    "post_send"
                }
            }
            30..=39 => {
                wr_id += 1;
                let wr = RecvWr {
                    wr_id,
                    sgl: Sgl::single(e.base + 4096, 4096, e.lkey),
                };
                let _ = sim.nodes[i].post_recv(qpn, wr);
                "post_recv"
            }
            40 => {
                let err = QpAttr {
                    state: Some(QpState::Err),
                    ..Default::default()
                };
                let _ = sim.nodes[i].modify_qp(qpn, &err);
                "modify to ERR"
            }
            41 => {
                let c = cfg(&mut rng);
                reconnect(&mut sim.nodes, &qpns, k, c);
                "reset and reconnect"
            }
            42 => {
                // destroy both ends and create them again: the slots are
                // reused, and must not fire the old QPs' timers
                for (n, q) in sim.nodes.iter_mut().zip(&qpns) {
                    n.destroy_qp(q[k]).expect("destroy");
                }
                check(&sim, seed, step, "destroyed");
                for j in 0..2 {
                    qpns[j][k] = new_qp(&mut sim.nodes[j], &eps[j]);
                }
                let c = cfg(&mut rng);
                reconnect(&mut sim.nodes, &qpns, k, c);
                "destroy and recreate"
            }
            43..=74 => {
                sim.step();
                "step"
            }
            _ => {
                // let time pass: to the next event, or further (frames
                // in flight arrive late; timers fall due)
                let t = match sim.next_event() {
                    Some(t) if rng.gen_bool(0.5) => t,
                    _ => sim.now + Duration::from_micros(rng.gen_range(1..40)),
                };
                sim.now = sim.now.max(t);
                sim.step();
                "advance"
            }
        };
        check(&sim, seed, step, what);
        for (n, e) in sim.nodes.iter_mut().zip(&eps) {
            wcs.clear();
            let _ = n.poll_cq(e.cq, usize::MAX, &mut wcs);
            while n.poll_async_event().is_some() {}
        }
    }
    println!("seed {seed}: virtual time {:?}", sim.now);
    let mut seen = Seen::default();
    for n in &sim.nodes {
        let c = n.counters();
        seen.ack_timeouts += c.local_ack_timeout_err;
        seen.rnr_naks += c.rnr_nak_retry_err;
        seen.retransmitted += c.retransmitted_pkts;
        seen.cnps += c.rp_cnp_handled;
    }
    seen
}

#[test]
fn poll_timeout_matches_a_scan_of_every_qp() {
    let seeds: Vec<u64> = match std::env::var("SOFTRNIC_DEADLINE_SEED") {
        Ok(s) => vec![s.parse().expect("SOFTRNIC_DEADLINE_SEED is a number")],
        Err(_) => (1..=4).collect(),
    };
    let mut total = Seen::default();
    for seed in seeds {
        let s = run(seed);
        println!("seed {seed}: {s:?}");
        total.ack_timeouts += s.ack_timeouts;
        total.rnr_naks += s.rnr_naks;
        total.retransmitted += s.retransmitted;
        total.cnps += s.cnps;
    }
    // the workload did reach the timers it is about
    assert!(total.ack_timeouts > 0, "no local ACK timeout: {total:?}");
    assert!(total.rnr_naks > 0, "no RNR NAK: {total:?}");
    assert!(total.retransmitted > 0, "no retransmission: {total:?}");
    assert!(total.cnps > 0, "no CNP handled: {total:?}");
}
