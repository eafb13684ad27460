//! Polling an extended CQ (`ibv_create_cq_ex`): `ibv_start_poll` and
//! `ibv_next_poll` each take the next completion off the shared ring (no
//! system call) into the CQ's current completion, whose status and id
//! they put in the `ibv_cq_ex` and whose other fields the
//! `ibv_wc_read_*` accessors return; `ibv_end_poll` has nothing left to
//! release. ENOENT (returned, and in errno) when the ring is empty, as
//! rxe answers; on a failed device (its daemon gone) the outstanding work
//! requests then complete flushed, one a call, as with `ibv_poll_cq`, and
//! after them EIO.

use super::to_wc;
use crate::abi::*;
use crate::objects::cq_of;
use libc::c_int;

/// The `wc_flags` an extended CQ can honour: every field of an `ibv_wc`
/// (`IBV_WC_STANDARD_FLAGS`, as rxe); no timestamps, VLAN, flow tag or tag
/// matching.
pub const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS;

/// The next completion as the current one; 0, or ENOENT.
///
/// # Safety
/// `cq` is NULL or the `ibv_cq_ex` of a live CQ of this library's.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: a Cq starts with its ibv_cq_ex, which starts with the
    // ibv_cq's fields (the function's contract).
    let Some(c) = (unsafe { cq_of(cq as *mut ibv_cq) }) else {
        return libc::EINVAL;
    };
    let mut wc = None;
    let mut g = c.inner.lock().unwrap_or_else(|e| e.into_inner());
    // read before the ring: once the daemon is gone, the ring holds all
    // it will ever write, and then the outstanding WRs complete flushed
    let dead = g.device_dead();
    g.poll_each(1, |e| wc = Some(to_wc(e)));
    match &wc {
        Some(w) => c.retire(w),
        None if dead => {
            c.flush(1, |w| wc = Some(w));
        }
        None => {}
    }
    drop(g);
    let Some(wc) = wc else {
        // as ibv_poll_cq: an empty CQ of a failed device is an error
        let e = if dead { libc::EIO } else { libc::ENOENT };
        crate::set_errno(e);
        return e;
    };
    *c.cur.lock().unwrap_or_else(|e| e.into_inner()) = wc;
    // SAFETY: the application's ibv_cq_ex; these two fields are where
    // the header's inline code reads the current completion's.
    unsafe {
        (*cq).status = wc.status;
        (*cq).wr_id = wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the application's CQ (the slot's contract).
    unsafe { advance(cq) }
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the application's CQ (the slot's contract).
    unsafe { advance(cq) }
}

/// `ibv_end_poll`: the completions were released as they were read.
unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// The current completion (zero before the first).
///
/// # Safety
/// As [`advance`].
unsafe fn current(cq: *mut ibv_cq_ex) -> ibv_wc {
    // SAFETY: the function's contract (as advance's).
    unsafe { cq_of(cq as *mut ibv_cq) }
        .map(|c| *c.cur.lock().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_default()
}

macro_rules! reader {
    ($name:ident -> $t:ty, |$w:ident| $e:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            // SAFETY: the application's CQ (the slot's contract).
            let $w = unsafe { current(cq) };
            $e
        }
    };
}

reader!(read_opcode -> c_int, |w| w.opcode);
reader!(read_vendor_err -> u32, |w| w.vendor_err);
reader!(read_byte_len -> u32, |w| w.byte_len);
reader!(read_imm_data -> u32, |w| w.imm_data);
reader!(read_qp_num -> u32, |w| w.qp_num);
reader!(read_src_qp -> u32, |w| w.src_qp);
reader!(read_wc_flags -> u32, |w| w.wc_flags);
reader!(read_slid -> u32, |w| w.slid as u32);
reader!(read_sl -> u8, |w| w.sl);
reader!(read_dlid_path_bits -> u8, |w| w.dlid_path_bits);

/// Fills the polling calls and the accessors of every field an `ibv_wc`
/// has ([`SUPPORTED_WC_FLAGS`]), asked for in `wc_flags` or not: reading
/// a field not asked for gives its value rather than a call through NULL.
/// The accessors of what is refused at creation (timestamps, VLAN, flow
/// tag, tag matching) stay NULL.
pub fn install(ex: &mut ibv_cq_ex) {
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_byte_len = Some(read_byte_len);
    ex.read_imm_data = Some(read_imm_data);
    ex.read_qp_num = Some(read_qp_num);
    ex.read_src_qp = Some(read_src_qp);
    ex.read_slid = Some(read_slid);
    ex.read_sl = Some(read_sl);
    ex.read_dlid_path_bits = Some(read_dlid_path_bits);
}
