//! rnicd killed under programs waiting in `rdma_get_cm_event` is, to them,
//! their RDMA device removed: tests/c/removal_check.c (every ID hears
//! RDMA_CM_EVENT_DEVICE_REMOVAL once, later calls fail with ENODEV,
//! teardown succeeds), and Debian's `rping` and `rdma_server` waiting for
//! a connection (they exit in error, rping reporting the removal); a new
//! rnicd on the same socket folder then serves new programs.

mod common;

use common::{Daemon, Running};
use std::io::{BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a program may take to end once its device is gone: far more
/// than it needs (it is woken at once), far less than a hang.
const AFTER_DEATH: Duration = Duration::from_secs(20);

#[test]
fn a_program_waiting_for_cm_events_hears_its_devices_removed_when_rnicd_dies() {
    if let Err(why) = common::prerequisites(&[]) {
        return testkit::skip_or_fail("the CM device removal test", &why);
    }
    let mut d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = common::c_program(dir.path(), "removal_check");
    let mut child = common::command(&d, &bin, &["7480"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run removal_check");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut text = testkit::proc::read_until_line(&mut out, "READY");
    assert!(text.ends_with("READY\n"), "never ready:\n{text}");
    d.kill();
    // the program's own alarm (30 s) ends it if anything waits for ever
    let done = child.wait_with_output().expect("wait");
    let _ = out.read_to_string(&mut text);
    let text = text + &String::from_utf8_lossy(&done.stderr);
    assert!(
        done.status.success() && text.contains("\n0 failures"),
        "{}:\n{text}",
        done.status
    );
    assert_eq!(
        text.matches("event RDMA_CM_EVENT_DEVICE_REMOVAL status 0")
            .count(),
        3,
        "{text}"
    );
    // the library says why the waiting call came back
    assert!(
        text.contains("softrnic-rdmacm: rdma_get_cm_event: device t0: the daemon is gone"),
        "{text}"
    );
}

/// Waits until `p` (named `what`) ends, at most [`AFTER_DEATH`]: it must
/// end by itself, in error.
fn ends_in_error(p: Running, what: &str) -> common::Finished {
    let f = p.finish(Instant::now() + AFTER_DEATH);
    assert!(
        f.status.is_some(),
        "{what} still waited {AFTER_DEATH:?} after its device was removed:\n{f}"
    );
    assert!(!f.ok(), "{what} succeeded on a removed device:\n{f}");
    f
}

#[test]
fn servers_waiting_for_a_client_exit_when_rnicd_dies_and_a_new_one_serves() {
    if let Err(why) = common::prerequisites(&["rping", "rdma_server"]) {
        return testkit::skip_or_fail("the CM servers' device removal test", &why);
    }
    let mut d = Daemon::start();
    let sock = d.sock_dir().join("t0.sock");
    let args = |role| [role, "-v", "-C", "20", "-a", "127.0.0.1", "-p", "7472"];
    // rping waits in rdma_get_cm_event on a channel; rdma_server in
    // rdma_get_request on a synchronous listener
    let mut rping = common::start(&d, "rping", &args("-s"));
    common::wait_listening(&sock, 0, &mut rping);
    let mut rdma_server = common::start(&d, "rdma_server", &["-s", "127.0.0.1", "-p", "7473"]);
    common::wait_listening(&sock, 1, &mut rdma_server);
    assert!(
        !rping.ended() && !rdma_server.ended(),
        "a server ended before rnicd was killed"
    );
    d.kill();
    let r = ends_in_error(rping, "rping -s");
    // rping's CM thread on RDMA_CM_EVENT_DEVICE_REMOVAL
    assert!(r.text().contains("cma detected device removal"), "{r}");
    let s = ends_in_error(rdma_server, "rdma_server");
    // the removal is not a request: EINVAL, as librdmacm answers
    assert!(
        s.text().contains("rdma_get_request: Invalid argument"),
        "{s}"
    );
    // a new rnicd on the same socket folder serves a new pair
    d.restart();
    let (server, client) =
        common::server_and_client(&d, "t0", ("rping", &args("-s")), ("rping", &args("-c")));
    assert!(client.ok() && server.ok(), "{client}\n{server}");
    assert!(
        client.stdout.contains("ping data: rdma-ping-19: "),
        "{client}"
    );
}
