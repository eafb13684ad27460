//! What the device asks of a QP: `modify` (the attributes and state
//! transitions of `modify_qp`), `post_send`, and the routing of packets,
//! timers and transmit turns to the QP's roles — `handle_request` to the
//! responder, `handle_response` and `handle_timeout` to the completer,
//! `poll_transmit` to CNP, then responses, then paced requests — each with
//! the context built for it (`send_ctx!`, `resp_ctx!`); then the [`Fault`]
//! a role reports is applied, with the rules for errors and flushing (IBA
//! 10.3.1, 10.8, 11.2.4.7).

use super::congestion::CcConfig;
use super::header::HeaderTemplate;
use super::qp::Qp;
use super::responder::RespCtx;
use super::sq::{self, Fault, SendCtx, SendWqe};
use super::{Resources, MAX_MSG_LEN};
use crate::time::Instant;
use crate::verbs::{
    check_modify, AsyncEvent, QpAttr, QpState, SendOp, SendWr, VerbsError, Wc, WcOpcode, WcStatus,
};
use wire::{IpRepr, QpType, RoceRepr};

/// The roles of a QP, for [`Qp::apply_fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Requester,
    Responder,
    Completer,
}

/// The [`RespCtx`] of a QP: its attributes by value and disjoint borrows
/// of the receive queue and counters, so that the `resp` field stays free
/// to borrow beside it.
macro_rules! resp_ctx {
    ($qp:ident, $res:ident) => {
        RespCtx {
            qpn: $qp.qpn,
            qp_type: $qp.init.qp_type,
            state: $qp.state,
            pd: $qp.init.pd,
            recv_cq: $qp.init.recv_cq,
            srq: $qp.init.srq,
            mtu: $qp.mtu,
            dest_qpn: $qp.dest_qpn,
            pkey: $qp.pkey,
            access: $qp.access,
            qkey: $qp.qkey,
            min_rnr_timer: $qp.min_rnr_timer,
            max_dest_rd_atomic: $qp.max_dest_rd_atomic,
            hdr: $qp.hdr.as_ref(),
            rq: &mut $qp.rq,
            res: $res,
            counters: &mut $qp.counters,
            fault: None,
        }
    };
}

/// The [`SendCtx`] of a QP, as `resp_ctx!`: the `req` and `comp` fields
/// stay free to borrow beside it.
macro_rules! send_ctx {
    ($qp:ident, $res:ident) => {
        SendCtx {
            qpn: $qp.qpn,
            qp_type: $qp.init.qp_type,
            state: $qp.state,
            pd: $qp.init.pd,
            send_cq: $qp.init.send_cq,
            mtu: $qp.mtu,
            timeout: $qp.timeout,
            retry_cnt: $qp.retry_cnt,
            rnr_retry: $qp.rnr_retry,
            dest_qpn: $qp.dest_qpn,
            pkey: $qp.pkey,
            qkey: $qp.qkey,
            max_rd_atomic: $qp.max_rd_atomic,
            hdr: $qp.hdr.as_ref(),
            sq: &mut $qp.sq,
            res: $res,
            counters: &mut $qp.counters,
            fault: None,
        }
    };
}

impl Qp {
    /// `modify_qp`: checks the transition (IBA 10.3.1, Table 93 via
    /// [`check_modify`]), applies the attributes and enters the new state.
    pub(crate) fn modify(&mut self, res: &mut Resources, attr: &QpAttr) -> Result<(), VerbsError> {
        let qp = self;
        let to = check_modify(qp.state, qp.qp_type(), attr)?;
        if let Some(a) = attr.access_flags {
            qp.access = a;
        }
        if let Some(k) = attr.qkey {
            qp.qkey = k;
        }
        if let Some(ah) = attr.ah {
            qp.ah = Some(ah);
        }
        if let Some(m) = attr.path_mtu {
            qp.mtu = m;
        }
        if let Some(d) = attr.dest_qpn {
            qp.dest_qpn = d;
        }
        if let Some(p) = attr.rq_psn {
            qp.resp.set_epsn(wire::Psn::new(p));
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            qp.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            qp.min_rnr_timer = v;
        }
        if let Some(p) = attr.sq_psn {
            qp.req.reset_psn(wire::Psn::new(p));
            qp.comp.reset_psn(wire::Psn::new(p));
        }
        if let Some(v) = attr.timeout {
            qp.timeout = v;
        }
        if let Some(v) = attr.retry_cnt {
            qp.retry_cnt = v;
            qp.comp.set_retry_cnt(v);
        }
        if let Some(v) = attr.rnr_retry {
            qp.rnr_retry = v;
            qp.comp.set_rnr_retry(v);
        }
        if let Some(v) = attr.max_rd_atomic {
            qp.max_rd_atomic = v;
        }
        if let (Some(ah), QpType::Rc | QpType::Uc) = (qp.ah, qp.qp_type()) {
            let mut hdr = HeaderTemplate::new(res.cfg.mac, res.cfg.gid, &ah, qp.qpn, qp.dest_qpn);
            data_class(&mut hdr, &ah, &res.cfg.cc);
            qp.cc.prio = res.cfg.cc.qos.priority(hdr.eth.vlan, ip_dscp(&hdr.ip));
            qp.hdr = Some(hdr);
        }
        match to {
            QpState::Err if qp.state != QpState::Err => qp.enter_error(res),
            QpState::Reset => {
                let (qpn, init, counters) = (qp.qpn, qp.init, std::mem::take(&mut qp.counters));
                *qp = Qp::new(qpn, init, &res.cfg);
                qp.counters = counters;
            }
            QpState::Sqd => {
                // SQ_DRAINED is owed once per transition into SQD
                if qp.state != QpState::Sqd {
                    qp.drain_pending = true;
                }
                qp.state = QpState::Sqd;
                qp.check_drained(res);
            }
            s => qp.state = s,
        }
        Ok(())
    }

    /// Validates and queues a send WR.
    pub(crate) fn post_send(&mut self, res: &mut Resources, wr: SendWr) -> Result<(), VerbsError> {
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState(self.state));
        }
        if self.sq.len() >= self.init.max_send_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        match (self.qp_type(), &wr.op) {
            (QpType::Ud, SendOp::Send | SendOp::SendWithImm { .. }) if wr.ud.is_some() => {}
            (QpType::Ud, _) => {
                return Err(VerbsError::InvalidWr(
                    "UD QPs take SEND with an address handle",
                ))
            }
            (QpType::Uc, op)
                if op.is_read_or_atomic() || matches!(op, SendOp::SendWithInv { .. }) =>
            {
                return Err(VerbsError::InvalidWr(
                    "UC QPs take only SEND and RDMA WRITE",
                ))
            }
            _ => {}
        }
        let len = wr.sgl.total_len();
        if wr.op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidWr(
                "atomics need one 8-byte local buffer",
            ));
        }
        if len > MAX_MSG_LEN {
            return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
        }
        let inline = if wr.flags.inline {
            if wr.op.is_read_or_atomic() {
                return Err(VerbsError::InvalidWr("inline data is for SEND and WRITE"));
            }
            // IBV_SEND_INLINE: the data is copied now, the lkeys are not used.
            let mut data = vec![0u8; len as usize].into_boxed_slice();
            let mut off = 0;
            for sge in wr.sgl.as_slice() {
                let n = sge.length as usize;
                let (mr, at) = res
                    .mrs
                    .get(sge.lkey)
                    .and_then(|m| m.offset_of(sge.addr, n as u64).ok().map(|at| (m, at)))
                    .ok_or(VerbsError::InvalidWr(
                        "inline SGE outside any registered region",
                    ))?;
                mr.mem.read(at, &mut data[off..off + n]);
                off += n;
            }
            Some(data)
        } else {
            None
        };
        let signaled = wr.flags.signaled || self.init.sq_sig_all;
        let wqe = SendWqe {
            wr,
            inline,
            len,
            started: false,
            first_psn: wire::Psn::new(0),
            npkts: 0,
            read_done: 0,
            signaled,
            local_status: None,
        };
        // IBA 10.3.1: send WRs posted in ERR (or SQEr) complete as flushed.
        if matches!(self.state, QpState::Err | QpState::Sqe) {
            self.sq.push_back(wqe);
            self.flush_send_queue(res);
            return Ok(());
        }
        self.sq.push_back(wqe);
        Ok(())
    }

    /// Frames the QP has to send: a CNP it owes first (on its own
    /// priority), then — unless PFC pauses the QP's priority — responses
    /// (they unblock the peer; READ response data at the pace DCQCN
    /// allows), then requests at that pace.
    pub(crate) fn poll_transmit(
        &mut self,
        res: &mut Resources,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<usize> {
        if let Some(cnp) = self.cc.pending_cnp.take() {
            if let Ok(n) = cnp.emit(buf) {
                return Some(n);
            }
        }
        if res.pfc.is_paused(self.cc.prio, now) {
            return None;
        }
        // RoCEv2 A17.9.3: the reaction point limits the rate of what the
        // QP sends, READ response data included (an 8 MiB READ answered in
        // one burst is what overflows a switch queue); the small ACKs,
        // NAKs and atomic ACKs go at once. Responses leave in PSN order,
        // so one held back holds the rest.
        let read_data = self.resp.owes_read_data();
        if read_data && !self.cc.may_send_read(now) {
            return None;
        }
        let mut ctx = resp_ctx!(self, res);
        let sent = self.resp.poll_transmit(&mut ctx, buf);
        if let Some(n) = sent {
            if read_data {
                self.cc.on_sent_read(now, n);
            }
            return sent;
        }
        if let Some(event) = self.resp.poll_error() {
            if let Some(ev) = event {
                res.raise(ev);
            }
            self.enter_error(res);
            return None;
        }
        if !self.cc.may_send(now) {
            return None;
        }
        let mut ctx = send_ctx!(self, res);
        let sent = self.req.poll_transmit(&mut ctx, &mut self.comp, now, buf);
        let fault = ctx.fault;
        self.apply_fault(res, fault, Role::Requester);
        let n = sent?;
        self.cc.on_sent(now, n);
        Some(n)
    }

    /// A multi-line dump of the QP's transport state, for debugging.
    pub(crate) fn debug_state(&self) -> String {
        let mut s = format!(
            "qp {:#x} {:?} {:?}: req {} comp {}\n",
            self.qpn,
            self.qp_type(),
            self.state,
            self.req.describe(),
            self.comp.describe()
        );
        for w in self.sq.iter().take(12) {
            s += &format!(
                "  wqe {} {:?} len={} started={} first_psn={} npkts={} read_done={}\n",
                w.wr.wr_id, w.wr.op, w.len, w.started, w.first_psn, w.npkts, w.read_done
            );
        }
        s += &format!("  resp {}\n", self.resp.describe());
        s
    }

    /// Copies the congestion counters into the QP's counters.
    pub(crate) fn sync_cc_counters(&mut self) {
        let np = &self.cc.np_counters;
        let rp = self.cc.rp.counters();
        self.counters.np_ecn_marked_roce_packets = np.np_ecn_marked_roce_packets;
        self.counters.np_cnp_sent = np.np_cnp_sent;
        self.counters.rp_cnp_handled = rp.rp_cnp_handled;
        self.counters.rp_cnp_ignored = rp.rp_cnp_ignored;
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        Instant::earliest(self.comp.poll_timeout(), self.cc.next_deadline())
    }

    /// Moves the QP to ERR and flushes both queues (IBA 10.3.1.2, 11.2.4.7).
    pub(crate) fn enter_error(&mut self, res: &mut Resources) {
        self.enter_error_except(res, None);
    }

    /// `enter_error`, but the role `by` (whose work failed the QP) has
    /// done its own part already.
    fn enter_error_except(&mut self, res: &mut Resources, by: Option<Role>) {
        let was = self.state;
        self.state = QpState::Err;
        self.drain_pending = false;
        let in_msg_recv = match by {
            Some(Role::Responder) => None,
            _ => self.resp.on_qp_error(),
        };
        if by != Some(Role::Completer) {
            self.comp.on_qp_error();
        }
        self.flush_send_queue(res);
        if let Some(recv) = in_msg_recv {
            self.rq.push_front(recv);
        }
        while let Some(wr) = self.rq.pop_front() {
            self.counters.resp_cqe_flush_error += 1;
            let _ = res.complete(
                self.init.recv_cq,
                Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn),
            );
        }
        // IBA 10.2.9.5 / 11.6.3.1 "Last WQE Reached": a QP on an SRQ went to
        // ERR and will take no more receive WQEs from it.
        if was != QpState::Err && self.init.srq.is_some() {
            res.raise(AsyncEvent::QpLastWqeReached(self.qpn));
        }
    }

    /// SQ_DRAINED (IBTA 11.6.3.1 "Send Queue Drained"), once the QP is in
    /// SQD and no message it had begun is left unfinished.
    pub(crate) fn check_drained(&mut self, res: &mut Resources) {
        if self.drain_pending
            && self.state == QpState::Sqd
            && !self.comp.outstanding(self.req.high())
            && !self.sq.iter().any(|w| w.started)
        {
            self.drain_pending = false;
            res.raise(AsyncEvent::SqDrained(self.qpn));
        }
    }

    fn flush_send_queue(&mut self, res: &mut Resources) {
        let (qpn, cq) = (self.qpn, self.init.send_cq);
        sq::flush(
            &mut self.sq,
            &mut self.req,
            res,
            &mut self.counters,
            qpn,
            cq,
        );
    }

    /// A request: the responder's.
    pub(crate) fn handle_request(&mut self, res: &mut Resources, now: Instant, pkt: &RoceRepr<'_>) {
        let mut ctx = resp_ctx!(self, res);
        self.resp.handle_request(&mut ctx, now, pkt);
        let fault = ctx.fault;
        self.apply_fault(res, fault, Role::Responder);
    }

    /// A response (ACK, NAK, READ response, atomic ACK): the completer's.
    pub(crate) fn handle_response(
        &mut self,
        res: &mut Resources,
        now: Instant,
        pkt: &RoceRepr<'_>,
    ) {
        let mut ctx = send_ctx!(self, res);
        self.comp.handle_response(&mut ctx, &mut self.req, now, pkt);
        let fault = ctx.fault;
        self.apply_fault(res, fault, Role::Completer);
    }

    /// Timers: DCQCN's, then the completer's (the RNR wait ending, the
    /// local ACK timeout).
    pub(crate) fn handle_timeout(&mut self, res: &mut Resources, now: Instant) {
        // DCQCN rate-increase timer and deferred cuts; a paced QP may go on
        self.cc.rp.handle_timeout(now);
        self.cc.on_timeout(now);
        let mut ctx = send_ctx!(self, res);
        self.comp.handle_timeout(&mut ctx, &mut self.req, now);
        let fault = ctx.fault;
        self.apply_fault(res, fault, Role::Completer);
    }

    /// Applies the fault a role reported (the send queue is flushed
    /// already, and the role has done its own part).
    fn apply_fault(&mut self, res: &mut Resources, fault: Option<Fault>, by: Role) {
        match fault {
            None => {}
            Some(Fault::Error) => self.enter_error_except(res, Some(by)),
            Some(Fault::SendQueueError) => self.state = QpState::Sqe,
        }
    }
}

/// Data traffic class when congestion control is on: ECT(0) so switches can
/// mark it, and the configured DSCP unless the address handle names one.
fn data_class(hdr: &mut HeaderTemplate, ah: &crate::verbs::AhAttr, cc: &CcConfig) {
    let (dscp, ecn) = if ah.traffic_class == 0 {
        (cc.qos.data_dscp, cc.qos.data_ecn)
    } else {
        (ah.traffic_class >> 2, ah.traffic_class & 3)
    };
    match &mut hdr.ip {
        IpRepr::V4(v) => {
            v.dscp = dscp;
            v.ecn = ecn;
        }
        IpRepr::V6(v) => {
            v.dscp = dscp;
            v.ecn = ecn;
        }
    }
}

fn ip_dscp(ip: &IpRepr) -> u8 {
    ip.dscp()
}
