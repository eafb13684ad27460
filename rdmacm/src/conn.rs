//! The verbs on an ID: bind, address and route resolution, listen,
//! connect / accept / reject / disconnect, and the small ones (ports,
//! options, migrate, notify, establish).

use crate::abi::*;
use crate::backend::ConnParam;
use crate::channel;
use crate::deliver::{self, complete};
use crate::errno::{complain, fail, refused};
use crate::state::{ack, IdPriv, Remote};
use crate::{id, qp, sockaddr};
use libc::{c_int, c_void, sockaddr as SockAddr};
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// The local device an ID with no source address reaches `dst` from: the
/// one holding the kernel's source address for `dst`, else the first
/// device that is not `dst`'s own (a pair of devices in one rnicd), else
/// `dst`'s own (loopback).
pub fn device_towards(idp: &IdPriv, dst: IpAddr) -> Option<String> {
    let b = &idp.lib;
    let unspecified: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let kernel_src = UdpSocket::bind(unspecified)
        .and_then(|s| s.connect((dst, 9)).map(|_| s))
        .and_then(|s| s.local_addr())
        .ok();
    if let Some(d) = kernel_src.and_then(|s| b.device_of(s.ip())) {
        if b.device_of(dst).as_ref() != Some(&d) {
            return Some(d);
        }
    }
    let own = b.device_of(dst);
    b.devices()
        .into_iter()
        .find(|d| Some(d) != own.as_ref())
        .or(own)
}

/// Whether an ID bound to `ip` takes no device yet: the unspecified
/// address, or a loopback one no softrnic device holds. The kernel's RDMA
/// CM binds both alike (`cma_any_addr`): the device comes at listen (all
/// of them) or at address resolution. A device whose own address is a
/// loopback one (a `--mem-pair` on 127.0.0.x) is bound to as any other.
fn takes_no_device(idp: &IdPriv, ip: IpAddr) -> bool {
    ip.is_unspecified() || (ip.is_loopback() && idp.lib.device_of(ip).is_none())
}

/// `addr` with the unspecified address of its family.
fn unspecified(addr: SocketAddr) -> SocketAddr {
    let ip = match addr {
        SocketAddr::V4(_) => IpAddr::from([0u8; 4]),
        SocketAddr::V6(_) => IpAddr::from([0u8; 16]),
    };
    SocketAddr::new(ip, addr.port())
}

fn bind(idp: &IdPriv, addr: SocketAddr) -> Result<(), c_int> {
    if !idp.state().remote.is_empty() {
        return Err(libc::EINVAL);
    }
    let raw = idp.raw();
    if takes_no_device(idp, addr.ip()) {
        // the daemon's IDs come at listen, one per device
        sockaddr::write(&mut raw.route.addr.src, addr);
        return Ok(());
    }
    let Some(dev) = idp.lib.device_of(addr.ip()) else {
        complain(
            "rdma_bind_addr",
            format!("{} is no softrnic device's address", addr.ip()),
        );
        return Err(libc::EADDRNOTAVAIL);
    };
    let r = id::attach(idp, &dev)?;
    let b =
        r.cm.bind(r.no, addr)
            .map_err(|e| refused("rdma_bind_addr", e))?;
    sockaddr::write(&mut raw.route.addr.src, b.addr);
    raw.route.addr.ibaddr.sgid.raw = b.gid;
    raw.port_num = b.port;
    Ok(())
}

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

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `addr` NULL or a sockaddr.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut SockAddr) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's address.
        let a = unsafe { sockaddr::read(addr) }?.ok_or(libc::EINVAL)?;
        bind(idp, a)
    })())
}

fn resolve_addr(
    idp: &IdPriv,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> Result<(), c_int> {
    if dst.ip().is_multicast() {
        // a multicast group is only of use to rdma_join_multicast
        complain(
            "rdma_resolve_addr",
            format!("{}: multicast is not supported", dst.ip()),
        );
        return Err(libc::ENOSYS);
    }
    let bound = idp.state().remote.first().cloned();
    // a source that takes no device is the unspecified one, its port kept
    let src = src.map(|s| match takes_no_device(idp, s.ip()) {
        true => unspecified(s),
        false => s,
    });
    let r = match (bound, src) {
        (Some(r), _) => r,
        (None, Some(s)) if !s.ip().is_unspecified() => {
            bind(idp, s)?;
            idp.remote()?
        }
        _ => {
            let Some(dev) = device_towards(idp, dst.ip()) else {
                complain(
                    "rdma_resolve_addr",
                    format!("no softrnic device reaches {}", dst.ip()),
                );
                return Err(libc::EADDRNOTAVAIL);
            };
            id::attach(idp, &dev)?
        }
    };
    sockaddr::write(&mut idp.raw().route.addr.dst, dst);
    r.cm.resolve_addr(r.no, src, dst, timeout_ms.max(0) as u32)
        .map_err(|e| refused("rdma_resolve_addr", e))?;
    complete(idp)
}

/// `rdma_resolve_addr`.
///
/// # Safety
/// `id` is NULL or an ID of this library; the addresses NULL or sockaddrs.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut SockAddr,
    dst: *mut SockAddr,
    timeout_ms: c_int,
) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's addresses.
        let src = unsafe { sockaddr::read(src) }?;
        // SAFETY: as above.
        let dst = unsafe { sockaddr::read(dst) }?.ok_or(libc::EINVAL)?;
        resolve_addr(idp, src, dst, timeout_ms)
    })())
}

/// `rdma_resolve_route`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        let r = idp.remote()?;
        r.cm.resolve_route(r.no, timeout_ms.max(0) as u32)
            .map_err(|e| refused("rdma_resolve_route", e))?;
        complete(idp)
    })())
}

fn listen(idp: &IdPriv, backlog: c_int) -> Result<(), c_int> {
    let backlog = backlog.max(0) as u32;
    let bound = idp.state().remote.clone();
    if !bound.is_empty() {
        for r in bound {
            r.cm.listen(r.no, backlog)
                .map_err(|e| refused("rdma_listen", e))?;
        }
        return Ok(());
    }
    // unbound or on the wildcard address: every device, at one port
    // SAFETY: the union holds an address or zeroes (family 0).
    let wild = unsafe { sockaddr::read(&idp.raw().route.addr.src.addr) }
        .ok()
        .flatten()
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let devs = idp.lib.devices();
    if devs.is_empty() {
        complain("rdma_listen", "no softrnic device");
        return Err(libc::ENODEV);
    }
    let mut at = wild;
    for dev in devs {
        let r = id::attach(idp, &dev)?;
        let b =
            r.cm.bind(r.no, unspecified(at))
                .map_err(|e| refused("rdma_listen", e))?;
        at.set_port(b.addr.port());
        r.cm.listen(r.no, backlog)
            .map_err(|e| refused("rdma_listen", e))?;
    }
    sockaddr::write(&mut idp.raw().route.addr.src, at);
    Ok(())
}

/// `rdma_listen` (on the wildcard address: on every device).
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ret(id_of(id).and_then(|idp| listen(idp, backlog)))
}

/// The private data of a `rdma_conn_param`.
///
/// # Safety
/// `p` is NULL or a conn param whose private data is readable.
unsafe fn private_data(p: Option<&rdma_conn_param>) -> Vec<u8> {
    match p {
        Some(p) if !p.private_data.is_null() && p.private_data_len > 0 => {
            // SAFETY: the caller's private data of that length.
            unsafe {
                std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len.into())
            }
            .to_vec()
        }
        _ => Vec::new(),
    }
}

/// The parameters of a connect or accept, librdmacm's defaults filled in
/// (retries 7; 0xFF depths meaning what the request or device allows).
fn conn_param(idp: &IdPriv, p: Option<&rdma_conn_param>) -> ConnParam {
    let qp = idp.raw().qp;
    // SAFETY: the ID's QP (libibverbs' object) while the ID has one.
    let own = unsafe { qp.as_ref() }.map(|q| (q.qp_num, !q.srq.is_null()));
    let st = idp.state();
    let pick = |v: u8, dflt: u8| if v == 0xFF { dflt } else { v };
    // SAFETY: the application's param, checked non-NULL by the caller.
    let private_data = unsafe { private_data(p) };
    ConnParam {
        qpn: own.map_or(p.map_or(0, |p| p.qp_num), |o| o.0) & 0xFF_FFFF,
        srq: own.map_or(p.is_some_and(|p| p.srq != 0), |o| o.1),
        psn: None,
        private_data,
        responder_resources: pick(
            p.map_or(0xFF, |p| p.responder_resources),
            st.responder_resources.min(16),
        ),
        initiator_depth: pick(
            p.map_or(0xFF, |p| p.initiator_depth),
            st.initiator_depth.min(16),
        ),
        flow_control: p.is_none_or(|p| p.flow_control != 0),
        retry_count: p.map_or(7, |p| p.retry_count),
        rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count),
    }
}

/// `rdma_connect`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `p` NULL or a conn param.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_connect(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's param.
        let p = unsafe { p.as_ref() };
        if idp.raw().qp.is_null() && p.is_none() && idp.raw().ps == RDMA_PS_TCP {
            return Err(libc::EINVAL);
        }
        let r = idp.remote()?;
        // before the REQ: the answer may be read by another thread at once
        idp.state().connecting = true;
        if let Err(e) = r.cm.connect(r.no, &conn_param(idp, p)) {
            idp.state().connecting = false;
            return Err(refused("rdma_connect", e));
        }
        complete(idp)
    })())
}

/// `rdma_accept`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `p` NULL or a conn param.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_accept(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        // SAFETY: the caller's param.
        let p = unsafe { p.as_ref() };
        if idp.raw().qp.is_null() && p.is_none() && idp.raw().ps == RDMA_PS_TCP {
            return Err(libc::EINVAL);
        }
        let r = idp.remote()?;
        let cp = conn_param(idp, p);
        qp::ready(idp, cp.responder_resources, cp.initiator_depth)?;
        idp.state().qp_ready = true;
        if let Err(e) = r.cm.accept(r.no, &cp) {
            qp::to_error(idp);
            return Err(refused("rdma_accept", e));
        }
        if idp.raw().qp_type == IBV_QPT_UD {
            return Ok(());
        }
        complete(idp)
    })())
}

fn with_remote(
    id: *mut rdma_cm_id,
    verb: &str,
    f: impl FnOnce(&Remote) -> crate::backend::Result<()>,
) -> c_int {
    ret(id_of(id)
        .and_then(|idp| idp.remote())
        .and_then(|r| f(&r).map_err(|e| refused(verb, e))))
}

/// `rdma_reject`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `data` NULL or `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_reject(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    let bytes = if data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's private data of `len` bytes.
        unsafe { std::slice::from_raw_parts(data as *const u8, len.into()) }.to_vec()
    };
    with_remote(id, "rdma_reject", |r| r.cm.reject(r.no, &bytes))
}

/// `rdma_disconnect`: the QP to ERR, then the DREQ.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ret((|| {
        let idp = id_of(id)?;
        qp::to_error(idp);
        let r = idp.remote()?;
        r.cm.disconnect(r.no)
            .map_err(|e| refused("rdma_disconnect", e))?;
        complete(idp)
    })())
}

/// `rdma_establish`, after CONNECT_RESPONSE on an ID without a QP (the
/// application's own QP is in RTS): the RTU goes. EINVAL on an ID with a
/// QP, whose RTU the library has sent, as librdmacm does.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    match id_of(id) {
        Ok(idp) if !idp.raw().qp.is_null() => fail(libc::EINVAL),
        _ => with_remote(id, "rdma_establish", |r| r.cm.establish(r.no)),
    }
}

/// `rdma_notify`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    with_remote(id, "rdma_notify", |r| r.cm.notify(r.no, event as u32))
}

/// `rdma_migrate_id`.
///
/// # Safety
/// `id` is NULL or an ID of this library; `chan` NULL or a channel of it.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_migrate_id(
    id: *mut rdma_cm_id,
    chan: *mut rdma_event_channel,
) -> c_int {
    ret(id_of(id).and_then(|idp| channel::migrate(idp, chan)))
}

/// `rdma_set_option`: the options the kernel's RDMA CM takes. TOS (the
/// traffic class of the QP's path) and ACK_TIMEOUT (the QP's local ACK
/// timeout, 4.096 µs × 2^n) change the attributes `rdma_init_qp_attr`
/// gives; REUSEADDR and AFONLY are accepted and change nothing. A wrong
/// length is EINVAL, InfiniBand paths and unknown options ENOSYS.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    let Ok(idp) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    if val.is_null() {
        return fail(libc::EINVAL);
    }
    let want = match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => 1,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => 1,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => {
            std::mem::size_of::<c_int>()
        }
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
            complain(
                "rdma_set_option",
                "InfiniBand path records are not supported",
            );
            return fail(libc::ENOSYS);
        }
        _ => return fail(libc::ENOSYS),
    };
    if len != want {
        return fail(libc::EINVAL);
    }
    // SAFETY: `val` is the caller's option value of `len` bytes (checked
    // above); the byte options are read as one byte.
    let byte = unsafe { *(val as *const u8) };
    match name {
        RDMA_OPTION_ID_TOS => idp.state().tos = Some(byte),
        // IBA 9.7.6.1.3: the Local ACK Timeout is 5 bits
        RDMA_OPTION_ID_ACK_TIMEOUT => idp.state().ack_timeout = Some(byte.min(31)),
        _ => {}
    }
    0
}

/// `rdma_get_src_port` (network order).
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id).map_or(0, |i| sockaddr::port_be(&i.raw().route.addr.src))
}

/// `rdma_get_dst_port` (network order).
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id).map_or(0, |i| sockaddr::port_be(&i.raw().route.addr.dst))
}

/// `rdma_get_request` (on a synchronous listener): the next
/// CONNECT_REQUEST's new ID, its event kept in `id->event`.
///
/// # Safety
/// `listen` is NULL or an ID of this library; `id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    ret((|| {
        let l = id_of(listen)?;
        if !l.state().sync || id.is_null() {
            return Err(libc::EINVAL);
        }
        let raw = l.raw();
        if !raw.event.is_null() {
            // SAFETY: the event kept by the last call.
            unsafe { ack(raw.event) };
            raw.event = std::ptr::null_mut();
        }
        let ev = deliver::get_event(channel::of_id(l).ok_or(libc::EINVAL)?)?;
        // SAFETY: the event just handed out.
        let e = unsafe { &*ev };
        if e.status != 0 || e.event != event::CONNECT_REQUEST {
            raw.event = ev;
            return Err(if e.status != 0 {
                e.status.abs()
            } else {
                libc::EINVAL
            });
        }
        let ep = l.state().ep_attr;
        if let Some((mut attr, pd)) = ep {
            // SAFETY: the new ID of the request.
            let new = unsafe { IdPriv::from_ptr(e.id) }.ok_or(libc::EINVAL)?;
            if let Err(err) = qp::create_qp(new, pd as *mut ibv_pd, &mut attr) {
                raw.event = ev;
                return Err(err);
            }
        }
        // SAFETY: the new ID of the request.
        unsafe {
            (*e.id).event = ev;
            *id = e.id;
        }
        Ok(())
    })())
}
