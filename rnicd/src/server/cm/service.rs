//! One device's RDMA CM: a `nic::cm::Cm` driven from the engine
//! ([`CmService::pump`]: MADs in from QP 1, its timers, MADs out to QP 1,
//! its events turned into RDMA CM events on the clients' channels), and
//! the CM IDs of the clients with their addresses and QP parameters.

use ipc::proto::cm::{CmEventKind, CmEventMsg, CmIdNo, CmQpType, ConnEventParam, PortSpace};
use ipc::shm::SeqPacket;
use nic::cm::{Cm, CmAddr, CmEvent, CmId};
use nic::device::Rnic;
use nic::verbs::AhAttr;
use nic::Instant;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use wire::mad::{attr, CmMessage, IpCmPrivateData, MadBody, MadHeader, MAD_LEN};
use wire::{EthernetAddress, Gid};

/// Events a channel holds for a client that does not read them; more are
/// dropped (counted as `cm_event_overflow`).
const CHANNEL_BACKLOG: usize = 4096;
/// Connection requests a listener holds unanswered when its `listen`
/// gave no backlog (or more): Linux's ucma `max_backlog`.
pub(crate) const MAX_BACKLOG: u32 = 1024;
/// ETIMEDOUT: the status of UNREACHABLE (librdmacm reports -errno).
pub(crate) const ETIMEDOUT: i32 = 110;

/// A client's event channel: the daemon's end of a socket pair.
pub(crate) struct Chan {
    pub(crate) owner: u64,
    pub(crate) sock: SeqPacket,
    /// Events the socket had no room for: (the ID each is reported on,
    /// the message).
    pub(crate) backlog: VecDeque<(CmIdNo, Vec<u8>)>,
}

/// One CM ID.
pub(crate) struct Id {
    pub(crate) owner: u64,
    pub(crate) chan: u64,
    pub(crate) user_ctx: u64,
    pub(crate) ps: PortSpace,
    pub(crate) qp_type: CmQpType,
    pub(crate) src: Option<SocketAddr>,
    pub(crate) dst: Option<SocketAddr>,
    pub(crate) dmac: Option<EthernetAddress>,
    pub(crate) route: bool,
    /// The service ID it listens on.
    pub(crate) listening: Option<u64>,
    /// As a listener: how many of its connection requests may wait
    /// unanswered (`rdma_listen`'s backlog).
    pub(crate) backlog: u32,
    /// As a connection request: the listener it came to, until `accept`
    /// or `reject` answers it.
    pub(crate) pending_on: Option<CmIdNo>,
    /// Its connection in the CM.
    pub(crate) conn: Option<CmId>,
    pub(crate) local_qpn: u32,
    /// Where this side's receive queue starts: the Starting PSN of its
    /// REQ or REP (IBA 12.6.5 / 12.6.8). Linux's ib_cm reads the field so:
    /// the active side's RQ starts at the REQ's, the passive side's at the
    /// REP's, and each sends from the other's; a kernel responder NAKs
    /// anything else with a PSN sequence error. Picked at creation (a
    /// ConnParam PSN replaces it).
    pub(crate) rq_psn: u32,
    pub(crate) remote_qpn: u32,
    /// Where this side's send queue starts: the peer's Starting PSN (a
    /// random one until its REQ or REP gives it; UD IDs keep that).
    pub(crate) sq_psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    /// Events reported on it.
    pub(crate) events: u32,
    pub(crate) disconnected: bool,
    /// As the active side: the RTU waits until the client's QP can
    /// receive (it asks for the RTS attributes, or `rdma_establish`).
    pub(crate) rtu_held: bool,
    /// The RTU the CM made meanwhile (its destination and bytes).
    pub(crate) held_rtu: Option<(CmAddr, [u8; MAD_LEN])>,
    /// The client called `rdma_establish` (once per ID, as librdmacm).
    pub(crate) establish_called: bool,
}

impl Id {
    pub(crate) fn new(owner: u64, chan: u64, user_ctx: u64, ps: PortSpace, qp: CmQpType) -> Id {
        Id {
            owner,
            chan,
            user_ctx,
            ps,
            qp_type: qp,
            src: None,
            dst: None,
            dmac: None,
            route: false,
            listening: None,
            backlog: MAX_BACKLOG,
            pending_on: None,
            conn: None,
            local_qpn: 0,
            rq_psn: rand::random::<u32>() & 0x00FF_FFFF,
            remote_qpn: 0,
            sq_psn: rand::random::<u32>() & 0x00FF_FFFF,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            events: 0,
            disconnected: false,
            rtu_held: false,
            held_rtu: None,
            establish_called: false,
        }
    }
}

/// The device's CM and its clients' IDs.
pub(crate) struct CmService {
    pub(crate) cm: Cm,
    /// The engine's latest `now` (the device's clock).
    pub(crate) now: Instant,
    pub(crate) dev: String,
    pub(crate) gid: Gid,
    /// The port's active MTU in bytes.
    pub(crate) mtu: u32,
    /// What its REQs ask for.
    pub(crate) timers: crate::server::CmTimers,
    pub(crate) ids: BTreeMap<CmIdNo, Id>,
    pub(crate) next_id: CmIdNo,
    /// The CM's connection → the ID (kept after the ID is destroyed,
    /// until the connection ends, so its late events are ignored).
    pub(crate) by_conn: HashMap<u32, CmIdNo>,
    /// Service ID → the listening ID.
    pub(crate) listeners: HashMap<u64, CmIdNo>,
    pub(crate) chans: HashMap<u64, Chan>,
    /// GID → Ethernet address of the peers (resolved, or learnt from
    /// their MADs).
    pub(crate) neigh: HashMap<[u8; 16], EthernetAddress>,
    pub(crate) counters: BTreeMap<&'static str, u64>,
    /// (attribute, transaction) of the REQs, REPs, DREQs and SIDR_REQs
    /// sent: a repeat is a retry.
    sent: HashSet<(u16, u64)>,
    /// RTUs released by their IDs, sent on the next pump.
    released: Vec<(CmAddr, [u8; MAD_LEN])>,
}

/// The counter suffix of a CM attribute.
fn kind(attribute: u16) -> &'static str {
    match attribute {
        attr::REQ => "req",
        attr::MRA => "mra",
        attr::REJ => "rej",
        attr::REP => "rep",
        attr::RTU => "rtu",
        attr::DREQ => "dreq",
        attr::DREP => "drep",
        attr::SIDR_REQ => "sidr_req",
        attr::SIDR_REP => "sidr_rep",
        _ => "other",
    }
}

fn tx_name(attribute: u16) -> &'static str {
    match kind(attribute) {
        "req" => "cm_tx_req",
        "mra" => "cm_tx_mra",
        "rej" => "cm_tx_rej",
        "rep" => "cm_tx_rep",
        "rtu" => "cm_tx_rtu",
        "dreq" => "cm_tx_dreq",
        "drep" => "cm_tx_drep",
        "sidr_req" => "cm_tx_sidr_req",
        "sidr_rep" => "cm_tx_sidr_rep",
        _ => "cm_tx_other",
    }
}

fn rx_name(attribute: u16) -> &'static str {
    match kind(attribute) {
        "req" => "cm_rx_req",
        "mra" => "cm_rx_mra",
        "rej" => "cm_rx_rej",
        "rep" => "cm_rx_rep",
        "rtu" => "cm_rx_rtu",
        "dreq" => "cm_rx_dreq",
        "drep" => "cm_rx_drep",
        "sidr_req" => "cm_rx_sidr_req",
        "sidr_rep" => "cm_rx_sidr_rep",
        _ => "cm_rx_other",
    }
}

impl CmService {
    pub(crate) fn new(
        dev: String,
        gid: Gid,
        mac: EthernetAddress,
        mtu: u32,
        timers: crate::server::CmTimers,
    ) -> CmService {
        let seed: u64 = rand::random();
        CmService {
            cm: Cm::new(CmAddr { gid: gid.0 }, node_guid(mac), seed),
            now: Instant::ZERO,
            dev,
            gid,
            mtu,
            timers,
            ids: BTreeMap::new(),
            next_id: 0,
            by_conn: HashMap::new(),
            listeners: HashMap::new(),
            chans: HashMap::new(),
            neigh: HashMap::new(),
            counters: BTreeMap::new(),
            sent: HashSet::new(),
            released: Vec::new(),
        }
    }

    pub(crate) fn count(&mut self, name: &'static str) {
        *self.counters.entry(name).or_default() += 1;
    }

    pub(crate) fn alloc_id(&mut self) -> CmIdNo {
        loop {
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.ids.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }

    /// The CM's next timer (the engine's clock): a REQ, REP or DREQ to
    /// send again, or a peer that did not answer.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    /// Runs on the engine thread: MADs in, timers, events, MADs out.
    pub(crate) fn pump(&mut self, r: &mut Rnic) {
        self.now = self.now.max(r.last_now());
        let now = self.now;
        while let Some(m) = r.poll_gsi() {
            if let Ok(h) = MadHeader::parse(&m.mad[..]) {
                self.count(rx_name(h.attribute_id));
            }
            // an answer goes back where the MAD came from
            self.neigh.insert(m.src_gid.0, m.src_mac);
            let from = CmAddr { gid: m.src_gid.0 };
            self.cm.handle_bytes(now, from, &m.mad[..]);
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
        }
        while let Some(ev) = self.cm.poll_event() {
            self.on_event(ev);
        }
        for (to, buf) in std::mem::take(&mut self.released) {
            self.send(r, to, attr::RTU, &buf);
        }
        let mut buf = [0u8; MAD_LEN];
        while let Some((to, mad)) = self.cm.poll_transmit(now) {
            let a = mad.header.attribute_id;
            if mad.emit(&mut buf).is_err() {
                continue;
            }
            if matches!(a, attr::REQ | attr::REP | attr::DREQ | attr::SIDR_REQ)
                && !self.sent.insert((a, mad.header.transaction_id))
            {
                self.count("cm_retries");
            }
            if self.sent.len() > 65536 {
                self.sent.clear();
            }
            // IBA 12.6.9: the active side sends the RTU once its QP is
            // ready; until its client says so, the RTU (a repeat for a
            // duplicate REP too) waits
            if let MadBody::Cm(CmMessage::Rtu(ids)) = &mad.body {
                let held = self
                    .by_conn
                    .get(&ids.local_comm_id)
                    .and_then(|n| self.ids.get_mut(n))
                    .filter(|i| i.rtu_held);
                if let Some(i) = held {
                    i.held_rtu = Some((to, buf));
                    continue;
                }
            }
            self.send(r, to, a, &buf);
        }
        self.flush();
    }

    /// Sends one MAD to `to` on QP 1.
    fn send(&mut self, r: &mut Rnic, to: CmAddr, attribute: u16, buf: &[u8; MAD_LEN]) {
        let Some(&mac) = self.neigh.get(&to.gid) else {
            return self.count("cm_tx_no_neighbour");
        };
        match r.send_gsi(&AhAttr::new(Gid(to.gid), mac), buf) {
            Ok(()) => self.count(tx_name(attribute)),
            Err(_) => self.count("cm_tx_queue_full"),
        }
    }

    /// The active side's QP of `no` is ready: its RTU goes (now, if the
    /// REP came) and is not held again. False if `no` held none.
    pub(crate) fn release_rtu(&mut self, no: CmIdNo) -> bool {
        let Some(i) = self.ids.get_mut(&no).filter(|i| i.rtu_held) else {
            return false;
        };
        i.rtu_held = false;
        if let Some(rtu) = i.held_rtu.take() {
            self.released.push(rtu);
        }
        true
    }

    /// Sends what the channels hold, as far as their sockets take it.
    pub(crate) fn flush(&mut self) {
        for c in self.chans.values_mut() {
            while let Some((_, m)) = c.backlog.front() {
                if c.sock.send(m, &[]).is_err() {
                    break;
                }
                c.backlog.pop_front();
            }
        }
    }

    /// Queues `e` on its ID's channel.
    pub(crate) fn report(&mut self, id: CmIdNo, e: impl FnOnce(&Id) -> CmEventMsg) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        let msg = e(i);
        i.events += 1;
        let Some(c) = self.chans.get_mut(&i.chan) else {
            return self.count("cm_event_no_channel");
        };
        if c.backlog.len() >= CHANNEL_BACKLOG {
            return self.count("cm_event_overflow");
        }
        c.backlog
            .push_back((msg.listen_id.unwrap_or(msg.id), ipc::proto::encode(&msg)));
        self.flush();
    }

    /// `rdma_migrate_id`: ID `id`'s later events go to channel `to`, and
    /// so do those its old channel's socket had no room for (the kernel's
    /// ucma moves an ID's queued events along; those in the old socket
    /// the client library moves).
    pub(crate) fn migrate(&mut self, id: CmIdNo, to: u64) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        let from = std::mem::replace(&mut i.chan, to);
        if from == to {
            return;
        }
        let moved = match self.chans.get_mut(&from) {
            Some(c) => {
                let (mine, rest): (VecDeque<_>, VecDeque<_>) =
                    c.backlog.drain(..).partition(|(on, _)| *on == id);
                c.backlog = rest;
                mine
            }
            None => VecDeque::new(),
        };
        if let Some(c) = self.chans.get_mut(&to) {
            c.backlog.extend(moved);
        }
        self.flush();
    }

    /// A plain event on `id`.
    pub(crate) fn report_kind(&mut self, id: CmIdNo, kind: CmEventKind, status: i32) {
        self.report(id, |i| event(id, i, kind, status));
    }

    /// A new ID on listener `l`'s channel for request `conn` from `from`
    /// (`local` and `remote` from its RDMA IP CM header), waiting for its
    /// owner's answer; None when the listener is gone or its backlog is
    /// full (a request flood, or an application that does not answer):
    /// the request is then forgotten without an answer, so that a genuine
    /// peer's retry may find room (as Linux's CM does on -ENOMEM).
    pub(super) fn pending_id(
        &mut self,
        l: CmIdNo,
        conn: CmId,
        from: &CmAddr,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Option<Id> {
        let lid = self.ids.get(&l)?;
        let waiting = self
            .ids
            .values()
            .filter(|i| i.pending_on == Some(l))
            .count();
        if waiting >= lid.backlog as usize {
            self.count("cm_req_backlog_full");
            self.cm.destroy(conn);
            return None;
        }
        let mut n = Id::new(lid.owner, lid.chan, lid.user_ctx, lid.ps, lid.qp_type);
        n.src = Some(local);
        n.dst = Some(remote);
        n.dmac = self.neigh.get(&from.gid).copied();
        n.route = true;
        n.conn = Some(conn);
        n.pending_on = Some(l);
        Some(n)
    }

    fn on_event(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest { id, from, req, ip } => {
                let listener = self.listeners.get(&req.service_id).copied();
                let addrs = ip.as_ref().and_then(IpCmPrivateData::addrs);
                let (Some(l), Some((src_ip, dst_ip)), Some(ip)) = (listener, addrs, ip) else {
                    // no listener (any more), or no RDMA IP CM header
                    self.count("cm_req_refused");
                    let _ = self
                        .cm
                        .reject(id, nic::cm::RejectReason::INVALID_SERVICE_ID, &[]);
                    return;
                };
                let local = SocketAddr::new(dst_ip, req.service_id as u16);
                let remote = SocketAddr::new(src_ip, ip.src_port);
                let Some(mut n) = self.pending_id(l, id, &from, local, remote) else {
                    return;
                };
                n.remote_qpn = req.local_qpn;
                n.sq_psn = req.starting_psn;
                n.responder_resources = req.initiator_depth;
                n.initiator_depth = req.responder_resources;
                n.retry_count = req.retry_count;
                n.rnr_retry_count = req.rnr_retry_count;
                let no = self.alloc_id();
                self.ids.insert(no, n);
                self.by_conn.insert(id.0, no);
                let conn = ConnEventParam {
                    private_data: req.private_data[IpCmPrivateData::LEN..].to_vec(),
                    responder_resources: req.responder_resources,
                    initiator_depth: req.initiator_depth,
                    flow_control: req.end_to_end_flow_control,
                    retry_count: req.retry_count,
                    rnr_retry_count: req.rnr_retry_count,
                    srq: req.srq,
                    qp_num: req.local_qpn,
                };
                self.report(no, |i| CmEventMsg {
                    listen_id: Some(l),
                    conn: Some(conn),
                    addrs: i.src.zip(i.dst),
                    ..event(no, i, CmEventKind::CONNECT_REQUEST, 0)
                });
            }
            CmEvent::Established { id, rep } => {
                let Some(no) = self.by_conn.get(&id.0).copied() else {
                    return;
                };
                let conn = match rep {
                    Some(rep) => {
                        if let Some(i) = self.ids.get_mut(&no) {
                            i.remote_qpn = rep.local_qpn;
                            i.sq_psn = rep.starting_psn;
                            // IBA 12.6.8: what the REP offers bounds ours
                            i.initiator_depth = i.initiator_depth.min(rep.responder_resources);
                            i.responder_resources = i.responder_resources.min(rep.initiator_depth);
                        }
                        ConnEventParam {
                            private_data: rep.private_data.to_vec(),
                            responder_resources: rep.responder_resources,
                            initiator_depth: rep.initiator_depth,
                            flow_control: rep.end_to_end_flow_control,
                            retry_count: 0,
                            rnr_retry_count: rep.rnr_retry_count,
                            srq: rep.srq,
                            qp_num: rep.local_qpn,
                        }
                    }
                    None => ConnEventParam {
                        qp_num: self.ids.get(&no).map_or(0, |i| i.remote_qpn),
                        ..Default::default()
                    },
                };
                self.report(no, |i| CmEventMsg {
                    conn: Some(conn),
                    ..event(no, i, CmEventKind::ESTABLISHED, 0)
                });
            }
            CmEvent::Rejected {
                id,
                reason,
                private_data,
            } => {
                let Some(no) = self.end_conn(id) else { return };
                let conn = ConnEventParam {
                    private_data: private_data.to_vec(),
                    ..Default::default()
                };
                // librdmacm reports the REJ reason as the status
                self.report(no, |i| CmEventMsg {
                    conn: Some(conn),
                    ..event(no, i, CmEventKind::REJECTED, i32::from(reason.0))
                });
            }
            CmEvent::Unreachable { id } => {
                self.count("cm_timeouts");
                let Some(no) = self.end_conn(id) else { return };
                self.report_kind(no, CmEventKind::UNREACHABLE, -ETIMEDOUT);
            }
            CmEvent::DisconnectRequest { id } | CmEvent::Disconnected { id } => {
                self.disconnected(id, 0);
            }
            CmEvent::DreqTimeout { id } => {
                self.count("cm_timeouts");
                // rdma_cm reports an unanswered DREQ as DISCONNECTED with
                // -ETIMEDOUT
                self.disconnected(id, -ETIMEDOUT);
            }
            CmEvent::TimeWaitExit { id } => {
                if let Some(no) = self.end_conn(id) {
                    self.report_kind(no, CmEventKind::TIMEWAIT_EXIT, 0);
                }
            }
            CmEvent::SidrRequest { id, from, req, ip } => self.on_sidr_request(id, from, &req, ip),
            CmEvent::SidrReply { id, rep } => self.on_sidr_reply(id, &rep),
        }
    }

    /// DISCONNECTED (once) on the ID of connection `id`.
    fn disconnected(&mut self, id: CmId, status: i32) {
        let Some(no) = self.by_conn.get(&id.0).copied() else {
            return;
        };
        let Some(i) = self.ids.get_mut(&no) else {
            return;
        };
        if !std::mem::replace(&mut i.disconnected, true) {
            self.report_kind(no, CmEventKind::DISCONNECTED, status);
        }
    }

    /// The connection `id` is over: the ID it belonged to, if it lives.
    pub(super) fn end_conn(&mut self, id: CmId) -> Option<CmIdNo> {
        let no = self.by_conn.remove(&id.0)?;
        let i = self.ids.get_mut(&no)?;
        i.conn = None;
        i.pending_on = None;
        Some(no)
    }

    /// Forgets `no`: a listener stops listening; a connection being made
    /// is rejected, an established one disconnected (DREQ), the rest
    /// dropped. Returns the events it reported.
    pub(crate) fn destroy(&mut self, no: CmIdNo) -> u32 {
        let Some(i) = self.ids.remove(&no) else {
            return 0;
        };
        if let Some(sid) = i.listening {
            self.cm.unlisten(sid);
            self.listeners.remove(&sid);
        }
        if let Some(c) = i.conn {
            let now = self.now;
            let done = self.cm.disconnect(now, c).is_ok()
                || self
                    .cm
                    .reject(c, nic::cm::RejectReason::CONSUMER_REJECT, &[])
                    .is_ok();
            if !done {
                self.cm.destroy(c);
                self.by_conn.remove(&c.0);
            }
        }
        i.events
    }

    /// Tears down what client connection `owner` held: its IDs and its
    /// channels.
    pub(crate) fn cleanup(&mut self, owner: u64) {
        let ids: Vec<CmIdNo> = self
            .ids
            .iter()
            .filter(|(_, i)| i.owner == owner)
            .map(|(n, _)| *n)
            .collect();
        for n in ids {
            self.destroy(n);
        }
        self.chans.retain(|_, c| c.owner != owner);
    }

    /// Counters for the device's statistics.
    pub(crate) fn stats(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = self
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        for (d, n) in self.cm.drops() {
            m.insert(d.name().to_string(), *n);
        }
        m.insert("cm_ids".into(), self.ids.len() as u64);
        m.insert("cm_listeners".into(), self.listeners.len() as u64);
        m
    }
}

/// The CA GUID of a device on an Ethernet port: the modified EUI-64 of its
/// MAC (RFC 4291 Appendix A), as rxe derives its node GUID and puts it in
/// its REQs and REPs.
pub(crate) fn node_guid(mac: EthernetAddress) -> u64 {
    let m = mac.0;
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]])
}

/// An event of `kind` on `no` with nothing else.
pub(super) fn event(no: CmIdNo, i: &Id, kind: CmEventKind, status: i32) -> CmEventMsg {
    CmEventMsg {
        id: no,
        user_ctx: i.user_ctx,
        kind,
        status,
        listen_id: None,
        conn: None,
        ud: None,
        addrs: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_guid_is_the_macs_eui64_as_in_the_rxe_capture() {
        // rdma_cm.pcap: MAC 00:50:56:a7:7d:03, CA GUID 0x025056fffea77d03
        let mac = EthernetAddress([0x00, 0x50, 0x56, 0xa7, 0x7d, 0x03]);
        assert_eq!(node_guid(mac), 0x0250_56ff_fea7_7d03);
    }
}
