//! The responder: checks each request in the order IBA 9.7.5.1 lays out
//! (PSN → opcode sequence → opcode allowed on this QP → resources → length
//! → R_Key, access and bounds), executes it (writes into memory, scatters
//! SENDs into receive WQEs, runs atomics exactly once) and owes responses
//! (coalesced ACKs, NAKs, segmented READ responses, atomic ACKs), which it
//! hands out in PSN order.
//!
//! `mod.rs` holds the responder's state and the checks up to execution;
//! `execute` runs a request that passed them; `respond` builds the
//! response frames the responder owes; `ctx` is the slice of the QP the
//! responder works with (`RespCtx`: attributes, receive queue or SRQ).

mod ctx;
mod execute;
mod respond;

pub(crate) use ctx::RespCtx;

use super::frame::PutMem;
use super::requester::packets;
use crate::time::Instant;
use crate::verbs::AsyncEvent;
use crate::verbs::{access, RecvWr, Wc, WcOpcode, WcStatus};
use std::collections::VecDeque;
use wire::{
    Aeth, BthRepr, ExtHeaders, IpRepr, NakCode, Opcode, Operation, Position, Psn, QpType, RoceRepr,
    Syndrome,
};

/// How a request ended.
enum Outcome {
    Done,
    /// No receive WQE: RNR NAK on RC, drop on UC.
    Rnr,
    /// A NAK-worthy error; the receive WQE in progress (if any) completes
    /// with the given status.
    Nak(NakCode, Option<WcStatus>),
    /// A SEND with Invalidate named an R_Key that cannot be invalidated.
    InvalidateFailed,
}

/// Responder resources remembered for duplicate READs and atomics.
const RESOURCE_CACHE: usize = 64;
const ACK: Syndrome = Syndrome::Ack {
    credits: Syndrome::UNLIMITED_CREDITS,
};

impl Responder {
    /// `modify_qp` set the receive PSN.
    pub fn set_epsn(&mut self, psn: Psn) {
        self.epsn = psn;
    }

    /// Expected PSN.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// Whether a response is owed.
    pub fn owes_responses(&self) -> bool {
        !self.responses.is_empty()
    }

    /// Whether the next response is READ response data (the responses the
    /// QP's rate limiter paces; ACKs, NAKs and atomic ACKs are not).
    pub fn owes_read_data(&self) -> bool {
        matches!(self.responses.front(), Some(Response::Read(_)))
    }

    /// The state in one line, for debugging.
    pub fn describe(&self) -> String {
        format!(
            "epsn={} msn={} in_msg={:?} nak_sent={} responses={:?}",
            self.epsn,
            self.msn,
            self.in_msg.map(|m| m.operation()),
            self.nak_sent,
            self.responses
        )
    }

    /// The QP entered ERR: nothing more is owed. Returns the receive WQE
    /// of a SEND in progress, for the QP to flush.
    pub fn on_qp_error(&mut self) -> Option<RecvWr> {
        self.error_after_flush = false;
        self.error_event = None;
        self.responses.clear();
        match self.in_msg.take() {
            Some(InMessage::Send { recv, .. }) => Some(recv),
            _ => None,
        }
    }

    /// Once the responses owed before a class C error (IBA 9.9.3) have
    /// gone out: `Some(event)`, the QP is to enter ERR, raising `event`
    /// if there is one.
    pub fn poll_error(&mut self) -> Option<Option<AsyncEvent>> {
        if self.error_after_flush && self.responses.is_empty() {
            self.error_after_flush = false;
            return Some(self.error_event.take());
        }
        None
    }

    /// Completes a receive WQE; if that fails the QP, the responder's part
    /// of entering ERR is done at once.
    fn complete_recv(&mut self, ctx: &mut RespCtx<'_>, wc: Wc) {
        if ctx.complete_recv(wc) {
            if let Some(recv) = self.on_qp_error() {
                ctx.rq.push_front(recv);
            }
        }
    }

    /// A request packet for this QP.
    pub(crate) fn handle_request(
        &mut self,
        ctx: &mut RespCtx<'_>,
        _now: Instant,
        pkt: &RoceRepr<'_>,
    ) {
        if !ctx.can_receive() || self.error_after_flush {
            ctx.counters.rx_qp_state_drop += 1;
            return;
        }
        match ctx.qp_type {
            QpType::Rc => self.rc_request(ctx, pkt),
            QpType::Uc => self.uc_request(ctx, pkt),
            QpType::Ud => self.ud_request(ctx, pkt),
        }
    }

    fn rc_request(&mut self, ctx: &mut RespCtx<'_>, pkt: &RoceRepr<'_>) {
        let psn = pkt.bth.psn;
        let epsn = self.epsn;
        // 1. PSN (IBA 9.7.5.1.1)
        if psn != epsn {
            if epsn.before(psn) {
                ctx.counters.out_of_sequence += 1;
                // IBA C9-97 (rxe: sent_psn_nak): one NAK per sequence gap.
                if !self.nak_sent {
                    self.nak_sent = true;
                    self.queue_response(Response::Ack {
                        psn: epsn,
                        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                        msn: self.msn,
                    });
                }
            } else {
                ctx.counters.duplicate_request += 1;
                self.rc_duplicate(ctx, pkt);
            }
            return;
        }
        self.nak_sent = false;
        match self.execute(ctx, pkt) {
            Outcome::Done => {
                // READs and atomics are answered by their responses; SENDs
                // and WRITEs with AckReq by an ACK (IBA 9.7.5.1.7).
                let op = pkt.opcode_info().expect("parsed").operation;
                if pkt.bth.ack_req && matches!(op, Operation::Send | Operation::Write) {
                    self.queue_response(Response::Ack {
                        psn,
                        syndrome: ACK,
                        msn: self.msn,
                    });
                }
            }
            Outcome::Rnr => {
                ctx.counters.out_of_buffer += 1;
                // The retried packet will be in sequence; packets behind it
                // are not NAKed again (same rule as C9-97).
                self.nak_sent = true;
                let timer = ctx.min_rnr_timer;
                self.queue_response(Response::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak { timer },
                    msn: self.msn,
                });
            }
            Outcome::Nak(code, recv_status) => {
                // IBA 9.9.3 (responder class C errors): NAK, complete the
                // receive WQE in progress in error, then fail the QP.
                match code {
                    NakCode::RemoteAccessError => ctx.counters.resp_remote_access_errors += 1,
                    _ => ctx.counters.resp_invalid_request += 1,
                }
                // The affiliated event, raised when the QP enters ERR (IBTA
                // 11.6.3.1: "Invalid Request Local Work Queue Error", "Local
                // Access Violation Work Queue Error"). A Remote Operational
                // Error (our receive buffer failed the scatter) is reported
                // through the receive completion (LOC_PROT_ERR), not as an
                // event.
                self.error_event = match code {
                    NakCode::RemoteAccessError => Some(AsyncEvent::QpAccessErr(ctx.qpn)),
                    NakCode::InvalidRequest => Some(AsyncEvent::QpReqErr(ctx.qpn)),
                    _ => None,
                };
                self.fail_in_message(ctx, recv_status);
                self.queue_response(Response::Ack {
                    psn,
                    syndrome: Syndrome::Nak(code),
                    msn: self.msn,
                });
                self.error_after_flush = true;
            }
            Outcome::InvalidateFailed => {
                // IBA 9.9.3, responder class J (an R_Key in a SEND with
                // Invalidate that cannot be invalidated), as rxe
                // (RESPST_ERR_INVALIDATE_RKEY): the receive WQE completes
                // with REM_INV_REQ_ERR and the QP goes to ERR, but the
                // request is acknowledged — the requester is not told.
                ctx.counters.resp_invalid_request += 1;
                self.error_event = None;
                self.fail_in_message(ctx, Some(WcStatus::RemInvReqErr));
                if pkt.bth.ack_req {
                    self.queue_response(Response::Ack {
                        psn,
                        syndrome: ACK,
                        msn: self.msn,
                    });
                }
                self.error_after_flush = true;
            }
        }
    }

    /// A request already executed: answer it again without re-executing
    /// side effects.
    fn rc_duplicate(&mut self, ctx: &RespCtx<'_>, pkt: &RoceRepr<'_>) {
        let psn = pkt.bth.psn;
        let info = pkt.opcode_info().expect("parsed");
        match info.operation {
            // IBA C9-105 (as rxe cites it): a duplicate SEND or WRITE is
            // acknowledged again with the latest PSN.
            Operation::Send | Operation::Write => {
                let last = self.epsn.sub(1);
                self.queue_response(Response::Ack {
                    psn: last,
                    syndrome: ACK,
                    msn: self.msn,
                });
            }
            Operation::ReadRequest => {
                let mtu = ctx.mtu as u64;
                let hit = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Read {
                        first_psn,
                        npkts,
                        va,
                        rkey,
                        len,
                        msn,
                    } if psn.in_window(first_psn, npkts) => {
                        let off = (first_psn.distance_to(psn) as u64 * mtu).min(len);
                        Some(ReadJob {
                            psn,
                            va: va + off,
                            rkey,
                            remaining: len - off,
                            first: true,
                            msn,
                            replay: true,
                        })
                    }
                    _ => None,
                });
                // A READ retry may start in the middle of the original
                // (IBA 9.7.5.1.1: the responder re-reads from memory).
                if let (Some(job), Some(reth)) = (hit, pkt.ext.reth) {
                    if reth.rkey == job.rkey {
                        self.answer_duplicate_first(psn);
                        self.queue_response(Response::Read(job));
                    }
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // IBA 9.7.5.1.3.2: an atomic is executed once; duplicates get
                // the saved result.
                let hit = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                    _ => None,
                });
                if let Some((orig, msn)) = hit {
                    self.answer_duplicate_first(psn);
                    self.queue_response(Response::AtomicAck { psn, orig, msn });
                }
            }
            _ => {}
        }
    }

    /// C9-110: a duplicate READ or atomic at `psn` is answered before any
    /// later request: the answers owed to requests after it (a READ being
    /// answered among them) stop. The requester went back to `psn` and
    /// asks for them again; if it did not (a copy the network duplicated),
    /// its ACK timer recovers them.
    fn answer_duplicate_first(&mut self, psn: Psn) {
        let mut nak_dropped = false;
        self.responses.retain(|r| {
            let later = psn.before(r.psn());
            if later {
                nak_dropped |= !matches!(
                    r,
                    Response::Ack {
                        syndrome: Syndrome::Ack { .. },
                        ..
                    } | Response::AtomicAck { .. }
                        | Response::Read(_)
                );
            }
            !later
        });
        if nak_dropped {
            // the gap (or RNR wait) the dropped NAK named may be NAKed again
            self.nak_sent = false;
        }
    }

    fn uc_request(&mut self, ctx: &mut RespCtx<'_>, pkt: &RoceRepr<'_>) {
        let info = pkt.opcode_info().expect("parsed");
        let psn = pkt.bth.psn;
        // UC (IBA 9.8.4): no ACKs. A PSN gap loses the message in progress;
        // a FIRST or ONLY always starts a new one.
        if info.position.is_start() {
            if psn != self.epsn {
                ctx.counters.out_of_sequence += 1;
            }
            self.abandon_in_message(ctx);
            self.uc_discard = false;
        } else if psn != self.epsn || self.uc_discard {
            if psn != self.epsn {
                ctx.counters.out_of_sequence += 1;
            }
            self.abandon_in_message(ctx);
            self.uc_discard = true;
            self.epsn = psn.next();
            return;
        }
        self.epsn = psn;
        match self.execute(ctx, pkt) {
            Outcome::Done => {}
            Outcome::Rnr => {
                ctx.counters.out_of_buffer += 1;
                self.uc_discard = !info.position.is_end();
                self.epsn = psn.next();
            }
            Outcome::Nak(..) | Outcome::InvalidateFailed => {
                self.abandon_in_message(ctx);
                self.uc_discard = !info.position.is_end();
                self.epsn = psn.next();
            }
        }
    }

    /// Drops a partly received message; its receive WQE is reused.
    fn abandon_in_message(&mut self, ctx: &mut RespCtx<'_>) {
        if let Some(InMessage::Send { recv, .. }) = self.in_msg.take() {
            ctx.return_recv(recv);
        }
    }

    /// Fails the message in progress; its receive WQE completes in error.
    fn fail_in_message(&mut self, ctx: &mut RespCtx<'_>, status: Option<WcStatus>) {
        let msg = self.in_msg.take();
        if let (Some(InMessage::Send { recv, .. }), Some(st)) = (msg, status) {
            self.complete_recv(ctx, Wc::new(recv.wr_id, st, WcOpcode::Recv, ctx.qpn));
        } else if let Some(InMessage::Send { recv, .. }) = msg {
            ctx.return_recv(recv);
        }
    }

    fn ud_request(&mut self, ctx: &mut RespCtx<'_>, pkt: &RoceRepr<'_>) {
        let Some(deth) = pkt.ext.deth else { return };
        // IBA 10.2.5 / C10-16: a UD packet whose Q_Key differs from the QP's is dropped.
        if deth.qkey != ctx.qkey {
            ctx.counters.qkey_violation += 1;
            return;
        }
        let Some(recv) = ctx.take_recv() else {
            ctx.counters.out_of_buffer += 1;
            return;
        };
        // IBA 11.4.1.1: the first 40 bytes of a UD receive buffer take the
        // GRH; RoCEv2 over IPv4 puts the IPv4 header in its last 20 bytes
        // (as rxe does).
        let mut grh = [0u8; 40];
        match pkt.ip {
            IpRepr::V4(ip) => ip.emit(&mut grh[20..], pkt.ip_len() - 20),
            IpRepr::V6(ip) => ip.emit(&mut grh, pkt.ip_len() - 40),
        }
        let total = 40 + pkt.payload.len() as u64;
        let mut wc = Wc::new(recv.wr_id, WcStatus::Success, WcOpcode::Recv, ctx.qpn);
        if total > recv.sgl.total_len() {
            wc.status = WcStatus::LocLenErr;
            ctx.counters.resp_local_length_error += 1;
        } else if ctx.res.scatter(ctx.pd, &recv.sgl, 0, &grh).is_err()
            || ctx.res.scatter(ctx.pd, &recv.sgl, 40, pkt.payload).is_err()
        {
            wc.status = WcStatus::LocProtErr;
        }
        wc.byte_len = total as u32;
        wc.src_qp = deth.src_qp;
        wc.grh = true;
        wc.grh_ipv4 = matches!(pkt.ip, IpRepr::V4(_));
        wc.imm = pkt.ext.imm;
        wc.solicited = pkt.bth.solicited;
        ctx.counters.rdma_recvs += 1;
        self.complete_recv(ctx, wc);
    }
}

/// A response the responder owes, in PSN order.
#[derive(Clone, Copy, Debug)]
pub enum Response {
    Ack {
        psn: Psn,
        syndrome: wire::Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    Read(ReadJob),
}

impl Response {
    /// The PSN of the next frame this response sends.
    pub fn psn(&self) -> Psn {
        match *self {
            Response::Ack { psn, .. } | Response::AtomicAck { psn, .. } => psn,
            Response::Read(job) => job.psn,
        }
    }
}

/// A READ being answered: responses from `psn` on, `remaining` bytes of
/// `rkey` memory from `va`.
#[derive(Clone, Copy, Debug)]
pub struct ReadJob {
    pub psn: Psn,
    pub va: u64,
    pub rkey: u32,
    pub remaining: u64,
    /// No response of this job has gone out yet.
    pub first: bool,
    pub msn: u32,
    /// Answers a duplicate READ (a replay from the responder resources); it
    /// does not count against max_dest_rd_atomic.
    pub replay: bool,
}

/// A READ or atomic remembered for duplicates (the responder resources of
/// IBA 9.7.5.1.3 / C9-111: atomics are replayed, never re-executed).
#[derive(Clone, Copy, Debug)]
pub enum Resource {
    Read {
        first_psn: Psn,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u64,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// The message the responder is in the middle of.
#[derive(Clone, Copy, Debug)]
pub enum InMessage {
    Send {
        recv: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        remaining: u64,
        total: u64,
    },
}

impl InMessage {
    pub fn operation(&self) -> Operation {
        match self {
            InMessage::Send { .. } => Operation::Send,
            InMessage::Write { .. } => Operation::Write,
        }
    }
}

/// Responder state (rxe's `resp`): the expected PSN and MSN, the message
/// in progress, the responses owed and the responder resources.
///
/// Inputs: [`Self::handle_request`]; outputs: [`Self::poll_transmit`]
/// (the next response frame) and [`Self::poll_error`] (a class C error
/// whose NAK has gone out: the QP is to enter ERR).
///
/// Invariants: `responses` are in PSN order and hold at most one
/// cumulative ACK at the back; a READ or atomic is executed once and
/// answered again from `resources`; after a NAK for a PSN gap, no other
/// until the gap closes (C9-97).
#[derive(Debug, Default)]
pub struct Responder {
    /// Expected PSN.
    epsn: Psn,
    /// Message sequence number: completed request messages, 24 bits.
    msn: u32,
    in_msg: Option<InMessage>,
    /// A PSN sequence error NAK was sent for the current gap (IBA C9-97:
    /// one NAK per out-of-sequence condition).
    nak_sent: bool,
    /// UC: drop packets until the next FIRST or ONLY.
    uc_discard: bool,
    responses: VecDeque<Response>,
    resources: VecDeque<Resource>,
    /// Move to ERR once the pending responses have gone out (class C errors
    /// NAK first, then fail the QP).
    error_after_flush: bool,
    /// The affiliated asynchronous event raised when it does.
    error_event: Option<crate::verbs::AsyncEvent>,
}
