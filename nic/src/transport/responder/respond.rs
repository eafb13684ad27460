//! The responses the responder owes, built one frame at a time in PSN
//! order: ACKs and NAKs (AETH), READ responses segmented by the path MTU,
//! atomic ACKs.

use super::*;

impl Qp {
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
