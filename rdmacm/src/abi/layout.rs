//! The offsets and sizes `tests/abi_layout.rs` compares with the C
//! compiler's on the installed headers.

use super::*;

/// (name, offset or size in bytes). A name `struct.field` is an offset
/// (`struct.a.b` of a nested field), a bare `struct` a size.
pub const LAYOUT: &[(&str, usize)] = {
    use std::mem::{offset_of as o, size_of as s};
    &[
        ("ibv_sa_path_rec", s::<ibv_sa_path_rec>()),
        ("ibv_sa_path_rec.dgid", o!(ibv_sa_path_rec, dgid)),
        ("ibv_sa_path_rec.sgid", o!(ibv_sa_path_rec, sgid)),
        ("ibv_sa_path_rec.dlid", o!(ibv_sa_path_rec, dlid)),
        ("ibv_sa_path_rec.slid", o!(ibv_sa_path_rec, slid)),
        (
            "ibv_sa_path_rec.raw_traffic",
            o!(ibv_sa_path_rec, raw_traffic),
        ),
        (
            "ibv_sa_path_rec.flow_label",
            o!(ibv_sa_path_rec, flow_label),
        ),
        ("ibv_sa_path_rec.hop_limit", o!(ibv_sa_path_rec, hop_limit)),
        (
            "ibv_sa_path_rec.traffic_class",
            o!(ibv_sa_path_rec, traffic_class),
        ),
        (
            "ibv_sa_path_rec.reversible",
            o!(ibv_sa_path_rec, reversible),
        ),
        ("ibv_sa_path_rec.numb_path", o!(ibv_sa_path_rec, numb_path)),
        ("ibv_sa_path_rec.pkey", o!(ibv_sa_path_rec, pkey)),
        ("ibv_sa_path_rec.sl", o!(ibv_sa_path_rec, sl)),
        (
            "ibv_sa_path_rec.mtu_selector",
            o!(ibv_sa_path_rec, mtu_selector),
        ),
        ("ibv_sa_path_rec.mtu", o!(ibv_sa_path_rec, mtu)),
        ("ibv_sa_path_rec.rate", o!(ibv_sa_path_rec, rate)),
        (
            "ibv_sa_path_rec.packet_life_time",
            o!(ibv_sa_path_rec, packet_life_time),
        ),
        (
            "ibv_sa_path_rec.preference",
            o!(ibv_sa_path_rec, preference),
        ),
        ("rdma_ib_addr", s::<rdma_ib_addr>()),
        ("rdma_ib_addr.dgid", o!(rdma_ib_addr, dgid)),
        ("rdma_ib_addr.pkey", o!(rdma_ib_addr, pkey)),
        ("rdma_addr", s::<rdma_addr>()),
        ("rdma_addr.src_addr", o!(rdma_addr, src)),
        ("rdma_addr.src_sin6", o!(rdma_addr, src)),
        ("rdma_addr.dst_addr", o!(rdma_addr, dst)),
        ("rdma_addr.dst_storage", o!(rdma_addr, dst)),
        ("rdma_addr.addr.ibaddr", o!(rdma_addr, ibaddr)),
        ("rdma_route", s::<rdma_route>()),
        ("rdma_route.path_rec", o!(rdma_route, path_rec)),
        ("rdma_route.num_paths", o!(rdma_route, num_paths)),
        ("rdma_event_channel", s::<rdma_event_channel>()),
        ("rdma_event_channel.fd", o!(rdma_event_channel, fd)),
        ("rdma_cm_id", s::<rdma_cm_id>()),
        ("rdma_cm_id.verbs", o!(rdma_cm_id, verbs)),
        ("rdma_cm_id.channel", o!(rdma_cm_id, channel)),
        ("rdma_cm_id.context", o!(rdma_cm_id, context)),
        ("rdma_cm_id.qp", o!(rdma_cm_id, qp)),
        ("rdma_cm_id.route", o!(rdma_cm_id, route)),
        ("rdma_cm_id.ps", o!(rdma_cm_id, ps)),
        ("rdma_cm_id.port_num", o!(rdma_cm_id, port_num)),
        ("rdma_cm_id.event", o!(rdma_cm_id, event)),
        (
            "rdma_cm_id.send_cq_channel",
            o!(rdma_cm_id, send_cq_channel),
        ),
        ("rdma_cm_id.send_cq", o!(rdma_cm_id, send_cq)),
        (
            "rdma_cm_id.recv_cq_channel",
            o!(rdma_cm_id, recv_cq_channel),
        ),
        ("rdma_cm_id.recv_cq", o!(rdma_cm_id, recv_cq)),
        ("rdma_cm_id.srq", o!(rdma_cm_id, srq)),
        ("rdma_cm_id.pd", o!(rdma_cm_id, pd)),
        ("rdma_cm_id.qp_type", o!(rdma_cm_id, qp_type)),
        ("rdma_conn_param", s::<rdma_conn_param>()),
        (
            "rdma_conn_param.private_data_len",
            o!(rdma_conn_param, private_data_len),
        ),
        (
            "rdma_conn_param.responder_resources",
            o!(rdma_conn_param, responder_resources),
        ),
        (
            "rdma_conn_param.initiator_depth",
            o!(rdma_conn_param, initiator_depth),
        ),
        (
            "rdma_conn_param.flow_control",
            o!(rdma_conn_param, flow_control),
        ),
        (
            "rdma_conn_param.retry_count",
            o!(rdma_conn_param, retry_count),
        ),
        (
            "rdma_conn_param.rnr_retry_count",
            o!(rdma_conn_param, rnr_retry_count),
        ),
        ("rdma_conn_param.srq", o!(rdma_conn_param, srq)),
        ("rdma_conn_param.qp_num", o!(rdma_conn_param, qp_num)),
        ("rdma_ud_param", s::<rdma_ud_param>()),
        (
            "rdma_ud_param.private_data_len",
            o!(rdma_ud_param, private_data_len),
        ),
        ("rdma_ud_param.ah_attr", o!(rdma_ud_param, ah_attr)),
        ("rdma_ud_param.qp_num", o!(rdma_ud_param, qp_num)),
        ("rdma_ud_param.qkey", o!(rdma_ud_param, qkey)),
        ("rdma_cm_event", s::<rdma_cm_event>()),
        ("rdma_cm_event.id", o!(rdma_cm_event, id)),
        ("rdma_cm_event.listen_id", o!(rdma_cm_event, listen_id)),
        ("rdma_cm_event.event", o!(rdma_cm_event, event)),
        ("rdma_cm_event.status", o!(rdma_cm_event, status)),
        ("rdma_cm_event.param", o!(rdma_cm_event, param)),
        ("rdma_addrinfo", s::<rdma_addrinfo>()),
        ("rdma_addrinfo.ai_family", o!(rdma_addrinfo, ai_family)),
        ("rdma_addrinfo.ai_qp_type", o!(rdma_addrinfo, ai_qp_type)),
        (
            "rdma_addrinfo.ai_port_space",
            o!(rdma_addrinfo, ai_port_space),
        ),
        ("rdma_addrinfo.ai_src_len", o!(rdma_addrinfo, ai_src_len)),
        ("rdma_addrinfo.ai_dst_len", o!(rdma_addrinfo, ai_dst_len)),
        ("rdma_addrinfo.ai_src_addr", o!(rdma_addrinfo, ai_src_addr)),
        ("rdma_addrinfo.ai_dst_addr", o!(rdma_addrinfo, ai_dst_addr)),
        (
            "rdma_addrinfo.ai_src_canonname",
            o!(rdma_addrinfo, ai_src_canonname),
        ),
        (
            "rdma_addrinfo.ai_dst_canonname",
            o!(rdma_addrinfo, ai_dst_canonname),
        ),
        (
            "rdma_addrinfo.ai_route_len",
            o!(rdma_addrinfo, ai_route_len),
        ),
        ("rdma_addrinfo.ai_route", o!(rdma_addrinfo, ai_route)),
        (
            "rdma_addrinfo.ai_connect_len",
            o!(rdma_addrinfo, ai_connect_len),
        ),
        ("rdma_addrinfo.ai_connect", o!(rdma_addrinfo, ai_connect)),
        ("rdma_addrinfo.ai_next", o!(rdma_addrinfo, ai_next)),
        ("rdma_cm_join_mc_attr_ex", s::<rdma_cm_join_mc_attr_ex>()),
        (
            "rdma_cm_join_mc_attr_ex.join_flags",
            o!(rdma_cm_join_mc_attr_ex, join_flags),
        ),
        (
            "rdma_cm_join_mc_attr_ex.addr",
            o!(rdma_cm_join_mc_attr_ex, addr),
        ),
    ]
};
