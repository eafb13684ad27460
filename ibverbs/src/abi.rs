//! The C structures and constants of rdma-core 44's `<infiniband/verbs.h>`
//! that applications share with libibverbs, laid out as the header lays
//! them out. `tests/abi_layout.rs` compiles a C program against the
//! installed header (libibverbs-dev) and compares every offset and size
//! listed in [`LAYOUT`] with it.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void, pthread_cond_t, pthread_mutex_t};

pub type Fp = Option<unsafe extern "C" fn()>;

/// `union ibv_gid`: 16 bytes, aligned as its `__be64` view.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
pub struct ibv_device {
    /// `struct _ibv_device_ops`: two pointers providers of old used.
    pub _ops: [Fp; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context_ops`: what the inline verbs of the header call
/// through (the `_compat_*` slots are unused by rdma-core 44's library).
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Fp,
    pub _compat_query_port: Fp,
    pub _compat_alloc_pd: Fp,
    pub _compat_dealloc_pd: Fp,
    pub _compat_reg_mr: Fp,
    pub _compat_rereg_mr: Fp,
    pub _compat_dereg_mr: Fp,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: Fp,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat_cq_event: Fp,
    pub _compat_resize_cq: Fp,
    pub _compat_destroy_cq: Fp,
    pub _compat_create_srq: Fp,
    pub _compat_modify_srq: Fp,
    pub _compat_query_srq: Fp,
    pub _compat_destroy_srq: Fp,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat_create_qp: Fp,
    pub _compat_query_qp: Fp,
    pub _compat_modify_qp: Fp,
    pub _compat_destroy_qp: Fp,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat_create_ah: Fp,
    pub _compat_destroy_ah: Fp,
    pub _compat_attach_mcast: Fp,
    pub _compat_detach_mcast: Fp,
    pub _compat_async_event: Fp,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `abi_compat` says a `verbs_context`
/// precedes the `ibv_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `struct verbs_context`: the extension that grows downwards in memory
/// ("grows up" in the header's words) and ends with the `ibv_context`.
/// The inline `ibv_query_port`, `ibv_query_device_ex`, `ibv_create_qp_ex`,
/// `ibv_create_cq_ex` … reach these slots at negative offsets from the
/// `ibv_context` pointer, after checking `sz` and the slot.
#[repr(C)]
pub struct verbs_context {
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    pub advise_mr: Fp,
    pub alloc_null_mr: Fp,
    pub read_counters: Fp,
    pub attach_counters_point_flow: Fp,
    pub create_counters: Fp,
    pub destroy_counters: Fp,
    pub reg_dm_mr: Fp,
    pub alloc_dm: Fp,
    pub free_dm: Fp,
    pub modify_flow_action_esp: Fp,
    pub destroy_flow_action: Fp,
    pub create_flow_action_esp: Fp,
    pub modify_qp_rate_limit: Fp,
    pub alloc_parent_domain: Fp,
    pub dealloc_td: Fp,
    pub alloc_td: Fp,
    pub modify_cq: Fp,
    pub post_srq_ops: Fp,
    pub destroy_rwq_ind_table: Fp,
    pub create_rwq_ind_table: Fp,
    pub destroy_wq: Fp,
    pub modify_wq: Fp,
    pub create_wq: Fp,
    pub query_rt_values: Fp,
    pub create_cq_ex: Fp,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: Fp,
    pub abi_placeholder2: Fp,
    pub ibv_create_flow: Fp,
    pub abi_placeholder1: Fp,
    pub open_qp: Fp,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    pub create_srq_ex: Fp,
    pub open_xrcd: Fp,
    pub close_xrcd: Fp,
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` up to `phys_port_cnt_ex`; the capability
/// structs in between are zero here (no ODP, TSO, RSS, pacing, tag
/// matching, CQ moderation, device memory, PCI atomics), so they are kept
/// as padded byte blocks whose offsets the layout test checks.
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// odp_caps (24) … pci_atomic_caps, xrc_odp_caps: all zero.
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: [u32; 2],
    pub rss_caps: [u64; 4],
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    pub tm_caps: [u32; 5],
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct _compat_ibv_port_attr`: `ibv_port_attr` before `port_cap_flags2`
/// (what the exported `ibv_query_port` fills).
pub const COMPAT_PORT_ATTR_LEN: usize = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: wr_rdma,
    pub atomic: wr_atomic,
    pub ud: wr_ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub qp_type: u32,
    /// `bind_mw` (the union with `tso`: 48 bytes).
    pub bind_mw: wr_bind_mw,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind` (what `ibv_bind_mw` takes).
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.bind_mw`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

#[repr(C)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: c_int,
}

// enum ibv_node_type / ibv_transport_type
pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;

// enum ibv_port_state
pub const IBV_PORT_DOWN: c_int = 1;
pub const IBV_PORT_ACTIVE: c_int = 4;
// ibv_port_attr.link_layer
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
// phys_state (IBA 14.2.5.6): 5 LinkUp, 3 Disabled
pub const PHYS_STATE_LINK_UP: u8 = 5;
pub const PHYS_STATE_DISABLED: u8 = 3;
// port_cap_flags
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;

// enum ibv_gid_type (the sysfs / ibv_query_gid_type numbering)
pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

// enum ibv_atomic_cap
pub const IBV_ATOMIC_HCA: c_int = 1;

// enum ibv_device_cap_flags (those that hold)
pub const IBV_DEVICE_BAD_PKEY_CNTR: u32 = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: u32 = 1 << 2;
pub const IBV_DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: u32 = 1 << 13;
pub const IBV_DEVICE_N_NOTIFY_CQ: u32 = 1 << 14;
pub const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;

// enum ibv_qp_type
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;

// enum ibv_qp_state
pub const IBV_QPS_RESET: c_int = 0;
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QPS_RTS: c_int = 3;
pub const IBV_QPS_SQD: c_int = 4;
pub const IBV_QPS_SQE: c_int = 5;
pub const IBV_QPS_ERR: c_int = 6;

// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: c_int = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_ALT_PATH: c_int = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
pub const IBV_QP_CAP: c_int = 1 << 19;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_QP_RATE_LIMIT: c_int = 1 << 25;

// enum ibv_qp_init_attr_mask
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;

// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_ACCESS_REMOTE_READ: c_int = 4;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 8;
pub const IBV_ACCESS_MW_BIND: c_int = 16;
pub const IBV_ACCESS_ZERO_BASED: c_int = 32;
pub const IBV_ACCESS_ON_DEMAND: c_int = 64;
pub const IBV_ACCESS_HUGETLB: c_int = 128;
pub const IBV_ACCESS_RELAXED_ORDERING: c_int = 1 << 20;

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_LOCAL_INV: c_int = 7;
pub const IBV_WR_BIND_MW: c_int = 8;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

// enum ibv_send_flags
pub const IBV_SEND_FENCE: u32 = 1;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_SOLICITED: u32 = 4;
pub const IBV_SEND_INLINE: u32 = 8;

// enum ibv_wc_opcode
pub const IBV_WC_SEND: c_int = 0;
pub const IBV_WC_RDMA_WRITE: c_int = 1;
pub const IBV_WC_RDMA_READ: c_int = 2;
pub const IBV_WC_COMP_SWAP: c_int = 3;
pub const IBV_WC_FETCH_ADD: c_int = 4;
pub const IBV_WC_BIND_MW: c_int = 5;
pub const IBV_WC_LOCAL_INV: c_int = 6;
pub const IBV_WC_RECV: c_int = 128;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_int = 129;

// enum ibv_wc_flags
pub const IBV_WC_GRH: u32 = 1;
pub const IBV_WC_WITH_IMM: u32 = 2;
pub const IBV_WC_WITH_INV: u32 = 8;

// enum ibv_srq_attr_mask
pub const IBV_SRQ_MAX_WR: c_int = 1;
pub const IBV_SRQ_LIMIT: c_int = 2;

// enum ibv_fork_status
pub const IBV_FORK_DISABLED: c_int = 0;
pub const IBV_FORK_ENABLED: c_int = 1;

/// (name, offset or size in bytes) pairs the layout test compares with the
/// C compiler's `offsetof` / `sizeof` on the system header. A name
/// `struct.field` is an offset, a bare `struct` a size.
pub const LAYOUT: &[(&str, usize)] = {
    use std::mem::{offset_of as o, size_of as s};
    &[
        ("ibv_device", s::<ibv_device>()),
        ("ibv_device.node_type", o!(ibv_device, node_type)),
        ("ibv_device.name", o!(ibv_device, name)),
        ("ibv_device.dev_name", o!(ibv_device, dev_name)),
        ("ibv_device.dev_path", o!(ibv_device, dev_path)),
        ("ibv_device.ibdev_path", o!(ibv_device, ibdev_path)),
        ("ibv_context_ops", s::<ibv_context_ops>()),
        ("ibv_context_ops.alloc_mw", o!(ibv_context_ops, alloc_mw)),
        ("ibv_context_ops.poll_cq", o!(ibv_context_ops, poll_cq)),
        (
            "ibv_context_ops.req_notify_cq",
            o!(ibv_context_ops, req_notify_cq),
        ),
        (
            "ibv_context_ops.post_srq_recv",
            o!(ibv_context_ops, post_srq_recv),
        ),
        ("ibv_context_ops.post_send", o!(ibv_context_ops, post_send)),
        ("ibv_context_ops.post_recv", o!(ibv_context_ops, post_recv)),
        ("ibv_context", s::<ibv_context>()),
        ("ibv_context.ops", o!(ibv_context, ops)),
        ("ibv_context.cmd_fd", o!(ibv_context, cmd_fd)),
        ("ibv_context.async_fd", o!(ibv_context, async_fd)),
        (
            "ibv_context.num_comp_vectors",
            o!(ibv_context, num_comp_vectors),
        ),
        ("ibv_context.mutex", o!(ibv_context, mutex)),
        ("ibv_context.abi_compat", o!(ibv_context, abi_compat)),
        ("verbs_context", s::<verbs_context>()),
        ("verbs_context.query_port", o!(verbs_context, query_port)),
        (
            "verbs_context.create_cq_ex",
            o!(verbs_context, create_cq_ex),
        ),
        ("verbs_context.priv", o!(verbs_context, priv_)),
        (
            "verbs_context.query_device_ex",
            o!(verbs_context, query_device_ex),
        ),
        ("verbs_context.open_qp", o!(verbs_context, open_qp)),
        (
            "verbs_context.create_qp_ex",
            o!(verbs_context, create_qp_ex),
        ),
        ("verbs_context.get_srq_num", o!(verbs_context, get_srq_num)),
        ("verbs_context.close_xrcd", o!(verbs_context, close_xrcd)),
        ("verbs_context.sz", o!(verbs_context, sz)),
        ("verbs_context.context", o!(verbs_context, context)),
        ("ibv_device_attr", s::<ibv_device_attr>()),
        ("ibv_device_attr.node_guid", o!(ibv_device_attr, node_guid)),
        ("ibv_device_attr.vendor_id", o!(ibv_device_attr, vendor_id)),
        (
            "ibv_device_attr.vendor_part_id",
            o!(ibv_device_attr, vendor_part_id),
        ),
        ("ibv_device_attr.max_qp_wr", o!(ibv_device_attr, max_qp_wr)),
        (
            "ibv_device_attr.device_cap_flags",
            o!(ibv_device_attr, device_cap_flags),
        ),
        (
            "ibv_device_attr.max_qp_rd_atom",
            o!(ibv_device_attr, max_qp_rd_atom),
        ),
        (
            "ibv_device_attr.atomic_cap",
            o!(ibv_device_attr, atomic_cap),
        ),
        (
            "ibv_device_attr.max_srq_sge",
            o!(ibv_device_attr, max_srq_sge),
        ),
        ("ibv_device_attr.max_pkeys", o!(ibv_device_attr, max_pkeys)),
        (
            "ibv_device_attr.local_ca_ack_delay",
            o!(ibv_device_attr, local_ca_ack_delay),
        ),
        (
            "ibv_device_attr.phys_port_cnt",
            o!(ibv_device_attr, phys_port_cnt),
        ),
        ("ibv_device_attr_ex", s::<ibv_device_attr_ex>()),
        (
            "ibv_device_attr_ex.comp_mask",
            o!(ibv_device_attr_ex, comp_mask),
        ),
        (
            "ibv_device_attr_ex.odp_caps",
            o!(ibv_device_attr_ex, odp_caps),
        ),
        (
            "ibv_device_attr_ex.completion_timestamp_mask",
            o!(ibv_device_attr_ex, completion_timestamp_mask),
        ),
        (
            "ibv_device_attr_ex.device_cap_flags_ex",
            o!(ibv_device_attr_ex, device_cap_flags_ex),
        ),
        (
            "ibv_device_attr_ex.tso_caps",
            o!(ibv_device_attr_ex, tso_caps),
        ),
        (
            "ibv_device_attr_ex.rss_caps",
            o!(ibv_device_attr_ex, rss_caps),
        ),
        (
            "ibv_device_attr_ex.max_wq_type_rq",
            o!(ibv_device_attr_ex, max_wq_type_rq),
        ),
        (
            "ibv_device_attr_ex.packet_pacing_caps",
            o!(ibv_device_attr_ex, packet_pacing_caps),
        ),
        (
            "ibv_device_attr_ex.raw_packet_caps",
            o!(ibv_device_attr_ex, raw_packet_caps),
        ),
        (
            "ibv_device_attr_ex.tm_caps",
            o!(ibv_device_attr_ex, tm_caps),
        ),
        (
            "ibv_device_attr_ex.cq_mod_caps",
            o!(ibv_device_attr_ex, cq_mod_caps),
        ),
        (
            "ibv_device_attr_ex.max_dm_size",
            o!(ibv_device_attr_ex, max_dm_size),
        ),
        (
            "ibv_device_attr_ex.pci_atomic_caps",
            o!(ibv_device_attr_ex, pci_atomic_caps),
        ),
        (
            "ibv_device_attr_ex.xrc_odp_caps",
            o!(ibv_device_attr_ex, xrc_odp_caps),
        ),
        (
            "ibv_device_attr_ex.phys_port_cnt_ex",
            o!(ibv_device_attr_ex, phys_port_cnt_ex),
        ),
        ("ibv_port_attr", s::<ibv_port_attr>()),
        ("ibv_port_attr.gid_tbl_len", o!(ibv_port_attr, gid_tbl_len)),
        (
            "ibv_port_attr.port_cap_flags",
            o!(ibv_port_attr, port_cap_flags),
        ),
        ("ibv_port_attr.max_msg_sz", o!(ibv_port_attr, max_msg_sz)),
        (
            "ibv_port_attr.pkey_tbl_len",
            o!(ibv_port_attr, pkey_tbl_len),
        ),
        (
            "ibv_port_attr.active_width",
            o!(ibv_port_attr, active_width),
        ),
        (
            "ibv_port_attr.active_speed",
            o!(ibv_port_attr, active_speed),
        ),
        ("ibv_port_attr.phys_state", o!(ibv_port_attr, phys_state)),
        ("ibv_port_attr.link_layer", o!(ibv_port_attr, link_layer)),
        ("ibv_port_attr.flags", o!(ibv_port_attr, flags)),
        (
            "ibv_port_attr.port_cap_flags2",
            o!(ibv_port_attr, port_cap_flags2),
        ),
        ("ibv_gid_entry", s::<ibv_gid_entry>()),
        ("ibv_gid_entry.gid_index", o!(ibv_gid_entry, gid_index)),
        ("ibv_gid_entry.gid_type", o!(ibv_gid_entry, gid_type)),
        (
            "ibv_gid_entry.ndev_ifindex",
            o!(ibv_gid_entry, ndev_ifindex),
        ),
        ("ibv_wc", s::<ibv_wc>()),
        ("ibv_wc.status", o!(ibv_wc, status)),
        ("ibv_wc.opcode", o!(ibv_wc, opcode)),
        ("ibv_wc.byte_len", o!(ibv_wc, byte_len)),
        ("ibv_wc.imm_data", o!(ibv_wc, imm_data)),
        ("ibv_wc.qp_num", o!(ibv_wc, qp_num)),
        ("ibv_wc.src_qp", o!(ibv_wc, src_qp)),
        ("ibv_wc.wc_flags", o!(ibv_wc, wc_flags)),
        ("ibv_wc.pkey_index", o!(ibv_wc, pkey_index)),
        ("ibv_wc.slid", o!(ibv_wc, slid)),
        ("ibv_wc.sl", o!(ibv_wc, sl)),
        ("ibv_wc.dlid_path_bits", o!(ibv_wc, dlid_path_bits)),
        ("ibv_pd", s::<ibv_pd>()),
        ("ibv_pd.handle", o!(ibv_pd, handle)),
        ("ibv_mr", s::<ibv_mr>()),
        ("ibv_mr.addr", o!(ibv_mr, addr)),
        ("ibv_mr.length", o!(ibv_mr, length)),
        ("ibv_mr.lkey", o!(ibv_mr, lkey)),
        ("ibv_mr.rkey", o!(ibv_mr, rkey)),
        ("ibv_global_route", s::<ibv_global_route>()),
        (
            "ibv_global_route.flow_label",
            o!(ibv_global_route, flow_label),
        ),
        (
            "ibv_global_route.sgid_index",
            o!(ibv_global_route, sgid_index),
        ),
        (
            "ibv_global_route.traffic_class",
            o!(ibv_global_route, traffic_class),
        ),
        ("ibv_grh", s::<ibv_grh>()),
        ("ibv_grh.sgid", o!(ibv_grh, sgid)),
        ("ibv_grh.dgid", o!(ibv_grh, dgid)),
        ("ibv_ah_attr", s::<ibv_ah_attr>()),
        ("ibv_ah_attr.dlid", o!(ibv_ah_attr, dlid)),
        ("ibv_ah_attr.is_global", o!(ibv_ah_attr, is_global)),
        ("ibv_ah_attr.port_num", o!(ibv_ah_attr, port_num)),
        ("ibv_srq_attr", s::<ibv_srq_attr>()),
        ("ibv_srq_init_attr", s::<ibv_srq_init_attr>()),
        ("ibv_srq_init_attr.attr", o!(ibv_srq_init_attr, attr)),
        ("ibv_qp_cap", s::<ibv_qp_cap>()),
        ("ibv_qp_init_attr", s::<ibv_qp_init_attr>()),
        ("ibv_qp_init_attr.cap", o!(ibv_qp_init_attr, cap)),
        ("ibv_qp_init_attr.qp_type", o!(ibv_qp_init_attr, qp_type)),
        (
            "ibv_qp_init_attr.sq_sig_all",
            o!(ibv_qp_init_attr, sq_sig_all),
        ),
        ("ibv_qp_init_attr_ex", s::<ibv_qp_init_attr_ex>()),
        (
            "ibv_qp_init_attr_ex.comp_mask",
            o!(ibv_qp_init_attr_ex, comp_mask),
        ),
        ("ibv_qp_init_attr_ex.pd", o!(ibv_qp_init_attr_ex, pd)),
        (
            "ibv_qp_init_attr_ex.create_flags",
            o!(ibv_qp_init_attr_ex, create_flags),
        ),
        (
            "ibv_qp_init_attr_ex.rx_hash_conf",
            o!(ibv_qp_init_attr_ex, rx_hash_conf),
        ),
        (
            "ibv_qp_init_attr_ex.source_qpn",
            o!(ibv_qp_init_attr_ex, source_qpn),
        ),
        (
            "ibv_qp_init_attr_ex.send_ops_flags",
            o!(ibv_qp_init_attr_ex, send_ops_flags),
        ),
        ("ibv_qp_attr", s::<ibv_qp_attr>()),
        ("ibv_gid_entry.port_num", o!(ibv_gid_entry, port_num)),
        ("ibv_qp_attr.qkey", o!(ibv_qp_attr, qkey)),
        ("ibv_qp_attr.dest_qp_num", o!(ibv_qp_attr, dest_qp_num)),
        (
            "ibv_qp_attr.qp_access_flags",
            o!(ibv_qp_attr, qp_access_flags),
        ),
        ("ibv_qp_attr.cap", o!(ibv_qp_attr, cap)),
        ("ibv_qp_attr.ah_attr", o!(ibv_qp_attr, ah_attr)),
        ("ibv_qp_attr.alt_ah_attr", o!(ibv_qp_attr, alt_ah_attr)),
        ("ibv_qp_attr.pkey_index", o!(ibv_qp_attr, pkey_index)),
        ("ibv_qp_attr.max_rd_atomic", o!(ibv_qp_attr, max_rd_atomic)),
        ("ibv_qp_attr.min_rnr_timer", o!(ibv_qp_attr, min_rnr_timer)),
        ("ibv_qp_attr.port_num", o!(ibv_qp_attr, port_num)),
        ("ibv_qp_attr.timeout", o!(ibv_qp_attr, timeout)),
        ("ibv_qp_attr.rnr_retry", o!(ibv_qp_attr, rnr_retry)),
        ("ibv_qp_attr.alt_timeout", o!(ibv_qp_attr, alt_timeout)),
        ("ibv_qp_attr.rate_limit", o!(ibv_qp_attr, rate_limit)),
        ("ibv_sge", s::<ibv_sge>()),
        ("ibv_send_wr", s::<ibv_send_wr>()),
        ("ibv_send_wr.next", o!(ibv_send_wr, next)),
        ("ibv_send_wr.sg_list", o!(ibv_send_wr, sg_list)),
        ("ibv_send_wr.num_sge", o!(ibv_send_wr, num_sge)),
        ("ibv_send_wr.opcode", o!(ibv_send_wr, opcode)),
        ("ibv_send_wr.send_flags", o!(ibv_send_wr, send_flags)),
        ("ibv_send_wr.imm_data", o!(ibv_send_wr, imm_data)),
        ("ibv_send_wr.wr", o!(ibv_send_wr, wr)),
        ("ibv_send_wr.qp_type", o!(ibv_send_wr, qp_type)),
        ("ibv_send_wr.bind_mw", o!(ibv_send_wr, bind_mw)),
        (
            "ibv_send_wr.bind_mw.rkey",
            o!(ibv_send_wr, bind_mw) + o!(wr_bind_mw, rkey),
        ),
        (
            "ibv_send_wr.bind_mw.bind_info",
            o!(ibv_send_wr, bind_mw) + o!(wr_bind_mw, bind_info),
        ),
        ("ibv_mw", s::<ibv_mw>()),
        ("ibv_mw.pd", o!(ibv_mw, pd)),
        ("ibv_mw.rkey", o!(ibv_mw, rkey)),
        ("ibv_mw.handle", o!(ibv_mw, handle)),
        ("ibv_mw.type", o!(ibv_mw, mw_type)),
        ("ibv_mw_bind_info", s::<ibv_mw_bind_info>()),
        ("ibv_mw_bind_info.addr", o!(ibv_mw_bind_info, addr)),
        ("ibv_mw_bind_info.length", o!(ibv_mw_bind_info, length)),
        (
            "ibv_mw_bind_info.mw_access_flags",
            o!(ibv_mw_bind_info, mw_access_flags),
        ),
        ("ibv_mw_bind", s::<ibv_mw_bind>()),
        ("ibv_mw_bind.send_flags", o!(ibv_mw_bind, send_flags)),
        ("ibv_mw_bind.bind_info", o!(ibv_mw_bind, bind_info)),
        ("ibv_recv_wr", s::<ibv_recv_wr>()),
        ("ibv_recv_wr.num_sge", o!(ibv_recv_wr, num_sge)),
        ("ibv_srq", s::<ibv_srq>()),
        ("ibv_srq.handle", o!(ibv_srq, handle)),
        ("ibv_srq.mutex", o!(ibv_srq, mutex)),
        ("ibv_srq.cond", o!(ibv_srq, cond)),
        ("ibv_srq.events_completed", o!(ibv_srq, events_completed)),
        ("ibv_qp", s::<ibv_qp>()),
        ("ibv_qp.srq", o!(ibv_qp, srq)),
        ("ibv_qp.handle", o!(ibv_qp, handle)),
        ("ibv_qp.qp_num", o!(ibv_qp, qp_num)),
        ("ibv_qp.state", o!(ibv_qp, state)),
        ("ibv_qp.qp_type", o!(ibv_qp, qp_type)),
        ("ibv_qp.mutex", o!(ibv_qp, mutex)),
        ("ibv_qp.events_completed", o!(ibv_qp, events_completed)),
        ("ibv_comp_channel", s::<ibv_comp_channel>()),
        ("ibv_comp_channel.fd", o!(ibv_comp_channel, fd)),
        ("ibv_comp_channel.refcnt", o!(ibv_comp_channel, refcnt)),
        ("ibv_cq", s::<ibv_cq>()),
        ("ibv_cq.cq_context", o!(ibv_cq, cq_context)),
        ("ibv_cq.handle", o!(ibv_cq, handle)),
        ("ibv_cq.cqe", o!(ibv_cq, cqe)),
        ("ibv_cq.mutex", o!(ibv_cq, mutex)),
        ("ibv_cq.cond", o!(ibv_cq, cond)),
        (
            "ibv_cq.comp_events_completed",
            o!(ibv_cq, comp_events_completed),
        ),
        (
            "ibv_cq.async_events_completed",
            o!(ibv_cq, async_events_completed),
        ),
        ("ibv_ah", s::<ibv_ah>()),
        ("ibv_ah.handle", o!(ibv_ah, handle)),
        ("ibv_async_event", s::<ibv_async_event>()),
        (
            "ibv_async_event.event_type",
            o!(ibv_async_event, event_type),
        ),
    ]
};
