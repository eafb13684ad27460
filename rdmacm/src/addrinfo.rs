//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: names and numbers through the
//! system's `getaddrinfo`, one `rdma_addrinfo` per answer (the passive
//! side's address as the source, the active side's as the destination).

use crate::abi::*;
use crate::errno::{complain, fail};
use libc::{c_char, c_int, sockaddr};

/// A heap copy (malloc) of `len` bytes at `p`.
///
/// # Safety
/// `p` points at `len` readable bytes.
unsafe fn dup(p: *const u8, len: usize) -> *mut sockaddr {
    // SAFETY: malloc of a size; NULL is checked by the callers.
    let q = unsafe { libc::malloc(len) } as *mut u8;
    if !q.is_null() {
        // SAFETY: both regions are `len` bytes and distinct.
        unsafe { std::ptr::copy_nonoverlapping(p, q, len) };
    }
    q as *mut sockaddr
}

/// One zeroed `rdma_addrinfo` on the heap (calloc), with the hints'
/// flags, family, QP type and port space, the last two defaulting to each
/// other (RC on TCP, UD on UDP) as librdmacm fills them; NULL when out of
/// memory.
fn entry(h: Option<&rdma_addrinfo>, family: c_int) -> *mut rdma_addrinfo {
    // SAFETY: calloc of one rdma_addrinfo (all-zero is valid).
    let ra = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
    // SAFETY: just allocated, or NULL.
    let Some(r) = (unsafe { ra.as_mut() }) else {
        return ra;
    };
    r.ai_flags = h.map_or(0, |h| h.ai_flags);
    r.ai_family = family;
    r.ai_qp_type = h.map_or(0, |h| h.ai_qp_type);
    r.ai_port_space = h.map_or(0, |h| h.ai_port_space);
    if r.ai_qp_type == 0 {
        r.ai_qp_type = if r.ai_port_space == RDMA_PS_UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
    }
    if r.ai_port_space == 0 {
        r.ai_port_space = if r.ai_qp_type == IBV_QPT_UD {
            RDMA_PS_UDP
        } else {
            RDMA_PS_TCP
        };
    }
    ra
}

/// Copies `len` bytes of the address at `p` into `*to` / `*to_len`
/// unless `p` is NULL or `len` 0.
///
/// # Safety
/// `p` is NULL or points at `len` readable bytes.
unsafe fn copy_addr(
    to: &mut *mut sockaddr,
    to_len: &mut libc::socklen_t,
    p: *const sockaddr,
    len: libc::socklen_t,
) {
    if !p.is_null() && len > 0 {
        // SAFETY: the caller's promise.
        *to = unsafe { dup(p as *const u8, len as usize) };
        *to_len = len;
    }
}

/// The answers of the system's `getaddrinfo` for `node` / `service` as a
/// list of `rdma_addrinfo` (NULL when none could be allocated), or its
/// EAI_* code.
///
/// # Safety
/// `node` and `service` NULL or C strings, not both NULL.
unsafe fn resolve(
    node: *const c_char,
    service: *const c_char,
    h: Option<&rdma_addrinfo>,
) -> Result<*mut rdma_addrinfo, c_int> {
    let flags = h.map_or(0, |h| h.ai_flags);
    // SAFETY: all-zero is a valid addrinfo hint.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    ai.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
    ai.ai_socktype = libc::SOCK_STREAM;
    if flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: the caller's strings, our hints, an out-pointer.
    let r = unsafe { libc::getaddrinfo(node, service, &ai, &mut list) };
    if r != 0 {
        return Err(r);
    }
    let mut head: *mut rdma_addrinfo = std::ptr::null_mut();
    let mut tail: *mut *mut rdma_addrinfo = &mut head;
    let mut a = list;
    while !a.is_null() {
        // SAFETY: an entry of getaddrinfo's list.
        let e = unsafe { &*a };
        a = e.ai_next;
        let ra = entry(h, e.ai_family);
        // SAFETY: just allocated, or NULL.
        let Some(r) = (unsafe { ra.as_mut() }) else {
            break;
        };
        let (addr, len) = if flags & RAI_PASSIVE != 0 {
            (&mut r.ai_src_addr, &mut r.ai_src_len)
        } else {
            (&mut r.ai_dst_addr, &mut r.ai_dst_len)
        };
        // SAFETY: getaddrinfo's address of ai_addrlen bytes.
        unsafe { copy_addr(addr, len, e.ai_addr, e.ai_addrlen) };
        // SAFETY: `tail` points at the last next-pointer of our list.
        unsafe {
            *tail = ra;
            tail = &mut (*ra).ai_next;
        }
    }
    // SAFETY: getaddrinfo's list.
    unsafe { libc::freeaddrinfo(list) };
    Ok(head)
}

/// `rdma_getaddrinfo`: with a node or a service, the system's answers
/// for them; with neither, one entry made of the hints (their addresses,
/// flags, family, QP type and port space), as librdmacm answers a caller
/// that already holds the addresses. An entry without a source address
/// takes the hints' one.
///
/// # Safety
/// `node` and `service` NULL or C strings; `hints` NULL or an
/// `rdma_addrinfo`; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: the caller's hints.
    let h = unsafe { hints.as_ref() };
    if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
        return fail(libc::EINVAL);
    }
    if h.is_some_and(|h| h.ai_family == crate::sockaddr::AF_IB) {
        complain("rdma_getaddrinfo", "AF_IB is not supported");
        return fail(libc::EAFNOSUPPORT);
    }
    let head = match (h, node.is_null() && service.is_null()) {
        (Some(h), true) => {
            let ra = entry(Some(h), h.ai_family);
            // SAFETY: just allocated, or NULL.
            if let Some(r) = unsafe { ra.as_mut() } {
                // SAFETY: the hints' destination of ai_dst_len bytes.
                unsafe {
                    copy_addr(
                        &mut r.ai_dst_addr,
                        &mut r.ai_dst_len,
                        h.ai_dst_addr,
                        h.ai_dst_len,
                    )
                };
            }
            ra
        }
        // SAFETY: the caller's strings, not both NULL.
        _ => match unsafe { resolve(node, service, h) } {
            Ok(list) => list,
            // librdmacm answers the EAI_* code itself
            Err(eai) => return eai,
        },
    };
    if head.is_null() {
        return fail(libc::ENOMEM);
    }
    if let Some(h) = h {
        let mut e = head;
        // SAFETY: our list, each entry calloc'd above.
        while let Some(r) = unsafe { e.as_mut() } {
            if r.ai_src_addr.is_null() {
                // SAFETY: the hints' source of ai_src_len bytes.
                unsafe {
                    copy_addr(
                        &mut r.ai_src_addr,
                        &mut r.ai_src_len,
                        h.ai_src_addr,
                        h.ai_src_len,
                    )
                };
            }
            e = r.ai_next;
        }
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *res = head };
    0
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` is NULL or a list `rdma_getaddrinfo` returned.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_freeaddrinfo(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: an entry of our list, each pointer malloc'd or NULL.
        unsafe {
            let next = (*res).ai_next;
            libc::free((*res).ai_src_addr as *mut _);
            libc::free((*res).ai_dst_addr as *mut _);
            libc::free((*res).ai_src_canonname as *mut _);
            libc::free((*res).ai_dst_canonname as *mut _);
            libc::free((*res).ai_route);
            libc::free((*res).ai_connect);
            libc::free(res as *mut _);
            res = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numeric_passive_address_is_the_source() {
        // SAFETY: all-zero is a valid rdma_addrinfo.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
        let mut res = std::ptr::null_mut();
        // SAFETY: C strings, our hints and out-pointer.
        let r =
            unsafe { scm_rdma_getaddrinfo(c"192.0.2.1".as_ptr(), c"7471".as_ptr(), &h, &mut res) };
        assert_eq!(r, 0);
        // SAFETY: the list just returned.
        let a = unsafe { &*res };
        assert!(a.ai_dst_addr.is_null());
        // SAFETY: our source address.
        let src = unsafe { crate::sockaddr::read(a.ai_src_addr) };
        assert_eq!(src, Ok(Some("192.0.2.1:7471".parse().unwrap())));
        assert_eq!((a.ai_port_space, a.ai_qp_type), (RDMA_PS_TCP, IBV_QPT_RC));
        // SAFETY: the list just returned.
        unsafe { scm_rdma_freeaddrinfo(res) };
    }

    #[test]
    fn an_active_address_is_the_destination() {
        let mut res = std::ptr::null_mut();
        // SAFETY: C strings and an out-pointer.
        let r = unsafe {
            scm_rdma_getaddrinfo(
                c"fe80::1".as_ptr(),
                c"1".as_ptr(),
                std::ptr::null(),
                &mut res,
            )
        };
        assert_eq!(r, 0);
        // SAFETY: the list just returned.
        let a = unsafe { &*res };
        assert!(a.ai_src_addr.is_null());
        assert_eq!(a.ai_family, libc::AF_INET6);
        // SAFETY: the list just returned.
        unsafe { scm_rdma_freeaddrinfo(res) };
    }

    /// A `sockaddr_in` on the heap of the test, as a caller's hints hold it.
    fn sin(a: &str) -> libc::sockaddr_in {
        let a: std::net::SocketAddrV4 = a.parse().unwrap();
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        }
    }

    #[test]
    fn without_node_or_service_the_hints_addresses_are_the_answer() {
        let mut dst = sin("127.0.0.1:4791");
        let mut src = sin("127.0.0.2:0");
        // SAFETY: all-zero is a valid rdma_addrinfo.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_family = libc::AF_INET;
        h.ai_flags = RAI_FAMILY;
        h.ai_port_space = RDMA_PS_TCP;
        h.ai_dst_addr = &mut dst as *mut _ as *mut sockaddr;
        h.ai_dst_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.ai_src_addr = &mut src as *mut _ as *mut sockaddr;
        h.ai_src_len = h.ai_dst_len;
        let mut res = std::ptr::null_mut();
        // SAFETY: NULL strings, our hints, an out-pointer.
        let r = unsafe { scm_rdma_getaddrinfo(std::ptr::null(), std::ptr::null(), &h, &mut res) };
        assert_eq!(r, 0);
        // SAFETY: the list just returned.
        let a = unsafe { &*res };
        assert!(a.ai_next.is_null());
        assert_eq!((a.ai_family, a.ai_flags), (libc::AF_INET, RAI_FAMILY));
        assert_eq!((a.ai_port_space, a.ai_qp_type), (RDMA_PS_TCP, IBV_QPT_RC));
        // SAFETY: our addresses, copies of the hints'.
        let (d, s) = unsafe {
            (
                crate::sockaddr::read(a.ai_dst_addr),
                crate::sockaddr::read(a.ai_src_addr),
            )
        };
        assert_eq!(d, Ok(Some("127.0.0.1:4791".parse().unwrap())));
        assert_eq!(s, Ok(Some("127.0.0.2:0".parse().unwrap())));
        assert_ne!(a.ai_dst_addr, h.ai_dst_addr, "a copy, freed with the list");
        // SAFETY: the list just returned.
        unsafe { scm_rdma_freeaddrinfo(res) };
    }

    #[test]
    fn nothing_to_resolve_is_einval() {
        let mut res = std::ptr::null_mut();
        // SAFETY: NULL strings and hints, an out-pointer.
        let r = unsafe {
            scm_rdma_getaddrinfo(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                &mut res,
            )
        };
        assert_eq!(r, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
