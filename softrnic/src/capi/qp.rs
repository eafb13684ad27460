//! Queue pairs (creation, connection, destruction), address handles and
//! shared receive queues.

use super::{
    boxed, guard, release, SrnicAh, SrnicAhAttr, SrnicPd, SrnicQp, SrnicQpInitAttr,
    SrnicQpInitAttrEx, SrnicSrq, SRNIC_QPT_RC, SRNIC_QPT_UC, SRNIC_QPT_UD,
};
use crate::client::{ConnectParams, QpInitAttr};
use crate::proto::QpKind;
use nic::verbs::AhAttr;
use std::ffi::c_int;

/// An RC QP; NULL on failure.
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`; `attr` is NULL or valid, its
/// CQs NULL or from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_qp(
    pd: *mut SrnicPd,
    attr: *const SrnicQpInitAttr,
) -> *mut SrnicQp {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(s), Some(r)) = (unsafe { a.send_cq.as_ref() }, unsafe { a.recv_cq.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let init = QpInitAttr {
        qp_type: QpKind::Rc,
        send_cq: s.cq.handle,
        recv_cq: r.cq.handle,
        max_send_wr: a.max_send_wr,
        max_recv_wr: a.max_recv_wr,
        sq_sig_all: a.sq_sig_all != 0,
        srq: None,
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_qp(&init).ok().map(|qp| SrnicQp { qp }))
    })
}

/// The QP's number (0 for NULL).
///
/// # Safety
/// `qp` is NULL or from `srnic_create_qp`/`srnic_create_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn srnic_qp_num(qp: *const SrnicQp) -> u32 {
    // SAFETY: each pointer is NULL or valid (the contract).
    unsafe { qp.as_ref() }.map(|q| q.qp.qpn).unwrap_or(0)
}

/// Moves an RC QP through INIT, RTR and RTS towards `dest_qpn` at
/// (`dgid`, `dmac`) with default path settings (MTU 1024, all access).
///
/// # Safety
/// `qp` is NULL or a live QP; `dgid` is NULL or points at 16 readable
/// bytes, `dmac` NULL or at 6.
#[no_mangle]
pub unsafe extern "C" fn srnic_connect_qp(
    qp: *mut SrnicQp,
    dgid: *const u8,
    dmac: *const u8,
    dest_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let Some(q) = (unsafe { qp.as_ref() }) else {
        return libc::EINVAL;
    };
    if dgid.is_null() || dmac.is_null() {
        return libc::EINVAL;
    }
    let mut g = [0u8; 16];
    let mut m = [0u8; 6];
    // SAFETY: both are not NULL and readable for 16 and 6 bytes (the
    // contract); the local arrays are that long and distinct.
    unsafe {
        std::ptr::copy_nonoverlapping(dgid, g.as_mut_ptr(), 16);
        std::ptr::copy_nonoverlapping(dmac, m.as_mut_ptr(), 6);
    }
    let ah = AhAttr::new(wire::Gid(g), wire::EthernetAddress(m));
    guard(libc::EIO, || {
        match q
            .qp
            .connect(&ConnectParams::default(), ah, dest_qpn, sq_psn, rq_psn)
        {
            Ok(()) => 0,
            Err(_) => libc::EINVAL,
        }
    })
}

/// Destroys a QP (its outstanding work requests are flushed): 0, EINVAL
/// (NULL, or the daemon refused; the handle is gone either way).
///
/// # Safety
/// `qp` is NULL or from `srnic_create_qp`/`srnic_create_qp_ex`, not used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_qp(qp: *mut SrnicQp) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    // SAFETY: NULL or boxed by its constructor, and the caller gives it up.
    unsafe { release(qp, libc::EINVAL, |h| h.qp.destroy()) }
}

/// A QP of any type, optionally on an SRQ (`ibv_create_qp_ex`-like);
/// NULL on failure.
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`; `attr` is NULL or valid, its
/// CQs NULL or from `srnic_create_cq`, its `srq` NULL or from
/// `srnic_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_qp_ex(
    pd: *mut SrnicPd,
    attr: *const SrnicQpInitAttrEx,
) -> *mut SrnicQp {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(s), Some(r)) = (unsafe { a.send_cq.as_ref() }, unsafe { a.recv_cq.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let qp_type = match a.qp_type {
        SRNIC_QPT_RC => QpKind::Rc,
        SRNIC_QPT_UC => QpKind::Uc,
        SRNIC_QPT_UD => QpKind::Ud,
        _ => return std::ptr::null_mut(),
    };
    let init = QpInitAttr {
        qp_type,
        send_cq: s.cq.handle,
        recv_cq: r.cq.handle,
        max_send_wr: a.max_send_wr,
        max_recv_wr: a.max_recv_wr,
        sq_sig_all: a.sq_sig_all != 0,
        // SAFETY: each pointer is NULL or valid (the contract).
        srq: unsafe { a.srq.as_ref() }.map(|s| s.srq.handle),
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_qp(&init).ok().map(|qp| SrnicQp { qp }))
    })
}

/// Moves a UD QP through INIT (P_Key index 0, port 1, `qkey`), RTR and
/// RTS (`sq_psn`).
///
/// # Safety
/// `qp` is NULL or a live QP.
#[no_mangle]
pub unsafe extern "C" fn srnic_ready_ud_qp(qp: *mut SrnicQp, qkey: u32, sq_psn: u32) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let Some(q) = (unsafe { qp.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match q.qp.ud_ready(qkey, sq_psn) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    })
}

/// An address handle for UD sends (`ibv_create_ah`); NULL on failure.
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`; `attr` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_ah(
    pd: *mut SrnicPd,
    attr: *const SrnicAhAttr,
) -> *mut SrnicAh {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let ah = AhAttr::from(a);
    if ah.check().is_err() {
        return std::ptr::null_mut();
    }
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_ah(&ah).ok().map(|ah| SrnicAh { ah }))
    })
}

/// Destroys an address handle: 0, or EINVAL (NULL, or the daemon
/// refused; the handle is gone either way).
///
/// # Safety
/// `ah` is NULL or from `srnic_create_ah`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_ah(ah: *mut SrnicAh) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    // SAFETY: NULL or boxed by its constructor, and the caller gives it up.
    unsafe { release(ah, libc::EINVAL, |h| h.ah.destroy()) }
}

/// A shared receive queue of at least `max_wr` entries (`ibv_create_srq`).
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_srq(pd: *mut SrnicPd, max_wr: u32) -> *mut SrnicSrq {
    // SAFETY: each pointer is NULL or valid (the contract).
    let Some(p) = (unsafe { pd.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_srq(max_wr).ok().map(|srq| SrnicSrq { srq }))
    })
}

/// Destroys a shared receive queue: 0, EINVAL (NULL), EBUSY (QPs still
/// use it; it stays intact and the handle valid), EIO.
///
/// # Safety
/// `srq` is NULL or from `srnic_create_srq`, not used after it returned 0.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_srq(srq: *mut SrnicSrq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // like ibv_destroy_srq: EBUSY (QPs still use it) leaves it intact
    // SAFETY: not NULL, so a live SRQ (the contract).
    let r = guard(libc::EIO, || match unsafe { &*srq }.srq.destroy_by_ref() {
        Ok(()) => 0,
        Err(_) => libc::EBUSY,
    });
    if r == 0 {
        // SAFETY: boxed by srnic_create_srq; the caller gives it up on 0.
        drop(unsafe { Box::from_raw(srq) });
    }
    r
}

/// `ibv_modify_srq(IBV_SRQ_LIMIT)`: arms the SRQ limit; once fewer than
/// `srq_limit` receives are left, SRNIC_EVENT_SRQ_LIMIT_REACHED comes
/// (`srnic_get_async_event`) and the limit disarms; 0 disarms. 0, EINVAL
/// (null SRQ, or a limit above the SRQ's size), EIO.
///
/// # Safety
/// `srq` is NULL or from `srnic_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_modify_srq(srq: *mut SrnicSrq, srq_limit: u32) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let Some(s) = (unsafe { srq.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match s.srq.arm_limit(srq_limit) {
        Ok(()) => 0,
        Err(crate::client::Error::Daemon(_)) => libc::EINVAL,
        Err(_) => libc::EIO,
    })
}

/// `ibv_query_srq`: the SRQ's size and its armed limit (0: not armed, or
/// fired). Either pointer may be NULL. 0, EINVAL (null SRQ), EIO.
///
/// # Safety
/// `srq` is NULL or from `srnic_create_srq`; `max_wr` and `srq_limit`
/// NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_srq(
    srq: *mut SrnicSrq,
    max_wr: *mut u32,
    srq_limit: *mut u32,
) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let Some(s) = (unsafe { srq.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match s.srq.query() {
        Ok((m, l, _)) => {
            // SAFETY: each pointer is NULL or valid (the contract).
            if let Some(p) = unsafe { max_wr.as_mut() } {
                *p = m;
            }
            // SAFETY: each pointer is NULL or valid (the contract).
            if let Some(p) = unsafe { srq_limit.as_mut() } {
                *p = l;
            }
            0
        }
        Err(_) => libc::EIO,
    })
}

/// The SRQ's number, as `srnic_async_event.srq_num` names it.
///
/// # Safety
/// `srq` from `srnic_create_srq` or NULL (then 0).
#[no_mangle]
pub unsafe extern "C" fn srnic_srq_num(srq: *const SrnicSrq) -> u32 {
    // SAFETY: each pointer is NULL or valid (the contract).
    unsafe { srq.as_ref() }.map_or(0, |s| s.srq.handle)
}
