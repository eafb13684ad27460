//! The daemon's events turned into `struct rdma_cm_event`s as librdmacm
//! hands them out: the ID's route filled in on ADDR/ROUTE_RESOLVED, the
//! QP moved when a connection is answered, a new ID for each
//! CONNECT_REQUEST, DEVICE_REMOVAL for each ID of a device gone; and the
//! calls that hand events out and take them back (`rdma_get_cm_event`,
//! `rdma_ack_cm_event`, a synchronous ID's wait for its own event).

use crate::abi::*;
use crate::backend::{CmEventMsg, CmIdNo};
use crate::channel::{self, ChanPriv, Incoming};
use crate::errno::{complain, fail, refused};
use crate::state::{ack, EventPriv, IdPriv, Lib, Remote};
use crate::{id, qp, sockaddr, ud};
use libc::{c_int, c_void};
use std::sync::Arc;

/// The next event of `chan` for the application: waits for one unless
/// the channel's descriptor is O_NONBLOCK (then EAGAIN when none is
/// queued).
pub fn get_event(chan: &ChanPriv) -> Result<*mut rdma_cm_event, c_int> {
    loop {
        let ev = match chan.next()? {
            Incoming::Removal(dev, no) => removal(&chan.lib, &dev, no),
            Incoming::Event(dev, msg) => process(&chan.lib, &dev, msg),
        };
        if let Some(ev) = ev {
            return Ok(Box::into_raw(ev) as *mut rdma_cm_event);
        }
    }
}

/// For an ID created without a channel: waits for the event of the call
/// just made and keeps it in `id->event`; its status is the call's
/// result.
pub fn complete(idp: &IdPriv) -> Result<(), c_int> {
    if !idp.state().sync {
        return Ok(());
    }
    let raw = idp.raw();
    if !raw.event.is_null() {
        // SAFETY: an event this library handed out on this ID.
        unsafe { ack(raw.event) };
        raw.event = std::ptr::null_mut();
    }
    let chan = channel::of_id(idp).ok_or(libc::EINVAL)?;
    let ev = get_event(chan)?;
    raw.event = ev;
    // SAFETY: the event just handed out.
    let ev = unsafe { &*ev };
    match ev.status {
        // the device went away instead of answering (status 0)
        _ if ev.event == event::DEVICE_REMOVAL => Err(libc::ENODEV),
        0 => Ok(()),
        _ if ev.event == event::REJECTED => Err(libc::ECONNREFUSED),
        s if s < 0 => Err(-s),
        s => Err(s),
    }
}

/// RDMA_CM_EVENT_DEVICE_REMOVAL for the ID the daemon called `no` on
/// `dev`; None when that ID is gone. (rdma_cm.h: on it the user
/// destroys the ID and frees what it holds of the device.)
fn removal(lib: &Lib, dev: &str, no: CmIdNo) -> Option<Box<EventPriv>> {
    let idp = lib.hold(dev, no)?;
    let mut ev = new_event(idp, event::DEVICE_REMOVAL, 0);
    ev.event.id = idp as *const IdPriv as *mut rdma_cm_id;
    Some(ev)
}

/// An event from the daemon on device `dev`, as the application gets it;
/// `None` for one it must not see (its ID is gone, or the library
/// consumed it).
fn process(lib: &Arc<Lib>, dev: &str, msg: CmEventMsg) -> Option<Box<EventPriv>> {
    if msg.kind.0 == event::CONNECT_REQUEST {
        return connect_request(lib, dev, msg);
    }
    let idp = lib.hold(dev, msg.id)?;
    let mut ev = new_event(idp, msg.kind.0, msg.status);
    ev.event.id = idp as *const IdPriv as *mut rdma_cm_id;
    let connect_error = idp.state().connect_error;
    match msg.kind.0 {
        event::ADDR_RESOLVED | event::ROUTE_RESOLVED => {
            if let Err(e) = query_route(idp, dev, msg.id) {
                ev.event.event = msg.kind.0 + 1; // ADDR_ERROR / ROUTE_ERROR
                ev.event.status = -e;
            }
        }
        event::REJECTED | event::DISCONNECTED if connect_error => {
            idp.acked();
            return None;
        }
        event::CONNECT_RESPONSE | event::ESTABLISHED => answered(idp, &mut ev, &msg),
        _ => {}
    }
    copy_params(&mut ev, &msg, idp.raw().qp_type);
    if msg.ud.is_some() && idp.raw().qp_type == IBV_QPT_UD {
        ud::complete_ah(idp, &mut ev.event);
    }
    if msg.kind.0 == event::REJECTED {
        qp::to_error(idp);
    }
    Some(ev)
}

/// The active side's connection is answered: a QP the library made
/// goes to RTR and RTS (and the RTU is asked for when the daemon
/// reports the REP as CONNECT_RESPONSE); if it cannot, the application
/// sees CONNECT_ERROR and the connection is torn down.
fn answered(idp: &IdPriv, ev: &mut EventPriv, msg: &CmEventMsg) {
    let raw = idp.raw();
    let connecting = std::mem::take(&mut idp.state().connecting);
    if raw.qp.is_null() && connecting && raw.qp_type != IBV_QPT_UD {
        // as librdmacm: an ID without a QP hears CONNECT_RESPONSE and
        // its owner moves its own QP, then calls rdma_establish (the
        // daemon holds the RTU until then)
        ev.event.event = event::CONNECT_RESPONSE;
        return;
    }
    if raw.qp.is_null() || idp.state().qp_ready || raw.qp_type == IBV_QPT_UD {
        return;
    }
    let r = qp::ready(idp, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).and_then(|_| {
        if msg.kind.0 != event::CONNECT_RESPONSE {
            return Ok(());
        }
        let r = idp.remote()?;
        r.cm.establish(r.no).map_err(|e| e.errno)
    });
    match r {
        Ok(()) => {
            idp.state().qp_ready = true;
            ev.event.event = event::ESTABLISHED;
        }
        Err(e) => {
            idp.state().connect_error = true;
            if let Ok(r) = idp.remote() {
                let _ = r.cm.disconnect(r.no);
            }
            ev.event.event = event::CONNECT_ERROR;
            ev.event.status = -e;
        }
    }
}

/// CONNECT_REQUEST: a new ID for the connection, on the listener's
/// channel with the listener's context; the event counts on the
/// listener.
fn connect_request(lib: &Arc<Lib>, dev: &str, msg: CmEventMsg) -> Option<Box<EventPriv>> {
    let listen_no = msg.listen_id?;
    let cm = lib.backend.device(dev).ok();
    let Some(listener) = lib.hold(dev, listen_no) else {
        // nobody listens any more: the daemon's new ID goes
        if let Some(cm) = cm {
            let _ = cm.destroy_id(msg.id);
        }
        return None;
    };
    let drop_request = |why: &str| {
        complain("connect request", why);
        if let Some(cm) = &cm {
            let _ = cm.reject(msg.id, &[]);
            let _ = cm.destroy_id(msg.id);
        }
        listener.acked();
        None
    };
    let Some(cm) = cm.clone() else {
        return drop_request("device gone");
    };
    let l = listener.raw();
    let p = id::new_id(lib, l.channel, l.context, l.ps, l.qp_type, false);
    // SAFETY: just made.
    let idp = unsafe { &*p };
    {
        let mut st = idp.state();
        st.remote.push(Remote {
            dev: dev.to_string(),
            cm,
            no: msg.id,
        });
        if let Some(c) = &msg.conn {
            st.initiator_depth = c.initiator_depth;
            st.responder_resources = c.responder_resources;
        }
    }
    lib.register(dev, msg.id, p);
    let raw = idp.raw();
    id::set_device(lib, raw, dev);
    raw.port_num = 1;
    if let Some((src, dst)) = msg.addrs {
        sockaddr::write(&mut raw.route.addr.src, src);
        sockaddr::write(&mut raw.route.addr.dst, dst);
    }
    if listener.state().sync {
        if let Err(e) = channel::migrate(idp, std::ptr::null_mut()) {
            // SAFETY: our new ID, handed out to nobody.
            unsafe { id::destroy(p) };
            return drop_request(&format!("migrating to its own channel: errno {e}"));
        }
    }
    let _ = query_route(idp, dev, msg.id);
    let mut ev = new_event(listener, msg.kind.0, msg.status);
    ev.event.id = p as *mut rdma_cm_id;
    ev.event.listen_id = listener as *const IdPriv as *mut rdma_cm_id;
    copy_params(&mut ev, &msg, listener.raw().qp_type);
    if msg.ud.is_some() && listener.raw().qp_type == IBV_QPT_UD {
        ud::complete_ah(idp, &mut ev.event);
    }
    Some(ev)
}

/// The ID's route from the daemon: addresses, GIDs, P_Key and, once
/// resolved, one path record.
fn query_route(idp: &IdPriv, dev: &str, no: CmIdNo) -> Result<(), c_int> {
    let cm = idp
        .lib
        .backend
        .device(dev)
        .map_err(|e| refused("query", e))?;
    let info = cm.query(no).map_err(|e| refused("query", e))?;
    let raw = idp.raw();
    raw.port_num = info.port;
    if let Some(s) = info.src {
        sockaddr::write(&mut raw.route.addr.src, s);
    }
    if let Some(d) = info.dst {
        sockaddr::write(&mut raw.route.addr.dst, d);
    }
    raw.route.addr.ibaddr.sgid.raw = info.sgid;
    raw.route.addr.ibaddr.dgid.raw = info.dgid.unwrap_or_default();
    raw.route.addr.ibaddr.pkey = info.pkey.to_be();
    if info.num_paths > 0 {
        let mut st = idp.state();
        let path = st.path.get_or_insert_with(Default::default);
        path.sgid.raw = info.sgid;
        path.dgid.raw = info.dgid.unwrap_or_default();
        path.pkey = info.pkey.to_be();
        path.hop_limit = 64;
        path.reversible = 1;
        path.numb_path = 1;
        path.mtu = qp::mtu_enum(info.path_mtu);
        path.mtu_selector = 2; // exactly
        path.rate_selector = 2;
        path.packet_life_time_selector = 2;
        raw.route.path_rec = &mut **path;
        raw.route.num_paths = 1;
    }
    Ok(())
}

fn new_event(owner: &IdPriv, kind: u32, status: i32) -> Box<EventPriv> {
    // SAFETY: all-zero is a valid rdma_cm_event (NULL pointers, zero
    // parameters).
    let mut ev: Box<EventPriv> = Box::new(unsafe { std::mem::zeroed() });
    ev.owner = owner;
    ev.event.event = kind;
    ev.event.status = status;
    ev
}
/// The event's connection or datagram parameters, its private data in the
/// event's own buffer.
fn copy_params(ev: &mut EventPriv, msg: &CmEventMsg, qp_type: c_int) {
    let pd_ptr = ev.private_data.as_ptr() as *const c_void;
    if let Some(u) = msg.ud.as_ref().filter(|_| qp_type == IBV_QPT_UD) {
        let n = u.private_data.len().min(ev.private_data.len()).min(255);
        ev.private_data[..n].copy_from_slice(&u.private_data[..n]);
        let mut ah = ibv_ah_attr {
            is_global: 1,
            port_num: 1,
            ..ibv_ah_attr::default()
        };
        ah.grh.dgid.raw = u.dgid;
        ah.grh.hop_limit = 64;
        ev.event.param.ud = rdma_ud_param {
            private_data: if n > 0 { pd_ptr } else { std::ptr::null() },
            private_data_len: n as u8,
            ah_attr: ah,
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
    } else if let Some(c) = &msg.conn {
        let n = c.private_data.len().min(ev.private_data.len()).min(255);
        ev.private_data[..n].copy_from_slice(&c.private_data[..n]);
        ev.event.param.conn = rdma_conn_param {
            private_data: if n > 0 { pd_ptr } else { std::ptr::null() },
            private_data_len: n as u8,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: u8::from(c.flow_control),
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: u8::from(c.srq),
            qp_num: c.qp_num,
        };
    }
}

/// `rdma_get_cm_event`.
///
/// # Safety
/// `c` is NULL or a channel this library made; `event` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_cm_event(
    c: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    if event.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's channel.
    match unsafe { channel::while_held(c, get_event) } {
        Some(Ok(e)) => {
            // SAFETY: the caller's out-pointer.
            unsafe { *event = e };
            0
        }
        Some(Err(e)) => fail(e),
        None => fail(libc::EINVAL),
    }
}

/// `rdma_ack_cm_event`.
///
/// # Safety
/// `e` is NULL or an unacknowledged event this library handed out.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int {
    if e.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's event.
    unsafe { ack(e) };
    0
}
