//! A C program built against rdma-core's header and linked to the drop-in
//! (tests/c/verbs_check.c): RDMA WRITE and READ on malloc and
//! posix_memalign memory byte for byte, overlapping, unaligned and
//! re-registered regions, a refused shared file mapping left unchanged,
//! and verbs called in the wrong order, with NULL or past the limits
//! getting rdma-core's errors; (tests/c/mw_check.c) memory windows and
//! invalidation giving, step by step, what Linux rxe gives; and
//! (tests/c/extverbs_check.c) the extended verbs: every `ibv_wr_*`
//! operation, extended CQs, bad `ibv_wr_*` sequences, `ibv_rereg_mr` and
//! `ibv_resize_cq`.

mod common;

use common::{missing, profile_dir, Daemon};
use std::process::Command;

/// Runs tests/c/NAME.c, a program of checks, on a daemon of its own: it
/// must exit 0 having counted "0 failures". Its stdout and stderr, and
/// the daemon (None: the header is missing, reported by `missing`).
fn checks_pass(name: &str) -> Option<(String, Daemon)> {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        missing("<infiniband/verbs.h> not installed (libibverbs-dev)");
        return None;
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_c(&d, dir.path(), name, &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("0 failures"),
        "{text}"
    );
    Some((text, d))
}

#[test]
fn a_c_program_does_verbs_on_its_own_memory() {
    let Some((text, _d)) = checks_pass("verbs_check") else {
        return;
    };
    // refusals say why, one line each
    assert!(
        text.contains("softrnic: ibv_reg_mr:") && text.contains("cannot be shared"),
        "{text}"
    );
}

#[test]
fn the_extended_verbs_move_data_and_refuse_as_rdma_core_does() {
    let Some((text, mut d)) = checks_pass("extverbs_check") else {
        return;
    };
    // bad sequences are refused with a reason, and the daemon lives on
    assert!(
        text.contains("softrnic: ibv_wr_complete: ibv_wr_complete without ibv_wr_start"),
        "{text}"
    );
    assert!(matches!(d.child.try_wait(), Ok(None)), "the daemon exited");
}

/// Builds tests/c/NAME.c against rdma-core's header, linked to the drop-in,
/// and runs it with `args` on daemon `d`.
fn run_c(d: &Daemon, dir: &std::path::Path, name: &str, args: &[&str]) -> std::process::Output {
    c_program(d, dir, name).args(args).output().expect("run")
}

/// tests/c/NAME.c built against rdma-core's header and linked to the
/// drop-in, as a command set to use daemon `d`.
fn c_program(d: &Daemon, dir: &std::path::Path, name: &str) -> Command {
    let bin = dir.join(name);
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    testkit::abi::build_c(
        src.as_ref(),
        &bin,
        &[profile_dir().join("softrnic-ibverbs/libibverbs.so.1")],
    );
    let mut c = Command::new(&bin);
    c.env("LD_LIBRARY_PATH", profile_dir().join("softrnic-ibverbs"))
        .env("SOFTRNIC_SOCK_DIR", d.sock_dir());
    c
}

/// tests/c/fatal_check.c: rnicd killed under a program with work in
/// flight is a device failing under it — its completion channel wakes,
/// its async fd reports IBV_EVENT_DEVICE_FATAL, the outstanding WRs (and
/// only they) complete with IBV_WC_WR_FLUSH_ERR, every later verb fails
/// and teardown succeeds.
#[test]
fn a_program_sees_its_device_fail_when_rnicd_dies() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        missing("<infiniband/verbs.h> not installed (libibverbs-dev)");
        return;
    }
    use std::io::Read;
    let mut d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = c_program(&d, dir.path(), "fatal_check")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut text = testkit::proc::read_until_line(&mut out, "READY");
    assert!(text.ends_with("READY\n"), "never ready:\n{text}");
    d.kill();
    // the program's own alarm ends it if anything hangs
    let _ = out.read_to_string(&mut text);
    let done = child.wait_with_output().expect("wait");
    let text = text + &String::from_utf8_lossy(&done.stderr);
    assert!(
        done.status.success() && text.contains("0 failures"),
        "{text}"
    );
    for want in [
        "A: local catastrophic error",
        "B: local catastrophic error",
        "flushed wr_id 2 status Work Request Flushed Error qp A",
        "flushed wr_id 102 status Work Request Flushed Error qp A",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
}

/// tests/c/mw_check.c's transcript on the drop-in equals
/// tests/c/mw_check.expected: memory windows of both types, binds that must
/// fail, LOCAL_INV and SEND with Invalidate. tools/rxe-peer/mw/hook.sh
/// checks that Linux rxe gives the same transcript but for the lines
/// tools/rxe-peer/mw/rxe-differences.txt lists and explains.
#[test]
fn memory_windows_give_what_rxe_gives() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        missing("<infiniband/verbs.h> not installed (libibverbs-dev)");
        return;
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_c(&d, dir.path(), "mw_check", &["3"]);
    let ours = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{ours}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = include_str!("c/mw_check.expected");
    let diff: Vec<String> = want
        .lines()
        .zip(ours.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("want: {a}\nours: {b}"))
        .collect();
    assert!(
        diff.is_empty() && want.lines().count() == ours.lines().count(),
        "{}\n--- ours:\n{ours}",
        diff.join("\n")
    );
}
