//! The control protocol: one JSON object per SOCK_SEQPACKET message,
//! `{"v":1,"req":{...}}` from the client and `{"v":1,"resp":{...}}` back.
//! Memfds travel as SCM_RIGHTS on the same message (RegMr: client→daemon;
//! CreateCq/CreateQp: daemon→client); `Bell` answers with the engine's
//! eventfd (daemon→client). Unknown versions, unknown fields'
//! types, oversize messages and missing descriptors are refused with an
//! `Error` response; nothing a client sends can make the daemon panic.

use nic::verbs::{AhAttr, QpAttr, QpState};
use serde::{Deserialize, Serialize};

pub mod cm;
mod convert;

pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ReqMsg {
    pub v: u32,
    pub req: Request,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct RespMsg {
    pub v: u32,
    pub resp: Response,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum QpKind {
    Rc,
    Uc,
    Ud,
}

/// What a QP is created with (`ibv_qp_init_attr`; its PD travels beside
/// it in `CreateQp`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpKind,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub sq_sig_all: bool,
    /// Receive from this SRQ (the client's, same PD) instead of the QP's
    /// own receive ring.
    #[serde(default)]
    pub srq: Option<u32>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    QueryDevice,
    /// The engine's bell (an eventfd, attached to the `Ok` answer): a
    /// client rings it after posting when its doorbell page says the
    /// engine parks (`doorbell`). An error answer: the engine has none.
    Bell,
    /// The client's doorbell page (`doorbell::PAGE_LEN` bytes, its memfd
    /// attached to the `Ok` answer), where it marks the rings it posts
    /// to; the engine fetches work from no other.
    Doorbells,
    AllocPd,
    DeallocPd {
        pd: u32,
    },
    /// Attach the memfd holding the buffer; `offset` is where the region
    /// starts in it, `addr` the client's virtual address of that byte.
    RegMr {
        pd: u32,
        offset: u64,
        addr: u64,
        len: u64,
        access: u32,
    },
    DeregMr {
        lkey: u32,
    },
    /// `ibv_rereg_mr`: region `lkey` becomes the one described as in
    /// `RegMr` (memfd attached), in place: its keys stay.
    ReregMr {
        lkey: u32,
        pd: u32,
        offset: u64,
        addr: u64,
        len: u64,
        access: u32,
    },
    /// A memory window (`ibv_alloc_mw`); `mw_type` is `ibv_mw_type` (1 or
    /// 2). Bound and invalidated by work requests on a QP's send ring.
    AllocMw {
        pd: u32,
        mw_type: u32,
    },
    /// `ibv_dealloc_mw`; `handle` is the window's key index (`rkey >> 8`).
    DeallocMw {
        handle: u32,
    },
    CreateCq {
        cqe: u32,
    },
    DestroyCq {
        cq: u32,
    },
    /// `ibv_resize_cq`: the CQ's ring becomes a new one of at least `cqe`
    /// entries holding the completions not yet polled at the same
    /// indices; answered with `Cq` and the new ring's memfd.
    ResizeCq {
        cq: u32,
        cqe: u32,
    },
    /// Completion events for `cq` (`ibv_req_notify_cq` with a completion
    /// channel): an eventfd attached, which the daemon writes when a
    /// completion arrives on the CQ while the ring header's "armed" word
    /// (`ring::ARMED_AT`) asks for one; it disarms it then.
    NotifyCq {
        cq: u32,
    },
    CreateQp {
        pd: u32,
        #[serde(flatten)]
        init: QpInitAttr,
    },
    ModifyQp {
        qpn: u32,
        attr: QpAttr,
    },
    QueryQp {
        qpn: u32,
    },
    DestroyQp {
        qpn: u32,
    },
    /// An address handle for UD sends (`ibv_create_ah`).
    CreateAh {
        pd: u32,
        attr: AhAttr,
    },
    DestroyAh {
        ah: u32,
    },
    /// A shared receive queue (`ibv_create_srq`); its ring's memfd comes
    /// back with the reply.
    CreateSrq {
        pd: u32,
        max_wr: u32,
    },
    DestroySrq {
        srq: u32,
    },
    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: arm (or, 0, disarm) the limit.
    ModifySrq {
        srq: u32,
        limit: u32,
    },
    /// `ibv_query_srq`.
    QuerySrq {
        srq: u32,
    },
    /// Asynchronous events for this client (`ibv_get_async_event`): an
    /// eventfd attached, which the daemon writes when one is queued.
    AsyncEventFd,
    /// The queued asynchronous events (up to 64; none: an empty list).
    GetAsyncEvents,
    /// Daemon-wide object counts (administration and tests).
    Stats,
    /// `ibv_query_port`: the device's one port is 1; any other number is
    /// refused.
    QueryPort {
        port: u8,
    },
    /// The RDMA CM (`cm::CmRequest`).
    Cm(cm::CmRequest),
    /// Every QP's DCQCN reaction-point state (administration and tools,
    /// daemon-wide as `Stats`), a page of at most [`CC_STATES_PER_PAGE`]
    /// QPs from QPN `from_qpn` on; the answer's `next_qpn` continues it.
    CcStates {
        #[serde(default)]
        from_qpn: u32,
    },
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Response {
    Ok,
    /// An answer to a CM request.
    Cm(cm::CmResponse),
    Error {
        msg: String,
    },
    Device {
        name: String,
        gid: [u8; 16],
        mac: [u8; 6],
        mtu: u32,
        max_qp_wr: u32,
        max_cqe: u32,
        max_sge: u32,
        /// The kernel interface the device stands beside, if any.
        #[serde(default)]
        netdev: Option<String>,
    },
    Pd {
        pd: u32,
    },
    Mr {
        lkey: u32,
        rkey: u32,
    },
    /// A new memory window: its R_Key; its handle is `rkey >> 8`.
    Mw {
        rkey: u32,
    },
    /// With the CQ ring's memfd attached.
    Cq {
        cq: u32,
        entries: u32,
        map_len: u64,
    },
    /// With the QP rings' memfd attached: SQ ring at 0, RQ ring at rq_offset.
    Qp {
        qpn: u32,
        sq_entries: u32,
        rq_entries: u32,
        rq_offset: u64,
        map_len: u64,
    },
    QpInfo {
        qpn: u32,
        state: QpState,
        dest_qpn: u32,
        mtu: u32,
        sq_psn: u32,
        rq_psn: u32,
    },
    Ah {
        ah: u32,
    },
    /// With the SRQ ring's memfd attached (one receive ring at 0).
    SrqInfo {
        max_wr: u32,
        /// The armed limit (0: not armed, or fired).
        limit: u32,
        /// Receive WQEs the transport holds for it now.
        pending: u32,
    },
    AsyncEvents {
        events: Vec<AsyncEventMsg>,
    },
    Srq {
        srq: u32,
        entries: u32,
        map_len: u64,
    },
    Stats(Stats),
    /// `ibv_query_port`'s answer.
    Port(PortInfo),
    /// `CcStates`' answer: one page of QPs.
    CcStates(CcStates),
}

/// Most QPs one `CcStates` answer carries: at the widest values each
/// takes under 200 bytes of JSON, so a page stays well inside
/// [`crate::shm::MAX_MSG`].
pub const CC_STATES_PER_PAGE: usize = 200;

/// One page of the device's per-QP DCQCN state (`nic::cc::RpState`), as
/// of one instant of the device's clock.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct CcStates {
    /// The device clock's instant the states are of (nanoseconds since
    /// the engine started).
    pub now_ns: u64,
    /// The port's line rate, bits per second: RC and RT of a QP DCQCN
    /// does not limit.
    pub line_bps: u64,
    /// The QPs, by QPN in ascending order.
    pub qps: Vec<QpCcState>,
    /// More QPs follow: ask again from this QPN.
    #[serde(default)]
    pub next_qpn: Option<u32>,
}

/// One QP's DCQCN reaction point at one instant; on the wire its
/// state's fields sit beside `qpn`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct QpCcState {
    pub qpn: u32,
    /// RC, RT, α (its decay up to `now_ns` included), cuts, CNPs handled.
    #[serde(flatten)]
    pub state: nic::cc::RpState,
}

/// What `query_port` reports (`struct ibv_port_attr`, the fields a RoCE
/// port has); on the wire, the fields of the `port` answer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// `enum ibv_port_state`: 1 DOWN, 4 ACTIVE (the link is up).
    pub state: u32,
    /// IB MTUs in bytes (256..4096).
    pub active_mtu: u32,
    /// The largest IB MTU the port supports, in bytes.
    pub max_mtu: u32,
    /// The link's speed in bits per second.
    pub link_speed_bps: u64,
}

impl PortInfo {
    /// The IB width and speed codes (`ibv_port_attr.active_width`,
    /// `active_speed`) whose product is closest to the link's rate from
    /// below (1X: SDR 2.5, DDR 5, QDR 10, FDR 14, EDR 25, HDR 50, NDR 100
    /// Gb/s per lane; 4X four lanes).
    pub fn width_speed(&self) -> (u8, u8) {
        match self.link_speed_bps / 1_000_000_000 {
            0..=4 => (1, 1),
            5..=9 => (1, 2),
            10..=13 => (1, 4),
            14..=24 => (1, 16),
            25..=39 => (1, 32),
            40..=49 => (2, 4),
            50..=99 => (1, 64),
            100..=199 => (2, 32),
            200..=399 => (2, 64),
            _ => (2, 128),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub clients: u32,
    pub pds: u32,
    pub mrs: u32,
    pub cqs: u32,
    pub qps: u32,
    /// QPs the transport still has (probes every QPN the daemon handed out).
    pub rnic_qps: u32,
    /// Rings the engine polls.
    pub active_qp_rings: u32,
    pub active_cq_rings: u32,
    /// Clients that went away and were cleaned up.
    pub clients_reaped: u64,
    #[serde(default)]
    pub ahs: u32,
    #[serde(default)]
    pub srqs: u32,
    /// SRQ rings the engine polls.
    #[serde(default)]
    pub active_srq_rings: u32,
    /// The device's CM: messages sent and received per kind
    /// (`cm_tx_req`, `cm_rx_rep`, ...), `cm_retries`, `cm_timeouts`,
    /// drops by reason, QP 1's `gsi_*` counters and drops.
    #[serde(default)]
    pub cm: std::collections::BTreeMap<String, u64>,
    /// The device's transport counters (`rdma statistic` names: every
    /// QP's plus those of destroyed QPs), its port's (`rx_packets`, ...,
    /// `rx_dropped`, `tx_dropped`) and the received frames dropped before
    /// reaching a QP, by reason.
    #[serde(default)]
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// An asynchronous event (`struct ibv_async_event`) on one of the client's
/// own objects: a QP (by QPN), a CQ (by its handle) or an SRQ (by its
/// handle); or an unaffiliated one about the port, which every client
/// hears. The `type` tags are the snake_case variant names
/// (`srq_limit_reached`, `cq_err`, ...).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AsyncEventMsg {
    /// IBV_EVENT_SRQ_LIMIT_REACHED on the client's SRQ `srq`.
    SrqLimitReached { srq: u32 },
    /// IBV_EVENT_CQ_ERR: the CQ overran.
    CqErr { cq: u32 },
    /// IBV_EVENT_QP_FATAL: the QP's CQ overran; the QP is in ERR.
    QpFatal { qp: u32 },
    /// IBV_EVENT_QP_REQ_ERR: the QP NAKed an invalid request and is in ERR.
    QpReqErr { qp: u32 },
    /// IBV_EVENT_QP_ACCESS_ERR: the QP NAKed a remote access error and is
    /// in ERR.
    QpAccessErr { qp: u32 },
    /// IBV_EVENT_COMM_EST: the first packet arrived while the QP was in RTR.
    CommEst { qp: u32 },
    /// IBV_EVENT_SQ_DRAINED: the QP is in SQD with nothing in progress.
    SqDrained { qp: u32 },
    /// IBV_EVENT_QP_LAST_WQE_REACHED: the QP (on an SRQ) went to ERR.
    QpLastWqeReached { qp: u32 },
    /// IBV_EVENT_PORT_ACTIVE: the link of `port` came up (to every client).
    PortActive { port: u8 },
    /// IBV_EVENT_PORT_ERR: the link of `port` went down (to every client).
    PortErr { port: u8 },
    /// A kind this build does not know (from a newer daemon): clients skip
    /// it, so adding a kind never breaks an older client's event list.
    #[serde(other)]
    Unknown,
}

/// The message as JSON bytes.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    serde_json::to_vec(m).unwrap_or_default()
}
