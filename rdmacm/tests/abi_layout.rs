//! The structures of `src/abi/` against rdma-core's own header: a C
//! program compiled with the installed `<rdma/rdma_cma.h>` (librdmacm-dev)
//! prints `offsetof` / `sizeof` of everything listed in
//! `rdmacm::abi::LAYOUT`; every value must match.

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

#[test]
fn every_listed_offset_and_size_matches_the_system_header() {
    testkit::abi::check_layout(
        "every_listed_offset_and_size_matches_the_system_header",
        "rdma/rdma_cma.h",
        HEADER,
        "librdmacm-dev",
        rdmacm::abi::LAYOUT,
    );
}
