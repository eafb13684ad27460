//! The verbs this library calls for an ID's QP, CQs and SRQ, behind a
//! trait so that the unit tests can watch the QP transitions. The real
//! ones are libibverbs.so.1's exported functions at their rdma-core 44
//! versions (softrnic's drop-in when it is first on the library path),
//! looked up with `dlvsym` on first use: this library has no link-time
//! dependency on a libibverbs.

use crate::abi::*;
use libc::{c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// The verbs an ID's objects are made and moved with.
pub trait Verbs: Send + Sync {
    /// Every device: its name and the GIDs of its port 1.
    fn devices(&self) -> Vec<(String, Vec<[u8; 16]>)>;
    /// The open context of device `dev` (opened once, for the process).
    fn context(&self, dev: &str) -> Option<*mut ibv_context>;
    /// Every device's context.
    fn contexts(&self) -> Vec<*mut ibv_context>;
    /// A protection domain of `ctx` for IDs given none.
    ///
    /// # Safety
    /// `ctx` is one of [`Verbs::contexts`].
    unsafe fn default_pd(&self, ctx: *mut ibv_context) -> *mut ibv_pd;
    /// The GID index of `gid` on port 1 of `ctx` (the RoCEv2 entry: the
    /// last one that matches).
    ///
    /// # Safety
    /// `ctx` is one of [`Verbs::contexts`].
    unsafe fn gid_index(&self, ctx: *mut ibv_context, gid: [u8; 16]) -> Option<u8>;
    /// # Safety
    /// As `ibv_create_qp`.
    unsafe fn create_qp(&self, pd: *mut ibv_pd, a: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    /// # Safety
    /// As `ibv_modify_qp`.
    unsafe fn modify_qp(&self, qp: *mut ibv_qp, a: *mut ibv_qp_attr, mask: c_int) -> c_int;
    /// # Safety
    /// As `ibv_destroy_qp`.
    unsafe fn destroy_qp(&self, qp: *mut ibv_qp) -> c_int;
    /// # Safety
    /// As `ibv_create_comp_channel`.
    unsafe fn create_comp_channel(&self, ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    /// # Safety
    /// As `ibv_destroy_comp_channel`.
    unsafe fn destroy_comp_channel(&self, c: *mut ibv_comp_channel) -> c_int;
    /// # Safety
    /// As `ibv_create_cq`.
    unsafe fn create_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        chan: *mut ibv_comp_channel,
    ) -> *mut ibv_cq;
    /// # Safety
    /// As `ibv_destroy_cq`.
    unsafe fn destroy_cq(&self, cq: *mut ibv_cq) -> c_int;
    /// # Safety
    /// As `ibv_create_srq`.
    unsafe fn create_srq(&self, pd: *mut ibv_pd, a: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    /// # Safety
    /// As `ibv_destroy_srq`.
    unsafe fn destroy_srq(&self, srq: *mut ibv_srq) -> c_int;
}

/// libibverbs' functions, looked up once.
struct Syms {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
}

/// A function pointer of type `F` at address `p`.
///
/// # Safety
/// `F` is a function pointer type and `p` a function of that signature.
unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the caller's promise; the sizes are equal.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

fn load() -> Option<Syms> {
    // SAFETY: dlopen of a C string; the handle is kept for the process.
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
    };
    if h.is_null() {
        crate::errno::complain("libibverbs", "libibverbs.so.1 cannot be loaded");
        return None;
    }
    macro_rules! sym {
        ($name:literal, $ver:literal) => {{
            // SAFETY: dlvsym of C strings on a live handle.
            let p = unsafe { libc::dlvsym(h, $name.as_ptr(), $ver.as_ptr()) };
            if p.is_null() {
                crate::errno::complain("libibverbs", format!("{:?} not found", $name));
                return None;
            }
            // SAFETY: libibverbs' function of that name and version has
            // the signature of the field (rdma-core 44's verbs.h).
            unsafe { fn_ptr(p) }
        }};
    }
    Some(Syms {
        get_device_list: sym!(c"ibv_get_device_list", c"IBVERBS_1.1"),
        get_device_name: sym!(c"ibv_get_device_name", c"IBVERBS_1.1"),
        open_device: sym!(c"ibv_open_device", c"IBVERBS_1.1"),
        close_device: sym!(c"ibv_close_device", c"IBVERBS_1.1"),
        alloc_pd: sym!(c"ibv_alloc_pd", c"IBVERBS_1.1"),
        query_gid: sym!(c"ibv_query_gid", c"IBVERBS_1.1"),
        create_qp: sym!(c"ibv_create_qp", c"IBVERBS_1.1"),
        modify_qp: sym!(c"ibv_modify_qp", c"IBVERBS_1.1"),
        destroy_qp: sym!(c"ibv_destroy_qp", c"IBVERBS_1.1"),
        create_comp_channel: sym!(c"ibv_create_comp_channel", c"IBVERBS_1.0"),
        destroy_comp_channel: sym!(c"ibv_destroy_comp_channel", c"IBVERBS_1.0"),
        create_cq: sym!(c"ibv_create_cq", c"IBVERBS_1.1"),
        destroy_cq: sym!(c"ibv_destroy_cq", c"IBVERBS_1.1"),
        create_srq: sym!(c"ibv_create_srq", c"IBVERBS_1.1"),
        destroy_srq: sym!(c"ibv_destroy_srq", c"IBVERBS_1.1"),
    })
}

/// The process's libibverbs: its devices, opened on first use and kept
/// open (as librdmacm keeps them), each with a protection domain made
/// when an ID needs one.
type Dev = ((String, usize, usize), Vec<[u8; 16]>);

#[derive(Default)]
pub struct Libibverbs {
    syms: OnceLock<Option<Syms>>,
    /// (name, context, default PD) as addresses, and the GIDs of port 1.
    devs: Mutex<Option<Vec<Dev>>>,
}

impl Libibverbs {
    fn syms(&self) -> Option<&Syms> {
        self.syms.get_or_init(load).as_ref()
    }

    fn with_devs<T>(&self, f: impl FnOnce(&mut Vec<Dev>) -> T) -> Option<T> {
        let s = self.syms()?;
        let mut g = self.devs.lock().ok()?;
        if g.is_none() {
            *g = Some(Self::open_all(s)?);
        }
        g.as_mut().map(f)
    }

    /// Every device of libibverbs' list opened, with its GIDs; `None` (and
    /// nothing kept open) if there is none or one cannot be opened yet (a
    /// daemon still starting), so that the next call tries again.
    fn open_all(s: &Syms) -> Option<Vec<Dev>> {
        let mut n = 0;
        // SAFETY: libibverbs' device list; kept for the process (the
        // contexts opened from it stay open).
        let list = unsafe { (s.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            // no daemon yet: ask again next time
            return None;
        }
        let mut v: Vec<Dev> = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: entry i of the list of n devices.
            let d = unsafe { *list.add(i) };
            // SAFETY: a device of the list; its name is a C string.
            let name = unsafe { std::ffi::CStr::from_ptr((s.get_device_name)(d)) };
            // SAFETY: a device of the list.
            let ctx = unsafe { (s.open_device)(d) };
            if ctx.is_null() {
                for ((_, c, _), _) in v {
                    // SAFETY: a context opened above, used by nobody.
                    unsafe { (s.close_device)(c as *mut ibv_context) };
                }
                return None;
            }
            let mut gids = Vec::new();
            for i in 0..GIDS {
                let mut g = ibv_gid::default();
                // SAFETY: the context just opened and a GID to write.
                if unsafe { (s.query_gid)(ctx, 1, i, &mut g) } != 0 {
                    break;
                }
                gids.push(g.raw);
            }
            v.push(((name.to_string_lossy().into_owned(), ctx as usize, 0), gids));
        }
        Some(v)
    }
}

/// How many GID table entries are looked at.
const GIDS: c_int = 16;

impl Verbs for Libibverbs {
    fn devices(&self) -> Vec<(String, Vec<[u8; 16]>)> {
        self.with_devs(|d| d.iter().map(|e| (e.0 .0.clone(), e.1.clone())).collect())
            .unwrap_or_default()
    }
    fn context(&self, dev: &str) -> Option<*mut ibv_context> {
        self.with_devs(|d| {
            d.iter()
                .find(|e| e.0 .0 == dev)
                .map(|e| e.0 .1 as *mut ibv_context)
        })?
    }
    fn contexts(&self) -> Vec<*mut ibv_context> {
        self.with_devs(|d| d.iter().map(|e| e.0 .1 as *mut ibv_context).collect())
            .unwrap_or_default()
    }
    unsafe fn default_pd(&self, ctx: *mut ibv_context) -> *mut ibv_pd {
        let Some(s) = self.syms() else {
            return std::ptr::null_mut();
        };
        self.with_devs(|d| {
            let Some((e, _)) = d.iter_mut().find(|e| e.0 .1 == ctx as usize) else {
                return std::ptr::null_mut();
            };
            if e.2 == 0 {
                // SAFETY: an open context of this library's list.
                e.2 = unsafe { (s.alloc_pd)(ctx) } as usize;
            }
            e.2 as *mut ibv_pd
        })
        .unwrap_or(std::ptr::null_mut())
    }
    unsafe fn gid_index(&self, ctx: *mut ibv_context, gid: [u8; 16]) -> Option<u8> {
        self.with_devs(|d| {
            let (_, gids) = d.iter().find(|e| e.0 .1 == ctx as usize)?;
            gids.iter().rposition(|g| *g == gid).map(|i| i as u8)
        })?
    }
    unsafe fn create_qp(&self, pd: *mut ibv_pd, a: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(std::ptr::null_mut(), |s| unsafe { (s.create_qp)(pd, a) })
    }
    unsafe fn modify_qp(&self, qp: *mut ibv_qp, a: *mut ibv_qp_attr, mask: c_int) -> c_int {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(libc::ENOSYS, |s| unsafe { (s.modify_qp)(qp, a, mask) })
    }
    unsafe fn destroy_qp(&self, qp: *mut ibv_qp) -> c_int {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(libc::ENOSYS, |s| unsafe { (s.destroy_qp)(qp) })
    }
    unsafe fn create_comp_channel(&self, ctx: *mut ibv_context) -> *mut ibv_comp_channel {
        // SAFETY: the caller's promise.
        self.syms().map_or(std::ptr::null_mut(), |s| unsafe {
            (s.create_comp_channel)(ctx)
        })
    }
    unsafe fn destroy_comp_channel(&self, c: *mut ibv_comp_channel) -> c_int {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(libc::ENOSYS, |s| unsafe { (s.destroy_comp_channel)(c) })
    }
    unsafe fn create_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        chan: *mut ibv_comp_channel,
    ) -> *mut ibv_cq {
        // SAFETY: the caller's promise.
        self.syms().map_or(std::ptr::null_mut(), |s| unsafe {
            (s.create_cq)(ctx, cqe, cq_context, chan, 0)
        })
    }
    unsafe fn destroy_cq(&self, cq: *mut ibv_cq) -> c_int {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(libc::ENOSYS, |s| unsafe { (s.destroy_cq)(cq) })
    }
    unsafe fn create_srq(&self, pd: *mut ibv_pd, a: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(std::ptr::null_mut(), |s| unsafe { (s.create_srq)(pd, a) })
    }
    unsafe fn destroy_srq(&self, srq: *mut ibv_srq) -> c_int {
        // SAFETY: the caller's promise.
        self.syms()
            .map_or(libc::ENOSYS, |s| unsafe { (s.destroy_srq)(srq) })
    }
}
