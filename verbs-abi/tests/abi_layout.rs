//! The structures of `src/` against rdma-core's own header: a C
//! program compiled with the installed `<infiniband/verbs.h>`
//! (libibverbs-dev) prints `offsetof` / `sizeof` of everything listed in
//! `verbs_abi::LAYOUT`; every value must match.

const HEADER: &str = "/usr/include/infiniband/verbs.h";

#[test]
fn every_listed_offset_and_size_matches_the_system_header() {
    testkit::abi::check_layout(
        "every_listed_offset_and_size_matches_the_system_header",
        "infiniband/verbs.h",
        HEADER,
        "libibverbs-dev",
        verbs_abi::LAYOUT,
    );
}

#[test]
fn the_context_ops_table_and_verbs_context_end_where_the_header_says() {
    // the inline verbs reach verbs_context slots at negative offsets from
    // the ibv_context: the context must be its last field
    use verbs_abi::*;
    assert_eq!(
        std::mem::offset_of!(verbs_context, context) + std::mem::size_of::<ibv_context>(),
        std::mem::size_of::<verbs_context>()
    );
    assert_eq!(std::mem::size_of::<ibv_context_ops>(), 32 * 8);
}

#[test]
fn every_extended_verbs_field_and_ops_slot_matches_the_system_header() {
    let all: Vec<(&str, usize)> = verbs_abi::LAYOUT_EXT.concat();
    // ibv_qp_ex: 25 fields, ibv_cq_ex: 21 fields + 9 of ibv_cq's, and the
    // attribute structs: a table that lost entries fails here
    assert!(all.len() >= 70, "{} entries", all.len());
    testkit::abi::check_layout(
        "every_extended_verbs_field_and_ops_slot_matches_the_system_header",
        "infiniband/verbs.h",
        HEADER,
        "libibverbs-dev",
        &all,
    );
}
