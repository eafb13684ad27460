//! Which exported function carries which public name and version: the
//! symbol table of rdma-core 44's libibverbs.so.1 (`objdump -T` of Debian's
//! libibverbs1 44.0). `name@@VERSION` is the default a program links
//! against today; `name@VERSION` an older ABI kept for programs linked
//! long ago (answered as unsupported here). Every name and version in that
//! library is exported, so a program or provider library bound with
//! BIND_NOW always loads; `tests/symbols.rs` compares the two tables.

macro_rules! versioned {
    ($($internal:literal => $public:literal),* $(,)?) => {
        core::arch::global_asm!($(concat!(".symver ", $internal, ", ", $public)),*);
        /// (internal export, public name with version) — for the tests.
        pub const TABLE: &[(&str, &str)] = &[$(($internal, $public)),*];
    };
}

/// The entry points of the ABI before IBVERBS_1.1 (and the 1.1-era
/// `ibv_register_driver`): each non-default version needs a symbol of its
/// own; all answer "not supported".
macro_rules! compat {
    ($($kind:ident $internal:ident => $public:literal),* $(,)?) => {
        core::arch::global_asm!($(concat!(".symver ", stringify!($internal), ", ", $public)),*);
        $(compat!(@fn $kind $internal);)*
        /// (internal export, public name with version) — for the tests.
        pub const COMPAT_TABLE: &[(&str, &str)] = &[$((stringify!($internal), $public)),*];
    };
    (@fn int $internal:ident) => {
        #[no_mangle]
        pub extern "C" fn $internal() -> libc::c_int {
            crate::srv_old_int()
        }
    };
    (@fn null $internal:ident) => {
        #[no_mangle]
        pub extern "C" fn $internal() -> *mut libc::c_void {
            crate::srv_old_null()
        }
    };
}

versioned! {
    // IBVERBS_1.0
    "srv_ibv_copy_path_rec_from_kern" => "ibv_copy_path_rec_from_kern@@IBVERBS_1.0",
    "srv_ibv_copy_path_rec_to_kern" => "ibv_copy_path_rec_to_kern@@IBVERBS_1.0",
    "srv_ibv_copy_qp_attr_from_kern" => "ibv_copy_qp_attr_from_kern@@IBVERBS_1.0",
    "srv_ibv_create_comp_channel" => "ibv_create_comp_channel@@IBVERBS_1.0",
    "srv_ibv_destroy_comp_channel" => "ibv_destroy_comp_channel@@IBVERBS_1.0",
    "srv_ibv_get_sysfs_path" => "ibv_get_sysfs_path@@IBVERBS_1.0",
    "srv_ibv_rate_to_mult" => "ibv_rate_to_mult@@IBVERBS_1.0",
    "srv_ibv_read_sysfs_file" => "ibv_read_sysfs_file@@IBVERBS_1.0",
    "srv_mult_to_ibv_rate" => "mult_to_ibv_rate@@IBVERBS_1.0",
    // the IBVERBS_1.0 ABI of functions redefined in 1.1 (old structs)
    // IBVERBS_1.1
    "srv_ibv_ack_async_event" => "ibv_ack_async_event@@IBVERBS_1.1",
    "srv_ibv_ack_cq_events" => "ibv_ack_cq_events@@IBVERBS_1.1",
    "srv_ibv_alloc_pd" => "ibv_alloc_pd@@IBVERBS_1.1",
    "srv_ibv_attach_mcast" => "ibv_attach_mcast@@IBVERBS_1.1",
    "srv_ibv_close_device" => "ibv_close_device@@IBVERBS_1.1",
    "srv_ibv_copy_ah_attr_from_kern" => "ibv_copy_ah_attr_from_kern@@IBVERBS_1.1",
    "srv_ibv_create_ah" => "ibv_create_ah@@IBVERBS_1.1",
    "srv_ibv_create_ah_from_wc" => "ibv_create_ah_from_wc@@IBVERBS_1.1",
    "srv_ibv_create_cq" => "ibv_create_cq@@IBVERBS_1.1",
    "srv_ibv_create_qp" => "ibv_create_qp@@IBVERBS_1.1",
    "srv_ibv_create_srq" => "ibv_create_srq@@IBVERBS_1.1",
    "srv_ibv_dealloc_pd" => "ibv_dealloc_pd@@IBVERBS_1.1",
    "srv_ibv_dereg_mr" => "ibv_dereg_mr@@IBVERBS_1.1",
    "srv_ibv_destroy_ah" => "ibv_destroy_ah@@IBVERBS_1.1",
    "srv_ibv_destroy_cq" => "ibv_destroy_cq@@IBVERBS_1.1",
    "srv_ibv_destroy_qp" => "ibv_destroy_qp@@IBVERBS_1.1",
    "srv_ibv_destroy_srq" => "ibv_destroy_srq@@IBVERBS_1.1",
    "srv_ibv_detach_mcast" => "ibv_detach_mcast@@IBVERBS_1.1",
    "srv_ibv_dofork_range" => "ibv_dofork_range@@IBVERBS_1.1",
    "srv_ibv_dontfork_range" => "ibv_dontfork_range@@IBVERBS_1.1",
    "srv_ibv_event_type_str" => "ibv_event_type_str@@IBVERBS_1.1",
    "srv_ibv_fork_init" => "ibv_fork_init@@IBVERBS_1.1",
    "srv_ibv_free_device_list" => "ibv_free_device_list@@IBVERBS_1.1",
    "srv_ibv_get_async_event" => "ibv_get_async_event@@IBVERBS_1.1",
    "srv_ibv_get_cq_event" => "ibv_get_cq_event@@IBVERBS_1.1",
    "srv_ibv_get_device_guid" => "ibv_get_device_guid@@IBVERBS_1.1",
    "srv_ibv_get_device_list" => "ibv_get_device_list@@IBVERBS_1.1",
    "srv_ibv_get_device_name" => "ibv_get_device_name@@IBVERBS_1.1",
    "srv_ibv_init_ah_from_wc" => "ibv_init_ah_from_wc@@IBVERBS_1.1",
    "srv_ibv_modify_qp" => "ibv_modify_qp@@IBVERBS_1.1",
    "srv_ibv_modify_srq" => "ibv_modify_srq@@IBVERBS_1.1",
    "srv_ibv_node_type_str" => "ibv_node_type_str@@IBVERBS_1.1",
    "srv_ibv_open_device" => "ibv_open_device@@IBVERBS_1.1",
    "srv_ibv_port_state_str" => "ibv_port_state_str@@IBVERBS_1.1",
    "srv_ibv_query_device" => "ibv_query_device@@IBVERBS_1.1",
    "srv_ibv_query_gid" => "ibv_query_gid@@IBVERBS_1.1",
    "srv_ibv_query_pkey" => "ibv_query_pkey@@IBVERBS_1.1",
    "srv_ibv_query_port" => "ibv_query_port@@IBVERBS_1.1",
    "srv_ibv_query_qp" => "ibv_query_qp@@IBVERBS_1.1",
    "srv_ibv_query_srq" => "ibv_query_srq@@IBVERBS_1.1",
    "srv_ibv_rate_to_mbps" => "ibv_rate_to_mbps@@IBVERBS_1.1",
    "srv_ibv_reg_mr" => "ibv_reg_mr@@IBVERBS_1.1",
    "srv_ibv_rereg_mr" => "ibv_rereg_mr@@IBVERBS_1.1",
    "srv_ibv_resize_cq" => "ibv_resize_cq@@IBVERBS_1.1",
    "srv_ibv_resolve_eth_l2_from_gid" => "ibv_resolve_eth_l2_from_gid@@IBVERBS_1.1",
    "srv_ibv_wc_status_str" => "ibv_wc_status_str@@IBVERBS_1.1",
    "srv_mbps_to_ibv_rate" => "mbps_to_ibv_rate@@IBVERBS_1.1",
    // IBVERBS_1.5 … 1.14
    "srv_ibv_get_pkey_index" => "ibv_get_pkey_index@@IBVERBS_1.5",
    "srv_ibv_qp_to_qp_ex" => "ibv_qp_to_qp_ex@@IBVERBS_1.6",
    "srv_ibv_reg_mr_iova" => "ibv_reg_mr_iova@@IBVERBS_1.7",
    "srv_ibv_reg_mr_iova2" => "ibv_reg_mr_iova2@@IBVERBS_1.8",
    "srv_ibv_get_device_index" => "ibv_get_device_index@@IBVERBS_1.9",
    "srv_new_null" => "ibv_import_device@@IBVERBS_1.10",
    "srv_new_null" => "ibv_import_mr@@IBVERBS_1.10",
    "srv_new_null" => "ibv_import_pd@@IBVERBS_1.10",
    "srv_new_int" => "ibv_query_ece@@IBVERBS_1.10",
    "srv_new_int" => "ibv_set_ece@@IBVERBS_1.10",
    "srv_void" => "ibv_unimport_mr@@IBVERBS_1.10",
    "srv_void" => "ibv_unimport_pd@@IBVERBS_1.10",
    "srv__ibv_query_gid_ex" => "_ibv_query_gid_ex@@IBVERBS_1.11",
    "srv__ibv_query_gid_table" => "_ibv_query_gid_table@@IBVERBS_1.11",
    "srv_new_null" => "ibv_reg_dmabuf_mr@@IBVERBS_1.12",
    "srv_new_null" => "ibv_import_dm@@IBVERBS_1.13",
    "srv_ibv_is_fork_initialized" => "ibv_is_fork_initialized@@IBVERBS_1.13",
    "srv_void" => "ibv_unimport_dm@@IBVERBS_1.13",
    "srv_ibv_query_qp_data_in_order" => "ibv_query_qp_data_in_order@@IBVERBS_1.14",
    // IBVERBS_PRIVATE_34: what provider libraries (libmlx5, libefa, …)
    // import. They load beside this library when a program links them
    // (perftest does) but never drive a device here: their constructor's
    // verbs_register_driver_34 is accepted and forgotten, the rest answer
    // as unsupported.
    "srv_priv_int" => "__ioctl_final_num_attrs@@IBVERBS_PRIVATE_34",
    "srv_void" => "__verbs_log@@IBVERBS_PRIVATE_34",
    "srv_new_null" => "_verbs_init_and_alloc_context@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "execute_ioctl@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_advise_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_alloc_dm@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_alloc_mw@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_alloc_pd@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_attach_mcast@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_close_xrcd@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_ah@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_counters@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_cq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_cq_ex@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_flow@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_flow_action_esp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_qp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_qp_ex@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_qp_ex2@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_rwq_ind_table@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_srq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_srq_ex@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_create_wq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_dealloc_mw@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_dealloc_pd@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_dereg_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_ah@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_counters@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_cq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_flow@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_flow_action@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_qp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_rwq_ind_table@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_srq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_destroy_wq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_detach_mcast@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_free_dm@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_get_context@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_cq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_flow_action_esp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_qp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_qp_ex@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_srq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_modify_wq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_open_qp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_open_xrcd@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_poll_cq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_post_recv@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_post_send@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_post_srq_recv@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_context@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_device_any@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_port@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_qp@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_query_srq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_read_counters@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_reg_dm_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_reg_dmabuf_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_reg_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_req_notify_cq@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_rereg_mr@@IBVERBS_PRIVATE_34",
    "srv_priv_int" => "ibv_cmd_resize_cq@@IBVERBS_PRIVATE_34",
    "srv_ibv_query_gid_type" => "ibv_query_gid_type@@IBVERBS_PRIVATE_34",
    "srv_ibv_read_sysfs_file" => "ibv_read_ibdev_sysfs_file@@IBVERBS_PRIVATE_34",
    "srv_verbs_allow_disassociate_destroy" => "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34",
    "srv_void" => "verbs_init_cq@@IBVERBS_PRIVATE_34",
    "srv_new_null" => "verbs_open_device@@IBVERBS_PRIVATE_34",
    "srv_void" => "verbs_register_driver_34@@IBVERBS_PRIVATE_34",
    "srv_void" => "verbs_set_ops@@IBVERBS_PRIVATE_34",
    "srv_void" => "verbs_uninit_context@@IBVERBS_PRIVATE_34",
}

compat! {
    int srv_old_ibv_ack_async_event => "ibv_ack_async_event@IBVERBS_1.0",
    int srv_old_ibv_ack_cq_events => "ibv_ack_cq_events@IBVERBS_1.0",
    null srv_old_ibv_alloc_pd => "ibv_alloc_pd@IBVERBS_1.0",
    int srv_old_ibv_attach_mcast => "ibv_attach_mcast@IBVERBS_1.0",
    int srv_old_ibv_close_device => "ibv_close_device@IBVERBS_1.0",
    null srv_old_ibv_create_ah => "ibv_create_ah@IBVERBS_1.0",
    null srv_old_ibv_create_cq => "ibv_create_cq@IBVERBS_1.0",
    null srv_old_ibv_create_qp => "ibv_create_qp@IBVERBS_1.0",
    null srv_old_ibv_create_srq => "ibv_create_srq@IBVERBS_1.0",
    int srv_old_ibv_dealloc_pd => "ibv_dealloc_pd@IBVERBS_1.0",
    int srv_old_ibv_dereg_mr => "ibv_dereg_mr@IBVERBS_1.0",
    int srv_old_ibv_destroy_ah => "ibv_destroy_ah@IBVERBS_1.0",
    int srv_old_ibv_destroy_cq => "ibv_destroy_cq@IBVERBS_1.0",
    int srv_old_ibv_destroy_qp => "ibv_destroy_qp@IBVERBS_1.0",
    int srv_old_ibv_destroy_srq => "ibv_destroy_srq@IBVERBS_1.0",
    int srv_old_ibv_detach_mcast => "ibv_detach_mcast@IBVERBS_1.0",
    int srv_old_ibv_free_device_list => "ibv_free_device_list@IBVERBS_1.0",
    int srv_old_ibv_get_async_event => "ibv_get_async_event@IBVERBS_1.0",
    int srv_old_ibv_get_cq_event => "ibv_get_cq_event@IBVERBS_1.0",
    int srv_old_ibv_get_device_guid => "ibv_get_device_guid@IBVERBS_1.0",
    null srv_old_ibv_get_device_list => "ibv_get_device_list@IBVERBS_1.0",
    null srv_old_ibv_get_device_name => "ibv_get_device_name@IBVERBS_1.0",
    int srv_old_ibv_modify_qp => "ibv_modify_qp@IBVERBS_1.0",
    int srv_old_ibv_modify_srq => "ibv_modify_srq@IBVERBS_1.0",
    null srv_old_ibv_open_device => "ibv_open_device@IBVERBS_1.0",
    int srv_old_ibv_query_device => "ibv_query_device@IBVERBS_1.0",
    int srv_old_ibv_query_gid => "ibv_query_gid@IBVERBS_1.0",
    int srv_old_ibv_query_pkey => "ibv_query_pkey@IBVERBS_1.0",
    int srv_old_ibv_query_port => "ibv_query_port@IBVERBS_1.0",
    int srv_old_ibv_query_qp => "ibv_query_qp@IBVERBS_1.0",
    int srv_old_ibv_query_srq => "ibv_query_srq@IBVERBS_1.0",
    null srv_old_ibv_reg_mr => "ibv_reg_mr@IBVERBS_1.0",
    int srv_old_ibv_resize_cq => "ibv_resize_cq@IBVERBS_1.0",
    int srv_old_ibv_register_driver => "ibv_register_driver@IBVERBS_1.1",
}
