//! The RDMA CM in Rust, in the shape of the kernel's ucma interface: a
//! command per verb on a [`CmClient`] (a connection to the device's
//! rnicd), events on an [`EventChannel`] whose descriptor is readable
//! exactly when an event is queued (poll/epoll it, then [`EventChannel::next`]).
//!
//! The QP is the caller's (made with the ordinary verbs); the CM only
//! needs its number and type in `connect`/`accept`, and
//! [`CmClient::init_qp_attr`] tells the attributes that move it through
//! INIT, RTR and RTS (`ibv_modify_qp`), as `rdma_init_qp_attr` does.
//! On the active side the daemon answers the REP with the RTU itself:
//! ESTABLISHED arrives with the REP's parameters, and the caller moves
//! its QP to RTR and RTS before using it.

use super::{unexpected, Error, ProtocolError, Result};
pub use crate::proto::cm::{
    qp_mask, Bound, CmEventKind, CmEventMsg, CmIdNo, CmQpType, ConnEventParam, ConnParam, IdInfo,
    PortSpace, UdEventParam,
};
use crate::proto::cm::{CmRequest, CmResponse};
use crate::proto::{self, ReqMsg, Request, RespMsg, Response};
use crate::shm::SeqPacket;
pub use nic::verbs::{AhAttr, QpAttr, QpState};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Mutex;
pub use wire::{EthernetAddress, Gid};

/// The control socket of the device (in [`super::sock_dir`]) whose
/// address is `ip`: where a CM ID bound to `ip` lives.
pub fn device_socket(ip: std::net::IpAddr) -> Option<std::path::PathBuf> {
    device_socket_in(&super::sock_dir(), ip)
}

/// [`device_socket`] among the sockets in `dir`.
pub fn device_socket_in(dir: &Path, ip: std::net::IpAddr) -> Option<std::path::PathBuf> {
    let gid = wire::Gid::from_ip(ip);
    let mut socks: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    socks.sort();
    socks
        .into_iter()
        .find(|p| super::Context::open(p).is_ok_and(|c| c.device.gid == gid))
}

/// A connection to a device's rnicd for CM commands.
pub struct CmClient {
    sock: Mutex<SeqPacket>,
}

/// An error of the socket to rnicd: a hang-up (the daemon killed or
/// crashed) is [`Error::DeviceGone`], as it is to the verbs.
fn hung_up(e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EPIPE | libc::ECONNRESET) => Error::DeviceGone,
        _ => e.into(),
    }
}

fn request(sock: &Mutex<SeqPacket>, req: CmRequest) -> Result<(CmResponse, Vec<OwnedFd>)> {
    let sock = sock.lock().map_err(|_| ProtocolError::Poisoned)?;
    let msg = proto::encode(&ReqMsg {
        v: proto::VERSION,
        req: Request::Cm(req),
    });
    sock.send(&msg, &[]).map_err(hung_up)?;
    let mut buf = Vec::new();
    let fds = sock
        .recv(&mut buf)
        .map_err(hung_up)?
        .ok_or(Error::DeviceGone)?;
    let m: RespMsg = serde_json::from_slice(&buf).map_err(ProtocolError::from)?;
    if m.v != proto::VERSION {
        return Err(ProtocolError::Version(m.v).into());
    }
    match m.resp {
        Response::Cm(r) => Ok((r, fds)),
        Response::Error { msg } => Err(Error::Daemon(msg)),
        r => Err(unexpected(r)),
    }
}

fn unexpected_cm(r: CmResponse) -> Error {
    ProtocolError::Unexpected(format!("{r:?}")).into()
}

/// An event channel (`struct rdma_event_channel`): its own connection to
/// rnicd (which owns the channel while it is open) and the descriptor the
/// events arrive on, one per message.
pub struct EventChannel {
    _ctl: CmClient,
    events: SeqPacket,
    token: u64,
}

impl EventChannel {
    /// A channel on the device whose control socket is `sock`.
    pub fn open(sock: impl AsRef<Path>) -> Result<EventChannel> {
        let ctl = CmClient::open(sock)?;
        let (r, mut fds) = request(&ctl.sock, CmRequest::CreateChannel)?;
        match (r, fds.pop(), fds.is_empty()) {
            (CmResponse::Channel { token }, Some(fd), true) => Ok(EventChannel {
                _ctl: ctl,
                events: SeqPacket::from_fd(fd),
                token,
            }),
            (CmResponse::Channel { .. }, _, _) => Err(ProtocolError::BadRings("channel").into()),
            (r, _, _) => Err(unexpected_cm(r)),
        }
    }

    /// The channel on device `name` (`<sock_dir>/<name>.sock`).
    pub fn open_device(name: &str) -> Result<EventChannel> {
        EventChannel::open(super::sock_dir().join(format!("{name}.sock")))
    }

    /// Readable exactly when an event is queued.
    pub fn fd(&self) -> RawFd {
        self.events.raw_fd()
    }

    /// Names the channel in `create_id` and `migrate_id`.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The next event: waits for one, or (`nonblocking`) `None` when none
    /// is queued; [`Error::DeviceGone`] once rnicd has gone away and every
    /// event it sent was taken.
    pub fn next(&self, nonblocking: bool) -> Result<Option<CmEventMsg>> {
        if nonblocking {
            let mut p = libc::pollfd {
                fd: self.events.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll(2) on one pollfd that lives across the call.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            if n <= 0 {
                return Ok(None);
            }
        }
        let mut buf = Vec::new();
        match self.events.recv(&mut buf).map_err(hung_up)? {
            None => Err(Error::DeviceGone),
            Some(_) => Ok(Some(
                serde_json::from_slice(&buf).map_err(ProtocolError::from)?,
            )),
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}

impl CmClient {
    /// Connects to the device whose control socket is `sock`. Its IDs
    /// live as long as this connection: when it closes, rnicd destroys
    /// them (a connected one sends a DREQ).
    pub fn open(sock: impl AsRef<Path>) -> Result<CmClient> {
        Ok(CmClient {
            sock: Mutex::new(SeqPacket::connect(sock.as_ref())?),
        })
    }

    /// The client on device `name` (`<sock_dir>/<name>.sock`).
    pub fn open_device(name: &str) -> Result<CmClient> {
        CmClient::open(super::sock_dir().join(format!("{name}.sock")))
    }

    fn cmd(&self, req: CmRequest) -> Result<CmResponse> {
        Ok(request(&self.sock, req)?.0)
    }

    fn events(&self, req: CmRequest) -> Result<u32> {
        match self.cmd(req)? {
            CmResponse::Events { events } => Ok(events),
            r => Err(unexpected_cm(r)),
        }
    }

    fn unit(&self, req: CmRequest) -> Result<()> {
        self.events(req).map(drop)
    }

    /// `rdma_create_id`: events of the ID go to channel `chan`.
    pub fn create_id(
        &self,
        chan: u64,
        ps: PortSpace,
        qp_type: CmQpType,
        user_ctx: u64,
    ) -> Result<CmIdNo> {
        match self.cmd(CmRequest::CreateId {
            chan,
            ps,
            qp_type,
            user_ctx,
        })? {
            CmResponse::Id { id } => Ok(id),
            r => Err(unexpected_cm(r)),
        }
    }

    /// `rdma_destroy_id`: returns how many events were reported on it.
    pub fn destroy_id(&self, id: CmIdNo) -> Result<u32> {
        self.events(CmRequest::DestroyId { id })
    }

    /// `rdma_bind_addr` (port 0: the daemon picks one).
    pub fn bind(&self, id: CmIdNo, addr: SocketAddr) -> Result<Bound> {
        match self.cmd(CmRequest::Bind { id, addr })? {
            CmResponse::Bound(b) => Ok(b),
            r => Err(unexpected_cm(r)),
        }
    }

    /// `rdma_resolve_addr`: ADDR_RESOLVED or ADDR_ERROR follows.
    pub fn resolve_addr(
        &self,
        id: CmIdNo,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> Result<()> {
        self.unit(CmRequest::ResolveAddr {
            id,
            src,
            dst,
            timeout_ms,
        })
    }

    /// `rdma_resolve_route`: ROUTE_RESOLVED follows.
    pub fn resolve_route(&self, id: CmIdNo, timeout_ms: u32) -> Result<()> {
        self.unit(CmRequest::ResolveRoute { id, timeout_ms })
    }

    /// Addresses, device, GIDs, P_Key and path MTU of the ID.
    pub fn query(&self, id: CmIdNo) -> Result<IdInfo> {
        match self.cmd(CmRequest::Query { id })? {
            CmResponse::Info(i) => Ok(i),
            r => Err(unexpected_cm(r)),
        }
    }

    /// `rdma_listen` (binds to the device's address and a free port first
    /// if the ID is not bound).
    pub fn listen(&self, id: CmIdNo, backlog: u32) -> Result<()> {
        self.unit(CmRequest::Listen { id, backlog })
    }

    /// `rdma_connect`: sends the REQ; ESTABLISHED, REJECTED or UNREACHABLE
    /// follows.
    pub fn connect(&self, id: CmIdNo, p: &ConnParam) -> Result<()> {
        self.unit(CmRequest::Connect {
            id,
            param: p.clone(),
        })
    }

    /// `rdma_accept` on the ID of a CONNECT_REQUEST: sends the REP;
    /// ESTABLISHED follows the RTU.
    pub fn accept(&self, id: CmIdNo, p: &ConnParam) -> Result<()> {
        self.unit(CmRequest::Accept {
            id,
            param: p.clone(),
        })
    }

    /// `rdma_reject`: a REJ (reason 28, consumer reject) with
    /// `private_data`.
    pub fn reject(&self, id: CmIdNo, private_data: &[u8]) -> Result<()> {
        self.unit(CmRequest::Reject {
            id,
            private_data: private_data.to_vec(),
        })
    }

    /// `rdma_disconnect`: sends the DREQ; DISCONNECTED follows.
    pub fn disconnect(&self, id: CmIdNo) -> Result<()> {
        self.unit(CmRequest::Disconnect { id })
    }

    /// `rdma_init_qp_attr`: the attributes and their `ibv_qp_attr_mask`
    /// that move the ID's QP to `state` (INIT, RTR or RTS). The active
    /// side's RTU waits until it asks for RTS (its QP has done RTR).
    pub fn init_qp_attr(&self, id: CmIdNo, state: QpState) -> Result<(QpAttr, u32)> {
        match self.cmd(CmRequest::InitQpAttr { id, state })? {
            CmResponse::QpAttr { attr, mask } => Ok((attr, mask)),
            r => Err(unexpected_cm(r)),
        }
    }

    /// `rdma_establish`: the active side's QP is ready (its RTU goes, if
    /// RTS was not asked for), or the passive side's QP received before
    /// the RTU.
    pub fn establish(&self, id: CmIdNo) -> Result<()> {
        self.unit(CmRequest::Establish { id })
    }

    /// `rdma_notify` with an `ibv_event_type` (COMM_EST, 4, establishes).
    pub fn notify(&self, id: CmIdNo, event: u32) -> Result<()> {
        self.unit(CmRequest::Notify { id, event })
    }

    /// `rdma_migrate_id`: the ID's events go to channel `chan` from now
    /// on; returns how many were reported on it.
    pub fn migrate_id(&self, id: CmIdNo, chan: u64) -> Result<u32> {
        self.events(CmRequest::MigrateId { id, chan })
    }
}
