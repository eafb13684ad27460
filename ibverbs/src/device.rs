//! Devices: every control socket `<sock-dir>/<name>.sock` of a running
//! `rnicd` (sock-dir: `$SOFTRNIC_SOCK_DIR`, else /run/softrnic) is one
//! ibverbs device named `<name>` with one RoCEv2 port.
//!
//! The GID table is what a RoCE netdev with one address shows (as Linux
//! rxe and mlx5 fill it): index 0 the link-local IPv6 GID from the MAC as
//! RoCE v1, 1 the same as RoCE v2, 2 the device's address (IPv4-mapped for
//! IPv4) as RoCE v1, 3 the same as RoCE v2. softrnic speaks RoCE v2 from
//! its address only, so index 3 is the one to use (`-g 3`, `-x 3`);
//! a QP whose path names another index is refused at RTR.

use crate::abi::*;
use crate::{complain, errno_of, null_errno, set_errno};
use libc::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wire::Gid;

/// The GID index softrnic sends from (RoCE v2, the device's address).
pub const ROCE_V2_GID_INDEX: usize = 3;
/// Entries of the GID table.
pub const GID_TABLE_LEN: usize = 4;
/// rxe's vendor id (perftest and others treat the device as "unknown
/// vendor": no vendor-specific paths).
pub const VENDOR_ID: u32 = 0xFF_FFFF;

/// A device: the `ibv_device` handed out (first, so the pointer is the
/// device) and the socket it stands for. Devices live as long as the
/// process (programs keep `ibv_device` pointers after freeing the list).
#[repr(C)]
pub struct Device {
    pub ibv: ibv_device,
    pub name: String,
    pub sock: PathBuf,
    pub index: c_int,
}

static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

fn fill(dst: &mut [c_char], s: &str) {
    let n = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
}

/// The devices whose sockets are in the socket directory now, sorted by
/// name (an `ibv_device` stays the same object for the same name).
fn scan() -> Vec<&'static Device> {
    let dir = softrnic::client::sock_dir();
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    use std::os::unix::fs::FileTypeExt;
                    let p = e.path();
                    let stem = p.file_stem()?.to_str()?.to_string();
                    let is_sock = e.file_type().ok()?.is_socket();
                    (is_sock && p.extension()? == "sock" && !stem.is_empty() && stem.len() < 64)
                        .then_some((stem, p))
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .into_iter()
        .map(|(name, sock)| {
            if let Some(d) = all.iter().find(|d| d.name == name && d.sock == sock) {
                return *d;
            }
            let index = all.len() as c_int;
            // SAFETY: ibv_device is plain data; all zero is a valid value.
            let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
            ibv.node_type = IBV_NODE_CA;
            ibv.transport_type = IBV_TRANSPORT_IB;
            fill(&mut ibv.name, &name);
            fill(&mut ibv.dev_name, &format!("uverbs{index}"));
            fill(
                &mut ibv.dev_path,
                &format!("/sys/class/infiniband_verbs/uverbs{index}"),
            );
            fill(
                &mut ibv.ibdev_path,
                &format!("/sys/class/infiniband/{name}"),
            );
            let d: &'static Device = Box::leak(Box::new(Device {
                ibv,
                name,
                sock,
                index,
            }));
            all.push(d);
            d
        })
        .collect()
}

/// `ibv_get_device_list`: a NULL-terminated array (freed with
/// `ibv_free_device_list`).
///
/// # Safety
/// `num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let devs = scan();
    let mut v: Vec<*mut ibv_device> = devs
        .iter()
        .map(|d| &d.ibv as *const ibv_device as *mut ibv_device)
        .collect();
    if !num.is_null() {
        // SAFETY: the caller's int.
        unsafe { *num = v.len() as c_int };
    }
    v.push(std::ptr::null_mut());
    let b = v.into_boxed_slice();
    Box::into_raw(b) as *mut *mut ibv_device
}

/// `ibv_free_device_list`.
///
/// # Safety
/// `list` came from `ibv_get_device_list` (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the list is NULL-terminated (made above).
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the boxed slice of n + 1 pointers made by get_device_list.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

/// Our device behind an `ibv_device` pointer, if it is one of ours.
fn device_of(d: *mut ibv_device) -> Option<&'static Device> {
    let all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    all.iter()
        .find(|x| std::ptr::eq(&x.ibv, d as *const ibv_device))
        .copied()
}

/// `ibv_get_device_name`.
#[no_mangle]
pub extern "C" fn srv_ibv_get_device_name(d: *mut ibv_device) -> *const c_char {
    match device_of(d) {
        Some(dev) => dev.ibv.name.as_ptr(),
        None => null_errno::<c_char>(libc::ENODEV),
    }
}

/// `ibv_get_device_index`: -1 when unknown.
#[no_mangle]
pub extern "C" fn srv_ibv_get_device_index(d: *mut ibv_device) -> c_int {
    device_of(d).map_or(-1, |dev| dev.index)
}

/// The node GUID made from the MAC as for an Ethernet RDMA device
/// (EUI-64: the MAC with ff:fe in the middle and the U/L bit flipped),
/// in network order as `ibv_get_device_guid` returns it.
pub fn guid_of(mac: [u8; 6]) -> u64 {
    let g = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    u64::from_ne_bytes(g)
}

/// `ibv_get_device_guid` (network byte order; 0 if the daemon is gone).
#[no_mangle]
pub extern "C" fn srv_ibv_get_device_guid(d: *mut ibv_device) -> u64 {
    let Some(dev) = device_of(d) else {
        set_errno(libc::ENODEV);
        return 0;
    };
    match softrnic::Context::open(&dev.sock) {
        Ok(c) => guid_of(c.device.mac.0),
        Err(e) => {
            set_errno(errno_of(&e));
            0
        }
    }
}

/// An open device: the `verbs_context` first (the application's
/// `ibv_context` is its last field), then our state.
#[repr(C)]
pub struct Ctx {
    pub vctx: verbs_context,
    pub inner: Arc<softrnic::Context>,
    pub dev: &'static Device,
    pub gids: [(Gid, u32); GID_TABLE_LEN],
    /// The objects asynchronous events name: QPN → `*mut Qp`, CQ handle →
    /// `*mut Cq`, SRQ handle → `*mut Srq` (as usize).
    pub qps: Mutex<std::collections::HashMap<u32, usize>>,
    pub cqs: Mutex<std::collections::HashMap<u32, usize>>,
    pub srqs: Mutex<std::collections::HashMap<u32, usize>>,
    /// What `async_fd` is (an epoll descriptor over the event eventfd).
    pub async_ep: std::os::fd::OwnedFd,
}

impl Ctx {
    /// The `Ctx` an application's `ibv_context` belongs to.
    ///
    /// # Safety
    /// `c` is NULL or an `ibv_context` made by `ibv_open_device` here and
    /// not yet closed.
    pub unsafe fn from<'a>(c: *mut ibv_context) -> Option<&'a Ctx> {
        if c.is_null() {
            return None;
        }
        let off = std::mem::offset_of!(verbs_context, context);
        // SAFETY: the context is the last field of a verbs_context at the
        // start of a Ctx (made by open_device).
        Some(unsafe { &*((c as *mut u8).sub(off) as *const Ctx) })
    }

    pub fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

fn link_local(mac: [u8; 6]) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..16].copy_from_slice(&guid_of(mac).to_ne_bytes());
    Gid(g)
}

/// `ibv_open_device`: connects to the daemon.
///
/// # Safety
/// `d` came from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_open_device(d: *mut ibv_device) -> *mut ibv_context {
    let Some(dev) = device_of(d) else {
        return null_errno(libc::ENODEV);
    };
    let inner = match softrnic::Context::open(&dev.sock) {
        Ok(c) => c,
        Err(e) => {
            complain("ibv_open_device", format!("{}: {e}", dev.sock.display()));
            return null_errno(errno_of(&e));
        }
    };
    let async_fd = match inner.async_event_fd() {
        Ok(fd) => fd,
        Err(e) => {
            complain("ibv_open_device", format!("async events: {e}"));
            return null_errno(errno_of(&e));
        }
    };
    // the application gets an epoll descriptor watching the eventfd: its
    // O_NONBLOCK is then its own (the daemon sets flags on the eventfd)
    let async_ep = match crate::objects::watcher(async_fd) {
        Ok(ep) => ep,
        Err(e) => return null_errno(e),
    };
    let mac = inner.device.mac.0;
    let gid = inner.device.gid;
    let gids = [
        (link_local(mac), IBV_GID_TYPE_ROCE_V1),
        (link_local(mac), IBV_GID_TYPE_ROCE_V2),
        (gid, IBV_GID_TYPE_ROCE_V1),
        (gid, IBV_GID_TYPE_ROCE_V2),
    ];
    // SAFETY: verbs_context is pointers, integers and a pthread mutex, for
    // all of which zero is a valid value (PTHREAD_MUTEX_INITIALIZER).
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.sz = std::mem::size_of::<verbs_context>();
    vctx.query_port = Some(query_port_ex);
    vctx.query_device_ex = Some(query_device_ex);
    vctx.create_qp_ex = Some(crate::objects::create_qp_ex);
    vctx.get_srq_num = Some(crate::objects::get_srq_num);
    let c = &mut vctx.context;
    c.device = d;
    c.cmd_fd = -1;
    c.async_fd = std::os::fd::AsRawFd::as_raw_fd(&async_ep);
    c.num_comp_vectors = 1;
    c.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    c.ops.poll_cq = Some(crate::datapath::poll_cq);
    c.ops.req_notify_cq = Some(crate::datapath::req_notify_cq);
    c.ops.post_send = Some(crate::datapath::post_send);
    c.ops.post_recv = Some(crate::datapath::post_recv);
    c.ops.post_srq_recv = Some(crate::datapath::post_srq_recv);
    c.ops.alloc_mw = Some(crate::objects::alloc_mw);
    c.ops.bind_mw = Some(crate::datapath::bind_mw);
    c.ops.dealloc_mw = Some(crate::objects::dealloc_mw);
    let ctx = Box::new(Ctx {
        vctx,
        inner,
        dev,
        gids,
        qps: Default::default(),
        cqs: Default::default(),
        srqs: Default::default(),
        async_ep,
    });
    let ctx = Box::leak(ctx);
    ctx.ibv()
}

/// `ibv_close_device`.
///
/// # Safety
/// `c` came from `ibv_open_device` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_close_device(c: *mut ibv_context) -> c_int {
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: made by Box::leak in open_device.
    drop(unsafe { Box::from_raw(ctx as *const Ctx as *mut Ctx) });
    0
}

/// Fills `ibv_device_attr` with what the device and the daemon allow.
fn device_attr(ctx: &Ctx) -> ibv_device_attr {
    let d = &ctx.inner.device;
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    fill(
        &mut a.fw_ver,
        concat!("softrnic ", env!("CARGO_PKG_VERSION")),
    );
    a.node_guid = guid_of(d.mac.0);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 16384;
    a.max_qp_wr = d.max_qp_wr as c_int;
    a.device_cap_flags = IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
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
    // SAFETY: per the contract.
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

/// `verbs_context.query_device_ex`: the classic attributes; no extended
/// capabilities (they stay zero, as the header's legacy path leaves them).
///
/// # Safety
/// `c` is NULL or an open context; `input` NULL or valid; `attr` NULL or
/// valid for `attr_size` bytes of writes.
unsafe extern "C" fn query_device_ex(
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

/// Width and speed codes whose product is closest to the link's rate from
/// below (1X: SDR 2.5, DDR 5, QDR 10, FDR 14, EDR 25, HDR 50, NDR 100
/// Gb/s per lane; 4X four lanes).
fn width_speed(bps: u64) -> (u8, u8) {
    let g = bps / 1_000_000_000;
    match g {
        0..=4 => (1, 1),
        5..=9 => (1, 2),
        10..=13 => (1, 4),
        14..=24 => (1, 16),
        25..=39 => (1, 32),
        40..=49 => (2, 4),
        50..=99 => (1, 64),
        100..=199 => (2, 32),
        200..=399 => (2, 64),
        _ => (2, 128),
    }
}

fn port_attr(ctx: &Ctx, port: u8) -> Result<ibv_port_attr, c_int> {
    if port != 1 {
        return Err(libc::EINVAL);
    }
    let p = ctx.inner.query_port(port).map_err(|e| errno_of(&e))?;
    let up = p.state == softrnic::PORT_ACTIVE;
    let (w, s) = width_speed(p.link_speed_bps);
    Ok(ibv_port_attr {
        state: if up { IBV_PORT_ACTIVE } else { IBV_PORT_DOWN },
        max_mtu: mtu_enum(p.max_mtu),
        active_mtu: mtu_enum(p.active_mtu),
        gid_tbl_len: GID_TABLE_LEN as c_int,
        port_cap_flags: IBV_PORT_IP_BASED_GIDS,
        max_msg_sz: 1 << 31,
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
unsafe extern "C" fn query_port_ex(
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
    // SAFETY: per the contract.
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
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if port != 1 || gid.is_null() || !(0..GID_TABLE_LEN as c_int).contains(&index) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's gid.
    unsafe { (*gid).raw = ctx.gids[index as usize].0 .0 };
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
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if port != 1 || ty.is_null() || index as usize >= GID_TABLE_LEN {
        set_errno(libc::EINVAL);
        return -1;
    }
    // the sysfs numbering of rdma-core's private enum ibv_gid_type_sysfs:
    // 0 IB / RoCE v1, 1 RoCE v2
    let t = u32::from(ctx.gids[index as usize].1 == IBV_GID_TYPE_ROCE_V2);
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
        ndev_ifindex: 0,
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
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    if flags != 0 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    if port != 1 || index as usize >= GID_TABLE_LEN {
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
    // SAFETY: per the contract.
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
    // SAFETY: per the contract.
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
    // SAFETY: per the contract.
    if unsafe { Ctx::from(c) }.is_none() || port != 1 {
        return -libc::EINVAL;
    }
    if u16::from_be(pkey) | 0x8000 == 0xffff {
        0
    } else {
        -libc::ENOENT
    }
}

/// The destination MAC for `dgid`: a softrnic device on this host with
/// that GID (the in-memory wire has no neighbour table), else the
/// kernel's next hop for the address (ARP/ND) in this namespace.
pub fn resolve_mac(dgid: Gid) -> Result<wire::EthernetAddress, String> {
    for d in scan() {
        if let Some((gid, mac)) = local_address(&d.sock) {
            if gid == dgid {
                return Ok(mac);
            }
        }
    }
    let ip = dgid.to_ip();
    nic::io::addr::next_hop_mac(ip, std::time::Duration::from_secs(3))
        .map(|(_, mac)| mac)
        .map_err(|e| format!("no MAC for {ip}: {e}"))
}

/// The GID and MAC of the device behind socket `sock`, asked once per
/// socket file (a restarted daemon makes a new one: its inode and change
/// time key the cache).
fn local_address(sock: &std::path::Path) -> Option<(Gid, wire::EthernetAddress)> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;
    type Key = (std::path::PathBuf, u64, i64, i64);
    static SEEN: Mutex<Option<HashMap<Key, (Gid, wire::EthernetAddress)>>> = Mutex::new(None);
    let m = std::fs::metadata(sock).ok()?;
    let key = (sock.to_path_buf(), m.ino(), m.ctime(), m.ctime_nsec());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    if let Some(v) = seen.get(&key) {
        return Some(*v);
    }
    let c = softrnic::Context::open(sock).ok()?;
    let v = (c.device.gid, c.device.mac);
    seen.retain(|k, _| k.0 != key.0);
    seen.insert(key, v);
    Some(v)
}

/// `ibv_resolve_eth_l2_from_gid`: the MAC (and no VLAN) for the AV's GID.
///
/// # Safety
/// `c` open, `attr` readable, `eth_mac` writable for 6 bytes, `vid`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_resolve_eth_l2_from_gid(
    c: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    // SAFETY: per the contract.
    if unsafe { Ctx::from(c) }.is_none() || attr.is_null() || eth_mac.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's AV.
    let dgid = Gid(unsafe { (*attr).grh.dgid.raw });
    match resolve_mac(dgid) {
        Ok(mac) => {
            // SAFETY: 6 writable bytes, and vid if given.
            unsafe {
                std::ptr::copy_nonoverlapping(mac.0.as_ptr(), eth_mac, 6);
                if !vid.is_null() {
                    *vid = 0xffff;
                }
            }
            0
        }
        Err(e) => {
            complain("ibv_resolve_eth_l2_from_gid", e);
            libc::EHOSTUNREACH
        }
    }
}
