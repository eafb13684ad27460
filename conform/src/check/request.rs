//! Request streams: PSN continuity (with go-back-N retransmissions and
//! READs that span one PSN per response packet), the opcode sequence of
//! messages, payload sizes against the path MTU and the RETH.

use super::{Checker, Losses, StreamKey, Violation, MTUS};
use std::collections::VecDeque;
use wire::{OpcodeInfo, Operation, Position, Psn, RoceRepr, Transport};

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
    /// MSNs go unchecked from here on: a retransmission was seen (responses
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

impl ReqStream {
    fn new(transport: Transport, sport: u16, first: Psn) -> Self {
        ReqStream {
            transport,
            sport,
            first,
            npsn: first,
            cursor: first,
            pending_read: None,
            after_pending: false,
            msg: Msg::Unknown,
            mtu: None,
            reads: VecDeque::new(),
            atomics: VecDeque::new(),
            paired: false,
            ends: VecDeque::new(),
            msns_unknown: false,
        }
    }

    /// Goes on from `p`: the next PSN expected is `p`, and `npsn` reaches
    /// at least `p`.
    fn resync(&mut self, p: Psn) {
        self.cursor = p;
        if p.after(self.npsn) {
            self.npsn = p;
        }
    }

    /// PSN continuity. Returns whether `p` starts a retransmission
    /// (go-back-N, IBA 9.7.5.2.5).
    fn check_psn(&mut self, p: Psn, qp: u32, l: &mut Losses<'_>) -> Result<bool, Violation> {
        if self.after_pending_read(p, l)? {
            return Ok(false);
        }
        if p == self.cursor {
            // in order
            Ok(false)
        } else if p.before(self.cursor) {
            l.stats.retransmissions += 1;
            l.notes.push(format!(
                "retransmission (go-back-N to PSN {p}; PSNs up to {} were sent)",
                self.upper().sub(1)
            ));
            self.cursor = p;
            self.after_pending = false;
            self.msns_unknown = true;
            Ok(true)
        } else if !p.after(self.upper()) && self.cursor != self.upper() {
            l.notes.push(format!(
                "out of sequence: the retransmission skips PSNs {}..{}",
                self.cursor,
                p.sub(1)
            ));
            self.cursor = p;
            self.msg = Msg::Unknown;
            Ok(false)
        } else {
            l.excuse(Violation::PsnGap {
                expected: self.cursor,
                found: p,
                missing: self.cursor.distance_to(p),
                qp,
            })?;
            self.msg = Msg::Unknown;
            self.msns_unknown = true;
            self.resync(p);
            Ok(false)
        }
    }

    /// The request after a READ whose PSN span waits on the path MTU: its
    /// PSN tells the span (a READ takes one PSN per response packet).
    /// Returns whether `p` was taken as that request.
    fn after_pending_read(&mut self, p: Psn, l: &mut Losses<'_>) -> Result<bool, Violation> {
        let (Some((q, len)), true) = (self.pending_read, self.after_pending) else {
            return Ok(false);
        };
        if !p.after(q) {
            return Ok(false);
        }
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
            l.excuse(Violation::GapAfterRead {
                psn: p,
                len,
                read: q,
                span: npkts(len, MTUS[0]),
            })?;
            // resynchronised after a loss
            self.msns_unknown = true;
            self.pending_read = None;
            self.after_pending = false;
            self.msg = Msg::Unknown;
            self.resync(p);
        } else if fits.len() == 1 && !l.lossy {
            self.set_mtu(fits[0]);
        } else {
            // several MTUs fit, or (lossy) a packet lost or reordered
            // upstream may stand between the READ and this one, so its
            // PSN does not tell the span; the MTU is left to a full
            // packet's length
            self.pending_read = None;
            self.after_pending = false;
            self.resync(p);
        }
        Ok(true)
    }

    /// The opcode sequence (IBA 9.7.5.1.2, rxe check_op_seq): MIDDLE and
    /// LAST only inside a message of their operation, FIRST and ONLY only
    /// between messages.
    fn check_op_seq(
        &mut self,
        info: &OpcodeInfo,
        retransmission: bool,
        qp: u32,
        l: &mut Losses<'_>,
    ) -> Result<(), Violation> {
        if retransmission {
            self.msg = if info.position.is_start() {
                Msg::Idle
            } else {
                Msg::Unknown
            };
        }
        match (self.msg, info.position) {
            (Msg::Idle, Position::Middle | Position::Last) => Err(Violation::OutsideMessage {
                op: info.name,
                kind: info.operation,
                qp,
            }),
            (Msg::In { op, .. }, Position::Middle | Position::Last) if op != info.operation => {
                Err(Violation::InsideOtherMessage {
                    op: info.name,
                    open: op,
                })
            }
            (Msg::In { op, start, .. }, Position::First | Position::Only) => {
                l.excuse(Violation::BeginsInsideMessage {
                    op: info.name,
                    open: op,
                    at: start,
                })?;
                self.msns_unknown = true;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The message the packet belongs to, and a WRITE's length against
    /// its RETH's DMA length (IBA 9.7.5.1.4) once it ends.
    fn track_message(
        &mut self,
        info: &OpcodeInfo,
        p: Psn,
        len: u32,
        dma: Option<u32>,
    ) -> Result<(), Violation> {
        self.msg = match (self.msg, info.position) {
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
                if let (Operation::Write, Some(want)) = (info.operation, dma) {
                    if want != len {
                        return Err(Violation::WriteOnlyLength {
                            op: info.name,
                            len,
                            want,
                        });
                    }
                }
                Msg::Idle
            }
        };
        Ok(())
    }

    /// Moves past `p`: records where messages end (for MSNs), the READs
    /// and atomics sent (for pairing responses), and the PSNs the packet
    /// takes (a READ one per response packet, once the path MTU is known).
    fn advance(&mut self, info: &OpcodeInfo, p: Psn, dma: Option<u32>) {
        let new = !p.before(self.npsn);
        let ends_message = match info.operation {
            Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd => true,
            _ => info.position.is_end(),
        };
        if new && ends_message {
            self.ends.push_back(p);
            if self.ends.len() > 1 << 16 {
                self.ends.pop_front();
            }
        }
        self.after_pending = false;
        let mut span = 1;
        match info.operation {
            Operation::ReadRequest => {
                let want = dma.unwrap_or(0);
                self.reads.push_back((p, want));
                if self.reads.len() > KEEP {
                    self.reads.pop_front();
                }
                match self.mtu {
                    Some(m) => span = npkts(want, m),
                    None if want <= MTUS[0] => span = 1,
                    None => {
                        self.pending_read = Some((p, want));
                        self.after_pending = true;
                    }
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                self.atomics.push_back(p);
                if self.atomics.len() > KEEP {
                    self.atomics.pop_front();
                }
            }
            _ => {}
        }
        self.cursor = p.add(span);
        if self.cursor.after(self.npsn) {
            self.npsn = self.cursor;
        }
    }
}

impl Checker {
    /// Checks a request packet against its stream, one check group after
    /// the other: transport, PSN, opcode sequence, length, message.
    pub(super) fn request(
        &mut self,
        r: &RoceRepr<'_>,
        notes: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let info = r.opcode_info().expect("parsed frames have a known opcode");
        let key = StreamKey::of(r);
        let p = r.bth.psn;
        let s = self
            .req
            .entry(key)
            .or_insert_with(|| ReqStream::new(info.transport, r.udp.src_port, p));
        if s.transport != info.transport {
            return Err(Violation::TransportChanged {
                op: info.name,
                qp: key.dest_qp,
                was: s.transport,
            });
        }
        let mut l = Losses {
            lossy: self.lossy,
            stats: &mut self.stats,
            notes,
        };
        let retransmission = s.check_psn(p, key.dest_qp, &mut l)?;
        s.check_op_seq(info, retransmission, key.dest_qp, &mut l)?;
        // lengths (IBA 9.7.5.1.4; read responses 9.7.5.1.6)
        let len = r.payload.len() as u32;
        if info.has_payload() {
            s.check_len(info.name, info.position, len, l.notes)?;
        }
        let dma = r.ext.reth.map(|x| x.dma_len);
        s.track_message(info, p, len, dma)?;
        s.advance(info, p, dma);
        Ok(())
    }
}
