//! rnicd killed under programs waiting in `rdma_get_cm_event` is, to them,
//! their RDMA device removed: tests/c/removal_check.c (every ID hears
//! RDMA_CM_EVENT_DEVICE_REMOVAL once, later calls fail with ENODEV,
//! teardown succeeds) and Debian's `rping` server waiting for a connection
//! (it reports the removal and exits in error); a new rnicd on the same
//! socket folder then serves new programs.

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

#[test]
fn an_rping_server_waiting_for_a_client_exits_when_rnicd_dies() {
    if let Err(why) = common::prerequisites(&["rping"]) {
        return testkit::skip_or_fail("the rping device removal test", &why);
    }
    let mut d = Daemon::start();
    let sock = d.sock_dir().join("t0.sock");
    let args = |role| [role, "-v", "-C", "20", "-a", "127.0.0.1", "-p", "7472"];
    let mut server: Running = common::start(&d, "rping", &args("-s"));
    common::wait_listening(&sock, 0, &mut server);
    assert!(!server.ended(), "rping -s ended before rnicd was killed");
    d.kill();
    let s = server.finish(Instant::now() + AFTER_DEATH);
    assert!(
        s.status.is_some(),
        "rping -s still waited {AFTER_DEATH:?} after its device was removed:\n{s}"
    );
    assert!(!s.ok(), "rping -s succeeded on a removed device:\n{s}");
    // rping's CM thread on RDMA_CM_EVENT_DEVICE_REMOVAL
    assert!(s.text().contains("cma detected device removal"), "{s}");
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
