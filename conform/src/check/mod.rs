//! Conformance checking of captured RoCEv2 traffic, frame by frame.
//!
//! [`Checker::frame`] takes the frames of a capture in order and says, for
//! each, what it is, what is worth knowing about it (retransmission, NAK,
//! ...) and, when the frame breaks a rule, which rule. `rnic pcap check`
//! stops at the first broken frame; `rnic pcap dump` prints everything; the
//! engine can run the same checks on a port.
//!
//! Every frame is checked on its own first: lengths and pad (wire's
//! `RocePacket::new_checked`), the ICRC, a snap length that cut it. Then
//! against the traffic before it, per stream. A *request stream* is the
//! requests one host sends to one QP (source IP, destination IP, destination
//! QPN; a BTH carries only the destination QPN). A *response stream* is the
//! ACKs, read responses and atomic ACKs going back; it is paired with the
//! request stream it answers by the UDP source port (Linux uses the same
//! port in both directions of a connection), or by elimination.
//!
//! The rules:
//! - PSNs of a request stream are consecutive (a READ occupies one PSN per
//!   response packet, so the path MTU is inferred). A PSN *behind* the
//!   expected one is a retransmission (go-back-N), legal and annotated; a
//!   PSN *ahead* of everything sent so far means packets are missing.
//! - Opcodes of a message follow FIRST → MIDDLE* → LAST of one operation,
//!   and READ, atomics and ONLY packets come between messages (IBA 9.7.5.1.2,
//!   the responder's opcode sequence check).
//! - Packets before the last of a message carry exactly the path MTU; the
//!   last carries at most that (IBA 9.7.5.1.4); a WRITE carries what its
//!   RETH DMA length says; a READ response carries what the READ asked for.
//! - An ACK, NAK or RNR NAK names a PSN the requester has sent; a read
//!   response answers a READ request and its packets are consecutive; an
//!   atomic ACK answers an atomic request; between two ACKs the MSN grows
//!   by the number of messages that ended between their PSNs.
//!
//! What the capture cannot show is not held against it: a stream that
//! starts mid-message (the capture began later), responses to requests sent
//! before the capture began, a connection seen in one direction only. UD
//! PSNs are not checked (one UD QP sends to many destinations from one PSN
//! space, and IBA does not order UD).

use crate::capture::Record;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use wire::{mad, Direction, Frame, RocePacket, RoceRepr, Transport};

mod request;
mod response;
mod sniff;
mod violation;

pub use violation::Violation;

use request::ReqStream;
use response::RespStream;
use sniff::{kind_of, sniff, to_ethernet, Sniff};

/// The path MTUs of IBA (bytes).
pub const MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// What a frame turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// A RoCEv2 frame (UDP to port 4791), broken or not.
    Roce,
    /// An 802.3x PAUSE or PFC frame.
    MacControl,
    /// Anything else: skipped; the string says what it is.
    Other(String),
}

/// The verdict on one frame.
#[derive(Clone, Debug)]
pub struct Finding {
    pub number: u64,
    pub class: Class,
    /// One-line rendering of the frame when it parsed.
    pub summary: Option<String>,
    /// Whether the ICRC was verified (None when it could not be reached).
    pub icrc_ok: Option<bool>,
    /// Things worth knowing that break no rule.
    pub notes: Vec<String>,
    /// The rule the frame breaks, if any.
    pub problem: Option<Violation>,
}

impl Finding {
    fn new(number: u64, class: Class) -> Finding {
        Finding {
            number,
            class,
            summary: None,
            icrc_ok: None,
            notes: Vec::new(),
            problem: None,
        }
    }

    /// `"frame N: <summary>: <problem>"`, for error messages.
    pub fn describe_problem(&self) -> Option<String> {
        let p = self.problem.as_ref()?;
        Some(match &self.summary {
            Some(s) => format!("frame {}: {p} [{s}]", self.number),
            None => format!("frame {}: {p}", self.number),
        })
    }
}

/// Totals over a capture.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub frames: u64,
    pub roce: u64,
    pub rc: u64,
    pub uc: u64,
    pub ud: u64,
    pub cnp: u64,
    /// UD SENDs to QP1 that carry a Communication Manager MAD.
    pub cm: u64,
    pub mac_control: u64,
    /// Skipped frames by what they are (TCP, ARP, ...).
    pub skipped: BTreeMap<String, u64>,
    pub broken: u64,
    pub retransmissions: u64,
    pub naks: u64,
    pub rnr_naks: u64,
    pub duplicate_acks: u64,
    pub notes: u64,
    /// Places where packets were missing (only in lossy mode).
    pub losses: u64,
}

impl Stats {
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }
}

/// Direction of one QP's traffic: (source IP, destination IP, destination QPN).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct StreamKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
}

impl StreamKey {
    /// The stream `r` belongs to: its addresses and destination QP.
    pub fn of(r: &RoceRepr<'_>) -> StreamKey {
        StreamKey {
            src: r.ip.src(),
            dst: r.ip.dst(),
            dest_qp: r.bth.dest_qp,
        }
    }
}

/// Checks the frames of one capture, in order.
#[derive(Default)]
pub struct Checker {
    req: HashMap<StreamKey, ReqStream>,
    resp: HashMap<StreamKey, RespStream>,
    pub stats: Stats,
    /// The capture was taken behind a hop that loses, reorders or
    /// duplicates frames (a router's egress after a drop rule, an impaired
    /// link): packets missing from it, and stale copies of earlier ones,
    /// are counted (`Stats::losses`) and the streams resynchronise, instead
    /// of failing the check. Every other rule still applies.
    pub lossy: bool,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    /// A checker for captures of a lossy path (see `lossy`).
    pub fn lossy() -> Checker {
        Checker {
            lossy: true,
            ..Checker::default()
        }
    }

    /// Number of request streams (QP directions) seen.
    pub fn streams(&self) -> usize {
        self.req.len()
    }

    /// Checks one frame.
    pub fn frame(&mut self, rec: &Record) -> Finding {
        self.stats.frames += 1;
        let data = match to_ethernet(rec.linktype, &rec.data) {
            Ok(d) => d,
            Err(e) => {
                let mut f = Finding::new(rec.number, Class::Other("unsupported".into()));
                f.problem = Some(e);
                self.stats.broken += 1;
                return f;
            }
        };
        let f = match sniff(&data) {
            Sniff::Other(what) => {
                *self.stats.skipped.entry(kind_of(&what)).or_default() += 1;
                Finding::new(rec.number, Class::Other(what))
            }
            Sniff::MacControl => {
                let mut f = Finding::new(rec.number, Class::MacControl);
                match Frame::parse(&data) {
                    Ok(m) => {
                        self.stats.mac_control += 1;
                        f.summary = Some(m.to_string());
                    }
                    Err(e) => f.problem = Some(e.into()),
                }
                f
            }
            Sniff::Roce => {
                self.stats.roce += 1;
                self.roce(rec, &data)
            }
        };
        if f.problem.is_some() {
            self.stats.broken += 1;
        }
        self.stats.notes += f.notes.len() as u64;
        f
    }

    fn roce(&mut self, rec: &Record, data: &[u8]) -> Finding {
        let mut f = Finding::new(rec.number, Class::Roce);
        let pkt = match RocePacket::new_checked(data) {
            Ok(p) => p,
            Err(e) if rec.is_cut() => {
                f.summary = cut_headers(rec, data);
                f.problem = Some(match f.summary {
                    Some(_) => Violation::CutBeforeIcrc {
                        captured: rec.data.len(),
                        orig: rec.orig_len,
                    },
                    None => Violation::Cut {
                        captured: rec.data.len(),
                        orig: rec.orig_len,
                        error: e,
                    },
                });
                return f;
            }
            Err(e) => {
                f.problem = Some(e.into());
                return f;
            }
        };
        let repr = RoceRepr::from_packet(&pkt);
        f.summary = Some(repr.to_string());
        if rec.is_cut() {
            f.problem = Some(Violation::CutBeforeIcrc {
                captured: rec.data.len(),
                orig: rec.orig_len,
            });
            return f;
        }
        if let Err(e) = pkt.verify_icrc() {
            f.icrc_ok = Some(false);
            f.problem = Some(e.into());
            return f;
        }
        f.icrc_ok = Some(true);
        // IBA 9.2 (PadCnt): the pad bytes are zero; the ICRC covers them, so
        // only a sender that fills them shows here (a note, not a failure).
        let pad = pkt.bth().pad() as usize;
        let pad_at = pkt.payload_offset() + pkt.payload().len();
        if data[pad_at..pad_at + pad].iter().any(|&b| b != 0) {
            f.notes.push("non-zero pad bytes".into());
        }
        let info = pkt.opcode_info();
        let result = match (info.transport, info.direction) {
            (Transport::Cnp, _) => {
                self.stats.cnp += 1;
                f.notes.push("congestion notification".into());
                Ok(())
            }
            (Transport::Ud, _) => {
                self.stats.ud += 1;
                // a UD message is one packet of at most the path MTU (4096 at most)
                if repr.payload.len() > 4096 {
                    Err(Violation::UdTooLong(repr.payload.len()))
                } else if repr.bth.dest_qp == mad::GSI_QPN {
                    self.gsi(&repr, &mut f.notes)
                } else {
                    Ok(())
                }
            }
            (t, Direction::Request) => {
                if t == Transport::Rc {
                    self.stats.rc += 1;
                } else {
                    self.stats.uc += 1;
                }
                self.request(&repr, &mut f.notes)
            }
            (_, _) => {
                self.stats.rc += 1;
                self.response(&repr, &mut f.notes)
            }
        };
        if let Err(p) = result {
            f.problem = Some(p);
        }
        f
    }
}

impl Checker {
    /// A datagram to QP1 (the GSI): one 256-byte MAD (IBA 13.4.1) from QP1
    /// with the GSI's Q_Key (IBA 13.5.1); a CM message is named in a note.
    fn gsi(&mut self, repr: &RoceRepr, notes: &mut Vec<String>) -> Result<(), Violation> {
        let m = mad::Mad::parse(repr.payload).map_err(Violation::NotAMad)?;
        if let Some(d) = repr.ext.deth {
            if d.qkey != mad::GSI_QKEY {
                return Err(Violation::GsiQkey(d.qkey));
            }
        }
        match m.cm() {
            Some(cm) => {
                self.stats.cm += 1;
                notes.push(cm.to_string());
            }
            None => notes.push(format!(
                "MAD class {:#04x} attribute {:#06x}",
                m.header.mgmt_class, m.header.attribute_id
            )),
        }
        Ok(())
    }
}

/// The longest part of a frame a snap length may have cut off that
/// [`cut_headers`] fills in (a jumbo frame's).
const MAX_CUT: usize = 16 * 1024;

/// The headers of a frame the capture cut short (`rec.is_cut()`), when the
/// bytes it kept hold all of them: the frame is walked with the missing
/// bytes as zeros, and its summary kept only if the payload starts within
/// the captured bytes (so every header shown was on the wire).
fn cut_headers(rec: &Record, data: &[u8]) -> Option<String> {
    let missing = (rec.orig_len as usize).checked_sub(rec.data.len())?;
    if missing > MAX_CUT {
        return None;
    }
    let mut whole = data.to_vec();
    whole.resize(data.len() + missing, 0);
    let pkt = RocePacket::new_checked(&whole[..]).ok()?;
    (pkt.payload_offset() <= data.len()).then(|| RoceRepr::from_packet(&pkt).to_string())
}

/// One line summing up a checked capture.
pub fn summary_line(stats: &Stats, streams: usize) -> String {
    let mut s = format!(
        "{} frames: {} RoCEv2 (RC {}, UC {}, UD {}, CNP {}) in {} QP stream{}",
        stats.frames,
        stats.roce,
        stats.rc,
        stats.uc,
        stats.ud,
        stats.cnp,
        streams,
        if streams == 1 { "" } else { "s" }
    );
    if stats.cm > 0 {
        let _ = write!(s, ", {} CM MADs", stats.cm);
    }
    if stats.mac_control > 0 {
        let _ = write!(s, ", {} PAUSE/PFC", stats.mac_control);
    }
    let skipped = stats.skipped_total();
    if skipped > 0 {
        let kinds: Vec<String> = stats
            .skipped
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = write!(s, ", {skipped} other frames skipped ({})", kinds.join(", "));
    }
    if stats.losses > 0 {
        let _ = write!(s, ", {} places where packets were lost upstream (lossy mode: losses, reordering, duplicates)", stats.losses);
    }
    let _ = write!(
        s,
        "; {} retransmissions, {} NAKs, {} RNR NAKs",
        stats.retransmissions, stats.naks, stats.rnr_naks
    );
    s
}

#[cfg(test)]
mod tests;

/// How a check treats a violation that frames lost, reordered or
/// duplicated upstream of the capture point may explain: an error, or in
/// lossy mode a loss counted and kept as a note.
pub(super) struct Losses<'a> {
    pub(super) lossy: bool,
    pub(super) stats: &'a mut Stats,
    pub(super) notes: &'a mut Vec<String>,
}

impl Losses<'_> {
    /// `Err(msg)`; in lossy mode `Ok`, with `msg` counted as a loss.
    pub(super) fn excuse(&mut self, msg: Violation) -> Result<(), Violation> {
        if !self.lossy {
            return Err(msg);
        }
        self.stats.losses += 1;
        self.notes.push(format!(
            "{msg} (lossy path: lost, reordered or duplicated upstream of the capture point)"
        ));
        Ok(())
    }
}
