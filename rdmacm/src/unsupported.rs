//! What this library answers with an error, never a crash: rsocket (the
//! `r*` socket calls), multicast, ECE, and the extended QP/SRQ
//! attributes.

use crate::errno::{complain, fail};
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

/// `rdma_create_qp_ex` / `rdma_create_srq_ex` (the extended attributes:
/// XRC, parent domains): -1 with errno EOPNOTSUPP; `rdma_create_qp` and
/// `rdma_create_srq` serve the plain ones.
#[no_mangle]
pub extern "C" fn scm_ex_call() -> c_int {
    complain(
        "rdma_create_qp_ex",
        "extended QP/SRQ attributes are not supported (use rdma_create_qp)",
    );
    fail(libc::EOPNOTSUPP)
}
