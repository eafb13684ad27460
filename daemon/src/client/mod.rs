//! The client library: verbs in Rust over a softrnic daemon. Control verbs
//! are messages on the device's Unix socket; posts and polls touch only
//! shared memory (write the WQE, release-store the producer index; read
//! CQEs up to the daemon's producer index, release-store the consumer
//! index) — no syscall on the data path.
//!
//! This module holds the device context ([`Context`]) and the library's
//! error type; [`device`] the devices in the socket directory and what
//! a device shows (GID table, node GUID); [`memory`] the PD and what is made on one (buffers, MRs,
//! MWs, QPs, AHs, SRQs); [`cq`] completion queues; [`qp`] queue pairs,
//! SRQs and address handles; [`cm`] the RDMA CM (event channels, CM IDs).

pub mod cm;
pub mod cq;
pub mod device;
pub mod memory;
pub mod qp;
mod watch;

pub use cq::*;
pub use device::*;
pub use memory::*;
pub use qp::*;

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

pub use crate::proto::QpInitAttr;
pub use crate::proto::QpKind as QpType;

/// Why a verb of the client library failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket or a mapping failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon refused the request; its reason.
    #[error("the daemon refused: {0}")]
    Daemon(String),
    /// The daemon's answer could not be used.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// A region that does not lie inside its buffer.
    #[error("[{offset:#x}, +{len:#x}) is outside the buffer of {buf_len:#x} bytes")]
    OutsideBuffer {
        /// Where the region starts in the buffer.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's length.
        buf_len: usize,
    },
    /// `Cq::get_event` before `Cq::req_notify` made the event descriptor.
    #[error("no completion events asked for: req_notify first")]
    NotArmed,
    /// `Mr::rereg_user` of a region of a `Buffer`.
    #[error("only a region of the process's own memory is reregistered")]
    NotUserMemory,
    /// The ring has no free slot.
    #[error("the work queue is full")]
    QueueFull,
    /// Nothing came in time.
    #[error("timed out")]
    Timeout,
    /// The process's own memory cannot be registered.
    #[error("{0}")]
    UserMem(crate::usermem::UserMemError),
    /// The daemon went away (killed or crashed): the device has failed.
    #[error("the daemon is gone: the device has failed")]
    DeviceGone,
}

/// Why an answer of the daemon could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A thread panicked while holding the connection.
    #[error("the connection's lock is poisoned")]
    Poisoned,
    /// The daemon closed the connection.
    #[error("the daemon closed the connection")]
    Closed,
    /// The answer is not a message of this protocol.
    #[error("malformed answer: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The daemon speaks another version.
    #[error("the daemon speaks version {0}")]
    Version(u32),
    /// An answer of another kind than the request asks for.
    #[error("unexpected answer {0}")]
    Unexpected(String),
    /// A ring whose size or place does not fit its shared memory (or
    /// whose descriptor is missing).
    #[error("the {0} answer's rings do not fit their memory")]
    BadRings(&'static str),
}

pub type Result<T> = std::result::Result<T, Error>;

/// What `query_device` reports.
#[derive(Clone, Debug, Default)]
pub struct DeviceInfo {
    pub name: String,
    pub gid: Gid,
    pub mac: EthernetAddress,
    pub mtu: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub max_sge: u32,
    /// The kernel interface the device stands beside (`rnicd --iface`,
    /// `lo` for a `--mem-pair` on loopback addresses), if any.
    pub netdev: Option<String>,
}

pub use crate::proto::PortInfo;

/// IBV_PORT_DOWN: the link is down.
pub const PORT_DOWN: u32 = 1;
/// IBV_PORT_ACTIVE: the link is up.
pub const PORT_ACTIVE: u32 = 4;

/// An open device (`ibv_context`).
pub struct Context {
    /// The thread that notices the daemon going away (first: it is stopped
    /// and joined before the socket it watches closes).
    watcher: Mutex<Option<watch::Watcher>>,
    live: Arc<watch::Liveness>,
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
            watcher: Mutex::new(None),
            live: Default::default(),
            bell: None,
            async_events: Mutex::new(None),
            sock: Mutex::new(sock),
            device: DeviceInfo::default(),
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
                netdev,
            } => {
                c.device = DeviceInfo {
                    name,
                    gid: Gid(gid),
                    mac: EthernetAddress(mac),
                    mtu,
                    max_qp_wr,
                    max_cqe,
                    max_sge,
                    netdev,
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

    /// Sends `req` and waits for its answer. On a dead device a teardown
    /// request succeeds (the object went with the device) and any other
    /// fails with [`Error::DeviceGone`], whether the death was known
    /// before or is found by this very request.
    fn request(&self, req: Request, fd: Option<RawFd>) -> Result<(Response, Vec<OwnedFd>)> {
        let teardown = watch::tears_down(&req);
        let r = if self.is_dead() {
            Err(Error::DeviceGone)
        } else {
            self.exchange(req, fd)
        };
        match r {
            Err(Error::DeviceGone) if teardown => Ok((Response::Ok, Vec::new())),
            r => r,
        }
    }

    /// One request and its answer on the control socket; a hang-up is
    /// [`Error::DeviceGone`].
    fn exchange(&self, req: Request, fd: Option<RawFd>) -> Result<(Response, Vec<OwnedFd>)> {
        let sock = self.sock.lock().map_err(|_| ProtocolError::Poisoned)?;
        let msg = proto::encode(&ReqMsg {
            v: proto::VERSION,
            req,
        });
        let fds: Vec<RawFd> = fd.into_iter().collect();
        // a hang-up seen here, before the watcher sees it, is the same death
        let gone = |e: std::io::Error| -> Error {
            if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                self.live.die();
                Error::DeviceGone
            } else {
                e.into()
            }
        };
        sock.send(&msg, &fds).map_err(gone)?;
        let mut buf = Vec::new();
        let Some(fds) = sock.recv(&mut buf).map_err(gone)? else {
            self.live.die();
            return Err(Error::DeviceGone);
        };
        let m: RespMsg = serde_json::from_slice(&buf).map_err(ProtocolError::from)?;
        if m.v != proto::VERSION {
            return Err(ProtocolError::Version(m.v).into());
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
            .map_err(|_| ProtocolError::Poisoned)?;
        if g.is_none() {
            let bell = nic::io::Bell::new()?;
            let raw = bell.as_fd().as_raw_fd();
            match self.request(Request::AsyncEventFd, Some(raw))?.0 {
                Response::Ok => {}
                r => return Err(unexpected(r)),
            }
            // the daemon's going away makes the descriptor readable too
            self.wake_on_death(bell.as_fd())?;
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
        let (r, fds) = self.request(Request::CreateCq { cqe }, None)?;
        let (cq, map, ring) = cq_ring(r, fds)?;
        Ok(Cq {
            ctx: self.clone(),
            handle: cq,
            _map: map,
            ring,
            cons: 0,
            stale: Vec::new(),
            events: None,
        })
    }

    /// `ibv_query_port`: the device has one port, 1 (another number is
    /// refused by the daemon).
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        match self.request(Request::QueryPort { port }, None)?.0 {
            Response::Port(p) => Ok(p),
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

/// The CQ ring of a `Cq` answer (`CreateCq`, `ResizeCq`): the CQ, the
/// mapping of its memfd and the ring in it, checked for size.
pub(super) fn cq_ring(r: Response, mut fds: Vec<OwnedFd>) -> Result<(u32, Arc<Mapping>, Ring)> {
    let Response::Cq {
        cq,
        entries,
        map_len,
    } = r
    else {
        return Err(unexpected(r));
    };
    if fds.len() != 1
        || ring::ring_entries(entries) != Some(entries)
        || (map_len as usize) < ring::ring_bytes(entries, CQE_SIZE)
    {
        return Err(ProtocolError::BadRings("CQ").into());
    }
    let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
    // SAFETY: the ring lies inside the mapping its owner keeps.
    let ring = unsafe { Ring::new(map.ptr(), entries, CQE_SIZE) };
    Ok((cq, map, ring))
}

fn unexpected(r: Response) -> Error {
    ProtocolError::Unexpected(format!("{r:?}")).into()
}

fn post_ring(r: &Ring, prod: &mut u32, w: &WqeRaw, ctx: &Context) -> Result<()> {
    // a dead daemon never takes the WQE: the post fails (one atomic load)
    if ctx.is_dead() {
        return Err(Error::DeviceGone);
    }
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
