//! The library exports what rdma-core 44's librdmacm.so.1 exports: every
//! name with the same version (and default-ness), and the SONAME; and the
//! installed programs that bind every symbol at start-up (BIND_NOW) load
//! against it.

use testkit::abi::Dropin;

const LIB: Dropin = Dropin {
    folder: "softrnic-rdmacm",
    soname: "librdmacm.so.1",
    file: "librdmacm.so",
    tag: "RDMACM",
};

#[test]
fn exports_match_rdma_core_44() {
    LIB.check_exports("/usr/lib/x86_64-linux-gnu/librdmacm.so.1", 60, "librdmacm1");
}

#[test]
fn bind_now_programs_load_against_it() {
    LIB.check_bind_now(
        &[
            ("rping", &["-h"]),
            ("ucmatose", &["-h"]),
            ("ib_write_bw", &["--help"]),
        ],
        "rdmacm-utils, perftest",
    );
}
