//! Completion events (`ibv_req_notify_cq` / `ibv_get_cq_event`) through the
//! daemon: the client arms its CQ in the ring header and the daemon writes
//! the CQ's eventfd when a completion the request asks for arrives — any
//! completion, or with "solicited only" one with the Solicited Event bit
//! (IBTA 11.4.2.2); one request, one event. The daemon is a separate
//! process (rnicd on the in-memory wire); the test uses the Rust client
//! library in-process.

mod common;

use common::{tempdir, wait_for, Daemon, T};
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

/// Two clients of one `rnicd --mem-pair` (devices t0 and t1), each with a
/// PD, a 64 KiB buffer registered with every access, a CQ of 64 and an RC
/// QP on it connected to the other's; with `srq`, t1's QP takes its
/// receives from an SRQ of 16. `bystander` is another client of t1 that
/// owns nothing (events must not reach it).
struct RcPair {
    _d: Daemon,
    ctxs: [std::sync::Arc<Context>; 2],
    bystander: std::sync::Arc<Context>,
    _pds: Vec<softrnic::Pd>,
    _bufs: Vec<softrnic::Buffer>,
    mrs: Vec<softrnic::Mr>,
    cqs: Vec<Cq>,
    qps: Vec<softrnic::Qp>,
    srq: Option<softrnic::Srq>,
}

fn rc_pair(tag: &str, srq: bool) -> RcPair {
    let dir = tempdir(tag);
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let ctxs = [
        Context::open(d.sock("t0")).expect("t0"),
        Context::open(d.sock("t1")).expect("t1"),
    ];
    let bystander = Context::open(d.sock("t1")).expect("t1 again");
    let pds: Vec<_> = ctxs.iter().map(|c| c.alloc_pd().unwrap()).collect();
    let bufs: Vec<_> = pds
        .iter()
        .map(|p| p.alloc_buffer(1 << 16).unwrap())
        .collect();
    let mrs: Vec<_> = (0..2)
        .map(|i| pds[i].reg_mr(&bufs[i], 0, 1 << 16, ACCESS_ALL).unwrap())
        .collect();
    let cqs: Vec<Cq> = ctxs.iter().map(|c| c.create_cq(64).unwrap()).collect();
    let srq = srq.then(|| pds[1].create_srq(16).unwrap());
    let qps: Vec<_> = (0..2)
        .map(|i| {
            pds[i]
                .create_qp(&QpInitAttr {
                    qp_type: QpKind::Rc,
                    send_cq: cqs[i].handle,
                    recv_cq: cqs[i].handle,
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    sq_sig_all: true,
                    srq: if i == 1 {
                        srq.as_ref().map(|s| s.handle)
                    } else {
                        None
                    },
                })
                .unwrap()
        })
        .collect();
    for i in 0..2 {
        let (g, m) = (ctxs[1 - i].device.gid, ctxs[1 - i].device.mac);
        qps[i]
            .connect(
                &ConnectParams::default(),
                AhAttr::new(g, m),
                qps[1 - i].qpn,
                1,
                1,
            )
            .unwrap();
    }
    RcPair {
        _d: d,
        ctxs,
        bystander,
        _pds: pds,
        _bufs: bufs,
        mrs,
        cqs,
        qps,
        srq,
    }
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

    // a blocked waiter wakes: nothing is posted until the waiter's thread
    // is blocked in ppoll(2), as its /proc syscall file shows
    rcq.req_notify(false).unwrap();
    let fd = rcq.event_fd().unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let limit = libc::timespec {
            tv_sec: T.as_secs() as libc::time_t,
            tv_nsec: 0,
        };
        // SAFETY: one valid pollfd and a valid timeout; no signal mask; the
        // CQ outlives this thread (joined below)
        unsafe { libc::ppoll(&mut p, 1, &limit, std::ptr::null()) == 1 }
    });
    let tid = tid_rx.recv().unwrap();
    let syscall = format!("/proc/self/task/{tid}/syscall");
    wait_for(T, "the waiter blocked in ppoll(2)", || {
        // "<number> <arguments...>" while blocked in a system call
        let now = std::fs::read_to_string(&syscall).unwrap_or_default();
        match now
            .split_whitespace()
            .next()
            .map(str::parse::<libc::c_long>)
        {
            Some(Ok(n)) if n == libc::SYS_ppoll => Ok(()),
            _ => Err(format!("{syscall}: {now:?}")),
        }
    });
    send(a, 5, true);
    assert!(t.join().unwrap(), "ppoll(2) on the event fd timed out");
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

/// The SRQ limit (`ibv_modify_srq` / `ibv_query_srq`) and its asynchronous
/// event (`ibv_get_async_event`): armed at 3 over 4 receives, the second
/// SEND leaves 2 and the owner gets SRQ_LIMIT_REACHED once; the limit reads
/// 0 afterwards; another client of the same device gets nothing.
#[test]
fn the_srq_limit_event_reaches_its_owner_once() {
    use softrnic::proto::AsyncEventMsg;
    let RcPair {
        _d,
        ctxs,
        bystander,
        mrs,
        mut cqs,
        qps,
        srq,
        ..
    } = rc_pair("srqlim", true);
    let mut srq = srq.expect("asked for an SRQ");
    for k in 0..4u64 {
        srq.post_recv(&RecvWr {
            wr_id: k,
            sgl: Sgl::single(mrs[1].addr + k * 64, 64, mrs[1].lkey),
        })
        .unwrap();
    }
    assert!(srq.arm_limit(17).is_err(), "a limit above the SRQ's size");
    srq.arm_limit(3).unwrap();
    let (max_wr, limit, _) = srq.query().unwrap();
    assert_eq!((max_wr, limit), (16, 3));
    assert_eq!(ctxs[1].get_async_event(Duration::ZERO).unwrap(), None);
    let mut qa = qps.into_iter();
    let mut a = qa.next().unwrap();
    for id in 0..2 {
        let wr = SendWr::new(id, SendOp::Send, Sgl::single(mrs[0].addr, 16, mrs[0].lkey));
        a.post_send(&wr).unwrap();
        assert_eq!(one(&mut cqs[0]).status, WcStatus::Success);
        assert_eq!(one(&mut cqs[1]).status, WcStatus::Success);
    }
    assert_eq!(
        ctxs[1].get_async_event(Duration::from_secs(30)).unwrap(),
        Some(AsyncEventMsg::SrqLimitReached { srq: srq.handle })
    );
    assert_eq!(srq.query().unwrap().1, 0, "disarmed once fired");
    let wr = SendWr::new(9, SendOp::Send, Sgl::single(mrs[0].addr, 16, mrs[0].lkey));
    a.post_send(&wr).unwrap();
    one(&mut cqs[1]);
    assert_eq!(
        ctxs[1].get_async_event(Duration::ZERO).unwrap(),
        None,
        "one event"
    );
    assert_eq!(bystander.get_async_event(Duration::ZERO).unwrap(), None);
    assert_eq!(ctxs[0].get_async_event(Duration::ZERO).unwrap(), None);
}

/// QP events through the daemon: a WRITE with a wrong R_Key makes the
/// responder NAK and fail its QP; QP_ACCESS_ERR reaches the client owning
/// that QP only (not the requester's client, not another client of the
/// same device). The wire format of the events: snake_case `type` tags,
/// the SRQ one.
#[test]
fn qp_access_error_event_reaches_its_owner_only() {
    use softrnic::proto::AsyncEventMsg;
    let old = r#"{"type":"srq_limit_reached","srq":3}"#;
    let ev: AsyncEventMsg = serde_json::from_str(old).unwrap();
    assert_eq!(ev, AsyncEventMsg::SrqLimitReached { srq: 3 });
    assert_eq!(serde_json::to_string(&ev).unwrap(), old);
    assert_eq!(ev.ibv_event_type(), Some(15));
    assert_eq!(
        serde_json::to_string(&AsyncEventMsg::QpLastWqeReached { qp: 17 }).unwrap(),
        r#"{"type":"qp_last_wqe_reached","qp":17}"#
    );
    let RcPair {
        _d,
        ctxs,
        bystander,
        mrs,
        mut cqs,
        mut qps,
        ..
    } = rc_pair("qpev", false);
    let bad = SendOp::Write {
        remote_addr: mrs[1].addr,
        rkey: mrs[1].rkey ^ 0x100,
    };
    let wr = SendWr::new(1, bad, Sgl::single(mrs[0].addr, 16, mrs[0].lkey));
    qps[0].post_send(&wr).unwrap();
    assert_eq!(one(&mut cqs[0]).status, WcStatus::RemAccessErr);
    assert_eq!(
        ctxs[1].get_async_event(Duration::from_secs(30)).unwrap(),
        Some(AsyncEventMsg::QpAccessErr { qp: qps[1].qpn })
    );
    assert_eq!(ctxs[1].get_async_event(Duration::ZERO).unwrap(), None);
    assert_eq!(bystander.get_async_event(Duration::ZERO).unwrap(), None);
    assert_eq!(ctxs[0].get_async_event(Duration::ZERO).unwrap(), None);
}
