//! The values of `<infiniband/verbs.h>`'s enumerations this library uses
//! (as constants of the C type the header's functions take them as).

use libc::c_int;

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

// enum ibv_event_type (the device's own event; the others come from the
// transport's numbering, nic::verbs::AsyncEvent::ibv_event_type)
pub const IBV_EVENT_DEVICE_FATAL: c_int = 8;

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

// enum ibv_qp_init_attr_mask / ibv_qp_create_send_ops_flags
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;

// enum ibv_create_cq_wc_flags
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
/// `IBV_WC_STANDARD_FLAGS`: the fields of an `ibv_wc`.
pub const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;

// enum ibv_cq_init_attr_mask / ibv_create_cq_attr_flags
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

// enum ibv_rereg_mr_flags / ibv_rereg_mr_err_code
pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1 << 0;
pub const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
pub const IBV_REREG_MR_FLAGS_SUPPORTED: c_int = 0x7;
pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;
