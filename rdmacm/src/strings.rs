//! `rdma_event_str`.

use crate::abi::event;
use libc::c_char;

/// The name of an `enum rdma_cm_event_type` value.
pub fn event_name(e: u32) -> &'static std::ffi::CStr {
    match e {
        event::ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        event::ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        event::ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        event::ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        event::CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        event::CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        event::CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        event::UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        event::REJECTED => c"RDMA_CM_EVENT_REJECTED",
        event::ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        event::DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        event::DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        event::MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        event::MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        event::ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        event::TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    }
}

/// `rdma_event_str`.
#[no_mangle]
pub extern "C" fn scm_rdma_event_str(e: u32) -> *const c_char {
    event_name(e).as_ptr()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_event_has_its_header_name() {
        assert_eq!(
            super::event_name(9).to_str(),
            Ok("RDMA_CM_EVENT_ESTABLISHED")
        );
        assert_eq!(
            super::event_name(15).to_str(),
            Ok("RDMA_CM_EVENT_TIMEWAIT_EXIT")
        );
        assert_eq!(super::event_name(16).to_str(), Ok("UNKNOWN EVENT"));
    }
}
