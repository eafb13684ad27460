//! The order of completion events: two CQs on one completion channel
//! (one eventfd) fire in the order their completions came, whatever order
//! the data plane visits its CQs in.

use super::BATCH;
use super::*;
use ipc::ring::{ring_bytes, CQE_SIZE};
use ipc::shm::Mapping;
use nic::device::Endpoint;
use nic::transport::{QpInit, MAX_FRAME_LEN};
use nic::verbs::{AhAttr, RecvWr, SendOp, SendWr, Sgl};
use nic::Instant;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering::SeqCst;

/// A park of an engine on CPU 1 that comes back by itself.
const PARK: nic::engine::Park = nic::engine::Park {
    time: std::time::Duration::from_micros(50),
    self_wake: true,
    cpu: Some(1),
};

/// A CQ ring of 16 entries armed for the next completion, its events
/// written to a duplicate of `chan`.
fn armed_ring(chan: &OwnedFd) -> CqRing {
    ring_of(16, chan)
}

/// A CQ ring of `entries` (a power of two) armed for the next completion.
fn ring_of(entries: u32, chan: &OwnedFd) -> CqRing {
    let map = Arc::new(Mapping::create("test-cq", ring_bytes(entries, CQE_SIZE)).expect("memfd"));
    // SAFETY: the mapping holds ring_bytes(entries, CQE_SIZE) bytes and
    // lives in the CqRing beside the ring; entries is a power of two.
    let ring = unsafe { Ring::new(map.ptr(), entries, CQE_SIZE) };
    ring.armed().store(ring::ARM_NEXT, SeqCst);
    CqRing {
        _map: map,
        ring,
        prod: 0,
        pending: VecDeque::new(),
        notify: Some(chan.try_clone().expect("dup the eventfd")),
        owner: 1,
    }
}

/// Device A with an RC QP whose sends complete on one CQ and receives on
/// another, connected to device B's; both hold a posted receive.
struct Pair {
    a: Rnic,
    b: Rnic,
    qa: u32,
    qb: u32,
    send_cq: u32,
    recv_cq: u32,
    ea: Endpoint,
    eb: Endpoint,
}

fn pair() -> Pair {
    let (mut a, ea) = Endpoint::create(0, false, 4096, 16, |_| {});
    let (mut b, eb) = Endpoint::create(1, false, 4096, 16, |_| {});
    let send_cq = ea.cq;
    let recv_cq = a.create_cq(16);
    let init = |pd, send_cq, recv_cq| QpInit {
        qp_type: wire::QpType::Rc,
        pd,
        send_cq,
        recv_cq,
        srq: None,
        max_send_wr: 4,
        max_recv_wr: 4,
        sq_sig_all: true,
    };
    let qa = a.create_qp(init(ea.pd, send_cq, recv_cq)).expect("qp a");
    let qb = b.create_qp(init(eb.pd, eb.cq, eb.cq)).expect("qp b");
    let cfg = sim::PairConfig::default();
    sim::connect(&mut a, qa, cfg, AhAttr::new(eb.gid, eb.mac), qb, 0, 0);
    sim::connect(&mut b, qb, cfg, AhAttr::new(ea.gid, ea.mac), qa, 0, 0);
    for (r, q, e) in [(&mut a, qa, &ea), (&mut b, qb, &eb)] {
        let sgl = Sgl::single(e.base + 1024, 64, e.lkey);
        r.post_recv(q, RecvWr { wr_id: 7, sgl }).expect("post recv");
    }
    Pair {
        a,
        b,
        qa,
        qb,
        send_cq,
        recv_cq,
        ea,
        eb,
    }
}

/// Every frame `r` has to send now.
fn frames(r: &mut Rnic) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    while let Some(n) = r.poll_transmit(Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn send(r: &mut Rnic, q: u32, e: &Endpoint) {
    let wr = SendWr::new(1, SendOp::Send, Sgl::single(e.base, 64, e.lkey));
    r.post_send(q, wr).expect("post send");
}

/// A's SEND is answered by B's ACK and then by B's own SEND, which A
/// takes in one turn: the send completion first. With `answer_first`, B
/// sends before it sees A's SEND, so A's receive completes first. Returns
/// A's device (both completions waiting) and which CQ completed first.
fn completions(answer_first: bool) -> (Pair, u32) {
    let mut p = pair();
    send(&mut p.a, p.qa, &p.ea);
    let to_b = frames(&mut p.a);
    if answer_first {
        send(&mut p.b, p.qb, &p.eb);
    }
    let mut to_a = frames(&mut p.b);
    for f in &to_b {
        p.b.handle_frame(Instant::ZERO, f);
    }
    if !answer_first {
        send(&mut p.b, p.qb, &p.eb);
    }
    to_a.extend(frames(&mut p.b));
    for f in &to_a {
        p.a.handle_frame(Instant::ZERO, f);
    }
    assert_eq!(p.a.cq_len(p.send_cq), 1, "A's SEND completed");
    assert_eq!(p.a.cq_len(p.recv_cq), 1, "B's SEND arrived");
    let first = if answer_first { p.recv_cq } else { p.send_cq };
    (p, first)
}

#[test]
fn events_on_one_channel_follow_the_order_of_completions() {
    // the data plane's CQ table is a HashMap, whose order differs from one
    // instance to the next: several rounds visit the CQs both ways
    for round in 0..16 {
        let (mut p, first) = completions(round % 2 == 1);
        // SAFETY: eventfd makes a new descriptor, owned here.
        let chan = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
        let mut dp = DataPlane::default();
        dp.add_cq(p.send_cq, armed_ring(&chan));
        dp.add_cq(p.recv_cq, armed_ring(&chan));
        assert_eq!(dp.complete(&mut p.a), 2, "round {round}: two CQEs written");
        let seq = |cq: u32| dp.cqs[&cq].ring.event_seq().load(SeqCst);
        let second = if first == p.send_cq {
            p.recv_cq
        } else {
            p.send_cq
        };
        for cq in [first, second] {
            assert_eq!(dp.cqs[&cq].ring.armed().load(SeqCst), 0, "CQ {cq} fired");
        }
        assert!(
            (seq(second).wrapping_sub(seq(first)) as i32) > 0,
            "round {round}: CQ {first} completed first but fired as {} after {}",
            seq(first),
            seq(second)
        );
        let mut count = 0u64;
        // SAFETY: an 8-byte read from our eventfd into a local.
        let n = unsafe { libc::read(chan.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        assert_eq!((n, count), (8, 2), "two events on the channel");
    }
}

/// A full CQ ring keeps its waiting completions: the data plane visits the
/// CQ again once the client made room, though the device has no new
/// completion to list it by.
#[test]
fn completions_waiting_for_a_full_ring_go_in_when_the_client_makes_room() {
    let mut p = pair();
    for wr_id in [1, 2] {
        let op = SendOp::Write {
            remote_addr: p.eb.base,
            rkey: p.eb.rkey,
        };
        let wr = SendWr::new(wr_id, op, Sgl::single(p.ea.base, 64, p.ea.lkey));
        p.a.post_send(p.qa, wr).expect("post write");
    }
    for f in frames(&mut p.a) {
        p.b.handle_frame(Instant::ZERO, &f);
    }
    for f in frames(&mut p.b) {
        p.a.handle_frame(Instant::ZERO, &f);
    }
    assert_eq!(p.a.cq_len(p.send_cq), 2, "both WRITEs completed");
    // SAFETY: eventfd makes a new descriptor, owned here.
    let chan = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
    let mut dp = DataPlane::default();
    dp.add_cq(p.send_cq, ring_of(1, &chan));
    assert_eq!(dp.complete(&mut p.a), 1, "one slot");
    assert!(dp.backlogged());
    assert_eq!(dp.complete(&mut p.a), 0, "no room yet");
    let ring = &dp.cqs[&p.send_cq].ring;
    assert_eq!(ring.read::<CqeRaw>(0).wr_id, 1);
    ring.consumer().store(1, SeqCst);
    assert_eq!(dp.complete(&mut p.a), 1, "the second, once there is room");
    assert_eq!(dp.cqs[&p.send_cq].ring.read::<CqeRaw>(1).wr_id, 2);
    assert!(!dp.backlogged());
    assert_eq!(dp.complete(&mut p.a), 0);
}

/// A QP of device A with a send ring of `entries` in the data plane,
/// owned by client 1; (its QPN, the ring, the client's doorbells).
fn qp_with_ring(
    p: &mut Pair,
    dp: &mut DataPlane,
    entries: u32,
) -> (u32, Ring, ipc::doorbell::Doorbells) {
    let qpn =
        p.a.create_qp(QpInit {
            qp_type: wire::QpType::Rc,
            pd: p.ea.pd,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            srq: None,
            max_send_wr: entries,
            max_recv_wr: 4,
            sq_sig_all: true,
        })
        .expect("qp");
    let len = ring_bytes(entries, ipc::ring::WQE_SIZE);
    let map = Arc::new(Mapping::create("test-qp", 2 * len.next_multiple_of(4096)).expect("memfd"));
    // SAFETY: two rings of `len` bytes at 0 and at the next page inside
    // the mapping, which the QpRings keeps alive; entries is a power of two.
    let (sq, rq) = unsafe {
        (
            Ring::new(map.ptr(), entries, ipc::ring::WQE_SIZE),
            Ring::new(
                map.ptr().add(len.next_multiple_of(4096)),
                4,
                ipc::ring::WQE_SIZE,
            ),
        )
    };
    dp.add_qp(QpRings {
        qpn,
        _map: map,
        sq,
        rq,
        sq_cons: 0,
        rq_cons: 0,
        send_cq: p.send_cq,
        recv_cq: p.recv_cq,
        broken: false,
        owner: 1,
        pd: p.ea.pd,
        ud: false,
        srq: None,
    });
    let page = dp.doorbell_page(1).expect("page");
    // SAFETY: the page's mapping outlives the test's use of the view (the
    // data plane keeps it).
    let db = unsafe { ipc::doorbell::Doorbells::new(page.ptr()) };
    (qpn, sq, db)
}

/// Publishes `n` WRITE WQEs on `sq` from index `from`, without ringing.
fn publish(p: &Pair, sq: &Ring, from: u32, n: u32) {
    for i in from..from + n {
        let op = SendOp::Write {
            remote_addr: p.eb.base,
            rkey: p.eb.rkey,
        };
        let wr = SendWr::new(u64::from(i), op, Sgl::single(p.ea.base, 64, p.ea.lkey));
        sq.write(i, &ipc::ring::encode_send(&wr));
    }
    sq.producer().store(from + n, SeqCst);
}

/// A client that posted on the engine's CPU while it parked makes the
/// engine count as sharing that CPU for [`NEAR_WINDOW`]; one on another
/// CPU does not, and the word is taken either way.
#[test]
fn a_client_posting_on_the_engines_cpu_makes_it_share_the_cpu_for_a_while() {
    let mut p = pair();
    let mut dp = DataPlane::default();
    let (_, _, db) = qp_with_ring(&mut p, &mut dp, 128);
    // stay on one CPU while naming it
    let here = nic::engine::current_cpu().expect("sched_getcpu");
    assert!(core_affinity::set_for_current(core_affinity::CoreId {
        id: here as usize
    }));
    let now = p.a.last_now();
    assert!(!dp.shares_cpu(now));
    db.near().store(here + 2, SeqCst);
    dp.turn(&mut p.a);
    assert_eq!(db.near().load(SeqCst), 0, "taken");
    assert!(!dp.shares_cpu(now), "another CPU");
    db.near().store(here + 1, SeqCst);
    dp.turn(&mut p.a);
    assert_eq!(db.near().load(SeqCst), 0, "taken");
    assert!(dp.shares_cpu(now));
    assert!(!dp.shares_cpu(now + NEAR_WINDOW), "only for a while");
}

/// The engine fetches from the rings whose doorbells were rung, and only
/// those; a ring left with more than a batch is fetched from again
/// without another ring.
#[test]
fn the_data_plane_fetches_from_rung_rings_only() {
    let mut p = pair();
    let mut dp = DataPlane::default();
    let (_, sq, db) = qp_with_ring(&mut p, &mut dp, 128);
    publish(&p, &sq, 0, 1);
    dp.turn(&mut p.a);
    assert_eq!(sq.consumer().load(SeqCst), 0, "not rung: not fetched");
    db.ring(sq.slot().load(SeqCst));
    dp.turn(&mut p.a);
    assert_eq!(sq.consumer().load(SeqCst), 1, "rung: fetched");
    let more = BATCH + 5;
    publish(&p, &sq, 1, more);
    db.ring(sq.slot().load(SeqCst));
    dp.turn(&mut p.a);
    assert_eq!(sq.consumer().load(SeqCst), 1 + BATCH, "one batch a turn");
    assert!(!dp.announce_park(&PARK), "work left: no park");
    dp.end_park();
    dp.turn(&mut p.a);
    assert_eq!(sq.consumer().load(SeqCst), 1 + more, "the rest, unrung");
    assert!(dp.announce_park(&PARK), "nothing left: park");
    assert_eq!(
        db.parked().load(SeqCst),
        ipc::doorbell::park_word(PARK.cpu, PARK.self_wake)
    );
    // a post while parked is seen by the park check
    publish(&p, &sq, 1 + more, 1);
    db.ring(sq.slot().load(SeqCst));
    assert!(!dp.announce_park(&PARK));
    dp.end_park();
    assert_eq!(db.parked().load(SeqCst), 0);
}

/// Bits a client sets for no ring of its own, or for rings with nothing
/// posted, cost nothing but a look.
#[test]
fn stray_doorbells_fetch_nothing() {
    let mut p = pair();
    let mut dp = DataPlane::default();
    let (_, sq, _) = qp_with_ring(&mut p, &mut dp, 16);
    let page = dp.doorbell_page(1).expect("page");
    // SAFETY: inside the page's mapping, which the data plane keeps.
    unsafe { std::ptr::write_bytes(page.ptr(), 0xff, ipc::doorbell::PAGE_LEN) };
    assert_eq!(dp.turn(&mut p.a), 0);
    assert_eq!(sq.consumer().load(SeqCst), 0);
    assert!(dp.announce_park(&PARK), "the bits were taken");
}
