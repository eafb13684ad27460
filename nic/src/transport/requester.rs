//! The requester: turns send WQEs into request packets — segmentation by
//! path MTU, PSN assignment, AckReq, the unacknowledged-PSN window, the
//! max_rd_atomic limit, fences — and rewinds for go-back-N retransmission.
//! It works on the send queue it shares with the completer through
//! [`SendCtx`].

use super::completer::Completer;
use super::sq::{SendCtx, SendQueue, SendWqe};
use crate::time::Instant;
use crate::verbs::{access, QpState, SendOp, WcStatus};
use wire::{
    AtomicEth, BthRepr, Deth, ExtHeaders, Opcode, Operation, Position, Psn, QpType, Reth, Transport,
};

/// Requester state (rxe's `req`): where in the send queue the next
/// request packet comes from and which PSN it takes.
///
/// Input: [`Self::handle_retry`] (go-back-N from the completer); output:
/// [`Self::poll_transmit`] (the next request packet). The completer's
/// `una`, `acked` and RNR wait are read through its methods; it learns of
/// what was sent through `on_request_sent` / `on_unreliable_sent`.
///
/// Invariants: `npsn` never passes `high`; the cursor moves back only
/// through `handle_retry`; `rd_atomic_outstanding` counts the started
/// READs and atomics still in the send queue.
#[derive(Debug, Default)]
pub struct Requester {
    /// Index in the send queue of the WQE whose next packet goes out next.
    cur: usize,
    /// Bytes of `sq[cur]` already sent (or, for a READ, the offset to ask from).
    cur_off: u64,
    /// Next PSN to send.
    npsn: Psn,
    /// READs and atomics sent and not completed.
    rd_atomic_outstanding: u32,
    /// Packets sent since the last one with AckReq.
    noack_pkts: u32,
    /// One past the highest PSN ever sent: responses up to here answer
    /// something we sent, even after a go-back-N rewind moved `npsn` back.
    high: Psn,
}

impl Requester {
    /// Next PSN to send.
    pub fn npsn(&self) -> Psn {
        self.npsn
    }

    /// The state in one line, for debugging.
    pub fn describe(&self) -> String {
        format!(
            "npsn={} cur={} cur_off={} rd_atomic={}",
            self.npsn, self.cur, self.cur_off, self.rd_atomic_outstanding
        )
    }

    /// One past the highest PSN ever sent.
    pub fn high(&self) -> Psn {
        self.high
    }

    /// `modify_qp` set the send PSN.
    pub fn reset_psn(&mut self, psn: Psn) {
        self.npsn = psn;
        self.high = psn;
    }

    /// The oldest WQE `w` left the send queue (completed or failed).
    pub fn on_front_retired(&mut self, w: &SendWqe) {
        if self.cur == 0 {
            // the WQE being (re)sent is done: the cursor moves to the next
            // one (`fast_forward` puts npsn back in line with una)
            self.cur_off = 0;
        }
        self.cur = self.cur.saturating_sub(1);
        if w.wr.op.is_read_or_atomic() && w.started {
            self.rd_atomic_outstanding = self.rd_atomic_outstanding.saturating_sub(1);
        }
    }

    /// The send queue was flushed.
    pub fn on_flushed(&mut self) {
        self.cur = 0;
        self.cur_off = 0;
        self.rd_atomic_outstanding = 0;
    }

    /// Go-back-N: resend from `psn` (IBA 9.7.5.2.5: after a NAK or
    /// timeout the requester resends from the first unacknowledged packet).
    /// Only ever moves the cursor back; `fast_forward` moves it forward.
    pub fn handle_retry(&mut self, sq: &SendQueue, mtu: u32, psn: Psn) {
        if !psn.before(self.npsn) {
            return;
        }
        let Some(idx) = sq.iter().position(|w| w.contains(psn)) else {
            return;
        };
        let w = &sq[idx];
        let pkt_off = w.first_psn.distance_to(psn) as u64;
        self.cur = idx;
        self.cur_off = if w.wr.op.is_atomic() {
            0
        } else {
            (pkt_off * mtu as u64).min(w.len)
        };
        self.npsn = psn;
        self.noack_pkts = 0;
    }
}

/// The opcode table's SEND and WRITE rows, as a request packet picks one:
/// by transport (RC, UC, UD), by the packet's kind ([`DataKind`]) and by
/// its position in the message. Filled from `wire`'s opcode table at
/// compile time; `None` where the transport has no such opcode.
static DATA_OPCODES: [[[Option<Opcode>; 4]; DataKind::ALL.len()]; 3] = data_opcodes();

/// What a SEND or WRITE packet carries besides its payload (the column of
/// IBA Table 39 it falls in).
#[derive(Clone, Copy)]
enum DataKind {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
}

impl DataKind {
    const ALL: [DataKind; 5] = [
        DataKind::Send,
        DataKind::SendImm,
        DataKind::SendInv,
        DataKind::Write,
        DataKind::WriteImm,
    ];

    /// The operation and whether ImmDt and IETH follow the BTH.
    const fn row(self) -> (Operation, bool, bool) {
        match self {
            DataKind::Send => (Operation::Send, false, false),
            DataKind::SendImm => (Operation::Send, true, false),
            DataKind::SendInv => (Operation::Send, false, true),
            DataKind::Write => (Operation::Write, false, false),
            DataKind::WriteImm => (Operation::Write, true, false),
        }
    }
}

const fn data_opcodes() -> [[[Option<Opcode>; 4]; DataKind::ALL.len()]; 3] {
    const TRANSPORTS: [Transport; 3] = [Transport::Rc, Transport::Uc, Transport::Ud];
    const POSITIONS: [Position; 4] = [
        Position::First,
        Position::Middle,
        Position::Last,
        Position::Only,
    ];
    let mut t = [[[None; 4]; DataKind::ALL.len()]; 3];
    let mut i = 0;
    while i < TRANSPORTS.len() {
        let mut k = 0;
        while k < DataKind::ALL.len() {
            let (op, imm, inv) = DataKind::ALL[k].row();
            let mut p = 0;
            while p < POSITIONS.len() {
                t[i][k][p] = Opcode::request(TRANSPORTS[i], op, POSITIONS[p], imm, inv);
                p += 1;
            }
            k += 1;
        }
        i += 1;
    }
    t
}

/// The opcode of a SEND or WRITE packet (IBA 9.2.1, Table 39): FIRST,
/// MIDDLE, LAST or ONLY by position, `WITH_IMMEDIATE` or
/// `WITH_INVALIDATE` when the packet carries ImmDt or an IETH.
fn data_opcode(qp_type: QpType, kind: DataKind, first: bool, last: bool) -> Option<Opcode> {
    let transport = match qp_type {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    };
    let position = match (first, last) {
        (true, false) => 0,
        (false, false) => 1,
        (false, true) => 2,
        (true, true) => 3,
    };
    DATA_OPCODES[transport][kind as usize][position]
}

/// Packets a message of `len` bytes takes at `mtu` (at least one).
pub(crate) fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(mtu as u64).max(1) as u32
}

/// One request packet as the requester lays it out, before its frame is
/// built.
struct Segment {
    bth: BthRepr,
    ext: ExtHeaders,
    /// Payload bytes in the packet.
    payload_len: usize,
    /// Message offset of the payload.
    payload_off: u64,
    /// Where the cursor goes once sent, when the message continues.
    next_off: Option<u64>,
    /// The packet ends the message.
    msg_done: bool,
    /// PSNs the packet takes: one, or for a READ request one per response
    /// packet it asks for.
    consumed: u32,
}

impl Segment {
    /// A request that is a whole message in one packet without payload
    /// and always asks for its response (a READ request, an atomic).
    fn ack_req(mut bth: BthRepr, ext: ExtHeaders, consumed: u32) -> Segment {
        bth.ack_req = true;
        Segment {
            bth,
            ext,
            payload_len: 0,
            payload_off: 0,
            next_off: None,
            msg_done: true,
            consumed,
        }
    }
}

impl Requester {
    /// Builds the next request packet, if the send queue has one ready:
    /// picks the WQE ([`Self::next_wqe`]), lays out its next packet
    /// ([`Self::segment`]), writes the frame ([`Self::emit`]) and moves
    /// the cursor and PSN on ([`Self::on_sent`]).
    pub(crate) fn poll_transmit(
        &mut self,
        ctx: &mut SendCtx<'_>,
        comp: &mut Completer,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<usize> {
        let cur = self.next_wqe(ctx, comp)?;
        let seg = self.segment(ctx, cur)?;
        let n = self.emit(ctx, cur, &seg, buf)?;
        self.on_sent(ctx, comp, now, &seg);
        Some(n)
    }

    /// The index of the WQE whose next packet may go now, if any; starts
    /// the WQE on its first transmission.
    fn next_wqe(&mut self, ctx: &mut SendCtx<'_>, comp: &Completer) -> Option<usize> {
        if self.npsn.before(comp.una()) {
            // ACKs for packets of an earlier round arrived after a rewind:
            // skip what is already acknowledged
            self.fast_forward(ctx.sq, ctx.mtu, comp.una());
        }
        self.skip_acked(ctx.sq, ctx.mtu, comp.acked());
        if comp.rnr_wait() || self.cur >= ctx.sq.len() {
            return None;
        }
        // SQD (IBA 10.3.1, "Send Queue Drain"): the messages already begun
        // are finished (and retransmitted if need be), no new one starts.
        let in_progress = ctx.state == QpState::Sqd && ctx.sq[self.cur].started;
        if !ctx.can_send() && !in_progress {
            return None;
        }
        // Window of unacknowledged PSNs (rxe: RXE_MAX_UNACKED_PSNS).
        if ctx.qp_type == QpType::Rc
            && comp.una().distance_to(self.npsn) >= ctx.res.cfg.max_unacked_psns
        {
            return None;
        }
        // Local operations run when the requester reaches them, in order,
        // and send nothing: the cursor passes them.
        if ctx.sq[self.cur].wr.op.is_local() && !self.pass_local_ops(ctx) {
            return None;
        }
        let cur = self.cur;
        // A WQE that failed locally holds the queue until it completes.
        if ctx.sq[cur].local_status.is_some() {
            return None;
        }
        if !ctx.sq[cur].started && !self.start_wqe(ctx, cur)? {
            return None;
        }
        Some(cur)
    }

    /// The BTH of the next packet, with `opcode`.
    fn bth(&self, ctx: &SendCtx<'_>, opcode: Opcode) -> BthRepr {
        let mut bth = BthRepr::new(opcode, ctx.dest_qpn, self.npsn);
        bth.pkey = ctx.pkey;
        bth
    }

    /// Lays out the next packet of `sq[cur]`. `None`: the QP's transport
    /// has no opcode for it (the WQE then completes in error).
    fn segment(&mut self, ctx: &mut SendCtx<'_>, cur: usize) -> Option<Segment> {
        let w = &ctx.sq[cur];
        let seg = match w.wr.op {
            SendOp::Read { remote_addr, rkey } => {
                // A retried READ asks only for what is still missing (IBA 9.7.4.1.4).
                let off = self.cur_off;
                let reth = Reth {
                    va: remote_addr + off,
                    rkey,
                    dma_len: (w.len - off) as u32,
                };
                let ext = ExtHeaders {
                    reth: Some(reth),
                    ..ExtHeaders::default()
                };
                let bth = self.bth(ctx, Opcode::RC_RDMA_READ_REQUEST);
                Some(Segment::ack_req(bth, ext, packets(w.len - off, ctx.mtu)))
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => Some(self.atomic(ctx, Opcode::RC_CMP_SWAP, remote_addr, rkey, swap, compare)),
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => Some(self.atomic(ctx, Opcode::RC_FETCH_ADD, remote_addr, rkey, add, 0)),
            _ => self.data_segment(ctx, w),
        };
        if seg.is_none() {
            ctx.complete_front_at(self, cur, WcStatus::LocQpOpErr);
        }
        seg
    }

    /// An atomic request: one packet with an AtomicETH and no payload
    /// (IBA 9.3.4), always asking for its acknowledgement.
    fn atomic(
        &self,
        ctx: &SendCtx<'_>,
        opcode: Opcode,
        va: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
    ) -> Segment {
        let ext = ExtHeaders {
            atomic: Some(AtomicEth {
                va,
                rkey,
                swap_add,
                compare,
            }),
            ..ExtHeaders::default()
        };
        Segment::ack_req(self.bth(ctx, opcode), ext, 1)
    }

    /// The next packet of a SEND or WRITE: segmentation by path MTU, the
    /// RETH on the first packet, ImmDt or IETH on the last, a UD SEND's
    /// DETH, and AckReq.
    fn data_segment(&self, ctx: &SendCtx<'_>, w: &SendWqe) -> Option<Segment> {
        let off = self.cur_off;
        let seg = (w.len - off).min(ctx.mtu as u64);
        let first = off == 0;
        let last = off + seg == w.len;
        let mut ext = ExtHeaders::default();
        // IBA 9.3.3: the RETH (the whole message's address and length)
        // rides on the first packet of a WRITE; ImmDt and the IETH on the
        // last packet of their message (IBA Table 39).
        let reth = |remote_addr, rkey| Reth {
            va: remote_addr,
            rkey,
            dma_len: w.len as u32,
        };
        let kind = match w.wr.op {
            SendOp::Send => DataKind::Send,
            SendOp::SendWithImm { imm } => {
                ext.imm = last.then_some(imm);
                DataKind::SendImm
            }
            SendOp::SendWithInv { invalidate_rkey } => {
                ext.ieth = last.then_some(invalidate_rkey);
                DataKind::SendInv
            }
            SendOp::Write { remote_addr, rkey } => {
                ext.reth = first.then(|| reth(remote_addr, rkey));
                DataKind::Write
            }
            SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                ext.reth = first.then(|| reth(remote_addr, rkey));
                ext.imm = last.then_some(imm);
                DataKind::WriteImm
            }
            _ => unreachable!("reads and atomics are laid out by `segment`"),
        };
        // Only the last packet carries ImmDt or an IETH: the others take
        // the plain FIRST or MIDDLE opcode.
        let kind = match kind {
            DataKind::SendImm | DataKind::SendInv if !last => DataKind::Send,
            DataKind::WriteImm if !last => DataKind::Write,
            k => k,
        };
        let mut bth = self.bth(ctx, data_opcode(ctx.qp_type, kind, first, last)?);
        if ctx.qp_type == QpType::Ud {
            Self::ud_address(ctx, w, &mut bth, &mut ext);
        }
        bth.solicited = last && w.wr.flags.solicited;
        // IBA 9.7.2 / rxe: ask for an ACK at the end of a message and
        // at least every `ack_every` packets.
        bth.ack_req =
            ctx.qp_type == QpType::Rc && (last || self.noack_pkts + 1 >= ctx.res.cfg.ack_every);
        Some(Segment {
            bth,
            ext,
            payload_len: seg as usize,
            payload_off: off,
            next_off: (!last).then_some(off + seg),
            msg_done: last,
            consumed: 1,
        })
    }

    /// A UD SEND goes to the QP its WQE names, with a DETH carrying the
    /// Q_Key and the source QP (IBA 9.3.2).
    fn ud_address(ctx: &SendCtx<'_>, w: &SendWqe, bth: &mut BthRepr, ext: &mut ExtHeaders) {
        let d = w.wr.ud.expect("checked at post");
        bth.dest_qp = d.remote_qpn;
        // IBA 10.2.5 / C10-15: a Q_Key with the high bit set means "use the QP's".
        let qkey = if d.remote_qkey & 0x8000_0000 != 0 {
            ctx.qkey
        } else {
            d.remote_qkey
        };
        ext.deth = Some(Deth {
            qkey,
            src_qp: ctx.qpn,
        });
    }

    /// Writes the frame of `seg` (a packet of `sq[cur]`) into `buf`.
    /// `None`: the QP has no path yet, or the memory region went away
    /// after the WQE started (the WQE then completes in error).
    fn emit(
        &mut self,
        ctx: &mut SendCtx<'_>,
        cur: usize,
        seg: &Segment,
        buf: &mut [u8],
    ) -> Option<usize> {
        let w = &ctx.sq[cur];
        // The QP's template is used in place: a copy on the stack, read
        // back with wider loads than it was written with, stalls on store
        // forwarding.
        let ud_hdr;
        let hdr = match ctx.qp_type {
            QpType::Ud => {
                let d = w.wr.ud.expect("checked at post");
                ud_hdr = super::HeaderTemplate::new(
                    ctx.res.cfg.mac,
                    ctx.res.cfg.gid,
                    &d.ah,
                    ctx.qpn,
                    d.remote_qpn,
                );
                &ud_hdr
            }
            _ => ctx.hdr?,
        };
        // The payload goes from registered memory (or the inline copy)
        // straight into the frame.
        let pd = ctx.pd;
        let payload_off = seg.payload_off;
        let filled = ctx
            .res
            .emit(hdr, seg.bth, seg.ext, seg.payload_len, buf, |res, dst| {
                if dst.remaining() == 0 {
                    return Ok(());
                }
                match &w.inline {
                    Some(data) => {
                        let at = payload_off as usize;
                        dst.put(&data[at..at + dst.remaining()]);
                        Ok(())
                    }
                    None => res.gather(pd, &w.wr.sgl, payload_off, dst),
                }
            });
        match filled {
            Ok(n) => n,
            Err(_) => {
                ctx.complete_front_at(self, cur, WcStatus::LocProtErr);
                None
            }
        }
    }

    /// Bookkeeping once the packet is on its way: cursor, AckReq count,
    /// PSNs, and the completer's timer (RC) or the completion (UC, UD).
    fn on_sent(
        &mut self,
        ctx: &mut SendCtx<'_>,
        comp: &mut Completer,
        now: Instant,
        seg: &Segment,
    ) {
        if let Some(off) = seg.next_off {
            self.cur_off = off;
        }
        if seg.bth.ack_req {
            self.noack_pkts = 0;
        } else {
            self.noack_pkts += 1;
        }
        let psn = seg.bth.psn;
        if psn.before(self.high) {
            ctx.counters.retransmitted_pkts += 1;
        }
        self.npsn = psn.add(seg.consumed);
        if self.high.before(self.npsn) {
            self.high = self.npsn;
        }
        if seg.msg_done {
            self.cur += 1;
            self.cur_off = 0;
        }
        if ctx.qp_type == QpType::Rc {
            comp.on_request_sent(now, ctx.timeout);
        } else if seg.msg_done {
            // UC and UD complete once the last packet is on the wire.
            comp.on_unreliable_sent(self.npsn);
            ctx.complete_front(self, WcStatus::Success);
        }
    }

    /// First transmission of `sq[idx]`: checks (fence, max_rd_atomic, local
    /// keys) and fixes its PSNs. `Some(false)`: not yet; `None`: failed.
    fn start_wqe(&mut self, ctx: &mut SendCtx<'_>, idx: usize) -> Option<bool> {
        let w = &ctx.sq[idx];
        let rd_atomic = w.wr.op.is_read_or_atomic();
        // IBA 10.8.3.3: a fenced WR waits for earlier READs and atomics.
        if w.wr.flags.fence && self.rd_atomic_outstanding > 0 {
            return Some(false);
        }
        // IBA 9.7.4.1.2: at most max_rd_atomic READs/atomics outstanding.
        if rd_atomic && self.rd_atomic_outstanding >= ctx.max_rd_atomic.max(1) as u32 {
            return Some(false);
        }
        let need = if rd_atomic { access::LOCAL_WRITE } else { 0 };
        let keys_ok = w.inline.is_some() || ctx.res.check_sgl(ctx.pd, &w.wr.sgl, need).is_ok();
        // IBA 9.8 (unreliable service): a UD message is one SEND ONLY packet,
        // so it may not exceed the port's active MTU (`Qp::mtu` of a UD QP):
        // a local length error, as rxe completes it (IB_WC_LOC_LEN_ERR).
        let too_long = ctx.qp_type == QpType::Ud && w.len > ctx.mtu as u64;
        if !keys_ok || too_long {
            let status = if too_long {
                WcStatus::LocLenErr
            } else {
                WcStatus::LocProtErr
            };
            ctx.complete_front_at(self, idx, status);
            return None;
        }
        let npkts = match w.wr.op {
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ => packets(w.len, ctx.mtu),
        };
        let psn = self.npsn;
        let w = &mut ctx.sq[idx];
        w.started = true;
        w.first_psn = psn;
        w.npkts = npkts;
        if rd_atomic {
            self.rd_atomic_outstanding += 1;
        }
        Some(true)
    }

    /// Runs and passes the local operations at the cursor; false when
    /// nothing can be sent now (one waits for a fence or failed, or the
    /// queue ends). Out of line: the data path seldom meets one.
    #[cold]
    #[inline(never)]
    fn pass_local_ops(&mut self, ctx: &mut SendCtx<'_>) -> bool {
        while self.cur < ctx.sq.len() && ctx.sq[self.cur].wr.op.is_local() {
            let cur = self.cur;
            let w = &ctx.sq[cur];
            if w.local_status.is_some_and(|st| st != WcStatus::Success) {
                // failed: holds the queue until it completes in error
                return false;
            }
            if !w.started && self.run_local(ctx, cur) != Some(true) {
                return false;
            }
            if ctx
                .sq
                .get(cur)
                .is_some_and(|w| w.started && w.wr.op.is_local())
            {
                self.cur += 1;
                self.cur_off = 0;
            }
        }
        self.cur < ctx.sq.len()
    }

    /// Executes the local operation `sq[idx]` (BIND_MW, LOCAL_INV).
    /// `Some(false)`: not yet (a fence); `None`: it failed (the QP fails
    /// once the WQEs before it complete, as rxe's requester does).
    /// Completes it now if it is the oldest WQE, else once those before it
    /// have (IBA 10.8.5).
    fn run_local(&mut self, ctx: &mut SendCtx<'_>, idx: usize) -> Option<bool> {
        let w = &ctx.sq[idx];
        // IBA 10.8.3.3: a fenced WR waits for earlier READs and atomics.
        if w.wr.flags.fence && self.rd_atomic_outstanding > 0 {
            return Some(false);
        }
        let status = match w.wr.op {
            // IBA 10.6.7.2: bind (checks in MrTable::bind_window); a failed
            // bind completes with IBV_WC_MW_BIND_ERR.
            SendOp::BindMw(b) => match ctx.res.mrs.bind_window(ctx.qpn, ctx.pd, &b) {
                Ok(_) => WcStatus::Success,
                Err(_) => WcStatus::MwBindErr,
            },
            // IBA 10.6.7.3 (Local Invalidate): a key that cannot be
            // invalidated is a local QP operation error, as rxe.
            SendOp::LocalInv { rkey } => match ctx.res.mrs.invalidate(rkey, ctx.pd, None) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            _ => unreachable!("only local operations"),
        };
        let psn = self.npsn;
        let w = &mut ctx.sq[idx];
        w.started = true;
        w.first_psn = psn;
        w.npkts = 0;
        if status != WcStatus::Success {
            ctx.complete_front_at(self, idx, status);
            return None;
        }
        if idx == 0 {
            ctx.complete_front(self, WcStatus::Success);
        } else {
            ctx.sq[idx].local_status = Some(WcStatus::Success);
        }
        Some(true)
    }

    /// Moves the cursor to `una` after ACKs overtook a go-back-N replay.
    pub(crate) fn fast_forward(&mut self, sq: &SendQueue, mtu: u32, una: Psn) {
        match sq.iter().position(|w| w.contains(una)) {
            Some(idx) => {
                let w = &sq[idx];
                let pkt_off = w.first_psn.distance_to(una) as u64;
                self.cur = idx;
                self.cur_off = if w.wr.op.is_atomic() {
                    0
                } else {
                    (pkt_off * mtu as u64).min(w.len)
                };
            }
            None => {
                self.cur = sq.iter().position(|w| !w.started).unwrap_or(sq.len());
                self.cur_off = 0;
            }
        }
        self.npsn = una;
        self.noack_pkts = 0;
    }

    /// During a replay, skips SEND and WRITE packets the responder has
    /// acknowledged already; READs and atomics behind `acked` whose answers
    /// never came are asked again.
    fn skip_acked(&mut self, sq: &SendQueue, mtu: u32, acked: Psn) {
        while self.cur < sq.len() && self.npsn.before(acked) {
            let w = &sq[self.cur];
            if w.started && w.wr.op.is_local() {
                self.cur += 1;
                self.cur_off = 0;
                continue;
            }
            if !w.started || w.wr.op.is_read_or_atomic() {
                break;
            }
            let end = w.last_psn().next();
            if acked.before(end) {
                let pkts = w.first_psn.distance_to(acked) as u64;
                self.cur_off = (pkts * mtu as u64).min(w.len);
                self.npsn = acked;
                break;
            }
            self.cur += 1;
            self.cur_off = 0;
            self.npsn = end;
        }
    }
}
