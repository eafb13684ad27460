//! The daemon side: one `Server` per device (an engine on a port, a
//! control socket, the data plane hook) and one thread per client
//! connection. A client's objects are recorded against its connection;
//! every request is checked against that record, and when the connection
//! closes (exit, crash, SIGKILL) everything it owned is torn down.
//!
//! `handle` checks what every request must satisfy and dispatches it to
//! the module of its object kind: `device` (device, port, bell,
//! asynchronous events, statistics), `memory` (PD, MR, MW), `cq`, `qp`
//! (QP, AH), `srq` and `cm` (the RDMA CM: its IDs, event channels and
//! the device's CM protocol, driven from the engine's hook). `registry`
//! records what each client owns and tears it down.

pub mod cm;
mod cq;
mod device;
mod error;
mod memory;
mod qp;
mod registry;
mod srq;

pub use error::{Object, RequestError};

use crate::dataplane::DataPlane;
use ipc::proto::{self, ReqMsg, Request, RespMsg, Response, Stats};
use ipc::shm::{Listener, Mapping, SeqPacket};
use nic::device::Rnic;
use nic::engine::{Device, Engine, EngineConfig, Park};
use nic::io::Port;
use nic::transport::RnicConfig;
use registry::{with_owned, Registry, MAX_OBJECTS};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use wire::Gid;

/// Largest work queue a client may ask for.
pub const MAX_QP_WR: u32 = 16384;
/// Largest completion queue a client may ask for: 2^22 entries (128 MiB
/// of ring at most, in memory as it is written), of the order a RoCE
/// NIC reports (ConnectX: 2^22 - 1). libfabric's `ofi_rxm` sizes its CQ
/// for every peer of its universe (1024 by default) at once: 262144
/// entries.
pub const MAX_CQE: u32 = ipc::ring::MAX_ENTRIES;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub name: String,
    pub sock_dir: PathBuf,
    /// Permissions of the socket file.
    pub mode: u32,
    pub gid: Gid,
    /// The kernel interface the device stands beside, as an rxe device
    /// names its netdev (`rnicd --iface`; `lo` for a `--mem-pair` on
    /// loopback addresses); None when there is none.
    pub netdev: Option<String>,
    pub engine: EngineConfig,
    /// Hand clients the engine's bell (off: they never ring it, and a post
    /// after idling waits for the park to end — for comparison).
    pub bell: bool,
    /// The CM's timers (`rnicd --cm-response-timeout`, `--cm-retries`).
    pub cm: CmTimers,
    /// The DCQCN reaction point of the device's QPs (`rnicd --dcqcn-rp`,
    /// mlx5's `ecn/roce_rp/enable`): off, a received CNP is counted in
    /// `rp_cnp_ignored` and cuts no rate.
    pub dcqcn_rp: bool,
    /// The link rate DCQCN's values were made for (`rnicd
    /// --dcqcn-reference`): on a port of another line rate they are
    /// scaled by s = reference / line rate (`CcConfig::scaled`: times ×
    /// s, rates ÷ s). `None`: used as they are.
    pub dcqcn_reference_bps: Option<u64>,
}

/// The CM timers of a device's REQs (IBA 12.6.5): how long each side
/// waits for the other's answer (4.096 µs × 2^`response_timeout`) and how
/// often REQ, REP and DREQ are sent again before the attempt ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmTimers {
    /// The REQ's remote and local CM response timeout (5 bits).
    pub response_timeout: u8,
    /// The REQ's Max CM Retries (4 bits).
    pub max_retries: u8,
}

impl Default for CmTimers {
    /// Linux's rdma_cm: response timeout 20 (about 4.3 s), 15 retries
    /// (a peer that never answers is given up after about 70 s).
    fn default() -> Self {
        CmTimers {
            response_timeout: 20,
            max_retries: 15,
        }
    }
}

struct Shared {
    cfg: ServerConfig,
    dev: Device,
    /// The engine's bell, whose duplicates clients ring (None: no eventfd).
    bell: Option<Arc<nic::io::Bell>>,
    dp: Arc<Mutex<DataPlane>>,
    reg: Mutex<Registry>,
    mac: [u8; 6],
    mtu: u32,
    /// The device's RDMA CM.
    cm: Arc<Mutex<cm::service::CmService>>,
    stop: AtomicBool,
}

impl Shared {
    fn cm_arc(&self) -> Arc<Mutex<cm::service::CmService>> {
        self.cm.clone()
    }

    /// The data plane, for a control thread. The engine never waits for
    /// this lock: while a control thread holds it the engine parks (it
    /// must not spin at a real-time priority on the CPU the holder needs
    /// to finish), and the guard wakes it when the lock is let go.
    fn dataplane(&self) -> DpGuard<'_> {
        DpGuard {
            guard: Some(self.dp.lock().expect("dp")),
            bell: self.bell.as_deref(),
        }
    }
}

/// The data plane's lock held by a control thread; letting it go rings
/// the engine's bell if the engine parked meanwhile.
struct DpGuard<'a> {
    guard: Option<std::sync::MutexGuard<'a, DataPlane>>,
    bell: Option<&'a nic::io::Bell>,
}

impl std::ops::Deref for DpGuard<'_> {
    type Target = DataPlane;
    fn deref(&self) -> &DataPlane {
        self.guard.as_deref().expect("held until drop")
    }
}

impl std::ops::DerefMut for DpGuard<'_> {
    fn deref_mut(&mut self) -> &mut DataPlane {
        self.guard.as_deref_mut().expect("held until drop")
    }
}

impl Drop for DpGuard<'_> {
    fn drop(&mut self) {
        // unlock first, so the woken engine finds the lock free
        drop(self.guard.take());
        if let Some(b) = self.bell {
            b.ring_if_parked();
        }
    }
}

/// The data plane as the engine's hook: each turn polls the rings; before
/// the engine parks, the rings' "parked" flags go up (and come down after).
/// The engine thread never blocks on the data plane's lock (a control
/// thread may hold it): it does no data-plane work that turn and may park
/// (a real-time engine spinning on the lock would keep the holder off its
/// CPU: a priority inversion that stalled runs for tens of milliseconds);
/// the holder's [`DpGuard`] rings the bell when it lets go. Flags it could
/// not lower are lowered next turn (the data plane knows whether they are
/// up).
struct DpHook {
    dp: Arc<Mutex<DataPlane>>,
    cm: Arc<Mutex<cm::service::CmService>>,
    /// The engine's `self_wake`: how short its parks are while it shares
    /// its CPU with a client (zero: never shortened).
    self_wake: std::time::Duration,
}

impl nic::engine::EngineHook for DpHook {
    fn turn(&mut self, r: &mut Rnic) -> usize {
        // the CM: MADs from QP 1, its timers, MADs to QP 1 (a control
        // thread holding the lock pumps it itself afterwards)
        if let Ok(mut c) = self.cm.try_lock() {
            c.pump(r);
        }
        match self.dp.try_lock() {
            Ok(mut d) => {
                d.end_park();
                d.turn(r)
            }
            // a control thread is adding or removing rings: no work here;
            // its guard wakes the engine when it is done
            Err(_) => 0,
        }
    }

    /// What the turn's frames and timers completed goes into the CQ
    /// rings now, not at the next turn: a client polling in a loop sees
    /// it a turn sooner.
    fn after_turn(&mut self, r: &mut Rnic) -> usize {
        match self.dp.try_lock() {
            Ok(mut d) => d.complete(r),
            Err(_) => 0,
        }
    }

    fn before_park(&mut self, _: &mut Rnic, park: &Park) -> bool {
        match self.dp.try_lock() {
            Ok(mut d) => d.announce_park(park),
            // held by a control thread: park, so the holder gets the CPU;
            // its guard rings the bell (the engine has announced its park)
            // and `poll_timeout` bounds the park meanwhile
            Err(_) => true,
        }
    }

    fn after_park(&mut self, _: &mut Rnic) {
        if let Ok(mut d) = self.dp.try_lock() {
            d.end_park();
        }
    }

    /// The CM's timers, and a full CQ ring that the client empties
    /// without ringing; a lock held by the control thread counts as work
    /// soon.
    fn poll_timeout(&mut self, r: &Rnic) -> Option<nic::Instant> {
        let cm = match self.cm.try_lock() {
            Ok(c) => c.poll_timeout(),
            Err(_) => Some(r.last_now()),
        };
        let now = r.last_now();
        let (backlog, near) = self
            .dp
            .try_lock()
            .map_or((true, false), |d| (d.backlogged(), d.shares_cpu(now)));
        let soon = backlog.then(|| now + nic::engine::BACKLOG_PARK);
        // sharing a CPU with a client: park short, so that the client may
        // leave its wakes to the engine's timer (ipc::doorbell)
        let near = (near && !self.self_wake.is_zero()).then(|| now + self.self_wake);
        cm.into_iter().chain(soon).chain(near).min()
    }
}

/// A client's completion-event descriptor must be an eventfd, and the
/// daemon never blocks on it: a full counter (a hostile client can fill
/// it) makes a write fail with EAGAIN instead of waiting.
fn event_fd(fd: &OwnedFd) -> Result<(), RequestError> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(RequestError::Descriptor)?;
    if link.to_string_lossy() != "anon_inode:[eventfd]" {
        return Err(RequestError::NotEventFd(link.display().to_string()));
    }
    // SAFETY: fcntl(2) on a descriptor we own; no memory is passed.
    let ok = unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        fl >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(RequestError::Descriptor(std::io::Error::last_os_error()))
    }
}

/// A running device.
pub struct Server {
    sh: Arc<Shared>,
    engine: Option<Engine>,
    accept: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Server {
    /// Starts the engine on `port` and listens on `<sock_dir>/<name>.sock`.
    pub fn start(port: Box<dyn Port>, cfg: ServerConfig) -> std::io::Result<Server> {
        let mut v = Server::start_many(vec![(port, cfg)], false)?;
        Ok(v.pop().expect("one server"))
    }

    /// Starts a device per `(port, config)`: each with an engine thread of
    /// its own, or — `one_thread` — all on ONE engine thread
    /// (`Engine::start_group`, pinned and tuned by the first config's
    /// engine settings), e.g. both ends of an in-memory wire on a machine
    /// with few cores.
    pub fn start_many(
        items: Vec<(Box<dyn Port>, ServerConfig)>,
        one_thread: bool,
    ) -> std::io::Result<Vec<Server>> {
        let mut members = Vec::new();
        let mut rest = Vec::new();
        for (port, cfg) in items {
            let mac = port.mac();
            let mtu = port.mtu() as u32;
            let mut rc = RnicConfig::new(mac, cfg.gid);
            rc.seed = rand::random();
            if let Some(s) = dcqcn_scale(cfg.dcqcn_reference_bps, port.link_speed_bps()) {
                rc.cc = rc.cc.scaled(s);
            }
            if !cfg.dcqcn_rp {
                rc.cc.dcqcn = None;
            }
            let rnic = Rnic::new(rc);
            let dp = Arc::new(Mutex::new(DataPlane::default()));
            let ipv6 = cfg.gid.to_ipv4().is_none();
            let ib_mtu = nic::device::ib_mtu_for_ip_mtu(mtu as usize, ipv6);
            let cms = Arc::new(Mutex::new(cm::service::CmService::new(
                cfg.name.clone(),
                cfg.gid,
                mac,
                ib_mtu,
                cfg.cm,
            )));
            cm::register_local(cfg.gid, mac.0);
            let hook: nic::engine::TurnHook = Box::new(DpHook {
                dp: dp.clone(),
                cm: cms.clone(),
                self_wake: cfg.engine.self_wake,
            });
            members.push((rnic, port, Some(hook)));
            rest.push((dp, mac, mtu, cfg, cms));
        }
        let engines: Vec<Engine> = match rest.first() {
            Some((_, _, _, first, _)) if one_thread => {
                let mut ecfg = first.engine.clone();
                ecfg.name = format!("rnicd-{}", first.name);
                Engine::start_group(members, ecfg)
            }
            _ => members
                .into_iter()
                .zip(&rest)
                .map(|((rnic, port, hook), (_, _, _, cfg, _))| {
                    let mut ecfg = cfg.engine.clone();
                    ecfg.name = format!("rnicd-{}", cfg.name);
                    Engine::start_with_hook(rnic, port, ecfg, hook)
                })
                .collect(),
        };
        let mut servers = Vec::new();
        for (engine, (dp, mac, mtu, cfg, cms)) in engines.into_iter().zip(rest) {
            std::fs::create_dir_all(&cfg.sock_dir)?;
            let path = cfg.sock_dir.join(format!("{}.sock", cfg.name));
            let listener = Listener::bind(&path, cfg.mode)?;
            let sh = Arc::new(Shared {
                dev: engine.device(),
                bell: engine.bell(),
                dp,
                reg: Mutex::new(Registry::default()),
                mac: mac.0,
                mtu,
                cm: cms,
                stop: AtomicBool::new(false),
                cfg,
            });
            let s2 = sh.clone();
            let accept = std::thread::Builder::new()
                .name("rnicd-accept".into())
                .spawn(move || accept_loop(s2, listener))?;
            servers.push(Server {
                sh,
                engine: Some(engine),
                accept: Some(accept),
                path,
            });
        }
        Ok(servers)
    }

    /// The device's engine ([`nic::engine::Device`]): for a server hosted
    /// in its clients' process, their threads turn it
    /// ([`nic::engine::EngineConfig::callers_turn`]).
    pub fn engine_device(&self) -> nic::engine::Device {
        self.sh.dev.clone()
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The scheduling the device's engine thread got ([`Engine::priority`]).
    pub fn engine_priority(&self) -> Option<Result<nic::engine::Granted, nic::engine::SchedError>> {
        self.engine.as_ref().and_then(|e| e.priority())
    }

    pub fn stats(&self) -> Stats {
        registry::stats(&self.sh)
    }

    /// Stops accepting, stops the engine and removes the socket.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.sh.stop.store(true, Ordering::Release);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        if let Some(e) = self.engine.take() {
            e.stop();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop(sh: Arc<Shared>, l: Listener) {
    while !sh.stop.load(Ordering::Acquire) {
        match l.accept_timeout(100) {
            Ok(Some(sock)) => {
                let s2 = sh.clone();
                let _ = std::thread::Builder::new()
                    .name("rnicd-client".into())
                    .spawn(move || client_loop(s2, sock));
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("rnicd: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn client_loop(sh: Arc<Shared>, sock: SeqPacket) {
    // A client's requests (open, create, modify) wait for this thread at
    // every step. Among programs that busy-poll every core, a thread of
    // the default slice waits out one of theirs (milliseconds) at each
    // wake; a short slice runs it first, as it asks for the CPU only for
    // the length of one request. No privilege needed; where the kernel
    // refuses, the default stays.
    let _ =
        nic::engine::apply_priority(nic::engine::Priority::ShortSlice(nic::engine::SHORT_SLICE));
    let id = {
        let mut r = sh.reg.lock().expect("registry");
        r.next_id += 1;
        let id = r.next_id;
        let pid = sock.peer_pid();
        r.clients.insert(
            id,
            registry::Owned {
                pid,
                ..Default::default()
            },
        );
        id
    };
    // every connected client hears the unaffiliated (port) events
    sh.dataplane().events.entry(id).or_default();
    let mut buf = Vec::new();
    loop {
        let fds = match sock.recv(&mut buf) {
            Ok(Some(fds)) => fds,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let _ = reply(&sock, Response::Error { msg: e.to_string() }, None);
                continue;
            }
            Err(_) => break,
        };
        let (resp, fd) = match serde_json::from_slice::<ReqMsg>(&buf) {
            Ok(m) if m.v != proto::VERSION => (
                Response::Error {
                    msg: format!(
                        "protocol version {} (this daemon speaks {})",
                        m.v,
                        proto::VERSION
                    ),
                },
                None,
            ),
            Ok(m) => match handle(&sh, id, m.req, fds) {
                Ok(x) => x,
                Err(e) => (Response::Error { msg: e.to_string() }, None),
            },
            Err(e) => (
                Response::Error {
                    msg: format!("malformed request: {e}"),
                },
                None,
            ),
        };
        if reply(&sock, resp, fd.as_ref()).is_err() {
            break;
        }
    }
    registry::cleanup(&sh, id);
}

fn reply(sock: &SeqPacket, resp: Response, fd: Option<&Attach>) -> std::io::Result<()> {
    let m = RespMsg {
        v: proto::VERSION,
        resp,
    };
    let fds: Vec<_> = fd
        .map(|a| match a {
            Attach::Map(m) => m.fd(),
            Attach::Fd(f) => f.as_raw_fd(),
        })
        .into_iter()
        .collect();
    sock.send(&proto::encode(&m), &fds)
}

/// An answer and what travels with it (SCM_RIGHTS).
type Reply = (Response, Option<Attach>);

enum Attach {
    Map(Arc<Mapping>),
    Fd(OwnedFd),
}

/// Runs `f` on the engine thread, with the transport.
fn call<R: Send + 'static>(
    sh: &Shared,
    f: impl FnOnce(&mut Rnic) -> R + Send + 'static,
) -> Result<R, RequestError> {
    Ok(sh.dev.call(f)?)
}

/// The answer to a request that only says it was done.
fn ok() -> Result<Reply, RequestError> {
    Ok((Response::Ok, None))
}

/// Checks what every request must satisfy (descriptors only where the
/// request takes them; no new objects beyond [`MAX_OBJECTS`]) and hands
/// it to the handler of its object kind.
fn handle(sh: &Shared, id: u64, req: Request, fds: Vec<OwnedFd>) -> Result<Reply, RequestError> {
    if !matches!(
        req,
        Request::RegMr { .. }
            | Request::ReregMr { .. }
            | Request::NotifyCq { .. }
            | Request::AsyncEventFd
    ) && !fds.is_empty()
    {
        return Err(RequestError::UnexpectedFds);
    }
    let creates = matches!(
        req,
        Request::AllocPd
            | Request::RegMr { .. }
            | Request::CreateCq { .. }
            | Request::CreateQp { .. }
            | Request::CreateAh { .. }
            | Request::CreateSrq { .. }
    );
    if creates && with_owned(sh, id, |o| o.count()) >= MAX_OBJECTS {
        return Err(RequestError::TooManyObjects);
    }
    match req {
        Request::QueryDevice => device::query_device(sh),
        Request::QueryPort { port } => device::query_port(sh, port),
        Request::Bell => device::bell(sh),
        Request::Doorbells => device::doorbells(sh, id),
        Request::AsyncEventFd => device::async_event_fd(sh, id, fds),
        Request::GetAsyncEvents => device::get_async_events(sh, id),
        Request::Stats => Ok((Response::Stats(registry::stats(sh)), None)),
        Request::CcStates { from_qpn } => device::cc_states(sh, from_qpn),
        Request::AllocPd => memory::alloc_pd(sh, id),
        Request::DeallocPd { pd } => memory::dealloc_pd(sh, id, pd),
        Request::RegMr {
            pd,
            offset,
            addr,
            len,
            access,
        } => {
            let m = (pd, offset, addr, len, access).into();
            memory::reg_mr(sh, id, fds, None, m)
        }
        Request::DeregMr { lkey } => memory::dereg_mr(sh, id, lkey),
        Request::ReregMr {
            lkey,
            pd,
            offset,
            addr,
            len,
            access,
        } => {
            let m = (pd, offset, addr, len, access).into();
            memory::reg_mr(sh, id, fds, Some(lkey), m)
        }
        Request::AllocMw { pd, mw_type } => memory::alloc_mw(sh, id, pd, mw_type),
        Request::DeallocMw { handle } => memory::dealloc_mw(sh, id, handle),
        Request::CreateCq { cqe } => cq::create_cq(sh, id, cqe),
        Request::NotifyCq { cq } => cq::notify_cq(sh, id, cq, fds),
        Request::DestroyCq { cq } => cq::destroy_cq(sh, id, cq),
        Request::ResizeCq { cq, cqe } => cq::resize_cq(sh, id, cq, cqe),
        Request::CreateQp { pd, init } => qp::create_qp(sh, id, pd, init),
        Request::ModifyQp { qpn, attr } => qp::modify_qp(sh, id, qpn, &attr),
        Request::QueryQp { qpn } => qp::query_qp(sh, id, qpn),
        Request::DestroyQp { qpn } => qp::destroy_qp(sh, id, qpn),
        Request::CreateAh { pd, attr } => qp::create_ah(sh, id, pd, &attr),
        Request::DestroyAh { ah } => qp::destroy_ah(sh, id, ah),
        Request::CreateSrq { pd, max_wr } => srq::create_srq(sh, id, pd, max_wr),
        Request::ModifySrq { srq, limit } => srq::modify_srq(sh, id, srq, limit),
        Request::QuerySrq { srq } => srq::query_srq(sh, id, srq),
        Request::DestroySrq { srq } => srq::destroy_srq(sh, id, srq),
        Request::Cm(req) => cm::handle(sh, id, req),
    }
}

/// The one descriptor a request takes (`op` and `what` name it in the
/// error).
fn one_fd(
    mut fds: Vec<OwnedFd>,
    op: &'static str,
    what: &'static str,
) -> Result<OwnedFd, RequestError> {
    match (fds.pop(), fds.is_empty()) {
        (Some(fd), true) => Ok(fd),
        _ => Err(RequestError::OneFd { op, what }),
    }
}

/// s = reference / line rate for [`ServerConfig::dcqcn_reference_bps`]
/// (`None`: no reference, or a port that reports no speed).
pub fn dcqcn_scale(reference_bps: Option<u64>, line_bps: u64) -> Option<f64> {
    let r = reference_bps?;
    (line_bps > 0 && r > 0).then(|| r as f64 / line_bps as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::engine::EngineHook;
    use nic::io::Bell;
    use nic::transport::RnicConfig;

    const PARK: Park = Park {
        time: std::time::Duration::from_millis(100),
        self_wake: false,
        cpu: None,
    };

    fn hook() -> (DpHook, Arc<Mutex<DataPlane>>, Rnic) {
        let dp = Arc::new(Mutex::new(DataPlane::default()));
        let gid = Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 9));
        let mac = wire::EthernetAddress([2, 0, 0, 0, 0, 9]);
        let cm = cm::service::CmService::new("t".into(), gid, mac, 4096, CmTimers::default());
        let h = DpHook {
            dp: dp.clone(),
            cm: Arc::new(Mutex::new(cm)),
            self_wake: std::time::Duration::from_micros(50),
        };
        (h, dp, Rnic::new(RnicConfig::new(mac, gid)))
    }

    #[test]
    fn dcqcn_scales_by_the_reference_over_the_line_rate() {
        assert_eq!(dcqcn_scale(Some(25_000_000_000), 100_000_000), Some(250.0));
        assert_eq!(dcqcn_scale(None, 100_000_000), None);
        assert_eq!(dcqcn_scale(Some(25_000_000_000), 0), None);
    }

    #[test]
    fn a_control_thread_holding_the_data_plane_lets_the_engine_park() {
        let (mut h, dp, mut r) = hook();
        let held = dp.lock().unwrap();
        // no work to report (a spinning real-time engine would keep the
        // holder off its CPU), and the park may go ahead, bounded
        assert_eq!(h.turn(&mut r), 0);
        assert!(h.before_park(&mut r, &PARK));
        assert!(h.poll_timeout(&r).is_some(), "the park is bounded");
        drop(held);
        assert!(h.before_park(&mut r, &PARK), "an idle data plane parks too");
        h.after_park(&mut r);
    }

    #[test]
    fn an_engine_that_shares_its_cpu_with_a_client_parks_short() {
        let (mut h, dp, mut r) = hook();
        let page = dp.lock().unwrap().doorbell_page(1).unwrap();
        // SAFETY: the data plane keeps the page mapped for the test.
        let db = unsafe { ipc::doorbell::Doorbells::new(page.ptr()) };
        let idle = h.poll_timeout(&r);
        assert!(idle.is_none(), "nothing due: a long park");
        let here = nic::engine::current_cpu().expect("sched_getcpu");
        assert!(core_affinity::set_for_current(core_affinity::CoreId {
            id: here as usize
        }));
        db.near()
            .store(here + 1, std::sync::atomic::Ordering::SeqCst);
        h.turn(&mut r);
        assert_eq!(h.poll_timeout(&r), Some(r.last_now() + h.self_wake));
        // without a self_wake the parks stay long
        h.self_wake = std::time::Duration::ZERO;
        assert!(h.poll_timeout(&r).is_none());
    }

    #[test]
    fn letting_go_of_the_data_plane_wakes_a_parked_engine() {
        let dp = Mutex::new(DataPlane::default());
        let bell = Bell::new().unwrap();
        let guard = |b| DpGuard {
            guard: Some(dp.lock().unwrap()),
            bell: Some(b),
        };
        // the engine awake: no ring (no syscall)
        drop(guard(&bell));
        assert_eq!(bell.drain(), 0);
        // the engine announced its park: one ring, the lock already free
        bell.announce();
        drop(guard(&bell));
        assert!(dp.try_lock().is_ok());
        assert_eq!(bell.drain(), 1);
    }
}
