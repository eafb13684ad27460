//! Completion channels and completion queues (their control verbs; polling
//! is in `datapath`).

use super::*;

/// A completion channel: one eventfd the daemon writes for every CQ on the
/// channel whose request fired; which CQ fired is read from the CQs'
/// request words (the daemon clears them as it fires), and CQs found fired
/// together are handed out in the order they fired (their rings' event
/// sequence words), which is the order of their completions. The application
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
    /// The context, which makes `fd` readable when the daemon goes away
    /// (registered as `wake`).
    pub ctx: std::sync::Arc<softrnic::Context>,
    pub wake: u64,
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
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return null_errno(libc::EINVAL);
    };
    if ctx.inner.is_dead() {
        return null_errno(libc::EIO);
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
    // a dead daemon wakes the channel's waiters (ibv_get_cq_event)
    let wake = match ctx.inner.wake_on_death(fd.as_fd()) {
        Ok(id) => id,
        Err(e) => return null_errno(errno_of(&e)),
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
        ctx: ctx.inner.clone(),
        wake,
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
    chan.ctx.forget_wake(chan.wake);
    // SAFETY: made by Box in create_comp_channel; no CQ refers to it.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
    0
}

/// A CQ: its `ibv_cq_ex` (whose first fields are the `ibv_cq`'s, so the
/// application's `ibv_cq *` and `ibv_cq_ex *` both name the object; the
/// polling calls and accessors are filled for every CQ).
#[repr(C)]
pub struct Cq {
    pub ex: ibv_cq_ex,
    pub inner: Mutex<softrnic::Cq>,
    /// The current completion of `ibv_start_poll` / `ibv_next_poll`.
    pub cur: Mutex<ibv_wc>,
    /// An event was asked for and has not been handed out.
    pub armed: AtomicBool,
    pub channel: *mut Channel,
    /// The QPs whose completions come here, with their outstanding WRs.
    pub attached: Mutex<Vec<Attached>>,
}

/// # Safety
/// `c` is NULL or a CQ from `ibv_create_cq` not yet destroyed.
pub unsafe fn cq_of<'a>(c: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: Cq starts with its ibv_cq.
    (!c.is_null()).then(|| unsafe { &*(c as *const Cq) })
}

/// What `ibv_create_cq` and `ibv_create_cq_ex` share: the CQ of at least
/// `cqe` entries on `channel` (NULL: none).
///
/// # Safety
/// `c` is NULL or an open context; `channel` NULL or one of its channels.
unsafe fn create_cq_common(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut Cq, c_int> {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let ctx = unsafe { Ctx::from(c) }.ok_or(libc::EINVAL)?;
    let max = ctx.inner.device.max_cqe;
    if cqe < 1 || cqe as u32 > max {
        complain(
            "ibv_create_cq",
            format!("{cqe} entries: the device takes 1 to {max}"),
        );
        return Err(libc::EINVAL);
    }
    if comp_vector != 0 {
        complain(
            "ibv_create_cq",
            format!("completion vector {comp_vector}: the device has one, 0"),
        );
        return Err(libc::EINVAL);
    }
    let mut cq = ctx.inner.create_cq(cqe as u32).map_err(|e| {
        complain("ibv_create_cq", &e);
        errno_of(&e)
    })?;
    let chan = channel as *mut Channel;
    if !chan.is_null() {
        // SAFETY: the application's channel.
        let fd = unsafe { (*chan).fd.as_raw_fd() };
        if let Err(e) = cq.notify_to(fd) {
            complain("ibv_create_cq", &e);
            let _ = cq.destroy();
            return Err(errno_of(&e));
        }
    }
    let handle = cq.handle;
    let entries = cq.entries() as c_int;
    // SAFETY: ibv_cq_ex is pointers, integers, optional function pointers
    // and ibv_cq's mutex/cond, whose static initializer is all zero.
    let mut ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ex.cq.context = c;
    ex.cq.channel = channel;
    ex.cq.cq_context = cq_context;
    ex.cq.handle = handle;
    ex.cq.cqe = entries;
    // every CQ can be polled both ways: a start_poll on a CQ from
    // ibv_create_cq is not a call through NULL
    crate::datapath::poll_ex::install(&mut ex);
    let p = boxed(Cq {
        ex,
        inner: Mutex::new(cq),
        cur: Mutex::new(ibv_wc::default()),
        armed: AtomicBool::new(false),
        channel: chan,
        attached: Mutex::new(Vec::new()),
    });
    if !chan.is_null() {
        // SAFETY: the application's channel.
        let ch = unsafe { &*chan };
        lock(&ch.state).cqs.push(p as usize);
        // SAFETY: as above.
        unsafe { (*chan).ibv.refcnt += 1 };
    }
    lock(&ctx.cqs).insert(handle, p as usize);
    Ok(p)
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
    // SAFETY: this function's contract is create_cq_common's.
    match unsafe { create_cq_common(c, cqe, cq_context, channel, comp_vector) } {
        Ok(p) => p as *mut ibv_cq,
        Err(e) => null_errno(e),
    }
}

/// `verbs_context.create_cq_ex` (the inline `ibv_create_cq_ex`): a CQ
/// polled with `ibv_start_poll` and read with `ibv_wc_read_*`. The
/// `wc_flags` must be among the fields an `ibv_wc` has
/// (`IBV_WC_STANDARD_FLAGS`, as rxe); the single-threaded hint is
/// accepted. Timestamps, VLAN, flow tags, tag matching, parent domains
/// and ignoring overruns are refused with EOPNOTSUPP, unknown mask bits
/// with EINVAL (rdma-core's answers).
///
/// # Safety
/// Called through the ops table with the application's context and
/// attributes (or NULL).
pub unsafe extern "C" fn create_cq_ex(
    c: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: NULL or the caller's attributes.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return null_errno(libc::EINVAL);
    };
    let refuse = |why: String| {
        complain("ibv_create_cq_ex", why);
        null_errno(libc::EOPNOTSUPP)
    };
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return null_errno(libc::EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        return refuse("parent domains are not supported".into());
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
        && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
    {
        return refuse(format!("CQ flags {:#x} are not supported", a.flags));
    }
    let extra = a.wc_flags & !crate::datapath::poll_ex::SUPPORTED_WC_FLAGS;
    if extra != 0 {
        return refuse(format!(
            "wc_flags {extra:#x} are not supported (timestamps, VLAN, flow tag, tag matching)"
        ));
    }
    let cqe = c_int::try_from(a.cqe).unwrap_or(c_int::MAX);
    let vector = c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX);
    // SAFETY: the application's context and channel (this function's
    // contract is create_cq_common's).
    match unsafe { create_cq_common(c, cqe, a.cq_context, a.channel, vector) } {
        Ok(p) => p as *mut ibv_cq_ex,
        Err(e) => null_errno(e),
    }
}

/// `ibv_destroy_cq`: EBUSY (kept) while a QP uses it.
///
/// # Safety
/// `c` from `ibv_create_cq`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_cq(c: *mut ibv_cq) -> c_int {
    // SAFETY: `c` is NULL or a live CQ of this library's (this function's
    // contract), as cq_of requires.
    let Some(cq) = (unsafe { cq_of(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the CQ's context is open.
    let Some(ctx) = (unsafe { Ctx::from(cq.ex.cq.context) }) else {
        return libc::EINVAL;
    };
    // a QP still completes here (the daemon says so too while it lives)
    if !lock(&cq.attached).is_empty() {
        return libc::EBUSY;
    }
    if let Err(e) = lock(&cq.inner).destroy_by_ref() {
        complain("ibv_destroy_cq", &e);
        return libc::EBUSY;
    }
    lock(&ctx.cqs).remove(&cq.ex.cq.handle);
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

/// `ibv_resize_cq`: the CQ gets a ring of at least `cqe` entries (its
/// `cqe` says how many) holding the completions not yet polled; EINVAL
/// for a size out of range or below those completions, as rxe answers.
///
/// # Safety
/// `c` is NULL or a CQ of this library's.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_resize_cq(c: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: `c` is NULL or a live CQ of this library's (this function's
    // contract), as cq_of requires.
    let Some(cq) = (unsafe { cq_of(c) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the CQ's context is open.
    let Some(ctx) = (unsafe { Ctx::from(cq.ex.cq.context) }) else {
        return libc::EINVAL;
    };
    if cqe < 1 || cqe as u32 > ctx.inner.device.max_cqe {
        return libc::EINVAL;
    }
    let mut g = lock(&cq.inner);
    match g.resize(cqe as u32) {
        Ok(entries) => {
            // SAFETY: the application's CQ; its cqe field is ours to set,
            // under the CQ's lock.
            unsafe { (*c).cqe = entries as c_int };
            0
        }
        Err(e) => {
            complain("ibv_resize_cq", &e);
            errno_of(&e)
        }
    }
}

pub(super) fn nonblocking(fd: c_int) -> bool {
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
    // a post may have left the engine's wake owed: the program waits now
    // (and an engine in this process is no longer turned by it)
    chan.ctx.pay_owed_wake();
    chan.ctx.leave_local();
    loop {
        {
            let mut st = lock(&chan.state);
            drain_eventfd(fd);
            // a dead daemon fires no more events: every armed CQ fires now,
            // for its waiter to poll the flushed WRs
            let dead = chan.ctx.is_dead();
            // (the CQ, the daemon's event count when it fired)
            let mut fired: Vec<(usize, u32)> = st
                .cqs
                .iter()
                .filter_map(|&p| {
                    // SAFETY: CQs on the channel are alive (destroy removes them).
                    let c = unsafe { &*(p as *const Cq) };
                    let inner = lock(&c.inner);
                    let fired = c.armed.load(Ordering::Acquire) && (dead || inner.armed() == 0);
                    fired.then(|| (p, inner.event_seq()))
                })
                .collect();
            // in the order they fired, which follows their completions
            if let Some(&(_, first)) = fired.first() {
                fired.sort_by_key(|&(_, seq)| seq.wrapping_sub(first) as i32);
            }
            for (p, _) in fired {
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
                    *cq_context = (*(p as *const Cq)).ex.cq.cq_context;
                }
                return 0;
            }
            if dead {
                // nothing armed on a failed device: no event will come
                set_errno(libc::EIO);
                return -1;
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
