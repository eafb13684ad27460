//! Asynchronous events (`ibv_get_async_event`, `ibv_ack_async_event`).

use super::*;

/// `ibv_get_async_event`: waits (unless `async_fd` is non-blocking) for
/// the next event on one of this context's objects or its port.
///
/// # Safety
/// `c` open; `ev` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_get_async_event(
    c: *mut ibv_context,
    ev: *mut ibv_async_event,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let (Some(ctx), false) = (unsafe { Ctx::from(c) }, ev.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // async_fd is an epoll descriptor watching the client library's
    // eventfd (`device::srv_ibv_open_device`): its flags are the application's
    let nb = nonblocking(ctx.vctx.context.async_fd);
    loop {
        let wait = if nb {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(3600)
        };
        let msg = match ctx.inner.get_async_event(wait) {
            Ok(Some(m)) => m,
            Ok(None) if nb => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            Ok(None) => continue,
            // the daemon went away: the device's fatal event, once (IBTA
            // 11.6.3: the CA's unaffiliated "Local Catastrophic Error");
            // then errors, as from a disassociated device
            Err(softrnic::Error::DeviceGone) if ctx.inner.take_fatal_event() => {
                // SAFETY: the caller's struct.
                unsafe {
                    *ev = ibv_async_event {
                        element: ibv_async_event_element { port_num: 0 },
                        event_type: IBV_EVENT_DEVICE_FATAL,
                    }
                };
                return 0;
            }
            Err(e) => {
                set_errno(errno_of(&e));
                return -1;
            }
        };
        use softrnic::proto::AsyncEventMsg as M;
        let Some(ty) = msg.ibv_event_type() else {
            continue;
        };
        let look =
            |m: &Mutex<std::collections::HashMap<u32, usize>>, k: u32| lock(m).get(&k).copied();
        let element = match msg {
            M::CqErr { cq } => look(&ctx.cqs, cq).map(|p| ibv_async_event_element {
                cq: p as *mut ibv_cq,
            }),
            M::SrqLimitReached { srq } => look(&ctx.srqs, srq).map(|p| ibv_async_event_element {
                srq: p as *mut ibv_srq,
            }),
            M::QpFatal { qp }
            | M::QpReqErr { qp }
            | M::QpAccessErr { qp }
            | M::CommEst { qp }
            | M::SqDrained { qp }
            | M::QpLastWqeReached { qp } => look(&ctx.qps, qp).map(|p| ibv_async_event_element {
                qp: p as *mut ibv_qp,
            }),
            M::PortActive { port } | M::PortErr { port } => Some(ibv_async_event_element {
                port_num: port as c_int,
            }),
            M::Unknown => None,
        };
        // events of objects already destroyed are dropped
        let Some(element) = element else {
            continue;
        };
        // SAFETY: the caller's struct.
        unsafe {
            *ev = ibv_async_event {
                element,
                event_type: ty as c_int,
            }
        };
        return 0;
    }
}

/// `ibv_ack_async_event`: counts the acknowledgement on the object.
///
/// # Safety
/// `ev` from `ibv_get_async_event`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_ack_async_event(ev: *mut ibv_async_event) {
    if ev.is_null() {
        return;
    }
    // SAFETY: the event names a live object of the right kind.
    unsafe {
        match (*ev).event_type {
            0 => {
                let cq = (*ev).element.cq;
                if !cq.is_null() {
                    (*cq).async_events_completed += 1;
                }
            }
            14 | 15 => {
                let s = (*ev).element.srq;
                if !s.is_null() {
                    (*s).events_completed += 1;
                }
            }
            1..=7 | 16 => {
                let q = (*ev).element.qp;
                if !q.is_null() {
                    (*q).events_completed += 1;
                }
            }
            _ => {}
        }
    }
}
