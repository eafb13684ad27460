//! `rnic exec`: the program runs with the drop-in's folder first on its
//! library path (the librdmacm drop-in's before it when there), in place
//! of rnic (its exit status), and a missing library is a one-line error.
//! Without SOFTRNIC_IBVERBS_DIR it looks in softrnic-ibverbs/ beside the
//! rnic that runs.

use assert_cmd::Command;

#[test]
fn exec_sets_the_library_path_and_socket_folder_and_keeps_the_exit_status() {
    let lib = tempfile::tempdir().expect("tempdir");
    std::fs::write(lib.path().join("libibverbs.so.1"), b"").expect("a stand-in");
    let out = Command::cargo_bin("rnic")
        .expect("rnic")
        .env("SOFTRNIC_IBVERBS_DIR", lib.path())
        .env("LD_LIBRARY_PATH", "/elsewhere")
        .args(["exec", "--sock-dir", "/tmp/srnic-socks", "--", "sh", "-c"])
        .arg("echo \"$LD_LIBRARY_PATH|$SOFTRNIC_SOCK_DIR\"; exit 7")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}:/elsewhere|/tmp/srnic-socks", lib.path().display())
    );
}

#[test]
fn exec_without_the_library_or_a_program_says_so() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = Command::cargo_bin("rnic")
        .expect("rnic")
        .env("SOFTRNIC_IBVERBS_DIR", empty.path())
        .args(["exec", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no libibverbs.so.1"), "{err}");
    let out = Command::cargo_bin("rnic")
        .expect("rnic")
        .args(["exec"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = Command::cargo_bin("rnic")
        .expect("rnic")
        .env("SOFTRNIC_IBVERBS_DIR", empty.path())
        .args(["exec", "--", "/no/such/program"])
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn exec_finds_the_library_beside_rnic_and_passes_signals_on() {
    // a copy of rnic in a folder of its own: softrnic-ibverbs/ beside it
    let dir = tempfile::tempdir().expect("tempdir");
    let rnic = dir.path().join("rnic");
    std::fs::copy(assert_cmd::cargo::cargo_bin("rnic"), &rnic).expect("copy rnic");
    let lib = dir.path().join("softrnic-ibverbs");
    let run = |script: &str| {
        std::process::Command::new(&rnic)
            .env_remove("SOFTRNIC_IBVERBS_DIR")
            .env_remove("SOFTRNIC_RDMACM_DIR")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("SOFTRNIC_SOCK_DIR")
            .args(["exec", "--", "sh", "-c", script])
            .output()
            .expect("run")
    };
    let out = run("true");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&lib.display().to_string()) && err.contains("build the workspace"),
        "{err}"
    );
    std::fs::create_dir(&lib).expect("mkdir");
    std::fs::write(lib.join("libibverbs.so.1"), b"").expect("a stand-in");
    let out = run("echo \"$LD_LIBRARY_PATH|${SOFTRNIC_SOCK_DIR-unset}\"");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}|unset", lib.display())
    );
    // the librdmacm drop-in, when built beside it, goes first
    let cm = dir.path().join("softrnic-rdmacm");
    std::fs::create_dir(&cm).expect("mkdir");
    std::fs::write(cm.join("librdmacm.so.1"), b"").expect("a stand-in");
    let out = run("echo \"$LD_LIBRARY_PATH\"");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}:{}", cm.display(), lib.display())
    );
    // the program replaced rnic: its death by a signal is ours
    let out = run("kill -TERM $$");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(15), "SIGTERM: {out:?}");
}
