//! Opening and closing a device, device and port queries, asynchronous
//! events.

use super::{
    boxed, guard, wait_time, SrnicAsyncEvent, SrnicContext, SrnicDeviceAttr, SrnicPortAttr,
};
use crate::client::Context;
use std::ffi::{c_char, c_int, CStr};

/// Opens the device whose control socket is `path`; NULL on failure.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn srnic_open_device(path: *const c_char) -> *mut SrnicContext {
    guard(std::ptr::null_mut(), || {
        if path.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: not NULL, and NUL-terminated per the contract.
        let p = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned();
        boxed(Context::open(p).ok().map(|ctx| SrnicContext {
            ctx,
            bufs: Default::default(),
        }))
    })
}

/// Closes the device (and frees the buffers of `srnic_alloc_buf`); 0.
///
/// # Safety
/// `ctx` is NULL or came from `srnic_open_device` and is not used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_close_device(ctx: *mut SrnicContext) -> c_int {
    if !ctx.is_null() {
        // SAFETY: boxed by srnic_open_device; the caller gives it up.
        drop(unsafe { Box::from_raw(ctx) });
    }
    0
}

/// Fills `*attr` with the device's attributes: 0, or EINVAL for NULL
/// arguments.
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`; `attr` is NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_device(
    ctx: *const SrnicContext,
    attr: *mut SrnicDeviceAttr,
) -> c_int {
    // SAFETY: NULL or a live context (the contract).
    let (Some(c), false) = (unsafe { ctx.as_ref() }, attr.is_null()) else {
        return libc::EINVAL;
    };
    let d = &c.ctx.device;
    // SAFETY: not NULL and valid for writes (the contract).
    unsafe {
        *attr = SrnicDeviceAttr {
            gid: d.gid.0,
            mac: d.mac.0,
            mtu: d.mtu,
            max_qp_wr: d.max_qp_wr,
            max_cqe: d.max_cqe,
            max_sge: d.max_sge,
        }
    };
    0
}

/// `ibv_query_port`: 0 and `*attr` filled; EINVAL for null arguments or a
/// port other than 1 (the device has one); EIO when the daemon cannot be
/// asked. (Positive error numbers, as `ibv_query_port` and
/// `srnic_query_device` return.)
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`; `attr` is NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_port(
    ctx: *const SrnicContext,
    port_num: u8,
    attr: *mut SrnicPortAttr,
) -> c_int {
    // SAFETY: each NULL or valid (the contract).
    let (Some(c), Some(out)) = (unsafe { ctx.as_ref() }, unsafe { attr.as_mut() }) else {
        return libc::EINVAL;
    };
    if port_num != 1 {
        return libc::EINVAL;
    }
    guard(libc::EIO, || match c.ctx.query_port(port_num) {
        Ok(p) => {
            *out = SrnicPortAttr {
                state: p.state,
                active_mtu: p.active_mtu,
                max_mtu: p.max_mtu,
                link_speed_bps: p.link_speed_bps,
            };
            0
        }
        Err(_) => libc::EIO,
    })
}

/// `ibv_get_async_event` (events need no ack): waits up to `timeout_ms`
/// (< 0: for ever) for the next asynchronous event on one of this
/// context's objects, or of the port (every context hears those), and
/// fills `ev`. 1 an event, 0 none in time, -EINVAL
/// for null arguments, -EIO when the daemon cannot be asked.
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`; `ev` is NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn srnic_get_async_event(
    ctx: *mut SrnicContext,
    ev: *mut SrnicAsyncEvent,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: each NULL or valid (the contract).
    let (Some(c), Some(out)) = (unsafe { ctx.as_ref() }, unsafe { ev.as_mut() }) else {
        return -libc::EINVAL;
    };
    let t = wait_time(timeout_ms);
    guard(-libc::EIO, || loop {
        match c.ctx.get_async_event(t) {
            Ok(Some(e)) => {
                use nic::verbs::Affiliated;
                let (mut qp_num, mut cq_num, mut srq_num, mut port_num) = (0, 0, 0, 0);
                // the client skips kinds it does not know
                let Some(ev) = e.to_event() else { continue };
                match ev.affiliated() {
                    Affiliated::Qp(n) => qp_num = n,
                    Affiliated::Cq(n) => cq_num = n,
                    Affiliated::Srq(n) => srq_num = n,
                    Affiliated::Port(n) => port_num = n as u32,
                }
                *out = SrnicAsyncEvent {
                    event_type: ev.ibv_event_type(),
                    qp_num,
                    cq_num,
                    srq_num,
                    port_num,
                };
                return 1;
            }
            Ok(None) if timeout_ms >= 0 => return 0,
            Ok(None) => continue,
            Err(_) => return -libc::EIO,
        }
    })
}

/// The descriptor that becomes readable when an asynchronous event waits
/// (`ibv_context.async_fd`, for poll/epoll); -1 for a null context or when
/// the daemon cannot be asked.
///
/// # Safety
/// `ctx` is NULL or from `srnic_open_device`.
#[no_mangle]
pub unsafe extern "C" fn srnic_async_event_fd(ctx: *mut SrnicContext) -> c_int {
    // SAFETY: NULL or a live context (the contract).
    let Some(c) = (unsafe { ctx.as_ref() }) else {
        return -1;
    };
    guard(-1, || c.ctx.async_event_fd().unwrap_or(-1))
}
