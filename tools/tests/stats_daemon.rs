//! `rnic stats --daemon`: the counters of running rnicd devices
//! (an `rnicd --mem-pair` of the test's own), named as the daemon counts
//! them, one `link DEV/1 ...` line per device, and as JSON; with `--qp`,
//! each QP's DCQCN state (`qp DEV/1 lqpn N ...`), also across pages.

mod common;

use common::rnic;
use softrnic::client::cm::{CmClient, CmEventKind, CmQpType, ConnParam, EventChannel, PortSpace};
use softrnic::{Context, QpInitAttr, QpKind};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// The next event on `ch`, waiting on its descriptor.
fn event(ch: &EventChannel) -> softrnic::client::cm::CmEventMsg {
    let mut p = libc::pollfd {
        fd: ch.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd that lives across the call.
    let n = unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) };
    assert_eq!(n, 1, "no CM event within {T:?}");
    ch.next(true).unwrap().expect("readable: an event")
}

/// `rnic stats --daemon` with `flags` over the sockets in `dir`: its
/// output, once it succeeded.
fn stats_daemon(state: &std::path::Path, dir: &std::path::Path, flags: &[&str]) -> String {
    let out = rnic(state)
        .args(["stats", "--daemon"])
        .args(flags)
        .arg("--sock-dir")
        .arg(dir)
        .assert()
        .success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

/// An RC QP on `cq` with room for 4 work requests each way.
fn rc_on(cq: u32) -> QpInitAttr {
    QpInitAttr {
        qp_type: QpKind::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
        sq_sig_all: true,
        srq: None,
    }
}

#[test]
fn stats_daemon_shows_each_devices_transport_and_cm_counters() {
    let state = tempfile::tempdir().unwrap();
    let daemon = testkit::rnicd::Daemon::start();
    let dir = daemon.sock_dir();
    // a connect to a port nobody listens on: a REQ out, a REJ back
    let sock = &dir.join("t0.sock");
    let ctx = Context::open(sock).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&rc_on(cq.handle)).unwrap();
    let cm = CmClient::open(sock).unwrap();
    let ch = EventChannel::open(sock).unwrap();
    let id = cm
        .create_id(ch.token(), PortSpace::TCP, CmQpType::Rc, 1)
        .unwrap();
    let dst = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 7900);
    cm.resolve_addr(id, None, dst, 2000).unwrap();
    assert_eq!(event(&ch).kind, CmEventKind::ADDR_RESOLVED);
    cm.resolve_route(id, 2000).unwrap();
    assert_eq!(event(&ch).kind, CmEventKind::ROUTE_RESOLVED);
    let param = ConnParam {
        qpn: qp.qpn,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    cm.connect(id, &param).unwrap();
    assert_eq!(event(&ch).kind, CmEventKind::REJECTED);

    let text = stats_daemon(state.path(), dir, &[]);
    let line = |kind: &str, dev: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{kind} {dev}/1 ")))
            .unwrap_or_else(|| panic!("no {kind} line for {dev}: {text}"))
            .to_string()
    };
    let (st0, st1) = (line("cm", "t0"), line("cm", "t1"));
    // the REQ and the REJ crossed the ports
    let count = |l: &str, name: &str| -> u64 {
        let mut w = l.split_whitespace();
        w.find(|x| *x == name)
            .and_then(|_| w.next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {l}"))
    };
    for dev in ["t0", "t1"] {
        let l = line("link", dev);
        assert!(count(&l, "tx_packets") >= 1, "{l}");
        assert!(count(&l, "rx_packets") >= 1, "{l}");
        assert_eq!(count(&l, "retry_exceeded_err"), 0, "{l}");
    }
    for needle in [" cm_tx_req 1", " cm_rx_rej 1", " cm_ids 1"] {
        assert!(st0.contains(needle), "{needle}: {st0}");
    }
    for needle in [" cm_rx_req 1", " cm_tx_rej 1"] {
        assert!(st1.contains(needle), "{needle}: {st1}");
    }

    let doc: serde_json::Value =
        serde_json::from_str(&stats_daemon(state.path(), dir, &["--json"])).unwrap();
    let devs = doc["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2, "{doc}");
    assert_eq!(devs[1]["cm_counters"]["cm_tx_rej"], 1, "{doc}");
    assert!(
        devs[1]["counters"]["rx_packets"].as_u64() >= Some(1),
        "{doc}"
    );

    // no daemon there: a one-line error
    let empty = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["stats", "--daemon", "--sock-dir"])
        .arg(empty.path())
        .assert()
        .failure()
        .code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(err.contains("no running rnicd device"), "{err}");
}

#[test]
fn stats_daemon_qp_shows_each_qps_dcqcn_state() {
    let state = tempfile::tempdir().unwrap();
    let daemon = testkit::rnicd::Daemon::start();
    let dir = daemon.sock_dir();
    let ctx = Context::open(dir.join("t0.sock")).unwrap();
    let line_bps = ctx.query_port(1).unwrap().link_speed_bps;
    assert!(line_bps > 0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = rc_on(cq.handle);
    let qps = [pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap()];

    // through the client API: both QPs, never cut, at the line rate
    let cc = ctx.cc_states().unwrap();
    assert_eq!(cc.line_bps, line_bps);
    let got: Vec<u32> = cc.qps.iter().map(|q| q.qpn).collect();
    assert_eq!(got, [qps[0].qpn, qps[1].qpn]);
    for q in &cc.qps {
        assert!(q.state.enabled && !q.state.limited, "{q:?}");
        assert_eq!(
            (q.state.rc_bps, q.state.rt_bps),
            (line_bps, line_bps),
            "{q:?}"
        );
        assert_eq!((q.state.cuts, q.state.cnps_handled), (0, 0), "{q:?}");
        // before any CNP: the α a first CNP starts from (NVIDIA: 1023/1024)
        assert_eq!(q.state.alpha, 1023.0 / 1024.0, "{q:?}");
    }

    let text = stats_daemon(state.path(), dir, &["--qp"]);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("qp t0/1 ")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (l, qp) in lines.iter().zip(&qps) {
        let want = format!(
            "qp t0/1 lqpn {} rc_bps {line_bps} rt_bps {line_bps} alpha 0.9990234375 limited 0 enabled 1 cuts 0 rp_cnp_handled 0",
            qp.qpn
        );
        assert_eq!(*l, want, "{text}");
    }
    assert!(!text.contains("qp t1/1 "), "t1 has no QP: {text}");

    let doc: serde_json::Value =
        serde_json::from_str(&stats_daemon(state.path(), dir, &["--qp", "--json"])).unwrap();
    let cc = &doc["devices"][0]["dcqcn"];
    assert_eq!(cc["line_bps"], line_bps, "{doc}");
    assert_eq!(cc["qps"][1]["lqpn"], qps[1].qpn, "{doc}");
    assert_eq!(cc["qps"][1]["state"]["rc_bps"], line_bps, "{doc}");

    // without --qp: no QP lines
    let text = stats_daemon(state.path(), dir, &[]);
    assert!(!text.lines().any(|l| l.starts_with("qp ")), "{text}");

    // more QPs than one answer carries: the client joins the pages
    let more: Vec<_> = (0..softrnic::proto::CC_STATES_PER_PAGE)
        .map(|_| pd.create_qp(&init).unwrap())
        .collect();
    let all = ctx.cc_states().unwrap();
    let want: Vec<u32> = qps.iter().chain(&more).map(|q| q.qpn).collect();
    let got: Vec<u32> = all.qps.iter().map(|q| q.qpn).collect();
    assert_eq!(got, want);
}
