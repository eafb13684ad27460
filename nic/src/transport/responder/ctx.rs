//! [`RespCtx`]: the QP as the responder sees it — its attributes by value,
//! the header template, the receive queue (or its SRQ), the tables and the
//! counters — and the receive-queue work the responder does through it.

use super::super::counters::Counters;
use super::super::header::HeaderTemplate;
use super::super::sq::Fault;
use super::super::Resources;
use crate::verbs::{AsyncEvent, QpState, RecvWr, Wc, WcStatus};
use std::collections::VecDeque;
use wire::QpType;

/// The slice of a QP the responder works with.
pub(crate) struct RespCtx<'a> {
    pub qpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    pub pd: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub mtu: u32,
    pub dest_qpn: u32,
    pub pkey: u16,
    /// The QP's remote access flags.
    pub access: u32,
    pub qkey: u32,
    pub min_rnr_timer: u8,
    pub max_dest_rd_atomic: u8,
    /// The headers of the QP's frames (none before it has a path).
    pub hdr: Option<&'a HeaderTemplate>,
    pub rq: &'a mut VecDeque<RecvWr>,
    pub res: &'a mut Resources,
    pub counters: &'a mut Counters,
    /// Set when a completion failed the QP (a CQ overrun).
    pub fault: Option<Fault>,
}

impl RespCtx<'_> {
    /// States in which the receive side takes packets.
    pub fn can_receive(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// The region or window `rkey` names, checked for `len` bytes at `va`
    /// with the access `need`, on behalf of this QP and its PD (IBA
    /// 9.7.5.1.6, 10.6.3; a window bound to a QP answers only that QP,
    /// 10.6.7.2); with the offset of `va` in its memory.
    #[inline]
    pub fn remote(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(&crate::verbs::Mr, usize), crate::verbs::KeyError> {
        self.res
            .mrs
            .check_remote(rkey, self.pd, self.qpn, va, len, need)
    }

    /// Whether the QP is (or, once `fault` is applied, will be) in ERR.
    pub fn in_error(&self) -> bool {
        self.state == QpState::Err || self.fault == Some(Fault::Error)
    }

    /// Completes a receive WQE; on a CQ overrun the QP fails (IBA
    /// 11.4.2.1) with QP_FATAL (IBTA "Local Work Queue Catastrophic Error":
    /// the completion could not be delivered). Returns whether it did.
    pub fn complete_recv(&mut self, wc: Wc) -> bool {
        if wc.status != WcStatus::Success {
            self.counters.resp_cqe_error += 1;
        }
        if self.res.complete(self.recv_cq, wc).is_err() {
            self.counters.cq_overrun += 1;
            if !self.in_error() {
                self.res.raise(AsyncEvent::QpFatal(self.qpn));
            }
            self.fault = Some(Fault::Error);
            return true;
        }
        false
    }

    /// Takes the next receive WQE: from the SRQ if the QP has one.
    pub fn take_recv(&mut self) -> Option<RecvWr> {
        match self.srq {
            Some(s) => {
                let srq = self.res.srqs.get_mut(s as usize)?.as_mut()?;
                let wr = srq.queue.pop_front()?;
                // the SRQ limit: below it, one event, and it disarms
                // (ibv_modify_srq(3): "low watermark"; IBTA SRQ Limit Reached)
                if srq.limit > 0 && (srq.queue.len() as u64) < srq.limit as u64 {
                    srq.limit = 0;
                    self.res.raise(AsyncEvent::SrqLimitReached(s));
                }
                Some(wr)
            }
            None => self.rq.pop_front(),
        }
    }

    /// Puts back a receive WQE that a dropped message had taken, at the
    /// head of the queue it came from (the SRQ if the QP has one).
    pub fn return_recv(&mut self, recv: RecvWr) {
        match self.srq {
            Some(s) => {
                if let Some(srq) = self.res.srqs.get_mut(s as usize).and_then(|s| s.as_mut()) {
                    srq.queue.push_front(recv);
                }
            }
            None => self.rq.push_front(recv),
        }
    }

    pub fn has_recv(&self) -> bool {
        match self.srq {
            Some(s) => self
                .res
                .srqs
                .get(s as usize)
                .and_then(|s| s.as_ref())
                .is_some_and(|s| !s.queue.is_empty()),
            None => !self.rq.is_empty(),
        }
    }
}
