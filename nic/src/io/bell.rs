//! The bell that wakes a parked engine: an eventfd that threads of this
//! process (a post, a control call, the far end of an in-memory wire) and
//! other processes (the daemon's clients, which get a duplicate of the
//! descriptor) can ring. A parked engine waits in `ppoll(2)` on the bell
//! and, for a socket port, on the socket too, so whichever comes first — a
//! frame, a doorbell, the next timer — ends the park.
//!
//! Ringing is a `write(2)`, so the ringers only ring when the engine said
//! it is about to sleep: the engine publishes "parked", re-checks its
//! queues, then sleeps; a ringer publishes its work, then reads "parked"
//! (both sides with sequentially consistent ordering, so one of them sees
//! the other: no wake-up is lost and a busy engine costs no syscall).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{
    fence, AtomicBool,
    Ordering::{Relaxed, SeqCst},
};
use std::time::Duration;

/// An eventfd (non-blocking, close-on-exec) and the engine's "parked" flag
/// for the ringers in this process.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
    parked: AtomicBool,
    /// The last [`Bell::wait`] found the bell rung.
    rung: AtomicBool,
}

impl Bell {
    pub fn new() -> io::Result<Bell> {
        // SAFETY: eventfd(2) takes no pointers; the result is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Bell {
            // SAFETY: raw is a descriptor eventfd(2) just returned (not an
            // error: checked above), owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
            parked: AtomicBool::new(false),
            rung: AtomicBool::new(false),
        })
    }

    /// The engine: "about to park". Look at the queues once more after
    /// this; whatever is published before a ringer's `ring_if_parked` is
    /// then seen by one side or the other.
    pub fn announce(&self) {
        self.parked.store(true, SeqCst);
        fence(SeqCst);
    }

    /// The engine: awake again.
    pub fn clear(&self) {
        self.parked.store(false, SeqCst);
    }

    /// A ringer, after publishing its work: ring only if the engine parks
    /// (no syscall while it is busy).
    pub fn ring_if_parked(&self) {
        fence(SeqCst);
        if self.parked.load(SeqCst) {
            self.ring();
        }
    }

    /// Wakes the engine (a full counter means it is already rung).
    pub fn ring(&self) {
        ring_fd(self.fd.as_fd());
    }

    /// Clears what was rung; returns how many rings it clears (0: none).
    pub fn drain(&self) -> u64 {
        let mut v = 0u64;
        // SAFETY: read(2) writes at most 8 bytes into `v`, a live, writable
        // u64; EAGAIN (not rung) is fine.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }

    /// [`Bell::drain`], when the last [`Bell::wait`] found the bell rung: a
    /// wait a frame or the timer ended costs no read(2). A ring it did not
    /// see stays in the counter and ends the next wait at once.
    pub fn drain_if_rung(&self) -> u64 {
        if self.rung.swap(false, Relaxed) {
            self.drain()
        } else {
            0
        }
    }

    /// A duplicate for another process (sent with SCM_RIGHTS).
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// Waits until the bell rings, `other` is readable, or `timeout`
    /// passes (to the microsecond: `ppoll`).
    pub fn wait(&self, other: Option<BorrowedFd<'_>>, timeout: Duration) {
        let mut fds = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: other.map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(3600) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        let n = if other.is_some() { 2 } else { 1 };
        // SAFETY: `fds` holds at least `n` live, writable pollfds (a -1 fd
        // is ignored by the kernel), `ts` is a live timespec, and a null
        // signal mask means none; ppoll(2) keeps no pointer after it returns.
        let r = unsafe { libc::ppoll(fds.as_mut_ptr(), n, &ts, std::ptr::null()) };
        // an error (EINTR) says nothing of the bell: drain it to be sure
        let rung = r < 0 || fds[0].revents != 0;
        self.rung.store(rung, Relaxed);
    }
}

impl AsFd for Bell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Rings an eventfd someone gave us (a client of the daemon rings the
/// engine's bell through its duplicate).
pub fn ring_fd(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: write(2) reads 8 bytes from `one`, a live u64; a bad
    // descriptor or EAGAIN (counter full) is an error return, not UB.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A wait ended by the other descriptor reads nothing from the bell;
    /// one the bell ended drains it.
    #[test]
    fn only_a_rung_wait_drains() {
        let bell = Bell::new().unwrap();
        let other = Bell::new().unwrap();
        other.ring();
        bell.wait(Some(other.as_fd()), Duration::from_secs(60));
        assert_eq!(bell.drain_if_rung(), 0);
        bell.ring();
        bell.ring();
        bell.wait(Some(other.as_fd()), Duration::from_secs(60));
        assert_eq!(bell.drain_if_rung(), 2);
        assert_eq!(bell.drain(), 0, "drained");
        // a ring no wait saw is still there for the next
        bell.ring();
        assert_eq!(bell.drain_if_rung(), 0);
        other.drain();
        bell.wait(Some(other.as_fd()), Duration::from_secs(60));
        assert_eq!(bell.drain_if_rung(), 1);
    }

    #[test]
    fn a_ring_from_another_thread_ends_the_wait_and_drains() {
        let bell = Arc::new(Bell::new().unwrap());
        let b2 = bell.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.ring();
        });
        let t0 = Instant::now();
        bell.wait(None, Duration::from_secs(60));
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the ring did not end the wait"
        );
        t.join().unwrap();
        bell.drain();
        // drained: the next wait runs to its (short) timeout
        let t0 = Instant::now();
        bell.wait(None, Duration::from_millis(5));
        assert!(t0.elapsed() >= Duration::from_millis(4));
        // a duplicate rings the same bell
        let dup = bell.try_clone_fd().unwrap();
        ring_fd(dup.as_fd());
        bell.wait(None, Duration::from_secs(60));
        bell.drain();
    }
}
