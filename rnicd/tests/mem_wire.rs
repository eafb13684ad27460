//! The daemon on the in-memory wire (one rnicd, devices t0 and t1 on the
//! two ends): client processes on each device.

mod common;

use common::{pair, stats, tempdir, wait_for, wait_until, Client, Daemon, LONG_RUN, T};
use std::time::{Duration, Instant};

fn daemon(tag: &str) -> Daemon {
    let dir = tempdir(tag);
    Daemon::start(None, &["--mem-pair", "--name", "t"], &dir)
}

/// SEND, WRITE, WRITE_WITH_IMM, READ and
/// both atomics between two client processes; data checked on both sides.
#[test]
fn two_processes_every_verb_over_mem_wire() {
    every_verb(daemon("verbs"));
}

/// The same with both devices on one engine thread (`--one-thread`).
#[test]
fn two_processes_every_verb_with_one_engine_thread() {
    let dir = tempdir("verbs1");
    every_verb(Daemon::start(
        None,
        &["--mem-pair", "--one-thread", "--name", "t"],
        &dir,
    ));
}

/// `rnicd --user nobody`: once the ports are open and the sockets bound, the
/// daemon the clients talk to holds no root rights (real, effective, saved
/// and filesystem IDs all nobody's) and still serves every verb.
#[test]
fn a_daemon_run_as_nobody_serves_every_verb() {
    let test = "a_daemon_run_as_nobody_serves_every_verb";
    // SAFETY: plain getter
    if unsafe { libc::geteuid() } != 0 {
        testkit::skip_or_fail(test, "switching users needs root");
        return;
    }
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: getpwnam on a C string; the result is read at once
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null(), "{test}: no user nobody");
    // SAFETY: non-null, from getpwnam
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    let dir = tempdir("nobody");
    let d = Daemon::start(
        None,
        &["--mem-pair", "--name", "t", "--user", "nobody"],
        &dir,
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let ids = |key: &str| -> Vec<u32> {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        line.split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    assert_eq!(ids("Uid:"), vec![uid; 4], "{status}");
    assert_eq!(ids("Gid:"), vec![gid; 4], "{status}");
    assert!(status
        .lines()
        .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1')));
    let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(
        groups.split_whitespace().count(),
        1,
        "supplementary groups: {groups}"
    );
    every_verb(d);
}

/// The engine parks for up to 10 minutes when idle (`--park-us`), so
/// every post after a pause and every control call must wake it through
/// its bell (clients ring the eventfd when the ring says "parked"); the
/// clients' lines time out long before a park would end by itself. The
/// idle pauses here are the clients' own set-up steps between posts.
#[test]
fn a_parked_engine_wakes_for_posts_and_calls() {
    for extra in [&[][..], &["--one-thread"][..]] {
        let dir = tempdir("bell");
        let mut args = vec![
            "--mem-pair",
            "--name",
            "t",
            "--spin",
            "1",
            "--park-us",
            "600000000",
        ];
        args.extend(extra);
        let t0 = Instant::now();
        every_verb(Daemon::start(None, &args, &dir));
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "{extra:?}: a post waited for the park to end"
        );
    }
}

fn every_verb(d: Daemon) {
    let mut a = Client::spawn("a", None, "verbs-a", &d.sock("t0"), &[]);
    let mut b = Client::spawn("b", None, "verbs-b", &d.sock("t1"), &[]);
    pair(&mut a, &mut b);
    b.expect("READY");
    a.send("GO");
    a.expect("OK verbs-a");
    b.send("CHECK");
    b.expect("OK verbs-b");
    assert_eq!(a.finish(), Some(0));
    assert_eq!(b.finish(), Some(0));
}

fn pingpong_pair(d: &Daemon, tag: &str, qps: usize, iters: u64) -> (Client, Client) {
    let q = qps.to_string();
    let it = iters.to_string();
    // 4.096 us * 2^17 = 0.54 s per try, 7 retries: a machine loaded by
    // other jobs may starve the daemon's engine for a while, and these
    // pairs must not give up (the victim's peer uses short timeouts)
    let args = [
        "--qps",
        q.as_str(),
        "--iters",
        it.as_str(),
        "--timeout",
        "17",
        "--retry",
        "7",
    ];
    let mut a = Client::spawn(
        &format!("{tag}-lead"),
        None,
        "pingpong-lead",
        &d.sock("t0"),
        &args,
    );
    let mut b = Client::spawn(
        &format!("{tag}-follow"),
        None,
        "pingpong",
        &d.sock("t1"),
        &args,
    );
    pair(&mut a, &mut b);
    a.expect("READY");
    b.expect("READY");
    (a, b)
}

fn wait_stats(sock: &str, what: &str, ok: impl Fn(&softrnic::Stats) -> bool) -> softrnic::Stats {
    wait_for(T, what, || {
        let s = stats(sock);
        if ok(&s) {
            Ok(s)
        } else {
            Err(format!("{s:?}"))
        }
    })
}

/// a client killed with SIGKILL mid-transfer. The daemon
/// frees its QPs, MR, CQ and PD (seen through the daemon's stats), the
/// peer's QP completes with an error, and another pair on the same devices
/// carries on.
#[test]
fn sigkilled_client_is_reaped_and_others_carry_on() {
    let d = daemon("kill");
    let (s0, s1) = (d.sock("t0"), d.sock("t1"));
    let before = stats(&s0);
    assert_eq!(before.qps, 0);
    // the victim (on t0) and its peer (on t1) stream WRITEs at each other
    // 4.096 us * 2^15 = 134 ms per try, 8 tries: the death is noticed
    // within about a second, while a daemon starved of CPU by a loaded
    // machine for a few hundred milliseconds does not look dead
    let opts = ["--timeout", "15", "--retry", "7"];
    let mut victim = Client::spawn("victim", None, "stream", &s0, &opts);
    let mut peer = Client::spawn("peer", None, "stream", &s1, &opts);
    pair(&mut victim, &mut peer);
    victim.expect("READY");
    peer.expect("READY");
    // a bystander pair on the same two devices
    let (mut c, mut e) = pingpong_pair(&d, "bystander", 4, 20_000);
    victim.send("GO");
    peer.send("GO");
    c.send("GO");
    e.send("GO");
    victim.expect("STREAMING");
    peer.expect("STREAMING");
    let s = stats(&s0);
    assert_eq!(s.qps, 1 + 4, "{s:?}");
    victim.kill();
    // the daemon tears the victim down: only the bystander's objects stay
    // (the stats connections themselves come and go, and own nothing)
    let s = wait_stats(&s0, "victim reaped", |s| {
        s.qps == 4
            && s.active_qp_rings == 4
            && s.rnic_qps == 4
            && (s.pds, s.mrs, s.cqs, s.active_cq_rings) == (1, 1, 1, 1)
    });
    assert!(s.clients_reaped >= 1, "{s:?}");
    // the peer's QP reports errors
    let l = peer.expect("PEER_ERROR");
    assert!(l.contains("RetryExcErr"), "{l}");
    // the bystanders finish untouched (their client fails itself after a
    // minute without a round trip; the whole run may take longer under load)
    c.expect_within("OK pingpong", LONG_RUN);
    e.expect_within("OK pingpong", LONG_RUN);
    assert_eq!(c.finish(), Some(0));
    assert_eq!(e.finish(), Some(0));
    drop(peer);
    wait_stats(&s0, "all reaped", |s| {
        s.qps == 0 && s.pds == 0 && s.active_qp_rings == 0
    });
}

/// a hostile client posts WQEs with bad opcodes, SGE counts,
/// lkeys, lengths and flags, and scribbles random bytes over its rings: it
/// gets error completions; the daemon and another pair are unaffected.
#[test]
fn hostile_client_gets_errors_others_unaffected() {
    let mut d = daemon("hostile");
    let (s0, s1) = (d.sock("t0"), d.sock("t1"));
    let mut h = Client::spawn("hostile", None, "hostile", &s0, &[]);
    let info = h.expect("INFO");
    // a peer that does not exist: the other device's address, no QPs
    let f: Vec<&str> = info.split_whitespace().collect();
    let peer_dev = softrnic::Context::open(&s1).unwrap();
    let g = peer_dev.device.gid.to_hex();
    let m = peer_dev.device.mac.0;
    let mac = format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    );
    let qpns: Vec<String> = (0..f.len() - 4).map(|i| (0x9000 + i).to_string()).collect();
    h.send(&format!("PEER {g} {mac} 4096 1 {}", qpns.join(" ")));
    h.expect("READY");
    let (mut c, mut e) = pingpong_pair(&d, "bystander", 8, 5_000);
    c.send("GO");
    e.send("GO");
    h.send("GO");
    let l = h.expect("OK hostile");
    assert!(l.starts_with("7 error completions"), "{l}");
    // (the bystanders' run may take minutes on a loaded machine; their
    // client fails itself after a minute without a round trip)
    c.expect_within("OK pingpong", LONG_RUN);
    e.expect_within("OK pingpong", LONG_RUN);
    assert!(d.alive(), "the daemon survived");
    // and still serves: a fresh pair does every verb
    let mut a = Client::spawn("a", None, "verbs-a", &s0, &[]);
    let mut b = Client::spawn("b", None, "verbs-b", &s1, &[]);
    pair(&mut a, &mut b);
    b.expect("READY");
    a.send("GO");
    a.expect("OK verbs-a");
    b.send("CHECK");
    b.expect("OK verbs-b");
    drop(h);
    assert!(d.alive());
}

/// 10 processes with 100 QPs each on one daemon (5 on each
/// device, in pairs) all complete a ping-pong.
#[test]
fn ten_processes_hundred_qps_each_pingpong() {
    let d = daemon("scale");
    let mut pairs = Vec::new();
    for i in 0..5 {
        pairs.push(pingpong_pair(&d, &format!("p{i}"), 100, 50));
    }
    let s = stats(&d.sock("t0"));
    assert_eq!(s.qps, 500, "{s:?}");
    for (a, b) in pairs.iter_mut() {
        a.send("GO");
        b.send("GO");
    }
    for (a, b) in pairs.iter_mut() {
        a.expect("OK pingpong 100 QPs x 50");
        b.expect("OK pingpong 100 QPs x 50");
    }
}

/// Malformed control messages get an error reply; the connection and the
/// daemon survive.
#[test]
fn malformed_control_messages_are_refused() {
    let d = daemon("proto");
    let s = softrnic::shm::SeqPacket::connect(std::path::Path::new(&d.sock("t0"))).unwrap();
    let mut buf = Vec::new();
    for m in [
        &b"not json"[..],
        br#"{"v":2,"req":{"op":"alloc_pd"}}"#,
        br#"{"v":1,"req":{"op":"modify_qp","qpn":17,"attr":{"state":"bogus"}}}"#,
        br#"{"v":1,"req":{"op":"create_qp","pd":0,"qp_type":"rc","send_cq":0,"recv_cq":0,"max_send_wr":0,"max_recv_wr":1,"sq_sig_all":false}}"#,
        br#"{"v":1,"req":{"op":"reg_mr","pd":0,"offset":0,"addr":0,"len":1,"access":1}}"#,
        br#"{"v":1,"req":{"op":"destroy_qp","qpn":4294967295}}"#,
        br#"{"v":1,"req":{"op":"create_cq","cqe":4294967295}}"#,
        br#"{"v":1,"req":{"op":"create_ah","pd":0,"attr":{"dgid":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"dmac":[0,0,0,0,0,0],"traffic_class":0,"hop_limit":64,"flow_label":0}}}"#,
        br#"{"v":1,"req":{"op":"destroy_ah","ah":1}}"#,
        br#"{"v":1,"req":{"op":"create_srq","pd":0,"max_wr":16}}"#,
        br#"{"v":1,"req":{"op":"destroy_srq","srq":0}}"#,
        br#"{"v":1,"req":{"op":"create_qp","pd":0,"qp_type":"ud","send_cq":0,"recv_cq":0,"max_send_wr":1,"max_recv_wr":1,"sq_sig_all":false,"srq":0}}"#,
    ] {
        s.send(m, &[]).unwrap();
        assert!(s.recv(&mut buf).unwrap().is_some());
        let r: softrnic::proto::RespMsg = serde_json::from_slice(&buf).unwrap();
        assert!(matches!(r.resp, softrnic::proto::Response::Error { .. }), "{r:?}");
    }
    s.send(br#"{"v":1,"req":{"op":"alloc_pd"}}"#, &[]).unwrap();
    s.recv(&mut buf).unwrap();
    let r: softrnic::proto::RespMsg = serde_json::from_slice(&buf).unwrap();
    assert!(
        matches!(r.resp, softrnic::proto::Response::Pd { .. }),
        "{r:?}"
    );
    // with the PD: an AH whose flow label is out of range, an SRQ of size
    // 0 are refused; a good AH and SRQ are made, and the PD cannot go
    // while they exist
    let softrnic::proto::Response::Pd { pd } = r.resp else {
        unreachable!()
    };
    let ah = |fl: u32| {
        format!(
            r#"{{"v":1,"req":{{"op":"create_ah","pd":{pd},"attr":{{"dgid":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"dmac":[0,0,0,0,0,0],"traffic_class":0,"hop_limit":64,"flow_label":{fl}}}}}}}"#
        )
    };
    let mut ask = |m: &str| -> softrnic::proto::Response {
        s.send(m.as_bytes(), &[]).unwrap();
        s.recv(&mut buf).unwrap();
        serde_json::from_slice::<softrnic::proto::RespMsg>(&buf)
            .unwrap()
            .resp
    };
    use softrnic::proto::Response as R;
    assert!(matches!(ask(&ah(1 << 20)), R::Error { .. }));
    assert!(matches!(ask(&ah(5)), R::Ah { .. }));
    let srq0 = format!(r#"{{"v":1,"req":{{"op":"create_srq","pd":{pd},"max_wr":0}}}}"#);
    assert!(matches!(ask(&srq0), R::Error { .. }));
    let dealloc = format!(r#"{{"v":1,"req":{{"op":"dealloc_pd","pd":{pd}}}}}"#);
    assert!(matches!(ask(&dealloc), R::Error { .. }));
    // another client cannot touch that PD
    let other = softrnic::Context::open(d.sock("t0")).unwrap();
    let s2 = stats(&d.sock("t0"));
    assert_eq!((s2.pds, s2.ahs), (1, 1));
    drop(other);
}

/// AH + UD: two client processes with UD QPs exchange SENDs
/// through daemon address handles (data, source QPN and GRH flag checked);
/// a send naming a handle that never existed, and one naming a destroyed
/// handle, complete with errors for that client only. A SIGKILLed client's
/// AH is freed.
#[test]
fn ud_sends_through_address_handles_and_bad_handles_fail() {
    let d = daemon("ud");
    let (s0, s1) = (d.sock("t0"), d.sock("t1"));
    let mut a = Client::spawn("ud-a", None, "ud", &s0, &[]);
    let mut b = Client::spawn("ud-b", None, "ud", &s1, &[]);
    pair(&mut a, &mut b);
    a.expect("READY");
    b.expect("READY");
    a.send("GO");
    b.send("GO");
    a.expect("OK ud");
    b.expect("OK ud");
    let s = stats(&s0);
    assert_eq!((s.ahs, s.qps), (2, 1), "{s:?}");
    a.kill();
    wait_stats(&s0, "UD client reaped", |s| {
        (s.ahs, s.qps, s.pds, s.active_qp_rings) == (0, 0, 0, 0)
    });
    assert_eq!(b.finish(), Some(0));
}

/// SRQ: two RC QPs on one SRQ both take its receives; the SRQ
/// is freed when its SIGKILLed owner is reaped.
#[test]
fn two_qps_on_one_srq_both_receive() {
    let d = daemon("srq");
    let (s0, s1) = (d.sock("t0"), d.sock("t1"));
    let mut a = Client::spawn("srq-send", None, "srq-send", &s0, &["--qps", "2"]);
    let mut b = Client::spawn("srq-recv", None, "srq-recv", &s1, &[]);
    pair(&mut a, &mut b);
    b.expect("READY");
    a.send("GO");
    a.expect("OK srq-send");
    let l = b.expect("OK srq");
    assert_eq!(l, "4 4", "messages per QP");
    let s = stats(&s1);
    assert_eq!((s.srqs, s.active_srq_rings, s.qps), (1, 1, 2), "{s:?}");
    b.kill();
    wait_stats(&s1, "SRQ client reaped", |s| {
        (s.srqs, s.active_srq_rings, s.qps, s.active_qp_rings) == (0, 0, 0, 0)
    });
    assert_eq!(a.finish(), Some(0));
}

/// SRQ rings are hostile input: a receive WQE with too many SGEs
/// completes with LOC_LEN_ERR on the receive CQ of a QP using the SRQ; a
/// wild producer index stops the daemon polling that SRQ (an error
/// completion); the daemon stays up and serves.
#[test]
fn hostile_srq_ring_gets_errors() {
    use nic::verbs::{RecvWr, Sgl, WcStatus};
    let mut d = daemon("srq-hostile");
    let ctx = softrnic::Context::open(d.sock("t0")).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buffer(1 << 16).unwrap();
    let mr = pd.reg_mr(&buf, 0, 1 << 16, softrnic::ACCESS_ALL).unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let mut srq = pd.create_srq(8).unwrap();
    let qp = pd
        .create_qp(&softrnic::QpInitAttr {
            qp_type: softrnic::QpKind::Rc,
            send_cq: cq.handle,
            recv_cq: cq.handle,
            max_send_wr: 4,
            max_recv_wr: 1,
            sq_sig_all: false,
            srq: Some(srq.handle),
        })
        .unwrap();
    // a good receive, then one whose SGE count the client corrupts in the
    // ring after posting (slot 1: header 128 + 192 bytes in, byte 10)
    let wr = |id| RecvWr {
        wr_id: id,
        sgl: Sgl::single(mr.addr, 64, mr.lkey),
    };
    let (base, len) = srq.raw_ring();
    assert!(len >= 128 + 2 * 192);
    // write slot 1 first (num_sge = 200), then publish both
    srq.post_recv(&wr(1)).unwrap();
    wait_until(T, "the daemon fetched the SRQ's first receive", || {
        srq.pending() == 0
    });
    // SAFETY: inside the SRQ ring mapping; the daemon must cope.
    unsafe {
        let slot1 = base.add(128 + 192);
        std::ptr::write_bytes(slot1, 0, 192);
        *(slot1 as *mut u64) = 2; // wr_id
        *slot1.add(10) = 200; // num_sge
        let prod = &*(base as *const std::sync::atomic::AtomicU32);
        prod.store(2, std::sync::atomic::Ordering::Release);
    }
    srq.ring_doorbell();
    let wc = cq.wait(1, T).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (2, WcStatus::LocLenErr),
        "{wc:?}"
    );
    // a wild producer index
    // SAFETY: as above.
    unsafe {
        let prod = &*(base as *const std::sync::atomic::AtomicU32);
        prod.store(0x7000_0000, std::sync::atomic::Ordering::Release);
    }
    srq.ring_doorbell();
    let wc = cq.wait(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::LocQpOpErr, "{wc:?}");
    let s = stats(&d.sock("t0"));
    assert_eq!((s.srqs, s.active_srq_rings), (1, 1), "{s:?}");
    assert!(d.alive(), "the daemon survived");
    drop((qp, srq, cq, mr, pd));
    drop(ctx);
    wait_stats(&d.sock("t0"), "reaped", |s| {
        (s.srqs, s.active_srq_rings, s.qps) == (0, 0, 0)
    });
}
