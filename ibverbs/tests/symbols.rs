//! The library exports what rdma-core 44's libibverbs.so.1 exports: every
//! name with the same version (and default-ness), and the SONAME; and the
//! installed programs and provider libraries that bind every symbol at
//! start-up (BIND_NOW) load against it.

use testkit::abi::Dropin;

const LIB: Dropin = Dropin {
    folder: "softrnic-ibverbs",
    soname: "libibverbs.so.1",
    file: "libibverbs.so",
    tag: "IBVERBS",
};

#[test]
fn exports_match_rdma_core_44() {
    LIB.check_exports(
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        150,
        "libibverbs1",
    );
}

#[test]
fn bind_now_programs_and_providers_load_against_it() {
    // perftest links libmlx5, libefa and librdmacm (rdma-core's), all of
    // which import from libibverbs; with BIND_NOW every import must resolve.
    // With no daemon, ibv_devices lists nothing (rdma-core's own library
    // would look in sysfs).
    LIB.check_bind_now(
        &[
            ("ib_write_bw", &["--help"]),
            ("ibv_devinfo", &[]),
            ("ibv_devices", &[]),
        ],
        "perftest, ibverbs-utils",
    );
}
