//! The completer: retires send WQEs on ACKs (explicit and implied), READ
//! responses and atomic ACKs; turns NAKs, RNR NAKs and ACK timeouts into
//! go-back-N retransmission or error completions.

use super::qp::Qp;
use super::timers::{local_ack_timeout, rnr_timer};
use super::Resources;
use crate::time::Instant;
use crate::verbs::{QpState, SendOp, WcStatus};
use wire::{NakCode, Operation, Position, Psn, RoceRepr, Syndrome};

impl Qp {
    /// A response (ACK, NAK, READ response, atomic ACK) for our requests.
    pub(crate) fn handle_response(
        &mut self,
        res: &mut Resources,
        now: Instant,
        pkt: &RoceRepr<'_>,
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.rx_qp_state_drop += 1;
            return;
        }
        let psn = pkt.bth.psn;
        // Only PSNs in [una, high) answer something outstanding; anything
        // else is a stale duplicate or a ghost (IBA 9.7.5.2.1). `high`, not
        // `npsn`: responses to packets sent before a rewind still count.
        let outstanding = self.req.una.distance_to(self.req.high);
        if self.req.una.distance_to(psn) >= outstanding {
            return;
        }
        let info = pkt
            .opcode_info()
            .expect("parsed packets have known opcodes");
        let aeth = pkt.ext.aeth;
        match info.operation {
            Operation::Acknowledge => match aeth.map(|a| a.syndrome) {
                Some(Syndrome::Ack { .. }) => self.ack_through(res, now, psn),
                Some(Syndrome::RnrNak { timer }) => self.on_rnr_nak(res, now, psn, timer),
                Some(Syndrome::Nak(code)) => self.on_nak(res, now, psn, code),
                _ => {}
            },
            Operation::ReadResponse => self.on_read_response(res, now, pkt, info.position),
            Operation::AtomicAcknowledge => {
                self.on_atomic_ack(res, now, psn, pkt.ext.atomic_ack.unwrap_or(0))
            }
            _ => {}
        }
    }

    /// Everything up to and including `last` is acknowledged: retire the
    /// SENDs and WRITEs it covers, in order. A READ or atomic it covers
    /// without its data having arrived means the responses were lost: that
    /// is an implied NAK (IBA 9.7.5.1.4), so resend from there.
    fn ack_through(&mut self, res: &mut Resources, now: Instant, last: Psn) {
        if self.req.acked.before(last.next()) && !self.req.high.before(last.next()) {
            self.req.acked = last.next();
        }
        let una_before = self.req.una;
        let mut progressed = false;
        while let Some(w) = self.req.sq.front() {
            if !w.started || w.last_psn().after(last) {
                break;
            }
            if w.wr.op.is_read_or_atomic() {
                let resume = w.first_psn.add((w.read_done / self.mtu as u64) as u32);
                self.implied_nak(now, resume);
                return;
            }
            let next = w.last_psn().next();
            self.complete_front(res, WcStatus::Success);
            self.advance_una(next);
            progressed = true;
            if self.state == QpState::Err {
                return;
            }
        }
        // Part of a multi-packet SEND or WRITE may be acknowledged; a READ
        // or atomic is acknowledged only by its own responses.
        let front_is_rd_atomic = self
            .req
            .sq
            .front()
            .is_some_and(|w| w.wr.op.is_read_or_atomic());
        if !front_is_rd_atomic && !last.before(self.req.una) {
            self.advance_una(last.next());
        }
        // Any newly acknowledged PSN is forward progress, also inside a
        // long message: go-back-N under steady loss advances a few packets
        // per NAK, and must not run out of retries while it does.
        if progressed || self.req.una != una_before {
            self.on_progress(now);
        }
    }

    /// After a READ or atomic completes, the WQEs behind it that an earlier
    /// ACK already covered complete too.
    fn retire_acked(&mut self, res: &mut Resources, now: Instant) {
        let acked = self.req.acked;
        if self.req.una.before(acked) && self.state != QpState::Err {
            self.ack_through(res, now, acked.sub(1));
        }
    }

    /// Moves `una` forward to `psn`, but never past the next response a
    /// READ or atomic at the front still waits for: only its own response
    /// acknowledges it (IBA 9.7.5.1.4), whatever a NAK or ACK implies.
    fn advance_una(&mut self, psn: Psn) {
        let mut psn = psn;
        if let Some(w) = self.req.sq.front() {
            if w.started && w.wr.op.is_read_or_atomic() {
                let waiting = w.first_psn.add((w.read_done / self.mtu as u64) as u32);
                if waiting.before(psn) {
                    psn = waiting;
                }
            }
        }
        if self.req.una.before(psn) && !self.req.high.before(psn) {
            self.req.una = psn;
        }
    }

    /// A READ or atomic's response is missing while later packets are
    /// answered: an implied NAK (IBA 9.7.5.1.4), resend from `resume`, the
    /// first response still missing.
    ///
    /// Once per gap: every response behind the gap (one for each packet
    /// the replay resends after it) implies the same NAK again, and
    /// restarting the replay for each one never ends if the gap never fills
    /// (a responder that no longer holds the READ's resources drops the
    /// duplicate, as rxe does): each restart draws the same responses
    /// again, a storm of retransmissions that also kept pushing the ACK
    /// timer back. So a gap starts one replay, and later responses to it
    /// change nothing; if the replay does not fill it, a NAK or the local
    /// ACK timeout resends from it again (both from `una`, which waits at
    /// the gap) and, the retries spent, the WQE fails with RETRY_EXC_ERR
    /// (IBA 9.7.6.1.3). Progress (`on_progress`) forgets the gap.
    fn implied_nak(&mut self, now: Instant, resume: Psn) {
        if self.req.read_retry == Some(resume) {
            return;
        }
        self.req.read_retry = Some(resume);
        self.counters.implied_nak_seq_err += 1;
        self.advance_una(resume);
        self.rewind_to(resume);
        self.restart_ack_timer(now);
    }

    /// Forward progress resets the retry counters (IBA 9.7.6.1.3) and the
    /// timer, and ends a pending implied NAK's gap.
    fn on_progress(&mut self, now: Instant) {
        self.req.read_retry = None;
        self.req.retry_left = self.retry_cnt;
        self.req.rnr_left = self.rnr_retry;
        self.restart_ack_timer(now);
    }

    fn restart_ack_timer(&mut self, now: Instant) {
        self.req.ack_deadline = if self.req.outstanding() {
            local_ack_timeout(self.timeout).map(|d| now + d)
        } else {
            None
        };
    }

    fn on_read_response(
        &mut self,
        res: &mut Resources,
        now: Instant,
        pkt: &RoceRepr<'_>,
        pos: Position,
    ) {
        let psn = pkt.bth.psn;
        self.ack_through(res, now, psn.sub(1));
        if self.state == QpState::Err {
            return;
        }
        let mtu = self.mtu as u64;
        let Some(w) = self.req.sq.front_mut() else {
            return;
        };
        if !matches!(w.wr.op, SendOp::Read { .. }) || !w.contains(psn) {
            return;
        }
        let expected = w.first_psn.add((w.read_done / mtu) as u32);
        if psn != expected {
            // A response went missing inside this READ: ask again from the
            // gap.
            if expected.before(psn) {
                self.implied_nak(now, expected);
            }
            return;
        }
        let payload = pkt.payload;
        let remaining = w.len - w.read_done;
        let full = matches!(pos, Position::First | Position::Middle);
        // IBA 9.7.5.1.6: FIRST and MIDDLE responses carry exactly one MTU,
        // the LAST or ONLY one the rest.
        let bad = payload.len() as u64 > remaining
            || (full && payload.len() as u64 != mtu)
            || (pos.is_end() && payload.len() as u64 != remaining);
        if bad {
            self.complete_front(res, WcStatus::BadRespErr);
            return;
        }
        let (pd, sgl, off) = (self.init.pd, w.wr.sgl, w.read_done);
        if res.scatter(pd, &sgl, off, payload).is_err() {
            self.complete_front(res, WcStatus::LocProtErr);
            return;
        }
        w.read_done += payload.len() as u64;
        let next = psn.next();
        if pos.is_end() {
            self.complete_front(res, WcStatus::Success);
        }
        self.advance_una(next);
        self.on_progress(now);
        if pos.is_end() {
            self.retire_acked(res, now);
        }
    }

    fn on_atomic_ack(&mut self, res: &mut Resources, now: Instant, psn: Psn, orig: u64) {
        self.ack_through(res, now, psn.sub(1));
        if self.state == QpState::Err {
            return;
        }
        let Some(w) = self.req.sq.front() else { return };
        if !w.wr.op.is_atomic() || w.first_psn != psn || !w.started {
            return;
        }
        // The original value lands in the local buffer in host byte order.
        let (pd, sgl) = (self.init.pd, w.wr.sgl);
        if res.scatter(pd, &sgl, 0, &orig.to_ne_bytes()).is_err() {
            self.complete_front(res, WcStatus::LocProtErr);
            return;
        }
        self.complete_front(res, WcStatus::Success);
        self.advance_una(psn.next());
        self.retire_acked(res, now);
        self.on_progress(now);
    }

    fn on_nak(&mut self, res: &mut Resources, now: Instant, psn: Psn, code: NakCode) {
        // A NAK acknowledges every packet before its PSN (IBA 9.7.5.2.2).
        self.ack_through(res, now, psn.sub(1));
        if self.state == QpState::Err {
            return;
        }
        let status = match code {
            NakCode::PsnSequenceError => {
                self.counters.packet_seq_err += 1;
                if !self.use_retry(res) {
                    return;
                }
                // Resend from `una`: the NAK's PSN, unless a READ or
                // atomic before it still waits for a response (its
                // implied NAK, `ack_through`), which must be asked again
                // first (IBA 9.7.5.1.4) — a replay from the NAK's PSN
                // would never fill that gap.
                self.advance_una(psn);
                let una = self.req.una;
                self.rewind_to(una);
                self.restart_ack_timer(now);
                return;
            }
            NakCode::InvalidRequest => {
                self.counters.req_remote_invalid_request += 1;
                WcStatus::RemInvReqErr
            }
            NakCode::RemoteAccessError => {
                self.counters.req_remote_access_errors += 1;
                WcStatus::RemAccessErr
            }
            NakCode::RemoteOperationalError => {
                self.counters.req_remote_operational_error += 1;
                WcStatus::RemOpErr
            }
            NakCode::InvalidRdRequest | NakCode::Reserved(_) => WcStatus::BadRespErr,
        };
        // IBA 9.9.2 (class D/E errors): the WQE completes in error and the
        // QP goes to the error state.
        self.complete_front(res, status);
    }

    fn on_rnr_nak(&mut self, res: &mut Resources, now: Instant, psn: Psn, timer: u8) {
        self.ack_through(res, now, psn.sub(1));
        if self.state == QpState::Err {
            return;
        }
        self.counters.rnr_nak_retry_err += 1;
        // IBA 9.7.5.2.8: rnr_retry 7 means retry forever.
        if self.rnr_retry != 7 {
            if self.req.rnr_left == 0 {
                self.counters.retry_rnr_exceeded_err += 1;
                self.complete_front(res, WcStatus::RnrRetryExcErr);
                return;
            }
            self.req.rnr_left -= 1;
        }
        // as after a NAK sequence error: from `una` (a READ gap first)
        self.advance_una(psn);
        let una = self.req.una;
        self.rewind_to(una);
        self.req.ack_deadline = None;
        self.req.rnr_deadline = Some(now + rnr_timer(timer));
    }

    /// Spends one transport retry; on exhaustion fails the oldest WQE with
    /// RETRY_EXC_ERR (IBA 9.7.6.1.3). Returns whether to retry.
    fn use_retry(&mut self, res: &mut Resources) -> bool {
        if res.cfg.unlimited_retries {
            return true;
        }
        if self.req.retry_left == 0 {
            self.counters.retry_exceeded_err += 1;
            self.complete_front(res, WcStatus::RetryExcErr);
            return false;
        }
        self.req.retry_left -= 1;
        true
    }

    /// Timers: the RNR wait ending, or the local ACK timeout.
    pub(crate) fn handle_timeout(&mut self, res: &mut Resources, now: Instant) {
        // DCQCN rate-increase timer and deferred cuts; a paced QP may go on
        self.cc.rp.handle_timeout(now);
        if self.cc.pace_blocked && self.cc.pacer.ready(now) {
            self.cc.pace_blocked = false;
        }
        if self.req.rnr_deadline.is_some_and(|d| d <= now) {
            self.req.rnr_deadline = None;
            self.restart_ack_timer(now);
        }
        if self.req.ack_deadline.is_some_and(|d| d <= now) {
            self.req.ack_deadline = None;
            if !self.req.outstanding() {
                return;
            }
            self.counters.local_ack_timeout_err += 1;
            if !self.use_retry(res) {
                return;
            }
            let una = self.req.una;
            self.rewind_to(una);
            self.restart_ack_timer(now);
        }
    }
}
