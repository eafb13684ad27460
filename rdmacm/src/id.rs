//! CM IDs made and destroyed: `rdma_create_id` (a synchronous ID gets a
//! channel of its own), an ID's daemon side on a device ([`attach`]), and
//! `rdma_destroy_id`, which waits for every event of the ID to be
//! acknowledged. What an ID is and keeps is `state.rs`'s.

use crate::abi::*;
use crate::channel::{self, ChanPriv};
use crate::errno::{complain, fail, refused};
use crate::state::{ack, IdPriv, IdState, Lib, Remote};
use libc::{c_int, c_void};
use std::sync::Arc;

/// A new ID of `lib` on `chan` (its events go there).
pub fn new_id(
    lib: &Arc<Lib>,
    chan: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
    sync: bool,
) -> *mut IdPriv {
    // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, no
    // address, no paths).
    let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
    id.channel = chan;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let st = IdState {
        sync,
        responder_resources: RDMA_MAX_RESP_RES,
        initiator_depth: RDMA_MAX_INIT_DEPTH,
        ..IdState::default()
    };
    IdPriv::new(lib.clone(), id, st)
}

/// Gives `idp` its daemon side on device `dev` (if it has none yet):
/// a daemon ID whose events go to the ID's channel.
pub fn attach(idp: &IdPriv, dev: &str) -> Result<Remote, c_int> {
    if let Some(r) = idp.state().remote.iter().find(|r| r.dev == dev) {
        return Ok(r.clone());
    }
    let lib = &idp.lib;
    let chan = channel::of_id(idp).ok_or(libc::EINVAL)?;
    let token = chan.on_device(dev)?.token();
    let cm = lib.backend.device(dev).map_err(|e| refused("rdma_cm", e))?;
    let no = cm
        .create_id(
            token,
            idp.port_space(),
            idp.qp_type(),
            idp as *const _ as u64,
        )
        .map_err(|e| refused("rdma_create_id", e))?;
    let r = Remote {
        dev: dev.to_string(),
        cm,
        no,
    };
    lib.register(dev, no, idp);
    idp.state().remote.push(r.clone());
    let raw = idp.raw();
    if raw.verbs.is_null() {
        set_device(lib, raw, dev);
    }
    Ok(r)
}

/// The ID now belongs to device `dev`: its context, and the device's
/// protection domain as `id->pd` (librdmacm gives every ID on a device
/// that device's PD, which programs use for their own QPs and MRs).
pub fn set_device(lib: &Lib, raw: &mut rdma_cm_id, dev: &str) {
    raw.verbs = lib.verbs.context(dev).unwrap_or(std::ptr::null_mut());
    if !raw.verbs.is_null() && raw.pd.is_null() {
        // SAFETY: `raw.verbs` is one of the library's contexts.
        raw.pd = unsafe { lib.verbs.default_pd(raw.verbs) };
    }
}

/// `rdma_destroy_id`: the daemon's IDs go, then this waits for every
/// event handed out on the ID to be acknowledged.
///
/// # Safety
/// `p` is an ID of this library, used by no other call.
pub unsafe fn destroy(p: *mut IdPriv) {
    // SAFETY: the caller's ID.
    let idp = unsafe { &*p };
    let remote = std::mem::take(&mut idp.state().remote);
    idp.lib.unregister(&remote);
    for r in &remote {
        if let Err(e) = r.cm.destroy_id(r.no) {
            complain("rdma_destroy_id", &e);
        }
    }
    let raw = idp.raw();
    if !raw.event.is_null() {
        // SAFETY: the event a synchronous call kept on this ID.
        unsafe { ack(raw.event) };
        raw.event = std::ptr::null_mut();
    }
    let sync = idp.wait_acked().sync;
    if sync && !raw.channel.is_null() {
        // SAFETY: a synchronous ID's own channel, used by nobody else.
        unsafe { channel::destroy(raw.channel as *mut ChanPriv) };
    }
    // SAFETY: out of the table, with no event outstanding, and the
    // caller's to give up.
    unsafe { IdPriv::free(p) };
}

/// `rdma_create_id`: RDMA_PS_TCP and RDMA_PS_UDP; a NULL channel makes a
/// synchronous ID with a channel of its own.
///
/// # Safety
/// `chan` is NULL or a channel of this library; `id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_create_id(
    chan: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    let qp_type = match ps {
        RDMA_PS_TCP => IBV_QPT_RC,
        RDMA_PS_UDP => IBV_QPT_UD,
        RDMA_PS_IB | RDMA_PS_IPOIB => {
            complain(
                "rdma_create_id",
                "InfiniBand port spaces are not supported (RDMA_PS_TCP and RDMA_PS_UDP are)",
            );
            return fail(libc::EPROTONOSUPPORT);
        }
        _ => return fail(libc::EINVAL),
    };
    // SAFETY: the caller's channel.
    let lib = match unsafe { ChanPriv::from_ptr(chan) } {
        Some(c) => c.lib.clone(),
        None => crate::global().clone(),
    };
    match create(&lib, chan, context, ps, qp_type) {
        Ok(p) => {
            // SAFETY: the caller's out-pointer.
            unsafe { *id = p as *mut rdma_cm_id };
            0
        }
        Err(e) => fail(e),
    }
}

/// A new ID of `lib` on `chan`, or (NULL) synchronous on a channel of its
/// own.
pub fn create(
    lib: &Arc<Lib>,
    chan: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut IdPriv, c_int> {
    let (chan, sync) = if chan.is_null() {
        (
            ChanPriv::create(lib.clone())? as *mut rdma_event_channel,
            true,
        )
    } else {
        (chan, false)
    };
    Ok(new_id(lib, chan, context, ps, qp_type, sync))
}

/// `rdma_destroy_id`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: the caller's ID.
    if unsafe { IdPriv::from_ptr(id) }.is_none() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller gives the ID up.
    unsafe { destroy(id as *mut IdPriv) };
    0
}
