//! The library exports what rdma-core 44's libibverbs.so.1 exports: every
//! name with the same version (and default-ness), and the SONAME; and the
//! installed programs and provider libraries that bind every symbol at
//! start-up (BIND_NOW) load against it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use testkit::abi::profile_dir;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// What `lib` exports under an IBVERBS version.
fn exports(lib: &Path) -> BTreeSet<(String, String)> {
    testkit::abi::exports(lib, "IBVERBS")
}

#[test]
fn exports_match_rdma_core_44() {
    let ours = profile_dir().join("softrnic-ibverbs/libibverbs.so.1");
    assert!(ours.exists(), "{} not built", ours.display());
    if !std::path::Path::new(SYSTEM_LIB).exists() {
        return testkit::skip_or_fail(
            "exports_match_rdma_core_44",
            &format!("{SYSTEM_LIB} not found: install libibverbs1 (rdma-core) to compare exports"),
        );
    }
    let theirs = exports(std::path::Path::new(SYSTEM_LIB));
    let mine = exports(&ours);
    assert!(
        theirs.len() > 150,
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
    assert!(String::from_utf8_lossy(&d.stdout).contains("Library soname: [libibverbs.so.1]"));
    assert_eq!(
        std::fs::canonicalize(&ours).expect("the libibverbs.so.1 link"),
        std::fs::canonicalize(profile_dir().join("deps/libibverbs.so")).expect("the library")
    );
}

#[test]
fn bind_now_programs_and_providers_load_against_it() {
    let dir = profile_dir().join("softrnic-ibverbs");
    let empty = tempfile::tempdir().expect("tempdir");
    // perftest links libmlx5, libefa and librdmacm (rdma-core's), all of
    // which import from libibverbs; with BIND_NOW every import must resolve
    for (prog, args) in [
        ("ib_write_bw", &["--help"][..]),
        ("ibv_devinfo", &[][..]),
        ("ibv_devices", &[][..]),
    ] {
        let Ok(out) = Command::new(prog)
            .args(args)
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .env("SOFTRNIC_SOCK_DIR", empty.path())
            .output()
        else {
            return testkit::skip_or_fail(
                "bind_now_programs_and_providers_load_against_it",
                &format!("{prog} not installed (Debian packages perftest, ibverbs-utils)"),
            );
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("symbol lookup error") && !err.contains("version `IBVERBS"),
            "{prog}: {err}"
        );
        // ib_write_bw --help exits 1 after its usage; the others run
        assert!(out.status.code().is_some(), "{prog} died: {err}");
    }
    // the program really used this library: no devices in an empty socket
    // folder (rdma-core's would look in sysfs)
    let out = Command::new("ibv_devices")
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTRNIC_SOCK_DIR", empty.path())
        .env("LD_DEBUG", "libs")
        .output()
        .expect("ibv_devices ran above");
    let dbg = String::from_utf8_lossy(&out.stderr);
    assert!(
        dbg.contains(&format!("{}/libibverbs.so.1", dir.display())),
        "ibv_devices did not load the drop-in: {dbg}"
    );
}
