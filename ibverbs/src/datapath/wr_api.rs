//! The `ibv_wr_*` work-request API of QPs created with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: `ibv_wr_start` opens a batch, each
//! builder (`ibv_wr_send`, `ibv_wr_rdma_write`, …) begins a work request
//! from `qpx->wr_id` / `qpx->wr_flags`, the setters (`ibv_wr_set_sge`,
//! `ibv_wr_set_inline_data`, `ibv_wr_set_ud_addr`, …) give it its data and
//! address, and `ibv_wr_complete` puts the batch on the send ring —
//! nothing reaches the ring before, and `ibv_wr_abort` drops the batch.
//!
//! Each finished work request is an `ibv_send_wr` turned into a ring WQE
//! by `send_wqe`, the encoder `ibv_post_send` uses. The first
//! error of a batch (as rxe answers: ENOSPC for a full send queue, more
//! SGEs than the QP has or inline data past its limit; EOPNOTSUPP for an
//! operation the QP was not created with; EINVAL for a setter with no work
//! request, a bad pointer, or a `wr_complete` without `wr_start`) makes the
//! rest of the batch a no-op and is what `ibv_wr_complete` returns, with
//! nothing posted. Every slot of the `ibv_qp_ex` is filled, so calling an
//! operation the QP cannot do is an error, never a call through NULL.

use super::send_wqe;
use crate::abi::*;
use crate::objects::{qp_of, Qp, QpInner};
use crate::{complain, errno_of};
use libc::{c_int, c_void};
use nic::verbs::MAX_SGE;
use softrnic::ring::WqeRaw;

const NO_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// One work request being built: what its builder said, then its setters.
#[derive(Clone, Copy)]
struct Pending {
    wr_id: u64,
    opcode: c_int,
    flags: u32,
    /// Immediate data (network order) or the R_Key to invalidate.
    imm: u32,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    /// UD: (AH, remote QPN, remote Q_Key).
    ud: (*mut ibv_ah, u32, u32),
    /// BIND_MW: the window, its new R_Key and the bind.
    mw: (*mut ibv_mw, u32),
    bind: Option<ibv_mw_bind_info>,
    sges: [ibv_sge; MAX_SGE],
    num_sge: usize,
    /// The data was set inline (it waits in [`WrBatch::inline`]).
    inline: bool,
}

/// The batch between `ibv_wr_start` and `ibv_wr_complete` / `_abort`.
#[derive(Default)]
pub struct WrBatch {
    open: bool,
    /// The batch's first error and why (reported by `wr_complete`).
    err: Option<(c_int, &'static str)>,
    cur: Option<Pending>,
    /// Finished work requests, in order.
    wqes: Vec<WqeRaw>,
    /// The current work request's inline data, copied at the setter.
    inline: Vec<u8>,
}

// SAFETY: the raw pointers in a pending work request are the
// application's objects, only handed back to the encoder under the QP's
// lock; nothing here dereferences them from another thread.
unsafe impl Send for WrBatch {}

impl WrBatch {
    /// Between `ibv_wr_start` and `ibv_wr_complete` / `ibv_wr_abort`.
    pub fn is_open(&self) -> bool {
        self.open
    }

    fn reset(&mut self, open: bool) {
        self.open = open;
        self.err = None;
        self.cur = None;
        self.wqes.clear();
        self.inline.clear();
    }
}

type Step = Result<(), (c_int, &'static str)>;

/// Runs `f` on the open, so far error-free batch of `qpx`'s QP; its
/// error becomes the batch's. A call outside a batch does nothing (the
/// `wr_complete` that follows reports it).
///
/// # Safety
/// `qpx` is NULL or the `ibv_qp_ex` of a live QP of this library's.
unsafe fn with_batch(qpx: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut QpInner, &mut WrBatch) -> Step) {
    // SAFETY: a Qp starts with its ibv_qp_ex, which starts with its
    // ibv_qp (the function's contract).
    let Some(q) = (unsafe { qp_of(qpx as *mut ibv_qp) }) else {
        return;
    };
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = std::mem::take(&mut g.batch);
    if b.open && b.err.is_none() {
        if let Err(e) = f(q, &mut g, &mut b) {
            b.err = Some(e);
        }
    }
    g.batch = b;
}

/// Turns the current work request, if any, into a WQE of the batch.
fn finish(g: &mut QpInner, b: &mut WrBatch) -> Step {
    let Some(mut p) = b.cur.take() else {
        return Ok(());
    };
    // SAFETY: ibv_send_wr is integers, pointers and unions of them: all
    // zero is a valid value (NULL lists, no next).
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = p.wr_id;
    wr.opcode = p.opcode;
    wr.send_flags = p.flags & !IBV_SEND_INLINE;
    wr.imm_data = p.imm;
    if p.inline {
        p.sges[0] = ibv_sge {
            addr: b.inline.as_ptr() as u64,
            length: b.inline.len() as u32,
            lkey: 0,
        };
        p.num_sge = 1;
        wr.send_flags |= IBV_SEND_INLINE;
    }
    wr.sg_list = p.sges.as_mut_ptr();
    wr.num_sge = p.num_sge as c_int;
    if g.kind == softrnic::QpKind::Ud {
        wr.wr.ud = wr_ud {
            ah: p.ud.0,
            remote_qpn: p.ud.1,
            remote_qkey: p.ud.2,
        };
    } else if matches!(
        p.opcode,
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    ) {
        wr.wr.atomic = wr_atomic {
            remote_addr: p.remote_addr,
            compare_add: p.compare_add,
            swap: p.swap,
            rkey: p.rkey,
        };
    } else {
        wr.wr.rdma = wr_rdma {
            remote_addr: p.remote_addr,
            rkey: p.rkey,
        };
    }
    if let Some(bind_info) = p.bind {
        wr.bind_mw = wr_bind_mw {
            mw: p.mw.0,
            rkey: p.mw.1,
            bind_info,
        };
    }
    let at = g.posted.wrapping_add(b.wqes.len() as u32);
    // SAFETY: the SGE list and inline data are ours (above); the window,
    // region and AH are the application's, valid as the verbs require.
    let w =
        unsafe { send_wqe(g, &wr, at) }.map_err(|e| (e, "a work request the QP cannot take"))?;
    b.wqes.push(w);
    Ok(())
}

/// A builder: finishes the previous work request and begins one of
/// `opcode` (allowed by `op` among the QP's send operations), which
/// `fill` completes.
///
/// # Safety
/// As [`with_batch`].
unsafe fn build(qpx: *mut ibv_qp_ex, op: u64, opcode: c_int, fill: impl FnOnce(&mut Pending)) {
    // SAFETY: this function's contract is with_batch's.
    unsafe {
        with_batch(qpx, |q, g, b| {
            if q.send_ops & op == 0 {
                return Err((libc::EOPNOTSUPP, "an operation the QP was not created with"));
            }
            finish(g, b)?;
            // as rxe: a builder takes a send queue slot or fails
            if b.wqes.len() as u32 >= g.q.send_room() {
                return Err((libc::ENOSPC, "the send queue is full"));
            }
            let mut p = Pending {
                wr_id: q.ex.wr_id,
                opcode,
                flags: q.ex.wr_flags,
                imm: 0,
                remote_addr: 0,
                rkey: 0,
                compare_add: 0,
                swap: 0,
                ud: (std::ptr::null_mut(), 0, 0),
                mw: (std::ptr::null_mut(), 0),
                bind: None,
                sges: [NO_SGE; MAX_SGE],
                num_sge: 0,
                inline: false,
            };
            fill(&mut p);
            b.cur = Some(p);
            Ok(())
        })
    }
}

/// A setter: changes the current work request (EINVAL without one).
///
/// # Safety
/// As [`with_batch`].
unsafe fn set(qpx: *mut ibv_qp_ex, f: impl FnOnce(&QpInner, &mut Pending, &mut Vec<u8>) -> Step) {
    // SAFETY: this function's contract is with_batch's.
    unsafe {
        with_batch(qpx, |_, g, b| {
            let p = b
                .cur
                .as_mut()
                .ok_or((libc::EINVAL, "a setter with no work request to set"))?;
            f(g, p, &mut b.inline)
        })
    }
}

/// An operation this device does not have (TSO, XRC, ATOMIC WRITE).
///
/// # Safety
/// As [`with_batch`].
unsafe fn refuse(qpx: *mut ibv_qp_ex) {
    // SAFETY: this function's contract is with_batch's.
    unsafe {
        with_batch(qpx, |_, _, _| {
            Err((libc::EOPNOTSUPP, "an operation softrnic does not have"))
        })
    }
}

/// A builder slot: `$name(qpx, args)` begins a work request of `$op`,
/// allowed by `$flag`, whose fields `$fill` sets.
macro_rules! builder {
    ($name:ident($($arg:ident: $t:ty),*) => $flag:expr, $op:expr, |$p:ident| $fill:expr) => {
        unsafe extern "C" fn $name(qpx: *mut ibv_qp_ex, $($arg: $t),*) {
            // SAFETY: the application's ibv_qp_ex (the slot's contract).
            unsafe { build(qpx, $flag, $op, |$p| $fill) }
        }
    };
}

builder!(wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64)
    => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP,
    |p| (p.rkey, p.remote_addr, p.compare_add, p.swap) = (rkey, addr, compare, swap));
builder!(wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64)
    => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD,
    |p| (p.rkey, p.remote_addr, p.compare_add) = (rkey, addr, add));
builder!(wr_local_inv(rkey: u32)
    => IBV_QP_EX_WITH_LOCAL_INV, IBV_WR_LOCAL_INV, |p| p.imm = rkey);
builder!(wr_rdma_read(rkey: u32, addr: u64)
    => IBV_QP_EX_WITH_RDMA_READ, IBV_WR_RDMA_READ, |p| (p.rkey, p.remote_addr) = (rkey, addr));
builder!(wr_rdma_write(rkey: u32, addr: u64)
    => IBV_QP_EX_WITH_RDMA_WRITE, IBV_WR_RDMA_WRITE, |p| (p.rkey, p.remote_addr) = (rkey, addr));
// (the immediate data in network order, as ibv_send_wr carries it)
builder!(wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32)
    => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM,
    |p| (p.rkey, p.remote_addr, p.imm) = (rkey, addr, imm));
builder!(wr_send() => IBV_QP_EX_WITH_SEND, IBV_WR_SEND, |_p| ());
builder!(wr_send_imm(imm: u32)
    => IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM, |p| p.imm = imm);
builder!(wr_send_inv(rkey: u32)
    => IBV_QP_EX_WITH_SEND_WITH_INV, IBV_WR_SEND_WITH_INV, |p| p.imm = rkey);

unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: NULL or the application's bind description.
    let bind = unsafe { info.as_ref() }.copied();
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe {
        build(qpx, IBV_QP_EX_WITH_BIND_MW, IBV_WR_BIND_MW, |p| {
            p.mw = (mw, rkey);
            p.bind = bind;
        })
    };
    if bind.is_none() {
        // SAFETY: as above.
        unsafe {
            with_batch(qpx, |_, _, _| {
                Err((libc::EINVAL, "ibv_wr_bind_mw without a bind"))
            })
        };
    }
}

unsafe extern "C" fn wr_send_tso(qpx: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe { refuse(qpx) }
}

unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, _srqn: u32) {
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe { refuse(qpx) }
}

unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    _rkey: u32,
    _addr: u64,
    _wr: *const c_void,
) {
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe { refuse(qpx) }
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe {
        set(qpx, |_, p, _| {
            p.ud = (ah, qpn, qkey);
            Ok(())
        })
    }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe {
        set(qpx, |_, p, _| {
            // as rxe: a zero-length SGE is no data at all
            p.num_sge = (length != 0) as usize;
            p.sges[0] = ibv_sge { addr, length, lkey };
            p.inline = false;
            Ok(())
        })
    }
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let copy = |g: &QpInner, p: &mut Pending, _: &mut Vec<u8>| {
        if n > g.cap.max_send_sge as usize || n > MAX_SGE {
            return Err((libc::ENOSPC, "more SGEs than the QP's max_send_sge"));
        }
        if n > 0 && list.is_null() {
            return Err((libc::EINVAL, "a NULL SGE list"));
        }
        for (i, s) in p.sges.iter_mut().enumerate().take(n) {
            // SAFETY: the caller's list of n entries (the slot's contract).
            *s = unsafe { *list.add(i) };
        }
        p.num_sge = n;
        p.inline = false;
        Ok(())
    };
    // SAFETY: the application's ibv_qp_ex (the slot's contract).
    unsafe { set(qpx, copy) }
}

/// Copies the buffers into the work request's inline data (IBA 10.8.2:
/// inline data is taken when posted; the buffers are the caller's again
/// when the setter returns).
///
/// # Safety
/// `qpx` as [`with_batch`]; each buffer is NULL or `len` readable bytes.
unsafe fn set_inline(qpx: *mut ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    let copy = |g: &QpInner, p: &mut Pending, data: &mut Vec<u8>| {
        let total = bufs.iter().try_fold(0usize, |t, (_, l)| t.checked_add(*l));
        match total {
            Some(t) if t <= g.cap.max_inline_data as usize => {}
            _ => return Err((libc::ENOSPC, "inline data past the QP's max_inline_data")),
        }
        if bufs.iter().any(|(a, l)| a.is_null() && *l > 0) {
            return Err((libc::EINVAL, "a NULL inline buffer"));
        }
        data.clear();
        for (a, l) in bufs.iter().filter(|(_, l)| *l > 0) {
            // SAFETY: the caller's buffer of l bytes (the contract).
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(*a, *l) });
        }
        p.inline = true;
        Ok(())
    };
    // SAFETY: the application's ibv_qp_ex (the caller's contract).
    unsafe { set(qpx, copy) }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: the application's buffer and ibv_qp_ex (the slot's contract).
    unsafe { set_inline(qpx, &[(addr as *const u8, length)]) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    if n > 0 && list.is_null() {
        // SAFETY: the application's ibv_qp_ex (the slot's contract).
        unsafe {
            set(qpx, |_, _, _| {
                Err((libc::EINVAL, "a NULL inline buffer list"))
            })
        };
        return;
    }
    let bufs: Vec<(*const u8, usize)> = (0..n)
        .map(|i| {
            // SAFETY: the caller's list of n entries.
            let b = unsafe { *list.add(i) };
            (b.addr as *const u8, b.length)
        })
        .collect();
    // SAFETY: the application's buffers and ibv_qp_ex (the slot's contract).
    unsafe { set_inline(qpx, &bufs) }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: a Qp starts with its ibv_qp_ex (the slot's contract).
    let Some(q) = (unsafe { qp_of(qpx as *mut ibv_qp) }) else {
        return;
    };
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    let nested = g.batch.open;
    g.batch.reset(true);
    if nested {
        // rxe would wait on its own lock here: the batch fails instead
        g.batch.err = Some((libc::EINVAL, "ibv_wr_start inside an open batch"));
    }
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: a Qp starts with its ibv_qp_ex (the slot's contract).
    let Some(q) = (unsafe { qp_of(qpx as *mut ibv_qp) }) else {
        return libc::EINVAL;
    };
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = std::mem::take(&mut g.batch);
    let r = post_batch(q, &mut g, &mut b);
    b.reset(false);
    g.batch = b;
    match r {
        Ok(()) => 0,
        Err((e, why)) => {
            complain(
                "ibv_wr_complete",
                format!("{why} ({})", std::io::Error::from_raw_os_error(e)),
            );
            e
        }
    }
}

/// Posts the batch's WQEs on the send ring (nothing, on its error).
fn post_batch(q: &Qp, g: &mut QpInner, b: &mut WrBatch) -> Step {
    if !b.open {
        return Err((libc::EINVAL, "ibv_wr_complete without ibv_wr_start"));
    }
    if let Some(e) = b.err {
        return Err(e);
    }
    finish(g, b)?;
    // IBA 10.8.1: work requests posted to the send queue of a QP in
    // Reset, Init or RTR are an immediate error
    if matches!(
        q.ex.qp_base.state,
        IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR
    ) {
        return Err((libc::EINVAL, "the QP is not ready to send"));
    }
    for w in &b.wqes {
        // SAFETY: WQEs built by the encoder; the daemon validates them again.
        if let Err(e) = unsafe { g.q.post_raw_send(w) } {
            return Err((errno_of(&e), "the send queue refused a work request"));
        }
        g.sent_one(w);
    }
    Ok(())
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: a Qp starts with its ibv_qp_ex (the slot's contract).
    if let Some(q) = unsafe { qp_of(qpx as *mut ibv_qp) } {
        q.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .batch
            .reset(false);
    }
}

/// Fills every slot of an extended QP's `ibv_qp_ex`.
pub fn install(ex: &mut ibv_qp_ex) {
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_atomic_write = Some(wr_atomic_write);
}
