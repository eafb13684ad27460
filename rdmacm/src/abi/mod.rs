//! The C structures and constants of rdma-core 44's `<rdma/rdma_cma.h>`
//! (and the pieces of `<infiniband/verbs.h>` and `<infiniband/sa.h>` they
//! embed), laid out as the headers lay them out. `tests/abi_layout.rs`
//! compiles a C program against the installed headers (librdmacm-dev) and
//! compares every offset and size listed in [`LAYOUT`] with it.
//!
//! The verbs structures are `verbs-abi`'s (re-exported below): this
//! library reads a few of their fields and reaches the objects otherwise
//! only through the exported verbs of `libibverbs.so.1`.

#![allow(non_camel_case_types)]

pub mod layout;

pub use layout::LAYOUT;

use libc::{c_char, c_int, c_void, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};

pub use verbs_abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_gid, ibv_global_route,
    ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_srq, ibv_srq_init_attr,
    IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, IBV_QPT_UD, IBV_QP_AV,
    IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT,
};

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`): what
/// `rdma_cm_id.route.path_rec` points at once a route is resolved.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// `enum rdma_port_space`.
pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;

/// The Q_Key of RDMA_PS_UDP IDs.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// "As many as the device allows" in `rdma_conn_param`.
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

/// `rdma_addrinfo.ai_flags`.
pub const RAI_PASSIVE: c_int = 0x1;
pub const RAI_NUMERICHOST: c_int = 0x2;
pub const RAI_NOROUTE: c_int = 0x4;
pub const RAI_FAMILY: c_int = 0x8;

/// `rdma_set_option` levels and names.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// The `src_*` / `dst_*` unions of `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_sockaddr {
    pub addr: sockaddr,
    pub sin: sockaddr_in,
    pub sin6: sockaddr_in6,
    pub storage: sockaddr_storage,
}

/// `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: rdma_sockaddr,
    pub dst: rdma_sockaddr,
    /// The `addr` union, whose one member is `ibaddr`.
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`: the application reads (and the `rdma_verbs.h`
/// inline helpers use) every field.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}
