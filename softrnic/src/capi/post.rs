//! Posting work requests: each writes a WQE into a shared ring and rings
//! the doorbell, with no syscall.

use super::{SrnicAh, SrnicQp, SrnicRecvWr, SrnicSendWr, SrnicSge, SrnicSrq};
use crate::ring;
use nic::verbs::{RecvWr, Sge, Sgl, MAX_SGE};
use std::ffi::c_int;

/// The scatter/gather list of a work request (None: more than
/// `MAX_SGE` entries, or entries at NULL).
///
/// # Safety
/// When `n` is at most `MAX_SGE` and `list` is not NULL, `list` points at
/// `n` readable entries that outlive `'a`.
unsafe fn sges<'a>(list: *const SrnicSge, n: u32) -> Option<&'a [SrnicSge]> {
    if n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return None;
    }
    if n == 0 {
        return Some(&[]);
    }
    // SAFETY: not NULL and `n` entries long (the contract); SrnicSge is
    // plain old data, so any bytes are a valid value.
    Some(unsafe { std::slice::from_raw_parts(list, n as usize) })
}

/// Writes the WQE into the send ring and rings the doorbell: no syscall.
/// ENOMEM: the ring is full; EINVAL: more than 8 SGEs.
///
/// # Safety
/// `qp` (or `srq`) is NULL or live; `wr` is NULL or valid, and its
/// `sg_list` holds `num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_send(qp: *mut SrnicQp, wr: *const SrnicSendWr) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(q), Some(w)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: the SGE list of `wr` is valid (the contract).
    let Some(raw) = (unsafe { raw_send(w) }) else {
        return libc::EINVAL;
    };
    // SAFETY: post_raw_send is memory-safe for any WQE; the daemon
    // validates it and a bad one completes with an error.
    match unsafe { q.qp.post_raw_send(&raw) } {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

/// A UD send (SEND or SEND_WITH_IMM) to `remote_qpn` at `ah` with
/// `remote_qkey`. ENOMEM: the ring is full; EINVAL: bad arguments.
///
/// # Safety
/// `qp` is NULL or live; `wr` is NULL or valid, and its `sg_list` holds
/// `num_sge` entries; `ah` is NULL or from `srnic_create_ah`.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_send_ud(
    qp: *mut SrnicQp,
    wr: *const SrnicSendWr,
    ah: *const SrnicAh,
    remote_qpn: u32,
    remote_qkey: u32,
) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(q), Some(w), Some(a)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }, unsafe {
        ah.as_ref()
    }) else {
        return libc::EINVAL;
    };
    // SAFETY: the SGE list of `wr` is valid (the contract).
    let Some(mut raw) = (unsafe { raw_send(w) }) else {
        return libc::EINVAL;
    };
    raw.ah = a.ah.handle;
    raw.remote_qpn = remote_qpn & 0x00ff_ffff;
    raw.remote_qkey = remote_qkey;
    // SAFETY: post_raw_send is memory-safe for any WQE; the daemon
    // validates it and a bad one completes with an error.
    match unsafe { q.qp.post_raw_send(&raw) } {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

/// The ring's WQE for a C send work request (None: a bad SGE list).
///
/// # Safety
/// `w.sg_list` holds `w.num_sge` entries (or is NULL).
unsafe fn raw_send(w: &SrnicSendWr) -> Option<ring::WqeRaw> {
    // SAFETY: the list is valid (the contract).
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

/// Writes the receive WQE into the QP's receive ring, no syscall.
/// ENOMEM: the ring is full; EINVAL: bad arguments.
///
/// # Safety
/// `qp` is NULL or live; `wr` is NULL or valid, and its `sg_list` holds
/// `num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_recv(qp: *mut SrnicQp, wr: *const SrnicRecvWr) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(q), Some(w)) = (unsafe { qp.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: the SGE list of `wr` is valid (the contract).
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
/// `qp` (or `srq`) is NULL or live; `wr` is NULL or valid, and its
/// `sg_list` holds `num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn srnic_post_srq_recv(srq: *mut SrnicSrq, wr: *const SrnicRecvWr) -> c_int {
    // SAFETY: each pointer is NULL or valid (the contract).
    let (Some(q), Some(w)) = (unsafe { srq.as_mut() }, unsafe { wr.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: the SGE list of `wr` is valid (the contract).
    let Some(r) = (unsafe { recv_wr(w) }) else {
        return libc::EINVAL;
    };
    match q.srq.post_recv(&r) {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

/// The receive work request for a C one (None: a bad SGE list).
///
/// # Safety
/// `w.sg_list` holds `w.num_sge` entries (or is NULL).
unsafe fn recv_wr(w: &SrnicRecvWr) -> Option<RecvWr> {
    // SAFETY: the list is valid (the contract).
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
