//! Response streams: pairing with the requests they answer, ACK/NAK
//! consistency (PSNs sent, MSNs counting completed messages), read
//! responses and atomic ACKs.

use super::request::ReqStream;
use super::{Checker, Losses, Stats, StreamKey, Violation};
use wire::{Aeth, NakCode, OpcodeInfo, Operation, Psn, RoceRepr, Syndrome, Transport};

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
}

impl RespStream {
    /// AETH bookkeeping: NAKs, RNR NAKs and duplicate ACKs counted and
    /// noted, a reserved syndrome refused (IBA 9.3.5), and the MSN, which
    /// does not go back.
    fn note_aeth(
        &mut self,
        info: &OpcodeInfo,
        p: Psn,
        aeth: Aeth,
        stats: &mut Stats,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        match aeth.syndrome {
            Syndrome::Nak(code) => {
                self.calib = None;
                stats.naks += 1;
                notes.push(match code {
                    NakCode::PsnSequenceError => {
                        format!("NAK: PSN sequence error, the responder expects PSN {p}")
                    }
                    other => format!("NAK {other:?} at PSN {p}"),
                });
            }
            Syndrome::RnrNak { timer } => {
                self.calib = None;
                stats.rnr_naks += 1;
                notes.push(format!("RNR NAK at PSN {p} (timer code {timer})"));
            }
            Syndrome::Reserved(b) => {
                return Err(Violation::ReservedSyndrome {
                    op: info.name,
                    syndrome: b,
                });
            }
            Syndrome::Ack { .. } => {
                if info.operation == Operation::Acknowledge {
                    if self.last_ack == Some(p) {
                        stats.duplicate_acks += 1;
                        notes.push("duplicate ACK".into());
                    }
                    self.last_ack = Some(p);
                }
            }
        }
        let went_back = self
            .msn
            .filter(|&prev| Psn::new(aeth.msn).before(Psn::new(prev)));
        match went_back {
            Some(prev) => notes.push(format!("MSN went back from {prev} to {}", aeth.msn)),
            None => self.msn = Some(aeth.msn),
        }
        Ok(())
    }

    /// The AETH's MSN counts the messages the responder has completed, so
    /// between two positive responses it grows by the number of messages
    /// that end between their PSNs (as `s.ends` records them).
    fn check_msn(
        &mut self,
        s: &mut ReqStream,
        info: &OpcodeInfo,
        p: Psn,
        msn: u32,
    ) -> Result<(), Violation> {
        if s.msns_unknown {
            self.calib = None;
            return Ok(());
        }
        match self.calib {
            Some((p0, _)) if p.before(p0) => {}
            Some((p0, m0)) => {
                while s.ends.front().is_some_and(|e| !e.after(p0)) {
                    s.ends.pop_front();
                }
                let n = s.ends.iter().take_while(|e| !e.after(p)).count() as u32;
                let want = Psn::new(m0).add(n).value();
                if msn != want {
                    return Err(Violation::WrongMsn {
                        op: info.name,
                        psn: p,
                        msn,
                        n,
                        since: p0,
                        since_msn: m0,
                        want,
                    });
                }
                self.calib = Some((p, msn));
            }
            None => self.calib = Some((p, msn)),
        }
        Ok(())
    }

    /// A READ response packet: its length against the path MTU, the READ
    /// request it answers (its FIRST or ONLY packet has that request's
    /// PSN), consecutive PSNs, and the total against the request's DMA
    /// length.
    fn read_response(
        &mut self,
        s: &mut ReqStream,
        info: &OpcodeInfo,
        p: Psn,
        len: u32,
        first_of_stream: bool,
        l: &mut Losses<'_>,
    ) -> Result<(), Violation> {
        let name = info.name;
        s.check_len(name, info.position, len, l.notes)?;
        if info.position.is_start() {
            self.start_read(s, name, p, l)?;
        }
        let Some(mut cur) = self.read else {
            if first_of_stream {
                l.notes
                    .push("read response begun before the capture".into());
                return Ok(());
            }
            return l.excuse(Violation::NoReadResponseInProgress { op: name, psn: p });
        };
        if p != cur.next {
            if !p.after(cur.next) {
                // reordered or duplicated upstream: nothing to learn from it
                return l.excuse(Violation::ReadResponseBack {
                    op: name,
                    psn: p,
                    expected: cur.next,
                });
            }
            l.excuse(Violation::ReadResponseGap {
                expected: cur.next,
                found: p,
            })?;
            // the bytes in the gap are unknown: stop checking the total
            cur.want = None;
        }
        cur.bytes += len as u64;
        cur.next = p.next();
        self.read = Some(cur);
        if info.position.is_end() {
            self.read = None;
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
        Ok(())
    }

    /// The FIRST or ONLY packet of a READ response at `p`: the response
    /// before it ended, and a READ request was sent at `p`.
    fn start_read(
        &mut self,
        s: &ReqStream,
        name: &'static str,
        p: Psn,
        l: &mut Losses<'_>,
    ) -> Result<(), Violation> {
        if let Some(cur) = self.read {
            if p.after(cur.next) {
                l.excuse(Violation::ReadResponseCutShort {
                    op: name,
                    psn: p,
                    start: cur.start,
                    last: cur.next.sub(1),
                })?;
            } else {
                l.notes.push(format!(
                    "the read response begun at PSN {} was left unfinished",
                    cur.start
                ));
            }
        }
        let want = s.reads.iter().rev().find(|(q, _)| *q == p).map(|x| x.1);
        if want.is_none() {
            return Err(Violation::ReadResponseUnasked { op: name, psn: p });
        }
        self.read = Some(ReadInProgress {
            start: p,
            next: p,
            bytes: 0,
            want,
        });
        Ok(())
    }
}

impl Checker {
    /// The response stream `rkey` belongs to is paired with the request
    /// stream it answers once, at its first response.
    fn paired(&mut self, rkey: StreamKey, sport: u16, psn: Psn) -> Option<StreamKey> {
        if let Some(k) = self.resp.get(&rkey).and_then(|x| x.pair) {
            return Some(k);
        }
        let k = self.pair(rkey, sport, psn);
        self.resp.entry(rkey).or_default().pair = k;
        k
    }

    /// Checks a response packet, one check group after the other: AETH,
    /// the request stream it answers, MSN, then atomic ACKs and READ
    /// responses against the requests sent.
    pub(super) fn response(
        &mut self,
        r: &RoceRepr<'_>,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let info = r.opcode_info().expect("parsed frames have a known opcode");
        let rkey = StreamKey::of(r);
        let p = r.bth.psn;
        let pair = self.paired(rkey, r.udp.src_port, p);
        let rs = self.resp.get_mut(&rkey).expect("inserted by paired");
        rs.seen += 1;
        let first_of_stream = rs.seen == 1;
        if let Some(aeth) = r.ext.aeth {
            rs.note_aeth(info, p, aeth, &mut self.stats, notes)?;
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
                op: info.name,
                psn: p,
                qp: qkey.dest_qp,
                host: qkey.dst,
                upto: upper.sub(1),
            });
        }
        if let Some(aeth) = r.ext.aeth.filter(|a| a.syndrome.is_ack()) {
            rs.check_msn(s, info, p, aeth.msn)?;
        }
        let mut l = Losses {
            lossy: self.lossy,
            stats: &mut self.stats,
            notes,
        };
        match info.operation {
            Operation::AtomicAcknowledge if !s.atomics.contains(&p) => {
                // behind a lossy hop (or a capture that dropped frames) the
                // request may be the frame that is missing
                l.excuse(Violation::AtomicAckWithoutAtomic {
                    op: info.name,
                    psn: p,
                })
            }
            Operation::ReadResponse => {
                let len = r.payload.len() as u32;
                rs.read_response(s, info, p, len, first_of_stream, &mut l)
            }
            _ => Ok(()),
        }
    }
}
