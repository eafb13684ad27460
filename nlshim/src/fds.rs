//! Which descriptors are the shim's sockets, and their state.
//!
//! Every `close`, `write`, `send` and `recv` of the program asks
//! [`marked`] first: one atomic load, no lock, no allocation, so the
//! calls a forked child makes before `exec` stay async-signal-safe. Only
//! the shim's own sockets take the lock. A socket's identity (device and
//! inode) is checked on each use, so a descriptor number the program
//! reused without the shim seeing it (`dup2`, `close_range`) is
//! forgotten rather than answered for.

use nldev::SockOpts;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Descriptors up to this number can be the shim's (the usual hard
/// limit of open files); past it `socket` answers EMFILE.
pub const MAX_FDS: usize = 1 << 20;

static MARKS: [AtomicU64; MAX_FDS / 64] = [const { AtomicU64::new(0) }; MAX_FDS / 64];

fn bit(fd: libc::c_int) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < MAX_FDS)?;
    Some((fd / 64, 1 << (fd % 64)))
}

/// Whether `fd` may be one of the shim's sockets.
pub fn marked(fd: libc::c_int) -> bool {
    bit(fd).is_some_and(|(w, b)| MARKS[w].load(Ordering::Relaxed) & b != 0)
}

fn set_mark(fd: libc::c_int, on: bool) {
    if let Some((w, b)) = bit(fd) {
        if on {
            MARKS[w].fetch_or(b, Ordering::Relaxed);
        } else {
            MARKS[w].fetch_and(!b, Ordering::Relaxed);
        }
    }
}

/// A file's identity: its device and inode.
pub type Identity = (u64, u64);

/// What `fd` is, if it is open.
pub fn identity(fd: libc::c_int) -> Option<Identity> {
    // SAFETY: plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a descriptor number into our own struct.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// One emulated RDMA netlink socket: the program holds one end of a
/// datagram socket pair, the shim writes the kernel's answers into the
/// other (`peer`).
pub struct Sock {
    pub peer: libc::c_int,
    /// The program's end, as it was when made.
    pub id: Identity,
    pub peer_id: Identity,
    /// The socket type asked for (SOCK_RAW or SOCK_DGRAM).
    pub ty: libc::c_int,
    /// Port id and `NETLINK_CAP_ACK`; the port id is 0 until bound.
    pub opts: SockOpts,
    /// `NETLINK_EXT_ACK`, kept for `getsockopt` (the answers carry no
    /// extended ACK attributes to add).
    pub ext_ack: bool,
    /// Answers the socket pair could not take yet, in order.
    pub pending: VecDeque<Vec<u8>>,
}

static SOCKS: Mutex<BTreeMap<libc::c_int, Sock>> = Mutex::new(BTreeMap::new());

fn socks() -> std::sync::MutexGuard<'static, BTreeMap<libc::c_int, Sock>> {
    SOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records `fd` as the shim's socket.
pub fn insert(fd: libc::c_int, s: Sock) {
    socks().insert(fd, s);
    set_mark(fd, true);
}

/// `f` on `fd`'s state if `fd` is still the shim's socket; None passes
/// the call on to libc.
pub fn with<R>(fd: libc::c_int, f: impl FnOnce(&mut Sock) -> R) -> Option<R> {
    if !marked(fd) {
        return None;
    }
    let now = identity(fd);
    let mut all = socks();
    match all.get_mut(&fd) {
        Some(s) if Some(s.id) == now => Some(f(s)),
        _ => {
            all.remove(&fd);
            set_mark(fd, false);
            None
        }
    }
}

/// Forgets `fd`, handing back its state if it was still the shim's.
pub fn remove(fd: libc::c_int) -> Option<Sock> {
    if !marked(fd) {
        return None;
    }
    let now = identity(fd);
    let s = socks().remove(&fd);
    set_mark(fd, false);
    s.filter(|s| Some(s.id) == now)
}
