//! The control protocol: one JSON object per SOCK_SEQPACKET message,
//! `{"v":1,"req":{...}}` from the client and `{"v":1,"resp":{...}}` back.
//! Memfds travel as SCM_RIGHTS on the same message (RegMr: client→daemon;
//! CreateCq/CreateQp: daemon→client); `Bell` answers with the engine's
//! eventfd (daemon→client). Unknown versions, unknown fields'
//! types, oversize messages and missing descriptors are refused with an
//! `Error` response; nothing a client sends can make the daemon panic.

use nic::verbs::{AhAttr, QpAttr, QpState};
use serde::{Deserialize, Serialize};

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

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    QueryDevice,
    /// The engine's bell (an eventfd, attached to the `Ok` answer): a
    /// client rings it after posting when a ring's header says the engine
    /// parks (`ring::PARKED_AT`). An error answer: the engine has none.
    Bell,
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
    /// Completion events for `cq` (`ibv_req_notify_cq` with a completion
    /// channel): an eventfd attached, which the daemon writes when a
    /// completion arrives on the CQ while the ring header's "armed" word
    /// (`ring::ARMED_AT`) asks for one; it disarms it then.
    NotifyCq {
        cq: u32,
    },
    CreateQp {
        pd: u32,
        qp_type: QpKind,
        send_cq: u32,
        recv_cq: u32,
        max_send_wr: u32,
        max_recv_wr: u32,
        sq_sig_all: bool,
        /// Receive from this SRQ (the client's, same PD) instead of the
        /// QP's own receive ring.
        #[serde(default)]
        srq: Option<u32>,
    },
    ModifyQp {
        qpn: u32,
        attr: QpAttrMsg,
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
        attr: AhMsg,
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
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Response {
    Ok,
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
        state: String,
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
    Port {
        /// `enum ibv_port_state`: 1 DOWN, 4 ACTIVE (the link is up).
        state: u32,
        /// IB MTUs in bytes (256..4096).
        active_mtu: u32,
        max_mtu: u32,
        link_speed_bps: u64,
    },
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
}

/// An asynchronous event (`struct ibv_async_event`) on one of the client's
/// own objects: a QP (by QPN), a CQ (by its handle) or an SRQ (by its
/// handle); or an unaffiliated one about the port, which every client
/// hears. The `type` tags are the snake_case variant names; the SRQ one
/// is unchanged since it was the only one.
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

impl AsyncEventMsg {
    /// The event's number in rdma-core's `enum ibv_event_type` (None: an
    /// unknown kind).
    pub fn ibv_event_type(&self) -> Option<u32> {
        self.to_event().map(|e| e.ibv_event_type())
    }

    /// The transport's event with the same object number (None: an
    /// unknown kind).
    pub fn to_event(&self) -> Option<nic::verbs::AsyncEvent> {
        use nic::verbs::AsyncEvent as E;
        Some(match *self {
            AsyncEventMsg::Unknown => return None,
            AsyncEventMsg::SrqLimitReached { srq } => E::SrqLimitReached(srq),
            AsyncEventMsg::CqErr { cq } => E::CqErr(cq),
            AsyncEventMsg::QpFatal { qp } => E::QpFatal(qp),
            AsyncEventMsg::QpReqErr { qp } => E::QpReqErr(qp),
            AsyncEventMsg::QpAccessErr { qp } => E::QpAccessErr(qp),
            AsyncEventMsg::CommEst { qp } => E::CommEst(qp),
            AsyncEventMsg::SqDrained { qp } => E::SqDrained(qp),
            AsyncEventMsg::QpLastWqeReached { qp } => E::QpLastWqeReached(qp),
            AsyncEventMsg::PortActive { port } => E::PortActive(port),
            AsyncEventMsg::PortErr { port } => E::PortErr(port),
        })
    }

    pub fn from_event(e: nic::verbs::AsyncEvent) -> AsyncEventMsg {
        use nic::verbs::AsyncEvent as E;
        match e {
            E::SrqLimitReached(srq) => AsyncEventMsg::SrqLimitReached { srq },
            E::CqErr(cq) => AsyncEventMsg::CqErr { cq },
            E::QpFatal(qp) => AsyncEventMsg::QpFatal { qp },
            E::QpReqErr(qp) => AsyncEventMsg::QpReqErr { qp },
            E::QpAccessErr(qp) => AsyncEventMsg::QpAccessErr { qp },
            E::CommEst(qp) => AsyncEventMsg::CommEst { qp },
            E::SqDrained(qp) => AsyncEventMsg::SqDrained { qp },
            E::QpLastWqeReached(qp) => AsyncEventMsg::QpLastWqeReached { qp },
            E::PortActive(port) => AsyncEventMsg::PortActive { port },
            E::PortErr(port) => AsyncEventMsg::PortErr { port },
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default)]
pub struct AhMsg {
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// The 802.1Q tag to send with (absent: untagged; older clients).
    #[serde(default)]
    pub vlan: Option<VlanMsg>,
}

/// An 802.1Q tag: priority (PCP, 3 bits), drop eligible, VLAN ID (12 bits;
/// 0 tags priority only, 4095 is reserved, IEEE 802.1Q 9.6).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VlanMsg {
    pub pcp: u8,
    #[serde(default)]
    pub dei: bool,
    pub vid: u16,
}

impl AhMsg {
    pub fn from_ah(ah: &AhAttr) -> AhMsg {
        AhMsg {
            dgid: ah.dgid.0,
            dmac: ah.dmac.0,
            traffic_class: ah.traffic_class,
            hop_limit: ah.hop_limit,
            flow_label: ah.flow_label,
            vlan: ah.vlan.map(|v| VlanMsg {
                pcp: v.pcp,
                dei: v.dei,
                vid: v.vid,
            }),
        }
    }

    /// Validates and converts (flow label: 20 bits, IPv6 RFC 8200; VLAN:
    /// PCP 0..=7, VID 0..=4094).
    pub fn to_ah(&self) -> Result<AhAttr, String> {
        if self.flow_label > 0xf_ffff {
            return Err("flow_label out of range".into());
        }
        if let Some(v) = self.vlan {
            if v.pcp > 7 || v.vid > 4094 {
                return Err(format!(
                    "VLAN pcp {} vid {}: pcp 0..=7, vid 0..=4094",
                    v.pcp, v.vid
                ));
            }
        }
        Ok(AhAttr {
            dgid: wire::Gid(self.dgid),
            dmac: wire::EthernetAddress(self.dmac),
            traffic_class: self.traffic_class,
            hop_limit: self.hop_limit,
            flow_label: self.flow_label,
            vlan: self.vlan.map(|v| wire::VlanTag {
                pcp: v.pcp,
                dei: v.dei,
                vid: v.vid,
            }),
        })
    }
}

/// `QpAttr` on the wire (the path's VLAN tag travels in its `ah`).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct QpAttrMsg {
    pub state: Option<String>,
    pub pkey_index: Option<u16>,
    pub port: Option<u8>,
    pub access_flags: Option<u32>,
    pub qkey: Option<u32>,
    pub ah: Option<AhMsg>,
    pub path_mtu: Option<u32>,
    pub dest_qpn: Option<u32>,
    pub rq_psn: Option<u32>,
    pub max_dest_rd_atomic: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub sq_psn: Option<u32>,
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub max_rd_atomic: Option<u8>,
}

pub fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "reset",
        QpState::Init => "init",
        QpState::Rtr => "rtr",
        QpState::Rts => "rts",
        QpState::Sqd => "sqd",
        QpState::Sqe => "sqe",
        QpState::Err => "err",
    }
}

pub fn parse_state(s: &str) -> Option<QpState> {
    Some(match s {
        "reset" => QpState::Reset,
        "init" => QpState::Init,
        "rtr" => QpState::Rtr,
        "rts" => QpState::Rts,
        "sqd" => QpState::Sqd,
        "sqe" => QpState::Sqe,
        "err" => QpState::Err,
        _ => return None,
    })
}

impl QpAttrMsg {
    pub fn from_attr(a: &QpAttr) -> QpAttrMsg {
        QpAttrMsg {
            state: a.state.map(|s| state_name(s).to_string()),
            pkey_index: a.pkey_index,
            port: a.port,
            access_flags: a.access_flags,
            qkey: a.qkey,
            ah: a.ah.as_ref().map(AhMsg::from_ah),
            path_mtu: a.path_mtu,
            dest_qpn: a.dest_qpn,
            rq_psn: a.rq_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            sq_psn: a.sq_psn,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
        }
    }

    /// Validates and converts; `check_modify` in the transport validates
    /// the combination.
    pub fn to_attr(&self) -> Result<QpAttr, String> {
        let state = match &self.state {
            Some(s) => Some(parse_state(s).ok_or_else(|| format!("unknown QP state {s:?}"))?),
            None => None,
        };
        if self.ah.is_some_and(|a| a.flow_label > 0xf_ffff) {
            return Err("flow_label out of range".into());
        }
        Ok(QpAttr {
            state,
            pkey_index: self.pkey_index,
            port: self.port,
            access_flags: self.access_flags,
            qkey: self.qkey,
            ah: self.ah.map(|a| AhAttr {
                dgid: wire::Gid(a.dgid),
                dmac: wire::EthernetAddress(a.dmac),
                traffic_class: a.traffic_class,
                hop_limit: a.hop_limit,
                flow_label: a.flow_label & 0xf_ffff,
                vlan: None,
            }),
            path_mtu: self.path_mtu,
            dest_qpn: self.dest_qpn,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
        })
    }
}

pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    serde_json::to_vec(m).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_this_build_does_not_know_parse_as_unknown() {
        let r: RespMsg = serde_json::from_str(
            r#"{"v":1,"resp":{"r":"async_events","events":[
                {"type":"device_fatal"},
                {"type":"srq_limit_reached","srq":3},
                {"type":"some_future_kind","qp":7,"extra":[1,2]}]}}"#,
        )
        .expect("the list parses");
        let Response::AsyncEvents { events } = r.resp else {
            panic!("{:?}", r.resp)
        };
        assert_eq!(
            events,
            [
                AsyncEventMsg::Unknown,
                AsyncEventMsg::SrqLimitReached { srq: 3 },
                AsyncEventMsg::Unknown
            ]
        );
        assert_eq!(events[0].to_event(), None);
        assert_eq!(events[1].ibv_event_type(), Some(15));
        // what the daemon sends stays as it was
        let srq = serde_json::to_string(&AsyncEventMsg::SrqLimitReached { srq: 3 }).unwrap();
        assert_eq!(srq, r#"{"type":"srq_limit_reached","srq":3}"#);
    }

    #[test]
    fn port_events_carry_the_port_and_their_ibv_numbers() {
        let e = AsyncEventMsg::PortErr { port: 1 };
        let s = serde_json::to_string(&e).unwrap();
        assert_eq!(s, r#"{"type":"port_err","port":1}"#);
        assert_eq!(serde_json::from_str::<AsyncEventMsg>(&s).unwrap(), e);
        assert_eq!(e.ibv_event_type(), Some(10));
        let a = AsyncEventMsg::PortActive { port: 1 };
        assert_eq!(a.ibv_event_type(), Some(9));
        assert_eq!(AsyncEventMsg::from_event(a.to_event().unwrap()), a);
        // a port number that does not fit is refused, not wrapped
        assert!(
            serde_json::from_str::<AsyncEventMsg>(r#"{"type":"port_err","port":300}"#).is_err()
        );
    }

    #[test]
    fn an_address_handle_keeps_its_vlan_tag_and_bad_tags_are_refused() {
        let mut ah = AhAttr::new(
            wire::Gid([7; 16]),
            wire::EthernetAddress([2, 0, 0, 0, 0, 9]),
        );
        ah.vlan = Some(wire::VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        });
        let json = serde_json::to_string(&AhMsg::from_ah(&ah)).unwrap();
        let back: AhMsg = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_ah().unwrap(), ah);
        // a client that knows no VLAN field: untagged
        let old = json.replace(r#","vlan":{"pcp":3,"dei":false,"vid":100}"#, "");
        assert_ne!(old, json);
        let m: AhMsg = serde_json::from_str(&old).unwrap();
        assert_eq!(m.to_ah().unwrap().vlan, None);
        for (pcp, vid) in [(8, 1), (0, 4095), (255, 0xFFFF)] {
            let mut m = back;
            m.vlan = Some(VlanMsg {
                pcp,
                dei: false,
                vid,
            });
            assert!(m.to_ah().is_err(), "pcp {pcp} vid {vid}");
        }
        // and in a QP's path (modify_qp)
        let a = QpAttr {
            ah: Some(ah),
            ..Default::default()
        };
        assert_eq!(QpAttrMsg::from_attr(&a).ah.unwrap().vlan.unwrap().vid, 100);
    }
}
