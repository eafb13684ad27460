//! Protection domains, shared buffers and memory regions.

use super::{boxed, guard, release, SrnicContext, SrnicMr, SrnicPd};
use crate::client::Buffer;
use std::ffi::{c_int, c_void};

/// A protection domain; NULL on failure.
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`.
#[no_mangle]
pub unsafe extern "C" fn srnic_alloc_pd(ctx: *mut SrnicContext) -> *mut SrnicPd {
    // SAFETY: NULL or a live context (the contract).
    let Some(c) = (unsafe { ctx.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        boxed(c.ctx.alloc_pd().ok().map(|pd| SrnicPd {
            pd,
            bufs: c.bufs.clone(),
        }))
    })
}

/// Frees a protection domain: 0, EINVAL (NULL), EBUSY (objects still use
/// it; the handle is gone either way).
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_dealloc_pd(pd: *mut SrnicPd) -> c_int {
    // SAFETY: NULL or boxed by srnic_alloc_pd, and the caller gives it up.
    unsafe { release(pd, libc::EBUSY, |h| h.pd.dealloc()) }
}

/// Allocates `len` bytes of shared memory (zeroed, page-aligned) that
/// `srnic_reg_mr` registers zero-copy. Freed when the context closes.
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srnic_alloc_buf(pd: *mut SrnicPd, len: usize) -> *mut c_void {
    // SAFETY: NULL or a live PD (the contract).
    let Some(p) = (unsafe { pd.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || match Buffer::new(len) {
        Ok(b) => {
            let ptr = b.as_ptr() as *mut c_void;
            p.bufs.lock().map(|mut v| v.push(b)).ok();
            ptr
        }
        Err(_) => std::ptr::null_mut(),
    })
}

/// Registers `[addr, addr+len)`: inside one buffer from `srnic_alloc_buf`
/// (zero-copy as is), or any other private memory of the process (malloc,
/// posix_memalign, mmap), whose pages then move onto shared memory at the
/// same address (`usermem`, `Pd::reg_user_mr`). NULL if refused.
///
/// # Safety
/// `pd` is NULL or from `srnic_alloc_pd`. The range is only read through
/// the kernel (`/proc/self/maps`, `mremap`), never dereferenced here.
#[no_mangle]
pub unsafe extern "C" fn srnic_reg_mr(
    pd: *mut SrnicPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut SrnicMr {
    // SAFETY: NULL or a live PD (the contract).
    let Some(p) = (unsafe { pd.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        let a = addr as u64;
        let buf = p.bufs.lock().ok().and_then(|v| {
            v.iter()
                .find(|b| {
                    a >= b.addr()
                        && a.checked_add(len as u64)
                            .is_some_and(|end| end <= b.addr() + b.len() as u64)
                })
                .cloned()
        });
        let Some(b) = buf else {
            // not one of ours: the process's own memory (usermem)
            return boxed(
                p.pd.reg_user_mr(a, len, access as u32)
                    .ok()
                    .map(|mr| SrnicMr { mr }),
            );
        };
        let off = (a - b.addr()) as usize;
        boxed(
            p.pd.reg_mr(&b, off, len, access as u32)
                .ok()
                .map(|mr| SrnicMr { mr }),
        )
    })
}

/// The region's local key (0 for NULL).
///
/// # Safety
/// `mr` is NULL or from `srnic_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srnic_mr_lkey(mr: *const SrnicMr) -> u32 {
    // SAFETY: NULL or a live region (the contract).
    unsafe { mr.as_ref() }.map(|m| m.mr.lkey).unwrap_or(0)
}

/// The region's remote key (0 for NULL).
///
/// # Safety
/// `mr` is NULL or from `srnic_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srnic_mr_rkey(mr: *const SrnicMr) -> u32 {
    // SAFETY: NULL or a live region (the contract).
    unsafe { mr.as_ref() }.map(|m| m.mr.rkey).unwrap_or(0)
}

/// Deregisters a region: 0, or EINVAL (NULL, or the daemon refused, e.g.
/// memory windows are bound to it; the handle is gone either way).
///
/// # Safety
/// `mr` is NULL or from `srnic_reg_mr`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_dereg_mr(mr: *mut SrnicMr) -> c_int {
    // SAFETY: NULL or boxed by srnic_reg_mr, and the caller gives it up.
    unsafe { release(mr, libc::EINVAL, |h| h.mr.dereg()) }
}
