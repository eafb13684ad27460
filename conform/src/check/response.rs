//! Response streams: pairing with the requests they answer, ACK/NAK
//! consistency (PSNs sent, MSNs counting completed messages), read
//! responses and atomic ACKs.

use super::{Checker, StreamKey, Violation};
use wire::{NakCode, Operation, Psn, RoceRepr, Syndrome, Transport};

#[derive(Clone, Copy)]
pub(super) struct ReadInProgress {
    pub(super) start: Psn,
    pub(super) next: Psn,
    pub(super) bytes: u64,
    pub(super) want: Option<u32>,
}

/// Responses towards one QP.
#[derive(Default)]
pub(super) struct RespStream {
    pub(super) pair: Option<StreamKey>,
    pub(super) seen: u64,
    pub(super) read: Option<ReadInProgress>,
    pub(super) msn: Option<u32>,
    pub(super) last_ack: Option<Psn>,
    /// (PSN, MSN) of the last positive response checked: the origin for
    /// the next MSN check.
    pub(super) calib: Option<(Psn, u32)>,
}

impl Checker {
    /// Finds the request stream a response stream answers.
    fn pair(&mut self, rkey: StreamKey, sport: u16, psn: Psn) -> Option<StreamKey> {
        let cands: Vec<StreamKey> = self
            .req
            .iter()
            .filter(|(k, s)| {
                k.src == rkey.dst && k.dst == rkey.src && s.transport == Transport::Rc && !s.paired
            })
            .map(|(k, _)| *k)
            .collect();
        let by_port: Vec<StreamKey> = cands
            .iter()
            .copied()
            .filter(|k| self.req[k].sport == sport)
            .collect();
        let in_range = |v: &[StreamKey]| -> Vec<StreamKey> {
            v.iter()
                .copied()
                .filter(|k| {
                    let s = &self.req[k];
                    !psn.before(s.first) && psn.before(s.upper())
                })
                .collect()
        };
        let pick = if by_port.len() == 1 {
            Some(by_port[0])
        } else if cands.len() == 1 {
            Some(cands[0])
        } else {
            let pool = if by_port.is_empty() { &cands } else { &by_port };
            let r = in_range(pool);
            (r.len() == 1).then(|| r[0])
        };
        if let Some(k) = pick {
            self.req.get_mut(&k).expect("candidate").paired = true;
        }
        pick
    }

    pub(super) fn response(
        &mut self,
        r: &RoceRepr<'_>,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let info = r.opcode_info().expect("parsed frames have a known opcode");
        let name = info.name;
        let rkey = StreamKey {
            src: r.ip.src(),
            dst: r.ip.dst(),
            dest_qp: r.bth.dest_qp,
        };
        let p = r.bth.psn;
        let paired = self.resp.get(&rkey).and_then(|x| x.pair);
        let pair = match paired {
            Some(k) => Some(k),
            None => {
                let k = self.pair(rkey, r.udp.src_port, p);
                self.resp.entry(rkey).or_default().pair = k;
                k
            }
        };
        let rs = self.resp.get_mut(&rkey).expect("inserted above");
        rs.seen += 1;
        let first_of_stream = rs.seen == 1;

        // AETH bookkeeping: the MSN does not go back.
        if let Some(aeth) = r.ext.aeth {
            match aeth.syndrome {
                Syndrome::Nak(code) => {
                    rs.calib = None;
                    self.stats.naks += 1;
                    notes.push(match code {
                        NakCode::PsnSequenceError => {
                            format!("NAK: PSN sequence error, the responder expects PSN {p}")
                        }
                        other => format!("NAK {other:?} at PSN {p}"),
                    });
                }
                Syndrome::RnrNak { timer } => {
                    rs.calib = None;
                    self.stats.rnr_naks += 1;
                    notes.push(format!("RNR NAK at PSN {p} (timer code {timer})"));
                }
                Syndrome::Reserved(b) => {
                    return Err(Violation::ReservedSyndrome {
                        op: name,
                        syndrome: b,
                    });
                }
                Syndrome::Ack { .. } => {
                    if info.operation == Operation::Acknowledge {
                        if rs.last_ack == Some(p) {
                            self.stats.duplicate_acks += 1;
                            notes.push("duplicate ACK".into());
                        }
                        rs.last_ack = Some(p);
                    }
                }
            }
            if let Some(prev) = rs.msn {
                if Psn::new(aeth.msn).before(Psn::new(prev)) {
                    notes.push(format!("MSN went back from {prev} to {}", aeth.msn));
                }
            }
            if !rs
                .msn
                .is_some_and(|prev| Psn::new(aeth.msn).before(Psn::new(prev)))
            {
                rs.msn = Some(aeth.msn);
            }
        }

        let Some(qkey) = pair else {
            if first_of_stream {
                notes.push(format!(
                    "no requests to the QP these responses answer ({} > {}) are in the capture so far",
                    rkey.dst, rkey.src
                ));
            }
            return Ok(());
        };
        let s = self.req.get_mut(&qkey).expect("paired streams exist");
        if p.before(s.first) {
            notes.push("answers a request sent before the capture began".into());
            return Ok(());
        }
        let upper = s.upper();
        if !p.before(upper) {
            return Err(Violation::ResponseAhead {
                op: name,
                psn: p,
                qp: qkey.dest_qp,
                host: qkey.dst,
                upto: upper.sub(1),
            });
        }

        // The AETH's MSN counts the messages the responder has
        // completed, so between two positive responses it grows by the
        // number of messages that end between their PSNs.
        if let Some(aeth) = r.ext.aeth.filter(|a| a.syndrome.is_ack()) {
            if s.msns_unknown {
                rs.calib = None;
            } else {
                match rs.calib {
                    Some((p0, _)) if p.before(p0) => {}
                    Some((p0, m0)) => {
                        while s.ends.front().is_some_and(|e| !e.after(p0)) {
                            s.ends.pop_front();
                        }
                        let n = s.ends.iter().take_while(|e| !e.after(p)).count() as u32;
                        let want = Psn::new(m0).add(n).value();
                        if aeth.msn != want {
                            return Err(Violation::WrongMsn {
                                op: name,
                                psn: p,
                                msn: aeth.msn,
                                n,
                                since: p0,
                                since_msn: m0,
                                want,
                            });
                        }
                        rs.calib = Some((p, aeth.msn));
                    }
                    None => rs.calib = Some((p, aeth.msn)),
                }
            }
        }

        match info.operation {
            Operation::AtomicAcknowledge if !s.atomics.contains(&p) => {
                let v = Violation::AtomicAckWithoutAtomic { op: name, psn: p };
                // behind a lossy hop (or a capture that dropped frames) the
                // request may be the frame that is missing
                if !self.lossy {
                    return Err(v);
                }
                super::lost(&mut self.stats, notes, v);
            }
            Operation::ReadResponse => {
                let len = r.payload.len() as u32;
                let name = info.name;
                s.check_len(name, info.position, len, notes)?;
                if info.position.is_start() {
                    if let Some(cur) = rs.read {
                        if p.after(cur.next) {
                            let msg = Violation::ReadResponseCutShort {
                                op: name,
                                psn: p,
                                start: cur.start,
                                last: cur.next.sub(1),
                            };
                            if !self.lossy {
                                return Err(msg);
                            }
                            super::lost(&mut self.stats, notes, msg);
                        } else {
                            notes.push(format!(
                                "the read response begun at PSN {} was left unfinished",
                                cur.start
                            ));
                        }
                    }
                    let want = s.reads.iter().rev().find(|(q, _)| *q == p).map(|x| x.1);
                    if want.is_none() {
                        return Err(Violation::ReadResponseUnasked { op: name, psn: p });
                    }
                    rs.read = Some(ReadInProgress {
                        start: p,
                        next: p,
                        bytes: 0,
                        want,
                    });
                }
                let Some(mut cur) = rs.read else {
                    if first_of_stream {
                        notes.push("read response begun before the capture".into());
                    } else {
                        let msg = Violation::NoReadResponseInProgress { op: name, psn: p };
                        if !self.lossy {
                            return Err(msg);
                        }
                        super::lost(&mut self.stats, notes, msg);
                    }
                    return Ok(());
                };
                if p != cur.next {
                    if !p.after(cur.next) {
                        let msg = Violation::ReadResponseBack {
                            op: name,
                            psn: p,
                            expected: cur.next,
                        };
                        if !self.lossy {
                            return Err(msg);
                        }
                        // reordered or duplicated upstream: nothing to learn from it
                        super::lost(&mut self.stats, notes, msg);
                        return Ok(());
                    }
                    let msg = Violation::ReadResponseGap {
                        expected: cur.next,
                        found: p,
                    };
                    if !self.lossy {
                        return Err(msg);
                    }
                    super::lost(&mut self.stats, notes, msg);
                    // the bytes in the gap are unknown: stop checking the total
                    cur.want = None;
                }
                cur.bytes += len as u64;
                cur.next = p.next();
                rs.read = Some(cur);
                if info.position.is_end() {
                    rs.read = None;
                    if let Some(want) = cur.want {
                        if cur.bytes != want as u64 {
                            return Err(Violation::ReadLength {
                                start: cur.start,
                                total: cur.bytes,
                                want: want.into(),
                            });
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}
