//! The completer: retires send WQEs on ACKs (explicit and implied), READ
//! responses and atomic ACKs; turns NAKs, RNR NAKs and ACK timeouts into
//! go-back-N retransmission or error completions.

use super::requester::Requester;
use super::sq::SendCtx;
use super::timers::{local_ack_timeout, rnr_timer};
use crate::time::Instant;
use crate::verbs::{QpState, SendOp, WcStatus};
use wire::{NakCode, Operation, Position, Psn, RoceRepr, Syndrome};

/// Completer state (rxe's `comp`): how far the responder has answered, the
/// retry budgets and the two timers.
///
/// Inputs: [`Self::handle_response`], [`Self::handle_timeout`],
/// [`Self::on_request_sent`]; output: [`Self::poll_timeout`]. It retires
/// WQEs through [`SendCtx::complete_front`] and sends the requester back
/// through [`Requester::handle_retry`] (go-back-N).
///
/// Invariants: `una` never passes the requester's `high` nor the next
/// response a READ or atomic at the front of the send queue waits for; no
/// timer is armed while nothing is outstanding, except the RNR wait.
#[derive(Debug, Default)]
pub struct Completer {
    /// Oldest PSN not yet acknowledged.
    una: Psn,
    /// One past the highest PSN an ACK or NAK has acknowledged. WQEs behind
    /// an unanswered READ cannot complete yet, but their packets need not
    /// be sent again (an ACK acknowledges every earlier packet, IBA 9.7.5.2).
    acked: Psn,
    retry_left: u8,
    rnr_left: u8,
    ack_deadline: Option<Instant>,
    /// Sending is held until this RNR NAK timer expires.
    rnr_deadline: Option<Instant>,
    /// The first missing READ/atomic response an implied NAK last resent
    /// from (once per gap, `implied_nak`); forgotten on progress.
    read_retry: Option<Psn>,
}

impl Completer {
    /// `modify_qp` set the send PSN: nothing is outstanding.
    pub fn reset_psn(&mut self, psn: Psn) {
        self.una = psn;
        self.acked = psn;
    }

    /// `modify_qp` set the retry count (IBA 9.7.6.1.3).
    pub fn set_retry_cnt(&mut self, v: u8) {
        self.retry_left = v;
    }

    /// `modify_qp` set the RNR retry count (IBA 9.7.5.2.8).
    pub fn set_rnr_retry(&mut self, v: u8) {
        self.rnr_left = v;
    }

    /// The state in one line, for debugging.
    pub fn describe(&self) -> String {
        format!(
            "una={} ack_deadline={:?} rnr_deadline={:?} retry_left={}",
            self.una, self.ack_deadline, self.rnr_deadline, self.retry_left
        )
    }

    /// The earliest of the completer's timers.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Instant::earliest(self.ack_deadline, self.rnr_deadline)
    }

    /// Oldest PSN not yet acknowledged.
    pub fn una(&self) -> Psn {
        self.una
    }

    /// One past the highest PSN an ACK or NAK has acknowledged.
    pub fn acked(&self) -> Psn {
        self.acked
    }

    /// Whether an RNR NAK holds the requester back.
    pub fn rnr_wait(&self) -> bool {
        self.rnr_deadline.is_some()
    }

    /// The QP entered ERR: no timer runs.
    pub fn on_qp_error(&mut self) {
        self.ack_deadline = None;
        self.rnr_deadline = None;
    }

    /// An RC request went out: the local ACK timer runs if it does not
    /// already (IBA 9.7.6.1.3 / C9-140).
    pub fn on_request_sent(&mut self, now: Instant, timeout: u8) {
        if self.ack_deadline.is_none() {
            self.ack_deadline = local_ack_timeout(timeout).map(|d| now + d);
        }
    }

    /// UC and UD: the message is complete once its last packet is sent;
    /// everything up to `npsn` is done.
    pub fn on_unreliable_sent(&mut self, npsn: Psn) {
        self.una = npsn;
    }

    /// Whether anything sent is unanswered (`high`: the requester's one
    /// past the highest PSN sent).
    pub fn outstanding(&self, high: Psn) -> bool {
        self.una != high
    }

    /// Completes the oldest WQE; if that fails the QP, no timer runs.
    fn complete_front(&mut self, ctx: &mut SendCtx<'_>, req: &mut Requester, status: WcStatus) {
        ctx.complete_front(req, status);
        if ctx.in_error() {
            self.on_qp_error();
        }
    }

    /// A response (ACK, NAK, READ response, atomic ACK) for our requests.
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        pkt: &RoceRepr<'_>,
    ) {
        if !matches!(ctx.state, QpState::Rts | QpState::Sqd) {
            ctx.counters.rx_qp_state_drop += 1;
            return;
        }
        let psn = pkt.bth.psn;
        // Only PSNs in [una, high) answer something outstanding; anything
        // else is a stale duplicate or a ghost (IBA 9.7.5.2.1). `high`, not
        // `npsn`: responses to packets sent before a rewind still count.
        let outstanding = self.una.distance_to(req.high());
        if self.una.distance_to(psn) >= outstanding {
            return;
        }
        let info = pkt
            .opcode_info()
            .expect("parsed packets have known opcodes");
        let aeth = pkt.ext.aeth;
        match info.operation {
            Operation::Acknowledge => match aeth.map(|a| a.syndrome) {
                Some(Syndrome::Ack { .. }) => self.ack_through(ctx, req, now, psn),
                Some(Syndrome::RnrNak { timer }) => self.on_rnr_nak(ctx, req, now, psn, timer),
                Some(Syndrome::Nak(code)) => self.on_nak(ctx, req, now, psn, code),
                _ => {}
            },
            Operation::ReadResponse => self.on_read_response(ctx, req, now, pkt, info.position),
            Operation::AtomicAcknowledge => {
                self.on_atomic_ack(ctx, req, now, psn, pkt.ext.atomic_ack.unwrap_or(0))
            }
            _ => {}
        }
    }

    /// Everything up to and including `last` is acknowledged: retire the
    /// SENDs and WRITEs it covers, in order. A READ or atomic it covers
    /// without its data having arrived means the responses were lost: that
    /// is an implied NAK (IBA 9.7.5.1.4), so resend from there.
    fn ack_through(&mut self, ctx: &mut SendCtx<'_>, req: &mut Requester, now: Instant, last: Psn) {
        if self.acked.before(last.next()) && !req.high().before(last.next()) {
            self.acked = last.next();
        }
        let una_before = self.una;
        let mut progressed = false;
        while let Some(w) = ctx.sq.front() {
            if !w.started || w.last_psn().after(last) {
                break;
            }
            if w.wr.op.is_read_or_atomic() {
                let resume = w.first_psn.add((w.read_done / ctx.mtu as u64) as u32);
                self.implied_nak(ctx, req, now, resume);
                return;
            }
            let next = w.last_psn().next();
            self.complete_front(ctx, req, WcStatus::Success);
            self.advance_una(ctx, req, next);
            progressed = true;
            if ctx.in_error() {
                return;
            }
        }
        // Part of a multi-packet SEND or WRITE may be acknowledged; a READ
        // or atomic is acknowledged only by its own responses.
        let front_is_rd_atomic = ctx.sq.front().is_some_and(|w| w.wr.op.is_read_or_atomic());
        if !front_is_rd_atomic && !last.before(self.una) {
            self.advance_una(ctx, req, last.next());
        }
        // Any newly acknowledged PSN is forward progress, also inside a
        // long message: go-back-N under steady loss advances a few packets
        // per NAK, and must not run out of retries while it does.
        if progressed || self.una != una_before {
            self.on_progress(ctx, req, now);
        }
    }

    /// After a READ or atomic completes, the WQEs behind it that an earlier
    /// ACK already covered complete too.
    fn retire_acked(&mut self, ctx: &mut SendCtx<'_>, req: &mut Requester, now: Instant) {
        let acked = self.acked;
        if self.una.before(acked) && !ctx.in_error() {
            self.ack_through(ctx, req, now, acked.sub(1));
        }
    }

    /// Moves `una` forward to `psn`, but never past the next response a
    /// READ or atomic at the front still waits for: only its own response
    /// acknowledges it (IBA 9.7.5.1.4), whatever a NAK or ACK implies.
    fn advance_una(&mut self, ctx: &SendCtx<'_>, req: &Requester, psn: Psn) {
        let mut psn = psn;
        if let Some(w) = ctx.sq.front() {
            if w.started && w.wr.op.is_read_or_atomic() {
                let waiting = w.first_psn.add((w.read_done / ctx.mtu as u64) as u32);
                if waiting.before(psn) {
                    psn = waiting;
                }
            }
        }
        if self.una.before(psn) && !req.high().before(psn) {
            self.una = psn;
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
    fn implied_nak(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        resume: Psn,
    ) {
        if self.read_retry == Some(resume) {
            return;
        }
        self.read_retry = Some(resume);
        ctx.counters.implied_nak_seq_err += 1;
        self.advance_una(ctx, req, resume);
        req.handle_retry(ctx.sq, ctx.mtu, resume);
        self.restart_ack_timer(ctx, req, now);
    }

    /// Forward progress resets the retry counters (IBA 9.7.6.1.3) and the
    /// timer, and ends a pending implied NAK's gap.
    fn on_progress(&mut self, ctx: &SendCtx<'_>, req: &Requester, now: Instant) {
        self.read_retry = None;
        self.retry_left = ctx.retry_cnt;
        self.rnr_left = ctx.rnr_retry;
        self.restart_ack_timer(ctx, req, now);
    }

    fn restart_ack_timer(&mut self, ctx: &SendCtx<'_>, req: &Requester, now: Instant) {
        self.ack_deadline = if self.outstanding(req.high()) {
            local_ack_timeout(ctx.timeout).map(|d| now + d)
        } else {
            None
        };
    }

    fn on_read_response(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        pkt: &RoceRepr<'_>,
        pos: Position,
    ) {
        let psn = pkt.bth.psn;
        self.ack_through(ctx, req, now, psn.sub(1));
        if ctx.in_error() {
            return;
        }
        let mtu = ctx.mtu as u64;
        let Some(w) = ctx.sq.front_mut() else {
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
                self.implied_nak(ctx, req, now, expected);
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
            self.complete_front(ctx, req, WcStatus::BadRespErr);
            return;
        }
        let (pd, sgl, off) = (ctx.pd, w.wr.sgl, w.read_done);
        if ctx.res.scatter(pd, &sgl, off, payload).is_err() {
            self.complete_front(ctx, req, WcStatus::LocProtErr);
            return;
        }
        w.read_done += payload.len() as u64;
        let next = psn.next();
        if pos.is_end() {
            self.complete_front(ctx, req, WcStatus::Success);
        }
        self.advance_una(ctx, req, next);
        self.on_progress(ctx, req, now);
        if pos.is_end() {
            self.retire_acked(ctx, req, now);
        }
    }

    fn on_atomic_ack(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        psn: Psn,
        orig: u64,
    ) {
        self.ack_through(ctx, req, now, psn.sub(1));
        if ctx.in_error() {
            return;
        }
        let Some(w) = ctx.sq.front() else { return };
        if !w.wr.op.is_atomic() || w.first_psn != psn || !w.started {
            return;
        }
        // The original value lands in the local buffer in host byte order.
        let (pd, sgl) = (ctx.pd, w.wr.sgl);
        if ctx.res.scatter(pd, &sgl, 0, &orig.to_ne_bytes()).is_err() {
            self.complete_front(ctx, req, WcStatus::LocProtErr);
            return;
        }
        self.complete_front(ctx, req, WcStatus::Success);
        self.advance_una(ctx, req, psn.next());
        self.retire_acked(ctx, req, now);
        self.on_progress(ctx, req, now);
    }

    fn on_nak(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        psn: Psn,
        code: NakCode,
    ) {
        // A NAK acknowledges every packet before its PSN (IBA 9.7.5.2.2).
        self.ack_through(ctx, req, now, psn.sub(1));
        if ctx.in_error() {
            return;
        }
        let status = match code {
            NakCode::PsnSequenceError => {
                ctx.counters.packet_seq_err += 1;
                if !self.use_retry(ctx, req) {
                    return;
                }
                // Resend from `una`: the NAK's PSN, unless a READ or
                // atomic before it still waits for a response (its
                // implied NAK, `ack_through`), which must be asked again
                // first (IBA 9.7.5.1.4) — a replay from the NAK's PSN
                // would never fill that gap.
                self.advance_una(ctx, req, psn);
                let una = self.una;
                req.handle_retry(ctx.sq, ctx.mtu, una);
                self.restart_ack_timer(ctx, req, now);
                return;
            }
            NakCode::InvalidRequest => {
                ctx.counters.req_remote_invalid_request += 1;
                WcStatus::RemInvReqErr
            }
            NakCode::RemoteAccessError => {
                ctx.counters.req_remote_access_errors += 1;
                WcStatus::RemAccessErr
            }
            NakCode::RemoteOperationalError => {
                ctx.counters.req_remote_operational_error += 1;
                WcStatus::RemOpErr
            }
            NakCode::InvalidRdRequest | NakCode::Reserved(_) => WcStatus::BadRespErr,
        };
        // IBA 9.9.2 (class D/E errors): the WQE completes in error and the
        // QP goes to the error state.
        self.complete_front(ctx, req, status);
    }

    fn on_rnr_nak(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
        psn: Psn,
        timer: u8,
    ) {
        self.ack_through(ctx, req, now, psn.sub(1));
        if ctx.in_error() {
            return;
        }
        ctx.counters.rnr_nak_retry_err += 1;
        // IBA 9.7.5.2.8: rnr_retry 7 means retry forever.
        if ctx.rnr_retry != 7 {
            if self.rnr_left == 0 {
                ctx.counters.retry_rnr_exceeded_err += 1;
                self.complete_front(ctx, req, WcStatus::RnrRetryExcErr);
                return;
            }
            self.rnr_left -= 1;
        }
        // as after a NAK sequence error: from `una` (a READ gap first)
        self.advance_una(ctx, req, psn);
        let una = self.una;
        req.handle_retry(ctx.sq, ctx.mtu, una);
        self.ack_deadline = None;
        self.rnr_deadline = Some(now + rnr_timer(timer));
    }

    /// Spends one transport retry; on exhaustion fails the oldest WQE with
    /// RETRY_EXC_ERR (IBA 9.7.6.1.3). Returns whether to retry.
    fn use_retry(&mut self, ctx: &mut SendCtx<'_>, req: &mut Requester) -> bool {
        if ctx.res.cfg.unlimited_retries {
            return true;
        }
        if self.retry_left == 0 {
            ctx.counters.retry_exceeded_err += 1;
            self.complete_front(ctx, req, WcStatus::RetryExcErr);
            return false;
        }
        self.retry_left -= 1;
        true
    }

    /// Timers: the RNR wait ending, or the local ACK timeout.
    pub(crate) fn handle_timeout(
        &mut self,
        ctx: &mut SendCtx<'_>,
        req: &mut Requester,
        now: Instant,
    ) {
        if self.rnr_deadline.is_some_and(|d| d <= now) {
            self.rnr_deadline = None;
            self.restart_ack_timer(ctx, req, now);
        }
        if self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_deadline = None;
            if !self.outstanding(req.high()) {
                return;
            }
            ctx.counters.local_ack_timeout_err += 1;
            if !self.use_retry(ctx, req) {
                return;
            }
            let una = self.una;
            req.handle_retry(ctx.sq, ctx.mtu, una);
            self.restart_ack_timer(ctx, req, now);
        }
    }
}
