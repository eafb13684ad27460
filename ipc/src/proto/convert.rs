//! The one conversion between control-protocol messages and the verbs
//! types they carry: `From` for what the daemon or client sends, and
//! `TryFrom` (with a [`ConvertError`]) for what arrives from the other
//! side and must be validated first. A message field either maps onto a
//! verbs field here or is refused here; nothing else in the crate copies
//! fields between the two.

use super::{AhMsg, AsyncEventMsg, PortInfo, QpAttrMsg, QpKind, QpStateMsg, VlanMsg};
use nic::device::PortAttr;
use nic::verbs::AsyncEvent;
use nic::verbs::{AhAttr, QpAttr, QpState, QpType};
use wire::VlanTag;

/// Why a message's value cannot become a verbs value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// IPv6 flow labels have 20 bits (RFC 8200).
    #[error("flow label {0:#x} does not fit in 20 bits")]
    FlowLabel(u32),
    /// IEEE 802.1Q 9.6: PCP 0..=7; VID 0..=4094 (4095 is reserved).
    #[error("VLAN pcp {pcp} vid {vid}: pcp 0..=7, vid 0..=4094")]
    Vlan {
        /// The priority asked for.
        pcp: u8,
        /// The VLAN ID asked for.
        vid: u16,
    },
}

impl From<VlanTag> for VlanMsg {
    fn from(v: VlanTag) -> VlanMsg {
        VlanMsg {
            pcp: v.pcp,
            dei: v.dei,
            vid: v.vid,
        }
    }
}

impl TryFrom<VlanMsg> for VlanTag {
    type Error = ConvertError;

    fn try_from(v: VlanMsg) -> Result<VlanTag, ConvertError> {
        if v.pcp > 7 || v.vid > 4094 {
            return Err(ConvertError::Vlan {
                pcp: v.pcp,
                vid: v.vid,
            });
        }
        Ok(VlanTag {
            pcp: v.pcp,
            dei: v.dei,
            vid: v.vid,
        })
    }
}

impl From<&AhAttr> for AhMsg {
    fn from(ah: &AhAttr) -> AhMsg {
        AhMsg {
            dgid: ah.dgid.0,
            dmac: ah.dmac.0,
            traffic_class: ah.traffic_class,
            hop_limit: ah.hop_limit,
            flow_label: ah.flow_label,
            vlan: ah.vlan.map(VlanMsg::from),
        }
    }
}

impl TryFrom<&AhMsg> for AhAttr {
    type Error = ConvertError;

    /// Validates and converts (flow label: 20 bits; VLAN: PCP 0..=7, VID
    /// 0..=4094).
    fn try_from(m: &AhMsg) -> Result<AhAttr, ConvertError> {
        if m.flow_label > 0xf_ffff {
            return Err(ConvertError::FlowLabel(m.flow_label));
        }
        Ok(AhAttr {
            dgid: wire::Gid(m.dgid),
            dmac: wire::EthernetAddress(m.dmac),
            traffic_class: m.traffic_class,
            hop_limit: m.hop_limit,
            flow_label: m.flow_label,
            vlan: m.vlan.map(VlanTag::try_from).transpose()?,
        })
    }
}

impl From<QpState> for QpStateMsg {
    fn from(s: QpState) -> QpStateMsg {
        match s {
            QpState::Reset => QpStateMsg::Reset,
            QpState::Init => QpStateMsg::Init,
            QpState::Rtr => QpStateMsg::Rtr,
            QpState::Rts => QpStateMsg::Rts,
            QpState::Sqd => QpStateMsg::Sqd,
            QpState::Sqe => QpStateMsg::Sqe,
            QpState::Err => QpStateMsg::Err,
        }
    }
}

impl From<QpStateMsg> for QpState {
    fn from(s: QpStateMsg) -> QpState {
        match s {
            QpStateMsg::Reset => QpState::Reset,
            QpStateMsg::Init => QpState::Init,
            QpStateMsg::Rtr => QpState::Rtr,
            QpStateMsg::Rts => QpState::Rts,
            QpStateMsg::Sqd => QpState::Sqd,
            QpStateMsg::Sqe => QpState::Sqe,
            QpStateMsg::Err => QpState::Err,
        }
    }
}

impl From<QpKind> for QpType {
    fn from(k: QpKind) -> QpType {
        match k {
            QpKind::Rc => QpType::Rc,
            QpKind::Uc => QpType::Uc,
            QpKind::Ud => QpType::Ud,
        }
    }
}

impl From<&QpAttr> for QpAttrMsg {
    fn from(a: &QpAttr) -> QpAttrMsg {
        QpAttrMsg {
            state: a.state.map(QpStateMsg::from),
            pkey_index: a.pkey_index,
            port: a.port,
            access_flags: a.access_flags,
            qkey: a.qkey,
            ah: a.ah.as_ref().map(AhMsg::from),
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
}

impl TryFrom<&QpAttrMsg> for QpAttr {
    type Error = ConvertError;

    /// Validates each value and converts; the transport's `modify_qp`
    /// validates the combination.
    fn try_from(m: &QpAttrMsg) -> Result<QpAttr, ConvertError> {
        Ok(QpAttr {
            state: m.state.map(QpState::from),
            pkey_index: m.pkey_index,
            port: m.port,
            access_flags: m.access_flags,
            qkey: m.qkey,
            ah: m.ah.as_ref().map(AhAttr::try_from).transpose()?,
            path_mtu: m.path_mtu,
            dest_qpn: m.dest_qpn,
            rq_psn: m.rq_psn,
            max_dest_rd_atomic: m.max_dest_rd_atomic,
            min_rnr_timer: m.min_rnr_timer,
            sq_psn: m.sq_psn,
            timeout: m.timeout,
            retry_cnt: m.retry_cnt,
            rnr_retry: m.rnr_retry,
            max_rd_atomic: m.max_rd_atomic,
        })
    }
}

impl From<&PortAttr> for PortInfo {
    fn from(p: &PortAttr) -> PortInfo {
        PortInfo {
            state: p.state.ibv(),
            active_mtu: p.active_mtu,
            max_mtu: p.max_mtu,
            link_speed_bps: p.link_speed_bps,
        }
    }
}

impl From<AsyncEvent> for AsyncEventMsg {
    fn from(e: AsyncEvent) -> AsyncEventMsg {
        use AsyncEvent as E;
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

impl AsyncEventMsg {
    /// The event's number in rdma-core's `enum ibv_event_type` (None: an
    /// unknown kind).
    pub fn ibv_event_type(&self) -> Option<u32> {
        self.to_event().map(|e| e.ibv_event_type())
    }

    /// The transport's event with the same object number (None: a kind
    /// this build does not know).
    pub fn to_event(&self) -> Option<AsyncEvent> {
        use AsyncEvent as E;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{RespMsg, Response};

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
        // the SRQ event's wire form: its tag and field names
        let srq = serde_json::to_string(&AsyncEventMsg::SrqLimitReached { srq: 3 }).unwrap();
        assert_eq!(srq, r#"{"type":"srq_limit_reached","srq":3}"#);
    }

    #[test]
    fn the_port_answer_keeps_its_wire_form() {
        let r = RespMsg {
            v: 1,
            resp: Response::Port(PortInfo {
                state: 4,
                active_mtu: 1024,
                max_mtu: 4096,
                link_speed_bps: 25_000_000_000,
            }),
        };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"v":1,"resp":{"r":"port","state":4,"active_mtu":1024,"max_mtu":4096,"link_speed_bps":25000000000}}"#
        );
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
        assert_eq!(AsyncEventMsg::from(a.to_event().unwrap()), a);
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
        let json = serde_json::to_string(&AhMsg::from(&ah)).unwrap();
        let back: AhMsg = serde_json::from_str(&json).unwrap();
        assert_eq!(AhAttr::try_from(&back).unwrap(), ah);
        // a client that knows no VLAN field: untagged
        let old = json.replace(r#","vlan":{"pcp":3,"dei":false,"vid":100}"#, "");
        assert_ne!(old, json);
        let m: AhMsg = serde_json::from_str(&old).unwrap();
        assert_eq!(AhAttr::try_from(&m).unwrap().vlan, None);
        for (pcp, vid) in [(8, 1), (0, 4095), (255, 0xFFFF)] {
            let mut m = back;
            m.vlan = Some(VlanMsg {
                pcp,
                dei: false,
                vid,
            });
            assert_eq!(
                AhAttr::try_from(&m),
                Err(ConvertError::Vlan { pcp, vid }),
                "pcp {pcp} vid {vid}"
            );
        }
        // and in a QP's path (modify_qp), both ways
        let a = QpAttr {
            ah: Some(ah),
            ..Default::default()
        };
        let m = QpAttrMsg::from(&a);
        assert_eq!(m.ah.unwrap().vlan.unwrap().vid, 100);
        let back = QpAttr::try_from(&m).unwrap();
        assert_eq!(back.ah, Some(ah));
        let mut bad = m;
        bad.ah.as_mut().unwrap().vlan.as_mut().unwrap().vid = 4095;
        assert!(QpAttr::try_from(&bad).is_err());
    }

    #[test]
    fn qp_attributes_round_trip_and_bad_values_are_typed_errors() {
        let mut ah = AhAttr::new(
            wire::Gid([1; 16]),
            wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
        );
        ah.flow_label = 0xf_ffff;
        let a = QpAttr {
            state: Some(QpState::Rtr),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(7),
            qkey: Some(0x1111_1111),
            ah: Some(ah),
            path_mtu: Some(1024),
            dest_qpn: Some(0x12),
            rq_psn: Some(5),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            sq_psn: Some(6),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(4),
        };
        let json = serde_json::to_string(&QpAttrMsg::from(&a)).unwrap();
        assert!(json.contains(r#""state":"rtr""#), "{json}");
        let m: QpAttrMsg = serde_json::from_str(&json).unwrap();
        // QpAttr has no PartialEq: compare what it shows
        let back = QpAttr::try_from(&m).unwrap();
        assert_eq!(format!("{back:?}"), format!("{a:?}"));
        // a state that does not exist is a malformed message
        assert!(serde_json::from_str::<QpAttrMsg>(r#"{"state":"bogus"}"#).is_err());
        // a flow label beyond 20 bits is refused, not masked
        let mut m = m;
        m.ah.as_mut().unwrap().flow_label = 0x10_0000;
        assert_eq!(
            QpAttr::try_from(&m).err(),
            Some(ConvertError::FlowLabel(0x10_0000))
        );
        for s in QpState::ALL {
            assert_eq!(QpState::from(QpStateMsg::from(s)), s);
        }
    }
}
