//! Scenario tests: PSN wrap across 2^24, and duplicated READs and atomics
//! (executed once). RC under seeded impairments is in
//! scenarios_impairments.rs.

mod common;

use common::*;
use nic::io::impair::Impairments;
use nic::verbs::{QpState, SendOp, WcOpcode, WcStatus};
use nic::wire::{Opcode, Psn};
use sim::{LinkConfig, PairConfig};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

// ---- PSN wrap ----

fn wrap_pair(link: LinkConfig, seed: u64) -> H {
    H::new(PairConfig {
        mtu: 256,
        sq_psn: [0xFF_FFF0, 0xFF_FFFA],
        link,
        seed,
        mem_len: 4 << 20,
        ..Default::default()
    })
}

#[test]
fn psn_wrap_write_read_send_atomic() {
    let mut h = wrap_pair(LinkConfig::default(), 1);
    let psns = Rc::new(RefCell::new(Vec::new()));
    let p2 = psns.clone();
    h.sim().tap = Some(Box::new(move |_, dir, f| {
        if let Some((op, psn)) = frame_opcode_psn(f) {
            p2.borrow_mut().push((dir, op, psn));
        }
    }));
    let data = pattern(1, 40 * 256 + 7);
    h.fill(0, 0, &data);
    h.fill(1, 0x40000, &data);
    // 41-packet WRITE from 0xFFFFF0 across the wrap
    let op = h.write_op(1, 0x10000);
    h.send(0, wr(1, op, h.sgl(0, 0, data.len() as u32)));
    // 41-packet READ: its response PSNs run 0x000019 ..
    let op = h.read_op(1, 0x40000);
    h.send(0, wr(2, op, h.sgl(0, 0x80000, data.len() as u32)));
    // B's own requests start at 0xFFFFFA: a SEND that wraps
    h.recv(0, 10, 0xC0000, 4096);
    h.fill(1, 0xD0000, &data[..3000]);
    let qb = h.ep(1).qpn;
    h.p.sim.nodes[1]
        .post_send(qb, wr(3, SendOp::Send, h.sgl(1, 0xD0000, 3000)))
        .unwrap();
    let b = h.ep(1);
    h.send(
        0,
        wr(
            4,
            SendOp::FetchAdd {
                remote_addr: b.base + 0xF0000,
                rkey: b.rkey,
                add: 3,
            },
            h.sgl(0, 0xF0000, 8),
        ),
    );
    // A: three send completions and the receive; B: the SEND's completion
    h.run_for_wcs(4, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    let sends: Vec<u64> = wa
        .iter()
        .filter(|w| w.opcode != WcOpcode::Recv)
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(sends, [1, 2, 4]);
    assert!(wa.iter().any(|w| w.wr_id == 10 && w.byte_len == 3000));
    assert_eq!(wb[0].status, WcStatus::Success);
    same(
        &h.mem(1, 0x10000, data.len()),
        &data,
        "WRITE across the wrap",
    );
    same(
        &h.mem(0, 0x80000, data.len()),
        &data,
        "READ across the wrap",
    );
    same(
        &h.mem(0, 0xC0000, 3000),
        &data[..3000],
        "SEND across the wrap",
    );
    assert_eq!(h.u64_at(1, 0xF0000), 3);
    // the PSNs really wrapped: 41 + 41 + 1 PSNs from 0xFFFFF0
    assert_eq!(h.qp(0).sq_psn, (0xFF_FFF0 + 83) & 0xFF_FFFF);
    assert_eq!(h.qp(1).rq_psn, h.qp(0).sq_psn);
    assert_eq!(h.qp(1).sq_psn, (0xFF_FFFA + 12) & 0xFF_FFFF);
    let psns = psns.borrow();
    let a_psns: Vec<u32> = psns
        .iter()
        .filter(|(d, op, _)| *d == 0 && op.0 <= 0x14)
        .map(|(_, _, p)| p.value())
        .collect();
    assert!(a_psns.contains(&0xFF_FFFF) && a_psns.contains(&0));
    let ca = h.counters(0);
    assert_eq!(ca.retransmitted_pkts, 0);
    assert_eq!(ca.implied_nak_seq_err + ca.packet_seq_err, 0);
}

#[test]
fn psn_wrap_under_loss() {
    let link = LinkConfig {
        impair: Impairments {
            loss: 0.03,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut h = wrap_pair(link, 7);
    let n = 60u64;
    let len = 5 * 256 + 100;
    let mut want_reads = Vec::new();
    for k in 0..n {
        let d = pattern(100 + k as u32, len);
        let off = 0x4000 * k;
        h.fill(0, off as usize, &d);
        h.fill(1, 0x100000 + off as usize, &d);
        let op = if k % 2 == 0 {
            h.write_op(1, off)
        } else {
            want_reads.push((off, d));
            h.read_op(1, 0x100000 + off)
        };
        let lsgl = if k % 2 == 0 {
            h.sgl(0, off, len as u32)
        } else {
            h.sgl(0, 0x200000 + off, len as u32)
        };
        h.send(0, wr(k, op, lsgl));
    }
    h.run_for_wcs(n as usize, 0);
    let wa = h.take(0);
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    assert_eq!(
        wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    for k in (0..n).step_by(2) {
        same(
            &h.mem(1, (0x4000 * k) as usize, len),
            &pattern(100 + k as u32, len),
            "WRITE",
        );
    }
    for (off, d) in want_reads {
        same(&h.mem(0, 0x200000 + off as usize, len), &d, "READ");
    }
    // PSNs went around: 60 messages × 6 PSNs from 0xFFFFF0
    assert_eq!(h.qp(0).sq_psn, Psn::new(0xFF_FFF0).add(360).value());
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert!(h.p.sim.link_stats(0).lost + h.p.sim.link_stats(1).lost > 0);
    assert!(ca.retransmitted_pkts > 0);
    assert!(cb.out_of_sequence + cb.duplicate_request > 0);
    assert_eq!(h.qp(0).state, QpState::Rts);
}

// ---- duplicated READs and atomics ----

#[test]
fn duplicated_read_and_atomics_run_once() {
    let link = LinkConfig {
        impair: Impairments {
            duplicate: 1.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut h = H::new(PairConfig {
        link,
        ..Default::default()
    });
    let b = h.ep(1);
    let data = pattern(5, 4000);
    h.fill(1, 0x1000, &data);
    h.fill(1, 0x10000, &1000u64.to_ne_bytes());
    h.fill(1, 0x10008, &7u64.to_ne_bytes());
    let op = h.read_op(1, 0x1000);
    h.send(0, wr(1, op, h.sgl(0, 0x1000, 4000)));
    h.send(
        0,
        wr(
            2,
            SendOp::FetchAdd {
                remote_addr: b.base + 0x10000,
                rkey: b.rkey,
                add: 5,
            },
            h.sgl(0, 0x20000, 8),
        ),
    );
    h.send(
        0,
        wr(
            3,
            SendOp::CompareSwap {
                remote_addr: b.base + 0x10008,
                rkey: b.rkey,
                compare: 7,
                swap: 8,
            },
            h.sgl(0, 0x20008, 8),
        ),
    );
    // a CMP_SWAP that would succeed again if re-executed: 8 → 9 only if run
    // after the first one; its duplicate must not turn 9 into anything else
    h.send(
        0,
        wr(
            4,
            SendOp::CompareSwap {
                remote_addr: b.base + 0x10008,
                rkey: b.rkey,
                compare: 8,
                swap: 9,
            },
            h.sgl(0, 0x20010, 8),
        ),
    );
    h.run_for_wcs(4, 0);
    h.settle(Duration::from_millis(50));
    let wa = h.take(0);
    assert_eq!(wa.len(), 4, "{wa:?}");
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    same(&h.mem(0, 0x1000, 4000), &data, "READ");
    assert_eq!(h.u64_at(1, 0x10000), 1005, "FETCH_ADD applied once");
    assert_eq!(h.u64_at(0, 0x20000), 1000);
    assert_eq!(h.u64_at(1, 0x10008), 9);
    assert_eq!(h.u64_at(0, 0x20008), 7);
    assert_eq!(h.u64_at(0, 0x20010), 8);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert!(h.p.sim.link_stats(0).duplicated > 0);
    assert_eq!(cb.duplicate_request, 4, "every request arrived twice");
    assert_eq!(cb.rx_read_requests, 1);
    assert_eq!(cb.rx_atomic_requests, 3);
    assert_eq!(ca.req_cqe_error, 0);
    assert_eq!(h.qp(0).state, QpState::Rts);
    assert_eq!(h.qp(1).state, QpState::Rts);
}

#[test]
fn late_duplicate_read_and_atomic_replayed_not_reexecuted() {
    // Capture the requests, let everything complete, then replay them on
    // the wire as a late duplicate would arrive.
    let mut h = H::rc();
    let caught = Rc::new(RefCell::new(Vec::new()));
    let c2 = caught.clone();
    h.sim().tap = Some(Box::new(move |_, dir, f| {
        if dir == 0 {
            if let Some((op, _)) = frame_opcode_psn(f) {
                if op == Opcode::RC_RDMA_READ_REQUEST || op == Opcode::RC_FETCH_ADD {
                    c2.borrow_mut().push(f.to_vec());
                }
            }
        }
    }));
    let b = h.ep(1);
    let data = pattern(6, 3000);
    h.fill(1, 0x1000, &data);
    let op = h.read_op(1, 0x1000);
    h.send(0, wr(1, op, h.sgl(0, 0x1000, 3000)));
    h.send(
        0,
        wr(
            2,
            SendOp::FetchAdd {
                remote_addr: b.base + 0x10000,
                rkey: b.rkey,
                add: 1,
            },
            h.sgl(0, 0x20000, 8),
        ),
    );
    h.run_for_wcs(2, 0);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(h.u64_at(1, 0x10000), 1);
    let sent_before = h.counters(1).sent_pkts;
    h.sim().tap = None;
    let frames = caught.borrow().clone();
    assert_eq!(frames.len(), 2);
    for f in &frames {
        h.sim().inject(0, f);
    }
    h.settle(Duration::from_millis(10));
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(h.u64_at(1, 0x10000), 1, "the atomic ran once");
    assert_eq!(cb.duplicate_request, 2);
    assert_eq!(cb.rx_atomic_requests, 1);
    assert_eq!(cb.rx_read_requests, 1);
    // the responder answered both again: 3 READ responses + 1 atomic ACK
    assert_eq!(cb.sent_pkts - sent_before, 4);
    // and the requester dropped the stale responses quietly
    assert!(h.take(0).is_empty());
    assert_eq!(ca.req_cqe_error, 0);
    assert_eq!(h.qp(0).state, QpState::Rts);
    same(&h.mem(0, 0x1000, 3000), &data, "READ");
}

#[test]
fn duplicate_read_does_not_use_a_responder_resource() {
    // max_rd_atomic = max_dest_rd_atomic = 1. A late duplicate of READ 1
    // is still being answered when READ 2 arrives: the replay must not
    // count as READ 2's resource (that would NAK READ 2 as an invalid
    // request and fail both QPs).
    let mut h = H::new(PairConfig {
        max_rd_atomic: 1,
        // no serialisation delay: the duplicate and READ 2 arrive together
        link: LinkConfig {
            bandwidth_bps: 0,
            ..Default::default()
        },
        ..Default::default()
    });
    let caught = Rc::new(RefCell::new(Vec::new()));
    let c2 = caught.clone();
    h.sim().tap = Some(Box::new(move |_, dir, f| {
        if dir == 0 && frame_opcode_psn(f).is_some_and(|(op, _)| op == Opcode::RC_RDMA_READ_REQUEST)
        {
            c2.borrow_mut().push(f.to_vec());
        }
    }));
    let data = pattern(8, 16 * 1024);
    h.fill(1, 0, &data);
    let op = h.read_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0x10000, 16 * 1024)));
    h.run_for_wcs(1, 0);
    h.sim().tap = None;
    let dup = caught.borrow()[0].clone();
    h.sim().inject(0, &dup);
    let op = h.read_op(1, 0x100);
    h.send(0, wr(2, op, h.sgl(0, 0x20000, 100)));
    h.run_for_wcs(2, 0);
    let wa = h.take(0);
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::Success));
    same(&h.mem(0, 0x20000, 100), &data[0x100..0x100 + 100], "READ 2");
    let cb = h.counters(1);
    assert_eq!(cb.duplicate_request, 1);
    assert_eq!(cb.rx_read_requests, 2);
    assert_eq!(cb.resp_invalid_request, 0);
    assert_eq!(h.qp(1).state, QpState::Rts);
}

#[test]
fn lost_read_response_retried_from_the_gap() {
    let mut h = H::rc();
    let data = pattern(7, 10 * 1024);
    h.fill(1, 0, &data);
    // lose the 4th response packet once
    h.sim().filter = Some(drop_nth(1, 3, |op, _| (0x0D..=0x10).contains(&op.0)));
    let op = h.read_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0x10000, 10 * 1024)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    same(&h.mem(0, 0x10000, 10 * 1024), &data, "READ");
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert!(ca.implied_nak_seq_err >= 1);
    assert_eq!(ca.retransmitted_pkts, 1, "one READ request resent");
    assert_eq!(cb.duplicate_request, 1);
    // the retried READ asks only for the missing 7 packets
    assert_eq!(cb.sent_pkts, 10 + 7);
}
