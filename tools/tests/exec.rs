//! `rnic exec`: the program runs with the drop-in's folder first on its
//! library path, in place of rnic (its exit status), and a missing
//! library is a one-line error.

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
