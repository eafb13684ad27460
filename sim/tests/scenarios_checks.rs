//! Scenario tests: the checks a received packet passes before its QP takes
//! it (P_Key, connected address) and the responder's length checks. Each
//! test takes a real frame straight from the sending device, changes one
//! field, emits it again with a correct ICRC and puts it on the link.

mod common;

use common::*;
use nic::verbs::VerbsError;
use nic::verbs::{AhAttr, QpState, QpType, SendOp, Sgl, UdDest, WcStatus};
use nic::wire::{IpRepr, Opcode, RoceRepr};
use sim::PairConfig;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

fn with(qp_type: QpType) -> H {
    H::new(PairConfig {
        qp_type,
        ..Default::default()
    })
}

/// A one-packet SEND of 100 bytes from side 0, posted and taken from the
/// device: the frame, not yet on the link.
fn one_send(h: &mut H) -> Vec<u8> {
    h.fill(0, 0, &pattern(1, 100));
    h.recv(1, 1, 0x8000, 4096);
    let mut w = wr(1, SendOp::Send, h.sgl(0, 0, 100));
    if h.qp(0).qp_type == QpType::Ud {
        let s = &h.p.sides[1];
        w.ud = Some(UdDest {
            ah: AhAttr::new(s.gid, s.mac),
            remote_qpn: s.qpn,
            remote_qkey: 0x1111_1111,
        });
    }
    h.send(0, w);
    h.pull(0)
}

// ---- C9-43: P_Key ----

#[test]
fn rc_request_with_a_foreign_pkey_is_dropped_and_counted() {
    let mut h = H::rc();
    let f = one_send(&mut h);
    let forged = reforge(&f, |r| r.bth.pkey = 0x1234);
    h.sim().inject(0, &forged);
    h.run_for_wcs(1, 1);
    assert_eq!(h.drops(1, "pkey_mismatch"), 1);
    // the forged copy was never acknowledged: the SEND arrived by its resend
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.retransmitted_pkts, 1);
    assert_eq!(cb.rdma_recvs, 1);
    assert_eq!(cb.duplicate_request, 0);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
    same(&h.mem(1, 0x8000, 100), &pattern(1, 100), "SEND target");
}

#[test]
fn rc_request_with_the_limited_member_pkey_is_taken() {
    // 0x7FFF: the default partition, limited member; the QP's 0xFFFF is a
    // full member, so the two match (IBA 10.9.3).
    let mut h = H::rc();
    let f = one_send(&mut h);
    let forged = reforge(&f, |r| r.bth.pkey = 0x7FFF);
    h.sim().inject(0, &forged);
    h.run_for_wcs(1, 1);
    assert_eq!(h.drops(1, "pkey_mismatch"), 0);
    assert_eq!(h.counters(0).retransmitted_pkts, 0);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
}

#[test]
fn rc_response_with_a_foreign_pkey_is_dropped_and_counted() {
    let mut h = H::rc();
    let data = pattern(2, 100);
    h.fill(1, 0x1000, &data);
    let op = h.read_op(1, 0x1000);
    h.send(0, wr(1, op, h.sgl(0, 0x2000, 100)));
    let req = h.pull(0);
    let now = h.p.sim.now;
    h.p.sim.nodes[1].handle_frame(now, &req);
    let resp = h.pull(1);
    assert_eq!(
        frame_opcode_psn(&resp).map(|(op, _)| op),
        Some(Opcode::RC_RDMA_READ_RESPONSE_ONLY)
    );
    let forged = reforge(&resp, |r| r.bth.pkey = 0x0001);
    h.sim().inject(1, &forged);
    h.run_for_wcs(1, 0);
    assert_eq!(h.drops(0, "pkey_mismatch"), 1);
    // the READ completed from the answer to its resend
    assert_eq!(h.counters(0).retransmitted_pkts, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    same(&h.mem(0, 0x2000, 100), &data, "READ");
}

#[test]
fn ud_packet_with_a_foreign_pkey_is_dropped_and_counted() {
    let mut h = with(QpType::Ud);
    let f = one_send(&mut h);
    let forged = reforge(&f, |r| r.bth.pkey = 0x8001);
    h.sim().inject(0, &forged);
    h.settle(Duration::from_millis(10));
    assert_eq!(h.drops(1, "pkey_mismatch"), 1);
    // the sender cannot know: success
    assert_eq!(h.take(0)[0].status, WcStatus::Success);
    assert!(h.take(1).is_empty());
    assert_eq!(h.qp(1).recv_queue_len, 1, "the receive WQE is still there");
    // the same frame with the right P_Key is taken
    h.sim().inject(0, &f);
    h.run_for_wcs(0, 1);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
    same(&h.mem(1, 0x8000 + 40, 100), &pattern(1, 100), "UD payload");
}

// ---- IBA 9.6: connected address ----

const STRANGER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);

fn set_src(r: &mut nic::wire::RoceRepr<'_>) {
    match &mut r.ip {
        IpRepr::V4(ip) => ip.src = STRANGER_V4,
        IpRepr::V6(ip) => ip.src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x99),
    }
}

fn set_dst(r: &mut nic::wire::RoceRepr<'_>) {
    match &mut r.ip {
        IpRepr::V4(ip) => ip.dst = STRANGER_V4,
        IpRepr::V6(ip) => ip.dst = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x99),
    }
}

/// An RC SEND re-emitted with another source, then with another
/// destination address: both dropped and counted, the SEND arrives once,
/// by its resend.
fn rc_from_elsewhere(ipv6: bool) {
    let mut h = H::new(PairConfig {
        ipv6,
        ..Default::default()
    });
    let f = one_send(&mut h);
    assert_eq!(
        matches!(RoceRepr::parse(&f).unwrap().ip, IpRepr::V6(_)),
        ipv6
    );
    h.sim().inject(0, &reforge(&f, set_src));
    h.sim().inject(0, &reforge(&f, set_dst));
    h.run_for_wcs(1, 1);
    assert_eq!(h.drops(1, "address_mismatch"), 2);
    let (ca, cb) = (h.counters(0), h.counters(1));
    assert_eq!(ca.retransmitted_pkts, 1, "neither copy was acknowledged");
    assert_eq!(cb.rdma_recvs, 1);
    assert_eq!(cb.duplicate_request, 0);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
    same(&h.mem(1, 0x8000, 100), &pattern(1, 100), "SEND target");
}

#[test]
fn rc_packet_from_another_address_is_dropped_and_counted() {
    rc_from_elsewhere(false);
}

#[test]
fn rc_packet_from_another_ipv6_address_is_dropped_and_counted() {
    rc_from_elsewhere(true);
}

#[test]
fn uc_packet_from_another_address_is_dropped_and_counted() {
    let mut h = with(QpType::Uc);
    let f = one_send(&mut h);
    h.sim().inject(0, &reforge(&f, set_src));
    h.sim().inject(0, &reforge(&f, set_dst));
    h.settle(Duration::from_millis(10));
    assert_eq!(h.drops(1, "address_mismatch"), 2);
    assert!(h.take(1).is_empty());
    assert_eq!(h.qp(1).recv_queue_len, 1, "the receive WQE is still there");
    // the frame as it was sent is taken
    h.sim().inject(0, &f);
    h.settle(Duration::from_millis(10));
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
}

#[test]
fn ud_packet_from_any_address_is_taken() {
    // UD has no connection: the address is the sender's to choose, and
    // the GRH reports it.
    let mut h = with(QpType::Ud);
    let f = one_send(&mut h);
    h.sim().inject(0, &reforge(&f, set_src));
    h.run_for_wcs(1, 1);
    assert_eq!(h.drops(1, "address_mismatch"), 0);
    assert_eq!(h.take(1)[0].status, WcStatus::Success);
    // IPv4 source address, in the last 20 bytes of the 40-byte GRH
    assert_eq!(h.mem(1, 0x8000 + 20 + 12, 4), STRANGER_V4.octets());
}

// ---- C9-94: at most 2^31 bytes ----

const TWO_GIB: u64 = 1 << 31;

/// A 100-byte request of side 0 (`op`), its RETH's DMA length raised to
/// 2^31 + 1 on the wire: an invalid request, before the R_Key is looked at
/// (the range is far outside the region).
fn reth_too_long(op: SendOp) {
    let mut h = H::rc();
    h.send(0, wr(1, op, h.sgl(0, 0, 100)));
    let f = h.pull(0);
    let forged = reforge(&f, |r| {
        let reth = r.ext.reth.as_mut().expect("a RETH");
        reth.dma_len = TWO_GIB as u32 + 1;
    });
    h.sim().inject(0, &forged);
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::RemInvReqErr);
    let cb = h.counters(1);
    assert_eq!(cb.resp_invalid_request, 1);
    assert_eq!(cb.resp_remote_access_errors, 0);
    assert_eq!(cb.rx_read_requests + cb.rx_write_requests, 0);
    assert_eq!(h.qp(1).state, QpState::Err);
}

#[test]
fn write_longer_than_2_31_bytes_is_an_invalid_request() {
    let h = H::rc();
    reth_too_long(h.write_op(1, 0));
}

#[test]
fn read_longer_than_2_31_bytes_is_an_invalid_request() {
    let h = H::rc();
    reth_too_long(h.read_op(1, 0));
}

#[test]
fn post_send_refuses_messages_longer_than_2_31_bytes() {
    let mut h = H::rc();
    let e = h.ep(0);
    let (qpn, base, lkey) = (e.qpn, e.base, e.lkey);
    let ops = [SendOp::Send, h.write_op(1, 0), h.read_op(1, 0)];
    let node = &mut h.p.sim.nodes[0];
    for op in ops {
        let sgl = Sgl::single(base, TWO_GIB as u32 + 1, lkey);
        assert!(
            matches!(
                node.post_send(qpn, wr(1, op, sgl)),
                Err(VerbsError::InvalidWr(_))
            ),
            "{op:?}"
        );
    }
    // exactly 2^31 is a message the QP takes (it is never sent here)
    let sgl = Sgl::single(base, TWO_GIB as u32, lkey);
    assert!(node.post_send(qpn, wr(2, SendOp::Send, sgl)).is_ok());
}

// ---- C9-92: packet lengths ----

/// Side 0 SENDs `len` bytes (MTU 1024); the packets go to side 1 taken
/// straight from the device, packet `which` re-emitted with a payload of
/// `bad_len` bytes. The responder NAKs it as an invalid request: the SEND
/// completes with REM_INV_REQ_ERR and both QPs fail.
fn wrong_length(len: u32, which: usize, bad_len: usize, want: Opcode) {
    let mut h = H::rc();
    h.fill(0, 0, &pattern(3, len as usize));
    h.recv(1, 1, 0, 8192);
    h.send(0, wr(1, SendOp::Send, h.sgl(0, 0, len)));
    let n = len.div_ceil(1024) as usize;
    let frames: Vec<Vec<u8>> = (0..n).map(|_| h.pull(0)).collect();
    let big = pattern(4, bad_len);
    let mut bad_psn = None;
    for (i, f) in frames.iter().enumerate() {
        if i != which {
            h.sim().inject(0, f);
            continue;
        }
        let forged = reforge(f, |r| {
            assert_eq!(r.bth.opcode, want);
            bad_psn = Some(r.bth.psn);
            r.payload = &big;
        });
        h.sim().inject(0, &forged);
    }
    h.run_for_wcs(1, 1);
    assert_eq!(h.take(0)[0].status, WcStatus::RemInvReqErr);
    // a FIRST or ONLY is refused before it takes a receive WQE, which is
    // flushed with the QP; a later packet fails the WQE it was filling
    let recv = if which == 0 {
        WcStatus::WrFlushErr
    } else {
        WcStatus::RemInvReqErr
    };
    assert_eq!(h.take(1)[0].status, recv);
    let cb = h.counters(1);
    assert_eq!(cb.resp_invalid_request, 1);
    assert_eq!(cb.rdma_recvs, 0);
    assert_eq!(h.qp(1).state, QpState::Err);
    // the NAK named the bad packet: the responder expected it
    let psn = bad_psn.expect("forged");
    assert_eq!(h.qp(1).rq_psn, psn.value());
}

#[test]
fn first_shorter_than_the_mtu_is_an_invalid_request() {
    wrong_length(3072, 0, 1020, Opcode::RC_SEND_FIRST);
}

#[test]
fn middle_longer_than_the_mtu_is_an_invalid_request() {
    wrong_length(3072, 1, 1028, Opcode::RC_SEND_MIDDLE);
}

#[test]
fn last_without_payload_is_an_invalid_request() {
    wrong_length(3072, 2, 0, Opcode::RC_SEND_LAST);
}

#[test]
fn last_longer_than_the_mtu_is_an_invalid_request() {
    wrong_length(3072, 2, 1028, Opcode::RC_SEND_LAST);
}

#[test]
fn only_longer_than_the_mtu_is_an_invalid_request() {
    wrong_length(1000, 0, 1028, Opcode::RC_SEND_ONLY);
}

// ---- C9-110: a duplicate READ goes first ----

/// Every frame side `i` has to send now, taken straight from its device.
fn pull_all(h: &mut H, i: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
    let now = h.p.sim.now;
    while let Some(n) = h.p.sim.nodes[i].poll_transmit(now, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn psns(frames: &[Vec<u8>]) -> Vec<u32> {
    frames
        .iter()
        .map(|f| frame_opcode_psn(f).expect("RoCE").1.value())
        .collect()
}

#[test]
fn duplicate_read_stops_the_answer_to_a_later_read() {
    let mut h = H::rc();
    let data = pattern(5, 12 * 1024);
    h.fill(1, 0, &data);
    // READ 1: 4 responses; READ 2: 8 responses
    let op = h.read_op(1, 0);
    h.send(0, wr(1, op, h.sgl(0, 0x10000, 4096)));
    let op = h.read_op(1, 4096);
    h.send(0, wr(2, op, h.sgl(0, 0x20000, 8192)));
    let (read1, read2) = (h.pull(0), h.pull(0));
    let p1 = frame_opcode_psn(&read1).unwrap().1.value();
    let p2 = frame_opcode_psn(&read2).unwrap().1.value();
    assert_eq!(p2, p1 + 4);
    let now = h.p.sim.now;
    h.p.sim.nodes[1].handle_frame(now, &read1);
    h.p.sim.nodes[1].handle_frame(now, &read2);
    // READ 1 answered, READ 2 begun: its first two responses
    let mut sent = Vec::new();
    let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
    for _ in 0..6 {
        let n = h.p.sim.nodes[1].poll_transmit(now, &mut buf).unwrap();
        sent.push(buf[..n].to_vec());
    }
    assert_eq!(psns(&sent), [0, 1, 2, 3, 4, 5].map(|k| p1 + k));
    // READ 1 again (the requester went back to it): it is answered next,
    // from its first PSN, and READ 2's answer stops
    h.p.sim.nodes[1].handle_frame(now, &read1);
    let after = pull_all(&mut h, 1);
    assert_eq!(psns(&after), [0, 1, 2, 3].map(|k| p1 + k));
    assert_eq!(h.counters(1).duplicate_request, 1);
    // the requester gets all of it: READ 2 by asking again
    for f in sent.iter().chain(&after) {
        h.sim().inject(1, f);
    }
    h.run_for_wcs(2, 0);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    same(&h.mem(0, 0x10000, 4096), &data[..4096], "READ 1");
    same(&h.mem(0, 0x20000, 8192), &data[4096..], "READ 2");
    assert_eq!(h.qp(1).state, QpState::Rts);
}

/// C9-110 with an atomic: a duplicate atomic whose PSN is earlier than the
/// READ being answered stops that answer and is answered next, from the
/// responder resources (IBA 9.7.5.1.3.2: replayed, never executed again).
#[test]
fn duplicate_atomic_stops_the_answer_to_a_later_read() {
    let mut h = H::rc();
    let b = h.ep(1);
    let data = pattern(7, 8192);
    h.fill(1, 0, &data);
    let fadd = SendOp::FetchAdd {
        remote_addr: b.base + 0x10000,
        rkey: b.rkey,
        add: 5,
    };
    h.send(0, wr(1, fadd, h.sgl(0, 0x30000, 8)));
    let op = h.read_op(1, 0);
    h.send(0, wr(2, op, h.sgl(0, 0x20000, 8192)));
    let (atomic, read) = (h.pull(0), h.pull(0));
    let pa = frame_opcode_psn(&atomic).unwrap().1.value();
    let pr = frame_opcode_psn(&read).unwrap().1.value();
    assert_eq!(pr, pa + 1);
    let now = h.p.sim.now;
    h.p.sim.nodes[1].handle_frame(now, &atomic);
    h.p.sim.nodes[1].handle_frame(now, &read);
    // the atomic ACK, then the READ's first two responses
    let mut sent = Vec::new();
    let mut buf = vec![0u8; nic::transport::MAX_FRAME_LEN];
    for _ in 0..3 {
        let n = h.p.sim.nodes[1].poll_transmit(now, &mut buf).unwrap();
        sent.push(buf[..n].to_vec());
    }
    assert_eq!(psns(&sent), [pa, pr, pr + 1]);
    // the atomic again: its saved ACK goes out next and the READ's answer
    // stops; the atomic does not run a second time
    h.p.sim.nodes[1].handle_frame(now, &atomic);
    let after = pull_all(&mut h, 1);
    assert_eq!(psns(&after), [pa]);
    assert_eq!(
        frame_opcode_psn(&after[0]).unwrap().0,
        Opcode::RC_ATOMIC_ACKNOWLEDGE
    );
    let c = h.counters(1);
    assert_eq!((c.duplicate_request, c.rx_atomic_requests), (1, 1));
    assert_eq!(h.u64_at(1, 0x10000), 5, "the atomic ran once");
    // the requester gets all of it: the READ by asking again
    for f in sent.iter().chain(&after) {
        h.sim().inject(1, f);
    }
    h.run_for_wcs(2, 0);
    assert!(h.take(0).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(h.u64_at(0, 0x30000), 0, "the original value");
    assert_eq!(h.u64_at(1, 0x10000), 5);
    same(&h.mem(0, 0x20000, 8192), &data, "READ");
    assert_eq!(h.qp(1).state, QpState::Rts);
}
