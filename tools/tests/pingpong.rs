//! `rnic pingpong` between two network namespaces joined by a veth pair:
//! server and client are two `rnic` processes run with `ip netns exec`,
//! RC (ibv_rc_pingpong), UD (ibv_ud_pingpong) and UC (ibv_uc_pingpong),
//! several sizes and path MTUs, AF_XDP and AF_PACKET, `-c/--chk`; each side must print the examples' address
//! lines (matching the other side's) and their two result lines. One test
//! plays an ibv_rc_pingpong client by hand to check the server's side of
//! the out-of-band exchange byte for byte. Needs root (namespaces): a loud
//! SKIPPED line without it, a failure under CI.

mod common;

use common::netns::{can_run, link, pair, rnic_in, spawn, text, Link};
use common::{wait_for, STUCK};
use std::io::{Read, Write};

/// (QPN, PSN, GID) from a "  local address:  LID 0x0000, QPN 0x000011,
/// PSN 0x1a2b3c, GID ::ffff:192.0.2.1" line (remote: "remote address:").
fn address(stdout: &str, which: &str) -> (String, String, String) {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{which} address:")))
        .unwrap_or_else(|| panic!("no {which} address line in:\n{stdout}"));
    let field = |k: &str| {
        line.split(k)
            .nth(1)
            .and_then(|r| r.split([',', ':']).next())
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {k} in {line:?}"))
    };
    let gid = line.split("GID ").nth(1).unwrap_or("").trim().to_string();
    assert!(line.contains("LID 0x0000"), "{line}");
    (field("QPN "), field("PSN "), gid)
}

/// The examples' result lines: bytes and iterations.
fn results(stdout: &str, size: u64, iters: u64) {
    let bytes = 2 * size * iters;
    let l1 = stdout
        .lines()
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("no bytes line in:\n{stdout}"));
    assert!(
        l1.starts_with(&format!("{bytes} bytes in ")) && l1.ends_with(" Mbit/sec"),
        "{l1}"
    );
    let mbit: f64 = l1
        .split(" = ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" Mbit/sec")
        .parse()
        .unwrap();
    // a rate (wall time): printed with two decimals, 0.00 on a slow run
    assert!(mbit.is_finite() && mbit >= 0.0, "{l1}");
    let l2 = stdout
        .lines()
        .find(|l| l.contains(" iters in "))
        .unwrap_or_else(|| panic!("no iters line in:\n{stdout}"));
    assert!(
        l2.starts_with(&format!("{iters} iters in ")) && l2.ends_with(" usec/iter"),
        "{l2}"
    );
}

fn run(l: &Link, state: &std::path::Path, args: &[&str], size: u64, iters: u64) {
    let mut a = vec!["pingpong"];
    a.extend_from_slice(args);
    let (s, c) = pair(l, state, &a, &a, STUCK);
    let ctx = format!(
        "rnic {}\n-- server --\n{}\n-- client --\n{}",
        a.join(" "),
        text(&s),
        text(&c)
    );
    assert!(s.status.success() && c.status.success(), "{ctx}");
    let (so, co) = (
        String::from_utf8_lossy(&s.stdout).into_owned(),
        String::from_utf8_lossy(&c.stdout).into_owned(),
    );
    // each side's remote address is the other's local address
    assert_eq!(address(&so, "local"), address(&co, "remote"), "{ctx}");
    assert_eq!(address(&co, "local"), address(&so, "remote"), "{ctx}");
    assert_eq!(address(&so, "local").2, "::ffff:192.0.2.1", "{ctx}");
    assert_eq!(address(&co, "local").2, "::ffff:192.0.2.2", "{ctx}");
    results(&so, size, iters);
    results(&co, size, iters);
    assert!(!so.contains("invalid data"), "{ctx}");
}

#[test]
fn rc_pingpong_between_namespaces_sizes_and_mtus() {
    let test = "rc_pingpong_between_namespaces_sizes_and_mtus";
    if !can_run(test) {
        return;
    }
    let l = link("pr");
    let state = tempfile::tempdir().unwrap();
    // the defaults: 4096 bytes, MTU 1024, 1000 exchanges
    run(&l, state.path(), &[], 4096, 1000);
    for (size, mtu) in [(1u64, "256"), (64, "1024"), (3000, "2048"), (65536, "4096")] {
        let s = size.to_string();
        run(
            &l,
            state.path(),
            &["-s", &s, "-m", mtu, "-n", "200", "-r", "50"],
            size,
            200,
        );
    }
    // AF_PACKET: the TPACKET_V2 ring, and V3 (its 1 ms block timer makes
    // every exchange slow: few of them)
    run(
        &l,
        state.path(),
        &["--backend", "afpacket", "-s", "4096", "-n", "200"],
        4096,
        200,
    );
    run(
        &l,
        state.path(),
        &["--backend", "afpacket-v3", "-s", "4096", "-n", "50"],
        4096,
        50,
    );
}

#[test]
fn ud_pingpong_between_namespaces() {
    let test = "ud_pingpong_between_namespaces";
    if !can_run(test) {
        return;
    }
    let l = link("pu");
    let state = tempfile::tempdir().unwrap();
    // ibv_ud_pingpong's default size, 2048: the veth's MTU of 9000 gives
    // an active MTU of 4096
    run(&l, state.path(), &["--ud", "-n", "300"], 2048, 300);
    for size in [1u64, 100, 512, 4096] {
        let s = size.to_string();
        run(
            &l,
            state.path(),
            &["--ud", "-s", &s, "-n", "200"],
            size,
            200,
        );
    }
    // a message larger than the port's active MTU is refused as
    // ibv_ud_pingpong refuses it: 4097 bytes at MTU 9000 ...
    refused(&l, state.path(), &["-s", "4097"], 4096);
    // ... and, with interface MTUs of 1500 (active MTU 1024, as rxe has
    // it), the default 2048
    for i in 0..2 {
        set_mtu(&l, i, 1500);
    }
    refused(&l, state.path(), &[], 1024);
    run(
        &l,
        state.path(),
        &["--ud", "-s", "1024", "-n", "100"],
        1024,
        100,
    );
}

fn set_mtu(l: &Link, i: usize, mtu: u32) {
    let st = std::process::Command::new("ip")
        .args(["-n", &l.ns[i], "link", "set", "dev", &l.ifs[i], "mtu"])
        .arg(mtu.to_string())
        .status()
        .expect("ip link set mtu");
    assert!(st.success(), "ip link set {} mtu {mtu}", l.ifs[i]);
}

fn refused(l: &Link, state: &std::path::Path, extra: &[&str], limit: u32) {
    let mut a = vec!["pingpong", "--ud", "-d", &l.ifs[0]];
    a.extend_from_slice(extra);
    let out = rnic_in(&l.ns[0], state, &a).output().unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("Requested size larger than port MTU ({limit})")),
        "{}",
        text(&out)
    );
}

#[test]
fn uc_pingpong_between_namespaces() {
    let test = "uc_pingpong_between_namespaces";
    if !can_run(test) {
        return;
    }
    let l = link("pc");
    let state = tempfile::tempdir().unwrap();
    // ibv_uc_pingpong's defaults: 4096 bytes, MTU 1024, 1000 exchanges
    run(&l, state.path(), &["--uc"], 4096, 1000);
    for (size, mtu) in [(1u64, "256"), (3000, "2048"), (20000, "4096")] {
        let s = size.to_string();
        run(
            &l,
            state.path(),
            &["--uc", "-s", &s, "-m", mtu, "-n", "200", "-r", "50"],
            size,
            200,
        );
    }
    // --ud and --uc together: a usage error
    let out = rnic_in(
        &l.ns[0],
        state.path(),
        &["pingpong", "--ud", "--uc", "-d", &l.ifs[0]],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `-c/--chk` on RC, UC and UD (several pages, UD after the GRH room): no
/// `invalid data` line, success on both sides.
#[test]
fn chk_pingpong_between_namespaces() {
    let test = "chk_pingpong_between_namespaces";
    if !can_run(test) {
        return;
    }
    let l = link("pk");
    let state = tempfile::tempdir().unwrap();
    for (args, size) in [
        (vec!["-c"], 4096u64),
        (vec!["-c", "-s", "20000", "--page-size", "4096"], 20000),
        (
            vec!["--uc", "--chk", "-s", "10000", "--page-size", "1024"],
            10000,
        ),
        (
            vec!["--ud", "-c", "-s", "4096", "--page-size", "1024"],
            4096,
        ),
    ] {
        let mut a = args.clone();
        a.extend(["-n", "100"]);
        run(&l, state.path(), &a, size, 100);
    }
    // the check must be able to fail: a client that marks pages of 4096
    // bytes and a server that expects marks every 1024 bytes (two hosts
    // with different page sizes) disagree about bytes 1024, 2048 and 3072
    let (s, c) = pair(
        &l,
        state.path(),
        &[
            "pingpong",
            "-c",
            "-s",
            "4096",
            "-n",
            "20",
            "--page-size",
            "1024",
        ],
        &[
            "pingpong",
            "-c",
            "-s",
            "4096",
            "-n",
            "20",
            "--page-size",
            "4096",
        ],
        STUCK,
    );
    let ctx = format!("-- server --\n{}\n-- client --\n{}", text(&s), text(&c));
    assert!(c.status.success(), "{ctx}");
    assert!(!s.status.success(), "{ctx}");
    let so = String::from_utf8_lossy(&s.stdout);
    let pages: Vec<&str> = so
        .lines()
        .filter(|l| l.starts_with("invalid data in page"))
        .collect();
    assert_eq!(
        pages,
        [
            "invalid data in page 1",
            "invalid data in page 2",
            "invalid data in page 3"
        ],
        "{ctx}"
    );
    assert!(
        String::from_utf8_lossy(&s.stderr)
            .contains("--chk: the last message received differs at byte 1024"),
        "{ctx}"
    );
}

/// The server side of ibv_rc_pingpong's exchange, byte for byte, against
/// a client played by hand: a 52-byte record "%04x:%06x:%06x:%s" + NUL in
/// each direction, then "done" + NUL from the client.
#[test]
fn pingpong_server_speaks_the_examples_exchange() {
    let test = "pingpong_server_speaks_the_examples_exchange";
    if !can_run(test) {
        return;
    }
    let l = link("px");
    let state = tempfile::tempdir().unwrap();
    let server = spawn(
        rnic_in(
            &l.ns[0],
            state.path(),
            &["pingpong", "-d", &l.ifs[0], "-n", "5"],
        ),
        "the rnic server",
    );
    // the client's record: LID 0, QPN 0x000abc, PSN 0x123456, GID ::ffff:192.0.2.2
    let mine = b"0000:000abc:123456:00000000000000000000ffffc0000202\0";
    assert_eq!(mine.len(), 52);
    let reply = testkit::netns::run_in(&l.ns[1], || {
        let mut s = wait_for(STUCK, "the rnic server listening", || {
            std::net::TcpStream::connect(("192.0.2.1", 18515)).map_err(|e| e.to_string())
        });
        s.set_read_timeout(Some(STUCK)).unwrap();
        s.write_all(mine).unwrap();
        let mut reply = [0u8; 52];
        s.read_exact(&mut reply).unwrap();
        s.write_all(b"done\0").unwrap();
        // the server closes its end after "done"
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (reply, rest)
    })
    .unwrap();
    // the server now waits for SENDs that never come: stop it
    drop(server);
    let (reply, rest) = reply;
    assert_eq!(reply[51], 0, "NUL-terminated: {reply:?}");
    let text = std::str::from_utf8(&reply[..51]).unwrap();
    let f: Vec<&str> = text.split(':').collect();
    assert_eq!(f.len(), 4, "{text}");
    assert_eq!(f[0], "0000", "{text}");
    assert!(
        f[1].len() == 6 && u32::from_str_radix(f[1], 16).is_ok(),
        "{text}"
    );
    assert!(
        f[2].len() == 6 && u32::from_str_radix(f[2], 16).is_ok(),
        "{text}"
    );
    // gid_to_wire_gid of ::ffff:192.0.2.1
    assert_eq!(f[3], "00000000000000000000ffffc0000201", "{text}");
    assert!(rest.is_empty(), "nothing after the record: {rest:?}");
}
