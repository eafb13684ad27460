//! The cost of an idle engine turn — `poll_timeout()` then
//! `handle_timeout(now)` with nothing due — against the number of RC QPs
//! the device holds. Every QP is connected and in RTS; one has a WRITE in
//! flight and so an armed local ACK timer (IBA 9.7.6.1.3), which the turn
//! must find without firing it. Interleaved like `crc_copy.rs`: per round
//! one batch per QP count; min / median over the rounds.
//!
//! `cargo bench -p benches --bench idle_turn`

use benches::{batch, min_median};
use nic::device::Rnic;
use nic::transport::QpInit;
use nic::verbs::{AhAttr, QpType, SendOp, SendWr, Sgl};
use nic::Instant;
use sim::{connect, Endpoint, PairConfig};
use std::hint::black_box;

const ROUNDS: usize = 200;
const COUNTS: [usize; 4] = [1, 100, 1000, 4000];

/// A device with `n` RC QPs in RTS towards a peer that never answers; the
/// first has sent one WRITE, so its ACK timer is armed. Returns the device
/// and an idle instant (before that timer's deadline).
fn device(n: usize) -> (Rnic, Instant) {
    let (mut r, e) = Endpoint::create(0, false, 1 << 16, 1 << 10, |_| {});
    let (_, peer) = Endpoint::create(1, false, 4096, 16, |_| {});
    let cfg = PairConfig {
        max_wr: 16,
        ..PairConfig::default()
    };
    let mut qpns = Vec::with_capacity(n);
    for i in 0..n {
        let qpn = r
            .create_qp(QpInit {
                qp_type: QpType::Rc,
                pd: e.pd,
                send_cq: e.cq,
                recv_cq: e.cq,
                srq: None,
                max_send_wr: 16,
                max_recv_wr: 16,
                sq_sig_all: false,
            })
            .expect("create qp");
        let ah = AhAttr::new(peer.gid, peer.mac);
        connect(&mut r, qpn, cfg, ah, 0x100 + i as u32, 0, 0);
        qpns.push(qpn);
    }
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: peer.base,
            rkey: peer.rkey,
        },
        Sgl::single(e.base, 64, e.lkey),
    );
    r.post_send(qpns[0], wr).expect("post");
    let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
    let now = Instant::from_nanos(1_000);
    while r.poll_transmit(now, &mut buf).is_some() {}
    let deadline = r.poll_timeout().expect("the WRITE's ACK timer is armed");
    assert!(deadline > now);
    (r, now)
}

fn main() {
    println!("{ROUNDS} interleaved rounds; ns per idle turn (poll_timeout + handle_timeout), min / median");
    let mut devs: Vec<(Rnic, Instant)> = COUNTS.iter().map(|&n| device(n)).collect();
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); COUNTS.len()];
    for _ in 0..ROUNDS {
        for (k, (r, now)) in devs.iter_mut().enumerate() {
            let calls = (400_000 / (COUNTS[k] + 20)).max(20);
            let now = *now;
            t[k].push(batch(calls, || {
                let d = black_box(&*r).poll_timeout();
                if d.is_some_and(|d| d <= now) {
                    unreachable!("nothing is due");
                }
                r.handle_timeout(black_box(now));
            }));
        }
    }
    println!("{:>6} {:>10} {:>10}", "QPs", "min", "median");
    for (k, v) in t.into_iter().enumerate() {
        let (min, med) = min_median(v);
        println!("{:>6} {min:>10.1} {med:>10.1}", COUNTS[k]);
    }
}
