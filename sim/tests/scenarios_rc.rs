//! Scenario tests: every RC verb and work-request feature over a clean
//! simulated link, with data checked byte for byte and counters asserted.

mod common;

use common::*;
use nic::verbs::{RecvWr, SendOp, Sgl, WcOpcode, WcStatus, MTUS};
use nic::wire::Opcode;
use sim::PairConfig;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

#[test]
fn rc_send() {
    let mut h = H::rc();
    let data = pattern(1, 3000);
    h.fill(0, 0, &data);
    h.recv(1, 10, 0x8000, 4096);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, 3000)));
    h.run_for_wcs(1, 1);
    let (a, b) = (h.take(0), h.take(1));
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(a[0].opcode, WcOpcode::Send);
    assert_eq!(a[0].wr_id, 1);
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(b[0].opcode, WcOpcode::Recv);
    assert_eq!(b[0].wr_id, 10);
    assert_eq!(b[0].byte_len, 3000);
    assert_eq!(b[0].imm, None);
    assert_eq!(b[0].qp_num, h.ep(1).qpn);
    assert_eq!(h.mem(1, 0x8000, 3000), data);
    // nothing written past the message
    assert_eq!(h.mem(1, 0x8000 + 3000, 1096), vec![0; 1096]);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.rdma_sends, 1);
    assert_eq!(ca.sent_pkts, 3, "3000 B at MTU 1024");
    assert_eq!(cb.rdma_recvs, 1);
    assert_eq!(cb.rcvd_pkts, 3);
    assert_eq!(ca.retransmitted_pkts, 0);
    assert_eq!(cb.duplicate_request + cb.out_of_sequence, 0);
}

#[test]
fn rc_send_with_imm() {
    let mut h = H::rc();
    let data = pattern(2, 2500);
    h.fill(0, 0, &data);
    h.recv(1, 10, 0x8000, 4096);
    h.send(
        0,
        wr(
            1,
            SendOp::SendWithImm { imm: 0xdead_beef },
            h.sgl(0, 0, 2500),
        ),
    );
    h.run_for_wcs(1, 1);
    let (a, b) = (h.take(0), h.take(1));
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(a[0].opcode, WcOpcode::Send);
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(b[0].opcode, WcOpcode::Recv);
    assert_eq!(b[0].imm, Some(0xdead_beef));
    assert_eq!(b[0].byte_len, 2500);
    assert_eq!(h.mem(1, 0x8000, 2500), data);
    assert_eq!(h.counters(1).rdma_recvs, 1);
    assert_eq!(h.counters(0).rdma_sends, 1);
}

#[test]
fn rc_rdma_write() {
    let mut h = H::rc();
    let data = pattern(3, 10_000);
    h.fill(0, 0, &data);
    let op = h.write_op(1, 0x2000);
    h.send(0, wr(1, op, h.sgl(0, 0, 10_000)));
    h.run_for_wcs(1, 0);
    let a = h.take(0);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(a[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(a[0].byte_len, 10_000);
    assert_eq!(h.mem(1, 0x2000, 10_000), data);
    assert_eq!(h.mem(1, 0x2000 - 16, 16), vec![0; 16]);
    assert_eq!(h.mem(1, 0x2000 + 10_000, 16), vec![0; 16]);
    // a WRITE consumes no receive WQE and makes no completion on B
    assert!(h.wcs[1].is_empty());
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.sent_pkts, 10);
    assert_eq!(cb.rx_write_requests, 1);
    assert_eq!(cb.rdma_recvs, 0);
}

#[test]
fn rc_rdma_write_with_imm() {
    let mut h = H::rc();
    let data = pattern(4, 5000);
    h.fill(0, 0, &data);
    h.recv(1, 30, 0x8000, 16); // the buffer is not used by WRITE_WITH_IMM
    let b = h.ep(1);
    h.send(
        0,
        wr(
            1,
            SendOp::WriteWithImm {
                remote_addr: b.base + 0x2000,
                rkey: b.rkey,
                imm: 0x1234_5678,
            },
            h.sgl(0, 0, 5000),
        ),
    );
    h.run_for_wcs(1, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(wa[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wb[0].wr_id, 30);
    assert_eq!(wb[0].imm, Some(0x1234_5678));
    assert_eq!(wb[0].byte_len, 5000);
    assert_eq!(h.mem(1, 0x2000, 5000), data);
    assert_eq!(h.mem(1, 0x8000, 16), vec![0; 16]);
    assert_eq!(h.counters(1).rx_write_requests, 1);
    assert_eq!(h.qp(1).recv_queue_len, 0);
}

#[test]
fn rc_rdma_read() {
    let mut h = H::rc();
    let data = pattern(5, 9000);
    h.fill(1, 0x3000, &data);
    let op = h.read_op(1, 0x3000);
    h.send(0, wr(1, op, h.sgl(0, 0x100, 9000)));
    h.run_for_wcs(1, 0);
    let a = h.take(0);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(a[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(a[0].byte_len, 9000);
    assert_eq!(h.mem(0, 0x100, 9000), data);
    assert_eq!(h.mem(0, 0x100 + 9000, 8), vec![0; 8]);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.sent_pkts, 1, "one READ request");
    assert_eq!(cb.sent_pkts, 9, "nine READ responses");
    assert_eq!(cb.rx_read_requests, 1);
    assert_eq!(ca.rcvd_pkts, 9);
}

#[test]
fn rc_atomic_cmp_and_swp() {
    let mut h = H::rc();
    let b = h.ep(1);
    h.fill(1, 0x10000, &100u64.to_ne_bytes());
    // miss: compare 99 != 100, memory unchanged, old value returned
    h.send(
        0,
        wr(
            1,
            SendOp::CompareSwap {
                remote_addr: b.base + 0x10000,
                rkey: b.rkey,
                compare: 99,
                swap: 5,
            },
            h.sgl(0, 0x200, 8),
        ),
    );
    // hit
    h.send(
        0,
        wr(
            2,
            SendOp::CompareSwap {
                remote_addr: b.base + 0x10000,
                rkey: b.rkey,
                compare: 100,
                swap: 0x0123_4567_89ab_cdef,
            },
            h.sgl(0, 0x208, 8),
        ),
    );
    h.run_for_wcs(2, 0);
    let a = h.take(0);
    assert!(a.iter().all(|w| w.status == WcStatus::Success), "{a:?}");
    assert!(a.iter().all(|w| w.opcode == WcOpcode::CompSwap));
    assert_eq!(h.u64_at(0, 0x200), 100);
    assert_eq!(h.u64_at(0, 0x208), 100);
    assert_eq!(h.u64_at(1, 0x10000), 0x0123_4567_89ab_cdef);
    assert_eq!(h.counters(1).rx_atomic_requests, 2);
}

#[test]
fn rc_atomic_fetch_and_add() {
    let mut h = H::rc();
    let b = h.ep(1);
    h.fill(1, 0x10008, &u64::MAX.to_ne_bytes());
    for i in 0..3u64 {
        h.send(
            0,
            wr(
                i,
                SendOp::FetchAdd {
                    remote_addr: b.base + 0x10008,
                    rkey: b.rkey,
                    add: 1 + i,
                },
                h.sgl(0, 0x300 + 8 * i, 8),
            ),
        );
    }
    h.run_for_wcs(3, 0);
    let a = h.take(0);
    assert!(a.iter().all(|w| w.status == WcStatus::Success), "{a:?}");
    assert!(a.iter().all(|w| w.opcode == WcOpcode::FetchAdd));
    assert_eq!(a.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
    // wraps modulo 2^64
    assert_eq!(h.u64_at(0, 0x300), u64::MAX);
    assert_eq!(h.u64_at(0, 0x308), 0);
    assert_eq!(h.u64_at(0, 0x310), 2);
    assert_eq!(h.u64_at(1, 0x10008), 5);
    assert_eq!(h.counters(1).rx_atomic_requests, 3);
}

#[test]
fn rc_multi_sge_send_into_two_sge_receive() {
    let mut h = H::rc();
    // gather from three scattered pieces: 100 + 2000 + 50 = 2150 bytes
    let pieces = [(0x100u64, 100u32), (0x5000, 2000), (0x9001, 50)];
    let mut msg = Vec::new();
    for (k, &(off, len)) in pieces.iter().enumerate() {
        let d = pattern(10 + k as u32, len as usize);
        h.fill(0, off as usize, &d);
        msg.extend_from_slice(&d);
    }
    // scatter into 1000 + 2000 bytes
    let e = h.ep(1);
    let rsgl = h.sgl_multi(1, &[(0x20000, 1000), (0x30000, 2000)]);
    h.p.sim.nodes[1]
        .post_recv(
            e.qpn,
            RecvWr {
                wr_id: 7,
                sgl: rsgl,
            },
        )
        .unwrap();
    h.send(0, wr(1, SendOp::Send, h.sgl_multi(0, &pieces)));
    // and a WRITE gathered from the same pieces
    let op = h.write_op(1, 0x50000);
    h.send(0, wr(2, op, h.sgl_multi(0, &pieces)));
    // and a READ scattered into three local pieces
    h.fill(1, 0x60000, &msg);
    let op = h.read_op(1, 0x60000);
    h.send(
        0,
        wr(
            3,
            op,
            h.sgl_multi(0, &[(0x70000, 7), (0x71000, 1500), (0x72000, 643)]),
        ),
    );
    h.run_for_wcs(3, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 2150);
    assert_eq!(h.mem(1, 0x20000, 1000), msg[..1000]);
    assert_eq!(h.mem(1, 0x30000, 1150), msg[1000..]);
    assert_eq!(h.mem(1, 0x30000 + 1150, 850), vec![0; 850]);
    assert_eq!(h.mem(1, 0x50000, 2150), msg);
    let mut got = h.mem(0, 0x70000, 7);
    got.extend(h.mem(0, 0x71000, 1500));
    got.extend(h.mem(0, 0x72000, 643));
    assert_eq!(got, msg);
}

#[test]
fn rc_inline_data_is_copied_at_post() {
    let mut h = H::rc();
    let orig = pattern(20, 200);
    h.fill(0, 0x400, &orig);
    h.recv(1, 1, 0x8000, 256);
    let mut w = wr(1, SendOp::Send, h.sgl(0, 0x400, 200));
    w.flags.inline = true;
    h.send(0, w);
    let mut w = wr(2, h.write_op(1, 0x9000), h.sgl(0, 0x400, 200));
    w.flags.inline = true;
    h.send(0, w);
    // the application reuses its buffer right after posting
    h.fill(0, 0x400, &[0xEE; 200]);
    h.run_for_wcs(2, 1);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(h.take(1)[0].byte_len, 200);
    assert_eq!(h.mem(1, 0x8000, 200), orig);
    assert_eq!(h.mem(1, 0x9000, 200), orig);
    // inline is refused for READ
    let mut w = wr(3, h.read_op(1, 0), h.sgl(0, 0, 8));
    w.flags.inline = true;
    assert!(h.p.sim.nodes[0].post_send(h.ep(0).qpn, w).is_err());
}

#[test]
fn rc_unsignaled_success_has_no_cqe_but_error_has() {
    let mut h = H::rc();
    h.fill(0, 0, &pattern(30, 4096));
    for i in 0..3 {
        let op = h.write_op(1, 0x1000 * i);
        h.send(0, wr_unsig(i, op, h.sgl(0, 0, 4096)));
    }
    let op = h.write_op(1, 0x4000);
    h.send(0, wr(3, op, h.sgl(0, 0, 4096)));
    h.run_for_wcs(1, 0);
    let a = h.take(0);
    assert_eq!(a[0].wr_id, 3);
    assert_eq!(a[0].status, WcStatus::Success);
    for off in [0, 0x1000, 0x2000, 0x4000] {
        same(&h.mem(1, off, 4096), &pattern(30, 4096), "WRITE target");
    }
    assert_eq!(h.qp(0).send_queue_len, 0, "unsignaled WQEs are retired");
    // an unsignaled WR that fails still completes (in error)
    let b = h.ep(1);
    h.send(
        0,
        wr_unsig(
            9,
            SendOp::Write {
                remote_addr: b.base,
                rkey: b.rkey ^ 0x55,
            },
            h.sgl(0, 0, 16),
        ),
    );
    h.run_for_wcs(1, 0);
    let a = h.take(0);
    assert_eq!(a[0].wr_id, 9);
    assert_eq!(a[0].status, WcStatus::RemAccessErr);
    assert_eq!(h.counters(0).req_cqe_error, 1);
}

/// Records (time, direction, opcode) of every frame sent.
fn opcode_log(h: &mut H) -> Rc<RefCell<Vec<(u64, usize, Opcode)>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    h.sim().tap = Some(Box::new(move |now, dir, f| {
        if let Some((op, _)) = frame_opcode_psn(f) {
            l.borrow_mut().push((now.as_nanos(), dir, op));
        }
    }));
    log
}

fn is_read_resp(op: Opcode) -> bool {
    (0x0D..=0x10).contains(&op.0)
}

#[test]
fn rc_fence_holds_send_until_read_completes() {
    for fence in [false, true] {
        let mut h = H::rc();
        let log = opcode_log(&mut h);
        h.fill(1, 0, &pattern(40, 32 * 1024));
        h.recv(1, 1, 0x80000, 64);
        let op = h.read_op(1, 0);
        h.send(0, wr(1, op, h.sgl(0, 0x10000, 32 * 1024)));
        let mut s = wr(2, SendOp::Send, h.sgl(0, 0, 64));
        s.flags.fence = fence;
        h.send(0, s);
        h.run_for_wcs(2, 1);
        let a = h.take(0);
        assert_eq!(a.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        assert!(a.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(h.mem(0, 0x10000, 32 * 1024), pattern(40, 32 * 1024));
        let log = log.borrow();
        let send_at = log
            .iter()
            .position(|&(_, d, op)| d == 0 && op == Opcode::RC_SEND_ONLY)
            .expect("the SEND went out");
        let last_resp = log
            .iter()
            .rposition(|&(_, d, op)| d == 1 && is_read_resp(op))
            .expect("READ responses went out");
        if fence {
            // not sent before the last READ response was sent (and had
            // time to arrive: one link latency later)
            assert!(send_at > last_resp, "{log:?}");
            assert!(log[send_at].0 >= log[last_resp].0 + 2_000, "{log:?}");
        } else {
            // without the fence the SEND does not wait for the READ
            assert!(send_at < last_resp, "{log:?}");
        }
    }
}

#[test]
fn rc_solicited_flag_reaches_receiver() {
    let mut h = H::rc();
    h.recv(1, 1, 0x8000, 4096);
    h.recv(1, 2, 0x9000, 4096);
    h.recv(1, 3, 0xA000, 4096);
    let mut s = wr(1, SendOp::Send, h.sgl(0, 0, 3000));
    s.flags.solicited = true;
    h.send(0, s);
    h.send(0, wr(2, SendOp::Send, h.sgl(0, 0, 10)));
    let b = h.ep(1);
    let mut s = wr(
        3,
        SendOp::WriteWithImm {
            remote_addr: b.base,
            rkey: b.rkey,
            imm: 1,
        },
        h.sgl(0, 0, 10),
    );
    s.flags.solicited = true;
    h.send(0, s);
    h.run_for_wcs(3, 3);
    let wb = h.take(1);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.solicited))
            .collect::<Vec<_>>(),
        [(1, true), (2, false), (3, true)]
    );
}

#[test]
fn rc_zero_length_send_write_read() {
    let mut h = H::rc();
    h.recv(1, 1, 0x8000, 64);
    h.fill(1, 0x8000, &[0x77; 64]);
    h.send(0, wr(1, SendOp::Send, Sgl::default()));
    // a zero-length WRITE needs no valid rkey (IBA 9.4.3)
    h.send(
        0,
        wr(
            2,
            SendOp::Write {
                remote_addr: 0,
                rkey: 0,
            },
            Sgl::default(),
        ),
    );
    let op = h.write_op(1, 0x100);
    h.send(0, wr(3, op, Sgl::default()));
    let op = h.read_op(1, 0x100);
    h.send(0, wr(4, op, Sgl::default()));
    h.run_for_wcs(4, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    assert!(wa.iter().all(|w| w.byte_len == 0));
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 0);
    assert_eq!(h.mem(1, 0x8000, 64), vec![0x77; 64]);
    assert_eq!(h.counters(0).sent_pkts, 4);
    assert_eq!(h.counters(1).rx_write_requests, 2);
    assert_eq!(h.counters(1).rx_read_requests, 1);
}

#[test]
fn rc_messages_spanning_many_mtus_at_every_mtu() {
    for mtu in MTUS {
        let mut h = H::new(PairConfig {
            mtu,
            ..Default::default()
        });
        let m = mtu as usize;
        let send_len = 7 * m + 13;
        let write_len = 20 * m + 1;
        let read_len = 33 * m - 1;
        let data = pattern(mtu, 40 * m);
        h.fill(0, 0, &data);
        h.fill(1, 0x80000, &data);
        h.recv(1, 1, 0x40000, send_len as u32 + 100);
        h.recv(1, 2, 0, 0);
        h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, send_len as u32)));
        let op = h.write_op(1, 0x10000);
        h.send(0, wr(2, op, h.sgl(0, 0, write_len as u32)));
        let b = h.ep(1);
        h.send(
            0,
            wr(
                3,
                SendOp::WriteWithImm {
                    remote_addr: b.base + 0x60000,
                    rkey: b.rkey,
                    imm: mtu,
                },
                h.sgl(0, 5, write_len as u32),
            ),
        );
        let op = h.read_op(1, 0x80000);
        h.send(0, wr(4, op, h.sgl(0, 0x40000, read_len as u32)));
        h.run_for_wcs(4, 2);
        let (wa, wb) = (h.take(0), h.take(1));
        assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
        assert_eq!(wb[0].byte_len as usize, send_len);
        assert_eq!(wb[1].imm, Some(mtu));
        assert_eq!(wb[1].byte_len as usize, write_len);
        assert_eq!(h.mem(1, 0x40000, send_len), data[..send_len]);
        assert_eq!(h.mem(1, 0x10000, write_len), data[..write_len]);
        assert_eq!(h.mem(1, 0x60000, write_len), data[5..5 + write_len]);
        assert_eq!(h.mem(0, 0x40000, read_len), data[..read_len]);
        let pk = |l: usize| l.div_ceil(m) as u64;
        let (ca, cb) = (h.counters(0), h.counters(1));
        assert_eq!(
            ca.sent_pkts,
            pk(send_len) + 2 * pk(write_len) + 1,
            "mtu {mtu}"
        );
        assert!(cb.sent_pkts >= pk(read_len), "mtu {mtu}");
        assert_eq!(ca.rcvd_pkts, cb.sent_pkts);
        assert_eq!(cb.rcvd_pkts, ca.sent_pkts);
        assert_eq!(ca.retransmitted_pkts, 0);
    }
}

#[test]
fn rc_srq_shared_by_two_qps_with_its_limit_event() {
    let mut h = H::rc();
    let b = h.ep(1);
    let cfg = PairConfig {
        sq_psn: [0x1000, 0x2000],
        ..Default::default()
    };
    let srq = h.p.sim.nodes[1].create_srq(b.pd, 16).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let (qa, qb) = h.p.add_pair(cfg, Some(srq), 64);
        pairs.push((qa, qb));
    }
    // posting to the QP's own RQ is refused: it uses the SRQ
    assert!(h.p.sim.nodes[1]
        .post_recv(
            pairs[0].1,
            RecvWr {
                wr_id: 0,
                sgl: h.sgl(1, 0, 8)
            }
        )
        .is_err());
    for k in 0..4u64 {
        h.p.sim.nodes[1]
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 100 + k,
                    sgl: h.sgl(1, 0x10000 * (k + 1), 4096),
                },
            )
            .unwrap();
    }
    // the SRQ limit: more than the SRQ holds is refused; 3 arms it
    assert!(h.p.sim.nodes[1].arm_srq_limit(srq, 17).is_err());
    h.p.sim.nodes[1].arm_srq_limit(srq, 3).unwrap();
    assert_eq!(h.p.sim.nodes[1].query_srq(srq).unwrap(), (16, 3, 4));
    // two SENDs on each QP: the SRQ hands out its WQEs in order
    let msgs: Vec<Vec<u8>> = (0..4)
        .map(|k| pattern(50 + k, 1000 + 500 * k as usize))
        .collect();
    for (k, m) in msgs.iter().enumerate() {
        h.fill(0, 0x10000 * k, m);
    }
    let order = [(0, 0), (1, 1), (0, 2), (1, 3)];
    for &(q, k) in &order {
        let qpn = pairs[q].0;
        h.p.sim.nodes[0]
            .post_send(
                qpn,
                wr(
                    k as u64,
                    SendOp::Send,
                    h.sgl(0, 0x10000 * k as u64, msgs[k].len() as u32),
                ),
            )
            .unwrap();
        // one at a time, so the SRQ order is the posting order
        h.run_until(Duration::from_millis(10), |_, w| w[1].len() > k);
    }
    h.run_for_wcs(4, 4);
    let wb = h.take(1);
    h.take(0);
    assert!(wb.iter().all(|w| w.status == WcStatus::Success), "{wb:?}");
    for (k, w) in wb.iter().enumerate() {
        assert_eq!(w.wr_id, 100 + k as u64);
        assert_eq!(w.qp_num, pairs[order[k].0].1);
        assert_eq!(w.byte_len as usize, msgs[k].len());
        assert_eq!(h.mem(1, 0x10000 * (k + 1), msgs[k].len()), msgs[k]);
    }
    // below 3 WQEs left (after the second SEND): one event, then disarmed
    use nic::verbs::AsyncEvent;
    assert_eq!(
        h.p.sim.nodes[1].poll_async_event(),
        Some(AsyncEvent::SrqLimitReached(srq))
    );
    assert_eq!(h.p.sim.nodes[1].poll_async_event(), None);
    assert_eq!(h.p.sim.nodes[1].query_srq(srq).unwrap(), (16, 0, 0));
    h.p.sim.nodes[1].arm_srq_limit(srq, 1).unwrap();
    // the SRQ is empty now: the next SEND gets RNR NAKs until one is posted
    h.p.sim.nodes[0]
        .post_send(pairs[1].0, wr(9, SendOp::Send, h.sgl(0, 0, 10)))
        .unwrap();
    let qb1 = pairs[1].1;
    let (n0, n1) = (0usize, 1usize);
    h.run_until(Duration::from_millis(10), |s, _| {
        s.nodes[n1].query_qp(qb1).unwrap().counters.out_of_buffer >= 2
    });
    assert!(h.wcs[n0].is_empty());
    h.p.sim.nodes[1]
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 200,
                sgl: h.sgl(1, 0x90000, 64),
            },
        )
        .unwrap();
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(1)[0].wr_id, 200);
    // re-armed at 1: taking the only WQE fires it again
    assert_eq!(
        h.p.sim.nodes[1].poll_async_event(),
        Some(AsyncEvent::SrqLimitReached(srq))
    );
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    let qa1 = pairs[1].0;
    assert!(
        h.p.sim.nodes[0]
            .query_qp(qa1)
            .unwrap()
            .counters
            .rnr_nak_retry_err
            >= 2
    );
}

/// IBA 9.7.4.1.2: at most max_rd_atomic atomics outstanding; more posted
/// wait for their turn and go out as earlier ones complete, a window of
/// max_rd_atomic per round trip — 128 atomics at depth 16 take 8 round
/// trips, as many as 128 READs, not one round trip each.
#[test]
fn rc_atomics_beyond_the_initiator_depth_pipeline() {
    let elapsed = |atomic: bool| {
        let mut h = H::new(PairConfig {
            max_rd_atomic: 16,
            ..Default::default()
        });
        let b = h.ep(1);
        let t0 = h.p.sim.now;
        for i in 0..128u64 {
            let op = if atomic {
                SendOp::FetchAdd {
                    remote_addr: b.base + 0x10008,
                    rkey: b.rkey,
                    add: 1,
                }
            } else {
                h.read_op(1, 0x10008)
            };
            h.send(0, wr(i, op, h.sgl(0, 0x300 + 8 * (i % 64), 8)));
        }
        h.run_for_wcs(128, 0);
        assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(h.counters(0).sent_pkts, 128, "no retransmission");
        h.p.sim.now - t0
    };
    let (atomics, reads) = (elapsed(true), elapsed(false));
    // one round trip on the default link
    let mut h = H::rc();
    let b = h.ep(1);
    let t0 = h.p.sim.now;
    h.send(
        0,
        wr(
            0,
            SendOp::FetchAdd {
                remote_addr: b.base + 0x10008,
                rkey: b.rkey,
                add: 1,
            },
            h.sgl(0, 0x300, 8),
        ),
    );
    h.run_for_wcs(1, 0);
    let rtt = h.p.sim.now - t0;
    assert!(
        atomics <= rtt * 9,
        "{atomics:?} for 128 atomics, RTT {rtt:?}"
    );
    assert!(atomics >= rtt * 8, "{atomics:?}: more than 16 at a time?");
    assert!(
        atomics <= reads + rtt,
        "atomics {atomics:?}, reads {reads:?}"
    );
}

/// The device's transmit round robin over two QPs with a 16-frame WRITE
/// each: with no quantum they alternate frame by frame; with a quantum of
/// 3000 bytes (and 1 KiB frames) each sends runs of three frames, as a
/// port that sends a flow's consecutive frames as one UDP GSO super-frame
/// asks. Both WRITEs land whole either way.
#[test]
fn qps_take_transmit_turns_by_the_quantum() {
    let alternate = vec![1; 32];
    let threes = [vec![3; 10], vec![1, 1]].concat();
    for (quantum, want) in [(0, alternate), (3000, threes)] {
        let mut h = H::rc();
        let (qa, _) = h.p.add_pair(PairConfig::default(), None, 16);
        h.p.node_mut(0).set_tx_quantum(quantum);
        let data = pattern(quantum as u32, 32 * 1024);
        h.fill(0, 0, &data);
        let seen = Rc::new(RefCell::new(Vec::new()));
        let out = seen.clone();
        h.sim().tap = Some(Box::new(move |_, dir, f| {
            if let (0, Ok(r)) = (dir, nic::wire::RoceRepr::parse(f)) {
                out.borrow_mut().push(r.bth.dest_qp);
            }
        }));
        h.send(0, wr(1, h.write_op(1, 0x10000), h.sgl(0, 0, 16 * 1024)));
        let node = h.p.sides[0].node;
        h.p.sim.nodes[node]
            .post_send(
                qa,
                wr(2, h.write_op(1, 0x14000), h.sgl(0, 16 * 1024, 16 * 1024)),
            )
            .unwrap();
        h.run_for_wcs(2, 0);
        assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
        assert!(
            h.mem(1, 0x10000, 32 * 1024) == data,
            "quantum {quantum}: data"
        );
        // the lengths of the runs of one QP's frames
        let mut runs: Vec<usize> = Vec::new();
        let seen = seen.borrow();
        for (i, q) in seen.iter().enumerate() {
            match i.checked_sub(1).map(|j| seen[j] == *q) {
                Some(true) => *runs.last_mut().unwrap() += 1,
                _ => runs.push(1),
            }
        }
        assert_eq!(runs, want, "quantum {quantum}: {seen:?}");
    }
}
