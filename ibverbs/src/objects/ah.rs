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
        // the 40 bytes of the GRH area, as the receive wrote them
        let bytes: [u8; 40] = std::ptr::read_unaligned(grh as *const [u8; 40]);
        let (sgid, flow_label, traffic_class) = match grh_ipv4(&bytes) {
            Some(v4) => v4,
            None => {
                let flow = u32::from_be(g.version_tclass_flow);
                (g.sgid, flow & 0xf_ffff, ((flow >> 20) & 0xff) as u8)
            }
        };
        *ah_attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: sgid,
                flow_label,
                sgid_index: ROCE_V2_GID_INDEX as u8,
                hop_limit: 0xff,
                traffic_class,
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

/// The source of a RoCEv2 datagram over IPv4 from its GRH area: the IPv4
/// header sits in its last 20 bytes (the first 20 unspecified), as
/// rdma-core's `ibv_init_ah_from_wc` reads it: an IPv4 header when the
/// first nibble is not IPv6's 6, or when the IPv4 header at byte 20 has
/// length 5 and a valid checksum. The source as an IPv4-mapped GID, flow
/// label 0, the TOS as traffic class; None for an IPv6 GRH.
fn grh_ipv4(b: &[u8; 40]) -> Option<(ibv_gid, u32, u8)> {
    let ip = &b[20..40];
    let v4 = if b[0] >> 4 != 6 {
        ip[0] >> 4 == 4
    } else {
        ip[0] == 0x45 && {
            let sum = ip
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum::<u32>();
            let sum = (sum & 0xffff) + (sum >> 16);
            (sum & 0xffff) + (sum >> 16) == 0xffff
        }
    };
    if !v4 {
        return None;
    }
    let mut raw = [0u8; 16];
    raw[10] = 0xff;
    raw[11] = 0xff;
    raw[12..].copy_from_slice(&ip[12..16]);
    Some((ibv_gid { raw }, 0, ip[1]))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_grh_area_gives_the_mapped_source_address() {
        // a RoCEv2 IPv4 header (TOS 0x68, 192.0.2.1 > 192.0.2.2) with its
        // checksum, after 20 bytes of whatever
        let mut ip = [
            0x45, 0x68, 0x00, 0x9c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 192, 0, 2, 1,
            192, 0, 2, 2,
        ];
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        for first in [0x00, 0x60] {
            let mut b = [first; 40];
            b[20..].copy_from_slice(&ip);
            let (gid, flow, tc) = grh_ipv4(&b).expect("IPv4");
            assert_eq!(gid.raw[10..], [0xff, 0xff, 192, 0, 2, 1]);
            assert_eq!((flow, tc), (0, 0x68));
        }
        // an IPv6 GRH (version 6, no IPv4 header with a valid checksum)
        let mut b = [0u8; 40];
        b[0] = 0x60;
        b[20] = 0x45;
        assert!(grh_ipv4(&b).is_none());
    }
}
