//! Scenario tests: RC under seeded loss, reordering, duplication and
//! corruption with exactly-once in-order completion and byte-exact data;
//! RNR races; go-back-N's retries under heavy loss.

mod common;

use common::*;
use nic::io::impair::Impairments;
use nic::verbs::{QpState, SendOp, SendWr, Wc, WcStatus};
use nic::wire::{Opcode, Psn};
use sim::{LinkConfig, PairConfig};
use std::time::Duration;

// ---- impairment mixes ----

#[derive(Clone, Copy, Debug)]
enum Kind {
    Send,
    Write,
    Read,
    FetchAdd,
}

fn mixed_run(link: LinkConfig, seed: u64, mtu: u32) -> H {
    mixed_run_cfg(PairConfig {
        link,
        seed,
        mtu,
        retry_cnt: 7,
        timeout: 6,
        mem_len: 4 << 20,
        ..Default::default()
    })
}

fn mixed_run_cfg(cfg: PairConfig) -> H {
    let seed = cfg.seed;
    let mut h = H::new(cfg);
    let b = h.ep(1);
    let n = 200u64;
    let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut kinds = Vec::new();
    let mut adds = 0u64;
    let slot = 0x3000u64;
    for k in 0..n {
        let len = (next() % 3 * 1024 + next() % 1500) as usize;
        let kind = match next() % 4 {
            0 => Kind::Send,
            1 => Kind::Write,
            2 => Kind::Read,
            _ => Kind::FetchAdd,
        };
        let d = pattern(1000 + k as u32, len);
        let off = slot * k;
        let w: SendWr = match kind {
            Kind::Send => {
                h.fill(0, off as usize, &d);
                h.recv(1, k, 0x80000 + off, len as u32);
                wr(k, SendOp::Send, h.sgl(0, off, len as u32))
            }
            Kind::Write => {
                h.fill(0, off as usize, &d);
                wr(k, h.write_op(1, off), h.sgl(0, off, len as u32))
            }
            Kind::Read => {
                h.fill(1, off as usize, &d);
                wr(k, h.read_op(1, off), h.sgl(0, 0x80000 + off, len as u32))
            }
            Kind::FetchAdd => {
                let add = k + 1;
                adds += add;
                wr(
                    k,
                    SendOp::FetchAdd {
                        remote_addr: b.base + 0x100000,
                        rkey: b.rkey,
                        add,
                    },
                    h.sgl(0, 0x100000 + 8 * k, 8),
                )
            }
        };
        kinds.push((kind, len));
        h.send(0, w);
    }
    let sends = kinds
        .iter()
        .filter(|(k, _)| matches!(k, Kind::Send))
        .count();
    h.run_for_wcs(n as usize, sends);
    let (wa, wb) = (h.take(0), h.take(1));
    // exactly once, in order, all successful
    let bad = |w: &[Wc]| -> Vec<Wc> {
        w.iter()
            .filter(|w| w.status != WcStatus::Success)
            .take(3)
            .copied()
            .collect()
    };
    assert!(bad(&wa).is_empty(), "{:?}", bad(&wa));
    assert!(bad(&wb).is_empty(), "{:?}", bad(&wb));
    assert_eq!(
        wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    let send_ids: Vec<u64> = (0..n)
        .filter(|&k| matches!(kinds[k as usize].0, Kind::Send))
        .collect();
    assert_eq!(wb.iter().map(|w| w.wr_id).collect::<Vec<_>>(), send_ids);
    // byte-exact data
    let mut fetched = Vec::new();
    for (k, &(kind, len)) in kinds.iter().enumerate() {
        let off = (slot * k as u64) as usize;
        let d = pattern(1000 + k as u32, len);
        match kind {
            Kind::Send => {
                same(&h.mem(1, 0x80000 + off, len), &d, "SEND");
                assert_eq!(
                    wb.iter().find(|w| w.wr_id == k as u64).unwrap().byte_len as usize,
                    len
                );
            }
            Kind::Write => same(&h.mem(1, off, len), &d, "WRITE"),
            Kind::Read => same(&h.mem(0, 0x80000 + off, len), &d, "READ"),
            Kind::FetchAdd => fetched.push((h.u64_at(0, 0x100000 + 8 * k), k as u64 + 1)),
        }
    }
    // each add applied exactly once, in order: each fetch saw the sum before it
    assert_eq!(h.u64_at(1, 0x100000), adds);
    let mut sum = 0;
    for (got, add) in fetched {
        assert_eq!(got, sum);
        sum += add;
    }
    assert_eq!(h.qp(0).state, QpState::Rts);
    assert_eq!(h.qp(1).state, QpState::Rts);
    assert_eq!(h.qp(0).send_queue_len, 0);
    h
}

#[test]
fn rc_mix_loss() {
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.05,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = mixed_run(link, 11, 1024);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert!(h.p.sim.link_stats(0).lost > 0 && h.p.sim.link_stats(1).lost > 0);
    assert!(ca.retransmitted_pkts > 0);
    assert!(cb.out_of_sequence > 0);
    assert!(ca.packet_seq_err + ca.local_ack_timeout_err + ca.implied_nak_seq_err > 0);
    assert_eq!(ca.retry_exceeded_err, 0);
}

#[test]
fn rc_mix_reorder() {
    let link = LinkConfig {
        reorder_delay: Duration::from_micros(3),
        impair: Impairments {
            reorder: 0.1,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = mixed_run(link, 12, 512);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert!(h.p.sim.link_stats(0).reordered > 0);
    assert!(cb.out_of_sequence > 0);
    assert!(ca.packet_seq_err > 0);
}

#[test]
fn rc_mix_duplicate() {
    let link = LinkConfig {
        impair: Impairments {
            duplicate: 0.1,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = mixed_run(link, 13, 2048);
    let cb = h.counters(1);
    assert!(h.p.sim.link_stats(0).duplicated > 0);
    assert!(cb.duplicate_request > 0);
}

#[test]
fn rc_mix_corrupt_dropped_by_icrc() {
    let link = LinkConfig {
        impair: Impairments {
            corrupt: 0.05,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = mixed_run(link, 14, 1024);
    assert!(h.p.sim.link_stats(0).corrupted > 0);
    let drops: u64 = (0..2)
        .map(|i| {
            h.p.sim.nodes[i]
                .drops()
                .get("icrc_error")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert!(
        drops > 0,
        "{:?} {:?}",
        h.p.sim.nodes[0].drops(),
        h.p.sim.nodes[1].drops()
    );
    assert!(h.counters(0).retransmitted_pkts > 0);
}

#[test]
fn rc_mix_everything() {
    for (seed, mtu, max_rd_atomic) in [(21, 256, 16), (22, 1024, 1), (23, 4096, 2)] {
        let link = LinkConfig {
            impair: Impairments {
                loss: 0.02,
                reorder: 0.05,
                duplicate: 0.1,
                corrupt: 0.02,
                ..Default::default()
            },
            ..Default::default()
        };
        let h = mixed_run_cfg(PairConfig {
            link,
            seed,
            mtu,
            max_rd_atomic,
            retry_cnt: 7,
            timeout: 6,
            mem_len: 4 << 20,
            ..Default::default()
        });
        assert!(h.counters(0).retransmitted_pkts > 0, "seed {seed}");
        assert!(h.counters(1).duplicate_request > 0, "seed {seed}");
    }
}

#[test]
fn rc_mix_is_deterministic() {
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.03,
            reorder: 0.05,
            duplicate: 0.03,
            corrupt: 0.01,
            ..Default::default()
        },
        ..Default::default()
    };
    let a = mixed_run(link, 31, 1024);
    let b = mixed_run(link, 31, 1024);
    assert_eq!(a.counters(0), b.counters(0));
    assert_eq!(a.counters(1), b.counters(1));
    assert_eq!(a.p.sim.now, b.p.sim.now);
    assert_eq!(a.p.sim.link_stats(0), b.p.sim.link_stats(0));
}

/// Runs `run` for each seed below `n` (or only `$SEED`) with the seed's
/// path MTU and link: every MTU, loss 0 / 5 / 10 %, reordering and
/// duplication 0 / 10 / 30 %, corruption `corrupt`. Fails naming every
/// seed whose run failed.
fn sweep(n: u64, corrupt: f64, run: impl Fn(u64, u32, LinkConfig) + std::panic::RefUnwindSafe) {
    let only: Option<u64> = std::env::var("SEED")
        .ok()
        .map(|s| s.parse().expect("SEED is a number"));
    let mut failed = Vec::new();
    for seed in (0..n).filter(|s| only.is_none_or(|o| o == *s)) {
        let mtu = nic::verbs::MTUS[(seed % 5) as usize];
        let link = LinkConfig {
            impair: Impairments {
                loss: [0.0, 0.05, 0.1][(seed % 3) as usize],
                reorder: [0.0, 0.1, 0.3][(seed / 3 % 3) as usize],
                duplicate: [0.0, 0.1, 0.3][(seed / 9 % 3) as usize],
                corrupt,
                ..Default::default()
            },
            ..Default::default()
        };
        if std::panic::catch_unwind(|| run(seed, mtu, link)).is_err() {
            failed.push(format!("seed {seed} mtu {mtu} {link:?}"));
        }
    }
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}

/// A sweep over 200 seeded configurations (`sweep`'s links, and
/// max_rd_atomic 1/2/16); `SEED=n` runs one.
#[test]
fn sweep_mixed_impairments() {
    sweep(200, 0.02, |seed, mtu, link| {
        mixed_run_cfg(PairConfig {
            link,
            seed,
            mtu,
            retry_cnt: 7,
            timeout: 6,
            mem_len: 4 << 20,
            max_rd_atomic: [1, 2, 16][(seed / 27 % 3) as usize] as u8,
            unlimited_retries: true,
            ..Default::default()
        });
    });
}

/// SENDs racing receives that are posted a few at a time, under
/// impairments: RNR NAKs interleaved with loss, reordering and duplicates.
fn rnr_race(link: LinkConfig, seed: u64, mtu: u32) -> H {
    let mut h = H::new(PairConfig {
        link,
        seed,
        mtu,
        rnr_retry: 7,
        min_rnr_timer: 1,
        timeout: 6,
        mem_len: 4 << 20,
        ..Default::default()
    });
    let n = 100u64;
    for k in 0..n {
        let len = 100 + (k as usize * 397) % 3000;
        h.fill(0, 0x4000 * k as usize, &pattern(k as u32, len));
        let op = if k % 3 == 2 {
            SendOp::SendWithImm { imm: k as u32 }
        } else {
            SendOp::Send
        };
        h.send(0, wr(k, op, h.sgl(0, 0x4000 * k, len as u32)));
    }
    let mut posted = 0u64;
    while posted < n {
        for _ in 0..(1 + posted % 4) {
            if posted < n {
                h.recv(1, posted, 0x200000 + 0x4000 * posted, 0x4000);
                posted += 1;
            }
        }
        h.advance(Duration::from_micros(7 + seed % 13));
    }
    h.run_until(Duration::from_secs(1), |_, w| {
        w[0].len() >= n as usize && w[1].len() >= n as usize
    });
    if let Some(w) = h.wcs[0].iter().find(|w| w.status != WcStatus::Success) {
        panic!(
            "{w:?}\na: {:?}\nb: {:?}\n{}{}",
            h.counters(0),
            h.counters(1),
            h.p.sim.nodes[0].debug_qp(h.ep(0).qpn),
            h.p.sim.nodes[1].debug_qp(h.ep(1).qpn)
        );
    }
    h.run_for_wcs(n as usize, n as usize);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa.iter().all(|w| w.status == WcStatus::Success));
    assert!(wb.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    assert_eq!(
        wb.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    for (k, w) in wb.iter().enumerate() {
        let len = 100 + (k * 397) % 3000;
        assert_eq!(w.byte_len as usize, len);
        assert_eq!(w.imm, (k % 3 == 2).then_some(k as u32));
        same(
            &h.mem(1, 0x200000 + 0x4000 * k, len),
            &pattern(k as u32, len),
            "SEND",
        );
    }
    h
}

#[test]
fn rnr_race_clean_and_impaired() {
    let h = rnr_race(LinkConfig::default(), 1, 1024);
    assert!(h.counters(0).rnr_nak_retry_err > 0);
    assert!(h.counters(1).out_of_buffer > 0);
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.03,
            reorder: 0.05,
            duplicate: 0.05,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = rnr_race(link, 2, 512);
    assert!(h.counters(0).rnr_nak_retry_err > 0);
    assert!(h.counters(0).retransmitted_pkts > 0);
}

#[test]
fn go_back_n_under_heavy_loss_keeps_its_retries() {
    // MTU 256, 10-packet SENDs, 10 % loss and reordering: each go-back-N
    // round gets a few packets further before the next NAK. Every newly
    // acknowledged PSN is forward progress and resets the retry counter,
    // so the QP does not end in RETRY_EXC_ERR while it advances.
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.1,
            reorder: 0.1,
            corrupt: 0.01,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = rnr_race(link, 5, 256);
    let ca = h.counters(0);
    assert_eq!(ca.retry_exceeded_err, 0);
    assert!(ca.packet_seq_err > 7, "more NAKs than retry_cnt: {ca:?}");
    // and a long WRITE with a small retry budget, losing every 13th frame
    // it sends (first transmissions and retransmissions alike)
    let mut h = H::new(PairConfig {
        mtu: 256,
        retry_cnt: 2,
        timeout: 6,
        ..Default::default()
    });
    let mut n = 0u32;
    h.sim().filter = Some(Box::new(move |dir, _| {
        if dir == 1 {
            return true;
        }
        n += 1;
        n % 13 != 5
    }));
    let data = pattern(77, 100 * 256);
    h.fill(0, 0, &data);
    let op = h.write_op(1, 0x10000);
    h.send(0, wr(1, op, h.sgl(0, 0, data.len() as u32)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    same(&h.mem(1, 0x10000, data.len()), &data, "WRITE");
    let ca = h.counters(0);
    assert!(
        ca.packet_seq_err > 3,
        "more NAKs than retry_cnt + 1: {ca:?}"
    );
    assert_eq!(ca.retry_exceeded_err, 0);
}

/// `rnr_race` over 100 seeded configurations; see `sweep_mixed_impairments`.
#[test]
fn sweep_rnr_races() {
    sweep(100, 0.01, |seed, mtu, link| {
        rnr_race(link, seed, mtu);
    });
}

/// A READ whose response never comes (every copy lost), with more READs
/// behind it that are answered: each of their responses implies a NAK for
/// the missing one (IBA 9.7.5.1.4). The requester resends from the gap
/// once per gap, then by its ACK timer, and fails the READ with
/// RETRY_EXC_ERR after `retry_cnt` retries (IBA 9.7.6.1.3), flushing the
/// rest. Before, every one of those responses restarted the replay (and
/// pushed the ACK timer back): the replay drew the same responses again,
/// a retransmission storm that never ended (found by `hostile.rs`).
#[test]
fn unanswered_read_ends_in_retry_exc_err_not_a_retransmission_storm() {
    let mut h = H::new(PairConfig {
        retry_cnt: 3,
        timeout: 4,
        ..PairConfig::default()
    });
    h.fill(1, 0, &pattern(21, 4096));
    let first = Psn::new(PairConfig::default().sq_psn[0]);
    h.sim().filter = Some(Box::new(move |dir, f| {
        !(dir == 1
            && frame_opcode_psn(f)
                .is_some_and(|(op, psn)| op == Opcode::RC_RDMA_READ_RESPONSE_ONLY && psn == first))
    }));
    for k in 0..5u64 {
        let op = h.read_op(1, k * 512);
        h.send(0, wr(k, op, h.sgl(0, 0x1000 + k * 512, 512)));
    }
    // 4.096 µs × 2^4 per timeout: four of them take well under 1 ms
    let done = h.run_until(Duration::from_millis(5), |_, w| w[0].len() >= 5);
    let c = h.counters(0);
    assert!(
        done,
        "no end after 5 ms: {} completions, {} packets resent, {} implied NAKs",
        h.wcs[0].len(),
        c.retransmitted_pkts,
        c.implied_nak_seq_err
    );
    let wcs = h.take(0);
    let st: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st[0], (0, WcStatus::RetryExcErr), "{st:?}");
    assert!(
        st[1..].iter().all(|s| s.1 == WcStatus::WrFlushErr),
        "{st:?}"
    );
    assert_eq!(c.retry_exceeded_err, 1);
    assert_eq!(
        c.local_ack_timeout_err, 4,
        "the timer's retries, then the failure"
    );
    // one replay per gap and per timeout: 5 READs resent at most 4 times
    assert!(
        c.retransmitted_pkts <= 4 * 5,
        "{} packets resent",
        c.retransmitted_pkts
    );
    assert_eq!(h.qp(0).state, QpState::Err);
}
