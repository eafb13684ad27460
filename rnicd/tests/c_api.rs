//! The C API: a small C program, compiled here against softrnic/include/softrnic.h
//! and libsoftrnic.so, does WRITE, SEND, READ and FETCH_ADD between the two
//! devices of a daemon on the in-memory wire.

mod common;

use common::{tempdir, Daemon};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cdylib cargo built next to this test's executable.
fn libdir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for d in [deps, deps.parent().unwrap()] {
        if d.join("libsoftrnic.so").exists() {
            return d.to_path_buf();
        }
    }
    panic!("libsoftrnic.so not found near {}", exe.display());
}

fn compile(tag: &str, src: &str) -> Option<(PathBuf, PathBuf)> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        testkit::skip_or_fail(tag, &format!("no C compiler ({cc})"));
        return None;
    }
    let dir = tempdir(tag);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = libdir();
    let exe = dir.join(tag);
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(manifest.join(src))
        .arg("-I")
        .arg(manifest.join("../softrnic/include"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .arg("-lsoftrnic")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((dir, exe))
}

fn run(dir: &Path, exe: &Path, ok: &str) {
    let d = Daemon::start(None, &["--mem-pair", "--name", "c"], dir);
    let run = Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg(d.sock("c0"))
        .arg(d.sock("c1"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains(ok),
        "{:?} {stdout} {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn c_program_does_verbs_through_the_c_api() {
    if let Some((dir, exe)) = compile("capi", "tests/c/verbs.c") {
        run(&dir, &exe, "C OK");
    }
}

/// UD through an address handle and two QPs on one SRQ, from C
/// (srnic_create_ah, srnic_post_send_ud, srnic_poll_cq_ex,
/// srnic_create_srq, srnic_post_srq_recv, srnic_create_qp_ex).
#[test]
fn c_program_does_ud_and_srq_through_the_c_api() {
    if let Some((dir, exe)) = compile("capi-ud", "tests/c/ud_srq.c") {
        run(&dir, &exe, "C UD SRQ OK");
    }
}
