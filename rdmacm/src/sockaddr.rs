//! `struct sockaddr` ↔ `SocketAddr`: what the application passes in and
//! what `rdma_cm_id.route.addr` holds.

use crate::abi::rdma_sockaddr;
use libc::{c_int, sockaddr, sockaddr_in, sockaddr_in6, AF_INET, AF_INET6};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `AF_IB` (rdma-core's `<infiniband/ib.h>`): InfiniBand addressing,
/// which this library does not speak.
pub const AF_IB: c_int = 27;

/// The address `sa` names: IPv4 or IPv6; EAFNOSUPPORT for AF_IB and any
/// other family.
///
/// # Safety
/// `sa` is NULL or points at a `sockaddr` of its family's size.
pub unsafe fn read(sa: *const sockaddr) -> Result<Option<SocketAddr>, c_int> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's sockaddr; its family says how long it is.
    let family = c_int::from(unsafe { (*sa).sa_family });
    match family {
        AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { std::ptr::read_unaligned(sa as *const sockaddr_in) };
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            ))))
        }
        AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { std::ptr::read_unaligned(sa as *const sockaddr_in6) };
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            ))))
        }
        AF_IB => {
            crate::errno::complain("address", "AF_IB (InfiniBand addressing) is not supported");
            Err(libc::EAFNOSUPPORT)
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as the union of `rdma_addr`.
pub fn write(dst: &mut rdma_sockaddr, a: SocketAddr) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    *dst = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: writing the sin view of a zeroed union.
            let s = unsafe { &mut dst.sin };
            s.sin_family = AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: writing the sin6 view of a zeroed union.
            let s = unsafe { &mut dst.sin6 };
            s.sin6_family = AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
        }
    }
}

/// The port of the union (network order), 0 when it holds no address.
pub fn port_be(a: &rdma_sockaddr) -> u16 {
    // SAFETY: every view of the union starts with the family; the port
    // sits at the same offset in sin and sin6.
    unsafe {
        match c_int::from(a.addr.sa_family) {
            AF_INET => a.sin.sin_port,
            AF_INET6 => a.sin6.sin6_port,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_the_union() {
        for a in ["192.0.2.1:7174", "[fe80::1]:1"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: all-zero is a valid union value.
            let mut u: rdma_sockaddr = unsafe { std::mem::zeroed() };
            write(&mut u, a);
            // SAFETY: the union holds the address just written.
            let back = unsafe { read(&u.addr) }.unwrap();
            assert_eq!(back, Some(a));
            assert_eq!(u16::from_be(port_be(&u)), a.port());
        }
    }

    #[test]
    fn af_ib_is_refused() {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        s.ss_family = AF_IB as libc::sa_family_t;
        // SAFETY: a sockaddr_storage outlives the call.
        let r = unsafe { read(&s as *const _ as *const sockaddr) };
        assert_eq!(r, Err(libc::EAFNOSUPPORT));
    }
}
