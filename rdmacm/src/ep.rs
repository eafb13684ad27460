//! `rdma_create_ep` / `rdma_destroy_ep`: a synchronous ID from an
//! `rdma_addrinfo`, bound (passive) or resolved to its route (active),
//! with a QP when attributes are given (on the passive side, each request's
//! ID gets one from `rdma_get_request`).

use crate::abi::*;
use crate::errno::fail;
use crate::state::IdPriv;
use crate::{conn, id, qp};
use libc::c_int;

/// How long an endpoint's address and route resolution may take.
const RESOLVE_MS: c_int = 2000;

/// `rdma_create_ep`.
///
/// # Safety
/// `out` writable; `res` an `rdma_addrinfo`; `pd` NULL or a PD; `attr`
/// NULL or QP attributes.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's addrinfo.
    let Some(r) = (unsafe { res.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    let lib = crate::global();
    let p = match id::create(
        lib,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        r.ai_port_space,
        r.ai_qp_type,
    ) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let cid = p as *mut rdma_cm_id;
    // SAFETY: the ID just made.
    let idp = unsafe { &*p };
    // SAFETY: the ID just made and the caller's addresses.
    let rc = unsafe {
        if r.ai_flags & RAI_PASSIVE != 0 {
            let rc = conn::scm_rdma_bind_addr(cid, r.ai_src_addr);
            if rc == 0 {
                if let Some(a) = attr.as_mut() {
                    // rdma_create_ep's QPs are of the address info's type
                    a.qp_type = r.ai_qp_type;
                    idp.state().ep_attr = Some((*a, pd as usize));
                }
                *out = cid;
                return 0;
            }
            rc
        } else {
            let mut rc = conn::scm_rdma_resolve_addr(cid, r.ai_src_addr, r.ai_dst_addr, RESOLVE_MS);
            if rc == 0 {
                rc = conn::scm_rdma_resolve_route(cid, RESOLVE_MS);
            }
            if rc == 0 {
                if let Some(a) = attr.as_mut() {
                    a.qp_type = r.ai_qp_type;
                    rc = qp::scm_rdma_create_qp(cid, pd, a);
                }
            }
            rc
        }
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
        // SAFETY: the ID just made, handed out to nobody.
        unsafe { id::destroy(p) };
        return fail(e);
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *out = cid };
    0
}

/// `rdma_destroy_ep`: the QP, its CQs, the SRQ, then the ID.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: the caller's ID.
    let Some(idp) = (unsafe { IdPriv::from_ptr(id) }) else {
        return;
    };
    // SAFETY: the caller's ID, given up with its objects.
    unsafe {
        qp::scm_rdma_destroy_qp(id);
        if !idp.raw().srq.is_null() {
            qp::scm_rdma_destroy_srq(id);
        }
        id::destroy(id as *mut IdPriv);
    }
}
