//! The C API (`include/softrnic.h`, built into `libsoftrnic.so`): verbs
//! with ibverbs-like names over the Rust client. Objects are opaque
//! pointers; functions return 0 or an errno value (or NULL). Panics never
//! cross the boundary.

use crate::client::{Ah, Buffer, ConnectParams, Context, Cq, Mr, Pd, Qp, QpInitAttr, Srq};
use crate::proto::QpKind;
use crate::ring;
use nic::verbs::{AhAttr, RecvWr, Sge, Sgl, Wc, MAX_SGE};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

type Bufs = Arc<Mutex<Vec<Buffer>>>;

pub struct SrnicContext {
    ctx: Arc<Context>,
    bufs: Bufs,
}
pub struct SrnicPd {
    pd: Pd,
    bufs: Bufs,
}
pub struct SrnicMr {
    mr: Mr,
}
pub struct SrnicCq {
    cq: Cq,
}
pub struct SrnicQp {
    qp: Qp,
}
pub struct SrnicAh {
    ah: Ah,
}
pub struct SrnicSrq {
    srq: Srq,
}

#[repr(C)]
pub struct SrnicAhAttr {
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// `srnic_wc` plus the UD fields (`srnic_poll_cq_ex`).
#[repr(C)]
pub struct SrnicWcEx {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub qp_num: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    /// bit 0: imm_data valid; bit 1: a GRH precedes the data (UD)
    pub wc_flags: u32,
    pub src_qp: u32,
    pub _pad: u32,
}

/// Queue pair types of `srnic_qp_init_attr_ex`.
pub const SRNIC_QPT_RC: u32 = 0;
pub const SRNIC_QPT_UC: u32 = 1;
pub const SRNIC_QPT_UD: u32 = 2;

#[repr(C)]
pub struct SrnicQpInitAttrEx {
    pub send_cq: *mut SrnicCq,
    pub recv_cq: *mut SrnicCq,
    /// NULL: the QP has its own receive queue.
    pub srq: *mut SrnicSrq,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub sq_sig_all: c_int,
    pub qp_type: u32,
}

#[repr(C)]
pub struct SrnicDeviceAttr {
    pub gid: [u8; 16],
    pub mac: [u8; 6],
    pub mtu: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct SrnicSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
pub struct SrnicSendWr {
    pub wr_id: u64,
    pub opcode: u32,
    pub send_flags: u32,
    pub sg_list: *const SrnicSge,
    pub num_sge: u32,
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _pad: u32,
    pub compare_add: u64,
    pub swap: u64,
}

#[repr(C)]
pub struct SrnicRecvWr {
    pub wr_id: u64,
    pub sg_list: *const SrnicSge,
    pub num_sge: u32,
}

#[repr(C)]
pub struct SrnicWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub qp_num: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    /// bit 0: imm_data valid
    pub wc_flags: u32,
}

#[repr(C)]
pub struct SrnicQpInitAttr {
    pub send_cq: *mut SrnicCq,
    pub recv_cq: *mut SrnicCq,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub sq_sig_all: c_int,
}

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn boxed<T>(v: Option<T>) -> *mut T {
    v.map(|v| Box::into_raw(Box::new(v)))
        .unwrap_or(std::ptr::null_mut())
}

/// Opens the device whose control socket is `path`; NULL on failure.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn srnic_open_device(path: *const c_char) -> *mut SrnicContext {
    guard(std::ptr::null_mut(), || {
        if path.is_null() {
            return std::ptr::null_mut();
        }
        let p = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned();
        boxed(Context::open(p).ok().map(|ctx| SrnicContext {
            ctx,
            bufs: Default::default(),
        }))
    })
}

/// # Safety
/// `ctx` came from `srnic_open_device` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_close_device(ctx: *mut SrnicContext) -> c_int {
    if !ctx.is_null() {
        drop(unsafe { Box::from_raw(ctx) });
    }
    0
}

/// # Safety
/// Valid pointers.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_device(
    ctx: *const SrnicContext,
    attr: *mut SrnicDeviceAttr,
) -> c_int {
    let (Some(c), false) = (unsafe { ctx.as_ref() }, attr.is_null()) else {
        return libc::EINVAL;
    };
    let d = &c.ctx.device;
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

/// `struct ibv_port_attr`, the fields a RoCE port has.
#[repr(C)]
pub struct SrnicPortAttr {
    /// `enum ibv_port_state`: 1 DOWN, 4 ACTIVE (SRNIC_PORT_*).
    pub state: u32,
    /// IB MTUs in bytes (256..4096).
    pub active_mtu: u32,
    pub max_mtu: u32,
    pub link_speed_bps: u64,
}

/// `ibv_query_port`: 0 and `*attr` filled; EINVAL for null arguments or a
/// port other than 1 (the device has one); EIO when the daemon cannot be
/// asked. (Positive error numbers, as `ibv_query_port` and
/// `srnic_query_device` return.)
///
/// # Safety
/// `ctx` from `srnic_open_device`; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_port(
    ctx: *const SrnicContext,
    port_num: u8,
    attr: *mut SrnicPortAttr,
) -> c_int {
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

/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_alloc_pd(ctx: *mut SrnicContext) -> *mut SrnicPd {
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

/// # Safety
/// `pd` from `srnic_alloc_pd`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_dealloc_pd(pd: *mut SrnicPd) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    unsafe { release(pd, libc::EBUSY, |h| h.pd.dealloc()) }
}

/// Allocates `len` bytes of shared memory (zeroed, page-aligned) that
/// `srnic_reg_mr` registers zero-copy. Freed when the context closes.
///
/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_alloc_buf(pd: *mut SrnicPd, len: usize) -> *mut c_void {
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
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_reg_mr(
    pd: *mut SrnicPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut SrnicMr {
    let Some(p) = (unsafe { pd.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        let a = addr as u64;
        let buf = p.bufs.lock().ok().and_then(|v| {
            v.iter()
                .find(|b| a >= b.addr() && a + len as u64 <= b.addr() + b.len() as u64)
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

/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_mr_lkey(mr: *const SrnicMr) -> u32 {
    unsafe { mr.as_ref() }.map(|m| m.mr.lkey).unwrap_or(0)
}

/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_mr_rkey(mr: *const SrnicMr) -> u32 {
    unsafe { mr.as_ref() }.map(|m| m.mr.rkey).unwrap_or(0)
}

/// # Safety
/// `mr` from `srnic_reg_mr`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_dereg_mr(mr: *mut SrnicMr) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    unsafe { release(mr, libc::EINVAL, |h| h.mr.dereg()) }
}

/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_cq(ctx: *mut SrnicContext, cqe: c_int) -> *mut SrnicCq {
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

/// # Safety
/// `cq` from `srnic_create_cq`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_cq(cq: *mut SrnicCq) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    unsafe { release(cq, libc::EBUSY, |h| h.cq.destroy()) }
}

/// Polls up to `num` completions into `wc`; returns how many.
///
/// # Safety
/// `wc` has room for `num` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_poll_cq(cq: *mut SrnicCq, num: c_int, wc: *mut SrnicWc) -> c_int {
    // SAFETY: `wc` has room for `num` entries (the caller's promise)
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
/// `cq` from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_req_notify_cq(cq: *mut SrnicCq, solicited_only: c_int) -> c_int {
    let Some(c) = (unsafe { cq.as_mut() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match c.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(_) => libc::EIO,
    })
}

/// How long a C caller's `timeout_ms` waits at a time (negative: no limit;
/// the caller loops in hour-long waits).
fn wait_time(timeout_ms: c_int) -> std::time::Duration {
    if timeout_ms < 0 {
        std::time::Duration::from_secs(3600)
    } else {
        std::time::Duration::from_millis(timeout_ms as u64)
    }
}

/// Waits up to `timeout_ms` (negative: for ever) for a completion event
/// and consumes it (`ibv_get_cq_event` + `ibv_ack_cq_events`): 1 an event,
/// 0 none in time, -EINVAL without a CQ or before `srnic_req_notify_cq`.
///
/// # Safety
/// `cq` from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_get_cq_event(cq: *mut SrnicCq, timeout_ms: c_int) -> c_int {
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
/// `cq` from `srnic_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_cq_event_fd(cq: *const SrnicCq) -> c_int {
    match unsafe { cq.as_ref() } {
        Some(c) => c.cq.event_fd().unwrap_or(-1),
        None => -1,
    }
}

fn wc_flags(w: &Wc) -> u32 {
    w.imm.is_some() as u32 | (w.grh as u32) << 1
}

/// `srnic_poll_cq` with the source QP of UD receives.
///
/// # Safety
/// `wc` has room for `num` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_poll_cq_ex(
    cq: *mut SrnicCq,
    num: c_int,
    wc: *mut SrnicWcEx,
) -> c_int {
    // SAFETY: `wc` has room for `num` entries (the caller's promise)
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

/// An RC QP.
///
/// # Safety
/// Valid pointers.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_qp(
    pd: *mut SrnicPd,
    attr: *const SrnicQpInitAttr,
) -> *mut SrnicQp {
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let (Some(s), Some(r)) = (unsafe { a.send_cq.as_ref() }, unsafe { a.recv_cq.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let init = QpInitAttr {
        qp_type: QpKind::Rc,
        send_cq: s.cq.handle,
        recv_cq: r.cq.handle,
        max_send_wr: a.max_send_wr,
        max_recv_wr: a.max_recv_wr,
        sq_sig_all: a.sq_sig_all != 0,
        srq: None,
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_qp(&init).ok().map(|qp| SrnicQp { qp }))
    })
}

/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_qp_num(qp: *const SrnicQp) -> u32 {
    unsafe { qp.as_ref() }.map(|q| q.qp.qpn).unwrap_or(0)
}

/// Moves an RC QP through INIT, RTR and RTS towards `dest_qpn` at
/// (`dgid`, `dmac`) with default path settings (MTU 1024, all access).
///
/// # Safety
/// `dgid` points at 16 bytes, `dmac` at 6.
#[no_mangle]
pub unsafe extern "C" fn srnic_connect_qp(
    qp: *mut SrnicQp,
    dgid: *const u8,
    dmac: *const u8,
    dest_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
) -> c_int {
    let Some(q) = (unsafe { qp.as_ref() }) else {
        return libc::EINVAL;
    };
    if dgid.is_null() || dmac.is_null() {
        return libc::EINVAL;
    }
    let mut g = [0u8; 16];
    let mut m = [0u8; 6];
    unsafe {
        std::ptr::copy_nonoverlapping(dgid, g.as_mut_ptr(), 16);
        std::ptr::copy_nonoverlapping(dmac, m.as_mut_ptr(), 6);
    }
    let ah = AhAttr::new(wire::Gid(g), wire::EthernetAddress(m));
    guard(libc::EIO, || {
        match q
            .qp
            .connect(&ConnectParams::default(), ah, dest_qpn, sq_psn, rq_psn)
        {
            Ok(()) => 0,
            Err(_) => libc::EINVAL,
        }
    })
}

/// # Safety
/// `qp` from `srnic_create_qp`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_qp(qp: *mut SrnicQp) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    unsafe { release(qp, libc::EINVAL, |h| h.qp.destroy()) }
}

/// A QP of any type, optionally on an SRQ (`ibv_create_qp_ex`-like).
///
/// # Safety
/// Valid pointers.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_qp_ex(
    pd: *mut SrnicPd,
    attr: *const SrnicQpInitAttrEx,
) -> *mut SrnicQp {
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let (Some(s), Some(r)) = (unsafe { a.send_cq.as_ref() }, unsafe { a.recv_cq.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let qp_type = match a.qp_type {
        SRNIC_QPT_RC => QpKind::Rc,
        SRNIC_QPT_UC => QpKind::Uc,
        SRNIC_QPT_UD => QpKind::Ud,
        _ => return std::ptr::null_mut(),
    };
    let init = QpInitAttr {
        qp_type,
        send_cq: s.cq.handle,
        recv_cq: r.cq.handle,
        max_send_wr: a.max_send_wr,
        max_recv_wr: a.max_recv_wr,
        sq_sig_all: a.sq_sig_all != 0,
        srq: unsafe { a.srq.as_ref() }.map(|s| s.srq.handle),
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_qp(&init).ok().map(|qp| SrnicQp { qp }))
    })
}

/// Moves a UD QP through INIT (P_Key index 0, port 1, `qkey`), RTR and
/// RTS (`sq_psn`).
///
/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_ready_ud_qp(qp: *mut SrnicQp, qkey: u32, sq_psn: u32) -> c_int {
    let Some(q) = (unsafe { qp.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match q.qp.ud_ready(qkey, sq_psn) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    })
}

/// An address handle for UD sends (`ibv_create_ah`); NULL on failure.
///
/// # Safety
/// Valid pointers.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_ah(
    pd: *mut SrnicPd,
    attr: *const SrnicAhAttr,
) -> *mut SrnicAh {
    let (Some(p), Some(a)) = (unsafe { pd.as_ref() }, unsafe { attr.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let msg = crate::proto::AhMsg {
        dgid: a.dgid,
        dmac: a.dmac,
        traffic_class: a.traffic_class,
        hop_limit: a.hop_limit,
        flow_label: a.flow_label,
        // the C struct has no VLAN tag (its layout stays as it was)
        vlan: None,
    };
    let Ok(ah) = msg.to_ah() else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_ah(&ah).ok().map(|ah| SrnicAh { ah }))
    })
}

/// # Safety
/// `ah` from `srnic_create_ah`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_ah(ah: *mut SrnicAh) -> c_int {
    // SAFETY: the caller gives the handle up (see above)
    unsafe { release(ah, libc::EINVAL, |h| h.ah.destroy()) }
}

/// A shared receive queue of at least `max_wr` entries (`ibv_create_srq`).
///
/// # Safety
/// Valid pointer.
#[no_mangle]
pub unsafe extern "C" fn srnic_create_srq(pd: *mut SrnicPd, max_wr: u32) -> *mut SrnicSrq {
    let Some(p) = (unsafe { pd.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        boxed(p.pd.create_srq(max_wr).ok().map(|srq| SrnicSrq { srq }))
    })
}

/// # Safety
/// `srq` from `srnic_create_srq`, not used after it returned 0.
#[no_mangle]
pub unsafe extern "C" fn srnic_destroy_srq(srq: *mut SrnicSrq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // like ibv_destroy_srq: EBUSY (QPs still use it) leaves it intact
    let r = guard(libc::EIO, || match unsafe { &*srq }.srq.destroy_by_ref() {
        Ok(()) => 0,
        Err(_) => libc::EBUSY,
    });
    if r == 0 {
        drop(unsafe { Box::from_raw(srq) });
    }
    r
}

/// `ibv_modify_srq(IBV_SRQ_LIMIT)`: arms the SRQ limit; once fewer than
/// `srq_limit` receives are left, SRNIC_EVENT_SRQ_LIMIT_REACHED comes
/// (`srnic_get_async_event`) and the limit disarms; 0 disarms. 0, EINVAL
/// (null SRQ, or a limit above the SRQ's size), EIO.
///
/// # Safety
/// `srq` from `srnic_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn srnic_modify_srq(srq: *mut SrnicSrq, srq_limit: u32) -> c_int {
    let Some(s) = (unsafe { srq.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match s.srq.arm_limit(srq_limit) {
        Ok(()) => 0,
        Err(crate::client::Error::Daemon(_)) => libc::EINVAL,
        Err(_) => libc::EIO,
    })
}

/// `ibv_query_srq`: the SRQ's size and its armed limit (0: not armed, or
/// fired). Either pointer may be NULL. 0, EINVAL (null SRQ), EIO.
///
/// # Safety
/// `srq` from `srnic_create_srq`; `max_wr` and `srq_limit` null or valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_query_srq(
    srq: *mut SrnicSrq,
    max_wr: *mut u32,
    srq_limit: *mut u32,
) -> c_int {
    let Some(s) = (unsafe { srq.as_ref() }) else {
        return libc::EINVAL;
    };
    guard(libc::EIO, || match s.srq.query() {
        Ok((m, l, _)) => {
            if let Some(p) = unsafe { max_wr.as_mut() } {
                *p = m;
            }
            if let Some(p) = unsafe { srq_limit.as_mut() } {
                *p = l;
            }
            0
        }
        Err(_) => libc::EIO,
    })
}

/// The SRQ's number, as `srnic_async_event.srq_num` names it.
///
/// # Safety
/// `srq` from `srnic_create_srq` or NULL (then 0).
#[no_mangle]
pub unsafe extern "C" fn srnic_srq_num(srq: *const SrnicSrq) -> u32 {
    unsafe { srq.as_ref() }.map_or(0, |s| s.srq.handle)
}

/// The CQ's handle number, as `srnic_async_event.cq_num` names it.
///
/// # Safety
/// `cq` from `srnic_create_cq` or NULL (then 0).
#[no_mangle]
pub unsafe extern "C" fn srnic_cq_num(cq: *const SrnicCq) -> u32 {
    unsafe { cq.as_ref() }.map_or(0, |c| c.cq.handle)
}

/// `struct ibv_async_event` with the object's number instead of a pointer.
#[repr(C)]
pub struct SrnicAsyncEvent {
    /// rdma-core `enum ibv_event_type` numbering (SRNIC_EVENT_*).
    pub event_type: u32,
    /// QP events: the QP's number; otherwise 0.
    pub qp_num: u32,
    /// SRNIC_EVENT_CQ_ERR: the CQ's handle number; otherwise 0.
    pub cq_num: u32,
    /// SRNIC_EVENT_SRQ_LIMIT_REACHED: the SRQ's number; otherwise 0.
    pub srq_num: u32,
    /// SRNIC_EVENT_PORT_ACTIVE / SRNIC_EVENT_PORT_ERR: the port (1);
    /// otherwise 0.
    pub port_num: u32,
}

/// `ibv_get_async_event` (events need no ack): waits up to `timeout_ms`
/// (< 0: for ever) for the next asynchronous event on one of this
/// context's objects, or of the port (every context hears those), and
/// fills `ev`. 1 an event, 0 none in time, -EINVAL
/// for null arguments, -EIO when the daemon cannot be asked.
///
/// # Safety
/// `ctx` from `srnic_open_device`; `ev` valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_get_async_event(
    ctx: *mut SrnicContext,
    ev: *mut SrnicAsyncEvent,
    timeout_ms: c_int,
) -> c_int {
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
/// `ctx` from `srnic_open_device`.
#[no_mangle]
pub unsafe extern "C" fn srnic_async_event_fd(ctx: *mut SrnicContext) -> c_int {
    let Some(c) = (unsafe { ctx.as_ref() }) else {
        return -1;
    };
    guard(-1, || c.ctx.async_event_fd().unwrap_or(-1))
}

/// Takes back a handle the C side gives up and destroys its object:
/// EINVAL for a null handle, `on_err` when the daemon refuses, EIO when
/// the destructor panics.
///
/// # Safety
/// `h` is null or came from `Box::into_raw` and is not used afterwards.
unsafe fn release<T, E>(
    h: *mut T,
    on_err: c_int,
    destroy: impl FnOnce(T) -> Result<(), E>,
) -> c_int {
    if h.is_null() {
        return libc::EINVAL;
    }
    let b = unsafe { Box::from_raw(h) };
    guard(libc::EIO, || match destroy(*b) {
        Ok(()) => 0,
        Err(_) => on_err,
    })
}

unsafe fn sges<'a>(list: *const SrnicSge, n: u32) -> Option<&'a [SrnicSge]> {
    if n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return None;
    }
    if n == 0 {
        return Some(&[]);
    }
    Some(unsafe { std::slice::from_raw_parts(list, n as usize) })
}

/// Writes the WQE into the send ring and rings the doorbell: no syscall.
/// ENOMEM: the ring is full; EINVAL: more than 8 SGEs.
///
/// # Safety
/// `wr` and its `sg_list` are valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_send(qp: *mut SrnicQp, wr: *const SrnicSendWr) -> c_int {
    let (Some(q), Some(w)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    let Some(raw) = (unsafe { raw_send(w) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the daemon validates the WQE; bad ones complete with errors.
    match unsafe { q.qp.post_raw_send(&raw) } {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

/// A UD send (SEND or SEND_WITH_IMM) to `remote_qpn` at `ah` with
/// `remote_qkey`. ENOMEM: the ring is full; EINVAL: bad arguments.
///
/// # Safety
/// `wr` and its `sg_list` are valid; `ah` from `srnic_create_ah`.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_send_ud(
    qp: *mut SrnicQp,
    wr: *const SrnicSendWr,
    ah: *const SrnicAh,
    remote_qpn: u32,
    remote_qkey: u32,
) -> c_int {
    let (Some(q), Some(w), Some(a)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }, unsafe {
        ah.as_ref()
    }) else {
        return libc::EINVAL;
    };
    let Some(mut raw) = (unsafe { raw_send(w) }) else {
        return libc::EINVAL;
    };
    raw.ah = a.ah.handle;
    raw.remote_qpn = remote_qpn & 0x00ff_ffff;
    raw.remote_qkey = remote_qkey;
    // SAFETY: the daemon validates the WQE; bad ones complete with errors.
    match unsafe { q.qp.post_raw_send(&raw) } {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

unsafe fn raw_send(w: &SrnicSendWr) -> Option<ring::WqeRaw> {
    let s = unsafe { sges(w.sg_list, w.num_sge) }?;
    let mut raw = ring::WqeRaw {
        wr_id: w.wr_id,
        opcode: w.opcode.min(255) as u8,
        flags: w.send_flags.min(255) as u8,
        num_sge: s.len() as u8,
        imm: w.imm_data,
        remote_addr: w.remote_addr,
        rkey: w.rkey,
        compare_add: w.compare_add,
        swap: w.swap,
        ..Default::default()
    };
    for (d, s) in raw.sge.iter_mut().zip(s) {
        *d = ring::SgeRaw {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Some(raw)
}

/// # Safety
/// `wr` and its `sg_list` are valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_recv(qp: *mut SrnicQp, wr: *const SrnicRecvWr) -> c_int {
    let (Some(q), Some(w)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    let Some(r) = (unsafe { recv_wr(w) }) else {
        return libc::EINVAL;
    };
    match q.qp.post_recv(&r) {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

/// `ibv_post_srq_recv`: writes the shared ring, no syscall.
///
/// # Safety
/// `wr` and its `sg_list` are valid.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_srq_recv(srq: *mut SrnicSrq, wr: *const SrnicRecvWr) -> c_int {
    let (Some(q), Some(w)) = (unsafe { srq.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    let Some(r) = (unsafe { recv_wr(w) }) else {
        return libc::EINVAL;
    };
    match q.srq.post_recv(&r) {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

unsafe fn recv_wr(w: &SrnicRecvWr) -> Option<RecvWr> {
    let s = unsafe { sges(w.sg_list, w.num_sge) }?;
    let list: Vec<Sge> = s
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect();
    Some(RecvWr {
        wr_id: w.wr_id,
        sgl: Sgl::new(&list)?,
    })
}
