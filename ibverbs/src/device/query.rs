//! Device, port, GID and P_Key queries.

use super::*;

/// Fills `ibv_device_attr` with what the device and the daemon allow.
fn device_attr(ctx: &Ctx) -> ibv_device_attr {
    let d = &ctx.inner.device;
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    fill(
        &mut a.fw_ver,
        concat!("softrnic ", env!("CARGO_PKG_VERSION")),
    );
    a.node_guid = guid_of(d);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 16384;
    a.max_qp_wr = d.max_qp_wr as c_int;
    a.device_cap_flags = softrnic::client::DEVICE_CAP_FLAGS;
    a.max_sge = d.max_sge as c_int;
    a.max_sge_rd = d.max_sge as c_int;
    a.max_cq = 16384;
    a.max_cqe = d.max_cqe as c_int;
    a.max_mr = 65536;
    a.max_mw = 65536;
    a.max_pd = 65536;
    a.max_qp_rd_atom = nic::verbs::qp::MAX_RD_ATOMIC as i32;
    a.max_res_rd_atom = nic::verbs::qp::MAX_RD_ATOMIC as i32 * 16384;
    a.max_qp_init_rd_atom = nic::verbs::qp::MAX_RD_ATOMIC as i32;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = 65536;
    a.max_srq = 16384;
    a.max_srq_wr = d.max_qp_wr as c_int;
    a.max_srq_sge = d.max_sge as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

/// `ibv_query_device`.
///
/// # Safety
/// `c` is an open context, `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's struct.
    unsafe { *attr = device_attr(ctx) };
    0
}

/// `verbs_context.query_device_ex`: the classic attributes, their
/// capability flags again as `device_cap_flags_ex`; no extended
/// capabilities (no completion timestamps — `completion_timestamp_mask`
/// 0, which is why `ibv_create_cq_ex` refuses timestamp `wc_flags` — nor
/// ODP, TSO, RSS, tag matching, CQ moderation or device memory).
///
/// # Safety
/// `c` is NULL or an open context; `input` NULL or valid; `attr` NULL or
/// valid for `attr_size` bytes of writes.
pub(super) unsafe extern "C" fn query_device_ex(
    c: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: the inline ibv_query_device_ex passes its context.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: NULL or the caller's input.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller's struct is attr_size bytes long.
    unsafe {
        std::ptr::write_bytes(attr as *mut u8, 0, attr_size);
        let a = device_attr(ctx);
        std::ptr::copy_nonoverlapping(
            &a as *const ibv_device_attr as *const u8,
            attr as *mut u8,
            std::mem::size_of::<ibv_device_attr>(),
        );
        // the 64-bit capability flags begin with the classic 32 (as the
        // kernel reports them); no extended capability (bits 32 up) holds
        if n >= std::mem::offset_of!(ibv_device_attr_ex, device_cap_flags_ex) + 8 {
            (*attr).device_cap_flags_ex = a.device_cap_flags as u64;
        }
        if n >= std::mem::offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) + 4 {
            (*attr).phys_port_cnt_ex = 1;
        }
    }
    0
}

/// `enum ibv_mtu` of an MTU in bytes.
pub fn mtu_enum(bytes: u32) -> c_int {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

fn port_attr(ctx: &Ctx, port: u8) -> Result<ibv_port_attr, c_int> {
    if port != 1 {
        return Err(libc::EINVAL);
    }
    let p = ctx.inner.query_port(port).map_err(|e| errno_of(&e))?;
    let up = p.state == softrnic::PORT_ACTIVE;
    let (w, s) = p.width_speed();
    Ok(ibv_port_attr {
        state: if up { IBV_PORT_ACTIVE } else { IBV_PORT_DOWN },
        max_mtu: mtu_enum(p.max_mtu),
        active_mtu: mtu_enum(p.active_mtu),
        gid_tbl_len: PORT_GID_TBL_LEN as c_int,
        port_cap_flags: IBV_PORT_IP_BASED_GIDS,
        // the transport's longest message (C9-94: 2^31 bytes)
        max_msg_sz: nic::device::MAX_MSG_LEN as u32,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width: w,
        active_speed: s,
        phys_state: if up {
            PHYS_STATE_LINK_UP
        } else {
            PHYS_STATE_DISABLED
        },
        link_layer: IBV_LINK_LAYER_ETHERNET,
        ..Default::default()
    })
}

/// `verbs_context.query_port` (what the inline `ibv_query_port` calls).
///
/// # Safety
/// `c` is NULL or an open context; `attr` NULL or valid for `len` bytes of
/// writes.
pub(super) unsafe extern "C" fn query_port_ex(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: the inline ibv_query_port passes its context.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    match port_attr(ctx, port) {
        Ok(a) => {
            let n = len.min(std::mem::size_of::<ibv_port_attr>());
            // SAFETY: the caller's struct is `len` bytes long.
            unsafe {
                std::ptr::write_bytes(attr as *mut u8, 0, len);
                std::ptr::copy_nonoverlapping(
                    &a as *const ibv_port_attr as *const u8,
                    attr as *mut u8,
                    n,
                );
            }
            0
        }
        Err(e) => e,
    }
}

/// `ibv_query_port` as exported: fills the older, shorter
/// `struct _compat_ibv_port_attr`.
///
/// # Safety
/// `c` is an open context, `attr` writable for the compat struct.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: `c` open and `attr` writable for the compat struct's
    // COMPAT_PORT_ATTR_LEN bytes (this function's contract).
    unsafe { query_port_ex(c, port, attr, COMPAT_PORT_ATTR_LEN) }
}

/// `ibv_query_gid`.
///
/// # Safety
/// `c` is an open context, `gid` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if port != 1 || gid.is_null() || !(0..PORT_GID_TBL_LEN as c_int).contains(&index) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // an empty entry reads as the zero GID, as rdma-core answers it
    let raw = ctx.gids.get(index as usize).map_or([0; 16], |g| g.0 .0);
    // SAFETY: the caller's gid.
    unsafe { (*gid).raw = raw };
    0
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34; perftest imports it).
///
/// # Safety
/// `c` is an open context, `ty` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut u32,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if port != 1 || ty.is_null() || index as usize >= PORT_GID_TBL_LEN {
        set_errno(libc::EINVAL);
        return -1;
    }
    // the sysfs numbering of rdma-core's private enum ibv_gid_type_sysfs:
    // 0 IB / RoCE v1, 1 RoCE v2; an empty entry is IB / RoCE v1, as
    // rdma-core answers it
    let t = ctx
        .gids
        .get(index as usize)
        .map_or(0, |g| u32::from(g.1 == IBV_GID_TYPE_ROCE_V2));
    // SAFETY: the caller's int.
    unsafe { *ty = t };
    0
}

fn gid_entry(ctx: &Ctx, index: usize) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid {
            raw: ctx.gids[index].0 .0,
        },
        gid_index: index as u32,
        port_num: 1,
        gid_type: ctx.gids[index].1,
        ndev_ifindex: ctx.ndev_ifindex,
    }
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`).
///
/// # Safety
/// `c` is an open context, `entry` writable for `entry_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn srv__ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    if flags != 0 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    if port != 1 || index as usize >= PORT_GID_TBL_LEN {
        return libc::EINVAL;
    }
    // an empty entry of the table
    if index as usize >= GID_TABLE_LEN {
        return libc::ENODATA;
    }
    // SAFETY: the caller's entry.
    unsafe { *entry = gid_entry(ctx, index as usize) };
    0
}

/// `_ibv_query_gid_table`: the valid entries; their count.
///
/// # Safety
/// `c` is an open context, `entries` writable for `max` entries of
/// `entry_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn srv__ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return -(libc::EINVAL as isize);
    };
    if flags != 0 || entries.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return -(libc::EINVAL as isize);
    }
    if max < GID_TABLE_LEN {
        return -(libc::EINVAL as isize);
    }
    for i in 0..GID_TABLE_LEN {
        // SAFETY: the caller's array of `max` entries of entry_size bytes.
        unsafe {
            let p = (entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry;
            *p = gid_entry(ctx, i);
        }
    }
    GID_TABLE_LEN as isize
}

/// `ibv_query_pkey`: one P_Key, the default full-membership 0xffff
/// (IBA 10.9.1.2; RoCE ports have only it).
///
/// # Safety
/// `c` is an open context, `pkey` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    if unsafe { Ctx::from(c) }.is_none() || pkey.is_null() || port != 1 || index != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's u16 (network order, as __be16).
    unsafe { *pkey = 0xffffu16.to_be() };
    0
}

/// `ibv_get_pkey_index`: index 0 for the default P_Key.
///
/// # Safety
/// `c` is an open context.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_get_pkey_index(c: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    if unsafe { Ctx::from(c) }.is_none() || port != 1 {
        return -libc::EINVAL;
    }
    if u16::from_be(pkey) | 0x8000 == 0xffff {
        0
    } else {
        -libc::ENOENT
    }
}
