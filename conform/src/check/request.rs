//! Request streams: PSN continuity (with go-back-N retransmissions and
//! READs that span one PSN per response packet), the opcode sequence of
//! messages, payload sizes against the path MTU and the RETH.

use super::{Checker, StreamKey, Violation, MTUS};
use std::collections::VecDeque;
use wire::{Operation, Position, Psn, RoceRepr, Transport};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Msg {
    /// Between messages.
    Idle,
    /// Inside a message of `op`; `start` is its FIRST PSN when seen.
    In {
        op: Operation,
        start: Option<Psn>,
        bytes: u64,
        dma_len: Option<u32>,
    },
    /// Not known (the stream started mid-message, or a retransmission
    /// resumed somewhere): the next packet is taken as it comes.
    Unknown,
}

/// Requests towards one QP.
pub(super) struct ReqStream {
    pub(super) transport: Transport,
    pub(super) sport: u16,
    pub(super) first: Psn,
    /// One past the highest PSN sent (a pending READ counted as one).
    pub(super) npsn: Psn,
    /// The PSN expected next in the current pass (behind `npsn` while a
    /// retransmission replays).
    pub(super) cursor: Psn,
    /// A READ whose PSN span is unknown because the path MTU is.
    pub(super) pending_read: Option<(Psn, u32)>,
    /// The last packet of this pass was that pending READ.
    pub(super) after_pending: bool,
    pub(super) msg: Msg,
    pub(super) mtu: Option<u32>,
    /// READ requests seen: (first PSN, DMA length), newest last.
    pub(super) reads: VecDeque<(Psn, u32)>,
    pub(super) atomics: VecDeque<Psn>,
    pub(super) paired: bool,
    /// PSNs at which messages sent for the first time end (a READ or an
    /// atomic ends at its request PSN, where the responder counts it),
    /// oldest first: for checking MSNs.
    pub(super) ends: VecDeque<Psn>,
    /// MSNs are no longer checked: a retransmission was seen (responses
    /// to duplicates carry the current MSN), or, in lossy mode, packets
    /// are missing from the capture (where messages end is unknown).
    pub(super) msns_unknown: bool,
}

pub(super) const KEEP: usize = 4096;

pub(super) fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

impl ReqStream {
    /// One past the highest PSN that may have been sent.
    pub(super) fn upper(&self) -> Psn {
        match self.pending_read {
            Some((q, len)) => {
                let hi = q.add(npkts(len, MTUS[0]));
                if hi.after(self.npsn) {
                    hi
                } else {
                    self.npsn
                }
            }
            None => self.npsn,
        }
    }

    /// The payload of a request or read response packet against the path
    /// MTU (IBA 9.7.5.1.4, read responses 9.7.5.1.6): every packet before
    /// the last of a message carries exactly the path MTU, the last at most
    /// that. The first full packet seen tells the path MTU.
    pub(super) fn check_len(
        &mut self,
        op: &'static str,
        position: Position,
        len: u32,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        match position {
            Position::First | Position::Middle => match self.mtu {
                Some(mtu) if len != mtu => Err(Violation::NotPathMtu { op, len, mtu }),
                Some(_) => Ok(()),
                None if MTUS.contains(&len) => {
                    notes.push(format!("path MTU {len}"));
                    self.set_mtu(len);
                    Ok(())
                }
                None => Err(Violation::NoPathMtu { op, len }),
            },
            Position::Last | Position::Only => {
                let mtu = self.mtu.unwrap_or(4096);
                if len > mtu {
                    return Err(Violation::OverPathMtu { op, len, mtu });
                }
                Ok(())
            }
        }
    }

    pub(super) fn set_mtu(&mut self, mtu: u32) {
        self.mtu = Some(mtu);
        if let Some((q, len)) = self.pending_read.take() {
            let end = q.add(npkts(len, mtu));
            if self.after_pending {
                self.cursor = end;
            }
            if end.after(self.npsn) {
                self.npsn = end;
            }
            self.after_pending = false;
        }
    }
}

impl Checker {
    pub(super) fn request(
        &mut self,
        r: &RoceRepr<'_>,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let info = r.opcode_info().expect("parsed frames have a known opcode");
        let key = StreamKey {
            src: r.ip.src(),
            dst: r.ip.dst(),
            dest_qp: r.bth.dest_qp,
        };
        let p = r.bth.psn;
        let s = self.req.entry(key).or_insert_with(|| ReqStream {
            transport: info.transport,
            sport: r.udp.src_port,
            first: p,
            npsn: p,
            cursor: p,
            pending_read: None,
            after_pending: false,
            msg: Msg::Unknown,
            mtu: None,
            reads: VecDeque::new(),
            atomics: VecDeque::new(),
            paired: false,
            ends: VecDeque::new(),
            msns_unknown: false,
        });
        if s.transport != info.transport {
            return Err(Violation::TransportChanged {
                op: info.name,
                qp: key.dest_qp,
                was: s.transport,
            });
        }

        // ---- PSN ----
        let mut retransmission = false;
        let mut in_order = false;
        if let (Some((q, len)), true) = (s.pending_read, s.after_pending) {
            if p.after(q) {
                let fits: Vec<u32> = MTUS
                    .iter()
                    .copied()
                    .filter(|&m| q.add(npkts(len, m)) == p)
                    .collect();
                if fits.is_empty() {
                    let hi = q.add(npkts(len, MTUS[0]));
                    if !p.after(hi) {
                        return Err(Violation::AfterReadFitsNoMtu {
                            psn: p,
                            len,
                            read: q,
                        });
                    }
                    let msg = Violation::GapAfterRead {
                        psn: p,
                        len,
                        read: q,
                        span: npkts(len, MTUS[0]),
                    };
                    if !self.lossy {
                        return Err(msg);
                    }
                    super::lost(&mut self.stats, notes, msg);
                    s.msns_unknown = true;
                    s.pending_read = None;
                    s.after_pending = false;
                    s.msg = Msg::Unknown;
                    s.cursor = p;
                    if p.after(s.npsn) {
                        s.npsn = p;
                    }
                    in_order = true;
                }
                if in_order {
                    // resynchronised after a loss
                } else if fits.len() == 1 && !self.lossy {
                    s.set_mtu(fits[0]);
                } else {
                    // several MTUs fit, or (lossy) a packet lost or
                    // reordered upstream may stand between the READ and
                    // this one, so its PSN does not tell the span; the
                    // MTU is left to a full packet's length
                    s.pending_read = None;
                    s.after_pending = false;
                    s.cursor = p;
                    if p.after(s.npsn) {
                        s.npsn = p;
                    }
                }
                in_order = true;
            }
        }
        if !in_order {
            if p == s.cursor {
                // in order
            } else if p.before(s.cursor) {
                retransmission = true;
                self.stats.retransmissions += 1;
                notes.push(format!(
                    "retransmission (go-back-N to PSN {p}; PSNs up to {} were sent)",
                    s.upper().sub(1)
                ));
                s.cursor = p;
                s.after_pending = false;
                s.msns_unknown = true;
            } else if !p.after(s.upper()) && s.cursor != s.upper() {
                notes.push(format!(
                    "out of sequence: the retransmission skips PSNs {}..{}",
                    s.cursor,
                    p.sub(1)
                ));
                s.cursor = p;
                s.msg = Msg::Unknown;
            } else {
                let missing = s.cursor.distance_to(p);
                let msg = Violation::PsnGap {
                    expected: s.cursor,
                    found: p,
                    missing,
                    qp: key.dest_qp,
                };
                if !self.lossy {
                    return Err(msg);
                }
                super::lost(&mut self.stats, notes, msg);
                s.cursor = p;
                s.msg = Msg::Unknown;
                s.msns_unknown = true;
                if p.after(s.npsn) {
                    s.npsn = p;
                }
            }
        }

        // ---- opcode sequence (IBA 9.7.5.1.2, rxe check_op_seq) ----
        if retransmission && !info.position.is_start() {
            s.msg = Msg::Unknown;
        }
        if retransmission && info.position.is_start() {
            s.msg = Msg::Idle;
        }
        let name = info.name;
        match (s.msg, info.position) {
            (Msg::Idle, Position::Middle | Position::Last) => {
                return Err(Violation::OutsideMessage {
                    op: name,
                    kind: info.operation,
                    qp: key.dest_qp,
                });
            }
            (Msg::In { op, .. }, Position::Middle | Position::Last) if op != info.operation => {
                return Err(Violation::InsideOtherMessage { op: name, open: op });
            }
            (Msg::In { op, start, .. }, Position::First | Position::Only) => {
                let msg = Violation::BeginsInsideMessage {
                    op: name,
                    open: op,
                    at: start,
                };
                if !self.lossy {
                    return Err(msg);
                }
                super::lost(&mut self.stats, notes, msg);
                s.msns_unknown = true;
            }
            _ => {}
        }

        // ---- lengths (IBA 9.7.5.1.4; read responses 9.7.5.1.6) ----
        let len = r.payload.len() as u32;
        if info.has_payload() {
            s.check_len(name, info.position, len, notes)?;
        }

        // ---- message state ----
        let dma = r.ext.reth.map(|x| x.dma_len);
        s.msg = match (s.msg, info.position) {
            (_, Position::First) => Msg::In {
                op: info.operation,
                start: Some(p),
                bytes: len as u64,
                dma_len: if info.operation == Operation::Write {
                    dma
                } else {
                    None
                },
            },
            (
                Msg::In {
                    op,
                    start,
                    bytes,
                    dma_len,
                },
                Position::Middle,
            ) => Msg::In {
                op,
                start,
                bytes: bytes + len as u64,
                dma_len,
            },
            (_, Position::Middle) => Msg::In {
                op: info.operation,
                start: None,
                bytes: 0,
                dma_len: None,
            },
            (
                Msg::In {
                    start: Some(start),
                    bytes,
                    dma_len: Some(want),
                    ..
                },
                Position::Last,
            ) => {
                let total = bytes + len as u64;
                if total != want as u64 {
                    return Err(Violation::WriteLength {
                        start,
                        total,
                        want: want.into(),
                    });
                }
                Msg::Idle
            }
            (_, Position::Last) => Msg::Idle,
            (_, Position::Only) => {
                if info.operation == Operation::Write {
                    if let Some(want) = dma {
                        if want != len {
                            return Err(Violation::WriteOnlyLength {
                                op: name,
                                len,
                                want,
                            });
                        }
                    }
                }
                Msg::Idle
            }
        };

        // ---- PSN advance ----
        let new = !p.before(s.npsn);
        let ends_message = match info.operation {
            Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd => true,
            _ => info.position.is_end(),
        };
        if new && ends_message {
            s.ends.push_back(p);
            if s.ends.len() > 1 << 16 {
                s.ends.pop_front();
            }
        }
        s.after_pending = false;
        let mut span = 1;
        match info.operation {
            Operation::ReadRequest => {
                let want = dma.unwrap_or(0);
                s.reads.push_back((p, want));
                if s.reads.len() > KEEP {
                    s.reads.pop_front();
                }
                match s.mtu {
                    Some(m) => span = npkts(want, m),
                    None if want <= MTUS[0] => span = 1,
                    None => {
                        s.pending_read = Some((p, want));
                        s.after_pending = true;
                    }
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                s.atomics.push_back(p);
                if s.atomics.len() > KEEP {
                    s.atomics.pop_front();
                }
            }
            _ => {}
        }
        s.cursor = p.add(span);
        if s.cursor.after(s.npsn) {
            s.npsn = s.cursor;
        }
        Ok(())
    }
}
