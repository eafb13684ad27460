//! A C program built against rdma-core's header and linked to the drop-in
//! (tests/c/verbs_check.c): RDMA WRITE and READ on malloc and
//! posix_memalign memory byte for byte, overlapping, unaligned and
//! re-registered regions, a refused shared file mapping left unchanged,
//! and verbs called in the wrong order, with NULL or past the limits
//! getting rdma-core's errors.

mod common;

use common::{missing, profile_dir, Daemon};
use std::process::Command;

#[test]
fn a_c_program_does_verbs_on_its_own_memory() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        missing("<infiniband/verbs.h> not installed (libibverbs-dev)");
        return;
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("verbs_check");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/verbs_check.c");
    let cc = Command::new("cc")
        .args([src, "-o"])
        .arg(&bin)
        .arg(profile_dir().join("softrnic-ibverbs/libibverbs.so.1"))
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&bin)
        .env("LD_LIBRARY_PATH", profile_dir().join("softrnic-ibverbs"))
        .env("SOFTRNIC_SOCK_DIR", d.sock_dir())
        .output()
        .expect("run");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("0 failures"),
        "{text}"
    );
    // refusals say why, one line each
    assert!(
        text.contains("softrnic: ibv_reg_mr:") && text.contains("cannot be shared"),
        "{text}"
    );
}
