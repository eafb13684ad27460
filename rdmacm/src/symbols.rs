//! Which exported function carries which public name and version: the
//! symbol table of rdma-core 44's librdmacm.so.1 (`objdump -T` of
//! Debian's librdmacm1 44.0). Every name and version of that library is
//! exported, so a program bound with BIND_NOW always loads;
//! `tests/symbols.rs` compares the two tables.

macro_rules! versioned {
    ($($internal:literal => $public:literal),* $(,)?) => {
        core::arch::global_asm!($(concat!(".symver ", $internal, ", ", $public)),*);
        /// (internal export, public name with version) — for the tests.
        pub const TABLE: &[(&str, &str)] = &[$(($internal, $public)),*];
    };
}

versioned! {
    "scm_rdma_accept" => "rdma_accept@@RDMACM_1.0",
    "scm_rdma_ack_cm_event" => "rdma_ack_cm_event@@RDMACM_1.0",
    "scm_rdma_bind_addr" => "rdma_bind_addr@@RDMACM_1.0",
    "scm_rdma_connect" => "rdma_connect@@RDMACM_1.0",
    "scm_rdma_create_ep" => "rdma_create_ep@@RDMACM_1.0",
    "scm_rdma_create_event_channel" => "rdma_create_event_channel@@RDMACM_1.0",
    "scm_rdma_create_id" => "rdma_create_id@@RDMACM_1.0",
    "scm_rdma_create_qp" => "rdma_create_qp@@RDMACM_1.0",
    "scm_ex_call" => "rdma_create_qp_ex@@RDMACM_1.0",
    "scm_rdma_create_srq" => "rdma_create_srq@@RDMACM_1.0",
    "scm_ex_call" => "rdma_create_srq_ex@@RDMACM_1.0",
    "scm_rdma_destroy_ep" => "rdma_destroy_ep@@RDMACM_1.0",
    "scm_rdma_destroy_event_channel" => "rdma_destroy_event_channel@@RDMACM_1.0",
    "scm_rdma_destroy_id" => "rdma_destroy_id@@RDMACM_1.0",
    "scm_rdma_destroy_qp" => "rdma_destroy_qp@@RDMACM_1.0",
    "scm_rdma_destroy_srq" => "rdma_destroy_srq@@RDMACM_1.0",
    "scm_rdma_disconnect" => "rdma_disconnect@@RDMACM_1.0",
    "scm_rdma_event_str" => "rdma_event_str@@RDMACM_1.0",
    "scm_rdma_free_devices" => "rdma_free_devices@@RDMACM_1.0",
    "scm_rdma_freeaddrinfo" => "rdma_freeaddrinfo@@RDMACM_1.0",
    "scm_rdma_get_cm_event" => "rdma_get_cm_event@@RDMACM_1.0",
    "scm_rdma_get_devices" => "rdma_get_devices@@RDMACM_1.0",
    "scm_rdma_get_dst_port" => "rdma_get_dst_port@@RDMACM_1.0",
    "scm_rdma_get_request" => "rdma_get_request@@RDMACM_1.0",
    "scm_rdma_get_src_port" => "rdma_get_src_port@@RDMACM_1.0",
    "scm_rdma_getaddrinfo" => "rdma_getaddrinfo@@RDMACM_1.0",
    "scm_rdma_join_multicast" => "rdma_join_multicast@@RDMACM_1.0",
    "scm_rdma_leave_multicast" => "rdma_leave_multicast@@RDMACM_1.0",
    "scm_rdma_listen" => "rdma_listen@@RDMACM_1.0",
    "scm_rdma_migrate_id" => "rdma_migrate_id@@RDMACM_1.0",
    "scm_rdma_notify" => "rdma_notify@@RDMACM_1.0",
    "scm_rdma_reject" => "rdma_reject@@RDMACM_1.0",
    "scm_rdma_resolve_addr" => "rdma_resolve_addr@@RDMACM_1.0",
    "scm_rdma_resolve_route" => "rdma_resolve_route@@RDMACM_1.0",
    "scm_rdma_set_option" => "rdma_set_option@@RDMACM_1.0",
    // rsocket
    "scm_rsocket_call" => "raccept@@RDMACM_1.0",
    "scm_rsocket_call" => "rbind@@RDMACM_1.0",
    "scm_rsocket_call" => "rclose@@RDMACM_1.0",
    "scm_rsocket_call" => "rconnect@@RDMACM_1.0",
    "scm_rsocket_call" => "rfcntl@@RDMACM_1.0",
    "scm_rsocket_call" => "rgetpeername@@RDMACM_1.0",
    "scm_rsocket_call" => "rgetsockname@@RDMACM_1.0",
    "scm_rsocket_call" => "rgetsockopt@@RDMACM_1.0",
    "scm_riomap" => "riomap@@RDMACM_1.0",
    "scm_rsocket_call" => "riounmap@@RDMACM_1.0",
    "scm_rsocket_call" => "riowrite@@RDMACM_1.0",
    "scm_rsocket_call" => "rlisten@@RDMACM_1.0",
    "scm_rsocket_call" => "rpoll@@RDMACM_1.0",
    "scm_rsocket_call" => "rread@@RDMACM_1.0",
    "scm_rsocket_call" => "rreadv@@RDMACM_1.0",
    "scm_rsocket_call" => "rrecv@@RDMACM_1.0",
    "scm_rsocket_call" => "rrecvfrom@@RDMACM_1.0",
    "scm_rsocket_call" => "rrecvmsg@@RDMACM_1.0",
    "scm_rsocket_call" => "rselect@@RDMACM_1.0",
    "scm_rsocket_call" => "rsend@@RDMACM_1.0",
    "scm_rsocket_call" => "rsendmsg@@RDMACM_1.0",
    "scm_rsocket_call" => "rsendto@@RDMACM_1.0",
    "scm_rsocket_call" => "rsetsockopt@@RDMACM_1.0",
    "scm_rsocket_call" => "rshutdown@@RDMACM_1.0",
    "scm_rsocket_call" => "rsocket@@RDMACM_1.0",
    "scm_rsocket_call" => "rwrite@@RDMACM_1.0",
    "scm_rsocket_call" => "rwritev@@RDMACM_1.0",
    // RDMACM_1.1 … 1.3
    "scm_rdma_join_multicast" => "rdma_join_multicast_ex@@RDMACM_1.1",
    "scm_rdma_establish" => "rdma_establish@@RDMACM_1.2",
    "scm_rdma_init_qp_attr" => "rdma_init_qp_attr@@RDMACM_1.2",
    "scm_rdma_ece" => "rdma_get_remote_ece@@RDMACM_1.3",
    "scm_rdma_reject_ece" => "rdma_reject_ece@@RDMACM_1.3",
    "scm_rdma_ece" => "rdma_set_local_ece@@RDMACM_1.3",
}
