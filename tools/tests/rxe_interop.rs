//! Interop with the Linux kernel's Soft-RoCE: runs the trimmed suite of
//! `tools/rxe-peer/rxe-peer interop` (one QEMU guest with rdma_rxe and
//! rdma-core; `rnic pingpong` on the host against `ibv_rc/uc/ud_pingpong`
//! in both roles, a few sizes, the RC loss test, and `rnic perf` against
//! perftest's ib_*_bw / ib_*_lat in both roles, then Debian's unmodified
//! ibv_*_pingpong and perftest on softrnic's libibverbs.so.1 against the
//! same tools on rxe, both roles, and rping and ib_send_bw -R through
//! softrnic's librdmacm.so.1 against the kernel's RDMA CM), see
//! docs/interop.md.
//!
//! Needs root, QEMU, debootstrap and a Debian mirror (the guest image is
//! built from Debian packages on first use and cached). Without them it
//! prints a loud SKIPPED line; under CI=true (where .ci/run installs them)
//! it must run and fails if it cannot.

mod common;

use common::{poll_within, STUCK};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Image build (about 1-2 min uncached) + boot (about 25 s) + the trimmed
/// suite (about 4-5 min) stay well under this on a 2-core machine.
const LIMIT: Duration = Duration::from_secs(900);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// Why this machine cannot run the suite, if it cannot.
fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok();
    let root = uid
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Some("needs root (network namespaces, tap, debootstrap)".into());
    }
    for t in [
        "qemu-system-x86_64",
        "debootstrap",
        "cpio",
        "depmod",
        "tcpdump",
        "nft",
        "ip",
    ] {
        if !on_path(t) && !Path::new("/usr/sbin").join(t).is_file() {
            return Some(format!("{t} is not installed (apt-get install qemu-system-x86 debootstrap cpio kmod tcpdump nftables iproute2)"));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    None
}

#[test]
fn rnic_pingpong_against_linux_soft_roce() {
    if let Some(why) = missing() {
        return testkit::skip_or_fail("rnic_pingpong_against_linux_soft_roce", &why);
    }
    let out = repo()
        .join("target/rxe-peer")
        .join(format!("cargo-test-{}", std::process::id()));
    let script = repo().join("tools/rxe-peer/rxe-peer");
    let t0 = Instant::now();
    let mut child = Command::new("bash")
        .arg(&script)
        .arg("interop")
        .arg("--out")
        .arg(&out)
        .env("RNIC", env!("CARGO_BIN_EXE_rnic"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tools/rxe-peer/rxe-peer");
    // Drain both pipes on threads so a chatty run cannot block on them.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ho = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let he = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = poll_within(LIMIT, || child.try_wait().expect("wait for rxe-peer"));
    if status.is_none() {
        // SIGTERM: the script's trap stops QEMU and removes its namespaces;
        // SIGKILL only if that trap has not ended it within STUCK
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        if poll_within(STUCK, || child.try_wait().expect("wait for rxe-peer")).is_none() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
    let stdout = ho.join().unwrap_or_default();
    let stderr = he.join().unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    eprintln!("{}", tail.join("\n"));
    println!("{stdout}");
    let status = status.unwrap_or_else(|| {
        panic!(
            "rxe interop suite did not finish within {} s (logs: {})",
            LIMIT.as_secs(),
            out.display()
        )
    });
    assert!(
        status.success(),
        "rxe interop suite failed ({status}); per-case logs and captures in {}",
        out.display()
    );
    let (cases, _) = all_passed(&out, "results.txt", "pingpong", 10);
    let (pt_cases, perftest) = all_passed(&out, "perftest-results.txt", "perftest", 20);
    // and each one's data was checked (perftest never checks it itself)
    for name in perftest.lines().filter_map(|l| l.split_whitespace().next()) {
        let log = out.join("logs").join(format!("{name}.memcheck.log"));
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            said.contains("span checked") || said.contains("executed exactly once"),
            "{name}: no data check in {}:\n{said}",
            log.display()
        );
    }
    // Debian's unmodified tools on the libibverbs drop-in against the same
    // tools on rxe: ibv_devices/ibv_devinfo, then 13 tools in both roles,
    // and through the RDMA CM (softrnic's librdmacm and rnicd's CM against
    // the kernel's): rping -v -V and ib_send_bw -R in both roles
    let (di_cases, dropin) = all_passed(&out, "dropin-results.txt", "drop-in", 31);
    for cm in ["rping-", "ib_send_bw-R-"] {
        assert_eq!(
            dropin.lines().filter(|l| l.starts_with(cm)).count(),
            2,
            "{cm} in both roles:\n{dropin}"
        );
    }
    // memory windows: one program, rxe's transcript and ours (mw/hook.sh)
    all_passed(&out, "mw-results.txt", "memory window", 1);
    eprintln!(
        "rxe interop: {cases} pingpong, {pt_cases} perftest, {di_cases} drop-in and the memory window cases passed in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}

/// The result lines in `out/file`: at least `min` of them, every one a
/// PASS; returns their number and the text.
fn all_passed(out: &Path, file: &str, what: &str, min: usize) -> (usize, String) {
    let text = std::fs::read_to_string(out.join(file)).unwrap_or_default();
    let n = text.lines().count();
    assert!(n >= min, "only {n} {what} cases ran:\n{text}");
    assert!(
        text.lines().all(|l| l.contains(" PASS ")),
        "failing {what} cases:\n{text}"
    );
    (n, text)
}
