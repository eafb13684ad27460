//! Queue pairs (their send and receive rings shared with the client) and
//! address handles.

use super::registry::{destroy_qps, with_owned, OwnedQp};
use super::{ok, Attach, Object, Reply, RequestError, Shared, MAX_QP_WR};
use crate::dataplane::{Ah, QpRings};
use ipc::proto::{QpInitAttr, QpKind, Response};
use ipc::ring::{self, Ring, WQE_SIZE};
use ipc::shm::Mapping;
use nic::transport::QpInit;
use nic::verbs::{AhAttr, QpAttr};
use std::sync::Arc;

/// A work queue's ring size for `wr` requests (at most [`MAX_QP_WR`]).
fn wq_entries(wr: u32, what: &'static str) -> Result<u32, RequestError> {
    ring::ring_entries(wr)
        .filter(|n| *n <= MAX_QP_WR)
        .ok_or(RequestError::BadSize { what, value: wr })
}

/// `CreateQp`: the QP and one memfd holding its send ring (at 0) and
/// receive ring (at `rq_offset`).
pub(super) fn create_qp(
    sh: &Shared,
    id: u64,
    pd: u32,
    init: QpInitAttr,
) -> Result<Reply, RequestError> {
    let QpInitAttr {
        qp_type,
        send_cq,
        recv_cq,
        max_send_wr,
        max_recv_wr,
        sq_sig_all,
        srq,
    } = init;
    let owns = with_owned(sh, id, |o| {
        o.pds.contains(&pd) && o.cqs.contains(&send_cq) && o.cqs.contains(&recv_cq)
    });
    if !owns {
        return Err(RequestError::NoPdOrCq);
    }
    if let Some(s) = srq {
        // the transport scatters SRQ receives with the QP's PD: the SRQ
        // must be on the same one
        if with_owned(sh, id, |o| o.srqs.get(&s).copied()) != Some(pd) {
            return Err(RequestError::SrqNotOnPd { srq: s, pd });
        }
    }
    // with an SRQ the QP's own receive ring is unused: 1 slot
    let max_recv_wr = if srq.is_some() {
        max_recv_wr.max(1)
    } else {
        max_recv_wr
    };
    let sq_entries = wq_entries(max_send_wr, "max_send_wr")?;
    let rq_entries = wq_entries(max_recv_wr, "max_recv_wr")?;
    let sq_len = ring::ring_bytes(sq_entries, WQE_SIZE);
    let rq_offset = sq_len.next_multiple_of(4096);
    let total = rq_offset + ring::ring_bytes(rq_entries, WQE_SIZE);
    let map = Arc::new(Mapping::create("softrnic-qp", total)?);
    let init = QpInit {
        qp_type: qp_type.into(),
        pd,
        send_cq,
        recv_cq,
        srq,
        max_send_wr: sq_entries,
        max_recv_wr: rq_entries,
        sq_sig_all,
    };
    // a doorbell slot for each ring (doorbell::SLOTS per client)
    if !sh.dataplane().has_slots(id, 2) {
        return Err(RequestError::TooManyObjects);
    }
    let qpn = super::call(sh, move |r| r.create_qp(init))??;
    // SAFETY: the mapping is `total` bytes: the send ring's
    // ring_bytes(sq_entries) at 0 and the receive ring's
    // ring_bytes(rq_entries) at rq_offset, both inside it; QpRings keeps
    // the mapping alive as long as the rings; both sizes are powers of two
    // (ring_entries).
    let (sq, rq) = unsafe {
        (
            Ring::new(map.ptr(), sq_entries, WQE_SIZE),
            Ring::new(map.ptr().add(rq_offset), rq_entries, WQE_SIZE),
        )
    };
    sh.dataplane().add_qp(QpRings {
        qpn,
        _map: map.clone(),
        sq,
        rq,
        sq_cons: 0,
        rq_cons: 0,
        send_cq,
        recv_cq,
        broken: false,
        owner: id,
        pd,
        ud: qp_type == QpKind::Ud,
        srq,
    });
    {
        let mut r = sh.reg.lock().expect("registry");
        r.max_qpn = r.max_qpn.max(qpn);
        r.clients.entry(id).or_default().qps.insert(
            qpn,
            OwnedQp {
                kind: qp_type,
                pd,
                send_cq,
                recv_cq,
                srq,
            },
        );
    }
    Ok((
        Response::Qp {
            qpn,
            sq_entries,
            rq_entries,
            rq_offset: rq_offset as u64,
            map_len: total as u64,
        },
        Some(Attach::Map(map)),
    ))
}

/// Whether the client has QP `qpn`.
fn check_qp(sh: &Shared, id: u64, qpn: u32) -> Result<(), RequestError> {
    if with_owned(sh, id, |o| o.qps.contains_key(&qpn)) {
        Ok(())
    } else {
        Err(RequestError::NotFound(Object::Qp(qpn)))
    }
}

/// `ModifyQp`: the attributes converted and checked here, their
/// combination by the transport.
pub(super) fn modify_qp(
    sh: &Shared,
    id: u64,
    qpn: u32,
    attr: &QpAttr,
) -> Result<Reply, RequestError> {
    check_qp(sh, id, qpn)?;
    if let Some(ah) = &attr.ah {
        ah.check()?;
    }
    let a = *attr;
    let dp = sh.dp.clone();
    super::call(sh, move |r| {
        r.modify_qp(qpn, &a)?;
        if a.state == Some(nic::verbs::QpState::Reset) {
            // a QP in Reset has no work and no completions left to
            // deliver (as mlx5 cleans its CQ): those not yet in a CQ ring
            // go here; the client skips the ones already in the ring
            dp.lock().expect("dp").forget_completions_of(r, &[qpn]);
        }
        Ok::<(), nic::verbs::VerbsError>(())
    })??;
    ok()
}

/// `QueryQp`: state, destination and PSNs.
pub(super) fn query_qp(sh: &Shared, id: u64, qpn: u32) -> Result<Reply, RequestError> {
    check_qp(sh, id, qpn)?;
    let i = super::call(sh, move |r| r.query_qp(qpn))??;
    Ok((
        Response::QpInfo {
            qpn,
            state: i.state,
            dest_qpn: i.dest_qpn,
            mtu: i.mtu,
            sq_psn: i.sq_psn,
            rq_psn: i.rq_psn,
        },
        None,
    ))
}

/// `DestroyQp`: to ERR (its WQEs flush) and gone.
pub(super) fn destroy_qp(sh: &Shared, id: u64, qpn: u32) -> Result<Reply, RequestError> {
    if with_owned(sh, id, |o| o.qps.remove(&qpn)).is_none() {
        return Err(RequestError::NotFound(Object::Qp(qpn)));
    }
    destroy_qps(sh, vec![qpn]);
    ok()
}

/// `CreateAh`: an address handle (daemon-wide numbers, never 0) that the
/// client's UD send WQEs name.
pub(super) fn create_ah(
    sh: &Shared,
    id: u64,
    pd: u32,
    attr: &AhAttr,
) -> Result<Reply, RequestError> {
    attr.check()?;
    let attr = *attr;
    let mut r = sh.reg.lock().expect("registry");
    if !r.clients.get(&id).is_some_and(|o| o.pds.contains(&pd)) {
        return Err(RequestError::NotFound(Object::Pd(pd)));
    }
    let mut dp = sh.dataplane();
    let mut ah = r.last_ah;
    loop {
        ah = ah.wrapping_add(1);
        if ah != 0 && !dp.ahs.contains_key(&ah) {
            break;
        }
    }
    r.last_ah = ah;
    dp.ahs.insert(
        ah,
        Ah {
            owner: id,
            pd,
            attr,
        },
    );
    r.clients.entry(id).or_default().ahs.insert(ah, pd);
    Ok((Response::Ah { ah }, None))
}

/// `DestroyAh`.
pub(super) fn destroy_ah(sh: &Shared, id: u64, ah: u32) -> Result<Reply, RequestError> {
    if with_owned(sh, id, |o| o.ahs.remove(&ah)).is_none() {
        return Err(RequestError::NotFound(Object::Ah(ah)));
    }
    sh.dataplane().ahs.remove(&ah);
    ok()
}
