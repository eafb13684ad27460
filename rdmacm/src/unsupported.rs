//! What this library answers with an error, never a crash: rsocket (the
//! `r*` socket calls), multicast, ECE, InfiniBand paths; and, until the
//! QP helpers are wired to libibverbs, the calls that make verbs objects
//! for an ID (`rdma_create_qp`, `rdma_create_ep`, `rdma_create_srq`,
//! `rdma_init_qp_attr`, `rdma_get_devices`).

use crate::{complain, fail};
use libc::{c_int, c_void};

/// An rsocket call: -1 with errno ENOSYS.
#[no_mangle]
pub extern "C" fn scm_rsocket_call() -> c_int {
    complain("rsocket", "rsockets are not supported");
    fail(libc::ENOSYS)
}

/// `riomap`: `(off_t) -1` with errno ENOSYS.
#[no_mangle]
pub extern "C" fn scm_riomap() -> libc::off_t {
    complain("rsocket", "rsockets are not supported");
    fail(libc::ENOSYS).into()
}

/// `rdma_join_multicast` / `_ex`: -1 with errno ENOSYS.
#[no_mangle]
pub extern "C" fn scm_rdma_join_multicast() -> c_int {
    complain("rdma_join_multicast", "multicast is not supported");
    fail(libc::ENOSYS)
}

/// `rdma_leave_multicast`: nothing was joined, EADDRNOTAVAIL as for an
/// address not joined.
#[no_mangle]
pub extern "C" fn scm_rdma_leave_multicast() -> c_int {
    fail(libc::EADDRNOTAVAIL)
}

/// `rdma_set_local_ece` / `rdma_get_remote_ece`: EOPNOTSUPP (no ECE).
#[no_mangle]
pub extern "C" fn scm_rdma_ece() -> c_int {
    fail(libc::EOPNOTSUPP)
}

/// `rdma_reject_ece`: a plain reject.
///
/// # Safety
/// As `rdma_reject`.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_reject_ece(
    id: *mut crate::abi::rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: the caller's arguments, as rdma_reject takes them.
    unsafe { crate::conn::scm_rdma_reject(id, data, len) }
}

/// The verbs-object calls not wired yet: -1 with errno ENOSYS.
#[no_mangle]
pub extern "C" fn scm_verbs_call() -> c_int {
    complain(
        "rdma_cm",
        "QP, SRQ and device helpers are not wired to libibverbs yet",
    );
    fail(libc::ENOSYS)
}

/// `rdma_destroy_qp` / `rdma_destroy_srq` / `rdma_destroy_ep` /
/// `rdma_free_devices` counterparts of the above: nothing was made.
#[no_mangle]
pub extern "C" fn scm_verbs_void() {}

/// `rdma_get_devices`: NULL with errno ENOSYS (see above).
///
/// # Safety
/// `num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_devices(num: *mut c_int) -> *mut c_void {
    if !num.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *num = 0 };
    }
    scm_verbs_call();
    std::ptr::null_mut()
}
