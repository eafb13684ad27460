//! The RDMA CM requests (`proto::cm::CmRequest`): event channels, CM IDs,
//! address and route resolution, listen / connect / accept / reject /
//! disconnect, and the QP attributes the client's library moves its QP
//! with. The protocol runs in `service` on the engine thread; each request
//! here changes the service under its lock, then has the engine pump it
//! (so what the request queued goes out at once).

pub(crate) mod service;
mod sidr;

use super::{call, Attach, Reply, RequestError, Shared};
use ipc::proto::cm::{
    qp_mask, Bound, CmEventKind, CmIdNo, CmQpType, CmRequest, CmResponse, ConnParam, IdInfo,
    PortSpace,
};
use ipc::proto::{QpKind, Response};
use nic::cm::{AcceptParams, CmAddr, ConnectParams, RejectReason};
use nic::verbs::{AhAttr, QpAttr, QpState};
use service::{CmService, Id};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;
use wire::mad::{ip_cm_service_id, CmRep, CmReq, IpCmPrivateData};
use wire::{EthernetAddress, Gid};

/// Why a CM request was refused.
#[derive(Debug, thiserror::Error)]
pub enum CmRequestError {
    #[error("no event channel {0:#x}")]
    NoChannel(u64),
    #[error("no CM ID {0}")]
    NoId(CmIdNo),
    #[error("port space {0:#x} is not supported (RDMA_PS_TCP and RDMA_PS_UDP are)")]
    PortSpace(u16),
    #[error("{0} is not this device's address")]
    NotLocal(IpAddr),
    #[error("the address is in use")]
    AddrInUse,
    #[error("the ID's destination is not resolved")]
    NotResolved,
    #[error("the ID is not in a state that allows this")]
    WrongState,
    #[error("private data of {len} bytes (at most {max})")]
    PrivateData { len: usize, max: usize },
    #[error("QP {qpn:#x} is not one of this process's {want:?} QPs on this device")]
    NotYourQp { qpn: u32, want: CmQpType },
    #[error("the CM: {0}")]
    Cm(#[from] nic::cm::CmError),
    #[error("too many CM IDs and channels")]
    TooMany,
    #[error("the event channel: {0}")]
    Socket(#[source] std::io::Error),
}

/// The devices of this process (GID, MAC): an in-memory pair's peer has
/// no neighbour entry, its address is the other device's GID.
static LOCAL: Mutex<Vec<(Gid, EthernetAddress)>> = Mutex::new(Vec::new());

/// Records a device of this process for address resolution.
pub(crate) fn register_local(gid: Gid, mac: [u8; 6]) {
    if let Ok(mut l) = LOCAL.lock() {
        l.push((gid, EthernetAddress(mac)));
    }
}

/// The Ethernet address of `ip`: a device of this process, else the
/// kernel's next hop (waiting at most `patience`).
fn resolve_mac(ip: IpAddr, patience: Duration) -> Option<EthernetAddress> {
    let gid = Gid::from_ip(ip);
    let local = LOCAL
        .lock()
        .ok()?
        .iter()
        .find(|(g, _)| *g == gid)
        .map(|l| l.1);
    local.or_else(|| {
        nic::io::addr::next_hop_mac(ip, patience)
            .ok()
            .map(|(_, m)| m)
    })
}

/// The IBA MTU encoding (1 = 256 ... 5 = 4096) of `mtu` bytes.
fn mtu_enum(mtu: u32) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

fn check_ps(ps: PortSpace) -> Result<(), CmRequestError> {
    match ps {
        PortSpace::TCP | PortSpace::UDP => Ok(()),
        PortSpace(p) => Err(CmRequestError::PortSpace(p)),
    }
}

/// Handles one CM request of client connection `owner`.
pub(super) fn handle(sh: &Shared, owner: u64, req: CmRequest) -> Result<Reply, RequestError> {
    // address resolution may wait for the kernel: outside the lock
    let resolved = match &req {
        CmRequest::ResolveAddr {
            dst, timeout_ms, ..
        } => Some(resolve_mac(
            dst.ip(),
            Duration::from_millis(u64::from(*timeout_ms).clamp(1, 10_000)),
        )),
        _ => None,
    };
    // the QPs connect and accept may name: the caller's (its process's)
    let qps = match &req {
        CmRequest::Connect { .. } | CmRequest::Accept { .. } => {
            super::registry::process_qps(sh, owner)
        }
        _ => Default::default(),
    };
    let (resp, fd) = {
        let mut s = sh.cm.lock().expect("cm");
        let s = &mut *s;
        let r = request(s, owner, req, resolved.flatten(), &qps)?;
        s.flush();
        r
    };
    // the engine sends what the request queued
    let svc = sh.cm_arc();
    let _ = call(sh, move |r| {
        if let Ok(mut s) = svc.lock() {
            s.pump(r)
        }
    });
    Ok((Response::Cm(resp), fd.map(Attach::Fd)))
}

fn id_mut(s: &mut CmService, owner: u64, id: CmIdNo) -> Result<&mut Id, CmRequestError> {
    s.ids
        .get_mut(&id)
        .filter(|i| i.owner == owner)
        .ok_or(CmRequestError::NoId(id))
}

type CmReply = (CmResponse, Option<std::os::fd::OwnedFd>);

/// Carries out one CM request of client connection `owner` on the
/// service `s`; `mac` is what address resolution found, `qps` the caller's
/// QPs. Each request with more than a line or two to it has its own
/// function below.
fn request(
    s: &mut CmService,
    owner: u64,
    req: CmRequest,
    mac: Option<EthernetAddress>,
    qps: &HashMap<u32, QpKind>,
) -> Result<CmReply, CmRequestError> {
    let now = s.now;
    if matches!(req, CmRequest::CreateChannel | CmRequest::CreateId { .. }) {
        let held = s.ids.values().filter(|i| i.owner == owner).count()
            + s.chans.values().filter(|c| c.owner == owner).count();
        if held >= super::registry::MAX_OBJECTS {
            return Err(CmRequestError::TooMany);
        }
    }
    let events = |n| Ok((CmResponse::Events { events: n }, None));
    match req {
        CmRequest::CreateChannel => create_channel(s, owner),
        CmRequest::CreateId {
            chan,
            ps,
            qp_type,
            user_ctx,
        } => {
            check_ps(ps)?;
            if !s.chans.contains_key(&chan) {
                return Err(CmRequestError::NoChannel(chan));
            }
            let no = s.alloc_id();
            s.ids
                .insert(no, Id::new(owner, chan, user_ctx, ps, qp_type));
            Ok((CmResponse::Id { id: no }, None))
        }
        CmRequest::DestroyId { id } => {
            id_mut(s, owner, id)?;
            events(s.destroy(id))
        }
        CmRequest::Bind { id, addr } => {
            let b = bind(s, owner, id, addr)?;
            Ok((CmResponse::Bound(b), None))
        }
        CmRequest::ResolveAddr { id, src, dst, .. } => {
            resolve_addr(s, owner, id, (src, dst), mac).and_then(done)
        }
        CmRequest::ResolveRoute { id, .. } => {
            let i = id_mut(s, owner, id)?;
            if i.dmac.is_none() {
                return Err(CmRequestError::NotResolved);
            }
            i.route = true;
            s.report_kind(id, CmEventKind::ROUTE_RESOLVED, 0);
            done(())
        }
        CmRequest::Query { id } => query(s, owner, id),
        CmRequest::Listen { id, backlog } => listen(s, owner, id, backlog).and_then(done),
        CmRequest::Connect { id, param } => connect(s, owner, id, &param, qps).and_then(done),
        CmRequest::Accept { id, param } => accept(s, owner, id, param, qps).and_then(done),
        CmRequest::Reject { id, private_data } => {
            let i = id_mut(s, owner, id)?;
            let c = i.conn.take().ok_or(CmRequestError::WrongState)?;
            i.pending_on = None;
            s.by_conn.remove(&c.0);
            // IBA 12.6.7 Table 104: 28, consumer reject
            s.cm.reject(c, RejectReason::CONSUMER_REJECT, &private_data)?;
            done(())
        }
        CmRequest::Disconnect { id } => {
            let c = id_mut(s, owner, id)?
                .conn
                .ok_or(CmRequestError::WrongState)?;
            s.cm.disconnect(now, c)?;
            done(())
        }
        CmRequest::InitQpAttr { id, state } => {
            let mtu = s.mtu;
            let i = id_mut(s, owner, id)?;
            let (attr, mask) = init_qp_attr(i, state, mtu)?;
            // the active side asks for RTS after RTR: its QP receives now
            if state == QpState::Rts {
                s.release_rtu(id);
            }
            Ok((CmResponse::QpAttr { attr, mask }, None))
        }
        CmRequest::Establish { id } => establish(s, owner, id).and_then(done),
        CmRequest::Notify { id, event } => {
            let c = id_mut(s, owner, id)?.conn;
            // IBV_EVENT_COMM_EST (4): the QP saw the peer's first packet
            if let (4, Some(c)) = (event, c) {
                let _ = s.cm.established(c);
            }
            done(())
        }
        CmRequest::MigrateId { id, chan } => {
            if !s.chans.contains_key(&chan) {
                return Err(CmRequestError::NoChannel(chan));
            }
            let reported = id_mut(s, owner, id)?.events;
            s.migrate(id, chan);
            events(reported)
        }
    }
}

/// The reply of a request whose outcome comes as events: no new events
/// counted here.
fn done(_: ()) -> Result<CmReply, CmRequestError> {
    Ok((CmResponse::Events { events: 0 }, None))
}

/// rdma_create_event_channel: a socket pair, one end to the client, and a
/// random token that names the channel.
fn create_channel(s: &mut CmService, owner: u64) -> Result<CmReply, CmRequestError> {
    let (sock, theirs) = ipc::shm::SeqPacket::pair().map_err(CmRequestError::Socket)?;
    let token = loop {
        let t: u64 = rand::random();
        if t != 0 && !s.chans.contains_key(&t) {
            break t;
        }
    };
    s.chans.insert(
        token,
        service::Chan {
            owner,
            sock,
            backlog: Default::default(),
        },
    );
    Ok((CmResponse::Channel { token }, Some(theirs)))
}

/// rdma_resolve_addr: binds the ID if it is not (to `src`, or any port of
/// our address), records the destination and the MAC found for it, and
/// reports ADDR_RESOLVED or ADDR_ERROR.
fn resolve_addr(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    (src, dst): (Option<SocketAddr>, SocketAddr),
    mac: Option<EthernetAddress>,
) -> Result<(), CmRequestError> {
    let bound = id_mut(s, owner, id)?.src;
    match (src, bound) {
        (Some(a), None) => drop(bind(s, owner, id, a)?),
        (None, None) => {
            let any = SocketAddr::new(s.gid.to_ip(), 0);
            drop(bind(s, owner, id, any)?)
        }
        _ => {}
    }
    let i = id_mut(s, owner, id)?;
    i.dst = Some(dst);
    i.dmac = mac;
    let kind = match mac {
        Some(m) => {
            s.neigh.insert(Gid::from_ip(dst.ip()).0, m);
            CmEventKind::ADDR_RESOLVED
        }
        None => CmEventKind::ADDR_ERROR,
    };
    // EHOSTUNREACH, as rdma_cm reports an unresolved neighbour
    s.report_kind(id, kind, if mac.is_some() { 0 } else { -113 });
    Ok(())
}

/// rdma_query_id's answer: the ID's addresses, device, port and path.
fn query(s: &mut CmService, owner: u64, id: CmIdNo) -> Result<CmReply, CmRequestError> {
    let (dev, sgid, mtu) = (s.dev.clone(), s.gid.0, s.mtu);
    let i = id_mut(s, owner, id)?;
    Ok((
        CmResponse::Info(IdInfo {
            src: i.src,
            dst: i.dst,
            dev,
            port: 1,
            sgid,
            dgid: i.dst.map(|d| Gid::from_ip(d.ip()).0),
            dmac: i.dmac.map(|m| m.0),
            pkey: 0xFFFF,
            path_mtu: mtu,
            num_paths: u32::from(i.route),
            ps: i.ps,
            qp_type: i.qp_type,
        }),
        None,
    ))
}

/// rdma_listen: binds the ID if it is not, and listens on the service ID
/// of its port space and port.
fn listen(s: &mut CmService, owner: u64, id: CmIdNo, backlog: u32) -> Result<(), CmRequestError> {
    if id_mut(s, owner, id)?.src.is_none() {
        let any = SocketAddr::new(s.gid.to_ip(), 0);
        bind(s, owner, id, any)?;
    }
    let i = id_mut(s, owner, id)?;
    if i.listening.is_some() {
        return Ok(());
    }
    let port = i.src.map_or(0, |a| a.port());
    // IBA A11: the RDMA IP CM service ID of the port space and port
    let sid = ip_cm_service_id(i.ps.0 as u8, port);
    if s.listeners.contains_key(&sid) {
        return Err(CmRequestError::AddrInUse);
    }
    let i = id_mut(s, owner, id)?;
    i.listening = Some(sid);
    // rdma_listen: 0 (or more than the limit) is the limit
    i.backlog = match backlog {
        0 => service::MAX_BACKLOG,
        b => b.min(service::MAX_BACKLOG),
    };
    s.listeners.insert(sid, id);
    s.cm.listen(sid);
    Ok(())
}

/// rdma_connect: a SIDR REQ for a UD ID; for an RC ID on a resolved route,
/// a REQ (IBA 12.6.5) carrying the IP CM private data, and the ID waits
/// for the REP with its RTU held.
fn connect(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    param: &ConnParam,
    qps: &HashMap<u32, QpKind>,
) -> Result<(), CmRequestError> {
    let (now, mtu, timers) = (s.now, s.mtu, s.timers);
    let local_ip = s.gid.to_ip();
    let i = id_mut(s, owner, id)?;
    if i.qp_type == CmQpType::Ud {
        return sidr::connect(s, owner, id, param);
    }
    let dst = connectable(i, &param.private_data, CmReq::PRIVATE_DATA_LEN)?;
    let src = i.src.unwrap_or(SocketAddr::new(local_ip, 0));
    check_qp(qps, param.qpn, i.qp_type)?;
    take_param(i, param);
    let pd = ip_cm_private_data(src, dst, &param.private_data);
    let sid = ip_cm_service_id(i.ps.0 as u8, dst.port());
    let mut p = ConnectParams::new(CmAddr::from_ip(dst.ip()), sid, i.local_qpn, i.rq_psn);
    p.responder_resources = param.responder_resources;
    p.initiator_depth = param.initiator_depth;
    p.path_mtu = mtu_enum(mtu);
    p.retry_count = param.retry_count.min(7);
    p.rnr_retry_count = param.rnr_retry_count.min(7);
    p.srq = param.srq;
    p.end_to_end_flow_control = param.flow_control;
    // IBA 12.6.5: the REQ's CM response timeouts (4.096 µs × 2^n)
    // and Max CM Retries bound the wait for REP, RTU and DREP
    p.cm_response_timeout = timers.response_timeout & 0x1F;
    p.max_cm_retries = timers.max_retries & 0x0F;
    p.private_data = pd;
    let c = s.cm.connect(now, &p);
    let i = id_mut(s, owner, id)?;
    i.conn = Some(c);
    i.rtu_held = true;
    i.held_rtu = None;
    s.by_conn.insert(c.0, id);
    Ok(())
}

/// The destination of an ID that may connect: its route resolved, no
/// connection or listen begun, and `private` fitting beside the RDMA IP CM
/// header in a message's `room` bytes of private data (IBA A11).
fn connectable(i: &Id, private: &[u8], room: usize) -> Result<SocketAddr, CmRequestError> {
    let (Some(dst), Some(_), true) = (i.dst, i.dmac, i.route) else {
        return Err(CmRequestError::NotResolved);
    };
    if i.conn.is_some() || i.listening.is_some() {
        return Err(CmRequestError::WrongState);
    }
    let max = room - IpCmPrivateData::LEN;
    if private.len() > max {
        return Err(CmRequestError::PrivateData {
            len: private.len(),
            max,
        });
    }
    Ok(dst)
}

/// rdma_accept: a SIDR REP for a UD ID; for an RC ID with a REQ pending, a
/// REP (IBA 12.6.8) with no more resources than the REQ asked for.
fn accept(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    param: ConnParam,
    qps: &HashMap<u32, QpKind>,
) -> Result<(), CmRequestError> {
    let now = s.now;
    let i = id_mut(s, owner, id)?;
    if i.qp_type == CmQpType::Ud {
        return sidr::accept(s, owner, id, &param, qps);
    }
    let c = acceptable(i, &param, CmRep::PRIVATE_DATA_LEN, qps)?;
    i.pending_on = None;
    // IBA 12.6.8: no more than the REQ asked for
    let (req_init, req_resp) = (i.responder_resources, i.initiator_depth);
    take_param(i, &param);
    i.responder_resources = i.responder_resources.min(req_init);
    i.initiator_depth = i.initiator_depth.min(req_resp);
    let p = AcceptParams {
        local_qpn: i.local_qpn,
        starting_psn: i.rq_psn,
        responder_resources: i.responder_resources,
        initiator_depth: i.initiator_depth,
        target_ack_delay: 15,
        rnr_retry_count: param.rnr_retry_count.min(7),
        srq: param.srq,
        end_to_end_flow_control: param.flow_control,
        private_data: param.private_data,
    };
    s.cm.accept(now, c, &p)?;
    Ok(())
}

/// rdma_establish: once per ID, as librdmacm (a second one is EINVAL).
fn establish(s: &mut CmService, owner: u64, id: CmIdNo) -> Result<(), CmRequestError> {
    let i = id_mut(s, owner, id)?;
    let c = i.conn.ok_or(CmRequestError::WrongState)?;
    if std::mem::replace(&mut i.establish_called, true) {
        return Err(CmRequestError::WrongState);
    }
    // the active side's rdma_establish: the RTU goes (already
    // gone when the client asked for the RTS attributes first: its
    // connection is established and nothing is left to do); the
    // passive side's: its QP heard the peer first
    if !s.release_rtu(id) && !s.cm.is_established(c) {
        s.cm.established(c)?;
    }
    Ok(())
}

/// What accepting asks of an ID, RC or UD: a request pending (its
/// connection), private data that fits the answer's field (`max`: the
/// REP's, IBA 12.6.8, or the SIDR_REP's), and the caller's QP of the ID's
/// type.
fn acceptable(
    i: &Id,
    param: &ConnParam,
    max: usize,
    qps: &HashMap<u32, QpKind>,
) -> Result<nic::cm::CmId, CmRequestError> {
    let c = i.conn.ok_or(CmRequestError::WrongState)?;
    if param.private_data.len() > max {
        return Err(CmRequestError::PrivateData {
            len: param.private_data.len(),
            max,
        });
    }
    check_qp(qps, param.qpn, i.qp_type)?;
    Ok(c)
}

/// The QP that `connect`/`accept` name must be the caller's, of the ID's
/// type: the REQ/REP carry its number (IBA 12.6.5, 12.6.8 Local QPN), and
/// the peer's packets would otherwise land on another client's QP.
fn check_qp(qps: &HashMap<u32, QpKind>, qpn: u32, want: CmQpType) -> Result<(), CmRequestError> {
    let kind = match want {
        CmQpType::Rc => QpKind::Rc,
        CmQpType::Ud => QpKind::Ud,
    };
    match qps.get(&qpn) {
        Some(k) if *k == kind => Ok(()),
        _ => Err(CmRequestError::NotYourQp { qpn, want }),
    }
}

/// What `connect`/`accept` say of the local QP.
fn take_param(i: &mut Id, p: &ConnParam) {
    i.local_qpn = p.qpn & 0x00FF_FFFF;
    if let Some(psn) = p.psn {
        i.rq_psn = psn & 0x00FF_FFFF;
    }
    i.responder_resources = p.responder_resources;
    i.initiator_depth = p.initiator_depth;
    i.retry_count = p.retry_count.min(7);
    i.rnr_retry_count = p.rnr_retry_count.min(7);
}

/// Binds `id` to `addr` (this device's address or the unspecified one;
/// port 0: a free port of the ID's port space).
fn bind(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    addr: SocketAddr,
) -> Result<Bound, CmRequestError> {
    let ip = s.gid.to_ip();
    if !addr.ip().is_unspecified() && addr.ip() != ip {
        return Err(CmRequestError::NotLocal(addr.ip()));
    }
    let ps = id_mut(s, owner, id)?.ps;
    let used = |s: &CmService, port: u16| {
        s.ids
            .values()
            .any(|i| i.ps == ps && i.listening.is_some() && i.src.map(|a| a.port()) == Some(port))
            || s.ids
                .values()
                .any(|i| i.ps == ps && i.conn.is_none() && i.src.map(|a| a.port()) == Some(port))
    };
    let port = match addr.port() {
        0 => (0..0x4000u16)
            .map(|k| 0xC000 | ((rand::random::<u16>().wrapping_add(k)) & 0x3FFF))
            .find(|p| !used(s, *p))
            .ok_or(CmRequestError::AddrInUse)?,
        p if used(s, p) => return Err(CmRequestError::AddrInUse),
        p => p,
    };
    let bound = SocketAddr::new(ip, port);
    id_mut(s, owner, id)?.src = Some(bound);
    Ok(Bound {
        dev: s.dev.clone(),
        port: 1,
        gid_index: 0,
        gid: s.gid.0,
        addr: bound,
    })
}

/// The attributes that move the ID's QP to `state`, as the kernel's
/// `rdma_init_qp_attr` gives them, with their `ibv_qp_attr_mask`.
fn init_qp_attr(i: &Id, state: QpState, mtu: u32) -> Result<(QpAttr, u32), CmRequestError> {
    let mut a = QpAttr {
        state: Some(state),
        ..Default::default()
    };
    let mut mask = qp_mask::STATE;
    match state {
        QpState::Init => {
            a.pkey_index = Some(0);
            a.port = Some(1);
            // IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ |
            // REMOTE_ATOMIC: what a connected RDMA CM QP allows
            a.access_flags = Some(0xF);
            mask |= qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::ACCESS_FLAGS;
            if i.qp_type == CmQpType::Ud {
                a.qkey = Some(sidr::RDMA_UDP_QKEY);
                a.access_flags = None;
                mask = qp_mask::STATE | qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::QKEY;
            }
        }
        QpState::Rtr => {
            if i.qp_type == CmQpType::Ud {
                return Ok((a, mask));
            }
            let (Some(dst), Some(mac)) = (i.dst, i.dmac) else {
                return Err(CmRequestError::NotResolved);
            };
            if i.conn.is_none() || i.remote_qpn == 0 {
                return Err(CmRequestError::WrongState);
            }
            a.ah = Some(AhAttr::new(Gid::from_ip(dst.ip()), mac));
            a.path_mtu = Some(mtu);
            a.dest_qpn = Some(i.remote_qpn);
            a.rq_psn = Some(i.rq_psn);
            a.max_dest_rd_atomic = Some(i.responder_resources);
            a.min_rnr_timer = Some(12);
            mask |= qp_mask::AV
                | qp_mask::PATH_MTU
                | qp_mask::DEST_QPN
                | qp_mask::RQ_PSN
                | qp_mask::MAX_DEST_RD_ATOMIC
                | qp_mask::MIN_RNR_TIMER;
        }
        QpState::Rts => {
            a.sq_psn = Some(i.sq_psn);
            mask |= qp_mask::SQ_PSN;
            if i.qp_type == CmQpType::Rc {
                a.timeout = Some(14);
                a.retry_cnt = Some(i.retry_count);
                a.rnr_retry = Some(i.rnr_retry_count);
                a.max_rd_atomic = Some(i.initiator_depth);
                mask |= qp_mask::TIMEOUT
                    | qp_mask::RETRY_CNT
                    | qp_mask::RNR_RETRY
                    | qp_mask::MAX_QP_RD_ATOMIC;
            }
        }
        _ => return Err(CmRequestError::WrongState),
    }
    Ok((a, mask))
}

/// The RDMA IP CM header (IBA A11.6, rdma_cm's cma_hdr) of a request from
/// `src` to `dst`, then the user's bytes.
pub(crate) fn ip_cm_private_data(src: SocketAddr, dst: SocketAddr, user: &[u8]) -> Vec<u8> {
    let v = |a: IpAddr| match a {
        IpAddr::V4(v4) => v4.to_ipv6_compatible().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let hdr = IpCmPrivateData {
        major_version: 0,
        minor_version: 0,
        ip_version: if dst.is_ipv4() { 4 } else { 6 },
        reserved: 0,
        src_port: src.port(),
        src_ip: v(src.ip()),
        dst_ip: v(dst.ip()),
    };
    let mut pd = vec![0u8; IpCmPrivateData::LEN];
    let _ = hdr.emit(&mut pd);
    pd.extend_from_slice(user);
    pd
}
