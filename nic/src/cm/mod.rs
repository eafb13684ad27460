//! The IBA Communication Manager (IBA Vol 1 chapter 12) as a sans-I/O state
//! machine: MADs in ([`Cm::handle_mad`]), MADs out ([`Cm::poll_transmit`]),
//! events for the owner ([`Cm::poll_event`]), timers ([`Cm::poll_timeout`],
//! [`Cm::handle_timeout`]) and the application's calls ([`Cm::listen`],
//! [`Cm::connect`], [`Cm::accept`], [`Cm::reject`], [`Cm::disconnect`],
//! [`Cm::destroy`]; Service ID Resolution for UD QPs: [`Cm::sidr_request`],
//! [`Cm::sidr_accept`], [`Cm::sidr_reject`]). `now` is always the caller's; nothing here reads a
//! clock, opens a socket or touches a QP: the QP state changes the CM drives
//! are [`CmEvent`]s the owner acts on.

mod handle;
mod sidr;
mod types;

pub use types::*;

use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use wire::mad::{
    CmDreq, CmIds, CmMessage, CmMra, CmPath, CmRej, CmRep, CmReq, Mad, MadBody, MadHeader,
};

/// The IBA timer encoding of the CM response timeouts (REQ, IBA 12.6.5),
/// the service timeout (MRA, IBA 12.6.6) and packet life times:
/// 4.096 µs × 2^`exp`. Exponents above 31 are clamped
/// to 31 (the 5-bit fields cannot carry more).
pub fn iba_timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << u32::from(exp.min(31)))
}

/// Where a connection is (IBA 12.9, the CM state diagrams, reduced to
/// the states this CM distinguishes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    /// Active: REQ sent, waiting for REP (or MRA/REJ).
    ReqSent,
    /// Passive: REQ received and reported, waiting for `accept`/`reject`.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU (or any packet on the QP).
    RepSent,
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Disconnected, waiting out stray packets before the ID is freed.
    TimeWait,
    /// Active: SIDR_REQ sent, waiting for SIDR_REP (IBA 12.11).
    SidrReqSent,
    /// Passive: SIDR_REQ received and reported, waiting for the owner.
    SidrReqRcvd,
    /// Passive: SIDR_REP (status 0) sent; kept to answer a repeated
    /// SIDR_REQ with it until the deadline, then freed.
    SidrRepSent,
}

impl State {
    /// A Service ID Resolution, not a connection.
    pub(crate) fn is_sidr(self) -> bool {
        matches!(
            self,
            State::SidrReqSent | State::SidrReqRcvd | State::SidrRepSent
        )
    }
}

/// One connection ID's state.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub(crate) state: State,
    pub(crate) active: bool,
    pub(crate) peer: CmAddr,
    pub(crate) remote_comm_id: u32,
    pub(crate) remote_qpn: u32,
    pub(crate) local_qpn: u32,
    pub(crate) tid: u64,
    /// The message the timer retransmits (REQ, REP or DREQ), if any.
    pub(crate) outstanding: Option<CmMessage>,
    /// The last REP sent (answer to a duplicate REQ, IBA 12.9) or the
    /// RTU (answer to a duplicate REP in Established).
    pub(crate) last_reply: Option<CmMessage>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) sends: u8,
    pub(crate) max_cm_retries: u8,
    /// How long one wait for the peer's answer lasts.
    pub(crate) response_wait: Duration,
    /// What the passive side read from the REQ (for `accept`).
    pub(crate) req: Option<Box<CmReq>>,
    /// The service ID the REQ or SIDR_REQ names.
    pub(crate) service_id: u64,
}

impl Conn {
    /// A connection in `state` with `peer`, for `service_id`, whose MADs
    /// carry the transaction ID `tid`; nothing learnt from the peer yet,
    /// nothing outstanding, no timer.
    pub(crate) fn new(state: State, active: bool, peer: CmAddr, tid: u64, service_id: u64) -> Conn {
        Conn {
            state,
            active,
            peer,
            remote_comm_id: 0,
            remote_qpn: 0,
            local_qpn: 0,
            tid,
            outstanding: None,
            last_reply: None,
            deadline: None,
            sends: 0,
            max_cm_retries: 0,
            response_wait: Duration::ZERO,
            req: None,
            service_id,
        }
    }

    /// An active side's connection that has just sent `msg` and waits
    /// `wait` for the answer, resending it at most `max_cm_retries` times.
    pub(crate) fn sent(
        mut self,
        msg: CmMessage,
        now: Instant,
        wait: Duration,
        max_cm_retries: u8,
    ) -> Conn {
        self.outstanding = Some(msg);
        self.deadline = Some(now + wait);
        self.sends = 1;
        self.max_cm_retries = max_cm_retries;
        self.response_wait = wait;
        self
    }
}

/// One CM (per port / GID).
pub struct Cm {
    pub(crate) local: CmAddr,
    pub(crate) ca_guid: u64,
    pub(crate) next_id: u32,
    pub(crate) tid_counter: u32,
    pub(crate) listening: BTreeSet<u64>,
    pub(crate) conns: BTreeMap<u32, Conn>,
    pub(crate) tx: VecDeque<(CmAddr, Mad)>,
    pub(crate) events: VecDeque<CmEvent>,
    pub(crate) drops: BTreeMap<CmDrop, u64>,
}

impl Cm {
    /// A CM for the port at `local`, with `ca_guid` in its REQs and REPs.
    /// `seed` picks the first communication ID (IDs are then sequential,
    /// never 0), so two CMs built with different seeds do not collide.
    pub fn new(local: CmAddr, ca_guid: u64, seed: u64) -> Cm {
        let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        Cm {
            local,
            ca_guid,
            next_id: (mixed as u32).max(1),
            tid_counter: 0,
            listening: BTreeSet::new(),
            conns: BTreeMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            drops: BTreeMap::new(),
        }
    }

    /// This CM's address.
    pub fn local(&self) -> CmAddr {
        self.local
    }

    /// Accept REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) {
        self.listening.insert(service_id);
    }

    /// Stop accepting REQs for `service_id`.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listening.remove(&service_id);
    }

    /// Starts the active side: sends a REQ built from `p` (IBA 12.6.5) and
    /// waits for REP, MRA or REJ.
    pub fn connect(&mut self, now: Instant, p: &ConnectParams) -> CmId {
        let id = self.alloc_id();
        let tid = self.new_tid(id);
        let mut private_data = [0u8; CmReq::PRIVATE_DATA_LEN];
        copy_prefix(&mut private_data, &p.private_data);
        let path = CmPath {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: self.local.gid,
            remote_gid: p.remote.gid,
            flow_label: p.flow_label & 0x000F_FFFF,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            // no static rate on RoCE, as Linux's RoCE REQs carry it
            packet_rate: 0,
            // IBA 12.6.5: SubnetLocal says the path needs no router; a
            // hop limit above 1 says it may (Linux's RoCE rule)
            subnet_local: p.hop_limit <= 1,
            local_ack_timeout: p.local_ack_timeout,
            ..CmPath::default()
        };
        let req = CmReq {
            local_comm_id: id.0,
            reserved0: 0,
            service_id: p.service_id,
            local_ca_guid: self.ca_guid,
            reserved1: 0,
            local_qkey: 0,
            local_qpn: p.local_qpn & 0x00FF_FFFF,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.cm_response_timeout,
            // IBA 12.6.5: transport service type 0 is RC
            transport_service_type: 0,
            end_to_end_flow_control: p.end_to_end_flow_control,
            starting_psn: p.starting_psn & 0x00FF_FFFF,
            local_cm_response_timeout: p.cm_response_timeout,
            retry_count: p.retry_count,
            pkey: 0xFFFF,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries & 0x0F,
            srq: p.srq,
            extended_transport_type: 0,
            primary: path,
            alternate: CmPath::default(),
            private_data,
        };
        let msg = CmMessage::Req(req);
        // IBA 12.6.5: the active side waits the remote CM response timeout
        // (plus the path's round trip, negligible on one L2 segment) for REP
        let wait = iba_timeout(p.cm_response_timeout);
        let conn = Conn {
            local_qpn: req.local_qpn,
            ..Conn::new(State::ReqSent, true, p.remote, tid, p.service_id)
        }
        .sent(msg, now, wait, req.max_cm_retries);
        self.conns.insert(id.0, conn);
        self.send(p.remote, tid, msg);
        id
    }

    /// Passive side: answers the REQ of `id` (reported by
    /// [`CmEvent::ConnectRequest`]) with a REP (IBA 12.6.8) and waits for
    /// RTU. Fails when `id` is not waiting for an answer.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        let ca_guid = self.ca_guid;
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        if c.state != State::ReqRcvd {
            return Err(CmError::WrongState);
        }
        let req = c.req.as_deref().ok_or(CmError::WrongState)?;
        let mut private_data = [0u8; CmRep::PRIVATE_DATA_LEN];
        copy_prefix(&mut private_data, &p.private_data);
        let rep = CmRep {
            local_comm_id: id.0,
            remote_comm_id: req.local_comm_id,
            local_qkey: 0,
            local_qpn: p.local_qpn & 0x00FF_FFFF,
            reserved0: 0,
            local_eecn: 0,
            reserved1: 0,
            starting_psn: p.starting_psn & 0x00FF_FFFF,
            reserved2: 0,
            // IBA 12.6.8: the responder resources the REP offers
            // may not exceed the initiator depth of the REQ, and the
            // initiator depth may not exceed the REQ's responder resources
            responder_resources: p.responder_resources.min(req.initiator_depth),
            initiator_depth: p.initiator_depth.min(req.responder_resources),
            target_ack_delay: p.target_ack_delay & 0x1F,
            // IBA 12.6.8: 0 "failover accepted"; no alternate path here
            failover_accepted: 0,
            end_to_end_flow_control: p.end_to_end_flow_control,
            rnr_retry_count: p.rnr_retry_count & 0x07,
            srq: p.srq,
            reserved3: 0,
            local_ca_guid: ca_guid,
            private_data,
        };
        let msg = CmMessage::Rep(rep);
        c.state = State::RepSent;
        c.local_qpn = rep.local_qpn;
        c.outstanding = Some(msg);
        c.last_reply = Some(msg);
        c.sends = 1;
        c.deadline = Some(now + c.response_wait);
        let (peer, tid) = (c.peer, c.tid);
        self.send(peer, tid, msg);
        Ok(())
    }

    /// Rejects the REQ (passive, before RTU) or the REP (active, when the
    /// owner refuses it) of `id` with `reason` (IBA 12.6.7); the ID is
    /// freed. A SIDR_REQ waiting for the owner is answered as
    /// [`Cm::sidr_reject`] does, with the status [`RejectReason::sidr_status`]
    /// gives.
    pub fn reject(
        &mut self,
        id: CmId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        if c.state == State::SidrReqRcvd {
            return self.sidr_reject(id, reason.sidr_status(), private_data);
        }
        let message_rejected = match c.state {
            State::ReqRcvd | State::RepSent => REJECTED_REQ,
            State::ReqSent => REJECTED_REP,
            _ => return Err(CmError::WrongState),
        };
        let (peer, tid, remote) = (c.peer, c.tid, c.remote_comm_id);
        self.send_rej(
            peer,
            tid,
            id.0,
            remote,
            message_rejected,
            reason,
            private_data,
        );
        self.conns.remove(&id.0);
        Ok(())
    }

    /// Passive side: tells the peer (MRA, IBA 12.6.6) that the answer to
    /// its REQ takes longer: it waits `service_timeout` (4.096 µs × 2^n)
    /// more. A repeated REQ is answered with the same MRA.
    pub fn mra(&mut self, id: CmId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        if c.state != State::ReqRcvd {
            return Err(CmError::WrongState);
        }
        let msg = CmMessage::Mra(CmMra {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            message_mraed: MRAED_REQ,
            reserved0: 0,
            service_timeout: service_timeout & 0x1F,
            reserved1: 0,
            private_data: [0; CmMra::PRIVATE_DATA_LEN],
        });
        c.last_reply = Some(msg);
        let (peer, tid) = (c.peer, c.tid);
        self.send(peer, tid, msg);
        Ok(())
    }

    /// Passive side: the QP saw a packet from the peer before the RTU
    /// (IBA 12.9: any packet on the QP counts as the RTU).
    pub fn established(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        if c.state != State::RepSent {
            return Err(CmError::WrongState);
        }
        c.state = State::Established;
        c.outstanding = None;
        c.deadline = None;
        self.events
            .push_back(CmEvent::Established { id, rep: None });
        Ok(())
    }

    /// Sends a DREQ (IBA 12.6.10) on the established connection `id`; the
    /// DREQ is retransmitted until DREP or `max_cm_retries`.
    pub fn disconnect(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        match c.state {
            State::Established => {}
            State::DreqSent | State::TimeWait => return Ok(()),
            _ => return Err(CmError::WrongState),
        }
        let msg = CmMessage::Dreq(CmDreq {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            reserved0: 0,
            private_data: [0; CmDreq::PRIVATE_DATA_LEN],
        });
        c.state = State::DreqSent;
        c.outstanding = Some(msg);
        c.sends = 1;
        c.deadline = Some(now + c.response_wait);
        let (peer, tid) = (c.peer, c.tid);
        self.send(peer, tid, msg);
        Ok(())
    }

    /// Forgets `id` at once, whatever its state (no message is sent).
    pub fn destroy(&mut self, id: CmId) {
        self.conns.remove(&id.0);
    }

    /// The next MAD to send and where to.
    pub fn poll_transmit(&mut self, _now: Instant) -> Option<(CmAddr, Mad)> {
        self.tx.pop_front()
    }

    /// The next event for the owner.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`Cm::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.deadline).min()
    }

    /// Counted drops of incoming MADs, by reason.
    pub fn drops(&self) -> &BTreeMap<CmDrop, u64> {
        &self.drops
    }

    /// The number of connection IDs this CM holds.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True when the CM holds no connection ID.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Whether `id` is established (for the owner and tests).
    pub fn is_established(&self, id: CmId) -> bool {
        self.conns
            .get(&id.0)
            .is_some_and(|c| c.state == State::Established)
    }

    fn alloc_id(&mut self) -> CmId {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return CmId(id);
            }
        }
    }

    fn new_tid(&mut self, id: CmId) -> u64 {
        self.tid_counter = self.tid_counter.wrapping_add(1);
        u64::from(id.0) << 32 | u64::from(self.tid_counter)
    }

    pub(crate) fn send(&mut self, to: CmAddr, tid: u64, msg: CmMessage) {
        let mad = Mad {
            header: MadHeader::cm(msg.attribute_id(), tid),
            body: MadBody::Cm(msg),
        };
        self.tx.push_back((to, mad));
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_rej(
        &mut self,
        to: CmAddr,
        tid: u64,
        local: u32,
        remote: u32,
        message_rejected: u8,
        reason: RejectReason,
        private_data: &[u8],
    ) {
        let mut pd = [0u8; CmRej::PRIVATE_DATA_LEN];
        copy_prefix(&mut pd, private_data);
        let mut rej = CmRej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected,
            reserved0: 0,
            reject_info_length: 0,
            reserved1: 0,
            reason: reason.0,
            ari: [0; 72],
            private_data: pd,
        };
        if reason == RejectReason::TIMEOUT {
            // IBA 12.6.7, Table 104: a timeout REJ carries the sender's CA
            // GUID as its additional rejection information
            rej.ari[..8].copy_from_slice(&self.ca_guid.to_be_bytes());
            rej.reject_info_length = 8;
        }
        self.send(to, tid, CmMessage::Rej(rej));
    }

    pub(crate) fn send_ids(
        &mut self,
        to: CmAddr,
        tid: u64,
        msg: fn(CmIds) -> CmMessage,
        local: u32,
        remote: u32,
    ) -> CmMessage {
        let m = msg(CmIds {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; CmIds::PRIVATE_DATA_LEN],
        });
        self.send(to, tid, m);
        m
    }

    pub(crate) fn drop_mad(&mut self, why: CmDrop) {
        *self.drops.entry(why).or_default() += 1;
    }
}

/// IBA 12.6.6 MessageMRAed: the REQ / the REP.
pub(crate) const MRAED_REQ: u8 = 0;
pub(crate) const MRAED_REP: u8 = 1;
/// IBA 12.6.7 MessageRejected: the REQ.
pub(crate) const REJECTED_REQ: u8 = 0;
/// IBA 12.6.7 MessageRejected: the REP.
pub(crate) const REJECTED_REP: u8 = 1;
/// IBA 12.6.7 MessageRejected: no message (stale connection).
pub(crate) const REJECTED_NONE: u8 = 2;

fn copy_prefix(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
}
