//! Executing a request that passed the responder checks: SEND into a
//! receive WQE, WRITE into memory, READ queued as a response job, atomics
//! run exactly once and remembered (IBA 9.7.5.1 steps 2-6 and execution).

use super::*;

impl Responder {
    /// Steps 2-6 of the responder checks, then execution (RC and UC).
    pub(super) fn execute(&mut self, ctx: &mut RespCtx<'_>, pkt: &RoceRepr<'_>) -> Outcome {
        let info = pkt.opcode_info().expect("parsed");
        let op = info.operation;
        let pos = info.position;
        // 2. opcode sequence (IBA 9.7.5.1.2): MIDDLE/LAST continue a message
        // of the same operation, FIRST/ONLY start one.
        let seq_ok = match (&self.in_msg, pos) {
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
        if ctx.access & need != need {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        // 5 (length, packet level; C9-92): FIRST and MIDDLE carry exactly
        // one path MTU, LAST at least one byte and at most one MTU, ONLY at
        // most one MTU.
        let len = pkt.payload.len() as u64;
        let mtu = ctx.mtu as u64;
        let len_ok = match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len > 0 && len <= mtu,
            Position::Only => len <= mtu,
        };
        if !len_ok {
            ctx.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr));
        }
        // C9-94 (length, message level): a RETH names at most 2^31 bytes.
        if pkt
            .ext
            .reth
            .is_some_and(|r| r.dma_len as u64 > crate::transport::MAX_MSG_LEN)
        {
            ctx.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        match op {
            Operation::Send => self.exec_send(ctx, pkt, pos),
            Operation::Write => self.exec_write(ctx, pkt, pos),
            Operation::ReadRequest => self.exec_read(ctx, pkt),
            _ => self.exec_atomic(ctx, pkt, op),
        }
    }

    pub(super) fn exec_send(
        &mut self,
        ctx: &mut RespCtx<'_>,
        pkt: &RoceRepr<'_>,
        pos: Position,
    ) -> Outcome {
        if pos.is_start() {
            // 4. resources (IBA 9.7.5.1.5): a SEND needs a receive WQE.
            let Some(recv) = ctx.take_recv() else {
                return Outcome::Rnr;
            };
            self.in_msg = Some(InMessage::Send { recv, offset: 0 });
        }
        let Some(InMessage::Send { recv, offset }) = self.in_msg else {
            unreachable!("sequence checked")
        };
        let len = pkt.payload.len() as u64;
        if offset + len > recv.sgl.total_len() {
            ctx.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, Some(WcStatus::LocLenErr));
        }
        if ctx
            .res
            .scatter(ctx.pd, &recv.sgl, offset, pkt.payload)
            .is_err()
        {
            return Outcome::Nak(NakCode::RemoteOperationalError, Some(WcStatus::LocProtErr));
        }
        // SEND with Invalidate (IBA 10.6.7.3; RC only): the last packet's
        // IETH names the R_Key to invalidate, which only a bound type 2
        // window of this QP can be (`MrTable::invalidate` has the rules).
        if let (true, Some(rkey)) = (pos.is_end(), pkt.ext.ieth) {
            if ctx.res.mrs.invalidate(rkey, ctx.pd, Some(ctx.qpn)).is_err() {
                return Outcome::InvalidateFailed;
            }
        }
        self.in_msg = Some(InMessage::Send {
            recv,
            offset: offset + len,
        });
        self.epsn = self.epsn.next();
        if pos.is_end() {
            self.in_msg = None;
            self.finish_message();
            let mut wc = Wc::new(recv.wr_id, WcStatus::Success, WcOpcode::Recv, ctx.qpn);
            wc.byte_len = (offset + len) as u32;
            wc.imm = pkt.ext.imm;
            wc.solicited = pkt.bth.solicited;
            // invalidated above
            wc.invalidated_rkey = pkt.ext.ieth;
            ctx.counters.rdma_recvs += 1;
            self.complete_recv(ctx, wc);
        }
        Outcome::Done
    }

    pub(super) fn exec_write(
        &mut self,
        ctx: &mut RespCtx<'_>,
        pkt: &RoceRepr<'_>,
        pos: Position,
    ) -> Outcome {
        // 4. resources (IBA 9.7.5.1.5): a WRITE carrying immediate data (its
        // LAST or ONLY packet) consumes a receive WQE. Checked before any
        // state changes, so the RNR-NAKed packet is retried from scratch.
        let with_imm = pkt.ext.imm.is_some();
        if with_imm && !ctx.has_recv() {
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
                && ctx
                    .remote(reth.rkey, reth.va, total, access::REMOTE_WRITE)
                    .is_err()
            {
                return Outcome::Nak(NakCode::RemoteAccessError, None);
            }
            ctx.counters.rx_write_requests += 1;
            self.in_msg = Some(InMessage::Write {
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
        }) = self.in_msg
        else {
            unreachable!("sequence checked")
        };
        let len = pkt.payload.len() as u64;
        // 5 (length, message level): no more than the RETH's DMA length, and
        // exactly that much by the last packet.
        if len > remaining || (pos.is_end() && len != remaining) {
            ctx.counters.resp_local_length_error += 1;
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        if len > 0 {
            match ctx.remote(rkey, va, len, access::REMOTE_WRITE) {
                Ok((mr, at)) => mr.mem.write(at, pkt.payload),
                Err(_) => return Outcome::Nak(NakCode::RemoteAccessError, None),
            }
        }
        self.in_msg = Some(InMessage::Write {
            va: va + len,
            rkey,
            remaining: remaining - len,
            total,
        });
        self.epsn = self.epsn.next();
        if pos.is_end() {
            self.in_msg = None;
            self.finish_message();
            if let Some(imm) = pkt.ext.imm {
                let recv: RecvWr = ctx.take_recv().expect("checked above");
                let mut wc = Wc::new(
                    recv.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    ctx.qpn,
                );
                wc.byte_len = total as u32;
                wc.imm = Some(imm);
                wc.solicited = pkt.bth.solicited;
                self.complete_recv(ctx, wc);
            }
        }
        Outcome::Done
    }

    pub(super) fn exec_read(&mut self, ctx: &mut RespCtx<'_>, pkt: &RoceRepr<'_>) -> Outcome {
        let Some(reth) = pkt.ext.reth else {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        };
        let len = reth.dma_len as u64;
        if len > 0
            && ctx
                .remote(reth.rkey, reth.va, len, access::REMOTE_READ)
                .is_err()
        {
            return Outcome::Nak(NakCode::RemoteAccessError, None);
        }
        // 4. resources: at most max_dest_rd_atomic READs/atomics in progress.
        let busy = self
            .responses
            .iter()
            // Replays for duplicates answer READs the requester already
            // counted (and may have completed since): only new READs use
            // a responder resource.
            .filter(|r| matches!(r, Response::Read(j) if !j.replay))
            .count();
        if busy >= ctx.max_dest_rd_atomic.max(1) as usize {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        ctx.counters.rx_read_requests += 1;
        let psn = pkt.bth.psn;
        let npkts = packets(len, ctx.mtu);
        self.finish_message();
        let msn = self.msn;
        self.remember(
            ctx.max_dest_rd_atomic,
            Resource::Read {
                first_psn: psn,
                npkts,
                va: reth.va,
                rkey: reth.rkey,
                len,
                msn,
            },
        );
        self.epsn = psn.add(npkts);
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

    pub(super) fn exec_atomic(
        &mut self,
        ctx: &mut RespCtx<'_>,
        pkt: &RoceRepr<'_>,
        op: Operation,
    ) -> Outcome {
        let Some(a) = pkt.ext.atomic else {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        };
        // IBA 9.4.5: the target of an atomic is 8 bytes, naturally aligned.
        if a.va % 8 != 0 {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        let (mr, at) = match ctx.remote(a.rkey, a.va, 8, access::REMOTE_ATOMIC) {
            Ok(x) => x,
            Err(_) => return Outcome::Nak(NakCode::RemoteAccessError, None),
        };
        if at % 8 != 0 {
            return Outcome::Nak(NakCode::InvalidRequest, None);
        }
        let orig = match op {
            Operation::CompareSwap => mr.mem.compare_swap(at, a.compare, a.swap_add),
            _ => mr.mem.fetch_add(at, a.swap_add),
        };
        ctx.counters.rx_atomic_requests += 1;
        let psn = pkt.bth.psn;
        self.finish_message();
        let msn = self.msn;
        self.remember(ctx.max_dest_rd_atomic, Resource::Atomic { psn, orig, msn });
        self.epsn = psn.next();
        self.queue_response(Response::AtomicAck { psn, orig, msn });
        Outcome::Done
    }

    /// A request message completed: the MSN counts it (IBA 9.7.5.2.2).
    pub(super) fn finish_message(&mut self) {
        self.msn = (self.msn + 1) & 0xFF_FFFF;
    }

    pub(super) fn remember(&mut self, max_dest_rd_atomic: u8, r: Resource) {
        if self.resources.len() >= RESOURCE_CACHE.max(max_dest_rd_atomic as usize) {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// Queues a response; an ACK right behind another ACK replaces it
    /// (coalescing: ACKs are cumulative).
    pub(super) fn queue_response(&mut self, r: Response) {
        if let (
            Response::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            },
            Some(Response::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            }),
        ) = (&r, self.responses.back())
        {
            *self.responses.back_mut().expect("checked") = r;
            return;
        }
        self.responses.push_back(r);
    }
}
