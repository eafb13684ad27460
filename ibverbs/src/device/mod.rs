//! Devices: every control socket `<sock-dir>/<name>.sock` of a running
//! `rnicd` (sock-dir: `$SOFTRNIC_SOCK_DIR`, else /run/softrnic) is one
//! ibverbs device named `<name>` with one RoCEv2 port. With
//! `SOFTRNIC_LOCAL=IFNAME` the process hosts its one device itself
//! (`softrnic_local`) and lists that alone.
//!
//! The GID table is what a RoCE netdev with one address shows
//! (`softrnic::DeviceInfo::gid_table`): index 0 the link-local IPv6 GID
//! from the MAC as RoCE v1, 1 the same as RoCE v2, 2 the device's address
//! (IPv4-mapped for IPv4) as RoCE v1, 3 the same as RoCE v2. softrnic
//! speaks RoCE v2 from its address only, so index 3 is the one to use
//! (`-g 3`, `-x 3`); a QP whose path names another index is refused at
//! RTR.
//!
//! This module lists, opens and closes devices; [`query`] answers the
//! device, port, GID and P_Key queries; [`resolve`] finds the MAC for a
//! destination GID.

pub mod query;
pub mod resolve;

pub use query::*;
pub use resolve::*;

use crate::abi::*;
use crate::{complain, errno_of, null_errno, set_errno};
use libc::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wire::Gid;

pub use softrnic::client::{GID_TABLE_LEN, PORT_GID_TBL_LEN, ROCE_V2_GID_INDEX};
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
/// name (`softrnic::client::device_sockets`; an `ibv_device` stays the
/// same object for the same name, and keeps the index it was first seen
/// with).
fn scan() -> Vec<&'static Device> {
    // `SOFTRNIC_LOCAL=IFNAME`: the device is hosted in this process
    softrnic_local::ensure();
    let names = softrnic::client::device_sockets();
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .into_iter()
        .map(|softrnic::client::DeviceSocket { name, path: sock }| {
            if let Some(d) = all.iter().find(|d| d.name == name && d.sock == sock) {
                return *d;
            }
            let index = all.len() as c_int;
            // SAFETY: ibv_device is plain data; all zero is a valid value.
            let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
            ibv.node_type = IBV_NODE_CA;
            ibv.transport_type = IBV_TRANSPORT_IB;
            fill(&mut ibv.name, &name);
            let uverbs = softrnic::client::uverbs_name(index as usize);
            fill(&mut ibv.dev_name, &uverbs);
            fill(
                &mut ibv.dev_path,
                &format!("/sys/class/infiniband_verbs/{uverbs}"),
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

/// The node GUID of a device, in network order as `ibv_get_device_guid`
/// and `ibv_query_device` return it.
pub fn guid_of(d: &softrnic::DeviceInfo) -> u64 {
    u64::from_ne_bytes(d.node_guid())
}

/// `ibv_get_device_guid` (network byte order; 0 if the daemon is gone).
#[no_mangle]
pub extern "C" fn srv_ibv_get_device_guid(d: *mut ibv_device) -> u64 {
    let Some(dev) = device_of(d) else {
        set_errno(libc::ENODEV);
        return 0;
    };
    match softrnic::Context::open(&dev.sock) {
        Ok(c) => guid_of(&c.device),
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
    /// The interface index of the device's netdev in this process's
    /// network namespace (0: none), as `ibv_query_gid_ex` reports it for
    /// every GID.
    pub ndev_ifindex: u32,
    /// The objects asynchronous events name: QPN → `*mut Qp`, CQ handle →
    /// `*mut Cq`, SRQ handle → `*mut Srq` (as usize).
    pub qps: Mutex<std::collections::HashMap<u32, usize>>,
    pub cqs: Mutex<std::collections::HashMap<u32, usize>>,
    pub srqs: Mutex<std::collections::HashMap<u32, usize>>,
    /// What `async_fd` is (an epoll descriptor over the event eventfd).
    pub async_ep: std::os::fd::OwnedFd,
    /// What `cmd_fd` is: `/dev/null` (there is no kernel command channel;
    /// a program may still dup it, e.g. to try `ibv_import_device`, which
    /// answers EOPNOTSUPP).
    pub cmd: Option<std::os::fd::OwnedFd>,
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

/// The index of interface `name` in this process's network namespace, 0
/// when there is none.
fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: a NUL-terminated name alive for the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
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
    // the daemon's going away turns the device into a failed one
    if let Err(e) = inner.watch() {
        complain("ibv_open_device", format!("watching the daemon: {e}"));
        return null_errno(errno_of(&e));
    }
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
    let gids = inner.device.gid_table().map(|(g, t)| {
        let t = match t {
            softrnic::client::GidType::RoceV1 => IBV_GID_TYPE_ROCE_V1,
            softrnic::client::GidType::RoceV2 => IBV_GID_TYPE_ROCE_V2,
        };
        (g, t)
    });
    let ndev_ifindex = inner.device.netdev.as_deref().map_or(0, ifindex);
    // SAFETY: verbs_context is pointers, integers and a pthread mutex, for
    // all of which zero is a valid value (PTHREAD_MUTEX_INITIALIZER).
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.sz = std::mem::size_of::<verbs_context>();
    vctx.query_port = Some(query_port_ex);
    vctx.query_device_ex = Some(query_device_ex);
    vctx.create_qp_ex = Some(crate::objects::create_qp_ex);
    vctx.create_cq_ex = Some(crate::objects::create_cq_ex);
    vctx.get_srq_num = Some(crate::objects::get_srq_num);
    let c = &mut vctx.context;
    c.device = d;
    let cmd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok()
        .map(std::os::fd::OwnedFd::from);
    c.cmd_fd = cmd.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
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
        ndev_ifindex,
        qps: Default::default(),
        cqs: Default::default(),
        srqs: Default::default(),
        async_ep,
        cmd,
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
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: made by Box::leak in open_device.
    drop(unsafe { Box::from_raw(ctx as *const Ctx as *mut Ctx) });
    0
}
