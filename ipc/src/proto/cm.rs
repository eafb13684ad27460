//! The RDMA CM's control messages (the kernel's ucma commands as the
//! model: a request per verb, events on a channel descriptor) and the
//! events themselves, as the client library hands them out.

use nic::verbs::{QpAttr, QpState};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A CM ID's number, unique in its daemon (never 0).
pub type CmIdNo = u32;

/// `enum rdma_port_space` (rdma_cma.h). TCP and UDP are served; IB and
/// IPoIB are refused.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpace(pub u16);

impl PortSpace {
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    pub const TCP: PortSpace = PortSpace(0x0106);
    pub const UDP: PortSpace = PortSpace(0x0111);
    pub const IB: PortSpace = PortSpace(0x013F);
}

/// The QP type an ID connects (`ibv_qp_type` numbers: RC 2, UD 4).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CmQpType {
    Rc,
    Ud,
}

/// `struct rdma_conn_param` as `connect` and `accept` pass it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// The local QP's number (24 bits).
    pub qpn: u32,
    pub srq: bool,
    /// The local QP's starting receive PSN (the Starting PSN of its REQ or
    /// REP); the daemon picks one when absent.
    pub psn: Option<u32>,
    /// The user's private data (at most 56 bytes in a connect, 196 in an
    /// accept).
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// Where `bind` (or `resolve_addr`) put an ID.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The device's name.
    pub dev: String,
    /// Always 1.
    pub port: u8,
    /// Always 0 (one GID per device).
    pub gid_index: u8,
    pub gid: [u8; 16],
    /// The bound address, its port chosen when 0 was asked for.
    pub addr: SocketAddr,
}

/// What `query` tells of an ID (`rdma_query_id` / `rdma_cm_id.route`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct IdInfo {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub dev: String,
    pub port: u8,
    pub sgid: [u8; 16],
    pub dgid: Option<[u8; 16]>,
    pub dmac: Option<[u8; 6]>,
    pub pkey: u16,
    /// The path MTU in bytes (the port's active MTU).
    pub path_mtu: u32,
    /// 1 once the route is resolved (or the ID came from a request).
    pub num_paths: u32,
    pub ps: PortSpace,
    pub qp_type: CmQpType,
}

/// `enum rdma_cm_event_type` (rdma_cma.h).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmEventKind(pub u32);

impl CmEventKind {
    pub const ADDR_RESOLVED: CmEventKind = CmEventKind(0);
    pub const ADDR_ERROR: CmEventKind = CmEventKind(1);
    pub const ROUTE_RESOLVED: CmEventKind = CmEventKind(2);
    pub const ROUTE_ERROR: CmEventKind = CmEventKind(3);
    pub const CONNECT_REQUEST: CmEventKind = CmEventKind(4);
    pub const CONNECT_RESPONSE: CmEventKind = CmEventKind(5);
    pub const CONNECT_ERROR: CmEventKind = CmEventKind(6);
    pub const UNREACHABLE: CmEventKind = CmEventKind(7);
    pub const REJECTED: CmEventKind = CmEventKind(8);
    pub const ESTABLISHED: CmEventKind = CmEventKind(9);
    pub const DISCONNECTED: CmEventKind = CmEventKind(10);
    pub const DEVICE_REMOVAL: CmEventKind = CmEventKind(11);
    pub const MULTICAST_JOIN: CmEventKind = CmEventKind(12);
    pub const MULTICAST_ERROR: CmEventKind = CmEventKind(13);
    pub const ADDR_CHANGE: CmEventKind = CmEventKind(14);
    pub const TIMEWAIT_EXIT: CmEventKind = CmEventKind(15);
}

/// The connection parameters an event carries (`rdma_cm_event.param.conn`).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnEventParam {
    /// The user's part of the peer's private data (the IP CM header of a
    /// REQ removed).
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The peer's QP number.
    pub qp_num: u32,
}

/// The datagram parameters an event carries (`rdma_cm_event.param.ud`).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct UdEventParam {
    pub private_data: Vec<u8>,
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub qp_num: u32,
    pub qkey: u32,
}

/// One CM event (`struct rdma_cm_event`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CmEventMsg {
    pub id: CmIdNo,
    pub user_ctx: u64,
    pub kind: CmEventKind,
    /// 0, or -errno, or the REJ reason (as librdmacm reports it).
    pub status: i32,
    /// CONNECT_REQUEST: the listening ID (`id` is the new one).
    pub listen_id: Option<CmIdNo>,
    pub conn: Option<ConnEventParam>,
    pub ud: Option<UdEventParam>,
    /// CONNECT_REQUEST: the new ID's local and remote addresses.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
}

/// The CM requests (flattened into `Request` with a `cm_` prefix).
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "cm", rename_all = "snake_case")]
pub enum CmRequest {
    /// A new event channel: its descriptor (a SOCK_SEQPACKET socket, one
    /// event per message, readable iff an event is queued) comes with the
    /// answer. It lives as long as the connection that made it.
    CreateChannel,
    CreateId {
        chan: u64,
        ps: PortSpace,
        qp_type: CmQpType,
        user_ctx: u64,
    },
    DestroyId {
        id: CmIdNo,
    },
    Bind {
        id: CmIdNo,
        addr: SocketAddr,
    },
    ResolveAddr {
        id: CmIdNo,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    },
    ResolveRoute {
        id: CmIdNo,
        timeout_ms: u32,
    },
    Query {
        id: CmIdNo,
    },
    Listen {
        id: CmIdNo,
        backlog: u32,
    },
    Connect {
        id: CmIdNo,
        param: ConnParam,
    },
    Accept {
        id: CmIdNo,
        param: ConnParam,
    },
    Reject {
        id: CmIdNo,
        private_data: Vec<u8>,
    },
    Disconnect {
        id: CmIdNo,
    },
    InitQpAttr {
        id: CmIdNo,
        state: QpState,
    },
    Establish {
        id: CmIdNo,
    },
    /// `rdma_notify`: `event` is an `ibv_event_type`.
    Notify {
        id: CmIdNo,
        event: u32,
    },
    MigrateId {
        id: CmIdNo,
        chan: u64,
    },
}

/// The CM answers.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "cm", rename_all = "snake_case")]
pub enum CmResponse {
    /// The channel's token (names it in `CreateId`, `MigrateId`); its
    /// descriptor is attached.
    Channel {
        token: u64,
    },
    Id {
        id: CmIdNo,
    },
    Bound(Bound),
    Info(IdInfo),
    /// The attributes for `ibv_modify_qp` and their `ibv_qp_attr_mask`.
    QpAttr {
        attr: QpAttr,
        mask: u32,
    },
    /// How many events were reported on the ID (`destroy_id`,
    /// `migrate_id`).
    Events {
        events: u32,
    },
}

/// `enum ibv_qp_attr_mask` bits (verbs.h).
pub mod qp_mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}
