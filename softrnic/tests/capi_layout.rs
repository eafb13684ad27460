//! The C API's structures (`src/capi/types.rs`) against its header
//! `include/softrnic.h`: a C program compiled with the header prints
//! `offsetof` / `sizeof` of every field of every structure passed by
//! value or pointer, and each must equal Rust's.

use softrnic::capi::types::*;
use std::mem::{offset_of, size_of};

/// `("struct.field", offset)` for each field and `("struct", size)`.
macro_rules! layout {
    ($($ty:ty => $c:literal { $($f:ident),* $(,)? })*) => {
        vec![$(
            $((concat!($c, ".", stringify!($f)), offset_of!($ty, $f)),)*
            ($c, size_of::<$ty>()),
        )*]
    };
}

#[test]
fn every_c_api_structure_matches_softrnic_h() {
    let layout = layout! {
        SrnicAhAttr => "srnic_ah_attr" { dgid, dmac, traffic_class, hop_limit, flow_label }
        SrnicWcEx => "srnic_wc_ex" {
            wr_id, status, opcode, qp_num, byte_len, imm_data, wc_flags, src_qp, _pad
        }
        SrnicQpInitAttrEx => "srnic_qp_init_attr_ex" {
            send_cq, recv_cq, srq, max_send_wr, max_recv_wr, sq_sig_all, qp_type
        }
        SrnicDeviceAttr => "srnic_device_attr" { gid, mac, mtu, max_qp_wr, max_cqe, max_sge }
        SrnicSge => "srnic_sge" { addr, length, lkey }
        SrnicSendWr => "srnic_send_wr" {
            wr_id, opcode, send_flags, sg_list, num_sge, imm_data, remote_addr, rkey, _pad,
            compare_add, swap
        }
        SrnicRecvWr => "srnic_recv_wr" { wr_id, sg_list, num_sge }
        SrnicWc => "srnic_wc" { wr_id, status, opcode, qp_num, byte_len, imm_data, wc_flags }
        SrnicQpInitAttr => "srnic_qp_init_attr" {
            send_cq, recv_cq, max_send_wr, max_recv_wr, sq_sig_all
        }
        SrnicPortAttr => "srnic_port_attr" { state, active_mtu, max_mtu, link_speed_bps }
        SrnicAsyncEvent => "srnic_async_event" {
            event_type, qp_num, cq_num, srq_num, port_num
        }
    };
    assert!(layout.len() >= 70, "{} entries", layout.len());
    let header = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/softrnic.h");
    let header = header.to_str().expect("utf-8 path");
    testkit::abi::check_layout(
        "every_c_api_structure_matches_softrnic_h",
        header,
        header,
        "softrnic",
        &layout,
    );
}
