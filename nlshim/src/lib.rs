//! `libsoftrnic_nlshim.so`: preloaded by `rnic exec` into the program it
//! starts (and so its children), it answers RDMA netlink — what iproute2's
//! `rdma link` and `rdma dev` ask the kernel — for softrnic's devices, as
//! the view's `/sys/class/infiniband` shows them.
//!
//! `socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA)` gives the program one end
//! of an `AF_UNIX` datagram socket pair; each request it sends is answered
//! at once by [`nldev::answer()`] from the device table `rnic exec` put in
//! `SOFTRNIC_NLDEV`, the answers queued on the pair's other end, so
//! `recv`, `poll` and `epoll` work as on the kernel's socket. Receiving
//! calls report the kernel's netlink address, as libmnl checks. Every
//! other socket, and every call on one, goes straight to libc
//! ([`real`]); without `SOFTRNIC_NLDEV` the shim answers nothing.
//!
//! Not covered: `sendmmsg`/`recvmmsg`, and `read`/`readv` after a dump so
//! large that its answers exceed the socket pair's buffer (about 200 KiB,
//! over a thousand devices): the rest waits for the next `recv*`.

mod fds;
pub mod real;
mod sock;

use libc::{c_int, c_void, msghdr, size_t, sockaddr, socklen_t, ssize_t};

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// `socket(2)`: RDMA netlink sockets are the shim's.
///
/// # Safety
/// As `socket(2)`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain == libc::AF_NETLINK && protocol == libc::NETLINK_RDMA && sock::enabled() {
        return sock::open(ty);
    }
    // SAFETY: the caller's arguments.
    unsafe { real::socket(domain, ty, protocol) }
}

/// `bind(2)`.
///
/// # Safety
/// As `bind(2)`.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments, for the shim's socket or libc.
    fds::with(fd, |s| unsafe { sock::bind(s, addr, len) })
        .unwrap_or_else(|| unsafe { real::bind(fd, addr, len) })
}

/// `connect(2)`.
///
/// # Safety
/// As `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments, for the shim's socket or libc.
    fds::with(fd, |s| unsafe { sock::connect(s, addr, len) })
        .unwrap_or_else(|| unsafe { real::connect(fd, addr, len) })
}

/// `getsockname(2)`: the socket's netlink address.
///
/// # Safety
/// As `getsockname(2)`.
#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's buffer and length.
    fds::with(fd, |s| unsafe { sock::put_addr(addr, len, s.opts.portid) })
        .map(|()| 0)
        .unwrap_or_else(|| unsafe { real::getsockname(fd, addr, len) })
}

/// `getpeername(2)`: the kernel's netlink address.
///
/// # Safety
/// As `getpeername(2)`.
#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's buffer and length.
    fds::with(fd, |_| unsafe { sock::put_addr(addr, len, 0) })
        .map(|()| 0)
        .unwrap_or_else(|| unsafe { real::getpeername(fd, addr, len) })
}

/// `setsockopt(2)`: `SOL_NETLINK` options are the shim's, the rest the
/// socket pair's.
///
/// # Safety
/// As `setsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let mine = fds::with(fd, |s| {
        // SAFETY: the caller's option buffer.
        (level == libc::SOL_NETLINK).then(|| unsafe { sock::set_netlink_opt(s, name, val, len) })
    });
    match mine.flatten() {
        Some(r) => r,
        // SAFETY: the caller's arguments.
        None => unsafe { real::setsockopt(fd, level, name, val, len) },
    }
}

/// `getsockopt(2)`: what differs from the socket pair (the netlink
/// options, the domain, protocol and type) is the shim's.
///
/// # Safety
/// As `getsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    match fds::with(fd, |s| sock::get_opt(s, level, name)).flatten() {
        Some(Ok(v)) => {
            if val.is_null() || len.is_null() {
                set_errno(libc::EFAULT);
                return -1;
            }
            // SAFETY: the caller's buffer of *len bytes; at most that written.
            unsafe {
                let n = (*len as usize).min(std::mem::size_of::<c_int>());
                std::ptr::copy_nonoverlapping(
                    (&v as *const c_int).cast::<u8>(),
                    val.cast::<u8>(),
                    n,
                );
                *len = n as socklen_t;
            }
            0
        }
        Some(Err(e)) => {
            set_errno(e);
            -1
        }
        // SAFETY: the caller's arguments.
        None => unsafe { real::getsockopt(fd, level, name, val, len) },
    }
}

/// The request at `buf`, `len` bytes, on the shim's socket `fd`; None if
/// `fd` is not the shim's.
///
/// # Safety
/// `buf` holds `len` readable bytes (or `len` is 0); `to` as `sendto(2)`.
unsafe fn request(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    to: Option<(*const sockaddr, socklen_t)>,
) -> Option<ssize_t> {
    fds::with(fd, |s| {
        let bytes: &[u8] = if len == 0 || buf.is_null() {
            &[]
        } else {
            // SAFETY: the caller's buffer of len bytes.
            unsafe { std::slice::from_raw_parts(buf.cast(), len) }
        };
        // SAFETY: the caller's address.
        unsafe { sock::request(s, bytes, to) }
    })
}

/// `send(2)`.
///
/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { request(fd, buf, len, None).unwrap_or_else(|| real::send(fd, buf, len, flags)) }
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe {
        request(fd, buf, len, Some((addr, alen)))
            .unwrap_or_else(|| real::sendto(fd, buf, len, flags, addr, alen))
    }
}

/// `write(2)`: on the shim's socket, a request.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { request(fd, buf, len, None).unwrap_or_else(|| real::write(fd, buf, len)) }
}

/// `sendmsg(2)`: the iovecs gathered into one request.
///
/// # Safety
/// As `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if msg.is_null() || !fds::marked(fd) {
        // SAFETY: the caller's arguments.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: a non-null msghdr of the caller's, and its iovecs.
    let (bytes, to) = unsafe {
        let m = &*msg;
        let mut bytes = Vec::new();
        if !m.msg_iov.is_null() {
            for v in std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) {
                if !v.iov_base.is_null() {
                    bytes.extend_from_slice(std::slice::from_raw_parts(
                        v.iov_base.cast::<u8>(),
                        v.iov_len,
                    ));
                }
            }
        }
        (bytes, (m.msg_name as *const sockaddr, m.msg_namelen))
    };
    // SAFETY: our own buffer; the caller's address.
    unsafe {
        request(fd, bytes.as_ptr().cast(), bytes.len(), Some(to))
            .unwrap_or_else(|| real::sendmsg(fd, msg, flags))
    }
}

/// Whether `fd` is the shim's, after queuing what answers wait.
fn ready(fd: c_int) -> bool {
    fds::with(fd, sock::flush).is_some()
}

/// `recv(2)`.
///
/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    ready(fd);
    // SAFETY: the caller's arguments.
    unsafe { real::recv(fd, buf, len, flags) }
}

/// `__recv_chk`, what `recv` becomes under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    ready(fd);
    // SAFETY: the caller's arguments.
    unsafe { real::__recv_chk(fd, buf, len, buflen, flags) }
}

/// A receive on `fd` by `recv_from` (libc's `recvfrom` or its fortified
/// twin, given the address to fill): on the shim's socket, with no
/// address asked of the socket pair, and the kernel's written to
/// `addr`.
///
/// # Safety
/// `addr` and `alen` as `recvfrom(2)`'s.
unsafe fn receive_from(
    fd: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
    recv_from: impl FnOnce(*mut sockaddr, *mut socklen_t) -> ssize_t,
) -> ssize_t {
    if !ready(fd) {
        return recv_from(addr, alen);
    }
    let n = recv_from(std::ptr::null_mut(), std::ptr::null_mut());
    if n >= 0 {
        // SAFETY: the caller's address buffer and length.
        unsafe { sock::put_addr(addr, alen, 0) };
    }
    n
}

/// `recvfrom(2)`: from the kernel's address.
///
/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments; only the address may be replaced.
    unsafe {
        receive_from(fd, addr, alen, |a, l| {
            real::recvfrom(fd, buf, len, flags, a, l)
        })
    }
}

/// `__recvfrom_chk`, what `recvfrom` becomes under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments; only the address may be replaced.
    unsafe {
        receive_from(fd, addr, alen, |a, l| {
            real::__recvfrom_chk(fd, buf, len, buflen, flags, a, l)
        })
    }
}

/// `recvmsg(2)`: from the kernel's address, `msg_namelen` the size of a
/// `sockaddr_nl` (libmnl refuses any other).
///
/// # Safety
/// As `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if msg.is_null() || !ready(fd) {
        // SAFETY: the caller's arguments.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's msghdr, its name put back after the receive.
    unsafe {
        let name = (*msg).msg_name;
        let mut namelen = (*msg).msg_namelen;
        (*msg).msg_name = std::ptr::null_mut();
        (*msg).msg_namelen = 0;
        let n = real::recvmsg(fd, msg, flags);
        (*msg).msg_name = name;
        if n >= 0 && !name.is_null() {
            sock::put_addr(name.cast(), &mut namelen, 0);
        }
        (*msg).msg_namelen = if name.is_null() { 0 } else { namelen };
        n
    }
}

/// `close(2)`: the shim's socket takes its other end with it.
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(s) = fds::remove(fd) {
        sock::close(s);
    }
    // SAFETY: the caller's descriptor.
    unsafe { real::close(fd) }
}
