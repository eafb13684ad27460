//! libc's own functions behind the ones the shim exports, found with
//! `dlsym(RTLD_NEXT, ...)` once each. The shim's own work on its sockets
//! goes through these, never through its exports.

use libc::{c_int, c_void, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` (NUL-terminated) after the shim's, 0 if
/// there is none.
fn lookup(name: &str, slot: &AtomicUsize) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated literal (the macro below);
    // dlsym only reads it.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! next {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => { $(
        /// libc's function of that name.
        ///
        /// # Safety
        /// As libc's: the pointers are the caller's promise.
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = lookup(concat!(stringify!($name), "\0"), &SLOT);
            if p == 0 {
                crate::set_errno(libc::ENOSYS);
                return -1;
            }
            // SAFETY: dlsym found libc's definition of this very name,
            // whose C signature these types spell.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's arguments, passed on unchanged.
            unsafe { f($($arg),*) }
        }
    )* };
}

next! {
    socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
    getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
    send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
    sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const sockaddr, alen: socklen_t) -> ssize_t;
    sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t;
    recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut sockaddr, alen: *mut socklen_t) -> ssize_t;
    recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    __recv_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    __recvfrom_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, alen: *mut socklen_t) -> ssize_t;
    close(fd: c_int) -> c_int;
}
