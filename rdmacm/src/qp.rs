//! An ID's QP, CQs and SRQ, made with the ordinary verbs, and the QP's
//! state changes at the points librdmacm makes them: INIT when the QP is
//! made (a UD QP on to RTS), RTR and RTS before an accept and when the
//! active side's connection is answered, ERR on a reject or disconnect.
//! The attributes of each change are the daemon's (`init_qp_attr`).

use crate::abi::*;
use crate::backend::{QpAttr, QpState};
use crate::errno::{complain, fail, refused};
use crate::state::IdPriv;
use libc::{c_int, c_void};

fn id_of<'a>(id: *mut rdma_cm_id) -> Result<&'a IdPriv, c_int> {
    // SAFETY: the application's ID pointer, as every entry point takes it.
    unsafe { IdPriv::from_ptr(id) }.ok_or(libc::EINVAL)
}

fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// The daemon's attributes for `state` as `ibv_modify_qp` takes them.
pub fn qp_attr(idp: &IdPriv, state: c_int) -> Result<(ibv_qp_attr, c_int), c_int> {
    let st = match state {
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        _ => return Err(libc::EINVAL),
    };
    let r = idp.remote()?;
    let (a, mask) =
        r.cm.init_qp_attr(r.no, st)
            .map_err(|e| refused("rdma_init_qp_attr", e))?;
    let raw = idp.raw();
    let sgid_index = if raw.verbs.is_null() {
        None
    } else {
        let sgid = raw.route.addr.ibaddr.sgid.raw;
        // SAFETY: the ID's context is one of the library's.
        unsafe { idp.lib.verbs.gid_index(raw.verbs, sgid) }
    };
    let mut q = to_ibv(&a, state, raw.port_num, sgid_index.unwrap_or(0));
    let mask = mask as c_int | IBV_QP_STATE;
    // the ID's options replace the daemon's values where the change sets
    // them, as the kernel's rdma_init_qp_attr does
    let st = idp.state();
    if let (Some(t), true) = (st.ack_timeout, mask & IBV_QP_TIMEOUT != 0) {
        q.timeout = t;
    }
    if let (Some(tos), true) = (st.tos, mask & IBV_QP_AV != 0) {
        q.ah_attr.grh.traffic_class = tos;
    }
    Ok((q, mask))
}

/// `QpAttr` as `struct ibv_qp_attr` (a global route from the GID at
/// `sgid_index`, RoCEv2's only kind of address).
pub fn to_ibv(a: &QpAttr, state: c_int, port: u8, sgid_index: u8) -> ibv_qp_attr {
    let mut q = ibv_qp_attr {
        qp_state: state,
        pkey_index: a.pkey_index.unwrap_or(0),
        port_num: a.port.unwrap_or(port.max(1)),
        qp_access_flags: a.access_flags.unwrap_or(0),
        qkey: a.qkey.unwrap_or(0),
        path_mtu: a.path_mtu.map_or(0, |m| c_int::from(mtu_enum(m))),
        dest_qp_num: a.dest_qpn.unwrap_or(0),
        rq_psn: a.rq_psn.unwrap_or(0),
        max_dest_rd_atomic: a.max_dest_rd_atomic.unwrap_or(0),
        min_rnr_timer: a.min_rnr_timer.unwrap_or(0),
        sq_psn: a.sq_psn.unwrap_or(0),
        timeout: a.timeout.unwrap_or(0),
        retry_cnt: a.retry_cnt.unwrap_or(0),
        rnr_retry: a.rnr_retry.unwrap_or(0),
        max_rd_atomic: a.max_rd_atomic.unwrap_or(0),
        ..ibv_qp_attr::default()
    };
    if let Some(ah) = &a.ah {
        q.ah_attr.is_global = 1;
        q.ah_attr.port_num = q.port_num;
        q.ah_attr.grh.dgid.raw = ah.dgid.0;
        q.ah_attr.grh.sgid_index = sgid_index;
        q.ah_attr.grh.hop_limit = ah.hop_limit;
        q.ah_attr.grh.traffic_class = ah.traffic_class;
        q.ah_attr.grh.flow_label = ah.flow_label;
    }
    q
}

/// `enum ibv_mtu` of a size in bytes.
pub fn mtu_enum(bytes: u32) -> u8 {
    match bytes {
        0..=256 => 1,
        257..=512 => 2,
        513..=1024 => 3,
        1025..=2048 => 4,
        _ => 5,
    }
}

/// Moves the ID's QP to `state` with the daemon's attributes; `depth`
/// (not 0xFF) replaces the RTR's responder resources or the RTS's
/// initiator depth.
pub fn modify(idp: &IdPriv, state: c_int, depth: u8) -> Result<(), c_int> {
    let qp = idp.raw().qp;
    if qp.is_null() {
        return Ok(());
    }
    let (mut a, mask) = qp_attr(idp, state)?;
    if depth != 0xFF {
        match state {
            IBV_QPS_RTR => a.max_dest_rd_atomic = depth,
            IBV_QPS_RTS => a.max_rd_atomic = depth,
            _ => {}
        }
    }
    // SAFETY: the ID's QP with attributes that live across the call.
    match unsafe { idp.lib.verbs.modify_qp(qp, &mut a, mask) } {
        0 => Ok(()),
        e => {
            complain("ibv_modify_qp", format!("to state {state}: errno {e}"));
            Err(e)
        }
    }
}

/// RTR then RTS (an accept, or the active side's answered connect).
pub fn ready(idp: &IdPriv, resp_res: u8, init_depth: u8) -> Result<(), c_int> {
    if idp.raw().qp_type == IBV_QPT_UD {
        return Ok(());
    }
    let r = modify(idp, IBV_QPS_RTR, resp_res).and_then(|_| modify(idp, IBV_QPS_RTS, init_depth));
    if r.is_err() {
        to_error(idp);
    }
    r
}

/// The ID's QP to ERR (reject, disconnect).
pub fn to_error(idp: &IdPriv) {
    let qp = idp.raw().qp;
    if qp.is_null() {
        return;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..ibv_qp_attr::default()
    };
    // SAFETY: the ID's QP with attributes that live across the call.
    unsafe { idp.lib.verbs.modify_qp(qp, &mut a, IBV_QP_STATE) };
}

/// Destroys the CQs and completion channels the library made for the ID.
fn destroy_cqs(idp: &IdPriv) {
    let v = &idp.lib.verbs;
    let raw = idp.raw();
    // SAFETY: objects this library made for the ID, used by no QP now.
    unsafe {
        if !raw.recv_cq.is_null() {
            v.destroy_cq(raw.recv_cq);
        }
        if !raw.send_cq.is_null() && raw.send_cq != raw.recv_cq {
            v.destroy_cq(raw.send_cq);
        }
        if !raw.recv_cq_channel.is_null() {
            v.destroy_comp_channel(raw.recv_cq_channel);
        }
        if !raw.send_cq_channel.is_null() && raw.send_cq_channel != raw.recv_cq_channel {
            v.destroy_comp_channel(raw.send_cq_channel);
        }
    }
    raw.recv_cq = std::ptr::null_mut();
    raw.send_cq = std::ptr::null_mut();
    raw.recv_cq_channel = std::ptr::null_mut();
    raw.send_cq_channel = std::ptr::null_mut();
}

/// A completion channel and a CQ of `size` entries whose context is the
/// ID (`rdma_get_send_comp` checks it).
fn make_cq(idp: &IdPriv, size: u32) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    let v = &idp.lib.verbs;
    let ctx = idp.raw().verbs;
    // SAFETY: the ID's open context.
    let ch = unsafe { v.create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(libc::ENOMEM);
    }
    let me = idp as *const IdPriv as *mut c_void;
    // SAFETY: the ID's context and the channel just made.
    let cq = unsafe { v.create_cq(ctx, size.max(1) as c_int, me, ch) };
    if cq.is_null() {
        // SAFETY: the channel just made, unused.
        unsafe { v.destroy_comp_channel(ch) };
        return Err(libc::ENOMEM);
    }
    Ok((ch, cq))
}

/// `rdma_create_qp`: a QP on `pd` (NULL: the ID's, or the device's own),
/// with CQs of its own where the attributes name none; in INIT (UD: RTS).
pub fn create_qp(idp: &IdPriv, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let raw = idp.raw();
    if !raw.qp.is_null() || raw.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if !pd.is_null() {
        pd
    } else if !raw.pd.is_null() {
        raw.pd
    } else {
        // SAFETY: the ID's context is one of the library's.
        unsafe { idp.lib.verbs.default_pd(raw.verbs) }
    };
    // SAFETY: a PD of the application's or this library's.
    if pd.is_null() || unsafe { (*pd).context } != raw.verbs {
        return Err(libc::EINVAL);
    }
    if attr.recv_cq.is_null() && raw.recv_cq.is_null() {
        (raw.recv_cq_channel, raw.recv_cq) = make_cq(idp, attr.cap.max_recv_wr)?;
    }
    if attr.send_cq.is_null() && raw.send_cq.is_null() {
        match make_cq(idp, attr.cap.max_send_wr) {
            Ok(c) => (raw.send_cq_channel, raw.send_cq) = c,
            Err(e) => {
                destroy_cqs(idp);
                return Err(e);
            }
        }
    }
    if attr.send_cq.is_null() {
        attr.send_cq = raw.send_cq;
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = raw.recv_cq;
    }
    if attr.srq.is_null() {
        attr.srq = raw.srq;
    }
    // SAFETY: a PD of the ID's device and the caller's attributes.
    let qp = unsafe { idp.lib.verbs.create_qp(pd, attr) };
    if qp.is_null() {
        destroy_cqs(idp);
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        return Err(if e == 0 { libc::ENOMEM } else { e });
    }
    raw.qp = qp;
    let init = modify(idp, IBV_QPS_INIT, 0xFF).and_then(|_| {
        if raw.qp_type != IBV_QPT_UD {
            return Ok(());
        }
        let v = &idp.lib.verbs;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            ..ibv_qp_attr::default()
        };
        // SAFETY: the QP just made, attributes across the call.
        let r = unsafe { v.modify_qp(qp, &mut a, IBV_QP_STATE) };
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        // SAFETY: as above.
        let r2 = unsafe { v.modify_qp(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN) };
        if r != 0 || r2 != 0 {
            Err(libc::EINVAL)
        } else {
            Ok(())
        }
    });
    if let Err(e) = init {
        raw.qp = std::ptr::null_mut();
        // SAFETY: the QP just made, used by nobody.
        unsafe { idp.lib.verbs.destroy_qp(qp) };
        destroy_cqs(idp);
        return Err(e);
    }
    raw.pd = pd;
    Ok(())
}

/// `rdma_create_qp`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `pd` NULL or a PD; `attr` NULL
/// or the application's attributes.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's attributes.
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        create_qp(idp, pd, a)
    })())
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_qp(id: *mut rdma_cm_id) {
    if let Ok(idp) = id_of(id) {
        let raw = idp.raw();
        if !raw.qp.is_null() {
            // SAFETY: the ID's QP, which the application gives up.
            unsafe { idp.lib.verbs.destroy_qp(raw.qp) };
            raw.qp = std::ptr::null_mut();
        }
        destroy_cqs(idp);
    }
}

/// `rdma_init_qp_attr`: the attributes for `attr->qp_state`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `attr`, `mask` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's attributes and mask.
        let (a, m) = unsafe { (attr.as_mut(), mask.as_mut()) };
        let (a, m) = a.zip(m).ok_or(libc::EINVAL)?;
        let (q, qm) = qp_attr(idp, a.qp_state)?;
        *a = q;
        *m = qm;
        Ok(())
    })())
}

/// `rdma_create_srq`: an SRQ on `pd` (NULL: the ID's) for the ID's QP.
///
/// # Safety
/// `id` is NULL or an ID of this library; `pd` NULL or a PD; `attr` NULL
/// or the application's attributes.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        let raw = idp.raw();
        let pd = if pd.is_null() { raw.pd } else { pd };
        if pd.is_null() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's PD and attributes.
        let srq = unsafe { idp.lib.verbs.create_srq(pd, attr) };
        if srq.is_null() {
            return Err(libc::ENOMEM);
        }
        raw.srq = srq;
        if raw.pd.is_null() {
            raw.pd = pd;
        }
        Ok(())
    })())
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_srq(id: *mut rdma_cm_id) {
    if let Ok(idp) = id_of(id) {
        let raw = idp.raw();
        if !raw.srq.is_null() {
            // SAFETY: the ID's SRQ, which the application gives up.
            unsafe { idp.lib.verbs.destroy_srq(raw.srq) };
            raw.srq = std::ptr::null_mut();
        }
        destroy_cqs(idp);
    }
}

/// `rdma_get_devices`: every device's context, NULL-terminated.
///
/// # Safety
/// `num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    let ctxs = crate::global().verbs.contexts();
    // SAFETY: calloc of n + 1 pointers (all NULL).
    let list = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<usize>()) }
        as *mut *mut ibv_context;
    if list.is_null() {
        fail(libc::ENOMEM);
        return list;
    }
    for (i, c) in ctxs.iter().enumerate() {
        // SAFETY: entry i of n + 1.
        unsafe { *list.add(i) = *c };
    }
    if !num.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *num = ctxs.len() as c_int };
    }
    list
}

/// `rdma_free_devices` (the contexts stay open, as in librdmacm).
///
/// # Safety
/// `list` is NULL or a list `rdma_get_devices` returned.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: calloc'd by rdma_get_devices.
    unsafe { libc::free(list as *mut c_void) };
}
