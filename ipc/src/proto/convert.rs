//! The conversions between control-protocol messages and the device's
//! types where the two differ. QP attributes, address vectors and QP
//! states travel as the verbs types themselves (`nic`'s `serde` feature);
//! what arrives is checked by its receiver (`AhAttr::check`).

use super::{AsyncEventMsg, PortInfo, QpCcState, QpKind};
use nic::cc::RpState;
use nic::device::PortAttr;
use nic::verbs::AsyncEvent;
use nic::verbs::QpType;

impl From<QpKind> for QpType {
    fn from(k: QpKind) -> QpType {
        match k {
            QpKind::Rc => QpType::Rc,
            QpKind::Uc => QpType::Uc,
            QpKind::Ud => QpType::Ud,
        }
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

impl From<(u32, RpState)> for QpCcState {
    /// QP `qpn`'s reaction point as the device reports it.
    fn from((qpn, state): (u32, RpState)) -> QpCcState {
        QpCcState { qpn, state }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{RespMsg, Response};
    use nic::verbs::{AhAttr, AhError, QpAttr, QpState};

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
    fn a_full_page_of_cc_states_fits_one_message_at_the_widest_values() {
        let widest = RpState {
            enabled: true,
            limited: false,
            rc_bps: u64::MAX,
            rt_bps: u64::MAX,
            alpha: 0.123_456_789_012_345_68,
            cuts: u64::MAX,
            cnps_handled: u64::MAX,
        };
        let page = crate::proto::CcStates {
            now_ns: u64::MAX,
            line_bps: u64::MAX,
            qps: (0..crate::proto::CC_STATES_PER_PAGE)
                .map(|i| QpCcState::from((u32::MAX - i as u32, widest)))
                .collect(),
            next_qpn: Some(u32::MAX),
        };
        let m = RespMsg {
            v: 1,
            resp: Response::CcStates(page.clone()),
        };
        let bytes = crate::proto::encode(&m);
        assert!(bytes.len() <= crate::shm::MAX_MSG, "{} bytes", bytes.len());
        let back: RespMsg = serde_json::from_slice(&bytes).unwrap();
        let Response::CcStates(got) = back.resp else {
            panic!("{:?}", back.resp)
        };
        assert_eq!(got, page);
        // a request without a start asks from the first QPN
        let r: crate::proto::ReqMsg =
            serde_json::from_str(r#"{"v":1,"req":{"op":"cc_states"}}"#).unwrap();
        assert!(matches!(
            r.req,
            crate::proto::Request::CcStates { from_qpn: 0 }
        ));
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
        let json = serde_json::to_string(&ah).unwrap();
        // the wire form: the GID and MAC as byte arrays, the tag's fields
        assert!(
            json.starts_with(r#"{"dgid":[7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7],"dmac":[2,0,0,0,0,9],"#)
        );
        let back: AhAttr = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ah);
        assert_eq!(back.check(), Ok(()));
        // a client that knows no VLAN field: untagged; no DEI: false
        let old = json.replace(r#","vlan":{"pcp":3,"dei":false,"vid":100}"#, "");
        assert_ne!(old, json);
        assert_eq!(serde_json::from_str::<AhAttr>(&old).unwrap().vlan, None);
        let no_dei = json.replace(r#""dei":false,"#, "");
        assert_eq!(serde_json::from_str::<AhAttr>(&no_dei).unwrap(), ah);
        for (pcp, vid) in [(8, 1), (0, 4095), (255, 0xFFFF)] {
            let mut m = back;
            m.vlan = Some(wire::VlanTag {
                pcp,
                dei: false,
                vid,
            });
            assert_eq!(
                m.check(),
                Err(AhError::Vlan { pcp, vid }),
                "pcp {pcp} vid {vid}"
            );
        }
        // and in a QP's path (modify_qp)
        let a = QpAttr {
            ah: Some(ah),
            ..Default::default()
        };
        let back: QpAttr = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back.ah, Some(ah));
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
        let json = serde_json::to_string(&a).unwrap();
        assert!(json.contains(r#""state":"rtr""#), "{json}");
        // QpAttr has no PartialEq: compare what it shows
        let back: QpAttr = serde_json::from_str(&json).unwrap();
        assert_eq!(format!("{back:?}"), format!("{a:?}"));
        // absent fields are not in the mask
        let empty: QpAttr = serde_json::from_str("{}").unwrap();
        assert_eq!(format!("{empty:?}"), format!("{:?}", QpAttr::default()));
        // a state that does not exist is a malformed message
        assert!(serde_json::from_str::<QpAttr>(r#"{"state":"bogus"}"#).is_err());
        for s in QpState::ALL {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(j, format!("\"{}\"", format!("{s:?}").to_lowercase()));
            assert_eq!(serde_json::from_str::<QpState>(&j).unwrap(), s);
        }
        // a flow label beyond 20 bits is refused, not masked
        let mut bad = ah;
        bad.flow_label = 0x10_0000;
        assert_eq!(bad.check(), Err(AhError::FlowLabel(0x10_0000)));
    }
}
