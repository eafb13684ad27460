//! The responses the responder owes, built one frame at a time in PSN
//! order: ACKs and NAKs (AETH), READ responses segmented by the path MTU,
//! atomic ACKs.

use super::*;

impl Responder {
    /// Builds the next response frame, if one is owed.
    pub(crate) fn poll_transmit(&mut self, ctx: &mut RespCtx<'_>, buf: &mut [u8]) -> Option<usize> {
        let hdr = ctx.hdr?;
        let front = *self.responses.front()?;
        let mut bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, ctx.dest_qpn, Psn::new(0));
        bth.pkey = ctx.pkey;
        let mut ext = ExtHeaders::default();
        match front {
            Response::Ack { psn, syndrome, msn } => {
                bth.psn = psn;
                ext.aeth = Some(Aeth { syndrome, msn });
                self.responses.pop_front();
            }
            Response::AtomicAck { psn, orig, msn } => {
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                bth.psn = psn;
                ext.aeth = Some(Aeth { syndrome: ACK, msn });
                ext.atomic_ack = Some(orig);
                self.responses.pop_front();
            }
            Response::Read(job) => {
                let len = job.remaining.min(ctx.mtu as u64);
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
                let (pd, qpn) = (ctx.pd, ctx.qpn);
                let filled: Result<_, crate::verbs::KeyError> =
                    ctx.res.emit(hdr, bth, ext, len as usize, buf, |res, dst| {
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
                    self.responses.pop_front();
                    ctx.counters.resp_remote_access_errors += 1;
                    self.responses.push_front(Response::Ack {
                        psn: job.psn,
                        syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
                        msn: job.msn,
                    });
                    self.error_after_flush = true;
                    self.error_event = Some(AsyncEvent::QpAccessErr(ctx.qpn));
                    return self.poll_transmit(ctx, buf);
                };
                let next = ReadJob {
                    psn: job.psn.next(),
                    va: job.va + len,
                    remaining: job.remaining - len,
                    first: false,
                    ..job
                };
                if last {
                    self.responses.pop_front();
                } else {
                    *self.responses.front_mut().expect("front exists") = Response::Read(next);
                }
                return n;
            }
        }
        ctx.res.emit_bare(hdr, bth, ext, buf)
    }
}
