//! What the switch stage ([`super::pfc`]) and a trunk port honouring
//! pauses ([`super::pfc_hold`]) share at the link layer: the priority
//! PFC pauses, and AF_PACKET sockets bound to a switch port.

use std::os::fd::{FromRawFd, OwnedFd};

/// The priority the stage pauses: rnicd's RoCEv2 data (DSCP 26 → 3).
pub const ROCE_PRIORITY: u8 = 3;

/// An AF_PACKET socket that sends on interface `ifindex` and receives
/// nothing (protocol 0).
pub fn packet_socket(ifindex: u32) -> std::io::Result<OwnedFd> {
    packet_socket_with(ifindex, 0, 0, |_| Ok(()))
}

/// An AF_PACKET socket (`extra` flags beside SOCK_RAW | SOCK_CLOEXEC)
/// bound to interface `ifindex` for protocol `proto` (host order; 0:
/// receives nothing), `prepare`d before the bind (a filter, say).
pub fn packet_socket_with(
    ifindex: u32,
    proto: u16,
    extra: i32,
    prepare: impl FnOnce(&OwnedFd) -> std::io::Result<()>,
) -> std::io::Result<OwnedFd> {
    let proto = proto.to_be();
    // SAFETY: socket(2) with constant arguments; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | extra,
            i32::from(proto),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    prepare(&owned)?;
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: bind(2) with a sockaddr_ll of the length we pass.
    let r = unsafe {
        libc::bind(
            fd,
            std::ptr::addr_of!(sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
}
