//! The verbs (`ibv_alloc_pd` … `ibv_poll_cq`) on the device's tables.

use super::{QpInfo, Rnic, FIRST_QPN};
use crate::transport::{Qp, QpInit};
use crate::verbs::{
    access, AsyncEvent, Cq, Memory, MrSpec, Mw, MwError, MwType, QpAttr, QpState, RecvWr, SendWr,
    Srq, VerbsError, Wc, WcOpcode, WcStatus,
};
use std::collections::VecDeque;
use std::sync::Arc;

impl Rnic {
    // ---- verbs: objects ----

    pub fn alloc_pd(&mut self) -> u32 {
        self.res.pds.push(true);
        (self.res.pds.len() - 1) as u32
    }

    fn check_pd(&self, pd: u32) -> Result<(), VerbsError> {
        match self.res.pds.get(pd as usize) {
            Some(true) => Ok(()),
            _ => Err(VerbsError::NoSuchPd(pd)),
        }
    }

    /// Registers `len` bytes of `mem` (from `mem_offset`) at virtual address
    /// `addr`. Returns (lkey, rkey).
    pub fn reg_mr(
        &mut self,
        pd: u32,
        mem: Arc<dyn Memory>,
        mem_offset: usize,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<(u32, u32), VerbsError> {
        self.check_pd(pd)?;
        check_mr_access(access)?;
        self.res
            .mrs
            .register(pd, mem, mem_offset, addr, len, access)
            .ok_or(VerbsError::BadMr(
                "region outside its memory or key space exhausted",
            ))
    }

    /// Reregisters region `lkey` in place as `spec` says (`ibv_rereg_mr`);
    /// its keys stay. Refused while windows are bound to it.
    pub fn rereg_mr(&mut self, lkey: u32, spec: MrSpec) -> Result<(u32, u32), VerbsError> {
        self.check_pd(spec.pd)?;
        check_mr_access(spec.access)?;
        Ok(self.res.mrs.reregister(lkey, spec)?)
    }

    /// Deregisters a region; refused while memory windows are bound to it.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), VerbsError> {
        Ok(self.res.mrs.deregister(lkey)?)
    }

    /// Allocates a memory window in `pd` (`ibv_alloc_mw`); returns its
    /// R_Key (its handle is `rkey >> 8`). Bind it with a
    /// [`SendOp::BindMw`](crate::verbs::SendOp::BindMw) work request.
    pub fn alloc_mw(&mut self, pd: u32, kind: MwType) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        self.res
            .mrs
            .alloc_window(pd, kind)
            .ok_or(VerbsError::BadMr("key space exhausted"))
    }

    /// Frees a memory window by its handle (`ibv_dealloc_mw`).
    pub fn dealloc_mw(&mut self, handle: u32) -> Result<(), VerbsError> {
        if self.res.mrs.dealloc_window(handle) {
            Ok(())
        } else {
            Err(MwError::NoSuchWindow(handle << 8).into())
        }
    }

    /// The memory window in slot `handle`, as it is now.
    pub fn query_mw(&self, handle: u32) -> Option<Mw> {
        self.res.mrs.window_by_handle(handle).copied()
    }

    pub fn create_cq(&mut self, capacity: usize) -> u32 {
        self.res.cqs.push(Some(Cq::new(capacity)));
        (self.res.cqs.len() - 1) as u32
    }

    /// A shared receive queue on `pd`; the number of a destroyed SRQ may be
    /// handed out again.
    pub fn create_srq(&mut self, pd: u32, max_wr: u32) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        let srq = Some(Srq {
            pd,
            queue: VecDeque::new(),
            max_wr,
            limit: 0,
        });
        match self.res.srqs.iter().position(|s| s.is_none()) {
            Some(free) => {
                self.res.srqs[free] = srq;
                Ok(free as u32)
            }
            None => {
                self.res.srqs.push(srq);
                Ok((self.res.srqs.len() - 1) as u32)
            }
        }
    }

    /// Destroys SRQ `srq` (ibv_destroy_srq): refused while a QP is
    /// attached to it (the verbs return EBUSY); the receive WQEs it still
    /// holds are dropped without completions, as the verbs do.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), VerbsError> {
        if !matches!(self.res.srqs.get(srq as usize), Some(Some(_))) {
            return Err(VerbsError::NoSuchSrq(srq));
        }
        if self.qps.iter().flatten().any(|q| q.init.srq == Some(srq)) {
            return Err(VerbsError::SrqInUse(srq));
        }
        self.res.srqs[srq as usize] = None;
        Ok(())
    }

    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, VerbsError> {
        self.check_pd(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            if !matches!(self.res.cqs.get(cq as usize), Some(Some(_))) {
                return Err(VerbsError::NoSuchCq(cq));
            }
        }
        if let Some(s) = init.srq {
            if !matches!(self.res.srqs.get(s as usize), Some(Some(_))) {
                return Err(VerbsError::NoSuchSrq(s));
            }
        }
        let idx = self
            .qps
            .iter()
            .position(|q| q.is_none())
            .unwrap_or_else(|| {
                self.qps.push(None);
                self.qps.len() - 1
            });
        let qpn = FIRST_QPN + idx as u32;
        self.qps[idx] = Some(Qp::new(qpn, init, &self.res.cfg));
        self.rearm(idx);
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].take().expect("index is live");
        // the slot's timers die with it: a QP created in it later does not
        // inherit them
        self.deadlines.set(idx, None);
        self.res.dev.add(&qp.counters);
        // its type 2 windows become unusable (MrTable::orphan_qp_windows)
        self.res.mrs.orphan_qp_windows(qpn);
        Ok(())
    }

    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_mut().expect("index is live");
        qp.modify(&mut self.res, attr)?;
        self.schedule(idx);
        // ERR and RESET disarm the QP's timers
        self.rearm(idx);
        Ok(())
    }

    pub fn query_qp(&self, qpn: u32) -> Result<QpInfo, VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_ref().expect("index is live");
        Ok(QpInfo {
            qpn,
            qp_type: qp.qp_type(),
            state: qp.state,
            dest_qpn: qp.dest_qpn,
            mtu: qp.mtu,
            sq_psn: qp.req.npsn().value(),
            rq_psn: qp.resp.epsn().value(),
            send_queue_len: qp.sq.len(),
            recv_queue_len: qp.rq.len(),
            counters: qp.counters.clone(),
        })
    }

    // ---- verbs: data path ----

    /// Posts a send work request (`ibv_post_send`).
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let idx = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[idx].as_mut().expect("index is live");
        let posted = qp.post_send(&mut self.res, wr);
        self.rearm(idx);
        posted?;
        self.schedule(idx);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qp_mut(qpn)?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::InvalidWr("the QP uses an SRQ: post to the SRQ"));
        }
        if matches!(qp.state, QpState::Reset) {
            return Err(VerbsError::BadState(qp.state));
        }
        if qp.rq.len() >= qp.init.max_recv_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        if qp.state == QpState::Err {
            // IBA 10.3.1: WRs posted in the error state complete as flushed.
            let wc = Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn);
            qp.counters.resp_cqe_flush_error += 1;
            let cq = qp.init.recv_cq;
            return self.res.complete(cq, wc);
        }
        qp.rq.push_back(wr);
        Ok(())
    }

    fn srq(&self, srq: u32) -> Result<&Srq, VerbsError> {
        self.res
            .srqs
            .get(srq as usize)
            .and_then(|s| s.as_ref())
            .ok_or(VerbsError::NoSuchSrq(srq))
    }

    fn srq_mut(&mut self, srq: u32) -> Result<&mut Srq, VerbsError> {
        self.res
            .srqs
            .get_mut(srq as usize)
            .and_then(|s| s.as_mut())
            .ok_or(VerbsError::NoSuchSrq(srq))
    }

    /// Arms SRQ `srq`'s limit (`ibv_modify_srq` with IBV_SRQ_LIMIT): once
    /// fewer than `limit` receive WQEs are left on it, an
    /// [`AsyncEvent::SrqLimitReached`] is raised and the limit disarmed.
    /// 0 disarms it; more than the SRQ holds is refused (the verbs: EINVAL).
    pub fn arm_srq_limit(&mut self, srq: u32, limit: u32) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if limit > s.max_wr {
            return Err(VerbsError::InvalidWr(
                "the SRQ limit exceeds the SRQ's size",
            ));
        }
        s.limit = limit;
        Ok(())
    }

    /// `ibv_query_srq`: (max WRs, armed limit — 0 once fired or never
    /// armed, receive WQEs it holds now).
    pub fn query_srq(&self, srq: u32) -> Result<(u32, u32, usize), VerbsError> {
        let s = self.srq(srq)?;
        Ok((s.max_wr, s.limit, s.queue.len()))
    }

    /// The oldest asynchronous event not yet taken.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.res.events.pop_front()
    }

    pub fn post_srq_recv(&mut self, srq: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if s.queue.len() >= s.max_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// Moves up to `max` completions of CQ `cq` into `out` (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: u32, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        let c = self
            .res
            .cqs
            .get_mut(cq as usize)
            .and_then(|c| c.as_mut())
            .ok_or(VerbsError::NoSuchCq(cq))?;
        c.poll(max, out).map_err(|_| VerbsError::CqOverrun)
    }

    /// The device-wide sequence number of the oldest completion CQ `cq`
    /// holds (None: empty, or no such CQ). Completions on several CQs
    /// compare by it: the events of CQs sharing a completion channel go
    /// out in the order of their completions.
    pub fn cq_oldest(&self, cq: u32) -> Option<u64> {
        self.res
            .cqs
            .get(cq as usize)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.oldest())
    }

    /// Appends to `out` the CQs that got a completion since the last call,
    /// each once, in the order of their first new completion: an owner
    /// that moves completions elsewhere (rnicd's CQ rings) visits only
    /// those, however many CQs there are. A CQ it leaves completions in
    /// is listed again only with its next completion.
    pub fn take_ready_cqs(&mut self, out: &mut Vec<u32>) {
        for cq in self.res.ready_cqs.drain(..) {
            if let Some(c) = self.res.cqs.get_mut(cq as usize).and_then(|c| c.as_mut()) {
                c.listed = false;
            }
            out.push(cq);
        }
    }

    /// How many completions CQ `cq` holds (0 for no such CQ).
    pub fn cq_len(&self, cq: u32) -> usize {
        self.res
            .cqs
            .get(cq as usize)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| c.len())
    }
}

/// ibv_reg_mr(3): remote write or atomic access requires local write.
fn check_mr_access(access: u32) -> Result<(), VerbsError> {
    if access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
        && access & access::LOCAL_WRITE == 0
    {
        return Err(VerbsError::BadMr(
            "remote write or atomic access needs local write",
        ));
    }
    Ok(())
}
