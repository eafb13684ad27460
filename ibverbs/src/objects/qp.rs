//! Queue pairs: create, modify (checked by the daemon against the IBA
//! state machine), query, destroy.

use super::*;

/// A QP: its `ibv_qp_ex` (whose first member is the `ibv_qp`, so the
/// application's `ibv_qp *` and `ibv_qp_ex *` both name the object).
#[repr(C)]
pub struct Qp {
    pub ex: ibv_qp_ex,
    /// `IBV_QP_EX_WITH_*` the QP was created with (0: not an extended QP).
    pub send_ops: u64,
    pub inner: Mutex<QpInner>,
}

pub struct QpInner {
    pub q: softrnic::Qp,
    pub kind: QpKind,
    /// Sends posted (the send ring's producer index: slot of the next
    /// inline copy).
    pub posted: u32,
    /// Inline sends are copied here (one `cap.max_inline_data` slot per
    /// ring entry) and sent from this region: (buffer, lkey, slots).
    pub inline: Option<(Buffer, softrnic::Mr, u32)>,
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    /// The attributes last set, for `ibv_query_qp`.
    pub attr: ibv_qp_attr,
    /// The `ibv_wr_*` work requests between `wr_start` and `wr_complete`.
    pub batch: crate::datapath::wr_api::WrBatch,
    /// Sends posted and not completed; receives likewise (None: the QP
    /// receives from an SRQ, which keeps its own).
    pub sent: SharedWrs,
    pub recvd: Option<SharedWrs>,
}

/// # Safety
/// `q` is NULL or a QP from `ibv_create_qp` not yet destroyed.
pub unsafe fn qp_of<'a>(q: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: Qp starts with its ibv_qp.
    (!q.is_null()).then(|| unsafe { &*(q as *const Qp) })
}

/// What `ibv_create_qp` and `create_qp_ex` share: the QP on `pd`, with
/// `attr.cap` updated to what it has.
///
/// # Safety
/// `pd` is NULL or a live PD of this library's; `attr`'s CQ and SRQ
/// pointers are NULL or live objects of this library's.
unsafe fn create_qp_common(
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
    send_ops: u64,
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: the application's PD.
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    // SAFETY: the PD's context is open.
    let ctx = unsafe { Ctx::from(p.ibv.context) }.ok_or(libc::EINVAL)?;
    let kind = match attr.qp_type {
        IBV_QPT_RC => QpKind::Rc,
        IBV_QPT_UC => QpKind::Uc,
        IBV_QPT_UD => QpKind::Ud,
        t => {
            complain(
                "ibv_create_qp",
                format!("QP type {t} is not supported (RC, UC, UD are)"),
            );
            return Err(libc::EOPNOTSUPP);
        }
    };
    // SAFETY: the application's CQs / SRQ (NULL checked).
    let (scq, rcq) = unsafe { (cq_of(attr.send_cq), cq_of(attr.recv_cq)) };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: as above.
    let srq = unsafe { srq_of(attr.srq) };
    let d = &ctx.inner.device;
    let cap = &mut attr.cap;
    if cap.max_send_wr > d.max_qp_wr
        || (srq.is_none() && cap.max_recv_wr > d.max_qp_wr)
        || cap.max_send_sge > d.max_sge
        || cap.max_recv_sge > d.max_sge
    {
        return Err(libc::EINVAL);
    }
    if cap.max_inline_data > MAX_INLINE {
        return Err(libc::EINVAL);
    }
    let init = QpInitAttr {
        qp_type: kind,
        send_cq: scq.ex.cq.handle,
        recv_cq: rcq.ex.cq.handle,
        max_send_wr: cap.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() {
            0
        } else {
            cap.max_recv_wr.max(1)
        },
        sq_sig_all: attr.sq_sig_all != 0,
        srq: srq.map(|s| s.ibv.handle),
    };
    let q = p.inner.create_qp(&init).map_err(|e| {
        complain("ibv_create_qp", &e);
        errno_of(&e)
    })?;
    let (sq_entries, rq_entries) = q.entries();
    // as rxe sizes a send WQE: the space of its gather list (16 bytes an
    // SGE) carries inline data too, so a QP asked for none still takes
    // inline sends of that size (rdma_xclient relies on it)
    let inline_cap = cap
        .max_inline_data
        .max(cap.max_send_sge.saturating_mul(16))
        .min(MAX_INLINE);
    let inline = match inline_buffer(&p.inner, inline_cap, sq_entries) {
        Ok(i) => i,
        Err(e) => {
            let _ = q.destroy();
            return Err(e);
        }
    };
    // what the QP really has (IBA 11.2.4.1: at least what was asked)
    cap.max_send_wr = sq_entries;
    if srq.is_none() {
        cap.max_recv_wr = rq_entries;
    } else {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    cap.max_send_sge = d.max_sge;
    if srq.is_none() {
        cap.max_recv_sge = d.max_sge;
    }
    cap.max_inline_data = if inline.is_some() { inline_cap } else { 0 };
    let qpn = q.qpn;
    let sent = Outstanding::shared(sq_entries, true);
    let recvd = srq.is_none().then(|| Outstanding::shared(rq_entries, true));
    let recv = recvd.clone().or_else(|| srq.map(|s| s.wrs.clone()));
    attach(qpn, (scq, &sent), (rcq, recv));
    let cap = *cap;
    let qa = ibv_qp_attr {
        cap,
        ..Default::default()
    };
    let ex = new_qp_ex(p, pd, attr, qpn, send_ops);
    let ptr = boxed(Qp {
        ex,
        send_ops,
        inner: Mutex::new(QpInner {
            q,
            kind,
            posted: 0,
            inline,
            cap,
            sq_sig_all: attr.sq_sig_all != 0,
            attr: qa,
            batch: Default::default(),
            sent,
            recvd,
        }),
    });
    lock(&ctx.qps).insert(qpn, ptr as usize);
    Ok(ptr as *mut ibv_qp)
}

/// The `ibv_qp_ex` of a new QP `qpn` in RESET on `pd` (`p`), with the
/// `ibv_wr_*` slots filled when it has `send_ops`.
fn new_qp_ex(
    p: &Pd,
    pd: *mut ibv_pd,
    attr: &ibv_qp_init_attr,
    qpn: u32,
    send_ops: u64,
) -> ibv_qp_ex {
    // SAFETY: ibv_qp_ex is pointers, integers, optional function pointers
    // and ibv_qp's mutex/cond, whose static initializer is all zero.
    let mut ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let ibv = &mut ex.qp_base;
    ibv.context = p.ibv.context;
    ibv.qp_context = attr.qp_context;
    ibv.pd = pd;
    ibv.send_cq = attr.send_cq;
    ibv.recv_cq = attr.recv_cq;
    ibv.srq = attr.srq;
    ibv.handle = qpn;
    ibv.qp_num = qpn;
    ibv.state = IBV_QPS_RESET;
    ibv.qp_type = attr.qp_type;
    if send_ops != 0 {
        crate::datapath::wr_api::install(&mut ex);
    }
    ex
}

/// The region inline sends are copied into: one `inline_cap` slot per send
/// ring entry (None when the QP takes no inline data).
fn inline_buffer(
    pd: &softrnic::Pd,
    inline_cap: u32,
    sq_entries: u32,
) -> Result<Option<(Buffer, softrnic::Mr, u32)>, c_int> {
    if inline_cap == 0 {
        return Ok(None);
    }
    let bytes = sq_entries as usize * inline_cap as usize;
    pd.alloc_buffer(bytes)
        .and_then(|b| pd.reg_mr(&b, 0, bytes, 0).map(|m| Some((b, m, sq_entries))))
        .map_err(|e| {
            complain("ibv_create_qp", format!("inline buffer: {e}"));
            errno_of(&e)
        })
}

/// `ibv_create_qp` (RC, UC, UD; optionally on an SRQ).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable (`cap` is
/// updated to what the QP has).
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    // SAFETY: the caller's attributes and objects (this function's
    // contract is create_qp_common's).
    match unsafe { create_qp_common(pd, &mut *attr, 0) } {
        Ok(q) => q,
        Err(e) => null_errno(e),
    }
}

/// The `IBV_QP_EX_WITH_*` operations the `ibv_wr_*` API offers on a QP
/// of `kind`: the work requests `ibv_post_send` takes on it (IBA Table 46:
/// READ, atomics and SEND with Invalidate on RC only; UD sends only).
pub fn send_ops_of(kind: QpKind) -> u64 {
    let both = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    let connected = both
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_LOCAL_INV
        | IBV_QP_EX_WITH_BIND_MW;
    match kind {
        QpKind::Rc => {
            connected
                | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_SEND_WITH_INV
        }
        QpKind::Uc => connected,
        QpKind::Ud => both,
    }
}

/// `verbs_context.create_qp_ex`: the attributes of `ibv_create_qp` with a
/// PD, and `send_ops_flags` for the `ibv_wr_*` API (what the QP type
/// supports, [`send_ops_of`]); create flags of 0 are accepted. XRC, RSS,
/// TSO and source QPNs are refused with EOPNOTSUPP, as are send
/// operations the QP cannot do (as rxe refuses them).
///
/// # Safety
/// Called through the ops table with the application's objects, which
/// this library made (or NULL); WR lists and arrays as the verb defines.
pub unsafe extern "C" fn create_qp_ex(
    _c: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    let has = |bit: u32| a.comp_mask & bit != 0;
    if a.comp_mask & !known != 0 || !has(IBV_QP_INIT_ATTR_PD) {
        complain(
            "ibv_create_qp_ex",
            "only a PD, create flags of 0 and send_ops_flags are supported (no XRC, RSS, TSO, source QPN)",
        );
        return null_errno(libc::EOPNOTSUPP);
    }
    if has(IBV_QP_INIT_ATTR_CREATE_FLAGS) && a.create_flags != 0 {
        complain(
            "ibv_create_qp_ex",
            format!("create flags {:#x} are not supported", a.create_flags),
        );
        return null_errno(libc::EOPNOTSUPP);
    }
    let send_ops = if has(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        let kind = match a.qp_type {
            IBV_QPT_RC => QpKind::Rc,
            IBV_QPT_UC => QpKind::Uc,
            IBV_QPT_UD => QpKind::Ud,
            _ => return null_errno(libc::EOPNOTSUPP),
        };
        let extra = a.send_ops_flags & !send_ops_of(kind);
        if extra != 0 {
            complain(
                "ibv_create_qp_ex",
                format!("send_ops_flags {extra:#x} are not supported on this QP type"),
            );
            return null_errno(libc::EOPNOTSUPP);
        }
        // a QP asking for none is still one of the ibv_wr_* API
        a.send_ops_flags | SEND_OPS_REQUESTED
    } else {
        0
    };
    // SAFETY: ibv_qp_init_attr_ex begins with the fields of ibv_qp_init_attr.
    let base = unsafe { &mut *(attr as *mut ibv_qp_init_attr) };
    // SAFETY: the application's PD and objects (this function's contract).
    match unsafe { create_qp_common(a.pd, base, send_ops) } {
        Ok(q) => q,
        Err(e) => null_errno(e),
    }
}

/// A bit above every `IBV_QP_EX_WITH_*` marking [`Qp::send_ops`] of a QP
/// created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
pub const SEND_OPS_REQUESTED: u64 = 1 << 63;

/// `ibv_qp_to_qp_ex`: the QP's `ibv_qp_ex` when it was created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, else NULL (as rdma-core answers).
///
/// # Safety
/// `qp` is NULL or a live QP of this library's.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: the application's QP (this function's contract).
    match unsafe { qp_of(qp) } {
        Some(q) if q.send_ops != 0 => qp as *mut ibv_qp_ex,
        _ => std::ptr::null_mut(),
    }
}

fn state_from(s: c_int) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

fn state_to(s: QpState) -> c_int {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

/// The address vector of a RoCE path: a GRH is required (RoCE has no
/// LIDs, IBA A16/A17: the GRH carries the addresses), its source GID must
/// be the one softrnic sends from.
pub fn av_from(verb: &str, a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        complain(
            verb,
            "RoCE needs a GRH (is_global = 1, the peer's GID; e.g. -g 3 / -x 3)",
        );
        return Err(libc::EINVAL);
    }
    if a.grh.sgid_index as usize != ROCE_V2_GID_INDEX {
        complain(
            verb,
            format!(
                "GID index {} is not softrnic's RoCE v2 GID; use index {ROCE_V2_GID_INDEX}",
                a.grh.sgid_index
            ),
        );
        return Err(libc::EINVAL);
    }
    let dgid = Gid(a.grh.dgid.raw);
    let dmac = resolve_mac(dgid).map_err(|e| {
        complain(verb, e);
        libc::EHOSTUNREACH
    })?;
    Ok(AhAttr {
        dgid,
        dmac,
        traffic_class: a.grh.traffic_class,
        hop_limit: if a.grh.hop_limit == 0 {
            64
        } else {
            a.grh.hop_limit
        },
        flow_label: a.grh.flow_label & 0xf_ffff,
        vlan: None,
    })
}

fn mtu_bytes(m: c_int) -> Option<u32> {
    Some(match m {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => return None,
    })
}

/// The attributes `ibv_modify_qp` remembers for `ibv_query_qp`: mask bit
/// and the fields it names.
type CopyAttr = fn(&mut ibv_qp_attr, &ibv_qp_attr);
const CACHED: &[(c_int, CopyAttr)] = &[
    (IBV_QP_STATE, |c, a| c.qp_state = a.qp_state),
    (IBV_QP_PKEY_INDEX, |c, a| c.pkey_index = a.pkey_index),
    (IBV_QP_PORT, |c, a| c.port_num = a.port_num),
    (IBV_QP_ACCESS_FLAGS, |c, a| {
        c.qp_access_flags = a.qp_access_flags
    }),
    (IBV_QP_QKEY, |c, a| c.qkey = a.qkey),
    (IBV_QP_AV, |c, a| c.ah_attr = a.ah_attr),
    (IBV_QP_PATH_MTU, |c, a| c.path_mtu = a.path_mtu),
    (IBV_QP_DEST_QPN, |c, a| c.dest_qp_num = a.dest_qp_num),
    (IBV_QP_RQ_PSN, |c, a| c.rq_psn = a.rq_psn),
    (IBV_QP_MAX_DEST_RD_ATOMIC, |c, a| {
        c.max_dest_rd_atomic = a.max_dest_rd_atomic
    }),
    (IBV_QP_MIN_RNR_TIMER, |c, a| {
        c.min_rnr_timer = a.min_rnr_timer
    }),
    (IBV_QP_SQ_PSN, |c, a| c.sq_psn = a.sq_psn),
    (IBV_QP_TIMEOUT, |c, a| c.timeout = a.timeout),
    (IBV_QP_RETRY_CNT, |c, a| c.retry_cnt = a.retry_cnt),
    (IBV_QP_RNR_RETRY, |c, a| c.rnr_retry = a.rnr_retry),
    (IBV_QP_MAX_QP_RD_ATOMIC, |c, a| {
        c.max_rd_atomic = a.max_rd_atomic
    }),
];

/// `ibv_modify_qp`: the attributes in `mask` to the daemon, which applies
/// the IBA state machine's rules (required and allowed attributes per
/// transition).
///
/// # Safety
/// `q` from `ibv_create_qp`, `attr` readable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_modify_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: `q` is NULL or a live QP of this library's (this function's
    // contract), as qp_of requires.
    let (Some(qp), false) = (unsafe { qp_of(q) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    let unsupported = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_RATE_LIMIT;
    if mask & unsupported != 0 {
        complain(
            "ibv_modify_qp",
            "alternate paths, path migration and rate limits are not supported",
        );
        return libc::EOPNOTSUPP;
    }
    let has = |m: c_int| mask & m != 0;
    let mut m = QpAttr::default();
    if has(IBV_QP_STATE) {
        match state_from(a.qp_state) {
            Some(s) => m.state = Some(s),
            None => return libc::EINVAL,
        }
    }
    if has(IBV_QP_PKEY_INDEX) {
        m.pkey_index = Some(a.pkey_index);
    }
    if has(IBV_QP_PORT) {
        m.port = Some(a.port_num);
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        m.access_flags = Some(a.qp_access_flags & 0xf);
    }
    if has(IBV_QP_QKEY) {
        m.qkey = Some(a.qkey);
    }
    if has(IBV_QP_AV) {
        match av_from("ibv_modify_qp", &a.ah_attr) {
            Ok(av) => m.ah = Some(av),
            Err(e) => return e,
        }
    }
    if has(IBV_QP_PATH_MTU) {
        match mtu_bytes(a.path_mtu) {
            Some(b) => m.path_mtu = Some(b),
            None => return libc::EINVAL,
        }
    }
    if has(IBV_QP_DEST_QPN) {
        m.dest_qpn = Some(a.dest_qp_num);
    }
    if has(IBV_QP_RQ_PSN) {
        m.rq_psn = Some(a.rq_psn & 0xff_ffff);
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        m.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        m.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if has(IBV_QP_SQ_PSN) {
        m.sq_psn = Some(a.sq_psn & 0xff_ffff);
    }
    if has(IBV_QP_TIMEOUT) {
        m.timeout = Some(a.timeout);
    }
    if has(IBV_QP_RETRY_CNT) {
        m.retry_cnt = Some(a.retry_cnt);
    }
    if has(IBV_QP_RNR_RETRY) {
        m.rnr_retry = Some(a.rnr_retry);
    }
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        m.max_rd_atomic = Some(a.max_rd_atomic);
    }
    let mut g = lock(&qp.inner);
    if let Err(e) = g.q.modify(&m) {
        complain("ibv_modify_qp", &e);
        return libc::EINVAL;
    }
    // remember what was set, for ibv_query_qp
    for (bit, copy) in CACHED {
        if has(*bit) {
            copy(&mut g.attr, a);
        }
    }
    if has(IBV_QP_STATE) {
        if a.qp_state == IBV_QPS_RESET {
            // IBA 10.3.1: a QP in Reset has empty work queues; its WRs
            // are gone without completions, and the completions its CQs
            // still hold are not delivered (as mlx5 cleans its CQ)
            lock(&g.sent).clear();
            if let Some(r) = &g.recvd {
                lock(r).clear();
            }
            let qpn = g.q.qpn;
            for c in [qp.ex.qp_base.send_cq, qp.ex.qp_base.recv_cq] {
                // SAFETY: the QP's CQs, which outlive it (ibv_destroy_cq
                // refuses a CQ a QP still uses).
                if let Some(c) = unsafe { cq_of(c) } {
                    lock(&c.inner).forget_qp(qpn);
                }
            }
        }
        // SAFETY: the application's QP; its state field mirrors ours.
        unsafe { (*q).state = a.qp_state };
    }
    0
}

/// `ibv_query_qp`: the state, PSNs, destination and MTU from the daemon,
/// the rest as last set.
///
/// # Safety
/// `q` from `ibv_create_qp`; `attr`, `init` writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_query_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: `q` is NULL or a live QP of this library's (this function's
    // contract), as qp_of requires.
    let (Some(qp), false) = (unsafe { qp_of(q) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    let g = lock(&qp.inner);
    let info = match g.q.query() {
        Ok(i) => i,
        Err(e) => return errno_of(&e),
    };
    let mut a = g.attr;
    a.qp_state = state_to(info.state);
    a.cur_qp_state = a.qp_state;
    a.dest_qp_num = info.dest_qpn;
    a.sq_psn = info.sq_psn;
    a.rq_psn = info.rq_psn;
    if info.mtu != 0 {
        a.path_mtu = crate::device::mtu_enum(info.mtu);
    }
    a.cap = g.cap;
    // SAFETY: the caller's structs; the QP's fields are ours.
    unsafe {
        *attr = a;
        (*q).state = a.qp_state;
        if !init.is_null() {
            *init = ibv_qp_init_attr {
                qp_context: qp.ex.qp_base.qp_context,
                send_cq: qp.ex.qp_base.send_cq,
                recv_cq: qp.ex.qp_base.recv_cq,
                srq: qp.ex.qp_base.srq,
                cap: g.cap,
                qp_type: qp.ex.qp_base.qp_type,
                sq_sig_all: g.sq_sig_all as c_int,
            };
        }
    }
    0
}

/// `ibv_query_qp_data_in_order`: 0 for every QP, operation and flags,
/// as rxe answers (it has no such operation; rdma-core's default is 0):
/// no promise that a message's last byte landing means the rest has.
#[no_mangle]
pub extern "C" fn srv_ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_int,
    _flags: u32,
) -> c_int {
    0
}

/// `ibv_destroy_qp`.
///
/// # Safety
/// `q` from `ibv_create_qp`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_destroy_qp(q: *mut ibv_qp) -> c_int {
    // SAFETY: `q` is NULL or a live QP of this library's (this function's
    // contract), as qp_of requires.
    let Some(qp) = (unsafe { qp_of(q) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the QP's context is open.
    if let Some(ctx) = unsafe { Ctx::from(qp.ex.qp_base.context) } {
        lock(&ctx.qps).remove(&qp.ex.qp_base.qp_num);
    }
    // SAFETY: a QP's CQs outlive it (destroy_cq refuses while attached).
    for c in unsafe { [cq_of(qp.ex.qp_base.send_cq), cq_of(qp.ex.qp_base.recv_cq)] }
        .into_iter()
        .flatten()
    {
        c.detach(qp.ex.qp_base.qp_num);
    }
    // SAFETY: made by Box in create_qp_common.
    let b = unsafe { Box::from_raw(q as *mut Qp) };
    let inner = b.inner.into_inner().unwrap_or_else(|e| e.into_inner());
    let r = inner.q.destroy();
    if let Some((_buf, mr, _)) = inner.inline {
        let _ = mr.dereg();
    }
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}
