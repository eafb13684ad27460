//! Completion events (`ibv_req_notify_cq` / `ibv_get_cq_event`) through the
//! daemon: the client arms its CQ in the ring header and the daemon writes
//! the CQ's eventfd when a completion the request asks for arrives — any
//! completion, or with "solicited only" one with the Solicited Event bit
//! (IBTA 11.4.2.2); one request, one event. The daemon is a separate
//! process (rnicd on the in-memory wire); the test uses the Rust client
//! library in-process.

mod common;

use common::{tempdir, Daemon};
use nic::verbs::{AhAttr, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode, WcStatus};
use softrnic::{ConnectParams, Context, Cq, QpInitAttr, QpKind, ACCESS_ALL};
use std::time::{Duration, Instant};

/// Polls until a completion arrives (bounded), without touching events.
fn one(cq: &mut Cq) -> Wc {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while cq.poll(1, &mut out) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no completion");
        std::thread::yield_now();
    }
    out.remove(0)
}

#[test]
fn completion_events_follow_the_request_and_solicited_only_waits_for_the_bit() {
    let dir = tempdir("cqev");
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let ctxs = [
        Context::open(d.sock("t0")).expect("t0"),
        Context::open(d.sock("t1")).expect("t1"),
    ];
    let mut sides = Vec::new();
    for ctx in &ctxs {
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buffer(1 << 16).unwrap();
        let mr = pd.reg_mr(&buf, 0, 1 << 16, ACCESS_ALL).unwrap();
        let scq = ctx.create_cq(64).unwrap();
        let rcq = ctx.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpKind::Rc,
                send_cq: scq.handle,
                recv_cq: rcq.handle,
                max_send_wr: 64,
                max_recv_wr: 64,
                sq_sig_all: false,
                srq: None,
            })
            .unwrap();
        sides.push((pd, buf, mr, scq, rcq, qp));
    }
    for i in 0..2 {
        let (g, m) = (ctxs[1 - i].device.gid, ctxs[1 - i].device.mac);
        let peer = sides[1 - i].5.qpn;
        sides[i]
            .5
            .connect(&ConnectParams::default(), AhAttr::new(g, m), peer, 1, 1)
            .unwrap();
    }
    let (b, a) = {
        let (x, y) = sides.split_at_mut(1);
        (&mut y[0], &mut x[0])
    };
    for k in 0..8 {
        b.5.post_recv(&RecvWr {
            wr_id: k,
            sgl: Sgl::single(b.2.addr + k * 64, 64, b.2.lkey),
        })
        .unwrap();
    }
    let send = |a: &mut (_, _, softrnic::Mr, _, _, softrnic::Qp), id: u64, solicited: bool| {
        let mut wr = SendWr::new(id, SendOp::Send, Sgl::single(a.2.addr, 16, a.2.lkey));
        wr.flags.solicited = solicited;
        a.5.post_send(&wr).unwrap();
    };
    let rcq = &mut b.4;
    assert!(rcq.get_event(Duration::ZERO).is_err(), "no request yet");

    // solicited only: an ordinary SEND completes without an event
    rcq.req_notify(true).unwrap();
    assert!(rcq.event_fd().is_some());
    send(a, 1, false);
    let wc = one(rcq);
    assert_eq!(
        (wc.status, wc.opcode, wc.solicited),
        (WcStatus::Success, WcOpcode::Recv, false)
    );
    assert!(
        !rcq.get_event(Duration::ZERO).unwrap(),
        "an event for an unsolicited SEND"
    );
    // ... a solicited one raises it
    send(a, 2, true);
    assert!(
        rcq.get_event(Duration::from_secs(30)).unwrap(),
        "no event for a solicited SEND"
    );
    let wc = one(rcq);
    assert!(wc.solicited, "{wc:?}");

    // the next completion, whatever it is; one request, one event
    rcq.req_notify(false).unwrap();
    send(a, 3, false);
    assert!(
        rcq.get_event(Duration::from_secs(30)).unwrap(),
        "no event for the next completion"
    );
    one(rcq);
    send(a, 4, false);
    one(rcq);
    assert!(
        !rcq.get_event(Duration::ZERO).unwrap(),
        "a second event for one request"
    );

    // a blocked waiter wakes: nothing is posted until it sleeps
    rcq.req_notify(false).unwrap();
    let fd = rcq.event_fd().unwrap();
    let t = std::thread::spawn(move || {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the CQ outlives this thread (joined below)
        unsafe { libc::poll(&mut p, 1, 30_000) == 1 }
    });
    std::thread::sleep(Duration::from_millis(50));
    send(a, 5, true);
    assert!(t.join().unwrap(), "poll(2) on the event fd timed out");
    assert!(rcq.get_event(Duration::ZERO).unwrap());
    one(rcq);
}

/// A hostile or confused client: `notify_cq` without a descriptor, with
/// one that is not an eventfd, or for a CQ it does not own is refused.
#[test]
fn notify_cq_takes_only_an_eventfd_for_an_own_cq() {
    use softrnic::proto::{RespMsg, Response};
    use std::os::fd::AsRawFd;
    let dir = tempdir("cqevbad");
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let s = softrnic::shm::SeqPacket::connect(std::path::Path::new(&d.sock("t0"))).unwrap();
    let mut buf = Vec::new();
    let mut ask = |m: &str, fds: &[i32]| -> Response {
        s.send(m.as_bytes(), fds).unwrap();
        assert!(s.recv(&mut buf).unwrap().is_some());
        serde_json::from_slice::<RespMsg>(&buf).unwrap().resp
    };
    let Response::Cq { cq, .. } = ask(r#"{"v":1,"req":{"op":"create_cq","cqe":16}}"#, &[]) else {
        panic!("create_cq")
    };
    let notify = |cq: u32| format!(r#"{{"v":1,"req":{{"op":"notify_cq","cq":{cq}}}}}"#);
    let bell = nic::io::Bell::new().unwrap();
    let ev = {
        use std::os::fd::AsFd;
        bell.as_fd().as_raw_fd()
    };
    let mut pipe = [0i32; 2];
    // SAFETY: a two-int array for pipe(2)
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    for (m, fds, why) in [
        (notify(cq), vec![], "no descriptor"),
        (notify(cq), vec![pipe[0]], "a pipe"),
        (notify(cq), vec![ev, ev], "two descriptors"),
        (notify(cq ^ 0x5555), vec![ev], "somebody else's CQ"),
    ] {
        let r = ask(&m, &fds);
        assert!(matches!(r, Response::Error { .. }), "{why}: {r:?}");
    }
    assert!(matches!(ask(&notify(cq), &[ev]), Response::Ok));
    // SAFETY: closing our pipe ends
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
}
