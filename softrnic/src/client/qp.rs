//! Queue pairs, shared receive queues and address handles.

use super::*;

/// What `query_qp` reports.
#[derive(Clone, Debug)]
pub struct QpInfo {
    pub state: QpState,
    pub dest_qpn: u32,
    pub mtu: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
}

/// A queue pair; posts write its shared rings directly.
pub struct Qp {
    pub(super) ctx: Arc<Context>,
    pub qpn: u32,
    pub kind: QpKind,
    pub(super) _map: Arc<Mapping>,
    pub(super) sq: Ring,
    pub(super) rq: Ring,
    pub(super) sq_prod: u32,
    pub(super) rq_prod: u32,
}

/// How `Qp::connect` sets up an RC/UC QP (defaults as in the `sim` crate).
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams {
    pub mtu: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: u32,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            access: ACCESS_ALL,
        }
    }
}

impl Qp {
    /// Writes the WQE and rings the doorbell (a release store of the
    /// producer index). Fails only when the ring is full.
    pub fn post_send(&mut self, wr: &SendWr) -> Result<()> {
        let w = ring::encode_send(wr);
        // SAFETY: a well-formed WQE.
        unsafe { self.post_raw_send(&w) }
    }

    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<()> {
        post_ring(
            &self.rq,
            &mut self.rq_prod,
            &ring::encode_recv(wr),
            &self.ctx,
        )
    }

    /// A UD send to `remote_qpn` at `ah` with `remote_qkey` (`wr.ud` is
    /// ignored: the address travels as the AH's handle).
    pub fn post_send_ud(
        &mut self,
        wr: &SendWr,
        ah: &Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result<()> {
        let w = ring::encode_send_ud(wr, ah.handle, remote_qpn, remote_qkey);
        // SAFETY: a well-formed WQE.
        unsafe { self.post_raw_send(&w) }
    }

    /// Posts a raw receive WQE as it is (the daemon validates it).
    pub fn post_raw_recv(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.rq, &mut self.rq_prod, w, &self.ctx)
    }

    /// Slots of the send and the receive ring.
    pub fn entries(&self) -> (u32, u32) {
        (self.sq.entries, self.rq.entries)
    }

    /// Free slots of the send ring: how many sends can be posted now (a
    /// wild consumer index reads as a full ring).
    pub fn send_room(&self) -> u32 {
        let used = self
            .sq_prod
            .wrapping_sub(self.sq.consumer().load(Ordering::Acquire));
        self.sq.entries.saturating_sub(used)
    }

    /// Receives posted to the QP's ring that the daemon has not taken yet.
    pub fn pending_recv(&self) -> u32 {
        self.rq_prod
            .wrapping_sub(self.rq.consumer().load(Ordering::Acquire))
    }

    /// UD: RESET → INIT → RTR → RTS with `qkey` (IBA 11.2.4.2 / the UD
    /// rows of the modify table: INIT needs P_Key index, port, Q_Key).
    pub fn ud_ready(&self, qkey: u32, sq_psn: u32) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(qkey),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..Default::default()
        })
    }

    /// Posts a raw WQE as it is (for tests of the daemon's validation).
    ///
    /// # Safety
    /// Always memory-safe for this process; "unsafe" marks that the WQE is
    /// not checked here and may complete with an error.
    pub unsafe fn post_raw_send(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.sq, &mut self.sq_prod, w, &self.ctx)
    }

    /// Rings both rings' doorbells without posting (what a post does after
    /// publishing its producer index), for tests that write the rings
    /// themselves.
    pub fn ring_doorbells(&self) {
        super::ring_doorbell(&self.sq, &self.ctx);
        super::ring_doorbell(&self.rq, &self.ctx);
    }

    /// The shared rings' raw bytes: (send ring, receive ring), each as
    /// (pointer, length). For hostile-client tests.
    pub fn raw_rings(&self) -> [(*mut u8, usize); 2] {
        [self.sq.raw_bytes(), self.rq.raw_bytes()]
    }

    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        self.ctx.simple(Request::ModifyQp {
            qpn: self.qpn,
            attr: *attr,
        })
    }

    pub fn query(&self) -> Result<QpInfo> {
        match self
            .ctx
            .request(Request::QueryQp { qpn: self.qpn }, None)?
            .0
        {
            Response::QpInfo {
                state,
                dest_qpn,
                mtu,
                sq_psn,
                rq_psn,
                ..
            } => Ok(QpInfo {
                state,
                dest_qpn,
                mtu,
                sq_psn,
                rq_psn,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// INIT → RTR → RTS towards `dest_qpn` at `ah` (RC or UC).
    pub fn connect(
        &self,
        p: &ConnectParams,
        ah: AhAttr,
        dest_qpn: u32,
        sq_psn: u32,
        rq_psn: u32,
    ) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(p.access),
            ..Default::default()
        })?;
        let rc = self.kind == QpKind::Rc;
        self.modify(&QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(ah),
            path_mtu: Some(p.mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: rc.then_some(p.max_rd_atomic),
            min_rnr_timer: rc.then_some(p.min_rnr_timer),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: rc.then_some(p.timeout),
            retry_cnt: rc.then_some(p.retry_cnt),
            rnr_retry: rc.then_some(p.rnr_retry),
            max_rd_atomic: rc.then_some(p.max_rd_atomic),
            ..Default::default()
        })
    }

    pub fn destroy(self) -> Result<()> {
        self.ctx.simple(Request::DestroyQp { qpn: self.qpn })
    }
}

/// An address handle (daemon-side: only its owner's QPs on its PD may
/// send with it).
pub struct Ah {
    pub(super) ctx: Arc<Context>,
    pub handle: u32,
    pub attr: AhAttr,
}

impl Ah {
    pub fn destroy(self) -> Result<()> {
        self.ctx.simple(Request::DestroyAh { ah: self.handle })
    }
}

/// A shared receive queue; `post_recv` writes its shared ring directly.
pub struct Srq {
    pub(super) ctx: Arc<Context>,
    pub handle: u32,
    pub(super) _map: Arc<Mapping>,
    pub(super) ring: Ring,
    pub(super) prod: u32,
}

impl Srq {
    /// `ibv_modify_srq(IBV_SRQ_LIMIT)`: once fewer than `limit` receives are
    /// left, an [`proto::AsyncEventMsg::SrqLimitReached`] comes
    /// ([`Context::get_async_event`]) and the limit disarms; 0 disarms.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.ctx.simple(Request::ModifySrq {
            srq: self.handle,
            limit,
        })
    }

    /// `ibv_query_srq`: (max WRs, armed limit, receives the daemon's
    /// transport holds — the ring may hold more not yet taken).
    pub fn query(&self) -> Result<(u32, u32, u32)> {
        match self
            .ctx
            .request(Request::QuerySrq { srq: self.handle }, None)?
            .0
        {
            Response::SrqInfo {
                max_wr,
                limit,
                pending,
            } => Ok((max_wr, limit, pending)),
            r => Err(unexpected(r)),
        }
    }

    /// Posts a raw receive WQE as it is (the daemon validates it).
    pub fn post_raw_recv(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.ring, &mut self.prod, w, &self.ctx)
    }

    /// `ibv_post_srq_recv`. Fails only when the ring is full.
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<()> {
        post_ring(
            &self.ring,
            &mut self.prod,
            &ring::encode_recv(wr),
            &self.ctx,
        )
    }

    /// Rings the doorbell without posting, for tests that write the ring
    /// themselves.
    pub fn ring_doorbell(&self) {
        super::ring_doorbell(&self.ring, &self.ctx);
    }

    /// The shared ring's raw bytes (pointer, length), for hostile-client
    /// tests.
    pub fn raw_ring(&self) -> (*mut u8, usize) {
        self.ring.raw_bytes()
    }

    /// Receives posted here that the daemon has not taken yet.
    pub fn pending(&self) -> u32 {
        self.prod
            .wrapping_sub(self.ring.consumer().load(Ordering::Acquire))
    }

    pub fn destroy(self) -> Result<()> {
        self.destroy_by_ref()
    }

    /// Slots in the shared ring (at least the `max_wr` asked for).
    pub fn entries(&self) -> u32 {
        self.ring.entries
    }

    /// `destroy` that leaves the object usable when the daemon refuses.
    pub fn destroy_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DestroySrq { srq: self.handle })
    }
}
