//! Noticing that the daemon went away. rnicd killed or crashed is, to its
//! clients, a failed device: a watcher thread waits for the control
//! socket's hang-up and marks the context dead; every descriptor a client
//! asked to be woken then ([`Context::wake_on_death`]: completion
//! channels, the async-event descriptor) becomes readable, so nothing
//! blocks on a device that will never answer. The data path only reads
//! the flag ([`Context::is_dead`]): no system call is added to it.

use super::*;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

/// Whether the daemon is gone, and whom to wake when it goes.
#[derive(Default)]
pub(super) struct Liveness {
    dead: AtomicBool,
    /// The fatal event was handed out (`take_fatal_event`).
    reported: AtomicBool,
    /// Descriptors to make readable on death: (id, a duplicate).
    wake: Mutex<(u64, Vec<(u64, OwnedFd)>)>,
}

impl Liveness {
    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Marks the daemon gone; the first call wakes every registered
    /// descriptor.
    pub(super) fn die(&self) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        let g = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        for (_, fd) in &g.1 {
            nic::io::bell::ring_fd(fd.as_fd());
        }
    }
}

/// The watcher thread and the eventfd that stops it.
pub(super) struct Watcher {
    stop: nic::io::Bell,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: a child made by fork(2) has
    /// the handle but not the thread, which it must neither join nor
    /// detach.
    pid: u32,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let t = self.thread.take();
        if std::process::id() != self.pid {
            std::mem::forget(t);
            return;
        }
        self.stop.ring();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// Waits until `sock` hangs up (→ `live.die()`) or `stop` rings.
fn watch(sock: RawFd, stop: RawFd, live: Arc<Liveness>) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sock,
                // POLLHUP and POLLERR come whatever is asked; POLLIN is not
                // asked, so answers to requests do not wake the watcher
                events: libc::POLLRDHUP,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live, writable pollfds; both descriptors stay open
        // until this thread is joined (`Watcher::drop` runs before the
        // Context's socket closes).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        if fds[0].revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0
        {
            live.die();
            return;
        }
    }
}

/// Runs `f` with every signal blocked in the calling thread (a thread it
/// starts inherits the mask), then restores the thread's mask.
fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigfillset and pthread_sigmask write only the local sets
    // they are given; the old mask is restored below.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Control requests that free an object: on a dead device they succeed
/// (the object is gone with the device), so a program can tear down after
/// the fatal event as rdma-core lets it after a device is disassociated.
pub(super) fn tears_down(req: &Request) -> bool {
    matches!(
        req,
        Request::DeallocPd { .. }
            | Request::DeregMr { .. }
            | Request::DeallocMw { .. }
            | Request::DestroyCq { .. }
            | Request::DestroyQp { .. }
            | Request::DestroyAh { .. }
            | Request::DestroySrq { .. }
    )
}

impl Context {
    /// Starts watching the control socket (once per context): when the
    /// daemon goes away the context turns dead ([`Context::is_dead`]) and
    /// the descriptors given to [`Context::wake_on_death`] become readable.
    pub fn watch(&self) -> Result<()> {
        let mut g = self.watcher.lock().map_err(|_| ProtocolError::Poisoned)?;
        if g.is_some() {
            return Ok(());
        }
        let stop = nic::io::Bell::new()?;
        let sock = self
            .sock
            .lock()
            .map_err(|_| ProtocolError::Poisoned)?
            .raw_fd();
        let (live, stop_fd) = (self.live.clone(), stop.as_fd().as_raw_fd());
        // the thread is born with every signal blocked, so the program's
        // signals (perftest's SIGALRM, a timer meant to interrupt a wait)
        // go to its own threads
        let thread = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("softrnic-watch".into())
                .spawn(move || watch(sock, stop_fd, live))
        })?;
        *g = Some(Watcher {
            stop,
            thread: Some(thread),
            pid: std::process::id(),
        });
        Ok(())
    }

    /// Whether the daemon has gone away: every control verb then fails
    /// with [`Error::DeviceGone`] (teardown aside), and the device's rings
    /// are never served again. One atomic load.
    pub fn is_dead(&self) -> bool {
        self.live.is_dead()
    }

    /// True once, for the first caller after the daemon went away: the
    /// device's fatal event (`IBV_EVENT_DEVICE_FATAL`) is that caller's to
    /// report.
    pub fn take_fatal_event(&self) -> bool {
        self.is_dead() && !self.live.reported.swap(true, Ordering::AcqRel)
    }

    /// Makes `fd` (an eventfd) readable when the daemon goes away — at
    /// once if it has gone. A duplicate is kept until
    /// [`Context::forget_wake`] with the id returned.
    pub fn wake_on_death(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let dup = fd.try_clone_to_owned()?;
        let mut g = self.live.wake.lock().map_err(|_| ProtocolError::Poisoned)?;
        g.0 += 1;
        let id = g.0;
        if self.is_dead() {
            nic::io::bell::ring_fd(dup.as_fd());
        }
        g.1.push((id, dup));
        Ok(id)
    }

    /// Stops waking the descriptor registered as `id`.
    pub fn forget_wake(&self, id: u64) {
        let mut g = self.live.wake.lock().unwrap_or_else(|e| e.into_inner());
        g.1.retain(|(i, _)| *i != id);
    }
}
