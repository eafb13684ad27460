//! The client library: verbs in Rust over a softrnic daemon. Control verbs
//! are messages on the device's Unix socket; posts and polls touch only
//! shared memory (write the WQE, release-store the producer index; read
//! CQEs up to the daemon's producer index, release-store the consumer
//! index) — no syscall on the data path.

use crate::proto::{self, AhMsg, QpAttrMsg, QpKind, ReqMsg, Request, RespMsg, Response, Stats};
use crate::ring::{self, CqeRaw, Ring, WqeRaw, CQE_SIZE, WQE_SIZE};
use crate::shm::{Mapping, SeqPacket};
use nic::verbs::{access, AhAttr, MwType, QpAttr, QpState, RecvWr, SendWr, Wc};
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::{EthernetAddress, Gid};

pub use crate::proto::QpKind as QpType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("the daemon refused: {0}")]
    Daemon(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("the work queue is full")]
    QueueFull,
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    UserMem(crate::usermem::UserMemError),
}

pub type Result<T> = std::result::Result<T, Error>;

/// What `query_device` reports.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub gid: Gid,
    pub mac: EthernetAddress,
    pub mtu: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub max_sge: u32,
}

/// What `query_port` reports (`struct ibv_port_attr`, the fields a RoCE
/// port has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// `enum ibv_port_state`: [`PORT_DOWN`] or [`PORT_ACTIVE`].
    pub state: u32,
    /// IB MTUs in bytes (256..4096).
    pub active_mtu: u32,
    pub max_mtu: u32,
    pub link_speed_bps: u64,
}

/// IBV_PORT_DOWN: the link is down.
pub const PORT_DOWN: u32 = 1;
/// IBV_PORT_ACTIVE: the link is up.
pub const PORT_ACTIVE: u32 = 4;

/// An open device (`ibv_context`).
pub struct Context {
    sock: Mutex<SeqPacket>,
    pub device: DeviceInfo,
    /// The engine's bell: rung after a post when the ring says the engine
    /// parks (None: the daemon has none; its park interval then bounds
    /// the first post's wait).
    bell: Option<OwnedFd>,
    /// Asynchronous events: the eventfd the daemon writes, and the events
    /// fetched but not yet handed out (made by the first `get_async_event`).
    async_events: Mutex<AsyncEvents>,
}

/// The async-event eventfd and the events fetched but not handed out.
type AsyncEvents = Option<(
    nic::io::Bell,
    std::collections::VecDeque<proto::AsyncEventMsg>,
)>;

/// Where device sockets live: `$SOFTRNIC_SOCK_DIR` or `/run/softrnic`.
pub fn sock_dir() -> PathBuf {
    std::env::var_os("SOFTRNIC_SOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/softrnic"))
}

impl Context {
    /// Opens device `name` (`<sock_dir>/<name>.sock`).
    pub fn open_device(name: &str) -> Result<Arc<Context>> {
        Context::open(sock_dir().join(format!("{name}.sock")))
    }

    /// Opens the device whose control socket is `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Context>> {
        let sock = SeqPacket::connect(path.as_ref())?;
        let mut c = Context {
            bell: None,
            async_events: Mutex::new(None),
            sock: Mutex::new(sock),
            device: DeviceInfo {
                name: String::new(),
                gid: Gid::default(),
                mac: EthernetAddress([0; 6]),
                mtu: 0,
                max_qp_wr: 0,
                max_cqe: 0,
                max_sge: 0,
            },
        };
        match c.request(Request::QueryDevice, None)?.0 {
            Response::Device {
                name,
                gid,
                mac,
                mtu,
                max_qp_wr,
                max_cqe,
                max_sge,
            } => {
                c.device = DeviceInfo {
                    name,
                    gid: Gid(gid),
                    mac: EthernetAddress(mac),
                    mtu,
                    max_qp_wr,
                    max_cqe,
                    max_sge,
                }
            }
            r => return Err(unexpected(r)),
        }
        // a daemon without a bell answers with an error: no bell, no harm
        if let Ok((Response::Ok, mut fds)) = c.request(Request::Bell, None) {
            c.bell = fds.pop();
        }
        Ok(Arc::new(c))
    }

    fn request(&self, req: Request, fd: Option<RawFd>) -> Result<(Response, Vec<OwnedFd>)> {
        let sock = self
            .sock
            .lock()
            .map_err(|_| Error::Protocol("poisoned".into()))?;
        let msg = proto::encode(&ReqMsg {
            v: proto::VERSION,
            req,
        });
        let fds: Vec<RawFd> = fd.into_iter().collect();
        sock.send(&msg, &fds)?;
        let mut buf = Vec::new();
        let fds = sock
            .recv(&mut buf)?
            .ok_or_else(|| Error::Protocol("the daemon closed the connection".into()))?;
        let m: RespMsg =
            serde_json::from_slice(&buf).map_err(|e| Error::Protocol(e.to_string()))?;
        if m.v != proto::VERSION {
            return Err(Error::Protocol(format!("daemon speaks version {}", m.v)));
        }
        match m.resp {
            Response::Error { msg } => Err(Error::Daemon(msg)),
            r => Ok((r, fds)),
        }
    }

    /// The next asynchronous event (`ibv_get_async_event`), waiting up to
    /// `timeout`; None if none came.
    pub fn get_async_event(&self, timeout: Duration) -> Result<Option<proto::AsyncEventMsg>> {
        let mut g = self.async_events_registered()?;
        let (bell, queue) = g.as_mut().expect("registered");
        let t0 = Instant::now();
        loop {
            if let Some(e) = queue.pop_front() {
                return Ok(Some(e));
            }
            bell.drain();
            match self.request(Request::GetAsyncEvents, None)?.0 {
                // kinds this build does not know are skipped
                Response::AsyncEvents { events } => queue.extend(
                    events
                        .into_iter()
                        .filter(|e| *e != proto::AsyncEventMsg::Unknown),
                ),
                r => return Err(unexpected(r)),
            }
            if !queue.is_empty() {
                continue;
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            bell.wait(None, left);
        }
    }

    /// The descriptor that becomes readable when an asynchronous event is
    /// waiting (`ibv_context.async_fd`, for poll/epoll); read events with
    /// [`Self::get_async_event`]. Registers with the daemon on first use.
    pub fn async_event_fd(&self) -> Result<std::os::fd::RawFd> {
        use std::os::fd::{AsFd, AsRawFd};
        let g = self.async_events_registered()?;
        Ok(g.as_ref().expect("registered").0.as_fd().as_raw_fd())
    }

    /// The async-event state, its eventfd handed to the daemon.
    fn async_events_registered(&self) -> Result<std::sync::MutexGuard<'_, AsyncEvents>> {
        use std::os::fd::{AsFd, AsRawFd};
        let mut g = self
            .async_events
            .lock()
            .map_err(|_| Error::Protocol("poisoned".into()))?;
        if g.is_none() {
            let bell = nic::io::Bell::new()?;
            let raw = bell.as_fd().as_raw_fd();
            match self.request(Request::AsyncEventFd, Some(raw))?.0 {
                Response::Ok => {}
                r => return Err(unexpected(r)),
            }
            *g = Some((bell, Default::default()));
        }
        Ok(g)
    }

    fn simple(&self, req: Request) -> Result<()> {
        match self.request(req, None)?.0 {
            Response::Ok => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    pub fn alloc_pd(self: &Arc<Self>) -> Result<Pd> {
        match self.request(Request::AllocPd, None)?.0 {
            Response::Pd { pd } => Ok(Pd {
                ctx: self.clone(),
                handle: pd,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// A completion queue of at least `cqe` entries.
    pub fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<Cq> {
        let (r, mut fds) = self.request(Request::CreateCq { cqe }, None)?;
        match r {
            Response::Cq {
                cq,
                entries,
                map_len,
            } => {
                if fds.len() != 1
                    || ring::ring_entries(entries) != Some(entries)
                    || (map_len as usize) < ring::ring_bytes(entries, CQE_SIZE)
                {
                    return Err(Error::Protocol("bad CQ reply".into()));
                }
                let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
                // SAFETY: the ring lies inside the mapping the Cq keeps.
                let ring = unsafe { Ring::new(map.ptr(), entries, CQE_SIZE) };
                Ok(Cq {
                    ctx: self.clone(),
                    handle: cq,
                    _map: map,
                    ring,
                    cons: 0,
                    events: None,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_query_port`: the device has one port, 1 (another number is
    /// refused by the daemon).
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        match self.request(Request::QueryPort { port }, None)?.0 {
            Response::Port {
                state,
                active_mtu,
                max_mtu,
                link_speed_bps,
            } => Ok(PortInfo {
                state,
                active_mtu,
                max_mtu,
                link_speed_bps,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// Daemon-wide object counts.
    pub fn stats(&self) -> Result<Stats> {
        match self.request(Request::Stats, None)?.0 {
            Response::Stats(s) => Ok(s),
            r => Err(unexpected(r)),
        }
    }
}

fn unexpected(r: Response) -> Error {
    Error::Protocol(format!("unexpected reply {r:?}"))
}

/// A protection domain.
pub struct Pd {
    ctx: Arc<Context>,
    pub handle: u32,
}

/// Memory shared with the daemon (a sealed memfd mapped here and, once
/// registered, in the daemon): the engine reads and writes it in place.
#[derive(Clone)]
pub struct Buffer {
    map: Arc<Mapping>,
}

impl Buffer {
    /// A zeroed buffer of `len` bytes (page-aligned).
    pub fn new(len: usize) -> Result<Buffer> {
        Ok(Buffer {
            map: Arc::new(Mapping::create("softrnic-buf", len)?),
        })
    }

    /// The virtual address of byte 0 (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        self.map.addr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr()
    }

    pub fn write(&self, off: usize, src: &[u8]) {
        nic::verbs::Memory::write(&*self.map, off, src);
    }

    pub fn read(&self, off: usize, dst: &mut [u8]) {
        nic::verbs::Memory::read(&*self.map, off, dst);
    }

    pub fn to_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v);
        v
    }
}

/// A registered memory region.
pub struct Mr {
    ctx: Arc<Context>,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
    backing: Backing,
}

/// What an MR's pages are.
enum Backing {
    /// A shared buffer (kept alive while registered).
    Buffer(#[allow(dead_code)] Buffer),
    /// Process memory moved onto the process's memfd (`usermem`).
    User,
}

impl Mr {
    pub fn dereg(self) -> Result<()> {
        self.try_dereg()
    }

    /// Deregisters the region; refused, and the region kept, while memory
    /// windows are bound to it (the caller may try again after).
    pub fn try_dereg(&self) -> Result<()> {
        self.ctx.simple(Request::DeregMr { lkey: self.lkey })?;
        if let Backing::User = self.backing {
            crate::usermem::release(self.addr, self.len as usize);
        }
        Ok(())
    }
}

/// A memory window (`ibv_mw`): bound with a `SendOp::BindMw` work request,
/// invalidated with `SendOp::LocalInv` or by a peer's SEND with Invalidate.
pub struct Mw {
    ctx: Arc<Context>,
    /// The R_Key it had when allocated (each bind gives it a new tag).
    pub rkey: u32,
    /// The daemon's handle (the key index, `rkey >> 8`).
    pub handle: u32,
    pub kind: MwType,
}

impl Mw {
    pub fn dealloc(self) -> Result<()> {
        self.ctx.simple(Request::DeallocMw {
            handle: self.handle,
        })
    }
}

/// What a QP is created with (`ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr {
    pub qp_type: QpKind,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub sq_sig_all: bool,
    /// Take receives from this SRQ (`Srq::handle`, same PD).
    pub srq: Option<u32>,
}

/// All access rights (local write, remote write/read/atomic).
pub const ACCESS_ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

impl Pd {
    pub fn alloc_buffer(&self, len: usize) -> Result<Buffer> {
        Buffer::new(len)
    }

    /// Allocates a memory window in this PD (`ibv_alloc_mw`).
    pub fn alloc_mw(&self, kind: MwType) -> Result<Mw> {
        let req = Request::AllocMw {
            pd: self.handle,
            mw_type: kind.ibv(),
        };
        match self.ctx.request(req, None)?.0 {
            Response::Mw { rkey } => Ok(Mw {
                ctx: self.ctx.clone(),
                rkey,
                handle: rkey >> 8,
                kind,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// Registers `len` bytes of `buf` from `offset` (zero-copy).
    pub fn reg_mr(&self, buf: &Buffer, offset: usize, len: usize, access: u32) -> Result<Mr> {
        if !matches!(offset.checked_add(len), Some(e) if e <= buf.len()) {
            return Err(Error::Protocol("region outside the buffer".into()));
        }
        let addr = buf.addr() + offset as u64;
        let b = Backing::Buffer(buf.clone());
        self.reg(buf.map.fd(), offset as u64, addr, len, access, b)
    }

    /// Registers `len` bytes of this process's own memory at `addr` (any
    /// private memory: malloc, posix_memalign, mmap): the pages move onto
    /// shared memory at the same address (`usermem`), the daemon maps
    /// them. Refused memory comes back as `Error::UserMem` with nothing
    /// changed: EOPNOTSUPP for memory that cannot be shared (shared
    /// mappings not ours, hugetlb, stacks), EFAULT for holes, unreadable
    /// pages and read-only pages with write access asked
    /// (`UserMemError::errno`).
    pub fn reg_user_mr(&self, addr: u64, len: usize, access: u32) -> Result<Mr> {
        let writable =
            access & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0;
        let (fd, offset) = crate::usermem::share(addr, len, writable).map_err(Error::UserMem)?;
        let r = self.reg(fd, offset, addr, len, access, Backing::User);
        if r.is_err() {
            crate::usermem::release(addr, len);
        }
        r
    }

    /// `RegMr` of `len` bytes at `offset` of memfd `fd`, which this process
    /// sees at `addr`.
    fn reg(
        &self,
        fd: RawFd,
        offset: u64,
        addr: u64,
        len: usize,
        access: u32,
        backing: Backing,
    ) -> Result<Mr> {
        let req = Request::RegMr {
            pd: self.handle,
            offset,
            addr,
            len: len as u64,
            access,
        };
        match self.ctx.request(req, Some(fd))?.0 {
            Response::Mr { lkey, rkey } => Ok(Mr {
                ctx: self.ctx.clone(),
                lkey,
                rkey,
                addr,
                len: len as u64,
                backing,
            }),
            r => Err(unexpected(r)),
        }
    }

    pub fn create_qp(&self, a: &QpInitAttr) -> Result<Qp> {
        let req = Request::CreateQp {
            pd: self.handle,
            qp_type: a.qp_type,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            max_send_wr: a.max_send_wr,
            max_recv_wr: a.max_recv_wr,
            sq_sig_all: a.sq_sig_all,
            srq: a.srq,
        };
        let (r, mut fds) = self.ctx.request(req, None)?;
        match r {
            Response::Qp {
                qpn,
                sq_entries,
                rq_entries,
                rq_offset,
                map_len,
            } => {
                let ok = fds.len() == 1
                    && ring::ring_entries(sq_entries) == Some(sq_entries)
                    && ring::ring_entries(rq_entries) == Some(rq_entries)
                    && rq_offset as usize >= ring::ring_bytes(sq_entries, WQE_SIZE)
                    && rq_offset % 64 == 0
                    && map_len as usize
                        >= rq_offset as usize + ring::ring_bytes(rq_entries, WQE_SIZE);
                if !ok {
                    return Err(Error::Protocol("bad QP reply".into()));
                }
                let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
                // SAFETY: both rings lie inside the mapping the Qp keeps.
                let (sq, rq) = unsafe {
                    (
                        Ring::new(map.ptr(), sq_entries, WQE_SIZE),
                        Ring::new(map.ptr().add(rq_offset as usize), rq_entries, WQE_SIZE),
                    )
                };
                Ok(Qp {
                    ctx: self.ctx.clone(),
                    qpn,
                    kind: a.qp_type,
                    _map: map,
                    sq,
                    rq,
                    sq_prod: 0,
                    rq_prod: 0,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    pub fn dealloc(self) -> Result<()> {
        self.dealloc_by_ref()
    }

    /// `dealloc` that leaves the PD usable when the daemon refuses (EBUSY
    /// while objects use it).
    pub fn dealloc_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DeallocPd { pd: self.handle })
    }

    /// An address handle for UD sends (`ibv_create_ah`).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let req = Request::CreateAh {
            pd: self.handle,
            attr: AhMsg::from(attr),
        };
        match self.ctx.request(req, None)?.0 {
            Response::Ah { ah } => Ok(Ah {
                ctx: self.ctx.clone(),
                handle: ah,
                attr: *attr,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// A shared receive queue of at least `max_wr` entries
    /// (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32) -> Result<Srq> {
        let req = Request::CreateSrq {
            pd: self.handle,
            max_wr,
        };
        let (r, mut fds) = self.ctx.request(req, None)?;
        match r {
            Response::Srq {
                srq,
                entries,
                map_len,
            } => {
                if fds.len() != 1
                    || ring::ring_entries(entries) != Some(entries)
                    || (map_len as usize) < ring::ring_bytes(entries, WQE_SIZE)
                {
                    return Err(Error::Protocol("bad SRQ reply".into()));
                }
                let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
                // SAFETY: the ring lies inside the mapping the Srq keeps.
                let ring = unsafe { Ring::new(map.ptr(), entries, WQE_SIZE) };
                Ok(Srq {
                    ctx: self.ctx.clone(),
                    handle: srq,
                    _map: map,
                    ring,
                    prod: 0,
                })
            }
            r => Err(unexpected(r)),
        }
    }
}

/// An address handle (daemon-side: only its owner's QPs on its PD may
/// send with it).
pub struct Ah {
    ctx: Arc<Context>,
    pub handle: u32,
    pub attr: AhAttr,
}

impl Ah {
    pub fn destroy(self) -> Result<()> {
        self.ctx.simple(Request::DestroyAh { ah: self.handle })
    }
}

/// A shared receive queue; `post_recv` writes its shared ring directly.
pub struct Srq {
    ctx: Arc<Context>,
    pub handle: u32,
    _map: Arc<Mapping>,
    ring: Ring,
    prod: u32,
}

impl Srq {
    /// `ibv_modify_srq(IBV_SRQ_LIMIT)`: once fewer than `limit` receives are
    /// left, an [`proto::AsyncEventMsg::SrqLimitReached`] comes
    /// ([`Context::get_async_event`]) and the limit disarms; 0 disarms.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.ctx.simple(Request::ModifySrq {
            srq: self.handle,
            limit,
        })
    }

    /// `ibv_query_srq`: (max WRs, armed limit, receives the daemon's
    /// transport holds — the ring may hold more not yet taken).
    pub fn query(&self) -> Result<(u32, u32, u32)> {
        match self
            .ctx
            .request(Request::QuerySrq { srq: self.handle }, None)?
            .0
        {
            Response::SrqInfo {
                max_wr,
                limit,
                pending,
            } => Ok((max_wr, limit, pending)),
            r => Err(unexpected(r)),
        }
    }

    /// Posts a raw receive WQE as it is (the daemon validates it).
    pub fn post_raw_recv(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.ring, &mut self.prod, w, &self.ctx)
    }

    /// `ibv_post_srq_recv`. Fails only when the ring is full.
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<()> {
        post_ring(
            &self.ring,
            &mut self.prod,
            &ring::encode_recv(wr),
            &self.ctx,
        )
    }

    /// The shared ring's raw bytes (pointer, length), for hostile-client
    /// tests.
    pub fn raw_ring(&self) -> (*mut u8, usize) {
        self.ring.raw_bytes()
    }

    /// Receives posted here that the daemon has not taken yet.
    pub fn pending(&self) -> u32 {
        self.prod
            .wrapping_sub(self.ring.consumer().load(Ordering::Acquire))
    }

    pub fn destroy(self) -> Result<()> {
        self.destroy_by_ref()
    }

    /// Slots in the shared ring (at least the `max_wr` asked for).
    pub fn entries(&self) -> u32 {
        self.ring.entries
    }

    /// `destroy` that leaves the object usable when the daemon refuses.
    pub fn destroy_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DestroySrq { srq: self.handle })
    }
}

fn post_ring(r: &Ring, prod: &mut u32, w: &WqeRaw, ctx: &Context) -> Result<()> {
    let cons = r.consumer().load(Ordering::Acquire);
    if prod.wrapping_sub(cons) >= r.entries {
        return Err(Error::QueueFull);
    }
    r.write(*prod, w);
    *prod = prod.wrapping_add(1);
    r.producer().store(*prod, Ordering::Release);
    // the doorbell: wake a parked engine (ring.rs, PARKED_AT; the fence
    // pairs with the daemon's between raising the flag and re-reading
    // the producer indices)
    std::sync::atomic::fence(Ordering::SeqCst);
    if r.parked().load(Ordering::SeqCst) != 0 {
        if let Some(b) = &ctx.bell {
            use std::os::fd::AsFd;
            nic::io::bell::ring_fd(b.as_fd());
        }
    }
    Ok(())
}

/// A completion queue; `poll` reads the shared ring directly.
pub struct Cq {
    ctx: Arc<Context>,
    pub handle: u32,
    _map: Arc<Mapping>,
    ring: Ring,
    cons: u32,
    /// The completion-event eventfd, once `req_notify` made one.
    events: Option<nic::io::Bell>,
}

impl Cq {
    /// Asks for a completion event (`ibv_req_notify_cq`): the next
    /// completion — with `solicited_only`, the next solicited or
    /// unsuccessful one — makes the CQ's event descriptor readable
    /// ([`Cq::get_event`], [`Cq::event_fd`]). One request, one event. As
    /// with verbs, poll once more after asking: completions that arrived
    /// before the request raise no event.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        if self.events.is_none() {
            let bell = nic::io::Bell::new()?;
            self.notify_to(bell.as_fd().as_raw_fd())?;
            self.events = Some(bell);
        }
        self.arm(solicited_only);
        Ok(())
    }

    /// Waits up to `timeout` for a completion event (`ibv_get_cq_event`
    /// and its acknowledgement in one); true when one came. Then poll.
    pub fn get_event(&mut self, timeout: Duration) -> Result<bool> {
        let bell = self.events.as_ref().ok_or_else(|| {
            Error::Protocol("no completion events asked for: req_notify first".into())
        })?;
        if bell.drain() > 0 {
            return Ok(true);
        }
        bell.wait(None, timeout);
        Ok(bell.drain() > 0)
    }

    /// The descriptor that becomes readable on a completion event (for
    /// poll/epoll, as a completion channel's fd); None before the first
    /// `req_notify`. Read it (8 bytes) or call `get_event` to clear it.
    pub fn event_fd(&self) -> Option<RawFd> {
        use std::os::fd::{AsFd, AsRawFd};
        self.events.as_ref().map(|b| b.as_fd().as_raw_fd())
    }

    /// Asks for completion events written to `fd`, an eventfd the caller
    /// owns and may share between CQs (a completion channel): the daemon
    /// gets a duplicate. Arm with [`Cq::arm`]; [`Cq::armed`] reads 0 once
    /// the daemon has fired the request.
    pub fn notify_to(&mut self, fd: RawFd) -> Result<()> {
        match self
            .ctx
            .request(Request::NotifyCq { cq: self.handle }, Some(fd))?
            .0
        {
            Response::Ok => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    /// Arms the CQ for one event on the descriptor given to
    /// [`Cq::notify_to`] (`ibv_req_notify_cq`).
    pub fn arm(&self, solicited_only: bool) {
        let arm = if solicited_only {
            ring::ARM_SOLICITED
        } else {
            ring::ARM_NEXT
        };
        self.ring.armed().store(arm, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The request word the daemon clears when it fires an event.
    pub fn armed(&self) -> u32 {
        self.ring.armed().load(Ordering::SeqCst)
    }

    /// Hands up to `max` raw completions, oldest first, to `f` and
    /// releases their slots; their count. For callers that convert CQEs to
    /// another layout (the libibverbs drop-in's `ibv_wc`).
    pub fn poll_each(&mut self, max: usize, mut f: impl FnMut(&CqeRaw)) -> usize {
        let prod = self.ring.producer().load(Ordering::Acquire);
        let avail = prod.wrapping_sub(self.cons).min(self.ring.entries) as usize;
        let n = avail.min(max);
        for _ in 0..n {
            f(&self.ring.read(self.cons));
            self.cons = self.cons.wrapping_add(1);
        }
        if n > 0 {
            self.ring.consumer().store(self.cons, Ordering::Release);
        }
        n
    }

    /// Moves up to `max` completions into `out` (`ibv_poll_cq`).
    pub fn poll(&mut self, max: usize, out: &mut Vec<Wc>) -> usize {
        self.poll_each(max, |c| out.push(ring::decode_cqe(c)))
    }

    /// Polls (spinning, then yielding) until `n` completions arrived.
    pub fn wait(&mut self, n: usize, timeout: Duration) -> Result<Vec<Wc>> {
        let t0 = Instant::now();
        let mut out = Vec::with_capacity(n);
        let mut spins = 0u32;
        while out.len() < n {
            if self.poll(n - out.len(), &mut out) == 0 {
                if t0.elapsed() > timeout {
                    return Err(Error::Timeout);
                }
                spins += 1;
                if spins > 1000 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        Ok(out)
    }

    pub fn destroy(self) -> Result<()> {
        self.destroy_by_ref()
    }

    /// `destroy` that leaves the CQ usable when the daemon refuses (a QP
    /// still uses it).
    pub fn destroy_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DestroyCq { cq: self.handle })
    }

    /// Slots in the CQ ring.
    pub fn entries(&self) -> u32 {
        self.ring.entries
    }
}

/// What `query_qp` reports.
#[derive(Clone, Debug)]
pub struct QpInfo {
    pub state: QpState,
    pub dest_qpn: u32,
    pub mtu: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
}

/// A queue pair; posts write its shared rings directly.
pub struct Qp {
    ctx: Arc<Context>,
    pub qpn: u32,
    pub kind: QpKind,
    _map: Arc<Mapping>,
    sq: Ring,
    rq: Ring,
    sq_prod: u32,
    rq_prod: u32,
}

/// How `Qp::connect` sets up an RC/UC QP (defaults as in `nic::sim`).
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams {
    pub mtu: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: u32,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            access: ACCESS_ALL,
        }
    }
}

impl Qp {
    /// Writes the WQE and rings the doorbell (a release store of the
    /// producer index). Fails only when the ring is full.
    pub fn post_send(&mut self, wr: &SendWr) -> Result<()> {
        let w = ring::encode_send(wr);
        // SAFETY: a well-formed WQE.
        unsafe { self.post_raw_send(&w) }
    }

    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<()> {
        post_ring(
            &self.rq,
            &mut self.rq_prod,
            &ring::encode_recv(wr),
            &self.ctx,
        )
    }

    /// A UD send to `remote_qpn` at `ah` with `remote_qkey` (`wr.ud` is
    /// ignored: the address travels as the AH's handle).
    pub fn post_send_ud(
        &mut self,
        wr: &SendWr,
        ah: &Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result<()> {
        let w = ring::encode_send_ud(wr, ah.handle, remote_qpn, remote_qkey);
        // SAFETY: a well-formed WQE.
        unsafe { self.post_raw_send(&w) }
    }

    /// Posts a raw receive WQE as it is (the daemon validates it).
    pub fn post_raw_recv(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.rq, &mut self.rq_prod, w, &self.ctx)
    }

    /// Slots of the send and the receive ring.
    pub fn entries(&self) -> (u32, u32) {
        (self.sq.entries, self.rq.entries)
    }

    /// Receives posted to the QP's ring that the daemon has not taken yet.
    pub fn pending_recv(&self) -> u32 {
        self.rq_prod
            .wrapping_sub(self.rq.consumer().load(Ordering::Acquire))
    }

    /// UD: RESET → INIT → RTR → RTS with `qkey` (IBA 11.2.4.2 / the UD
    /// rows of the modify table: INIT needs P_Key index, port, Q_Key).
    pub fn ud_ready(&self, qkey: u32, sq_psn: u32) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(qkey),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..Default::default()
        })
    }

    /// Posts a raw WQE as it is (for tests of the daemon's validation).
    ///
    /// # Safety
    /// Always memory-safe for this process; "unsafe" marks that the WQE is
    /// not checked here and may complete with an error.
    pub unsafe fn post_raw_send(&mut self, w: &WqeRaw) -> Result<()> {
        post_ring(&self.sq, &mut self.sq_prod, w, &self.ctx)
    }

    /// The shared rings' raw bytes: (send ring, receive ring), each as
    /// (pointer, length). For hostile-client tests.
    pub fn raw_rings(&self) -> [(*mut u8, usize); 2] {
        [self.sq.raw_bytes(), self.rq.raw_bytes()]
    }

    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        self.ctx.simple(Request::ModifyQp {
            qpn: self.qpn,
            attr: QpAttrMsg::from(attr),
        })
    }

    pub fn query(&self) -> Result<QpInfo> {
        match self
            .ctx
            .request(Request::QueryQp { qpn: self.qpn }, None)?
            .0
        {
            Response::QpInfo {
                state,
                dest_qpn,
                mtu,
                sq_psn,
                rq_psn,
                ..
            } => Ok(QpInfo {
                state: state.into(),
                dest_qpn,
                mtu,
                sq_psn,
                rq_psn,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// INIT → RTR → RTS towards `dest_qpn` at `ah` (RC or UC).
    pub fn connect(
        &self,
        p: &ConnectParams,
        ah: AhAttr,
        dest_qpn: u32,
        sq_psn: u32,
        rq_psn: u32,
    ) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(p.access),
            ..Default::default()
        })?;
        let rc = self.kind == QpKind::Rc;
        self.modify(&QpAttr {
            state: Some(QpState::Rtr),
            ah: Some(ah),
            path_mtu: Some(p.mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: rc.then_some(p.max_rd_atomic),
            min_rnr_timer: rc.then_some(p.min_rnr_timer),
            ..Default::default()
        })?;
        self.modify(&QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: rc.then_some(p.timeout),
            retry_cnt: rc.then_some(p.retry_cnt),
            rnr_retry: rc.then_some(p.rnr_retry),
            max_rd_atomic: rc.then_some(p.max_rd_atomic),
            ..Default::default()
        })
    }

    pub fn destroy(self) -> Result<()> {
        self.ctx.simple(Request::DestroyQp { qpn: self.qpn })
    }
}
