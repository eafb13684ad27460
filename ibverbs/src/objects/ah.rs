//! Address handles.

use super::*;

#[repr(C)]
pub struct Ah {
    pub ibv: ibv_ah,
    pub inner: softrnic::Ah,
}

/// `ibv_create_ah`.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: `pd` is NULL or a live PD of this library's (this function's
    // contract), as pd_of requires.
    let (Some(p), false) = (unsafe { pd_of(pd) }, attr.is_null()) else {
        return null_errno(libc::EINVAL);
    };
    // SAFETY: the caller's AV.
    let av = match av_from("ibv_create_ah", unsafe { &*attr }) {
        Ok(a) => a,
        Err(e) => return null_errno(e),
    };
    match p.inner.create_ah(&av) {
        Ok(ah) => {
            let handle = ah.handle;
            boxed(Ah {
                ibv: ibv_ah {
                    context: p.ibv.context,
                    pd,
                    handle,
                },
                inner: ah,
            }) as *mut ibv_ah
        }
        Err(e) => {
            complain("ibv_create_ah", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ibv_destroy_ah`.
///
/// # Safety
/// `a` from `ibv_create_ah`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_ah(a: *mut ibv_ah) -> c_int {
    if a.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by Box in create_ah.
    let ah = unsafe { Box::from_raw(a as *mut Ah) };
    match ah.inner.destroy() {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_init_ah_from_wc`: the AV that answers a UD receive (its GRH's
/// source as the destination, IBA 11.4.1.2: the GRH is the first 40 bytes
/// of the receive buffer).
///
/// # Safety
/// `c` open; `wc`, `grh` readable; `ah_attr` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    if unsafe { Ctx::from(c) }.is_none() || wc.is_null() || ah_attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's structs.
    unsafe {
        if (*wc).wc_flags & IBV_WC_GRH == 0 || grh.is_null() {
            return libc::EINVAL;
        }
        let g = &*grh;
        let flow = u32::from_be(g.version_tclass_flow);
        *ah_attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: g.sgid,
                flow_label: flow & 0xf_ffff,
                sgid_index: ROCE_V2_GID_INDEX as u8,
                hop_limit: 0xff,
                traffic_class: ((flow >> 20) & 0xff) as u8,
            },
            dlid: (*wc).slid,
            sl: (*wc).sl,
            src_path_bits: (*wc).dlid_path_bits,
            static_rate: 0,
            is_global: 1,
            port_num: port,
        };
    }
    0
}

/// `ibv_create_ah_from_wc`.
///
/// # Safety
/// As `ibv_init_ah_from_wc`, with `pd` from `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    // SAFETY: `pd` is NULL or a live PD of this library's (this function's
    // contract), as pd_of requires.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let mut a = ibv_ah_attr::default();
    // SAFETY: the PD's context is open while the PD lives; `wc` and `grh`
    // are as this function's contract (ibv_init_ah_from_wc's) requires.
    let r = unsafe { srv_ibv_init_ah_from_wc(p.ibv.context, port, wc, grh, &mut a) };
    if r != 0 {
        return null_errno(r);
    }
    // SAFETY: a local AV.
    unsafe { srv_ibv_create_ah(pd, &mut a) }
}

/// `ibv_attach_mcast` / `ibv_detach_mcast`: no multicast.
#[no_mangle]
pub extern "C" fn srv_ibv_attach_mcast() -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub extern "C" fn srv_ibv_detach_mcast() -> c_int {
    libc::EOPNOTSUPP
}
