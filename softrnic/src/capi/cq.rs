//! Completion queues: creation, polling, completion events.

use super::{boxed, guard, release, wait_time, SrnicContext, SrnicCq, SrnicWc, SrnicWcEx};
use crate::ring;
use nic::verbs::Wc;
use std::ffi::c_int;

/// A completion queue of at least `cqe` entries; NULL on failure.
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_cq(ctx: *mut SrnicContext, cqe: c_int) -> *mut SrnicCq {
    // SAFETY: NULL or a live context (the contract).
    let Some(c) = (unsafe { ctx.as_ref() }) else {
        return std::ptr::null_mut();
    };
    if cqe <= 0 {
        return std::ptr::null_mut();
    }
    guard(std::ptr::null_mut(), || {
        boxed(c.ctx.create_cq(cqe as u32).ok().map(|cq| SrnicCq { cq }))
    })
}

/// Destroys a completion queue: 0, EINVAL (NULL), EBUSY (QPs still use
/// it; the handle is gone either way).
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_cq(cq: *mut SrnicCq) -> c_int {
    // SAFETY: NULL or boxed by srnic_create_cq, and the caller gives it up.
    unsafe { release(cq, libc::EBUSY, |h| h.cq.destroy()) }
}

/// Polls up to `num` completions into `wc`; returns how many.
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`; `wc` is NULL or has room for
/// `num` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_poll_cq(cq: *mut SrnicCq, num: c_int, wc: *mut SrnicWc) -> c_int {
    // SAFETY: poll_each's contract is this function's.
    unsafe {
        poll_each(cq, num, wc, |w| SrnicWc {
            wr_id: w.wr_id,
            status: ring::status_code(w.status) as u32,
            opcode: ring::opcode_code(w.opcode) as u32,
            qp_num: w.qp_num,
            byte_len: w.byte_len,
            imm_data: w.imm.unwrap_or(0),
            wc_flags: wc_flags(w),
        })
    }
}

/// Asks for a completion event (`ibv_req_notify_cq`): the next completion,
/// or with `solicited_only` the next solicited or unsuccessful one. 0, or
/// an errno (EINVAL: no CQ; EIO: the daemon refused).
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_req_notify_cq(cq: *mut SrnicCq, solicited_only: c_int) -> c_int {
    // SAFETY: NULL or a live CQ (the contract).
    let Some(c) = (unsafe { cq.as_mut() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match c.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(_) => libc::EIO,
    })
}

/// Waits up to `timeout_ms` (negative: for ever) for a completion event
/// and consumes it (`ibv_get_cq_event` + `ibv_ack_cq_events`): 1 an event,
/// 0 none in time, -EINVAL without a CQ or before `srnic_req_notify_cq`.
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_get_cq_event(cq: *mut SrnicCq, timeout_ms: c_int) -> c_int {
    // SAFETY: NULL or a live CQ (the contract).
    let Some(c) = (unsafe { cq.as_mut() }) else {
        return -libc::EINVAL;
    };
    let t = wait_time(timeout_ms);
    guard(-libc::EIO, || loop {
        match c.cq.get_event(t) {
            Ok(true) => return 1,
            Ok(false) if timeout_ms >= 0 => return 0,
            Ok(false) => continue,
            Err(_) => return -libc::EINVAL,
        }
    })
}

/// The descriptor that becomes readable on a completion event (for
/// poll/epoll, as a completion channel's fd), or -1 before the first
/// `srnic_req_notify_cq`.
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_cq_event_fd(cq: *const SrnicCq) -> c_int {
    // SAFETY: NULL or a live CQ (the contract).
    match unsafe { cq.as_ref() } {
        Some(c) => c.cq.event_fd().unwrap_or(-1),
        None => -1,
    }
}

/// `srnic_wc_flags` of a completion.
fn wc_flags(w: &Wc) -> u32 {
    w.imm.is_some() as u32 | (w.grh as u32) << 1
}

/// `srnic_poll_cq` with the source QP of UD receives.
///
/// # Safety
/// `cq` is NULL or from `srnic_create_cq`; `wc` is NULL or has room for
/// `num` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_poll_cq_ex(
    cq: *mut SrnicCq,
    num: c_int,
    wc: *mut SrnicWcEx,
) -> c_int {
    // SAFETY: poll_each's contract is this function's.
    unsafe {
        poll_each(cq, num, wc, |w| SrnicWcEx {
            wr_id: w.wr_id,
            status: ring::status_code(w.status) as u32,
            opcode: ring::opcode_code(w.opcode) as u32,
            qp_num: w.qp_num,
            byte_len: w.byte_len,
            imm_data: w.imm.unwrap_or(0),
            wc_flags: wc_flags(w),
            src_qp: w.src_qp,
            _pad: 0,
        })
    }
}

/// Polls up to `num` completions of `cq` into `out[0..]`, each built by
/// `make`; returns how many (-EINVAL for a null CQ).
///
/// # Safety
/// `cq` is null or valid; `out` is null or has room for `num` entries.
unsafe fn poll_each<T>(
    cq: *mut SrnicCq,
    num: c_int,
    out: *mut T,
    make: impl Fn(&Wc) -> T,
) -> c_int {
    // SAFETY: NULL or a live CQ (the contract).
    let Some(c) = (unsafe { cq.as_mut() }) else {
        return -libc::EINVAL;
    };
    if num <= 0 || out.is_null() {
        return 0;
    }
    let mut wcs: Vec<Wc> = Vec::with_capacity(num as usize);
    let n = c.cq.poll(num as usize, &mut wcs);
    for (i, w) in wcs.iter().enumerate() {
        // SAFETY: i < n <= num entries, which `out` has room for
        unsafe { out.add(i).write(make(w)) };
    }
    n as c_int
}

/// The CQ's handle number, as `srnic_async_event.cq_num` names it.
///
/// # Safety
/// `cq` from `srnic_create_cq` or NULL (then 0).
#[no_mangle]
pub unsafe extern "C" fn srnic_cq_num(cq: *const SrnicCq) -> u32 {
    // SAFETY: NULL or a live CQ (the contract).
    unsafe { cq.as_ref() }.map_or(0, |c| c.cq.handle)
}
