//! Acceptance 2: a small C program, compiled here against include/softrnic.h
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

#[test]
fn c_program_does_verbs_through_the_c_api() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI needs a C compiler");
        eprintln!("SKIPPED c_program_does_verbs_through_the_c_api: no C compiler ({cc})");
        return;
    }
    let dir = tempdir("capi");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = libdir();
    let exe = dir.join("verbs");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(manifest.join("tests/c/verbs.c"))
        .arg("-I")
        .arg(manifest.join("include"))
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
    let d = Daemon::start(None, &["--mem-pair", "--name", "c"], &dir);
    let run = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg(d.sock("c0"))
        .arg(d.sock("c1"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("C OK"),
        "{:?} {stdout} {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
}
