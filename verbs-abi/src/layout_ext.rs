//! The extended verbs' offsets and sizes `tests/abi_layout.rs` compares
//! with the C compiler's on the installed header: every field and
//! function-pointer slot of `ibv_qp_ex` and `ibv_cq_ex`, and of the
//! structures that create and drive them.

use super::*;

/// `("struct", size)` then `("struct.field", offset)` for each field.
macro_rules! every_field {
    ($s:ident; $($f:ident),* $(,)?) => {
        [
            (stringify!($s), std::mem::size_of::<$s>()),
            $((concat!(stringify!($s), ".", stringify!($f)), std::mem::offset_of!($s, $f)),)*
        ]
    };
}

/// `("struct.field", offset)` of fields the Rust side groups in the
/// member `$m` of type `$t` (the header repeats them inline).
macro_rules! inner_fields {
    ($s:ident, $m:ident: $t:ident; $($f:ident),* $(,)?) => {
        [$((
            concat!(stringify!($s), ".", stringify!($f)),
            std::mem::offset_of!($s, $m) + std::mem::offset_of!($t, $f),
        ),)*]
    };
}

const QP_EX: &[(&str, usize)] = &every_field!(ibv_qp_ex;
    qp_base, comp_mask, wr_id, wr_flags,
    wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv,
    wr_rdma_read, wr_rdma_write, wr_rdma_write_imm,
    wr_send, wr_send_imm, wr_send_inv, wr_send_tso,
    wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list,
    wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write,
);

const QP_EX_BASE: &[(&str, usize)] = &[
    (
        "ibv_qp_ex.qp_base.qp_num",
        std::mem::offset_of!(ibv_qp_ex, qp_base) + std::mem::offset_of!(ibv_qp, qp_num),
    ),
    (
        "ibv_qp_ex.qp_base.state",
        std::mem::offset_of!(ibv_qp_ex, qp_base) + std::mem::offset_of!(ibv_qp, state),
    ),
];

const CQ_EX: &[(&str, usize)] = &every_field!(ibv_cq_ex;
    comp_mask, status, wr_id, start_poll, next_poll, end_poll,
    read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num,
    read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits,
    read_completion_ts, read_cvlan, read_flow_tag, read_tm_info,
    read_completion_wallclock_ns,
);

const CQ_EX_INLINE: &[(&str, usize)] = &inner_fields!(ibv_cq_ex, cq: ibv_cq;
    context, channel, cq_context, handle, cqe, mutex, cond,
    comp_events_completed, async_events_completed,
);

const CQ_INIT: &[(&str, usize)] = &every_field!(ibv_cq_init_attr_ex;
    cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
);

const SMALL: &[(&str, usize)] = &[
    ("ibv_poll_cq_attr", std::mem::size_of::<ibv_poll_cq_attr>()),
    ("ibv_data_buf", std::mem::size_of::<ibv_data_buf>()),
    (
        "ibv_data_buf.addr",
        std::mem::offset_of!(ibv_data_buf, addr),
    ),
    (
        "ibv_data_buf.length",
        std::mem::offset_of!(ibv_data_buf, length),
    ),
    ("ibv_wc_tm_info", std::mem::size_of::<ibv_wc_tm_info>()),
    (
        "ibv_wc_tm_info.priv",
        std::mem::offset_of!(ibv_wc_tm_info, priv_),
    ),
    (
        "verbs_context.create_cq_ex",
        std::mem::offset_of!(verbs_context, create_cq_ex),
    ),
];

/// The extended verbs' entries, in the form of [`crate::LAYOUT`].
pub const LAYOUT_EXT: &[&[(&str, usize)]] =
    &[QP_EX, QP_EX_BASE, CQ_EX, CQ_EX_INLINE, CQ_INIT, SMALL];
