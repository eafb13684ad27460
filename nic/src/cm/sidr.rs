//! Service ID Resolution (IBA 12.11): a UD QP's peer asks which QP and
//! Q_Key serve a service ID (SIDR_REQ) and gets them (SIDR_REP). The
//! active side's request lives as a [`Conn`] in `SidrReqSent` and is
//! retried on the CM's timer like a REQ; the passive side's in
//! `SidrReqRcvd` until the owner answers, then (accepted) in
//! `SidrRepSent` for as long as the request may be repeated.

use super::*;
use wire::mad::{self, sidr_status, CmSidrRep, CmSidrReq, IpCmPrivateData};

/// How long an accepted SIDR_REQ's answer is kept for a repeat of the
/// request (its SIDR_REP lost): as long as a requester with librdmacm's
/// timers (response timeout 20, 15 retries) repeats it.
pub(crate) fn sidr_answer_kept() -> Duration {
    iba_timeout(20) * 16
}

impl Cm {
    /// Starts the active side of a Service ID Resolution: sends a SIDR_REQ
    /// built from `p` (IBA 12.11.2) and waits for the SIDR_REP, repeating
    /// the request after each response timeout, `max_retries` times; then
    /// [`CmEvent::Unreachable`]. The answer is [`CmEvent::SidrReply`]. The
    /// request ID is the returned ID's number.
    pub fn sidr_request(&mut self, now: Instant, p: &SidrParams) -> CmId {
        let id = self.alloc_id();
        let tid = self.new_tid(id);
        let mut private_data = [0u8; CmSidrReq::PRIVATE_DATA_LEN];
        copy_prefix(&mut private_data, &p.private_data);
        let msg = CmMessage::SidrReq(CmSidrReq {
            request_id: id.0,
            pkey: p.pkey,
            reserved0: 0,
            service_id: p.service_id,
            private_data,
        });
        let wait = iba_timeout(p.response_timeout & 0x1F);
        let conn = Conn::new(State::SidrReqSent, true, p.remote, tid, p.service_id).sent(
            msg,
            now,
            wait,
            p.max_retries & 0x0F,
        );
        self.conns.insert(id.0, conn);
        self.send(p.remote, tid, msg);
        id
    }

    /// Passive side: answers the SIDR_REQ of `id` (reported by
    /// [`CmEvent::SidrRequest`]) with a SIDR_REP of status 0 naming
    /// `qpn` and `qkey` (IBA 12.11.3). A repeat of the request is answered
    /// with the same SIDR_REP for a while, then the ID is freed.
    pub fn sidr_accept(
        &mut self,
        now: Instant,
        id: CmId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let msg = self.sidr_rep(id, sidr_status::VALID, qpn, qkey, private_data)?;
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        c.state = State::SidrRepSent;
        c.local_qpn = qpn & 0x00FF_FFFF;
        c.last_reply = Some(msg);
        c.deadline = Some(now + sidr_answer_kept());
        Ok(())
    }

    /// Passive side: refuses the SIDR_REQ of `id` with a SIDR_REP of
    /// `status` (IBA 12.11.3: 1 no such service, 2 rejected, 3 no QP, ...;
    /// 0 is made 2); the ID is freed.
    pub fn sidr_reject(
        &mut self,
        id: CmId,
        status: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let status = if status == sidr_status::VALID {
            sidr_status::REJECTED
        } else {
            status
        };
        self.sidr_rep(id, status, 0, 0, private_data)?;
        self.conns.remove(&id.0);
        Ok(())
    }

    /// Sends the SIDR_REP for the SIDR_REQ `id` waits with.
    fn sidr_rep(
        &mut self,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<CmMessage, CmError> {
        let c = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        if c.state != State::SidrReqRcvd {
            return Err(CmError::WrongState);
        }
        let mut pd = [0u8; CmSidrRep::PRIVATE_DATA_LEN];
        copy_prefix(&mut pd, private_data);
        let msg = CmMessage::SidrRep(CmSidrRep {
            request_id: c.remote_comm_id,
            status,
            additional_info_length: 0,
            reserved0: 0,
            qpn: qpn & 0x00FF_FFFF,
            reserved1: 0,
            // IBA 12.11.3: the service ID of the request answered
            service_id: c.service_id,
            qkey,
            additional_info: [0; 72],
            private_data: pd,
        });
        // a response carries its request's TID (IBA 13.4, MAD transactions)
        let (peer, tid) = (c.peer, c.tid);
        self.send(peer, tid, msg);
        Ok(msg)
    }

    pub(crate) fn on_sidr_req(&mut self, from: CmAddr, tid: u64, r: &CmSidrReq) {
        // a repeated request (same sender, same request ID): answered
        // again once accepted, dropped while the owner decides
        let dup = self
            .conns
            .iter()
            .find(|(_, c)| {
                !c.active && c.state.is_sidr() && c.peer == from && c.remote_comm_id == r.request_id
            })
            .map(|(id, c)| (*id, c.state, c.last_reply, c.tid));
        if let Some((_, state, last, ctid)) = dup {
            match (state, last) {
                (State::SidrRepSent, Some(rep)) => self.send(from, ctid, rep),
                _ => self.drop_mad(CmDrop::DuplicateReq),
            }
            return;
        }
        // IBA 12.11.3: a service ID nobody serves here is answered with
        // status 1 (service ID not supported)
        if !self.listening.contains(&r.service_id) {
            let rep = CmSidrRep {
                request_id: r.request_id,
                status: sidr_status::SERVICE_ID_NOT_SUPPORTED,
                additional_info_length: 0,
                reserved0: 0,
                qpn: 0,
                reserved1: 0,
                service_id: r.service_id,
                qkey: 0,
                additional_info: [0; 72],
                private_data: [0; CmSidrRep::PRIVATE_DATA_LEN],
            };
            self.send(from, tid, CmMessage::SidrRep(rep));
            return;
        }
        let id = self.alloc_id();
        let conn = Conn {
            remote_comm_id: r.request_id,
            ..Conn::new(State::SidrReqRcvd, false, from, tid, r.service_id)
        };
        self.conns.insert(id.0, conn);
        let ip = mad::ip_cm_service(r.service_id)
            .and_then(|_| IpCmPrivateData::parse(&r.private_data).ok());
        self.events.push_back(CmEvent::SidrRequest {
            id,
            from,
            req: Box::new(*r),
            ip,
        });
    }

    pub(crate) fn on_sidr_rep(&mut self, from: CmAddr, r: &CmSidrRep) {
        // IBA 12.11.3: the request ID names our SIDR_REQ, sent to `from`
        let known = self
            .conns
            .get(&r.request_id)
            .filter(|c| c.active && c.state == State::SidrReqSent && c.peer == from)
            .map(|c| c.service_id);
        let Some(service_id) = known else {
            return self.drop_mad(CmDrop::UnknownCommId);
        };
        if service_id != r.service_id {
            return self.drop_mad(CmDrop::WrongServiceId);
        }
        self.conns.remove(&r.request_id);
        self.events.push_back(CmEvent::SidrReply {
            id: CmId(r.request_id),
            rep: Box::new(*r),
        });
    }
}
