//! The drop-in from C and from Debian's own tools, on an `rnicd
//! --mem-pair` through the libibverbs drop-in: tests/c/cm_check.c built
//! against rdma-core's headers (devices, event channel descriptors, IDs,
//! address info and the errors of what is not supported), Debian's
//! `rping` between the pair's two devices through rnicd's CM, checking its
//! data both ways, and Debian's `udaddy` (UD IDs: Service ID Resolution)
//! with the server on either device.

mod common;

use common::Daemon;

#[test]
fn a_c_program_uses_the_cm_library_on_rnicd_devices() {
    if let Err(why) = common::prerequisites(&[]) {
        return testkit::skip_or_fail("the C CM test", &why);
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = common::c_program(dir.path(), "cm_check");
    let out = common::run(&d, bin.to_str().expect("utf-8"), &[]);
    let text = out.text();
    assert!(out.ok() && text.contains("0 failures"), "{out}");
    assert!(text.contains("device t0\ndevice t1\n"), "{text}");
    // refusals say why, one line each
    assert!(
        text.contains("softrnic-rdmacm: rsocket: rsockets are not supported"),
        "{text}"
    );
}

/// `udaddy` server on `server_ip` (device `dev`) and client towards it,
/// `args` more for both: each sends its messages and receives the other's.
fn udaddy_pair(d: &Daemon, dev: &str, server_ip: &str, args: &[&str]) {
    let mut sargs = vec!["-b", server_ip];
    sargs.extend_from_slice(args);
    let mut cargs = vec!["-s", server_ip];
    cargs.extend_from_slice(args);
    let (s, c) = common::server_and_client(d, dev, ("udaddy", &sargs), ("udaddy", &cargs));
    assert!(s.ok() && c.ok(), "{s}\n{c}");
    for text in [c.text(), s.text()] {
        assert!(text.contains("data transfers complete"), "{text}");
        assert!(text.contains("return status 0"), "{text}");
    }
    assert!(c.text().contains("initiating data transfers"), "{c}");
    assert!(s.text().contains("sending replies"), "{s}");
}

#[test]
fn udaddy_resolves_and_exchanges_datagrams_with_the_server_on_either_device() {
    if let Err(why) = common::prerequisites(&["udaddy"]) {
        return testkit::skip_or_fail("the udaddy test", &why);
    }
    let d = Daemon::start();
    // 127.0.0.1 is t0's address, 127.0.0.2 t1's: the server on each
    udaddy_pair(&d, "t0", "127.0.0.1", &[]);
    udaddy_pair(
        &d,
        "t1",
        "127.0.0.2",
        &["-c", "3", "-C", "40", "-S", "1000"],
    );
}

#[test]
fn rping_verifies_its_data_both_ways_over_rnicds_cm() {
    if let Err(why) = common::prerequisites(&["rping"]) {
        return testkit::skip_or_fail("the rping test", &why);
    }
    let d = Daemon::start();
    // 127.0.0.1 is t0's address (its GID through libibverbs), 127.0.0.2 t1's
    let args = |role| {
        [
            role,
            "-v",
            "-V",
            "-C",
            "500",
            "-a",
            "127.0.0.1",
            "-p",
            "7471",
        ]
    };
    let (server, client) =
        common::server_and_client(&d, "t0", ("rping", &args("-s")), ("rping", &args("-c")));
    assert!(client.ok(), "{client}\n{server}");
    assert!(server.ok(), "{server}");
    // -v prints each ping; -V has each side check the data it got
    for i in [0, 250, 499] {
        let line = format!("rdma-ping-{i}: ");
        assert!(
            client.stdout.contains(&format!("ping data: {line}")),
            "{client}"
        );
        assert!(
            server.stdout.contains(&format!("server ping data: {line}")),
            "{server}"
        );
    }
}
