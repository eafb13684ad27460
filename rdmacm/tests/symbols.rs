//! The library exports what rdma-core 44's librdmacm.so.1 exports: every
//! name with the same version (and default-ness), and the SONAME; and the
//! installed programs that bind every symbol at start-up (BIND_NOW) load
//! against it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use testkit::abi::profile_dir;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// What `lib` exports under an RDMACM version.
fn exports(lib: &Path) -> BTreeSet<(String, String)> {
    testkit::abi::exports(lib, "RDMACM")
}

#[test]
fn exports_match_rdma_core_44() {
    let ours = profile_dir().join("softrnic-rdmacm/librdmacm.so.1");
    assert!(ours.exists(), "{} not built", ours.display());
    if !Path::new(SYSTEM_LIB).exists() {
        return testkit::skip_or_fail(
            "the symbol test",
            &format!("{SYSTEM_LIB} not found: install librdmacm1 (rdma-core) to compare exports"),
        );
    }
    let theirs = exports(Path::new(SYSTEM_LIB));
    let mine = exports(&ours);
    assert!(
        theirs.len() > 60,
        "the system library exports {}",
        theirs.len()
    );
    let lacking: Vec<_> = theirs.difference(&mine).collect();
    let extra: Vec<_> = mine.difference(&theirs).collect();
    assert!(lacking.is_empty(), "not exported here: {lacking:?}");
    assert!(extra.is_empty(), "exported here only: {extra:?}");
    let d = Command::new("readelf")
        .arg("-d")
        .arg(&ours)
        .output()
        .expect("readelf");
    assert!(String::from_utf8_lossy(&d.stdout).contains("Library soname: [librdmacm.so.1]"));
    assert_eq!(
        std::fs::canonicalize(&ours).expect("the librdmacm.so.1 link"),
        std::fs::canonicalize(profile_dir().join("deps/librdmacm.so")).expect("the library")
    );
}

#[test]
fn bind_now_programs_load_against_it() {
    let dir = profile_dir().join("softrnic-rdmacm");
    let empty = tempfile::tempdir().expect("tempdir");
    for (prog, args) in [
        ("rping", &["-h"][..]),
        ("ucmatose", &["-h"][..]),
        ("ib_write_bw", &["--help"][..]),
    ] {
        let Ok(out) = Command::new(prog)
            .args(args)
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .env("LD_DEBUG", "libs")
            .env("SOFTRNIC_SOCK_DIR", empty.path())
            .output()
        else {
            return testkit::skip_or_fail(
                "the BIND_NOW test",
                &format!("{prog} not installed (Debian packages rdmacm-utils, perftest)"),
            );
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("symbol lookup error") && !err.contains("version `RDMACM"),
            "{prog}: {err}"
        );
        assert!(out.status.code().is_some(), "{prog} died: {err}");
        assert!(
            err.contains(&format!("{}/librdmacm.so.1", dir.display())),
            "{prog} did not load the drop-in: {err}"
        );
    }
}
