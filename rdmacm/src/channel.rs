//! Event channels, the daemon's events read from them (`deliver.rs`
//! turns them into `rdma_cm_event`s), and an ID's move from one channel to
//! another (`rdma_migrate_id`). A channel's `fd` is an epoll descriptor over
//! the daemon's event descriptors (one per device the channel's IDs live
//! on), so it is readable exactly when an event is queued: programs poll
//! it, add it to their own epoll set, or set O_NONBLOCK on it and have
//! `rdma_get_cm_event` answer EAGAIN.
//!
//! A device whose rnicd goes away (killed or crashed) is a device removed:
//! each ID of the channel on it gets RDMA_CM_EVENT_DEVICE_REMOVAL, once;
//! then, when every device the channel used is gone, `rdma_get_cm_event`
//! fails with ENODEV instead of waiting for an event that cannot come.

use crate::abi::rdma_event_channel;
use crate::backend::{CmChannel, CmEventMsg, CmIdNo};
use crate::errno::{complain, fail, refused};
use crate::live::Live;
use crate::state::{ack, IdPriv, Lib};
use libc::c_int;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// `struct rdma_event_channel` and what this library keeps with it.
#[repr(C)]
pub struct ChanPriv {
    /// First, so that the application's pointer is this one's.
    pub chan: rdma_event_channel,
    pub lib: Arc<Lib>,
    ep: OwnedFd,
    /// The daemon channels by device; the index is the epoll tag (the
    /// list only grows while the channel lives).
    devs: Mutex<Vec<DevChan>>,
    /// The DEVICE_REMOVAL events not handed out yet: (device, daemon ID).
    removals: Mutex<VecDeque<(String, CmIdNo)>>,
    /// Events already taken from the daemon and not handed out yet, by
    /// device, oldest first: those of an ID that `rdma_migrate_id` moved
    /// here, and those read past while moving them away ([`Self::move_events`]).
    held: Mutex<VecDeque<(String, CmEventMsg)>>,
    /// An eventfd in the epoll set (tag [`HELD`]), readable while `held`
    /// has events.
    held_bell: OwnedFd,
    /// The application's hold (until `rdma_destroy_event_channel`) and
    /// one per thread waiting in `rdma_get_cm_event`: the last one frees.
    refs: AtomicUsize,
}

/// The epoll tag of `held_bell`.
const HELD: u64 = u64::MAX;

/// A channel's side on one device.
struct DevChan {
    dev: String,
    chan: Arc<dyn CmChannel>,
    /// Its rnicd went away: out of the epoll set, its IDs told.
    gone: bool,
}

/// The channels not yet destroyed.
static LIVE: Live = Live::new();

/// What a channel has for the application next, before `deliver.rs` turns
/// it into an `rdma_cm_event`.
pub enum Incoming {
    /// Device `.0` went away: the ID the daemon called `.1` there is to
    /// hear RDMA_CM_EVENT_DEVICE_REMOVAL.
    Removal(String, CmIdNo),
    /// An event from the daemon of device `.0`.
    Event(String, CmEventMsg),
}

impl ChanPriv {
    /// A new channel of `lib`.
    pub fn create(lib: Arc<Lib>) -> Result<*mut ChanPriv, c_int> {
        // SAFETY: epoll_create1 has no memory preconditions.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        // SAFETY: a descriptor just made and owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(fd) };
        let held_bell = held_bell(&ep)?;
        let c = Box::new(ChanPriv {
            chan: rdma_event_channel { fd },
            lib,
            ep,
            devs: Mutex::new(Vec::new()),
            removals: Mutex::new(VecDeque::new()),
            held: Mutex::new(VecDeque::new()),
            held_bell,
            refs: AtomicUsize::new(1),
        });
        let p = Box::into_raw(c);
        LIVE.add(p);
        Ok(p)
    }

    /// The channel an application's pointer names; None unless it is a
    /// live channel of this library.
    ///
    /// # Safety
    /// No other thread destroys the channel while the reference is in use.
    pub unsafe fn from_ptr<'a>(p: *mut rdma_event_channel) -> Option<&'a ChanPriv> {
        if !LIVE.has(p) {
            return None;
        }
        // SAFETY: a live channel (the caller's promise covers its use by
        // another thread); `chan` is the first field.
        unsafe { (p as *const ChanPriv).as_ref() }
    }

    /// The daemon's channel of device `dev` for this channel, opened (and
    /// added to the epoll set) on first use.
    pub fn on_device(&self, dev: &str) -> Result<Arc<dyn CmChannel>, c_int> {
        let mut devs = self.devs.lock().map_err(|_| libc::EIO)?;
        if let Some(d) = devs.iter().find(|d| d.dev == dev) {
            return Ok(d.chan.clone());
        }
        let c = self
            .lib
            .backend
            .open_channel(dev)
            .map_err(|e| refused("event channel", e))?;
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: devs.len() as u64,
        };
        // SAFETY: epoll_ctl on our epoll descriptor with an event that
        // lives across the call.
        let r =
            unsafe { libc::epoll_ctl(self.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, c.fd(), &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        devs.push(DevChan {
            dev: dev.to_string(),
            chan: c.clone(),
            gone: false,
        });
        Ok(c)
    }

    /// The holds on the channel (see `refs`).
    #[cfg(test)]
    pub fn holds(&self) -> usize {
        self.refs.load(Ordering::Acquire)
    }

    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our own descriptor.
        let fl = unsafe { libc::fcntl(self.ep.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }

    /// What is next for the application: a removal not handed out, a
    /// held event, or the daemon's next event; waits for one unless the
    /// descriptor is O_NONBLOCK (then EAGAIN when none is queued).
    pub fn next(&self) -> Result<Incoming, c_int> {
        loop {
            let removal = self.removals.lock().ok().and_then(|mut q| q.pop_front());
            if let Some((dev, no)) = removal {
                return Ok(Incoming::Removal(dev, no));
            }
            if let Some((dev, msg)) = self.pop_held()? {
                return Ok(Incoming::Event(dev, msg));
            }
            if self.every_device_gone()? {
                complain("rdma_get_cm_event", "every device of the channel is gone");
                return Err(libc::ENODEV);
            }
            let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
            let timeout = if self.nonblocking() { 0 } else { -1 };
            // SAFETY: epoll_wait into an array of 8 that lives across the
            // call.
            let n = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), evs.as_mut_ptr(), 8, timeout) };
            if n < 0 {
                return Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO));
            }
            if n == 0 {
                return Err(libc::EAGAIN);
            }
            for e in &evs[..n as usize] {
                if e.u64 == HELD {
                    // taken at the top of the loop
                    continue;
                }
                let tag = e.u64 as usize;
                let chan = self
                    .devs
                    .lock()
                    .map_err(|_| libc::EIO)?
                    .get(tag)
                    .map(|d| (d.dev.clone(), d.chan.clone()));
                let Some((dev, chan)) = chan else { continue };
                let msg = match chan.next(true) {
                    Ok(Some(m)) => m,
                    // another thread took it
                    Ok(None) => continue,
                    Err(e) if e.errno == libc::ENODEV => {
                        complain("rdma_get_cm_event", format!("device {dev}: {e}"));
                        self.device_gone(tag)?;
                        continue;
                    }
                    Err(e) => return Err(refused("rdma_get_cm_event", e)),
                };
                return Ok(Incoming::Event(dev, msg));
            }
        }
    }
}

impl ChanPriv {
    /// Device `tag`'s rnicd went away: its descriptor leaves the epoll
    /// set and each of the channel's IDs on it is to hear
    /// RDMA_CM_EVENT_DEVICE_REMOVAL (once, however many threads saw it).
    fn device_gone(&self, tag: usize) -> Result<(), c_int> {
        let mut devs = self.devs.lock().map_err(|_| libc::EIO)?;
        let Some(d) = devs.get_mut(tag).filter(|d| !d.gone) else {
            return Ok(());
        };
        d.gone = true;
        // SAFETY: epoll_ctl on our epoll descriptor; the event argument
        // may be NULL for EPOLL_CTL_DEL.
        unsafe {
            libc::epoll_ctl(
                self.ep.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                d.chan.fd(),
                std::ptr::null_mut(),
            )
        };
        let ids = self
            .lib
            .ids_on(&d.dev, self as *const ChanPriv as *mut rdma_event_channel);
        let mut q = self.removals.lock().map_err(|_| libc::EIO)?;
        q.extend(ids.into_iter().map(|no| (d.dev.clone(), no)));
        Ok(())
    }

    /// The oldest held event, if any; the bell goes quiet with the last.
    fn pop_held(&self) -> Result<Option<(String, CmEventMsg)>, c_int> {
        let mut held = self.held.lock().map_err(|_| libc::EIO)?;
        let next = held.pop_front();
        self.bell(!held.is_empty());
        Ok(next)
    }

    /// Makes `held_bell` readable (`on`) or quiet; called with `held`
    /// locked.
    fn bell(&self, on: bool) {
        let fd = self.held_bell.as_raw_fd();
        let mut v = 0u64;
        // SAFETY: an 8-byte read from our non-blocking eventfd into a
        // local (draining it), then an 8-byte write from a local.
        unsafe {
            libc::read(fd, (&mut v as *mut u64).cast(), 8);
            if on {
                v = 1;
                libc::write(fd, (&v as *const u64).cast(), 8);
            }
        }
    }

    /// Appends events to the held ones (and makes the channel readable).
    fn hold(&self, evs: impl IntoIterator<Item = (String, CmEventMsg)>) -> Result<(), c_int> {
        let mut held = self.held.lock().map_err(|_| libc::EIO)?;
        held.extend(evs);
        self.bell(!held.is_empty());
        Ok(())
    }

    /// Moves the events of ID `no` on device `dev` that this channel has
    /// not handed out to channel `to` (`rdma_migrate_id`: the kernel's
    /// ucma moves the ID's queued events to the new file). The daemon
    /// sends an ID's later events to `to` once it migrated the ID; the
    /// earlier ones are read from this channel's socket now, in order, and
    /// the other IDs' among them stay here, held. An event belongs to the
    /// ID it is reported on: the listener, for a CONNECT_REQUEST.
    pub fn move_events(&self, dev: &str, no: CmIdNo, to: &ChanPriv) -> Result<(), c_int> {
        let chan = {
            let devs = self.devs.lock().map_err(|_| libc::EIO)?;
            devs.iter()
                .find(|d| d.dev == dev && !d.gone)
                .map(|d| d.chan.clone())
        };
        let mut taken = Vec::new();
        if let Some(chan) = chan {
            // a gone device's error is for rdma_get_cm_event to report
            while let Ok(Some(m)) = chan.next(true) {
                taken.push((dev.to_string(), m));
            }
        }
        let mut held = self.held.lock().map_err(|_| libc::EIO)?;
        held.extend(taken);
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = held
            .drain(..)
            .partition(|(d, m)| d == dev && m.listen_id.unwrap_or(m.id) == no);
        *held = rest;
        self.bell(!held.is_empty());
        drop(held);
        to.hold(mine)
    }

    /// Whether the channel has used devices and each of them is gone.
    fn every_device_gone(&self) -> Result<bool, c_int> {
        let devs = self.devs.lock().map_err(|_| libc::EIO)?;
        Ok(!devs.is_empty() && devs.iter().all(|d| d.gone))
    }
}

/// A non-blocking eventfd in `ep`'s set under the tag [`HELD`].
fn held_bell(ep: &OwnedFd) -> Result<OwnedFd, c_int> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EMFILE)
    };
    // SAFETY: eventfd has no memory preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor just made and owned by nobody else.
    let bell = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: HELD,
    };
    // SAFETY: epoll_ctl on our epoll descriptor with an event that lives
    // across the call.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(errno());
    }
    Ok(bell)
}

/// `rdma_create_event_channel`.
#[no_mangle]
pub extern "C" fn scm_rdma_create_event_channel() -> *mut rdma_event_channel {
    match ChanPriv::create(crate::global().clone()) {
        Ok(c) => c as *mut rdma_event_channel,
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// Frees a channel [`ChanPriv::create`] made, once no thread waits in
/// `rdma_get_cm_event` on it. A thread that does keeps waiting, as it does
/// on a kernel channel (its read holds the file open): rping's CM thread
/// still waits when its main thread destroys the channel and exits, and
/// must not see the daemon's sockets close under it.
///
/// # Safety
/// `p` is such a channel and no ID uses it any more.
pub unsafe fn destroy(p: *mut ChanPriv) {
    if LIVE.remove(p) {
        // SAFETY: live until now, so the application's hold ends here,
        // once.
        unsafe { release(p) };
    }
}

/// Ends one hold on `p` (see `ChanPriv::refs`); the last frees it.
///
/// # Safety
/// `p` is a channel [`ChanPriv::create`] made, and the caller has a hold
/// on it that ends here.
unsafe fn release(p: *mut ChanPriv) {
    // SAFETY: alive while the caller's hold lasts.
    if unsafe { (*p).refs.fetch_sub(1, Ordering::AcqRel) } == 1 {
        // SAFETY: made by Box::into_raw; the last hold is gone.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// `rdma_destroy_event_channel` (the IDs on it are destroyed first, as
/// rdma_cm(7) requires).
///
/// # Safety
/// `c` is NULL or a channel this library made.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_event_channel(c: *mut rdma_event_channel) {
    if LIVE.has(c) {
        // SAFETY: the caller's channel.
        unsafe { destroy(c as *mut ChanPriv) };
    }
}

/// Runs `f` on the channel `c` names with a hold on it (see
/// `ChanPriv::refs`: a destroy meanwhile frees it only afterwards); None
/// unless `c` is a live channel of this library.
///
/// # Safety
/// `c` is NULL or a channel this library made.
pub unsafe fn while_held<R>(
    c: *mut rdma_event_channel,
    f: impl FnOnce(&ChanPriv) -> R,
) -> Option<R> {
    // SAFETY: the caller's channel.
    let chan = unsafe { ChanPriv::from_ptr(c) }?;
    chan.refs.fetch_add(1, Ordering::AcqRel);
    let r = f(chan);
    // SAFETY: the hold taken above.
    unsafe { release(c as *mut ChanPriv) };
    Some(r)
}

/// The channel of ID `idp`.
pub fn of_id(idp: &IdPriv) -> Option<&ChanPriv> {
    // SAFETY: an ID's channel lives at least as long as the ID.
    unsafe { ChanPriv::from_ptr(idp.raw().channel) }
}

/// Moves the ID's events to `chan` (NULL: a channel of its own, making
/// the ID synchronous).
pub fn migrate(idp: &IdPriv, chan: *mut rdma_event_channel) -> Result<(), c_int> {
    let sync = chan.is_null();
    if sync && idp.state().sync {
        return Err(libc::EINVAL);
    }
    let new = if sync {
        ChanPriv::create(idp.lib.clone())? as *mut rdma_event_channel
    } else {
        chan
    };
    // SAFETY: a channel of this library (made above or the caller's).
    let nc = unsafe { ChanPriv::from_ptr(new) }.ok_or(libc::EINVAL)?;
    let remote = idp.state().remote.clone();
    let raw = idp.raw();
    let oc = of_id(idp).filter(|c| !std::ptr::eq(*c, nc));
    for r in &remote {
        let moved = nc.on_device(&r.dev).and_then(|c| {
            r.cm.migrate_id(r.no, c.token())
                .map_err(|e| refused("rdma_migrate_id", e))
        });
        // the events the old channel has not handed out follow the ID
        let moved = moved.and_then(|_| oc.map_or(Ok(()), |o| o.move_events(&r.dev, r.no, nc)));
        if let Err(e) = moved {
            if sync {
                // SAFETY: the channel made above, used by nobody.
                unsafe { destroy(new as *mut ChanPriv) };
            }
            return Err(e);
        }
    }
    let old_sync = idp.state().sync;
    if old_sync {
        if !raw.event.is_null() {
            // SAFETY: the event a synchronous call kept.
            unsafe { ack(raw.event) };
            raw.event = std::ptr::null_mut();
        }
        // SAFETY: the ID's own channel, nobody else's.
        unsafe { destroy(raw.channel as *mut ChanPriv) };
    }
    raw.channel = new;
    idp.state().sync = sync;
    Ok(())
}
