//! Links libibverbs.so as rdma-core's libibverbs.so.1 is linked: SONAME
//! `libibverbs.so.1` and the version nodes IBVERBS_1.0 … IBVERBS_1.14 and
//! IBVERBS_PRIVATE_34 (parents as in rdma-core 44), with
//! `target/<profile>/softrnic-ibverbs/libibverbs.so.1` holding only the
//! drop-in (see `dropin_build`).

fn main() {
    dropin_build::Dropin {
        file: "libibverbs.so",
        soname: "libibverbs.so.1",
        folder: "softrnic-ibverbs",
        nodes: &[
            ("IBVERBS_1.0", None),
            ("IBVERBS_1.1", Some("IBVERBS_1.0")),
            ("IBVERBS_1.5", Some("IBVERBS_1.1")),
            ("IBVERBS_1.6", Some("IBVERBS_1.5")),
            ("IBVERBS_1.7", Some("IBVERBS_1.6")),
            ("IBVERBS_1.8", Some("IBVERBS_1.7")),
            ("IBVERBS_1.9", Some("IBVERBS_1.8")),
            ("IBVERBS_1.10", Some("IBVERBS_1.9")),
            ("IBVERBS_1.11", Some("IBVERBS_1.10")),
            ("IBVERBS_1.12", Some("IBVERBS_1.11")),
            ("IBVERBS_1.13", Some("IBVERBS_1.12")),
            ("IBVERBS_1.14", Some("IBVERBS_1.13")),
            ("IBVERBS_PRIVATE_34", None),
        ],
    }
    .link();
}
