//! Shared receive queues.

use super::*;

#[repr(C)]
pub struct Srq {
    pub ibv: ibv_srq,
    pub inner: Mutex<softrnic::Srq>,
    pub max_wr: u32,
    /// Receives posted and not completed (they complete in any order).
    pub wrs: SharedWrs,
}

/// # Safety
/// `s` is NULL or an SRQ from `ibv_create_srq` not yet destroyed.
pub unsafe fn srq_of<'a>(s: *mut ibv_srq) -> Option<&'a Srq> {
    // SAFETY: Srq starts with its ibv_srq.
    (!s.is_null()).then(|| unsafe { &*(s as *const Srq) })
}

/// `ibv_create_srq`.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: `pd` is NULL or a live PD of this library's (this function's
    // contract), as pd_of requires.
    let (Some(p), false) = (unsafe { pd_of(pd) }, attr.is_null()) else {
        return null_errno(libc::EINVAL);
    };
    // SAFETY: the PD's context is open.
    let Some(ctx) = (unsafe { Ctx::from(p.ibv.context) }) else {
        return null_errno(libc::EINVAL);
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let d = &ctx.inner.device;
    if a.attr.max_wr == 0 || a.attr.max_wr > d.max_qp_wr || a.attr.max_sge > d.max_sge {
        return null_errno(libc::EINVAL);
    }
    let s = match p.inner.create_srq(a.attr.max_wr) {
        Ok(s) => s,
        Err(e) => {
            complain("ibv_create_srq", &e);
            return null_errno(errno_of(&e));
        }
    };
    if a.attr.srq_limit > 0 {
        if let Err(e) = s.arm_limit(a.attr.srq_limit) {
            complain("ibv_create_srq", &e);
        }
    }
    let handle = s.handle;
    let entries = s.entries();
    a.attr.max_wr = entries;
    a.attr.max_sge = d.max_sge;
    // SAFETY: mutex/cond: zero is their static initializer.
    let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.srq_context = a.srq_context;
    ibv.pd = pd;
    ibv.handle = handle;
    let ptr = boxed(Srq {
        ibv,
        inner: Mutex::new(s),
        max_wr: entries,
        wrs: Outstanding::shared(entries, false),
    });
    lock(&ctx.srqs).insert(handle, ptr as usize);
    ptr as *mut ibv_srq
}

/// `ibv_modify_srq`: the limit (IBV_SRQ_LIMIT); resizing is not supported.
///
/// # Safety
/// `s` from `ibv_create_srq`; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_modify_srq(
    s: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: `s` is NULL or a live SRQ of this library's (this function's
    // contract), as srq_of requires.
    let (Some(srq), false) = (unsafe { srq_of(s) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    if mask & IBV_SRQ_MAX_WR != 0 {
        return libc::EOPNOTSUPP;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        // SAFETY: the caller's attributes.
        let limit = unsafe { (*attr).srq_limit };
        if limit > srq.max_wr {
            return libc::EINVAL;
        }
        if let Err(e) = lock(&srq.inner).arm_limit(limit) {
            return errno_of(&e);
        }
    }
    0
}

/// `ibv_query_srq`.
///
/// # Safety
/// `s` from `ibv_create_srq`; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_srq(s: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: `s` is NULL or a live SRQ of this library's (this function's
    // contract), as srq_of requires.
    let (Some(srq), false) = (unsafe { srq_of(s) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    match lock(&srq.inner).query() {
        Ok((max_wr, limit, _)) => {
            // SAFETY: the caller's struct.
            unsafe {
                *attr = ibv_srq_attr {
                    max_wr,
                    max_sge: nic::verbs::MAX_SGE as u32,
                    srq_limit: limit,
                }
            };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `verbs_context.get_srq_num`.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn get_srq_num(s: *mut ibv_srq, n: *mut u32) -> c_int {
    // SAFETY: the application's SRQ.
    let (Some(srq), false) = (unsafe { srq_of(s) }, n.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's int.
    unsafe { *n = srq.ibv.handle };
    0
}

/// `ibv_destroy_srq`: EBUSY (and kept) while QPs use it.
///
/// # Safety
/// `s` from `ibv_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_srq(s: *mut ibv_srq) -> c_int {
    // SAFETY: `s` is NULL or a live SRQ of this library's (this function's
    // contract), as srq_of requires.
    let Some(srq) = (unsafe { srq_of(s) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = lock(&srq.inner).destroy_by_ref() {
        complain("ibv_destroy_srq", &e);
        return libc::EBUSY;
    }
    // SAFETY: the SRQ's context is open.
    if let Some(ctx) = unsafe { Ctx::from(srq.ibv.context) } {
        lock(&ctx.srqs).remove(&srq.ibv.handle);
    }
    // SAFETY: made by Box in create_srq.
    drop(unsafe { Box::from_raw(s as *mut Srq) });
    0
}
