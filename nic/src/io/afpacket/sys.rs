//! The AF_PACKET socket's system calls: the socket, its options, the
//! binding and the mapping of its rings.

use super::AfPacketError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

// linux/if_ether.h, linux/if_packet.h
const ETH_P_ALL: u16 = 0x0003;
pub(super) const PACKET_RX_RING: libc::c_int = 5;
pub(super) const PACKET_COPY_THRESH: libc::c_int = 7;
const PACKET_STATISTICS: libc::c_int = 6;
pub(super) const PACKET_VERSION: libc::c_int = 10;
pub(super) const PACKET_TX_RING: libc::c_int = 13;
pub(super) const PACKET_LOSS: libc::c_int = 14;
pub(super) const PACKET_VNET_HDR: libc::c_int = 15;
pub(super) const PACKET_QDISC_BYPASS: libc::c_int = 20;
pub(super) const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

pub(super) fn sys(what: &'static str) -> AfPacketError {
    AfPacketError::Sys {
        what,
        source: io::Error::last_os_error(),
    }
}

/// A non-blocking AF_PACKET socket that sees every protocol.
pub(super) fn packet_socket() -> Result<OwnedFd, AfPacketError> {
    raw_packet_socket(ETH_P_ALL)
}

/// A non-blocking AF_PACKET socket for `protocol` (0: it receives
/// nothing, a socket only to send on).
fn raw_packet_socket(protocol: u16) -> Result<OwnedFd, AfPacketError> {
    // SAFETY: socket(2) takes no pointers; the result is checked below.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            (protocol.to_be()) as i32,
        )
    };
    if raw < 0 {
        return Err(sys("socket(AF_PACKET)"));
    }
    // SAFETY: raw is a descriptor socket(2) just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// setsockopt(SOL_PACKET, opt) with the bytes of `v` — a `#[repr(C)]`
/// struct or an integer of the layout the kernel expects for `opt`.
pub(super) fn setsockopt<T>(
    fd: &OwnedFd,
    opt: libc::c_int,
    v: &T,
    what: &'static str,
) -> Result<(), AfPacketError> {
    // SAFETY: the kernel reads size_of::<T>() bytes from v, a live,
    // initialised T; it keeps no pointer to it after the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(sys(what));
    }
    Ok(())
}

/// Frames the kernel dropped because the RX ring was full, since the last
/// call (PACKET_STATISTICS reads and resets its count); 0 if it fails.
pub(super) fn read_kernel_drops(fd: &OwnedFd) -> u64 {
    // struct tpacket_stats_v3 (V2's tpacket_stats is its prefix)
    let mut st = [0u32; 3];
    let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
    // SAFETY: st is a writable buffer of `len` bytes and len a writable
    // socklen_t; the kernel writes at most `len` bytes and updates len.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            st.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 {
        st[1] as u64
    } else {
        0
    }
}

/// Whether the running kernel's release is at least `major.minor`.
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain byte arrays, for which all zeroes is valid;
    // uname(2) fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a live, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    let release: String = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    release_at_least(&release, major, minor)
}

/// Whether a kernel release string (`6.18.0-foo`) is at least
/// `major.minor`; false if it does not start with two numbers.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let num = |p: Option<&str>| p.and_then(|s| s.parse::<u32>().ok());
    match (num(parts.next()), num(parts.next())) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Raises the socket's receive buffer to `bytes` (SO_RCVBUFFORCE, which
/// root may set past net.core.rmem_max; else SO_RCVBUF): best effort.
pub(super) fn grow_rcvbuf(fd: &OwnedFd, bytes: libc::c_int) {
    grow_buf(fd, [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF], bytes)
}

/// Sets a socket buffer's size by the first of `opts` that works (the
/// forcing option needs CAP_NET_ADMIN). Best effort.
fn grow_buf(fd: &OwnedFd, opts: [libc::c_int; 2], bytes: libc::c_int) {
    for opt in opts {
        // SAFETY: the kernel reads one c_int from a live local.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &bytes as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// UDP_GRO on a UDP socket: it takes UDP GSO packets whole. Best effort.
pub(super) fn udp_gro(sock: &std::net::UdpSocket) {
    let one: libc::c_int = 1;
    // SAFETY: the kernel reads one c_int from a live local.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Binds the socket to interface `ifindex`, every protocol.
/// A socket that only sends, on interface `ifindex`: no protocol (it
/// receives nothing), a virtio-net header in front of every frame, a send
/// buffer of `sndbuf` bytes. The kernel reads each frame's protocol from
/// its Ethernet header.
pub(super) fn send_socket(ifindex: i32, sndbuf: libc::c_int) -> Result<OwnedFd, AfPacketError> {
    let fd = raw_packet_socket(0)?;
    let one: libc::c_int = 1;
    setsockopt(&fd, PACKET_VNET_HDR, &one, "PACKET_VNET_HDR")?;
    grow_buf(&fd, [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF], sndbuf);
    bind_proto(&fd, ifindex, 0)?;
    Ok(fd)
}

pub(super) fn bind(fd: &OwnedFd, ifindex: i32) -> Result<(), AfPacketError> {
    bind_proto(fd, ifindex, ETH_P_ALL)
}

fn bind_proto(fd: &OwnedFd, ifindex: i32, protocol: u16) -> Result<(), AfPacketError> {
    // SAFETY: sockaddr_ll is plain integers and byte arrays, for which all
    // zeroes is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: the address is a live sockaddr_ll and the length its size;
    // the kernel copies it during the call.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(sys("bind(AF_PACKET)"));
    }
    Ok(())
}

/// poll(2) for readability, at most `timeout` (capped at a second).
pub(super) fn poll_in(fd: &OwnedFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(0, 1000) as i32;
    // SAFETY: one live, writable pollfd, and nfds = 1.
    unsafe { libc::poll(&mut p, 1, ms.max(if timeout.is_zero() { 0 } else { 1 })) };
}

/// Whether the socket's send buffer has room again (poll(2) for POLLOUT,
/// without waiting).
pub(super) fn writable(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live, writable pollfd, and nfds = 1.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & libc::POLLOUT != 0
}

/// sendmmsg(2) of `msgs` without blocking; how many went out.
///
/// # Safety
///
/// Every message's iovecs point at memory live and readable for their
/// lengths until the call returns.
pub(super) unsafe fn sendmmsg(fd: &OwnedFd, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    loop {
        // SAFETY: msgs is a live, writable array of msgs.len() headers
        // (the kernel writes msg_len); their buffers are the caller's
        // promise.
        let r = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The socket's RX and TX rings, mapped into this process (the RX ring
/// first, the TX ring right after it: packet_mmap.rst). Unmapped on drop.
pub(super) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps the `len` bytes of rings set up on `fd`, locked in memory if
    /// RLIMIT_MEMLOCK allows.
    pub(super) fn new(fd: &OwnedFd, len: usize) -> Result<Mapping, AfPacketError> {
        let map = |flags| {
            // SAFETY: a fresh shared mapping of the socket's rings at an
            // address the kernel picks; nothing else refers to it yet.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    fd.as_raw_fd(),
                    0,
                )
            }
        };
        let mut ptr = map(libc::MAP_SHARED | libc::MAP_LOCKED);
        if ptr == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK: try without
            ptr = map(libc::MAP_SHARED);
        }
        if ptr == libc::MAP_FAILED {
            return Err(sys("mmap(rings)"));
        }
        Ok(Mapping {
            ptr: ptr as *mut u8,
            len,
        })
    }

    /// The address `off` bytes into the mapping (dereferencing it is the
    /// caller's business).
    pub(super) fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.len);
        self.ptr.wrapping_add(off)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping `new` made; the rings' pointers
        // into it are never dereferenced after their port is dropped.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::release_at_least;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.0-rc1", 6, 2));
        assert!(release_at_least("6.2", 6, 2));
        assert!(!release_at_least("6.1.0-56-amd64", 6, 2));
        assert!(!release_at_least("5.19.9", 6, 2));
        assert!(release_at_least("10.0.1", 6, 2));
        assert!(!release_at_least("", 6, 2));
        assert!(!release_at_least("six", 6, 2));
    }
}
