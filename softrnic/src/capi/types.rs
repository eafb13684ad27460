//! The structures of `include/softrnic.h`: opaque handles and the
//! `#[repr(C)]` attribute, work-request and completion structures, laid
//! out field for field as the header declares them.

use super::Bufs;
use crate::client::{Ah, Context, Cq, Mr, Pd, Qp, Srq};
use std::ffi::c_int;
use std::sync::Arc;

/// `struct srnic_context`: an open device (`srnic_open_device`).
pub struct SrnicContext {
    pub(super) ctx: Arc<Context>,
    pub(super) bufs: Bufs,
}

/// `struct srnic_pd`: a protection domain (`srnic_alloc_pd`).
pub struct SrnicPd {
    pub(super) pd: Pd,
    pub(super) bufs: Bufs,
}

/// `struct srnic_mr`: a registered memory region (`srnic_reg_mr`).
pub struct SrnicMr {
    pub(super) mr: Mr,
}

/// `struct srnic_cq`: a completion queue (`srnic_create_cq`).
pub struct SrnicCq {
    pub(super) cq: Cq,
}

/// `struct srnic_qp`: a queue pair (`srnic_create_qp`, `srnic_create_qp_ex`).
pub struct SrnicQp {
    pub(super) qp: Qp,
}

/// `struct srnic_ah`: an address handle for UD sends (`srnic_create_ah`).
pub struct SrnicAh {
    pub(super) ah: Ah,
}

/// `struct srnic_srq`: a shared receive queue (`srnic_create_srq`).
pub struct SrnicSrq {
    pub(super) srq: Srq,
}

/// `struct srnic_ah_attr`: where a UD send goes.
#[repr(C)]
pub struct SrnicAhAttr {
    /// The destination's GID (an IPv4-mapped or IPv6 address).
    pub dgid: [u8; 16],
    /// The next hop's Ethernet address.
    pub dmac: [u8; 6],
    /// IP traffic class: DSCP << 2 | ECN.
    pub traffic_class: u8,
    /// IP hop limit (TTL).
    pub hop_limit: u8,
    /// IPv6 flow label, 20 bits (larger values are refused).
    pub flow_label: u32,
}

/// The C structure at the API's edge: the verbs layer's address vector
/// (the C struct has no VLAN tag).
impl From<&SrnicAhAttr> for nic::verbs::AhAttr {
    fn from(a: &SrnicAhAttr) -> Self {
        nic::verbs::AhAttr {
            dgid: wire::Gid(a.dgid),
            dmac: wire::EthernetAddress(a.dmac),
            traffic_class: a.traffic_class,
            hop_limit: a.hop_limit,
            flow_label: a.flow_label,
            vlan: None,
        }
    }
}

/// `srnic_wc` plus the UD fields (`srnic_poll_cq_ex`).
#[repr(C)]
pub struct SrnicWcEx {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// `enum srnic_wc_status`.
    pub status: u32,
    /// `enum srnic_wc_opcode`.
    pub opcode: u32,
    /// The local QP's number.
    pub qp_num: u32,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// The immediate data when `wc_flags` bit 0 is set.
    pub imm_data: u32,
    /// bit 0: imm_data valid; bit 1: a GRH precedes the data (UD)
    pub wc_flags: u32,
    /// UD receives: the sending QP's number.
    pub src_qp: u32,
    /// Padding to the header's size; 0.
    pub _pad: u32,
}

/// `SRNIC_QPT_RC`: a reliable connected QP (`srnic_qp_init_attr_ex.qp_type`).
pub const SRNIC_QPT_RC: u32 = 0;
/// `SRNIC_QPT_UC`: an unreliable connected QP.
pub const SRNIC_QPT_UC: u32 = 1;
/// `SRNIC_QPT_UD`: an unreliable datagram QP.
pub const SRNIC_QPT_UD: u32 = 2;

/// `struct srnic_qp_init_attr_ex`: a QP of any type (`srnic_create_qp_ex`).
#[repr(C)]
pub struct SrnicQpInitAttrEx {
    /// Where send completions go.
    pub send_cq: *mut SrnicCq,
    /// Where receive completions go.
    pub recv_cq: *mut SrnicCq,
    /// NULL: the QP has its own receive queue.
    pub srq: *mut SrnicSrq,
    /// Send queue depth (rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue depth (unused with an SRQ).
    pub max_recv_wr: u32,
    /// Nonzero: every send completes with a CQE, signaled or not.
    pub sq_sig_all: c_int,
    /// `SRNIC_QPT_RC`, `SRNIC_QPT_UC` or `SRNIC_QPT_UD`.
    pub qp_type: u32,
}

/// `struct srnic_device_attr` (`srnic_query_device`).
#[repr(C)]
pub struct SrnicDeviceAttr {
    /// The device's GID.
    pub gid: [u8; 16],
    /// The port's Ethernet address.
    pub mac: [u8; 6],
    /// The port's Ethernet MTU in bytes.
    pub mtu: u32,
    /// The deepest work queue a QP may have.
    pub max_qp_wr: u32,
    /// The most entries a CQ may have.
    pub max_cqe: u32,
    /// The most scatter/gather entries per work request.
    pub max_sge: u32,
}

/// `struct srnic_sge`: one scatter/gather entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SrnicSge {
    /// Start address, in a registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// `struct srnic_send_wr`: one send work request.
#[repr(C)]
pub struct SrnicSendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `enum srnic_wr_opcode`.
    pub opcode: u32,
    /// `enum srnic_send_flags`.
    pub send_flags: u32,
    /// `num_sge` entries (NULL when 0).
    pub sg_list: *const SrnicSge,
    /// At most 8.
    pub num_sge: u32,
    /// Immediate data, or the rkey to invalidate (SEND_WITH_INV).
    pub imm_data: u32,
    /// RDMA and atomic operations: the remote address.
    pub remote_addr: u64,
    /// RDMA and atomic operations: the remote key.
    pub rkey: u32,
    /// Padding to the header's layout; ignored.
    pub _pad: u32,
    /// Atomics: the compare value (CMP_AND_SWP) or the addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// CMP_AND_SWP: the value swapped in.
    pub swap: u64,
}

/// `struct srnic_recv_wr`: one receive work request.
#[repr(C)]
pub struct SrnicRecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `num_sge` entries (NULL when 0).
    pub sg_list: *const SrnicSge,
    /// At most 8.
    pub num_sge: u32,
}

/// `struct srnic_wc`: one completion (`srnic_poll_cq`).
#[repr(C)]
pub struct SrnicWc {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// `enum srnic_wc_status`.
    pub status: u32,
    /// `enum srnic_wc_opcode`.
    pub opcode: u32,
    /// The local QP's number.
    pub qp_num: u32,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// The immediate data when `wc_flags` bit 0 is set.
    pub imm_data: u32,
    /// bit 0: imm_data valid
    pub wc_flags: u32,
}

/// `struct srnic_qp_init_attr`: an RC QP (`srnic_create_qp`).
#[repr(C)]
pub struct SrnicQpInitAttr {
    /// Where send completions go.
    pub send_cq: *mut SrnicCq,
    /// Where receive completions go.
    pub recv_cq: *mut SrnicCq,
    /// Send queue depth (rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue depth (rounded up to a power of two).
    pub max_recv_wr: u32,
    /// Nonzero: every send completes with a CQE, signaled or not.
    pub sq_sig_all: c_int,
}

/// `struct srnic_port_attr` (`ibv_port_attr`, the fields a RoCE port has).
#[repr(C)]
pub struct SrnicPortAttr {
    /// `enum ibv_port_state`: 1 DOWN, 4 ACTIVE (SRNIC_PORT_*).
    pub state: u32,
    /// IB MTUs in bytes (256..4096).
    pub active_mtu: u32,
    /// The largest IB MTU the port supports, in bytes.
    pub max_mtu: u32,
    /// The link's speed in bits per second.
    pub link_speed_bps: u64,
}

/// `struct ibv_async_event` with the object's number instead of a pointer.
#[repr(C)]
pub struct SrnicAsyncEvent {
    /// rdma-core `enum ibv_event_type` numbering (SRNIC_EVENT_*).
    pub event_type: u32,
    /// QP events: the QP's number; otherwise 0.
    pub qp_num: u32,
    /// SRNIC_EVENT_CQ_ERR: the CQ's handle number; otherwise 0.
    pub cq_num: u32,
    /// SRNIC_EVENT_SRQ_LIMIT_REACHED: the SRQ's number; otherwise 0.
    pub srq_num: u32,
    /// SRNIC_EVENT_PORT_ACTIVE / SRNIC_EVENT_PORT_ERR: the port (1);
    /// otherwise 0.
    pub port_num: u32,
}
