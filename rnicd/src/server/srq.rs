//! Shared receive queues: one receive ring shared with the client.

use super::registry::with_owned;
use super::{ok, Attach, Object, Reply, RequestError, Shared, MAX_QP_WR};
use crate::dataplane::SrqRing;
use ipc::proto::Response;
use ipc::ring::{self, Ring, WQE_SIZE};
use ipc::shm::Mapping;
use std::sync::Arc;

/// `CreateSrq`: the SRQ and its ring's memfd.
pub(super) fn create_srq(
    sh: &Shared,
    id: u64,
    pd: u32,
    max_wr: u32,
) -> Result<Reply, RequestError> {
    if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
        return Err(RequestError::NotFound(Object::Pd(pd)));
    }
    let entries = ring::ring_entries(max_wr)
        .filter(|n| *n <= MAX_QP_WR)
        .ok_or(RequestError::BadSize {
            what: "max_wr",
            value: max_wr,
        })?;
    let map = Arc::new(Mapping::create(
        "softrnic-srq",
        ring::ring_bytes(entries, WQE_SIZE),
    )?);
    if !sh.dataplane().has_slots(id, 1) {
        return Err(RequestError::TooManyObjects);
    }
    let srq = super::call(sh, move |r| r.create_srq(pd, entries))??;
    // SAFETY: the mapping is ring_bytes(entries, WQE_SIZE) long (made
    // above) and SrqRing keeps it alive as long as the ring; entries is a
    // power of two (ring_entries).
    let ring = unsafe { Ring::new(map.ptr(), entries, WQE_SIZE) };
    sh.dataplane().add_srq(SrqRing {
        srqn: srq,
        _map: map.clone(),
        ring,
        cons: 0,
        broken: false,
        owner: id,
    });
    with_owned(sh, id, |o| o.srqs.insert(srq, pd));
    Ok((
        Response::Srq {
            srq,
            entries,
            map_len: map.len() as u64,
        },
        Some(Attach::Map(map)),
    ))
}

/// Whether the client has SRQ `srq`.
fn check_srq(sh: &Shared, id: u64, srq: u32) -> Result<(), RequestError> {
    if with_owned(sh, id, |o| o.srqs.contains_key(&srq)) {
        Ok(())
    } else {
        Err(RequestError::NotFound(Object::Srq(srq)))
    }
}

/// `ModifySrq`: arms (or, 0, disarms) the limit event.
pub(super) fn modify_srq(
    sh: &Shared,
    id: u64,
    srq: u32,
    limit: u32,
) -> Result<Reply, RequestError> {
    check_srq(sh, id, srq)?;
    super::call(sh, move |r| r.arm_srq_limit(srq, limit))??;
    ok()
}

/// `QuerySrq`: size, armed limit and receives held.
pub(super) fn query_srq(sh: &Shared, id: u64, srq: u32) -> Result<Reply, RequestError> {
    check_srq(sh, id, srq)?;
    let (max_wr, limit, pending) = super::call(sh, move |r| r.query_srq(srq))??;
    Ok((
        Response::SrqInfo {
            max_wr,
            limit,
            pending: pending as u32,
        },
        None,
    ))
}

/// `DestroySrq`: refused while the client's QPs use it.
pub(super) fn destroy_srq(sh: &Shared, id: u64, srq: u32) -> Result<Reply, RequestError> {
    with_owned(sh, id, |o| {
        if !o.srqs.contains_key(&srq) {
            return Err(RequestError::NotFound(Object::Srq(srq)));
        }
        if o.qps.values().any(|q| q.srq == Some(srq)) {
            return Err(RequestError::SrqInUse);
        }
        o.srqs.remove(&srq);
        Ok(())
    })?;
    // the ring is no longer polled; the transport drops the WQEs the SRQ
    // still holds and may hand its number out again
    sh.dataplane().remove_srq(srq);
    super::call(sh, move |r| r.destroy_srq(srq))??;
    ok()
}
