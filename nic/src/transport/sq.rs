//! The send queue the requester and the completer share (as rxe's do):
//! posted WQEs with their progress, and [`SendCtx`], the slice of the QP
//! both roles work with — retiring the oldest WQE into the send CQ and,
//! when that fails the QP, flushing the queue and reporting a [`Fault`]
//! for the QP to apply.

use super::counters::Counters;
use super::header::HeaderTemplate;
use super::requester::Requester;
use super::Resources;
use crate::verbs::{AsyncEvent, QpState, SendWr, Wc, WcStatus};
use std::collections::VecDeque;
use wire::{Psn, QpType};

/// A posted send WQE and its progress.
#[derive(Debug)]
pub struct SendWqe {
    pub wr: SendWr,
    /// IBV_SEND_INLINE: the data, copied at post time.
    pub inline: Option<Box<[u8]>>,
    /// Message length in bytes.
    pub len: u64,
    /// Whether its first packet has gone out (and `first_psn` is fixed).
    pub started: bool,
    pub first_psn: Psn,
    /// PSNs the message occupies (READ: one per response packet).
    pub npkts: u32,
    /// READ: bytes of response received so far.
    pub read_done: u64,
    pub signaled: bool,
    /// The WQE finished locally while WQEs before it were still in
    /// flight — a local operation (BIND_MW, LOCAL_INV) executed, or a local
    /// error found when it was due to be sent: it completes with this
    /// status once they have (IBA 10.8.5: send completions are returned in
    /// posting order).
    pub local_status: Option<WcStatus>,
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.max(1) - 1)
    }
    /// Whether packet `psn` belongs to this WQE (a local operation has no
    /// packets).
    pub fn contains(&self, psn: Psn) -> bool {
        self.started && !self.wr.op.is_local() && psn.in_window(self.first_psn, self.npkts.max(1))
    }
}

/// Posted send WQEs, not yet completed, oldest first.
pub type SendQueue = VecDeque<SendWqe>;

/// How a role's work failed the QP; the QP applies it when the role
/// returns (the parts of it the send queue needs are done at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The QP goes to ERR (IBA 10.3.1.2, 11.2.4.7); the send queue is
    /// flushed already.
    Error,
    /// UC and UD: the QP goes to SQEr (IBA 10.3.1); the send queue is
    /// flushed already, the receive queue keeps working.
    SendQueueError,
}

/// The QP as the requester and the completer see it: its attributes by
/// value, its header template, the send queue, the tables and its
/// counters.
pub(crate) struct SendCtx<'a> {
    pub qpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    pub pd: u32,
    pub send_cq: u32,
    pub mtu: u32,
    /// Local ACK timeout exponent (IBA 9.7.6.1.3).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub dest_qpn: u32,
    pub pkey: u16,
    pub qkey: u32,
    pub max_rd_atomic: u8,
    /// The headers of the QP's frames (none before it has a path; UD
    /// builds them per WQE).
    pub hdr: Option<&'a HeaderTemplate>,
    pub sq: &'a mut SendQueue,
    pub res: &'a mut Resources,
    pub counters: &'a mut Counters,
    /// Set when retiring a WQE failed the QP.
    pub fault: Option<Fault>,
}

impl SendCtx<'_> {
    /// States in which the send queue processes work (IBA 10.3.1).
    pub fn can_send(&self) -> bool {
        self.state == QpState::Rts
    }

    /// Whether the QP is (or, once `fault` is applied, will be) in ERR.
    pub fn in_error(&self) -> bool {
        self.state == QpState::Err || self.fault == Some(Fault::Error)
    }

    /// Completes the oldest send WQE with `status` (errors always complete,
    /// signaled or not) and, on error, fails the QP.
    pub fn complete_front(&mut self, req: &mut Requester, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        req.on_front_retired(&w);
        if status == WcStatus::Success {
            if w.wr.op.is_send() {
                self.counters.rdma_sends += 1;
            }
            if w.signaled {
                let mut wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.qpn);
                wc.byte_len = w.len as u32;
                if self.res.complete(self.send_cq, wc).is_err() {
                    self.counters.cq_overrun += 1;
                    // QP_FATAL (IBTA "Local Work Queue Catastrophic
                    // Error"): the completion could not be delivered.
                    if !self.in_error() {
                        self.res.raise(AsyncEvent::QpFatal(self.qpn));
                    }
                    self.fail(req, Fault::Error);
                    return;
                }
            }
            // The next WQE failed locally while this one was in flight: its
            // error completion is due now, in order.
            if let Some(st) = self.sq.front().and_then(|w| w.local_status) {
                self.complete_front(req, st);
            }
        } else {
            self.counters.req_cqe_error += 1;
            let wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.qpn);
            let _ = self.res.complete(self.send_cq, wc);
            // A send WQE completed in error. RC fails the whole QP (IBA
            // 9.9.2); UC and UD move to SQEr (IBA 10.3.1).
            let fault = match self.qp_type {
                QpType::Rc => Fault::Error,
                QpType::Uc | QpType::Ud => Fault::SendQueueError,
            };
            self.fail(req, fault);
        }
    }

    /// Fails the WQE at `idx` (always the oldest unfinished one: WQEs
    /// start in order and earlier ones are complete or in flight).
    pub fn complete_front_at(&mut self, req: &mut Requester, idx: usize, status: WcStatus) {
        if idx == 0 {
            self.complete_front(req, status);
        } else {
            // Earlier WQEs are still in flight and may yet succeed: they
            // complete first (IBA 10.8.5, completions in posting order),
            // then this one in error (see `complete_front`), then the QP
            // fails and flushes the rest. Nothing after it is sent.
            self.sq[idx].local_status = Some(status);
        }
    }

    fn fail(&mut self, req: &mut Requester, fault: Fault) {
        flush(
            self.sq,
            req,
            self.res,
            self.counters,
            self.qpn,
            self.send_cq,
        );
        if self.fault != Some(Fault::Error) {
            self.fault = Some(fault);
        }
    }
}

/// Completes every send WQE as flushed (IBA 10.3.1: WRs of a QP in ERR or
/// SQEr complete with WR_FLUSH_ERR).
pub(crate) fn flush(
    sq: &mut SendQueue,
    req: &mut Requester,
    res: &mut Resources,
    counters: &mut Counters,
    qpn: u32,
    send_cq: u32,
) {
    while let Some(w) = sq.pop_front() {
        counters.req_cqe_flush_error += 1;
        let wc = Wc::new(w.wr.wr_id, WcStatus::WrFlushErr, w.wr.op.wc_opcode(), qpn);
        let _ = res.complete(send_cq, wc);
    }
    req.on_flushed();
}
