//! Verbs objects: each is the `ibv_*` structure the application sees
//! (first, so the application's pointer is the object) followed by the
//! client library's handle. Control verbs are requests to the daemon;
//! QP attributes are checked there against the IBA state machine (IBA
//! 10.3.1, the attribute tables of 11.2.4.2 / `ibv_modify_qp(3)`).

use crate::abi::*;
use crate::device::{resolve_mac, Ctx, ROCE_V2_GID_INDEX};
use crate::{complain, errno_of, null_errno, set_errno};
use libc::{c_int, c_void};
use nic::verbs::{AhAttr, QpAttr, QpState};
use softrnic::client::{Buffer, QpInitAttr};
use softrnic::QpKind;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use wire::Gid;

/// Most bytes one inline send may carry (`cap.max_inline_data`).
pub const MAX_INLINE: u32 = 512;

fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- protection domains ---------------------------------------------------

#[repr(C)]
pub struct Pd {
    pub ibv: ibv_pd,
    pub inner: softrnic::Pd,
}

/// # Safety
/// `p` is NULL or a PD from `ibv_alloc_pd` not yet deallocated.
pub unsafe fn pd_of<'a>(p: *mut ibv_pd) -> Option<&'a Pd> {
    // SAFETY: Pd starts with its ibv_pd.
    (!p.is_null()).then(|| unsafe { &*(p as *const Pd) })
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `c` is an open context.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return null_errno(libc::EINVAL);
    };
    match ctx.inner.alloc_pd() {
        Ok(pd) => {
            let handle = pd.handle;
            boxed(Pd {
                ibv: ibv_pd { context: c, handle },
                inner: pd,
            }) as *mut ibv_pd
        }
        Err(e) => {
            complain("ibv_alloc_pd", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ibv_dealloc_pd`: EBUSY (and the PD kept) while objects use it.
///
/// # Safety
/// `p` is a PD from `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    if p.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by alloc_pd.
    let pd = unsafe { &*(p as *const Pd) };
    match pd.inner.dealloc_by_ref() {
        Ok(()) => {
            // SAFETY: made by Box in alloc_pd; the daemon has let it go.
            drop(unsafe { Box::from_raw(p as *mut Pd) });
            0
        }
        Err(e) => {
            complain("ibv_dealloc_pd", &e);
            libc::EBUSY
        }
    }
}

// ---- memory regions -------------------------------------------------------

#[repr(C)]
pub struct Mr {
    pub ibv: ibv_mr,
    pub inner: softrnic::Mr,
}

const ACCESS_KNOWN: c_int = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB;
/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a device may ignore.
const ACCESS_OPTIONAL: c_int = 0x3ff0_0000;

fn reg(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, access: c_int) -> *mut ibv_mr {
    // SAFETY: the application's PD.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let access = access & !ACCESS_OPTIONAL;
    if access & !ACCESS_KNOWN != 0 || addr.is_null() || len == 0 {
        return null_errno(libc::EINVAL);
    }
    // IBA 10.6.3.1: remote write or atomic access needs local write.
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && access & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return null_errno(libc::EINVAL);
    }
    if access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED) != 0 || iova != addr as u64 {
        complain(
            "ibv_reg_mr",
            "on-demand paging, zero-based regions and an iova other than the address are not supported",
        );
        return null_errno(libc::EOPNOTSUPP);
    }
    let acc = (access & 0x1f) as u32;
    match p.inner.reg_user_mr(addr as u64, len, acc) {
        Ok(mr) => boxed(Mr {
            ibv: ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: mr.lkey,
                lkey: mr.lkey,
                rkey: mr.rkey,
            },
            inner: mr,
        }) as *mut ibv_mr,
        Err(e) => {
            complain("ibv_reg_mr", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ibv_reg_mr`: any memory of the process (the client library moves the
/// pages onto shared memory at the same address, `softrnic::usermem`).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; [addr, addr+len) memory of this process.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, len, addr as u64, access)
}

/// `ibv_reg_mr_iova`.
///
/// # Safety
/// As `ibv_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, len, iova, access)
}

/// `ibv_reg_mr_iova2` (what the inline `ibv_reg_mr` calls when the access
/// flags are not a constant or carry optional bits).
///
/// # Safety
/// As `ibv_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    reg(pd, addr, len, iova, access as c_int)
}

/// `ibv_dereg_mr`.
///
/// # Safety
/// `m` from `ibv_reg_mr*`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by reg(); freed only once deregistered.
    let mr = unsafe { &*(m as *const Mr) };
    // refused, and the region kept, while memory windows are bound to it
    match mr.inner.try_dereg() {
        Ok(()) => {
            // SAFETY: made by reg() as a Box; the application is done with it.
            drop(unsafe { Box::from_raw(m as *mut Mr) });
            0
        }
        Err(e) => errno_of(&e),
    }
}

// ---- memory windows -----------------------------------------------------------

/// An `ibv_mw` and the daemon's window behind it.
#[repr(C)]
pub struct Mw {
    pub ibv: ibv_mw,
    pub inner: softrnic::Mw,
}

/// # Safety
/// `m` is NULL or a window from `ibv_alloc_mw` not yet deallocated.
pub unsafe fn mw_of<'a>(m: *mut ibv_mw) -> Option<&'a Mw> {
    // SAFETY: Mw starts with its ibv_mw.
    (!m.is_null()).then(|| unsafe { &*(m as *const Mw) })
}

/// `ops.alloc_mw` (the inline `ibv_alloc_mw`): a type 1 or type 2 (2B)
/// window in the PD.
///
/// # Safety
/// Called through the ops table with the application's PD (or NULL).
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_int) -> *mut ibv_mw {
    // SAFETY: the application's PD.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let Some(kind) = nic::verbs::MwType::from_ibv(mw_type as u32) else {
        return null_errno(libc::EINVAL);
    };
    match p.inner.alloc_mw(kind) {
        Ok(mw) => boxed(Mw {
            ibv: ibv_mw {
                context: p.ibv.context,
                pd,
                rkey: mw.rkey,
                handle: mw.handle,
                mw_type,
            },
            inner: mw,
        }) as *mut ibv_mw,
        Err(e) => {
            complain("ibv_alloc_mw", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ops.dealloc_mw` (the inline `ibv_dealloc_mw`).
///
/// # Safety
/// Called through the ops table with a window from `alloc_mw`, not used
/// afterwards.
pub unsafe extern "C" fn dealloc_mw(m: *mut ibv_mw) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by alloc_mw() as a Box; the application is done with it.
    let mw = unsafe { Box::from_raw(m as *mut Mw) };
    match mw.inner.dealloc() {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_rereg_mr`: not supported (IBV_REREG_MR_ERR_INPUT semantics are
/// left to deregistering and registering again).
#[no_mangle]
pub extern "C" fn srv_ibv_rereg_mr() -> c_int {
    libc::EOPNOTSUPP
}

// ---- fork -------------------------------------------------------------------

/// `ibv_fork_init`: registered pages are not inherited by children
/// (MADV_DONTFORK, as rdma-core does); without it a child gets private
/// copies of them.
#[no_mangle]
pub extern "C" fn srv_ibv_fork_init() -> c_int {
    softrnic::usermem::fork_init()
}

/// `ibv_is_fork_initialized`.
#[no_mangle]
pub extern "C" fn srv_ibv_is_fork_initialized() -> c_int {
    if softrnic::usermem::fork_initialized() {
        IBV_FORK_ENABLED
    } else {
        IBV_FORK_DISABLED
    }
}

fn madvise_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    let page = 4096usize;
    let start = (base as usize) & !(page - 1);
    let end = (base as usize).saturating_add(size).div_ceil(page) * page;
    // SAFETY: madvise only changes fork inheritance of the caller's pages.
    let r = unsafe { libc::madvise(start as *mut c_void, end - start, advice) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }
}

/// `ibv_dontfork_range`.
#[no_mangle]
pub extern "C" fn srv_ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DONTFORK)
}

/// `ibv_dofork_range`.
#[no_mangle]
pub extern "C" fn srv_ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DOFORK)
}

// ---- completion channels and CQs -------------------------------------------

/// A completion channel: one eventfd the daemon writes for every CQ on the
/// channel whose request fired; which CQ fired is read from the CQs'
/// request words (the daemon clears them as it fires). The application
/// sees an epoll descriptor watching the eventfd (`ibv.fd`): readable
/// exactly when the eventfd is, and its own file, so the application's
/// O_NONBLOCK (ibv_get_cq_event then returns EAGAIN) is not mixed up with
/// the flags the daemon sets on its duplicate of the eventfd.
#[repr(C)]
pub struct Channel {
    pub ibv: ibv_comp_channel,
    pub fd: OwnedFd,
    pub ep: OwnedFd,
    pub state: Mutex<ChannelState>,
}

/// An epoll descriptor that is readable while `fd` is.
pub fn watcher(fd: c_int) -> Result<OwnedFd, c_int> {
    // SAFETY: a new epoll instance we own, watching one descriptor.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        let ep = <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(ep);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        if libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        Ok(ep)
    }
}

#[derive(Default)]
pub struct ChannelState {
    /// CQs on the channel (`*mut Cq` as usize).
    pub cqs: Vec<usize>,
    /// CQs whose event fired and was not handed out yet.
    pub pending: VecDeque<usize>,
}

/// `ibv_create_comp_channel`.
///
/// # Safety
/// `c` is an open context.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: per the contract.
    if unsafe { Ctx::from(c) }.is_none() {
        return null_errno(libc::EINVAL);
    }
    // SAFETY: eventfd makes a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return null_errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE),
        );
    }
    // SAFETY: fd is ours.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let ep = match watcher(fd.as_raw_fd()) {
        Ok(ep) => ep,
        Err(e) => return null_errno(e),
    };
    boxed(Channel {
        ibv: ibv_comp_channel {
            context: c,
            fd: ep.as_raw_fd(),
            refcnt: 0,
        },
        fd,
        ep,
        state: Mutex::new(ChannelState::default()),
    }) as *mut ibv_comp_channel
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
///
/// # Safety
/// `ch` from `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by create_comp_channel.
    let chan = unsafe { &*(ch as *const Channel) };
    if !lock(&chan.state).cqs.is_empty() {
        return libc::EBUSY;
    }
    // SAFETY: made by Box in create_comp_channel; no CQ refers to it.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
    0
}

#[repr(C)]
pub struct Cq {
    pub ibv: ibv_cq,
    pub inner: Mutex<softrnic::Cq>,
    /// An event was asked for and has not been handed out.
    pub armed: AtomicBool,
    pub channel: *mut Channel,
}

/// # Safety
/// `c` is NULL or a CQ from `ibv_create_cq` not yet destroyed.
pub unsafe fn cq_of<'a>(c: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: Cq starts with its ibv_cq.
    (!c.is_null()).then(|| unsafe { &*(c as *const Cq) })
}

/// `ibv_create_cq`.
///
/// # Safety
/// `c` is an open context; `channel` NULL or one of its channels.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: per the contract.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return null_errno(libc::EINVAL);
    };
    if cqe < 1 || cqe as u32 > ctx.inner.device.max_cqe || comp_vector != 0 {
        return null_errno(libc::EINVAL);
    }
    let mut cq = match ctx.inner.create_cq(cqe as u32) {
        Ok(cq) => cq,
        Err(e) => {
            complain("ibv_create_cq", &e);
            return null_errno(errno_of(&e));
        }
    };
    let chan = channel as *mut Channel;
    if !chan.is_null() {
        // SAFETY: the application's channel.
        let fd = unsafe { (*chan).fd.as_raw_fd() };
        if let Err(e) = cq.notify_to(fd) {
            complain("ibv_create_cq", &e);
            let _ = cq.destroy();
            return null_errno(errno_of(&e));
        }
    }
    let handle = cq.handle;
    let entries = cq.entries() as c_int;
    // SAFETY: ibv_cq's mutex/cond: zero is their static initializer.
    let mut ibv: ibv_cq = unsafe { std::mem::zeroed() };
    ibv.context = c;
    ibv.channel = channel;
    ibv.cq_context = cq_context;
    ibv.handle = handle;
    ibv.cqe = entries;
    let p = boxed(Cq {
        ibv,
        inner: Mutex::new(cq),
        armed: AtomicBool::new(false),
        channel: chan,
    });
    if !chan.is_null() {
        // SAFETY: the application's channel.
        let ch = unsafe { &*chan };
        lock(&ch.state).cqs.push(p as usize);
        // SAFETY: as above.
        unsafe { (*chan).ibv.refcnt += 1 };
    }
    lock(&ctx.cqs).insert(handle, p as usize);
    p as *mut ibv_cq
}

/// `ibv_destroy_cq`: EBUSY (kept) while a QP uses it.
///
/// # Safety
/// `c` from `ibv_create_cq`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_cq(c: *mut ibv_cq) -> c_int {
    // SAFETY: per the contract.
    let Some(cq) = (unsafe { cq_of(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the CQ's context is open.
    let Some(ctx) = (unsafe { Ctx::from(cq.ibv.context) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = lock(&cq.inner).destroy_by_ref() {
        complain("ibv_destroy_cq", &e);
        return libc::EBUSY;
    }
    lock(&ctx.cqs).remove(&cq.ibv.handle);
    if !cq.channel.is_null() {
        // SAFETY: the channel outlives its CQs (destroy refuses otherwise).
        let ch = unsafe { &*cq.channel };
        let mut st = lock(&ch.state);
        st.cqs.retain(|x| *x != c as usize);
        st.pending.retain(|x| *x != c as usize);
        // SAFETY: as above.
        unsafe { (*cq.channel).ibv.refcnt -= 1 };
    }
    // SAFETY: made by Box in create_cq.
    drop(unsafe { Box::from_raw(c as *mut Cq) });
    0
}

/// `ibv_resize_cq`: not supported.
#[no_mangle]
pub extern "C" fn srv_ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    libc::EOPNOTSUPP
}

fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL on a descriptor the caller names.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

fn drain_eventfd(fd: c_int) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd; then an 8-byte read into a local.
    unsafe {
        if libc::poll(&mut pfd, 1, 0) == 1 {
            let mut v = 0u64;
            libc::read(fd, &mut v as *mut u64 as *mut c_void, 8);
        }
    }
}

/// `ibv_get_cq_event`: waits (unless the channel's fd is non-blocking)
/// for a CQ on the channel to fire; 0 and the CQ, or -1.
///
/// # Safety
/// `ch` from `ibv_create_comp_channel`; `cq`, `cq_context` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: made by create_comp_channel.
    let chan = unsafe { &*(ch as *const Channel) };
    let fd = chan.fd.as_raw_fd();
    loop {
        {
            let mut st = lock(&chan.state);
            drain_eventfd(fd);
            let fired: Vec<usize> = st
                .cqs
                .iter()
                .copied()
                .filter(|p| {
                    // SAFETY: CQs on the channel are alive (destroy removes them).
                    let c = unsafe { &*(*p as *const Cq) };
                    c.armed.load(Ordering::Acquire) && lock(&c.inner).armed() == 0
                })
                .collect();
            for p in fired {
                // SAFETY: as above.
                let c = unsafe { &*(p as *const Cq) };
                c.armed.store(false, Ordering::Release);
                st.pending.push_back(p);
            }
            if let Some(p) = st.pending.pop_front() {
                if !st.pending.is_empty() {
                    // more events wait: keep the descriptor readable
                    let one = 1u64;
                    // SAFETY: an 8-byte write to our eventfd.
                    unsafe { libc::write(fd, &one as *const u64 as *const c_void, 8) };
                }
                // SAFETY: the caller's out-pointers; p is a live Cq.
                unsafe {
                    *cq = p as *mut ibv_cq;
                    *cq_context = (*(p as *const Cq)).ibv.cq_context;
                }
                return 0;
            }
        }
        if nonblocking(chan.ep.as_raw_fd()) {
            set_errno(libc::EAGAIN);
            return -1;
        }
        let mut pfd = libc::pollfd {
            fd: chan.ep.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on our eventfd.
        let r = unsafe { libc::poll(&mut pfd, 1, -1) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return -1;
        }
    }
}

/// `ibv_ack_cq_events`.
///
/// # Safety
/// `c` from `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_ack_cq_events(c: *mut ibv_cq, n: u32) {
    if !c.is_null() {
        // SAFETY: the application's CQ.
        unsafe { (*c).comp_events_completed = (*c).comp_events_completed.wrapping_add(n) };
    }
}

// ---- queue pairs ------------------------------------------------------------

#[repr(C)]
pub struct Qp {
    pub ibv: ibv_qp,
    pub inner: Mutex<QpInner>,
}

pub struct QpInner {
    pub q: softrnic::Qp,
    pub kind: QpKind,
    /// Sends posted (the send ring's producer index: slot of the next
    /// inline copy).
    pub posted: u32,
    /// Inline sends are copied here (one `MAX_INLINE` slot per ring entry)
    /// and sent from this region: (buffer, lkey, slots).
    pub inline: Option<(Buffer, softrnic::Mr, u32)>,
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    /// The attributes last set, for `ibv_query_qp`.
    pub attr: ibv_qp_attr,
}

/// # Safety
/// `q` is NULL or a QP from `ibv_create_qp` not yet destroyed.
pub unsafe fn qp_of<'a>(q: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: Qp starts with its ibv_qp.
    (!q.is_null()).then(|| unsafe { &*(q as *const Qp) })
}

fn create_qp_common(pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: the application's PD.
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    // SAFETY: the PD's context is open.
    let ctx = unsafe { Ctx::from(p.ibv.context) }.ok_or(libc::EINVAL)?;
    let kind = match attr.qp_type {
        IBV_QPT_RC => QpKind::Rc,
        IBV_QPT_UC => QpKind::Uc,
        IBV_QPT_UD => QpKind::Ud,
        t => {
            complain(
                "ibv_create_qp",
                format!("QP type {t} is not supported (RC, UC, UD are)"),
            );
            return Err(libc::EOPNOTSUPP);
        }
    };
    // SAFETY: the application's CQs / SRQ (NULL checked).
    let (scq, rcq) = unsafe { (cq_of(attr.send_cq), cq_of(attr.recv_cq)) };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: as above.
    let srq = unsafe { srq_of(attr.srq) };
    let d = &ctx.inner.device;
    let cap = &mut attr.cap;
    if cap.max_send_wr > d.max_qp_wr
        || (srq.is_none() && cap.max_recv_wr > d.max_qp_wr)
        || cap.max_send_sge > d.max_sge
        || cap.max_recv_sge > d.max_sge
    {
        return Err(libc::EINVAL);
    }
    if cap.max_inline_data > MAX_INLINE {
        return Err(libc::EINVAL);
    }
    let init = QpInitAttr {
        qp_type: kind,
        send_cq: scq.ibv.handle,
        recv_cq: rcq.ibv.handle,
        max_send_wr: cap.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() {
            0
        } else {
            cap.max_recv_wr.max(1)
        },
        sq_sig_all: attr.sq_sig_all != 0,
        srq: srq.map(|s| s.ibv.handle),
    };
    let q = p.inner.create_qp(&init).map_err(|e| {
        complain("ibv_create_qp", &e);
        errno_of(&e)
    })?;
    let (sq_entries, rq_entries) = q.entries();
    let inline = if cap.max_inline_data > 0 {
        let bytes = sq_entries as usize * MAX_INLINE as usize;
        let made = p
            .inner
            .alloc_buffer(bytes)
            .and_then(|b| p.inner.reg_mr(&b, 0, bytes, 0).map(|m| (b, m)));
        match made {
            Ok((b, m)) => Some((b, m, sq_entries)),
            Err(e) => {
                complain("ibv_create_qp", format!("inline buffer: {e}"));
                let _ = q.destroy();
                return Err(errno_of(&e));
            }
        }
    } else {
        None
    };
    // what the QP really has (IBA 11.2.4.1: at least what was asked)
    cap.max_send_wr = sq_entries;
    if srq.is_none() {
        cap.max_recv_wr = rq_entries;
    } else {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    cap.max_send_sge = d.max_sge;
    if srq.is_none() {
        cap.max_recv_sge = d.max_sge;
    }
    cap.max_inline_data = if inline.is_some() { MAX_INLINE } else { 0 };
    let qpn = q.qpn;
    // SAFETY: ibv_qp's mutex/cond: zero is their static initializer.
    let mut ibv: ibv_qp = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.qp_context = attr.qp_context;
    ibv.pd = pd;
    ibv.send_cq = attr.send_cq;
    ibv.recv_cq = attr.recv_cq;
    ibv.srq = attr.srq;
    ibv.handle = qpn;
    ibv.qp_num = qpn;
    ibv.state = IBV_QPS_RESET;
    ibv.qp_type = attr.qp_type;
    let qa = ibv_qp_attr {
        cap: *cap,
        ..Default::default()
    };
    let ptr = boxed(Qp {
        ibv,
        inner: Mutex::new(QpInner {
            q,
            kind,
            posted: 0,
            inline,
            cap: *cap,
            sq_sig_all: attr.sq_sig_all != 0,
            attr: qa,
        }),
    });
    lock(&ctx.qps).insert(qpn, ptr as usize);
    Ok(ptr as *mut ibv_qp)
}

/// `ibv_create_qp` (RC, UC, UD; optionally on an SRQ).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable (`cap` is
/// updated to what the QP has).
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    match create_qp_common(pd, unsafe { &mut *attr }) {
        Ok(q) => q,
        Err(e) => null_errno(e),
    }
}

/// `verbs_context.create_qp_ex`: the attributes of `ibv_create_qp` with a
/// PD; extended features (send-ops flags for the `ibv_wr_*` API, create
/// flags, XRC, RSS, source QPN) are not supported.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn create_qp_ex(
    _c: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        complain(
            "ibv_create_qp_ex",
            "only the ibv_create_qp attributes (with a PD) are supported",
        );
        return null_errno(libc::EOPNOTSUPP);
    }
    // SAFETY: ibv_qp_init_attr_ex begins with the fields of ibv_qp_init_attr.
    let base = unsafe { &mut *(attr as *mut ibv_qp_init_attr) };
    match create_qp_common(a.pd, base) {
        Ok(q) => q,
        Err(e) => null_errno(e),
    }
}

/// `ibv_qp_to_qp_ex`: NULL (QPs made here do not use the `ibv_wr_*` API).
#[no_mangle]
pub extern "C" fn srv_ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    null_errno(libc::EOPNOTSUPP)
}

fn state_from(s: c_int) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

fn state_to(s: QpState) -> c_int {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

/// The address vector of a RoCE path: a GRH is required (RoCE has no
/// LIDs, IBA A16/A17: the GRH carries the addresses), its source GID must
/// be the one softrnic sends from.
pub fn av_from(verb: &str, a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        complain(
            verb,
            "RoCE needs a GRH (is_global = 1, the peer's GID; e.g. -g 3 / -x 3)",
        );
        return Err(libc::EINVAL);
    }
    if a.grh.sgid_index as usize != ROCE_V2_GID_INDEX {
        complain(
            verb,
            format!(
                "GID index {} is not softrnic's RoCE v2 GID; use index {ROCE_V2_GID_INDEX}",
                a.grh.sgid_index
            ),
        );
        return Err(libc::EINVAL);
    }
    let dgid = Gid(a.grh.dgid.raw);
    let dmac = resolve_mac(dgid).map_err(|e| {
        complain(verb, e);
        libc::EHOSTUNREACH
    })?;
    Ok(AhAttr {
        dgid,
        dmac,
        traffic_class: a.grh.traffic_class,
        hop_limit: if a.grh.hop_limit == 0 {
            64
        } else {
            a.grh.hop_limit
        },
        flow_label: a.grh.flow_label & 0xf_ffff,
        vlan: None,
    })
}

fn mtu_bytes(m: c_int) -> Option<u32> {
    Some(match m {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => return None,
    })
}

/// The attributes `ibv_modify_qp` remembers for `ibv_query_qp`: mask bit
/// and the fields it names.
type CopyAttr = fn(&mut ibv_qp_attr, &ibv_qp_attr);
const CACHED: &[(c_int, CopyAttr)] = &[
    (IBV_QP_STATE, |c, a| c.qp_state = a.qp_state),
    (IBV_QP_PKEY_INDEX, |c, a| c.pkey_index = a.pkey_index),
    (IBV_QP_PORT, |c, a| c.port_num = a.port_num),
    (IBV_QP_ACCESS_FLAGS, |c, a| {
        c.qp_access_flags = a.qp_access_flags
    }),
    (IBV_QP_QKEY, |c, a| c.qkey = a.qkey),
    (IBV_QP_AV, |c, a| c.ah_attr = a.ah_attr),
    (IBV_QP_PATH_MTU, |c, a| c.path_mtu = a.path_mtu),
    (IBV_QP_DEST_QPN, |c, a| c.dest_qp_num = a.dest_qp_num),
    (IBV_QP_RQ_PSN, |c, a| c.rq_psn = a.rq_psn),
    (IBV_QP_MAX_DEST_RD_ATOMIC, |c, a| {
        c.max_dest_rd_atomic = a.max_dest_rd_atomic
    }),
    (IBV_QP_MIN_RNR_TIMER, |c, a| {
        c.min_rnr_timer = a.min_rnr_timer
    }),
    (IBV_QP_SQ_PSN, |c, a| c.sq_psn = a.sq_psn),
    (IBV_QP_TIMEOUT, |c, a| c.timeout = a.timeout),
    (IBV_QP_RETRY_CNT, |c, a| c.retry_cnt = a.retry_cnt),
    (IBV_QP_RNR_RETRY, |c, a| c.rnr_retry = a.rnr_retry),
    (IBV_QP_MAX_QP_RD_ATOMIC, |c, a| {
        c.max_rd_atomic = a.max_rd_atomic
    }),
];

/// `ibv_modify_qp`: the attributes in `mask` to the daemon, which applies
/// the IBA state machine's rules (required and allowed attributes per
/// transition).
///
/// # Safety
/// `q` from `ibv_create_qp`, `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_modify_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(qp), false) = (unsafe { qp_of(q) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    let unsupported = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_RATE_LIMIT;
    if mask & unsupported != 0 {
        complain(
            "ibv_modify_qp",
            "alternate paths, path migration and rate limits are not supported",
        );
        return libc::EOPNOTSUPP;
    }
    let has = |m: c_int| mask & m != 0;
    let mut m = QpAttr::default();
    if has(IBV_QP_STATE) {
        match state_from(a.qp_state) {
            Some(s) => m.state = Some(s),
            None => return libc::EINVAL,
        }
    }
    if has(IBV_QP_PKEY_INDEX) {
        m.pkey_index = Some(a.pkey_index);
    }
    if has(IBV_QP_PORT) {
        m.port = Some(a.port_num);
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        m.access_flags = Some(a.qp_access_flags & 0xf);
    }
    if has(IBV_QP_QKEY) {
        m.qkey = Some(a.qkey);
    }
    if has(IBV_QP_AV) {
        match av_from("ibv_modify_qp", &a.ah_attr) {
            Ok(av) => m.ah = Some(av),
            Err(e) => return e,
        }
    }
    if has(IBV_QP_PATH_MTU) {
        match mtu_bytes(a.path_mtu) {
            Some(b) => m.path_mtu = Some(b),
            None => return libc::EINVAL,
        }
    }
    if has(IBV_QP_DEST_QPN) {
        m.dest_qpn = Some(a.dest_qp_num);
    }
    if has(IBV_QP_RQ_PSN) {
        m.rq_psn = Some(a.rq_psn & 0xff_ffff);
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        m.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        m.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if has(IBV_QP_SQ_PSN) {
        m.sq_psn = Some(a.sq_psn & 0xff_ffff);
    }
    if has(IBV_QP_TIMEOUT) {
        m.timeout = Some(a.timeout);
    }
    if has(IBV_QP_RETRY_CNT) {
        m.retry_cnt = Some(a.retry_cnt);
    }
    if has(IBV_QP_RNR_RETRY) {
        m.rnr_retry = Some(a.rnr_retry);
    }
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        m.max_rd_atomic = Some(a.max_rd_atomic);
    }
    let mut g = lock(&qp.inner);
    if let Err(e) = g.q.modify(&m) {
        complain("ibv_modify_qp", &e);
        return libc::EINVAL;
    }
    // remember what was set, for ibv_query_qp
    for (bit, copy) in CACHED {
        if has(*bit) {
            copy(&mut g.attr, a);
        }
    }
    if has(IBV_QP_STATE) {
        // SAFETY: the application's QP; its state field mirrors ours.
        unsafe { (*q).state = a.qp_state };
    }
    0
}

/// `ibv_query_qp`: the state, PSNs, destination and MTU from the daemon,
/// the rest as last set.
///
/// # Safety
/// `q` from `ibv_create_qp`; `attr`, `init` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(qp), false) = (unsafe { qp_of(q) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    let g = lock(&qp.inner);
    let info = match g.q.query() {
        Ok(i) => i,
        Err(e) => return errno_of(&e),
    };
    let mut a = g.attr;
    a.qp_state = state_to(info.state);
    a.cur_qp_state = a.qp_state;
    a.dest_qp_num = info.dest_qpn;
    a.sq_psn = info.sq_psn;
    a.rq_psn = info.rq_psn;
    if info.mtu != 0 {
        a.path_mtu = crate::device::mtu_enum(info.mtu);
    }
    a.cap = g.cap;
    // SAFETY: the caller's structs; the QP's fields are ours.
    unsafe {
        *attr = a;
        (*q).state = a.qp_state;
        if !init.is_null() {
            *init = ibv_qp_init_attr {
                qp_context: qp.ibv.qp_context,
                send_cq: qp.ibv.send_cq,
                recv_cq: qp.ibv.recv_cq,
                srq: qp.ibv.srq,
                cap: g.cap,
                qp_type: qp.ibv.qp_type,
                sq_sig_all: g.sq_sig_all as c_int,
            };
        }
    }
    0
}

/// `ibv_query_qp_data_in_order`: 0 (no promise beyond the IBA's).
#[no_mangle]
pub extern "C" fn srv_ibv_query_qp_data_in_order() -> c_int {
    0
}

/// `ibv_destroy_qp`.
///
/// # Safety
/// `q` from `ibv_create_qp`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_qp(q: *mut ibv_qp) -> c_int {
    // SAFETY: per the contract.
    let Some(qp) = (unsafe { qp_of(q) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the QP's context is open.
    if let Some(ctx) = unsafe { Ctx::from(qp.ibv.context) } {
        lock(&ctx.qps).remove(&qp.ibv.qp_num);
    }
    // SAFETY: made by Box in create_qp_common.
    let b = unsafe { Box::from_raw(q as *mut Qp) };
    let inner = b.inner.into_inner().unwrap_or_else(|e| e.into_inner());
    let r = inner.q.destroy();
    if let Some((_buf, mr, _)) = inner.inline {
        let _ = mr.dereg();
    }
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

// ---- shared receive queues ---------------------------------------------------

#[repr(C)]
pub struct Srq {
    pub ibv: ibv_srq,
    pub inner: Mutex<softrnic::Srq>,
    pub max_wr: u32,
}

/// # Safety
/// `s` is NULL or an SRQ from `ibv_create_srq` not yet destroyed.
pub unsafe fn srq_of<'a>(s: *mut ibv_srq) -> Option<&'a Srq> {
    // SAFETY: Srq starts with its ibv_srq.
    (!s.is_null()).then(|| unsafe { &*(s as *const Srq) })
}

/// `ibv_create_srq`.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: per the contract.
    let (Some(p), false) = (unsafe { pd_of(pd) }, attr.is_null()) else {
        return null_errno(libc::EINVAL);
    };
    // SAFETY: the PD's context is open.
    let Some(ctx) = (unsafe { Ctx::from(p.ibv.context) }) else {
        return null_errno(libc::EINVAL);
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let d = &ctx.inner.device;
    if a.attr.max_wr == 0 || a.attr.max_wr > d.max_qp_wr || a.attr.max_sge > d.max_sge {
        return null_errno(libc::EINVAL);
    }
    let s = match p.inner.create_srq(a.attr.max_wr) {
        Ok(s) => s,
        Err(e) => {
            complain("ibv_create_srq", &e);
            return null_errno(errno_of(&e));
        }
    };
    if a.attr.srq_limit > 0 {
        if let Err(e) = s.arm_limit(a.attr.srq_limit) {
            complain("ibv_create_srq", &e);
        }
    }
    let handle = s.handle;
    let entries = s.entries();
    a.attr.max_wr = entries;
    a.attr.max_sge = d.max_sge;
    // SAFETY: mutex/cond: zero is their static initializer.
    let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.srq_context = a.srq_context;
    ibv.pd = pd;
    ibv.handle = handle;
    let ptr = boxed(Srq {
        ibv,
        inner: Mutex::new(s),
        max_wr: entries,
    });
    lock(&ctx.srqs).insert(handle, ptr as usize);
    ptr as *mut ibv_srq
}

/// `ibv_modify_srq`: the limit (IBV_SRQ_LIMIT); resizing is not supported.
///
/// # Safety
/// `s` from `ibv_create_srq`; `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_modify_srq(
    s: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(srq), false) = (unsafe { srq_of(s) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    if mask & IBV_SRQ_MAX_WR != 0 {
        return libc::EOPNOTSUPP;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        // SAFETY: the caller's attributes.
        let limit = unsafe { (*attr).srq_limit };
        if limit > srq.max_wr {
            return libc::EINVAL;
        }
        if let Err(e) = lock(&srq.inner).arm_limit(limit) {
            return errno_of(&e);
        }
    }
    0
}

/// `ibv_query_srq`.
///
/// # Safety
/// `s` from `ibv_create_srq`; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_srq(s: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: per the contract.
    let (Some(srq), false) = (unsafe { srq_of(s) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    match lock(&srq.inner).query() {
        Ok((max_wr, limit, _)) => {
            // SAFETY: the caller's struct.
            unsafe {
                *attr = ibv_srq_attr {
                    max_wr,
                    max_sge: nic::verbs::MAX_SGE as u32,
                    srq_limit: limit,
                }
            };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `verbs_context.get_srq_num`.
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn get_srq_num(s: *mut ibv_srq, n: *mut u32) -> c_int {
    // SAFETY: the application's SRQ.
    let (Some(srq), false) = (unsafe { srq_of(s) }, n.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's int.
    unsafe { *n = srq.ibv.handle };
    0
}

/// `ibv_destroy_srq`: EBUSY (and kept) while QPs use it.
///
/// # Safety
/// `s` from `ibv_create_srq`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_srq(s: *mut ibv_srq) -> c_int {
    // SAFETY: per the contract.
    let Some(srq) = (unsafe { srq_of(s) }) else {
        return libc::EINVAL;
    };
    if let Err(e) = lock(&srq.inner).destroy_by_ref() {
        complain("ibv_destroy_srq", &e);
        return libc::EBUSY;
    }
    // SAFETY: the SRQ's context is open.
    if let Some(ctx) = unsafe { Ctx::from(srq.ibv.context) } {
        lock(&ctx.srqs).remove(&srq.ibv.handle);
    }
    // SAFETY: made by Box in create_srq.
    drop(unsafe { Box::from_raw(s as *mut Srq) });
    0
}

// ---- address handles ---------------------------------------------------------

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
    // SAFETY: per the contract.
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
    // SAFETY: per the contract.
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
    // SAFETY: per the contract.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let mut a = ibv_ah_attr::default();
    // SAFETY: per the contract.
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

// ---- asynchronous events -------------------------------------------------------

/// `ibv_get_async_event`: waits (unless `async_fd` is non-blocking) for
/// the next event on one of this context's objects or its port.
///
/// # Safety
/// `c` open; `ev` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_get_async_event(
    c: *mut ibv_context,
    ev: *mut ibv_async_event,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(ctx), false) = (unsafe { Ctx::from(c) }, ev.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // async_fd is an epoll descriptor watching the client library's
    // eventfd (device.rs): its flags are the application's
    let nb = nonblocking(ctx.vctx.context.async_fd);
    loop {
        let wait = if nb {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(3600)
        };
        let msg = match ctx.inner.get_async_event(wait) {
            Ok(Some(m)) => m,
            Ok(None) if nb => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            Ok(None) => continue,
            Err(e) => {
                set_errno(errno_of(&e));
                return -1;
            }
        };
        use softrnic::proto::AsyncEventMsg as M;
        let Some(ty) = msg.ibv_event_type() else {
            continue;
        };
        let look =
            |m: &Mutex<std::collections::HashMap<u32, usize>>, k: u32| lock(m).get(&k).copied();
        let element = match msg {
            M::CqErr { cq } => look(&ctx.cqs, cq).map(|p| ibv_async_event_element {
                cq: p as *mut ibv_cq,
            }),
            M::SrqLimitReached { srq } => look(&ctx.srqs, srq).map(|p| ibv_async_event_element {
                srq: p as *mut ibv_srq,
            }),
            M::QpFatal { qp }
            | M::QpReqErr { qp }
            | M::QpAccessErr { qp }
            | M::CommEst { qp }
            | M::SqDrained { qp }
            | M::QpLastWqeReached { qp } => look(&ctx.qps, qp).map(|p| ibv_async_event_element {
                qp: p as *mut ibv_qp,
            }),
            M::PortActive { port } | M::PortErr { port } => Some(ibv_async_event_element {
                port_num: port as c_int,
            }),
            M::Unknown => None,
        };
        // events of objects already destroyed are dropped
        let Some(element) = element else {
            continue;
        };
        // SAFETY: the caller's struct.
        unsafe {
            *ev = ibv_async_event {
                element,
                event_type: ty as c_int,
            }
        };
        return 0;
    }
}

/// `ibv_ack_async_event`: counts the acknowledgement on the object.
///
/// # Safety
/// `ev` from `ibv_get_async_event`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_ack_async_event(ev: *mut ibv_async_event) {
    if ev.is_null() {
        return;
    }
    // SAFETY: the event names a live object of the right kind.
    unsafe {
        match (*ev).event_type {
            0 => {
                let cq = (*ev).element.cq;
                if !cq.is_null() {
                    (*cq).async_events_completed += 1;
                }
            }
            14 | 15 => {
                let s = (*ev).element.srq;
                if !s.is_null() {
                    (*s).events_completed += 1;
                }
            }
            1..=7 | 16 => {
                let q = (*ev).element.qp;
                if !q.is_null() {
                    (*q).events_completed += 1;
                }
            }
            _ => {}
        }
    }
}
