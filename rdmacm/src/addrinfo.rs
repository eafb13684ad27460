//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: names and numbers through the
//! system's `getaddrinfo`, one `rdma_addrinfo` per answer (the passive
//! side's address as the source, the active side's as the destination).

use crate::abi::*;
use crate::fail;
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

/// `rdma_getaddrinfo`.
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
    if res.is_null() || (node.is_null() && service.is_null()) {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's hints.
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    if h.is_some_and(|h| h.ai_family == crate::sockaddr::AF_IB) {
        crate::complain("rdma_getaddrinfo", "AF_IB is not supported");
        return fail(libc::EAFNOSUPPORT);
    }
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
        // librdmacm answers the EAI_* code itself
        return r;
    }
    let mut head: *mut rdma_addrinfo = std::ptr::null_mut();
    let mut tail: *mut *mut rdma_addrinfo = &mut head;
    let mut a = list;
    while !a.is_null() {
        // SAFETY: an entry of getaddrinfo's list.
        let e = unsafe { &*a };
        a = e.ai_next;
        // SAFETY: calloc of one rdma_addrinfo (all-zero is valid).
        let ra =
            unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if ra.is_null() {
            break;
        }
        // SAFETY: just allocated.
        let r = unsafe { &mut *ra };
        r.ai_flags = flags;
        r.ai_family = e.ai_family;
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
        // SAFETY: getaddrinfo's address of ai_addrlen bytes.
        let addr = unsafe { dup(e.ai_addr as *const u8, e.ai_addrlen as usize) };
        if flags & RAI_PASSIVE != 0 {
            r.ai_src_addr = addr;
            r.ai_src_len = e.ai_addrlen;
        } else {
            r.ai_dst_addr = addr;
            r.ai_dst_len = e.ai_addrlen;
            if let Some(h) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
                // SAFETY: the hints' source address of ai_src_len bytes.
                r.ai_src_addr = unsafe { dup(h.ai_src_addr as *const u8, h.ai_src_len as usize) };
                r.ai_src_len = h.ai_src_len;
            }
        }
        // SAFETY: `tail` points at the last next-pointer of our list.
        unsafe {
            *tail = ra;
            tail = &mut (*ra).ai_next;
        }
    }
    // SAFETY: getaddrinfo's list.
    unsafe { libc::freeaddrinfo(list) };
    if head.is_null() {
        return fail(libc::ENOMEM);
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
}
