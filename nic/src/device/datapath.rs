//! Frames and time in, frames and deadlines out: the device's data path,
//! dispatching each packet to its QP's responder or completer after the
//! checks every QP shares (ICRC, QPN, opcode for the QP type, P_Key,
//! connected address).

use super::{DropReason, Rnic, MAX_FRAME_LEN};
use crate::time::Instant;
use crate::transport::Qp;
use crate::verbs::{AsyncEvent, QpState};
use wire::{EthernetAddress, QpType, RoceRepr};

impl Rnic {
    /// Takes one received frame. Frames that are not RoCEv2 for a QP of
    /// ours are counted by reason and dropped.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.res.now = self.res.now.max(now);
        if let Ok(eth) = wire::ethernet::EthernetFrame::new_checked(frame) {
            if eth.ethertype() == wire::ethernet::ethertype::MAC_CONTROL {
                // 802.1Qbb / 802.3x: pause the named priorities.
                match wire::MacControlRepr::parse(frame) {
                    Ok(m) => {
                        let paused = self.res.pfc.paused_mask(now);
                        self.res.pfc.handle(now, &m.control);
                        // 802.1Qbb: a pause time of 0 resumes the
                        // priority at once, before its pause would end:
                        // every QP held back by it may send again
                        if paused & !self.res.pfc.paused_mask(now) != 0 {
                            for idx in 0..self.qps.len() {
                                self.schedule(idx);
                            }
                        }
                    }
                    Err(e) => self.drop_frame(DropReason::Wire(e.kind())),
                }
                return;
            }
        }
        // headers checked, ICRC verified (IBTA RoCEv2 annex A17.3.3: a
        // packet whose ICRC does not match is dropped), then the repr
        let repr = match RoceRepr::parse(frame) {
            Ok(r) => r,
            Err(e) => return self.drop_frame(DropReason::Wire(e.kind())),
        };
        let Some(info) = repr.opcode_info() else {
            // parse refuses unknown opcodes; this cannot happen
            return self.drop_frame(DropReason::Wire(wire::Reason::UnknownOpcode));
        };
        // IBA 13.5.1: QP 1 is the GSI, served by the device's owner
        if repr.bth.dest_qp == wire::mad::GSI_QPN {
            let src_mac = repr.eth.src;
            return self.handle_gsi(&repr, src_mac);
        }
        let Some(idx) = self.qp_index(repr.bth.dest_qp) else {
            return self.drop_frame(DropReason::UnknownQp);
        };
        let qp = self.qps[idx].as_mut().expect("index is live");
        if !info.valid_for(qp.qp_type()) {
            qp.counters.rx_qp_state_drop += 1;
            return self.drop_frame(DropReason::OpcodeNotForQpType);
        }
        // C9-43: a packet whose BTH P_Key does not match the QP's is dropped.
        if !wire::bth::pkey_matches(repr.bth.pkey, qp.pkey) {
            return self.drop_frame(DropReason::PkeyMismatch);
        }
        // IBA 9.6 (connected address; rxe: check_addr): an RC or UC QP takes
        // packets only from its remote address to its local one. Without a
        // path (before RTR) the QP takes no packet anyway.
        if let (QpType::Rc | QpType::Uc, Some(hdr)) = (qp.qp_type(), &qp.hdr) {
            if !hdr.is_from_peer(&repr.ip) {
                return self.drop_frame(DropReason::AddressMismatch);
            }
        }
        qp.counters.rcvd_pkts += 1;
        // IBTA 11.6.3.1 "Communication Established": a packet arrived on a
        // connected QP still in RTR (the application may move it to RTS).
        if qp.state == QpState::Rtr && !qp.comm_est && qp.qp_type() != QpType::Ud {
            qp.comm_est = true;
            self.res.raise(AsyncEvent::CommEst(qp.qpn));
        }
        let peer = match (qp.qp_type(), repr.ext.deth) {
            (QpType::Ud, Some(d)) => d.src_qp,
            _ => qp.dest_qpn,
        };
        qp.cc.on_receive(now, &repr, peer, &self.res.cfg.cc.np);
        if info.is_request() {
            qp.handle_request(&mut self.res, now, &repr);
        } else if info.is_response() {
            qp.handle_response(&mut self.res, now, &repr);
        } else {
            // RoCEv2 A17.9.3: a CNP makes the reaction point cut the QP's rate.
            qp.cc.rp.handle_cnp(now);
        }
        qp.sync_cc_counters();
        qp.check_drained(&mut self.res);
        self.schedule(idx);
        // an ACK stops or re-arms the ACK timer, an RNR NAK arms the RNR
        // timer, a CNP arms DCQCN's
        self.rearm(idx);
    }

    /// Whether `frame` (one [`Self::poll_transmit`] wrote) is addressed to
    /// this device itself: a QP talking to another QP of the same device
    /// (one GID). The driver hands such a frame straight back to
    /// [`Self::handle_frame`] instead of the wire — the device's internal
    /// loopback, as Linux rxe loops a packet whose destination address is
    /// its own and a ConnectX NIC's switch does — so both QPs see exactly
    /// the packets, ACKs and retries a remote peer would.
    pub fn is_to_self(&self, frame: &[u8]) -> bool {
        wire::ethernet::EthernetFrame::new_checked(frame).is_ok_and(|e| e.dst() == self.res.cfg.mac)
    }

    /// How many bytes a QP may send in a row in its turn of the transmit
    /// round robin before the next QP's turn: 0 (the default) serves one
    /// frame per turn. A port that sends a flow's consecutive frames as one
    /// unit asks for that unit ([`crate::io::Port::train_bytes`]); a QP
    /// that runs out of frames ends its turn early. QPs are served fairly
    /// by bytes either way (a deficit round robin whose quantum is this).
    pub fn set_tx_quantum(&mut self, bytes: usize) {
        self.tx_quantum = bytes;
    }

    /// Writes the next frame to send into `buf` (at least `MAX_FRAME_LEN`
    /// bytes) and returns its length, or `None` when nothing is ready.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < MAX_FRAME_LEN {
            return None;
        }
        self.res.now = self.res.now.max(now);
        // 802.1Qbb: a PFC frame owed to the peer goes first. MAC control
        // frames are never held back by a pause (802.3 Annex 31B).
        if let Some(tx) = &mut self.res.pfc_tx {
            if let Some(control) = tx.poll_transmit(now) {
                let repr = wire::MacControlRepr {
                    src: self.res.cfg.mac,
                    dst: EthernetAddress::MAC_CONTROL,
                    control,
                };
                if let Ok(n) = repr.emit(buf) {
                    return Some(n);
                }
            }
        }
        // management datagrams (QP 1) before the QPs' traffic
        if let Some(n) = self.poll_gsi_transmit(buf) {
            return Some(n);
        }
        while let Some(idx) = self.tx_queue.pop_front() {
            let Some(qp) = self.qps[idx as usize].as_mut() else {
                self.tx_spent = 0;
                continue;
            };
            let sent = qp.poll_transmit(&mut self.res, now, buf);
            qp.check_drained(&mut self.res);
            // a request sent arms the ACK timer; pacing may arm its own
            self.deadlines.set(idx as usize, qp.next_deadline());
            match sent {
                Some(n) => {
                    qp.counters.sent_pkts += 1;
                    // more may follow: the QP keeps its turn until it has
                    // sent its quantum, then goes to the back
                    self.tx_spent += n;
                    if self.tx_spent < self.tx_quantum {
                        self.tx_queue.push_front(idx);
                    } else {
                        self.tx_spent = 0;
                        self.tx_queue.push_back(idx);
                    }
                    return Some(n);
                }
                None => {
                    qp.scheduled = false;
                    self.tx_spent = 0;
                }
            }
        }
        None
    }

    /// The earliest deadline of any timer: the QPs' (the top of the
    /// deadline index, O(1)) and PFC's.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let pfc_tx = self.res.pfc_tx.as_ref().and_then(|t| t.poll_timeout());
        Instant::earliest(
            self.deadlines.first(),
            Instant::earliest(self.res.pfc.poll_timeout(), pfc_tx),
        )
    }

    /// What [`Self::poll_timeout`] returns, found by visiting every QP
    /// (O(#QPs)): the reference the deadline index is tested against.
    #[doc(hidden)]
    pub fn poll_timeout_scan(&self) -> Option<Instant> {
        let qps = self.qps.iter().flatten().filter_map(|q| q.next_deadline());
        let pfc_tx = self.res.pfc_tx.as_ref().and_then(|t| t.poll_timeout());
        qps.chain(self.res.pfc.poll_timeout()).chain(pfc_tx).min()
    }

    /// Whether the deadline index holds exactly every QP's next deadline
    /// (tests check this after every step).
    #[doc(hidden)]
    pub fn deadline_index_is_exact(&self) -> bool {
        self.deadlines.check(
            self.qps
                .iter()
                .map(|q| q.as_ref().and_then(Qp::next_deadline)),
        )
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.res.now = self.res.now.max(now);
        if let Some(tx) = &mut self.res.pfc_tx {
            // a PFC refresh falls due: `poll_transmit` sends it
            tx.handle_timeout(now);
        }
        if self.res.pfc.poll_timeout().is_some_and(|t| t <= now) {
            // a pause ended: every QP may have frames waiting
            self.res.pfc.handle_timeout(now);
            // O(#QPs), but only when a pause ends (rare next to idle turns)
            for idx in 0..self.qps.len() {
                self.schedule(idx);
            }
        }
        if !self.deadlines.any_due(now) {
            return;
        }
        // the QPs due, each fired once and in slot order, as a scan of
        // every QP would; a QP's timers only change its own deadline
        let mut due = std::mem::take(&mut self.due);
        self.deadlines.take_due(now, &mut due);
        for &idx in &due {
            let idx = idx as usize;
            let Some(qp) = self.qps[idx].as_mut() else {
                continue;
            };
            // local ACK timeout (IBA 9.7.6.1.3 / C9-140), RNR timer
            // (IBA 9.7.5.2.8) or DCQCN
            qp.handle_timeout(&mut self.res, now);
            qp.check_drained(&mut self.res);
            self.schedule(idx);
            self.rearm(idx);
        }
        self.due = due;
    }
}
