//! The emulated socket: what each call does on one of the shim's
//! sockets, answering as the kernel's RDMA netlink does for the devices
//! of the table `rnic exec` passed ([`nldev::table::ENV`]).

use crate::fds::{self, Sock};
use crate::{real, set_errno};
use libc::{c_int, sockaddr, sockaddr_nl, socklen_t};
use nldev::{Device, SockOpts};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// `sizeof(struct sockaddr_nl)`, which libmnl checks on every receive.
pub const NL_ADDR_LEN: socklen_t = std::mem::size_of::<sockaddr_nl>() as socklen_t;

/// The device table, or None when the program was not started by `rnic
/// exec` with its view (then the shim passes everything to libc).
fn table() -> Option<&'static [Device]> {
    static TABLE: OnceLock<Option<Vec<Device>>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let text = std::env::var(nldev::table::ENV).ok()?;
            Some(nldev::table::decode(&text).unwrap_or_else(|e| {
                eprintln!("softrnic netlink shim: {e}; showing no devices");
                Vec::new()
            }))
        })
        .as_deref()
}

/// Whether RDMA netlink sockets are the shim's to answer.
pub fn enabled() -> bool {
    table().is_some()
}

/// A new socket's port id, as the kernel's autobind picks them: the
/// process id first, then -4096, -4097, ...
fn autobind_portid() -> u32 {
    static BOUND: AtomicU32 = AtomicU32::new(0);
    match BOUND.fetch_add(1, Ordering::Relaxed) {
        // SAFETY: getpid cannot fail.
        0 => (unsafe { libc::getpid() }) as u32,
        n => (-4096i64 - i64::from(n - 1)) as u32,
    }
}

fn fail<T: From<i8>>(errno: c_int) -> T {
    set_errno(errno);
    T::from(-1)
}

/// `socket(AF_NETLINK, ty, NETLINK_RDMA)`.
pub fn open(ty: c_int) -> c_int {
    let flags = ty & (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let base = ty & !flags;
    if base != libc::SOCK_RAW && base != libc::SOCK_DGRAM {
        return fail(libc::ESOCKTNOSUPPORT);
    }
    let mut pair = [-1; 2];
    // SAFETY: socketpair writes two descriptors into our array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | flags,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return -1;
    }
    let [mine, peer] = pair;
    // SAFETY: fcntl on the descriptor just made: the shim's end never
    // blocks and never outlives an exec.
    unsafe {
        libc::fcntl(peer, libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(peer, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    let ids = fds::identity(mine).zip(fds::identity(peer));
    let Some((id, peer_id)) = ids.filter(|_| (mine as usize) < fds::MAX_FDS) else {
        // SAFETY: closing the two descriptors just made.
        unsafe {
            real::close(mine);
            real::close(peer);
        }
        return fail(libc::EMFILE);
    };
    fds::insert(
        mine,
        Sock {
            peer,
            id,
            peer_id,
            ty: base,
            opts: SockOpts::default(),
            ext_ack: false,
            pending: Default::default(),
        },
    );
    mine
}

/// The netlink address at `addr` (`len` bytes), if it is one.
///
/// # Safety
/// `addr` points to `len` readable bytes, or is null.
unsafe fn nl_addr(addr: *const sockaddr, len: socklen_t) -> Result<sockaddr_nl, c_int> {
    if addr.is_null() || len < NL_ADDR_LEN {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least NL_ADDR_LEN bytes, read unaligned.
    let a: sockaddr_nl = unsafe { std::ptr::read_unaligned(addr.cast()) };
    if a.nl_family as c_int != libc::AF_NETLINK {
        return Err(libc::EINVAL);
    }
    Ok(a)
}

/// Writes the netlink address of port `pid` to a caller's buffer of
/// `*len` bytes (truncated as the kernel truncates) and sets `*len` to
/// its full size.
///
/// # Safety
/// `addr` and `len` are the caller's, each null or valid.
pub unsafe fn put_addr(addr: *mut sockaddr, len: *mut socklen_t, pid: u32) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: zero is a valid sockaddr_nl.
    let mut a: sockaddr_nl = unsafe { std::mem::zeroed() };
    a.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    a.nl_pid = pid;
    // SAFETY: the caller's buffer holds *len bytes; we write at most that.
    unsafe {
        let n = (*len).min(NL_ADDR_LEN) as usize;
        std::ptr::copy_nonoverlapping(
            (&a as *const sockaddr_nl).cast::<u8>(),
            addr.cast::<u8>(),
            n,
        );
        *len = NL_ADDR_LEN;
    }
}

fn bind_auto(s: &mut Sock) {
    if s.opts.portid == 0 {
        s.opts.portid = autobind_portid();
    }
}

/// `bind`: the port id asked for, or one picked; multicast groups are
/// accepted (the shim never sends to them).
///
/// # Safety
/// As `bind(2)`'s arguments.
pub unsafe fn bind(s: &mut Sock, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's address and length.
    match unsafe { nl_addr(addr, len) } {
        Ok(a) => {
            if a.nl_pid != 0 && s.opts.portid == 0 {
                s.opts.portid = a.nl_pid;
            }
            bind_auto(s);
            0
        }
        Err(e) => fail(e),
    }
}

/// `connect`: only the kernel (port 0) answers here.
///
/// # Safety
/// As `connect(2)`'s arguments.
pub unsafe fn connect(s: &mut Sock, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's address and length.
    match unsafe { nl_addr(addr, len) } {
        Ok(a) if a.nl_pid != 0 || a.nl_groups != 0 => fail(libc::ECONNREFUSED),
        Ok(_) => {
            bind_auto(s);
            0
        }
        Err(e) => fail(e),
    }
}

/// Puts what can be queued of the pending answers on the socket pair.
pub fn flush(s: &mut Sock) {
    while let Some(d) = s.pending.front() {
        // SAFETY: a send of our own buffer on the shim's end.
        let n = unsafe {
            real::send(
                s.peer,
                d.as_ptr().cast(),
                d.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            break;
        }
        s.pending.pop_front();
    }
}

/// A request of `bytes` sent to `to` (None: the kernel, as `send` and
/// `write` send): the kernel's answers queued for the program.
///
/// # Safety
/// `to` as `sendto(2)`'s address argument.
pub unsafe fn request(
    s: &mut Sock,
    bytes: &[u8],
    to: Option<(*const sockaddr, socklen_t)>,
) -> isize {
    if let Some((addr, len)) = to.filter(|(a, _)| !a.is_null()) {
        // SAFETY: the caller's address and length.
        match unsafe { nl_addr(addr, len) } {
            // another port or a multicast group: no one else listens here
            Ok(a) if a.nl_pid != 0 || a.nl_groups != 0 => return fail(libc::ECONNREFUSED),
            Ok(_) => {}
            Err(e) => return fail(e),
        }
    }
    bind_auto(s);
    let answers = nldev::answer(bytes, s.opts, table().unwrap_or(&[]));
    s.pending.extend(answers);
    flush(s);
    bytes.len() as isize
}

/// `setsockopt(SOL_NETLINK, ...)`: CAP_ACK and EXT_ACK are kept, the
/// others accepted.
///
/// # Safety
/// `val` points to `len` readable bytes, or is null.
pub unsafe fn set_netlink_opt(
    s: &mut Sock,
    name: c_int,
    val: *const libc::c_void,
    len: socklen_t,
) -> c_int {
    if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return fail(libc::EINVAL);
    }
    // SAFETY: at least an int's bytes, read unaligned.
    let on = unsafe { std::ptr::read_unaligned(val.cast::<c_int>()) } != 0;
    match name {
        libc::NETLINK_CAP_ACK => s.opts.cap_ack = on,
        libc::NETLINK_EXT_ACK => s.ext_ack = on,
        _ => {}
    }
    0
}

/// `getsockopt` for what a netlink socket answers differently from the
/// socket pair; None for the rest.
pub fn get_opt(s: &Sock, level: c_int, name: c_int) -> Option<Result<c_int, c_int>> {
    match (level, name) {
        (libc::SOL_NETLINK, libc::NETLINK_CAP_ACK) => Some(Ok(s.opts.cap_ack as c_int)),
        (libc::SOL_NETLINK, libc::NETLINK_EXT_ACK) => Some(Ok(s.ext_ack as c_int)),
        (libc::SOL_NETLINK, _) => Some(Err(libc::ENOPROTOOPT)),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => Some(Ok(libc::AF_NETLINK)),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => Some(Ok(libc::NETLINK_RDMA)),
        (libc::SOL_SOCKET, libc::SO_TYPE) => Some(Ok(s.ty)),
        _ => None,
    }
}

/// `close`: the shim's end goes with the program's.
pub fn close(s: Sock) {
    if fds::identity(s.peer) == Some(s.peer_id) {
        // SAFETY: the shim's own end, still the descriptor it made.
        unsafe { real::close(s.peer) };
    }
}
