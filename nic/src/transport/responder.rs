//! The responder: checks each request in the order IBA 9.7.5.1 lays out
//! (PSN → opcode sequence → opcode allowed on this QP → resources → length
//! → R_Key, access and bounds), executes it (writes into memory, scatters
//! SENDs into receive WQEs, runs atomics exactly once) and owes responses
//! (coalesced ACKs, NAKs, segmented READ responses, atomic ACKs), which it
//! hands out in PSN order.

use super::qp::{InMessage, Qp, ReadJob, Resource, Response};
use super::requester::packets;
use super::Resources;
use crate::time::Instant;
use crate::verbs::AsyncEvent;
use crate::verbs::{access, RecvWr, Wc, WcOpcode, WcStatus};
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

impl Qp {
    pub(crate) fn handle_request(
        &mut self,
        res: &mut Resources,
        _now: Instant,
        pkt: &RoceRepr<'_>,
    ) {
        if !self.can_receive() || self.resp.error_after_flush {
            self.counters.rx_qp_state_drop += 1;
            return;
        }
        match self.qp_type() {
            QpType::Rc => self.rc_request(res, pkt),
            QpType::Uc => self.uc_request(res, pkt),
            QpType::Ud => self.ud_request(res, pkt),
        }
    }

    fn rc_request(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>) {
        let psn = pkt.bth.psn;
        let epsn = self.resp.epsn;
        // 1. PSN (IBA 9.7.5.1.1)
        if psn != epsn {
            if epsn.before(psn) {
                self.counters.out_of_sequence += 1;
                // IBA C9-97 (rxe: sent_psn_nak): one NAK per sequence gap.
                if !self.resp.nak_sent {
                    self.resp.nak_sent = true;
                    self.queue_response(Response::Ack {
                        psn: epsn,
                        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                        msn: self.resp.msn,
                    });
                }
            } else {
                self.counters.duplicate_request += 1;
                self.rc_duplicate(pkt);
            }
            return;
        }
        self.resp.nak_sent = false;
        match self.execute(res, pkt) {
            Outcome::Done => {
                // READs and atomics are answered by their responses; SENDs
                // and WRITEs with AckReq by an ACK (IBA 9.7.5.1.7).
                let op = pkt.opcode_info().expect("parsed").operation;
                if pkt.bth.ack_req && matches!(op, Operation::Send | Operation::Write) {
                    self.queue_response(Response::Ack {
                        psn,
                        syndrome: ACK,
                        msn: self.resp.msn,
                    });
                }
            }
            Outcome::Rnr => {
                self.counters.out_of_buffer += 1;
                // The retried packet will be in sequence; packets behind it
                // are not NAKed again (same rule as C9-97).
                self.resp.nak_sent = true;
                let timer = self.min_rnr_timer;
                self.queue_response(Response::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak { timer },
                    msn: self.resp.msn,
                });
            }
            Outcome::Nak(code, recv_status) => {
                // IBA 9.9.3 (responder class C errors): NAK, complete the
                // receive WQE in progress in error, then fail the QP.
                match code {
                    NakCode::RemoteAccessError => self.counters.resp_remote_access_errors += 1,
                    _ => self.counters.resp_invalid_request += 1,
                }
                // The affiliated event, raised when the QP enters ERR (IBTA
                // 11.6.3.1: "Invalid Request Local Work Queue Error", "Local
                // Access Violation Work Queue Error"). A Remote Operational
                // Error (our receive buffer failed the scatter) is reported
                // through the receive completion (LOC_PROT_ERR), not as an
                // event.
                self.resp.error_event = match code {
                    NakCode::RemoteAccessError => Some(AsyncEvent::QpAccessErr(self.qpn)),
                    NakCode::InvalidRequest => Some(AsyncEvent::QpReqErr(self.qpn)),
                    _ => None,
                };
                self.fail_in_message(res, recv_status);
                self.queue_response(Response::Ack {
                    psn,
                    syndrome: Syndrome::Nak(code),
                    msn: self.resp.msn,
                });
                self.resp.error_after_flush = true;
            }
            Outcome::InvalidateFailed => {
                // IBA 9.9.3, responder class J (an R_Key in a SEND with
                // Invalidate that cannot be invalidated), as rxe
                // (RESPST_ERR_INVALIDATE_RKEY): the receive WQE completes
                // with REM_INV_REQ_ERR and the QP goes to ERR, but the
                // request is acknowledged — the requester is not told.
                self.counters.resp_invalid_request += 1;
                self.resp.error_event = None;
                self.fail_in_message(res, Some(WcStatus::RemInvReqErr));
                if pkt.bth.ack_req {
                    self.queue_response(Response::Ack {
                        psn,
                        syndrome: ACK,
                        msn: self.resp.msn,
                    });
                }
                self.resp.error_after_flush = true;
            }
        }
    }

    /// A request already executed: answer it again without re-executing
    /// side effects.
    fn rc_duplicate(&mut self, pkt: &RoceRepr<'_>) {
        let psn = pkt.bth.psn;
        let info = pkt.opcode_info().expect("parsed");
        match info.operation {
            // IBA C9-105 (as rxe cites it): a duplicate SEND or WRITE is
            // acknowledged again with the latest PSN.
            Operation::Send | Operation::Write => {
                let last = self.resp.epsn.sub(1);
                self.queue_response(Response::Ack {
                    psn: last,
                    syndrome: ACK,
                    msn: self.resp.msn,
                });
            }
            Operation::ReadRequest => {
                let mtu = self.mtu as u64;
                let hit = self.resp.resources.iter().rev().find_map(|r| match *r {
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
                let hit = self.resp.resources.iter().rev().find_map(|r| match *r {
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
        self.resp.responses.retain(|r| {
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
            self.resp.nak_sent = false;
        }
    }

    fn uc_request(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>) {
        let info = pkt.opcode_info().expect("parsed");
        let psn = pkt.bth.psn;
        // UC (IBA 9.8.4): no ACKs. A PSN gap loses the message in progress;
        // a FIRST or ONLY always starts a new one.
        if info.position.is_start() {
            if psn != self.resp.epsn {
                self.counters.out_of_sequence += 1;
            }
            self.abandon_in_message(res);
            self.resp.uc_discard = false;
        } else if psn != self.resp.epsn || self.resp.uc_discard {
            if psn != self.resp.epsn {
                self.counters.out_of_sequence += 1;
            }
            self.abandon_in_message(res);
            self.resp.uc_discard = true;
            self.resp.epsn = psn.next();
            return;
        }
        self.resp.epsn = psn;
        match self.execute(res, pkt) {
            Outcome::Done => {}
            Outcome::Rnr => {
                self.counters.out_of_buffer += 1;
                self.resp.uc_discard = !info.position.is_end();
                self.resp.epsn = psn.next();
            }
            Outcome::Nak(..) | Outcome::InvalidateFailed => {
                self.abandon_in_message(res);
                self.resp.uc_discard = !info.position.is_end();
                self.resp.epsn = psn.next();
            }
        }
    }

    /// Drops a partly received message; its receive WQE is reused.
    fn abandon_in_message(&mut self, res: &mut Resources) {
        if let Some(InMessage::Send { recv, .. }) = self.resp.in_msg.take() {
            self.return_recv(res, recv);
        }
    }

    /// Fails the message in progress; its receive WQE completes in error.
    fn fail_in_message(&mut self, res: &mut Resources, status: Option<WcStatus>) {
        let msg = self.resp.in_msg.take();
        if let (Some(InMessage::Send { recv, .. }), Some(st)) = (msg, status) {
            self.complete_recv(res, Wc::new(recv.wr_id, st, WcOpcode::Recv, self.qpn));
        } else if let Some(InMessage::Send { recv, .. }) = msg {
            self.return_recv(res, recv);
        }
    }

    fn ud_request(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>) {
        let Some(deth) = pkt.ext.deth else { return };
        // IBA 10.2.5 / C10-16: a UD packet whose Q_Key differs from the QP's is dropped.
        if deth.qkey != self.qkey {
            self.counters.qkey_violation += 1;
            return;
        }
        let Some(recv) = self.take_recv(res) else {
            self.counters.out_of_buffer += 1;
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
        let mut wc = Wc::new(recv.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
        if total > recv.sgl.total_len() {
            wc.status = WcStatus::LocLenErr;
            self.counters.resp_local_length_error += 1;
        } else if res.scatter(self.init.pd, &recv.sgl, 0, &grh).is_err()
            || res
                .scatter(self.init.pd, &recv.sgl, 40, pkt.payload)
                .is_err()
        {
            wc.status = WcStatus::LocProtErr;
        }
        wc.byte_len = total as u32;
        wc.src_qp = deth.src_qp;
        wc.grh = true;
        wc.imm = pkt.ext.imm;
        wc.solicited = pkt.bth.solicited;
        self.counters.rdma_recvs += 1;
        self.complete_recv(res, wc);
    }

    /// Steps 2-6 of the responder checks, then execution (RC and UC).
    fn execute(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>) -> Outcome {
        let info = pkt.opcode_info().expect("parsed");
        let op = info.operation;
        let pos = info.position;
        // 2. opcode sequence (IBA 9.7.5.1.2): MIDDLE/LAST continue a message
        // of the same operation, FIRST/ONLY start one.
        let seq_ok = match (&self.resp.in_msg, pos) {
            (None, Position::First | Position::Only) => true,
            (Some(m), Position::Middle | Position::Last) => m.operation() == op,
            _ => false,
        };
        if !seq_ok {
            return Outcome::Nak(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr));
        }
        // 3. opcode allowed on this QP (IBA 9.7.5.1.3 / the QP's access flags)
        let need = match op {
            Operation::Send => 0,
            Operation::Write => access::REMOTE_WRITE,
            Operation::ReadRequest => access::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => access::REMOTE_ATOMIC,
            // FLUSH and ATOMIC_WRITE are not implemented by this responder.
            _ => return Outcome::Nak(NakCode::InvalidRequest, None),
        };
        if self.access & need != need {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        // 5 (length, packet level; C9-92): FIRST and MIDDLE carry exactly
        // one path MTU, LAST at least one byte and at most one MTU, ONLY at
        // most one MTU.
        let len = pkt.payload.len() as u64;
        let mtu = self.mtu as u64;
        let len_ok = match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len > 0 && len <= mtu,
            Position::Only => len <= mtu,
        };
        if !len_ok {
            self.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr));
        }
        // C9-94 (length, message level): a RETH names at most 2^31 bytes.
        if pkt
            .ext
            .reth
            .is_some_and(|r| r.dma_len as u64 > super::MAX_MSG_LEN)
        {
            self.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        match op {
            Operation::Send => self.exec_send(res, pkt, pos),
            Operation::Write => self.exec_write(res, pkt, pos),
            Operation::ReadRequest => self.exec_read(res, pkt),
            _ => self.exec_atomic(res, pkt, op),
        }
    }

    fn exec_send(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>, pos: Position) -> Outcome {
        if pos.is_start() {
            // 4. resources (IBA 9.7.5.1.5): a SEND needs a receive WQE.
            let Some(recv) = self.take_recv(res) else {
                return Outcome::Rnr;
            };
            self.resp.in_msg = Some(InMessage::Send { recv, offset: 0 });
        }
        let Some(InMessage::Send { recv, offset }) = self.resp.in_msg else {
            unreachable!("sequence checked")
        };
        let len = pkt.payload.len() as u64;
        if offset + len > recv.sgl.total_len() {
            self.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, Some(WcStatus::LocLenErr));
        }
        if res
            .scatter(self.init.pd, &recv.sgl, offset, pkt.payload)
            .is_err()
        {
            return Outcome::Nak(NakCode::RemoteOperationalError, Some(WcStatus::LocProtErr));
        }
        // SEND with Invalidate (IBA 10.6.7.3; RC only): the last packet's
        // IETH names the R_Key to invalidate, which only a bound type 2
        // window of this QP can be (`MrTable::invalidate` has the rules).
        if let (true, Some(rkey)) = (pos.is_end(), pkt.ext.ieth) {
            if res
                .mrs
                .invalidate(rkey, self.init.pd, Some(self.qpn))
                .is_err()
            {
                return Outcome::InvalidateFailed;
            }
        }
        self.resp.in_msg = Some(InMessage::Send {
            recv,
            offset: offset + len,
        });
        self.resp.epsn = self.resp.epsn.next();
        if pos.is_end() {
            self.resp.in_msg = None;
            self.finish_message();
            let mut wc = Wc::new(recv.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
            wc.byte_len = (offset + len) as u32;
            wc.imm = pkt.ext.imm;
            wc.solicited = pkt.bth.solicited;
            // invalidated above
            wc.invalidated_rkey = pkt.ext.ieth;
            self.counters.rdma_recvs += 1;
            self.complete_recv(res, wc);
        }
        Outcome::Done
    }

    fn exec_write(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>, pos: Position) -> Outcome {
        // 4. resources (IBA 9.7.5.1.5): a WRITE carrying immediate data (its
        // LAST or ONLY packet) consumes a receive WQE. Checked before any
        // state changes, so the RNR-NAKed packet is retried from scratch.
        let with_imm = pkt.ext.imm.is_some();
        if with_imm && !self.has_recv(res) {
            return Outcome::Rnr;
        }
        if pos.is_start() {
            let Some(reth) = pkt.ext.reth else {
                return Outcome::Nak(NakCode::InvalidRequest, None);
            };
            let total = reth.dma_len as u64;
            // 6. R_Key, access and bounds (IBA 9.7.5.1.6, 10.6.3); a
            // zero-length WRITE does not check the R_Key (IBA 9.4.3).
            if total > 0
                && res
                    .mrs
                    .check_remote(
                        reth.rkey,
                        self.init.pd,
                        self.qpn,
                        reth.va,
                        total,
                        access::REMOTE_WRITE,
                    )
                    .is_err()
            {
                return Outcome::Nak(NakCode::RemoteAccessError, None);
            }
            self.counters.rx_write_requests += 1;
            self.resp.in_msg = Some(InMessage::Write {
                va: reth.va,
                rkey: reth.rkey,
                remaining: total,
                total,
            });
        }
        let Some(InMessage::Write {
            va,
            rkey,
            remaining,
            total,
        }) = self.resp.in_msg
        else {
            unreachable!("sequence checked")
        };
        let len = pkt.payload.len() as u64;
        // 5 (length, message level): no more than the RETH's DMA length, and
        // exactly that much by the last packet.
        if len > remaining || (pos.is_end() && len != remaining) {
            self.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        if len > 0 {
            match res
                .mrs
                .check_remote(rkey, self.init.pd, self.qpn, va, len, access::REMOTE_WRITE)
            {
                Ok((mr, at)) => mr.mem.write(at, pkt.payload),
                Err(_) => return Outcome::Nak(NakCode::RemoteAccessError, None),
            }
        }
        self.resp.in_msg = Some(InMessage::Write {
            va: va + len,
            rkey,
            remaining: remaining - len,
            total,
        });
        self.resp.epsn = self.resp.epsn.next();
        if pos.is_end() {
            self.resp.in_msg = None;
            self.finish_message();
            if let Some(imm) = pkt.ext.imm {
                let recv: RecvWr = self.take_recv(res).expect("checked above");
                let mut wc = Wc::new(
                    recv.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    self.qpn,
                );
                wc.byte_len = total as u32;
                wc.imm = Some(imm);
                wc.solicited = pkt.bth.solicited;
                self.complete_recv(res, wc);
            }
        }
        Outcome::Done
    }

    fn exec_read(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>) -> Outcome {
        let Some(reth) = pkt.ext.reth else {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        };
        let len = reth.dma_len as u64;
        if len > 0
            && res
                .mrs
                .check_remote(
                    reth.rkey,
                    self.init.pd,
                    self.qpn,
                    reth.va,
                    len,
                    access::REMOTE_READ,
                )
                .is_err()
        {
            return Outcome::Nak(NakCode::RemoteAccessError, None);
        }
        // 4. resources: at most max_dest_rd_atomic READs/atomics in progress.
        let busy = self
            .resp
            .responses
            .iter()
            // Replays for duplicates answer READs the requester already
            // counted (and may have completed since): only new READs use
            // a responder resource.
            .filter(|r| matches!(r, Response::Read(j) if !j.replay))
            .count();
        if busy >= self.max_dest_rd_atomic.max(1) as usize {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        self.counters.rx_read_requests += 1;
        let psn = pkt.bth.psn;
        let npkts = packets(len, self.mtu);
        self.finish_message();
        let msn = self.resp.msn;
        self.remember(Resource::Read {
            first_psn: psn,
            npkts,
            va: reth.va,
            rkey: reth.rkey,
            len,
            msn,
        });
        self.resp.epsn = psn.add(npkts);
        self.queue_response(Response::Read(ReadJob {
            psn,
            va: reth.va,
            rkey: reth.rkey,
            remaining: len,
            first: true,
            msn,
            replay: false,
        }));
        Outcome::Done
    }

    fn exec_atomic(&mut self, res: &mut Resources, pkt: &RoceRepr<'_>, op: Operation) -> Outcome {
        let Some(a) = pkt.ext.atomic else {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        };
        // IBA 9.4.5: the target of an atomic is 8 bytes, naturally aligned.
        if a.va % 8 != 0 {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        let (mr, at) = match res.mrs.check_remote(
            a.rkey,
            self.init.pd,
            self.qpn,
            a.va,
            8,
            access::REMOTE_ATOMIC,
        ) {
            Ok(x) => x,
            Err(_) => return Outcome::Nak(NakCode::RemoteAccessError, None),
        };
        if at % 8 != 0 {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        self.counters.rx_atomic_requests += 1;
        let orig = match op {
            Operation::CompareSwap => mr.mem.compare_swap(at, a.compare, a.swap_add),
            _ => mr.mem.fetch_add(at, a.swap_add),
        };
        let psn = pkt.bth.psn;
        self.finish_message();
        let msn = self.resp.msn;
        self.remember(Resource::Atomic { psn, orig, msn });
        self.resp.epsn = psn.next();
        self.queue_response(Response::AtomicAck { psn, orig, msn });
        Outcome::Done
    }

    /// A request message completed: the MSN counts it (IBA 9.7.5.2.2).
    fn finish_message(&mut self) {
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
    }

    fn remember(&mut self, r: Resource) {
        if self.resp.resources.len() >= RESOURCE_CACHE.max(self.max_dest_rd_atomic as usize) {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    /// Queues a response; an ACK right behind another ACK replaces it
    /// (coalescing: ACKs are cumulative).
    fn queue_response(&mut self, r: Response) {
        if let (
            Response::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            },
            Some(Response::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            }),
        ) = (&r, self.resp.responses.back())
        {
            *self.resp.responses.back_mut().expect("checked") = r;
            return;
        }
        self.resp.responses.push_back(r);
    }

    /// Builds the next response frame, if one is owed.
    pub(crate) fn next_response(&mut self, res: &mut Resources, buf: &mut [u8]) -> Option<usize> {
        let hdr = self.hdr.as_ref()?;
        let front = *self.resp.responses.front()?;
        let mut bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, self.dest_qpn, Psn::new(0));
        bth.pkey = self.pkey;
        let mut ext = ExtHeaders::default();
        match front {
            Response::Ack { psn, syndrome, msn } => {
                bth.psn = psn;
                ext.aeth = Some(Aeth { syndrome, msn });
                self.resp.responses.pop_front();
            }
            Response::AtomicAck { psn, orig, msn } => {
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                bth.psn = psn;
                ext.aeth = Some(Aeth { syndrome: ACK, msn });
                ext.atomic_ack = Some(orig);
                self.resp.responses.pop_front();
            }
            Response::Read(job) => {
                let len = job.remaining.min(self.mtu as u64);
                let last = len == job.remaining;
                bth.psn = job.psn;
                bth.opcode = match (job.first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                };
                if job.first || last {
                    ext.aeth = Some(Aeth {
                        syndrome: ACK,
                        msn: job.msn,
                    });
                }
                // The data goes from registered memory straight into the
                // frame. The region may have gone since the request was
                // checked.
                let (pd, qpn) = (self.init.pd, self.qpn);
                let filled: Result<_, crate::verbs::KeyError> =
                    res.emit(hdr, bth, ext, len as usize, buf, |res, dst| {
                        if dst.remaining() == 0 {
                            return Ok(());
                        }
                        let (mr, at) = res.mrs.check_remote(
                            job.rkey,
                            pd,
                            qpn,
                            job.va,
                            len,
                            access::REMOTE_READ,
                        )?;
                        dst.put_mem(&*mr.mem, at, len as usize);
                        Ok(())
                    });
                let Ok(n) = filled else {
                    self.resp.responses.pop_front();
                    self.counters.resp_remote_access_errors += 1;
                    self.resp.responses.push_front(Response::Ack {
                        psn: job.psn,
                        syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
                        msn: job.msn,
                    });
                    self.resp.error_after_flush = true;
                    self.resp.error_event = Some(AsyncEvent::QpAccessErr(self.qpn));
                    return self.next_response(res, buf);
                };
                let next = ReadJob {
                    psn: job.psn.next(),
                    va: job.va + len,
                    remaining: job.remaining - len,
                    first: false,
                    ..job
                };
                if last {
                    self.resp.responses.pop_front();
                } else {
                    *self.resp.responses.front_mut().expect("front exists") = Response::Read(next);
                }
                return n;
            }
        }
        res.emit_bare(hdr, bth, ext, buf)
    }
}
