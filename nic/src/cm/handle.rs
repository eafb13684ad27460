//! Incoming MADs and timers.

use super::*;
use wire::mad::{
    self, IpCmPrivateData, CM_CLASS_VERSION, MAD_BASE_VERSION, METHOD_SEND, MGMT_CLASS_CM,
};

impl Cm {
    /// Parses the 256 bytes of a MAD from QP1 and handles it; bytes that
    /// are no MAD are a counted drop.
    pub fn handle_bytes(&mut self, now: Instant, from: CmAddr, b: &[u8]) {
        match Mad::parse(b) {
            Ok(m) => self.handle_mad(now, from, &m),
            Err(_) => self.drop_mad(CmDrop::Malformed),
        }
    }

    /// One MAD from the peer CM at `from`.
    pub fn handle_mad(&mut self, now: Instant, from: CmAddr, mad: &Mad) {
        let h = &mad.header;
        // IBA 13.4.4 / 16.7 (MAD header): the CM class is 0x07, base
        // version 1, CM class version 2, and CM messages are Send()s
        if h.mgmt_class != MGMT_CLASS_CM {
            return self.drop_mad(CmDrop::NotCmClass);
        }
        if h.base_version != MAD_BASE_VERSION {
            return self.drop_mad(CmDrop::BadBaseVersion);
        }
        if h.class_version != CM_CLASS_VERSION {
            return self.drop_mad(CmDrop::BadClassVersion);
        }
        if h.method != METHOD_SEND {
            return self.drop_mad(CmDrop::BadMethod);
        }
        let Some(msg) = mad.cm() else {
            return self.drop_mad(CmDrop::NotCmClass);
        };
        match msg {
            CmMessage::Req(r) => self.on_req(now, from, h.transaction_id, r),
            CmMessage::Mra(m) => self.on_mra(now, from, m),
            CmMessage::Rej(r) => self.on_rej(now, from, r),
            CmMessage::Rep(r) => self.on_rep(now, from, r),
            CmMessage::Rtu(i) => self.on_rtu(from, i),
            CmMessage::Dreq(d) => self.on_dreq(now, from, h.transaction_id, d),
            CmMessage::Drep(i) => self.on_drep(now, from, i),
            CmMessage::SidrReq(r) => self.on_sidr_req(from, h.transaction_id, r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, r),
            CmMessage::Other { .. } => self.drop_mad(CmDrop::UnsupportedAttribute),
        }
    }

    /// The connection a non-REQ message names: its remote communication ID
    /// is one of ours, it comes from that connection's peer and (once the
    /// peer's ID is known) carries that ID (IBA 12.9, the CM state machine: messages with
    /// unknown IDs are discarded).
    fn lookup(&mut self, from: CmAddr, ours: u32, theirs: u32) -> Option<u32> {
        match self.conns.get(&ours) {
            Some(c) if c.peer == from && (c.remote_comm_id == 0 || c.remote_comm_id == theirs) => {
                Some(ours)
            }
            _ => {
                self.drop_mad(CmDrop::UnknownCommId);
                None
            }
        }
    }

    fn on_req(&mut self, now: Instant, from: CmAddr, tid: u64, r: &CmReq) {
        // IBA 12.9 (the CM state machine), duplicates: a REQ whose (sender, comm ID) we know
        let dup = self
            .conns
            .iter()
            .find(|(_, c)| {
                !c.active
                    && !c.state.is_sidr()
                    && c.peer == from
                    && c.remote_comm_id == r.local_comm_id
            })
            .map(|(id, c)| (*id, c.state, c.last_reply, c.tid));
        if let Some((id, state, last, ctid)) = dup {
            match (state, last) {
                // IBA 12.9 (REP sent): a REQ repeated while the REP is outstanding
                // is answered with the same REP
                // (and the REP's retransmission timer restarts: it just
                // went out)
                (State::RepSent, Some(rep)) => {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.deadline = Some(now + c.response_wait);
                    }
                    self.send(from, ctid, rep)
                }
                // IBA 12.6.6: while the owner decides, a repeated REQ gets
                // the MRA sent for it again
                (State::ReqRcvd, Some(mra)) => self.send(from, ctid, mra),
                _ => self.drop_mad(CmDrop::DuplicateReq),
            }
            return;
        }
        // IBA 12.9 and Table 104 reason 10, stale connection: a new comm ID for a QP that is
        // still connected to us is rejected with reason 10
        let stale = self.conns.values().any(|c| {
            c.peer == from
                && c.remote_qpn == r.local_qpn
                && matches!(c.state, State::Established | State::RepSent)
        });
        if stale {
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                REJECTED_NONE,
                RejectReason::STALE_CONNECTION,
                &[],
            );
            return;
        }
        // IBA 12.6.5 / Table 104: a service ID nobody listens on is
        // rejected with reason 8 (invalid service ID)
        if !self.listening.contains(&r.service_id) {
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                REJECTED_REQ,
                RejectReason::INVALID_SERVICE_ID,
                &[],
            );
            return;
        }
        // IBA 12.6.5: transport service type 0 (RC) only
        if r.transport_service_type != 0 {
            self.drop_mad(CmDrop::UnsupportedTransport);
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                REJECTED_REQ,
                RejectReason::INVALID_TRANSPORT_TYPE,
                &[],
            );
            return;
        }
        let id = self.alloc_id();
        let conn = Conn {
            remote_comm_id: r.local_comm_id,
            remote_qpn: r.local_qpn,
            max_cm_retries: r.max_cm_retries,
            // IBA 12.6.5: the REP's sender waits the REQ's local CM
            // response timeout (the active side's own turnaround) for RTU
            response_wait: iba_timeout(r.local_cm_response_timeout),
            req: Some(Box::new(*r)),
            ..Conn::new(State::ReqRcvd, false, from, tid, r.service_id)
        };
        self.conns.insert(id.0, conn);
        let ip = mad::ip_cm_service(r.service_id)
            .and_then(|_| IpCmPrivateData::parse(&r.private_data).ok());
        self.events.push_back(CmEvent::ConnectRequest {
            id,
            from,
            req: Box::new(*r),
            ip,
        });
    }

    fn on_mra(&mut self, now: Instant, from: CmAddr, m: &CmMra) {
        let Some(id) = self.lookup(from, m.remote_comm_id, m.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("looked up");
        let ok = matches!(
            (c.state, m.message_mraed),
            (State::ReqSent, MRAED_REQ) | (State::RepSent, MRAED_REP)
        );
        if !ok {
            return self.drop_mad(CmDrop::OutOfState);
        }
        // IBA 12.6.6: the MRA's service timeout (4.096 µs × 2^n) replaces
        // the wait for the answer; the retransmission budget is kept
        c.deadline = Some(now + c.response_wait + iba_timeout(m.service_timeout));
        if c.remote_comm_id == 0 {
            c.remote_comm_id = m.local_comm_id;
        }
    }

    fn on_rej(&mut self, now: Instant, from: CmAddr, r: &CmRej) {
        // IBA 12.6.7: a REJ of a REQ whose sender never learnt our ID
        // (remote comm ID 0) names the connection by the REQ's comm ID
        let by_req = (r.remote_comm_id == 0)
            .then(|| {
                self.conns
                    .iter()
                    .find(|(_, c)| {
                        matches!(c.state, State::ReqRcvd | State::RepSent)
                            && c.peer == from
                            && c.remote_comm_id == r.local_comm_id
                    })
                    .map(|(id, _)| *id)
            })
            .flatten();
        let Some(id) = by_req.or_else(|| self.lookup(from, r.remote_comm_id, r.local_comm_id))
        else {
            return;
        };
        match self.conns[&id].state {
            // IBA 12.9: REJ ends a connection being set up
            State::ReqSent | State::RepSent | State::ReqRcvd => {
                self.conns.remove(&id);
            }
            // the active side is established once it sent the RTU; a peer
            // that never saw it (its REP retries ran out) rejects then, and
            // the connection ends through TimeWait (as Linux's CM does)
            State::Established => self.enter_timewait(now, id),
            _ => return self.drop_mad(CmDrop::OutOfState),
        }
        self.events.push_back(CmEvent::Rejected {
            id: CmId(id),
            reason: RejectReason(r.reason),
            private_data: Box::new(r.private_data),
        });
    }

    fn on_rep(&mut self, _now: Instant, from: CmAddr, r: &CmRep) {
        let Some(id) = self.lookup(from, r.remote_comm_id, r.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("looked up");
        if !c.active {
            return self.drop_mad(CmDrop::OutOfState);
        }
        match c.state {
            State::ReqSent => {
                c.remote_comm_id = r.local_comm_id;
                c.remote_qpn = r.local_qpn;
                c.state = State::Established;
                c.outstanding = None;
                c.deadline = None;
                let (peer, tid) = (c.peer, c.tid);
                let rtu = self.send_ids(peer, tid, CmMessage::Rtu, id, r.local_comm_id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.last_reply = Some(rtu);
                }
                self.events.push_back(CmEvent::Established {
                    id: CmId(id),
                    rep: Some(Box::new(*r)),
                });
            }
            // IBA 12.9 (Established): a repeated REP (our RTU was lost) gets the RTU
            // again
            State::Established if c.remote_comm_id == r.local_comm_id => {
                if let Some(rtu) = c.last_reply {
                    let (peer, tid) = (c.peer, c.tid);
                    self.send(peer, tid, rtu);
                }
            }
            _ => self.drop_mad(CmDrop::OutOfState),
        }
    }

    fn on_rtu(&mut self, from: CmAddr, i: &CmIds) {
        let Some(id) = self.lookup(from, i.remote_comm_id, i.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("looked up");
        if c.active || c.state != State::RepSent {
            return self.drop_mad(CmDrop::OutOfState);
        }
        c.state = State::Established;
        c.outstanding = None;
        c.deadline = None;
        self.events.push_back(CmEvent::Established {
            id: CmId(id),
            rep: None,
        });
    }

    fn on_dreq(&mut self, now: Instant, from: CmAddr, dreq_tid: u64, d: &CmDreq) {
        let Some(id) = self.lookup(from, d.remote_comm_id, d.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("looked up");
        // IBA 12.6.10: the DREQ names our QP
        if d.remote_qpn != c.local_qpn {
            return self.drop_mad(CmDrop::UnknownCommId);
        }
        // the DREP answers the DREQ's transaction (a response
        // carries its request's TID, IBA 13.4 MAD transactions), as rxe's DREPs do
        let (peer, remote) = (c.peer, c.remote_comm_id);
        match c.state {
            // IBA 12.9 (REP sent): a DREQ in RepSent stands for the RTU too
            State::Established | State::RepSent | State::DreqSent => {
                self.enter_timewait(now, id);
                self.send_ids(peer, dreq_tid, CmMessage::Drep, id, remote);
                self.events
                    .push_back(CmEvent::DisconnectRequest { id: CmId(id) });
                self.events
                    .push_back(CmEvent::Disconnected { id: CmId(id) });
            }
            // IBA 12.9 (TimeWait): a DREQ repeated in TimeWait (our DREP was
            // lost) is answered again
            State::TimeWait => {
                self.send_ids(peer, dreq_tid, CmMessage::Drep, id, remote);
            }
            _ => self.drop_mad(CmDrop::OutOfState),
        }
    }

    fn on_drep(&mut self, now: Instant, from: CmAddr, i: &CmIds) {
        let Some(id) = self.lookup(from, i.remote_comm_id, i.local_comm_id) else {
            return;
        };
        match self.conns[&id].state {
            State::DreqSent => {
                self.enter_timewait(now, id);
                self.events
                    .push_back(CmEvent::Disconnected { id: CmId(id) });
            }
            _ => self.drop_mad(CmDrop::OutOfState),
        }
    }

    /// IBA 12.9 TimeWait: the ID stays as long as the peer may still
    /// retransmit its DREQ (every response wait, `max_cm_retries` times),
    /// so late messages of the connection are recognised and answered;
    /// then it is freed.
    fn enter_timewait(&mut self, now: Instant, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::TimeWait;
            c.outstanding = None;
            let span = c.response_wait * (u32::from(c.max_cm_retries) + 1);
            c.deadline = Some(now + span);
        }
    }

    /// Fires every timer due at `now`: retransmissions (IBA 12.6.5 CM response timeouts and Max CM Retries: REQ,
    /// REP, DREQ and SIDR_REQ are resent after each response wait, at most
    /// `max_cm_retries` times) and the end of TimeWait.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.state == State::TimeWait {
                self.conns.remove(&id);
                self.events
                    .push_back(CmEvent::TimeWaitExit { id: CmId(id) });
                continue;
            }
            if c.state == State::SidrRepSent {
                // the answered SIDR_REQ can no longer be repeated
                self.conns.remove(&id);
                continue;
            }
            let Some(msg) = c.outstanding else {
                c.deadline = None;
                continue;
            };
            if c.sends <= c.max_cm_retries {
                c.sends += 1;
                c.deadline = Some(now + c.response_wait);
                let (peer, tid) = (c.peer, c.tid);
                self.send(peer, tid, msg);
                continue;
            }
            // retries exhausted
            let (peer, tid, remote, state) = (c.peer, c.tid, c.remote_comm_id, c.state);
            match state {
                // IBA 12.11: an unanswered SIDR_REQ ends the resolution;
                // no message tells the peer
                State::SidrReqSent => {
                    self.conns.remove(&id);
                    self.events.push_back(CmEvent::Unreachable { id: CmId(id) });
                }
                State::ReqSent | State::RepSent => {
                    // IBA 12.9: the attempt ends with a REJ (timeout),
                    // which rejects no particular message (MessageRejected
                    // 2, as Linux sends it); its ARI is our CA GUID
                    // (IBA 12.6.7, Table 104, reason 4)
                    self.conns.remove(&id);
                    self.send_rej(
                        peer,
                        tid,
                        id,
                        remote,
                        REJECTED_NONE,
                        RejectReason::TIMEOUT,
                        &[],
                    );
                    self.events.push_back(CmEvent::Unreachable { id: CmId(id) });
                }
                _ => {
                    // IBA 12.9 (DREQ sent): unanswered after Max CM Retries, the
                    // connection is down anyway, through TimeWait
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::DreqTimeout { id: CmId(id) });
                }
            }
        }
    }
}
