//! The data path the inline `ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` call through
//! the context's ops table: work requests become ring WQEs (write the
//! slot, release-store the producer index) and CQEs become `ibv_wc`s —
//! shared memory only, no system call (a parked engine's bell aside).
//! [`wr_api`] is the `ibv_wr_*` builder of extended QPs, [`poll_ex`] the
//! `ibv_start_poll` family of extended CQs: both go through the encoding
//! and conversion here.

pub mod poll_ex;
pub mod wr_api;

use crate::abi::*;
use crate::objects::{cq_of, qp_of, srq_of, Ah, Posted, SharedWrs};
use libc::c_int;
use nic::verbs::{WcOpcode, WcStatus, MAX_SGE};
use softrnic::ring::{self, opcode, CqeRaw, SgeRaw, WqeRaw};
use softrnic::QpKind;

/// rdma-core's `enum ibv_wc_status` number of a completion status.
pub(crate) fn wc_status(s: WcStatus) -> c_int {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocQpOpErr => 2,
        WcStatus::LocProtErr => 4,
        WcStatus::WrFlushErr => 5,
        WcStatus::MwBindErr => 6,
        WcStatus::BadRespErr => 7,
        WcStatus::LocAccessErr => 8,
        WcStatus::RemInvReqErr => 9,
        WcStatus::RemAccessErr => 10,
        WcStatus::RemOpErr => 11,
        WcStatus::RetryExcErr => 12,
        WcStatus::RnrRetryExcErr => 13,
        WcStatus::GeneralErr => 21,
    }
}

fn wc_opcode(o: WcOpcode) -> c_int {
    match o {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

/// `ibv_wc.sl` of a UD receive over RoCE: the frame's L3 header type.
/// RoCEv2 Annex A17.4.5.1 has a UD completion say whether the frame was
/// IPv4 or IPv6; `ibv_wc` has no field of its own for that, and RoCE has no
/// SL on the wire, so `sl` carries it as ConnectX devices report it: bit 3
/// set for a frame with a UDP header (RoCEv2), bits 2:0 the L3 header
/// (1 IPv6, 2 IPv4). Other completions have SL 0.
pub(crate) fn roce_wc_sl(grh: bool, ipv4: bool) -> u8 {
    const UDP: u8 = 0x8;
    const IPV6: u8 = 0x1;
    const IPV4: u8 = 0x2;
    match (grh, ipv4) {
        (false, _) => 0,
        (true, false) => UDP | IPV6,
        (true, true) => UDP | IPV4,
    }
}

/// One CQE as the application's `ibv_wc`.
pub fn to_wc(c: &CqeRaw) -> ibv_wc {
    let w = ring::decode_cqe(c);
    let mut flags = 0;
    let mut imm = 0;
    if let Some(i) = w.imm {
        flags |= IBV_WC_WITH_IMM;
        // the WQE and CQE carry the value; ibv_wc holds network order
        imm = i.to_be();
    }
    if let Some(r) = w.invalidated_rkey {
        flags |= IBV_WC_WITH_INV;
        imm = r;
    }
    if w.grh {
        flags |= IBV_WC_GRH;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        sl: roce_wc_sl(w.grh, w.grh_ipv4),
        dlid_path_bits: 0,
    }
}

/// `ops.poll_cq`: up to `n` completions; their count, or -1 (bad CQ).
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the application's CQ.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return -1;
    };
    if n <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -1;
    }
    let mut g = c.inner.lock().unwrap_or_else(|e| e.into_inner());
    // read before the ring: once the daemon is gone, the ring holds all
    // it will ever write
    let dead = g.device_dead();
    let mut done = 0usize;
    g.poll_each(n as usize, |cqe| {
        let w = to_wc(cqe);
        c.retire(&w);
        // SAFETY: the caller's array of n entries; poll_each hands at most n.
        unsafe { *wc.add(done) = w };
        done += 1;
    });
    if dead {
        // a failed device: the WRs still outstanding complete as flushed,
        // then polling is an error
        let mut at = done;
        done += c.flush(n as usize - done, |w| {
            // SAFETY: as above; flush hands at most n - done.
            unsafe { *wc.add(at) = w };
            at += 1;
        });
        if done == 0 {
            return -1;
        }
    }
    done as c_int
}

/// `ops.req_notify_cq`: one event on the CQ's channel for the next
/// completion (solicited only: the next solicited or unsuccessful one,
/// IBA 11.4.2.2).
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the application's CQ.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return libc::EINVAL;
    };
    if c.inner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .device_dead()
    {
        return libc::EIO;
    }
    if c.channel.is_null() {
        // no channel: no event to deliver (as with a kernel device)
        return 0;
    }
    c.armed.store(true, std::sync::atomic::Ordering::Release);
    c.inner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .arm(solicited_only != 0);
    0
}

/// Copies the SGE list into the WQE (EINVAL: a bad count or NULL list).
///
/// # Safety
/// When `n` is in 1..=MAX_SGE and `list` is not NULL, `list` holds `n`
/// readable entries.
unsafe fn sges(w: &mut WqeRaw, list: *mut ibv_sge, n: c_int) -> Result<(), c_int> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(libc::EINVAL);
    }
    w.num_sge = n as u8;
    for i in 0..n as usize {
        // SAFETY: the caller's list of n entries.
        let s = unsafe { *list.add(i) };
        w.sge[i] = SgeRaw {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(())
}

/// The ring WQE's flags for `IBV_SEND_*` flags `f` on a QP whose every
/// WR is signaled when `sig_all` (`sq_sig_all`).
fn wqe_flags(f: u32, sig_all: bool) -> u8 {
    let on = |bit: u32, flag: u8| if f & bit != 0 { flag } else { 0 };
    on(IBV_SEND_SIGNALED, ring::flags::SIGNALED)
        | if sig_all { ring::flags::SIGNALED } else { 0 }
        | on(IBV_SEND_FENCE, ring::flags::FENCE)
        | on(IBV_SEND_SOLICITED, ring::flags::SOLICITED)
}

/// Fills a BIND_MW WQE: window `mw` gets R_Key `new_rkey` (its tag, the
/// low byte, is what changes) over `info`'s range of `info.mr`.
///
/// # Safety
/// `info.mr` is NULL or a live region of this library's.
unsafe fn bind_wqe(
    w: &mut WqeRaw,
    mw: &crate::objects::Mw,
    new_rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<(), c_int> {
    let lkey = if info.mr.is_null() {
        // only an unbind (length 0) names no region
        if info.length != 0 || info.addr != 0 {
            return Err(libc::EINVAL);
        }
        0
    } else {
        // SAFETY: the application's region.
        unsafe { (*info.mr).lkey }
    };
    w.opcode = opcode::BIND_MW;
    w.rkey = mw.ibv.handle << 8;
    w.imm = new_rkey;
    w.remote_addr = info.addr;
    w.compare_add = info.length;
    w.swap = ((lkey as u64) << 32) | info.mw_access_flags as u64;
    w.num_sge = 0;
    Ok(())
}

/// `ops.bind_mw` (the inline `ibv_bind_mw`, type 1 windows): posts the
/// bind as a BIND_MW work request on `qp` with the window's next R_Key
/// (`ibv_inc_rkey`), which `mw->rkey` holds from now on, as rdma-core's
/// providers do. The completion (IBV_WC_BIND_MW) reports the outcome.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL).
pub unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, b: *mut ibv_mw_bind) -> c_int {
    // SAFETY: the application's QP and window.
    let (Some(q), Some(m)) = (unsafe { qp_of(qp) }, unsafe { crate::objects::mw_of(mw) }) else {
        return libc::EINVAL;
    };
    if b.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's bind description.
    let b = unsafe { &*b };
    if matches!(
        q.ex.qp_base.state,
        IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR
    ) {
        return libc::EINVAL;
    }
    // o10-36.2.2: a type 1 window is never zero based
    if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED as u32 != 0 {
        return libc::EINVAL;
    }
    let rkey = m.ibv.rkey;
    let new_rkey = (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff);
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    if g.kind == QpKind::Ud {
        return libc::EINVAL;
    }
    let mut w = WqeRaw {
        wr_id: b.wr_id,
        ..Default::default()
    };
    // SAFETY: the bind's region is the application's (or NULL), per this
    // function's contract.
    if let Err(e) = unsafe { bind_wqe(&mut w, m, new_rkey, &b.bind_info) } {
        return e;
    }
    w.flags = wqe_flags(b.send_flags, g.sq_sig_all);
    // SAFETY: a WQE built here; the daemon validates it again.
    if let Err(e) = unsafe { g.q.post_raw_send(&w) } {
        return crate::errno_of(&e);
    }
    g.sent_one(&w);
    // SAFETY: the application's window; it reads the new key from here.
    unsafe { (*mw).rkey = new_rkey };
    0
}

/// Copies an inline send's data into the QP's inline slot of send ring
/// index `at` (IBA 10.8.2, inline data: the data is taken at post time,
/// the buffer is the caller's again when the post returns; lkeys are not
/// checked): the one SGE that sends it from there.
///
/// # Safety
/// `wr`'s SGE list and the memory it names are the application's, valid
/// as `ibv_post_send` requires.
unsafe fn inline_sge(
    q: &crate::objects::QpInner,
    wr: &ibv_send_wr,
    at: u32,
) -> Result<SgeRaw, c_int> {
    let Some((buf, mr, slots)) = &q.inline else {
        return Err(libc::EINVAL);
    };
    if wr.num_sge < 0 || wr.num_sge as usize > MAX_SGE || (wr.num_sge > 0 && wr.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let slot = (at % slots) as usize * q.cap.max_inline_data as usize;
    let mut len = 0usize;
    for i in 0..wr.num_sge as usize {
        // SAFETY: the caller's list of num_sge entries.
        let s = unsafe { *wr.sg_list.add(i) };
        let l = s.length as usize;
        if len + l > q.cap.max_inline_data as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: inline data is read from the application's address as
        // the verb requires; the slot lies in our buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(s.addr as *const u8, buf.as_ptr().add(slot + len), l)
        };
        len += l;
    }
    Ok(SgeRaw {
        addr: buf.addr() + slot as u64,
        length: len as u32,
        lkey: mr.lkey,
    })
}

/// Builds the ring WQE of one send work request that takes the send
/// ring's index `at` (its inline data goes to that index's slot).
///
/// # Safety
/// `wr`'s pointers (SGE list, inline data, window, bound region) are the
/// application's and valid as `ibv_post_send` requires.
unsafe fn send_wqe(
    q: &mut crate::objects::QpInner,
    wr: &ibv_send_wr,
    at: u32,
) -> Result<WqeRaw, c_int> {
    let mut w = WqeRaw {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    // SAFETY: the union member the opcode names.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    let ud = q.kind == QpKind::Ud;
    w.opcode = match wr.opcode {
        IBV_WR_SEND => opcode::SEND,
        IBV_WR_SEND_WITH_IMM => opcode::SEND_WITH_IMM,
        IBV_WR_RDMA_WRITE if !ud => opcode::RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM if !ud => opcode::RDMA_WRITE_WITH_IMM,
        IBV_WR_RDMA_READ if q.kind == QpKind::Rc => opcode::RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP if q.kind == QpKind::Rc => opcode::ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD if q.kind == QpKind::Rc => opcode::ATOMIC_FETCH_AND_ADD,
        IBV_WR_SEND_WITH_INV if q.kind == QpKind::Rc => opcode::SEND_WITH_INV,
        // IBA 10.6.7: memory window operations on connected QPs
        IBV_WR_BIND_MW if !ud => opcode::BIND_MW,
        IBV_WR_LOCAL_INV if !ud => opcode::LOCAL_INV,
        // an opcode the QP's transport does not have (IBA Table 46)
        _ => return Err(libc::EINVAL),
    };
    match w.opcode {
        opcode::SEND_WITH_IMM | opcode::RDMA_WRITE_WITH_IMM => w.imm = u32::from_be(wr.imm_data),
        // `invalidate_rkey` (host order, in the union with imm_data)
        opcode::SEND_WITH_INV | opcode::LOCAL_INV => w.imm = wr.imm_data,
        opcode::BIND_MW => {
            let b = wr.bind_mw;
            // SAFETY: the application's window (or NULL).
            let mw = unsafe { crate::objects::mw_of(b.mw) }.ok_or(libc::EINVAL)?;
            // SAFETY: the WR's region is the application's (the contract).
            unsafe { bind_wqe(&mut w, mw, b.rkey, &b.bind_info) }?;
        }
        _ => {}
    }
    match w.opcode {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_WITH_IMM | opcode::RDMA_READ => {
            w.remote_addr = rdma.remote_addr;
            w.rkey = rdma.rkey;
        }
        opcode::ATOMIC_CMP_AND_SWP | opcode::ATOMIC_FETCH_AND_ADD => {
            w.remote_addr = atomic.remote_addr;
            w.rkey = atomic.rkey;
            w.compare_add = atomic.compare_add;
            w.swap = atomic.swap;
        }
        _ => {}
    }
    let f = wr.send_flags;
    w.flags = wqe_flags(f, q.sq_sig_all);
    if matches!(w.opcode, opcode::BIND_MW | opcode::LOCAL_INV) {
        // local operations carry no data
        return Ok(w);
    }
    if f & IBV_SEND_INLINE != 0
        && w.opcode != opcode::RDMA_READ
        && !matches!(
            w.opcode,
            opcode::ATOMIC_CMP_AND_SWP | opcode::ATOMIC_FETCH_AND_ADD
        )
    {
        w.num_sge = 1;
        // SAFETY: the WR's SGE list is the application's (the contract).
        w.sge[0] = unsafe { inline_sge(q, wr, at) }?;
    } else {
        // SAFETY: the WR's SGE list is the application's (the contract).
        unsafe { sges(&mut w, wr.sg_list, wr.num_sge) }?;
    }
    if ud {
        // SAFETY: the union member for UD.
        let u = unsafe { wr.wr.ud };
        if u.ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the application's AH.
        let ah = unsafe { &*(u.ah as *const Ah) };
        w.ah = ah.inner.handle;
        w.remote_qpn = u.remote_qpn & 0xff_ffff;
        // IBA 10.2.5 / C10-15: a Q_Key with its high bit set means "use
        // the QP's own Q_Key".
        w.remote_qkey = if u.remote_qkey & 0x8000_0000 != 0 {
            q.attr.qkey
        } else {
            u.remote_qkey
        };
    }
    Ok(w)
}

/// `ops.post_send`: each WR of the chain becomes a WQE; on the first that
/// cannot (bad opcode or SGE count, inline too long, send queue full) it
/// stops, names it in `*bad_wr` and returns the errno.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
    let fail = |w: *mut ibv_send_wr, e: c_int| unsafe { fail_at(bad_wr, w, e) };
    // SAFETY: the application's QP.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return fail(wr, libc::EINVAL);
    };
    // IBA 10.8.1: work requests posted to the send queue of a QP
    // in Reset, Init or RTR are an immediate error
    if matches!(
        q.ex.qp_base.state,
        IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR
    ) {
        return fail(wr, libc::EINVAL);
    }
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    if g.batch.is_open() {
        // rxe would wait on the lock its ibv_wr_start holds
        crate::complain("ibv_post_send", "inside an ibv_wr_start batch");
        return fail(wr, libc::EINVAL);
    }
    while !wr.is_null() {
        // SAFETY: the caller's WR chain.
        let r = unsafe { &*wr };
        let at = g.posted;
        // SAFETY: a WR of the caller's chain, valid as the verb requires.
        let w = match unsafe { send_wqe(&mut g, r, at) } {
            Ok(w) => w,
            Err(e) => return fail(wr, e),
        };
        // SAFETY: a WQE built from the WR; the daemon validates it again.
        if let Err(e) = unsafe { g.q.post_raw_send(&w) } {
            return fail(wr, crate::errno_of(&e));
        }
        g.sent_one(&w);
        wr = r.next;
    }
    0
}

/// Records a receive WQE the ring took, for a flush if the device fails.
fn received_one(wrs: &SharedWrs, w: &WqeRaw) {
    wrs.lock()
        .unwrap_or_else(|e| e.into_inner())
        .posted(Posted {
            wr_id: w.wr_id,
            opcode: IBV_WC_RECV,
            signaled: true,
        });
}

/// The `enum ibv_wc_opcode` a send WQE of ring opcode `op` completes with.
fn send_wc_opcode(op: u8) -> c_int {
    match op {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        opcode::RDMA_READ => IBV_WC_RDMA_READ,
        opcode::ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
        opcode::ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        opcode::BIND_MW => IBV_WC_BIND_MW,
        opcode::LOCAL_INV => IBV_WC_LOCAL_INV,
        _ => IBV_WC_SEND,
    }
}

impl crate::objects::QpInner {
    /// Counts a send WQE the ring took (the slot of the next inline copy)
    /// and records it for a flush if the device fails.
    fn sent_one(&mut self, w: &WqeRaw) {
        self.posted = self.posted.wrapping_add(1);
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .posted(Posted {
                wr_id: w.wr_id,
                opcode: send_wc_opcode(w.opcode),
                signaled: w.flags & ring::flags::SIGNALED != 0,
            });
    }
}

/// Builds the ring WQE of one receive work request.
///
/// # Safety
/// `wr.sg_list` holds `wr.num_sge` readable entries (or is NULL).
unsafe fn recv_wqe(wr: &ibv_recv_wr) -> Result<WqeRaw, c_int> {
    let mut w = WqeRaw {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    // SAFETY: the contract.
    unsafe { sges(&mut w, wr.sg_list, wr.num_sge) }?;
    Ok(w)
}

/// Names the failing WR in `*bad_wr` (if given) and returns `e`.
///
/// # Safety
/// `bad_wr` is NULL or valid for a write.
unsafe fn fail_at<T>(bad_wr: *mut *mut T, w: *mut T, e: c_int) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *bad_wr = w };
    }
    e
}

/// Posts a chain of receive WRs with `post`; stops at the first that
/// fails, naming it in `*bad_wr`.
///
/// # Safety
/// `wr` is NULL or a valid chain of the caller's.
unsafe fn post_recv_chain(
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(&WqeRaw) -> softrnic::client::Result<()>,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: the caller's WR chain.
        let r = unsafe { &*wr };
        // SAFETY: a WR of the caller's chain, valid as the verb requires.
        let w = match unsafe { recv_wqe(r) } {
            Ok(w) => w,
            // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
            Err(e) => return unsafe { fail_at(bad_wr, wr, e) },
        };
        if let Err(e) = post(&w) {
            // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
            return unsafe { fail_at(bad_wr, wr, crate::errno_of(&e)) };
        }
        wr = r.next;
    }
    0
}

/// `ops.post_recv`.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the application's QP.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
        return unsafe { fail_at(bad_wr, wr, libc::EINVAL) };
    };
    // IBA 10.2.9.5: a QP on an SRQ has no receive queue of its own;
    // IBA 10.8.1: receives posted to a QP in Reset are an immediate error
    if !q.ex.qp_base.srq.is_null() || q.ex.qp_base.state == IBV_QPS_RESET {
        // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
        return unsafe { fail_at(bad_wr, wr, libc::EINVAL) };
    }
    let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
    let g = &mut *g;
    let room = g.cap.max_recv_wr as usize;
    // SAFETY: the caller's chain.
    unsafe {
        post_recv_chain(wr, bad_wr, |w| {
            // a full receive queue: max_recv_wr receives posted whose
            // completions the program has not polled (rdma-core's
            // providers and rxe answer ENOMEM)
            let held = |r: &SharedWrs| r.lock().unwrap_or_else(|e| e.into_inner()).len();
            if g.recvd.as_ref().is_some_and(|r| held(r) >= room) {
                return Err(softrnic::Error::QueueFull);
            }
            g.q.post_raw_recv(w)?;
            if let Some(r) = &g.recvd {
                received_one(r, w);
            }
            Ok(())
        })
    }
}

/// `ops.post_srq_recv`.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the application's SRQ.
    let Some(s) = (unsafe { srq_of(srq) }) else {
        // SAFETY: `bad_wr` is NULL or the caller's out-pointer (the contract).
        return unsafe { fail_at(bad_wr, wr, libc::EINVAL) };
    };
    let mut g = s.inner.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the caller's chain.
    unsafe {
        post_recv_chain(wr, bad_wr, |w| {
            g.post_raw_recv(w)?;
            received_one(&s.wrs, w);
            Ok(())
        })
    }
}
