//! QP attributes and the IBA QP state machine (IBA 10.3.1, Figure 124;
//! the attributes each transition requires and allows follow IBA Table 93
//! / 94, as `ibv_modify_qp` and the kernel's `ib_modify_qp_is_ok` use them).

/// The most READs/atomics a QP may have outstanding as requester
/// (max_rd_atomic) and accept as responder (max_dest_rd_atomic): rxe's
/// figure, so that programs that copy the peer's value into their own QP
/// (perftest sets max_rd_atomic to the remote's "outstanding reads") work
/// against rxe.
pub const MAX_RD_ATOMIC: u8 = 128;

use super::wr::AhAttr;
use wire::QpType;

/// QP states (in the control protocol: `"reset"`, `"init"`, `"rtr"`,
/// `"rts"`, `"sqd"`, `"sqe"`, `"err"`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

impl QpState {
    /// Every state, in the order of IBA 10.3.1's state diagram.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];
}

/// IB path MTU values.
pub const MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Attributes of `modify_qp`; `None` means "not in the attribute mask".
/// The one declaration from the verbs layer to the control protocol
/// (which carries it as JSON, absent fields `None`); the C API and the
/// drop-in convert their own structures to it at their edge.
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpAttr {
    pub state: Option<QpState>,
    pub pkey_index: Option<u16>,
    pub port: Option<u8>,
    pub access_flags: Option<u32>,
    pub qkey: Option<u32>,
    pub ah: Option<AhAttr>,
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

/// Why `modify_qp` refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ModifyError {
    #[error("transition {from:?} -> {to:?} is not allowed")]
    IllegalTransition { from: QpState, to: QpState },
    #[error("{0} is required for this transition")]
    Missing(&'static str),
    #[error("{0} may not be changed in this transition")]
    NotAllowed(&'static str),
    #[error("{name} = {value} is out of range")]
    OutOfRange { name: &'static str, value: u32 },
}

/// Attribute names, for error messages and the table below.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum A {
    PkeyIndex,
    Port,
    Access,
    Qkey,
    Av,
    PathMtu,
    DestQpn,
    RqPsn,
    MaxDestRdAtomic,
    MinRnrTimer,
    SqPsn,
    Timeout,
    RetryCnt,
    RnrRetry,
    MaxRdAtomic,
}

impl A {
    fn name(self) -> &'static str {
        match self {
            A::PkeyIndex => "pkey_index",
            A::Port => "port_num",
            A::Access => "qp_access_flags",
            A::Qkey => "qkey",
            A::Av => "ah_attr",
            A::PathMtu => "path_mtu",
            A::DestQpn => "dest_qp_num",
            A::RqPsn => "rq_psn",
            A::MaxDestRdAtomic => "max_dest_rd_atomic",
            A::MinRnrTimer => "min_rnr_timer",
            A::SqPsn => "sq_psn",
            A::Timeout => "timeout",
            A::RetryCnt => "retry_cnt",
            A::RnrRetry => "rnr_retry",
            A::MaxRdAtomic => "max_rd_atomic",
        }
    }

    fn present(self, a: &QpAttr) -> bool {
        match self {
            A::PkeyIndex => a.pkey_index.is_some(),
            A::Port => a.port.is_some(),
            A::Access => a.access_flags.is_some(),
            A::Qkey => a.qkey.is_some(),
            A::Av => a.ah.is_some(),
            A::PathMtu => a.path_mtu.is_some(),
            A::DestQpn => a.dest_qpn.is_some(),
            A::RqPsn => a.rq_psn.is_some(),
            A::MaxDestRdAtomic => a.max_dest_rd_atomic.is_some(),
            A::MinRnrTimer => a.min_rnr_timer.is_some(),
            A::SqPsn => a.sq_psn.is_some(),
            A::Timeout => a.timeout.is_some(),
            A::RetryCnt => a.retry_cnt.is_some(),
            A::RnrRetry => a.rnr_retry.is_some(),
            A::MaxRdAtomic => a.max_rd_atomic.is_some(),
        }
    }

    const ALL: [A; 15] = [
        A::PkeyIndex,
        A::Port,
        A::Access,
        A::Qkey,
        A::Av,
        A::PathMtu,
        A::DestQpn,
        A::RqPsn,
        A::MaxDestRdAtomic,
        A::MinRnrTimer,
        A::SqPsn,
        A::Timeout,
        A::RetryCnt,
        A::RnrRetry,
        A::MaxRdAtomic,
    ];
}

/// (required, optional) attributes of a transition for a QP type.
fn transition_attrs(from: QpState, to: QpState, t: QpType) -> Option<(&'static [A], &'static [A])> {
    use QpState::*;
    use QpType::*;
    Some(match (from, to, t) {
        (Reset, Init, Ud) => (&[A::PkeyIndex, A::Port, A::Qkey], &[]),
        (Reset, Init, _) => (&[A::PkeyIndex, A::Port, A::Access], &[]),
        (Init, Init, Ud) => (&[], &[A::PkeyIndex, A::Port, A::Qkey]),
        (Init, Init, _) => (&[], &[A::PkeyIndex, A::Port, A::Access]),
        (Init, Rtr, Rc) => (
            &[
                A::Av,
                A::PathMtu,
                A::DestQpn,
                A::RqPsn,
                A::MaxDestRdAtomic,
                A::MinRnrTimer,
            ],
            &[A::Access, A::PkeyIndex],
        ),
        (Init, Rtr, Uc) => (
            &[A::Av, A::PathMtu, A::DestQpn, A::RqPsn],
            &[A::Access, A::PkeyIndex],
        ),
        (Init, Rtr, Ud) => (&[], &[A::PkeyIndex, A::Qkey]),
        (Rtr, Rts, Rc) => (
            &[
                A::SqPsn,
                A::Timeout,
                A::RetryCnt,
                A::RnrRetry,
                A::MaxRdAtomic,
            ],
            &[A::Access, A::MinRnrTimer],
        ),
        (Rtr, Rts, Uc) => (&[A::SqPsn], &[A::Access]),
        (Rtr, Rts, Ud) => (&[A::SqPsn], &[A::Qkey]),
        (Rts, Rts, Rc) => (
            &[],
            &[
                A::Access,
                A::MinRnrTimer,
                A::Timeout,
                A::RetryCnt,
                A::RnrRetry,
            ],
        ),
        (Rts, Rts, Uc) => (&[], &[A::Access]),
        (Rts, Rts, Ud) => (&[], &[A::Qkey]),
        (Rts, Sqd, _) => (&[], &[]),
        (Sqd, Sqd, _) => (
            &[],
            &[
                A::Av,
                A::Timeout,
                A::RetryCnt,
                A::RnrRetry,
                A::MaxRdAtomic,
                A::MaxDestRdAtomic,
                A::Access,
                A::Qkey,
            ],
        ),
        (Sqd, Rts, _) => (&[], &[A::Access, A::MinRnrTimer, A::Qkey]),
        (Sqe, Rts, Uc | Ud) => (&[], &[A::Access, A::Qkey]),
        (_, Reset, _) | (_, Err, _) => (&[], &[]),
        _ => return None,
    })
}

/// Validates a `modify_qp` call against the state machine and attribute
/// tables and the ranges IBA sets. Returns the target state.
pub fn check_modify(from: QpState, qp_type: QpType, attr: &QpAttr) -> Result<QpState, ModifyError> {
    let to = attr.state.unwrap_or(from);
    let (required, optional) =
        transition_attrs(from, to, qp_type).ok_or(ModifyError::IllegalTransition { from, to })?;
    for a in required {
        if !a.present(attr) {
            return Err(ModifyError::Missing(a.name()));
        }
    }
    // To RESET or ERR, other attributes are ignored (as verbs providers do).
    if !matches!(to, QpState::Reset | QpState::Err) {
        for a in A::ALL {
            if a.present(attr) && !required.contains(&a) && !optional.contains(&a) {
                return Err(ModifyError::NotAllowed(a.name()));
            }
        }
    }
    let range = |name, value: u32, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ModifyError::OutOfRange { name, value })
        }
    };
    if let Some(m) = attr.path_mtu {
        range("path_mtu", m, MTUS.contains(&m))?;
    }
    for (name, v) in [
        ("dest_qp_num", attr.dest_qpn),
        ("rq_psn", attr.rq_psn),
        ("sq_psn", attr.sq_psn),
    ] {
        if let Some(v) = v {
            range(name, v, v <= 0xFF_FFFF)?;
        }
    }
    for (name, v, max) in [
        ("timeout", attr.timeout, 31),
        ("retry_cnt", attr.retry_cnt, 7),
        ("rnr_retry", attr.rnr_retry, 7),
        ("min_rnr_timer", attr.min_rnr_timer, 31),
    ] {
        if let Some(v) = v {
            range(name, v as u32, v <= max)?;
        }
    }
    // IBA 11.2.5 (Modify QP): within the HCA limits of 11.2.1 (Query HCA),
    // max_qp_init_rd_atom / max_qp_rd_atom (ibv_query_device): MAX_RD_ATOMIC
    if let Some(v) = attr.max_rd_atomic {
        range("max_rd_atomic", v as u32, v <= MAX_RD_ATOMIC)?;
    }
    if let Some(v) = attr.max_dest_rd_atomic {
        range("max_dest_rd_atomic", v as u32, v <= MAX_RD_ATOMIC)?;
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init() -> QpAttr {
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn rc_walks_reset_to_rts() {
        assert_eq!(
            check_modify(QpState::Reset, QpType::Rc, &init()),
            Ok(QpState::Init)
        );
        let mut rtr = QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(1024),
            dest_qpn: Some(5),
            rq_psn: Some(0),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpState::Init, QpType::Rc, &rtr),
            Err(ModifyError::Missing("ah_attr"))
        );
        rtr.ah = Some(AhAttr::new(
            wire::Gid::default(),
            wire::EthernetAddress::default(),
        ));
        rtr.max_dest_rd_atomic = Some(1);
        rtr.min_rnr_timer = Some(12);
        assert_eq!(
            check_modify(QpState::Init, QpType::Rc, &rtr),
            Ok(QpState::Rtr)
        );
        rtr.path_mtu = Some(1500);
        assert_eq!(
            check_modify(QpState::Init, QpType::Rc, &rtr),
            Err(ModifyError::OutOfRange {
                name: "path_mtu",
                value: 1500
            })
        );
        let rts = QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(0),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpState::Rtr, QpType::Rc, &rts),
            Ok(QpState::Rts)
        );
        let bad = QpAttr {
            retry_cnt: Some(8),
            ..rts
        };
        assert!(matches!(
            check_modify(QpState::Rtr, QpType::Rc, &bad),
            Err(ModifyError::OutOfRange { .. })
        ));
        // rxe's limit: a peer's 128 outstanding READs may be copied in
        let most = QpAttr {
            max_rd_atomic: Some(MAX_RD_ATOMIC),
            ..rts
        };
        assert_eq!(
            check_modify(QpState::Rtr, QpType::Rc, &most),
            Ok(QpState::Rts)
        );
        let over = QpAttr {
            max_rd_atomic: Some(MAX_RD_ATOMIC + 1),
            ..rts
        };
        assert_eq!(
            check_modify(QpState::Rtr, QpType::Rc, &over),
            Err(ModifyError::OutOfRange {
                name: "max_rd_atomic",
                value: 129
            })
        );
        rtr.path_mtu = Some(1024);
        rtr.max_dest_rd_atomic = Some(MAX_RD_ATOMIC + 1);
        assert!(matches!(
            check_modify(QpState::Init, QpType::Rc, &rtr),
            Err(ModifyError::OutOfRange {
                name: "max_dest_rd_atomic",
                ..
            })
        ));
    }

    #[test]
    fn illegal_transitions_and_extra_attributes() {
        let rts = QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpState::Init, QpType::Uc, &rts),
            Err(ModifyError::IllegalTransition {
                from: QpState::Init,
                to: QpState::Rts
            })
        );
        let mut i = init();
        i.dest_qpn = Some(3);
        assert_eq!(
            check_modify(QpState::Reset, QpType::Rc, &i),
            Err(ModifyError::NotAllowed("dest_qp_num"))
        );
        let ud = QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpState::Reset, QpType::Ud, &ud),
            Err(ModifyError::Missing("qkey"))
        );
        let err = QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        };
        for s in QpState::ALL {
            assert_eq!(check_modify(s, QpType::Rc, &err), Ok(QpState::Err));
        }
        let sqe = QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        };
        assert!(
            check_modify(QpState::Sqe, QpType::Rc, &sqe).is_err(),
            "RC has no SQE state recovery"
        );
        assert!(check_modify(QpState::Sqe, QpType::Uc, &sqe).is_ok());
    }
}
