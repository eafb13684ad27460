//! Links librdmacm.so as rdma-core's librdmacm.so.1 is linked: SONAME
//! `librdmacm.so.1` and the version nodes RDMACM_1.0 … RDMACM_1.3 (each the
//! child of the one before, as in rdma-core 44), with
//! `target/<profile>/softrnic-rdmacm/librdmacm.so.1` holding only the
//! drop-in (see `dropin_build`).

fn main() {
    dropin_build::Dropin {
        file: "librdmacm.so",
        soname: "librdmacm.so.1",
        folder: "softrnic-rdmacm",
        nodes: &[
            ("RDMACM_1.0", None),
            ("RDMACM_1.1", Some("RDMACM_1.0")),
            ("RDMACM_1.2", Some("RDMACM_1.1")),
            ("RDMACM_1.3", Some("RDMACM_1.2")),
        ],
    }
    .link();
}
