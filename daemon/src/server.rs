//! The daemon side: one `Server` per device (an engine on a port, a
//! control socket, the data plane hook) and one thread per client
//! connection. A client's objects are recorded against its connection;
//! every request is checked against that record, and when the connection
//! closes (exit, crash, SIGKILL) everything it owned is torn down.

use crate::dataplane::{Ah, CqRing, DataPlane, QpRings, SrqRing};
use crate::proto::{self, QpKind, ReqMsg, Request, RespMsg, Response, Stats};
use crate::ring::{self, Ring, CQE_SIZE, WQE_SIZE};
use crate::shm::{Listener, Mapping, SeqPacket};
use nic::device::Rnic;
use nic::engine::{Device, Engine, EngineConfig};
use nic::io::Port;
use nic::transport::{QpInit, RnicConfig, FIRST_QPN};
use nic::verbs::{access, Memory, MwType, QpAttr, QpState, QpType, Wc, MAX_SGE};
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use wire::Gid;

/// Largest work queue a client may ask for.
pub const MAX_QP_WR: u32 = 16384;
pub const MAX_CQE: u32 = 65536;
/// Objects one client may hold (a bound, not a quota system).
const MAX_OBJECTS: usize = 65536;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub name: String,
    pub sock_dir: PathBuf,
    /// Permissions of the socket file.
    pub mode: u32,
    pub gid: Gid,
    pub engine: EngineConfig,
    /// Hand clients the engine's bell (off: they never ring it, and a post
    /// after idling waits for the park to end — for comparison).
    pub bell: bool,
}

#[derive(Default)]
struct Owned {
    pds: HashSet<u32>,
    /// lkey → PD
    mrs: HashMap<u32, u32>,
    /// memory window handle → PD
    mws: HashMap<u32, u32>,
    cqs: HashSet<u32>,
    /// QPN → (PD, send CQ, recv CQ, SRQ)
    qps: HashMap<u32, (u32, u32, u32, Option<u32>)>,
    /// AH handle → PD
    ahs: HashMap<u32, u32>,
    /// SRQ → PD
    srqs: HashMap<u32, u32>,
}

impl Owned {
    fn count(&self) -> usize {
        self.pds.len()
            + self.mrs.len()
            + self.mws.len()
            + self.cqs.len()
            + self.qps.len()
            + self.ahs.len()
            + self.srqs.len()
    }
}

#[derive(Default)]
struct Registry {
    clients: HashMap<u64, Owned>,
    next_id: u64,
    pd_pool: Vec<u32>,
    /// (CQN, capacity) of transport CQs no client holds (the transport has
    /// no destroy_cq: they are drained and reused).
    cq_pool: Vec<(u32, usize)>,
    /// CQN → the capacity it was created with.
    cq_cap: HashMap<u32, usize>,
    max_qpn: u32,
    reaped: u64,
    /// The last AH handle handed out (handles are daemon-wide, never 0).
    last_ah: u32,
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
    stop: AtomicBool,
}

/// The data plane as the engine's hook: each turn polls the rings; before
/// the engine parks, the rings' "parked" flags go up (and come down after).
/// The engine thread never blocks on the data plane's lock (the control
/// thread may hold it): flags it could not lower are lowered next turn.
struct DpHook {
    dp: Arc<Mutex<DataPlane>>,
    flags_up: bool,
}

impl nic::engine::EngineHook for DpHook {
    fn turn(&mut self, r: &mut Rnic) -> usize {
        match self.dp.try_lock() {
            Ok(mut d) => {
                if self.flags_up {
                    d.end_park();
                    self.flags_up = false;
                }
                d.turn(r)
            }
            // the control thread is adding or removing rings: come back soon
            Err(_) => 1,
        }
    }

    fn before_park(&mut self, _: &mut Rnic) -> bool {
        match self.dp.try_lock() {
            Ok(mut d) => {
                self.flags_up = true;
                d.announce_park()
            }
            Err(_) => false,
        }
    }

    fn after_park(&mut self, _: &mut Rnic) {
        if let Ok(mut d) = self.dp.try_lock() {
            d.end_park();
            self.flags_up = false;
        }
    }
}

/// A client's completion-event descriptor must be an eventfd, and the
/// daemon never blocks on it: a full counter (a hostile client can fill
/// it) makes a write fail with EAGAIN instead of waiting.
fn event_fd(fd: &OwnedFd) -> Result<(), String> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("the descriptor: {e}"))?;
    if link.to_string_lossy() != "anon_inode:[eventfd]" {
        return Err(format!("not an eventfd: {}", link.display()));
    }
    // SAFETY: fcntl on a descriptor we own.
    let ok = unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        fl >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(format!("fcntl: {}", std::io::Error::last_os_error()))
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
            let rnic = Rnic::new(rc);
            let dp = Arc::new(Mutex::new(DataPlane::default()));
            let hook: nic::engine::TurnHook = Box::new(DpHook {
                dp: dp.clone(),
                flags_up: false,
            });
            members.push((rnic, port, Some(hook)));
            rest.push((dp, mac, mtu, cfg));
        }
        let engines: Vec<Engine> = match rest.first() {
            Some((_, _, _, first)) if one_thread => {
                let mut ecfg = first.engine.clone();
                ecfg.name = format!("rnicd-{}", first.name);
                Engine::start_group(members, ecfg)
            }
            _ => members
                .into_iter()
                .zip(&rest)
                .map(|((rnic, port, hook), (_, _, _, cfg))| {
                    let mut ecfg = cfg.engine.clone();
                    ecfg.name = format!("rnicd-{}", cfg.name);
                    Engine::start_with_hook(rnic, port, ecfg, hook)
                })
                .collect(),
        };
        let mut servers = Vec::new();
        for (engine, (dp, mac, mtu, cfg)) in engines.into_iter().zip(rest) {
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

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> Stats {
        stats(&self.sh)
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
    let id = {
        let mut r = sh.reg.lock().expect("registry");
        r.next_id += 1;
        let id = r.next_id;
        r.clients.insert(id, Owned::default());
        id
    };
    // every connected client hears the unaffiliated (port) events
    sh.dp.lock().expect("dp").events.entry(id).or_default();
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
                Err(msg) => (Response::Error { msg }, None),
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
    cleanup(&sh, id);
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

fn call<R: Send + 'static>(
    sh: &Shared,
    f: impl FnOnce(&mut Rnic) -> R + Send + 'static,
) -> Result<R, String> {
    sh.dev.call(f).map_err(|e| e.to_string())
}

fn with_owned<R>(sh: &Shared, id: u64, f: impl FnOnce(&mut Owned) -> R) -> R {
    let mut r = sh.reg.lock().expect("registry");
    let o = r.clients.entry(id).or_default();
    f(o)
}

fn handle(sh: &Shared, id: u64, req: Request, mut fds: Vec<OwnedFd>) -> Result<Reply, String> {
    let ok = |r: Response| Ok((r, None));
    if !matches!(
        req,
        Request::RegMr { .. } | Request::NotifyCq { .. } | Request::AsyncEventFd
    ) && !fds.is_empty()
    {
        return Err("unexpected file descriptors".into());
    }
    if with_owned(sh, id, |o| o.count()) >= MAX_OBJECTS
        && matches!(
            req,
            Request::AllocPd
                | Request::RegMr { .. }
                | Request::CreateCq { .. }
                | Request::CreateQp { .. }
                | Request::CreateAh { .. }
                | Request::CreateSrq { .. }
        )
    {
        return Err("too many objects".into());
    }
    match req {
        Request::Bell => {
            if !sh.cfg.bell {
                return Err("the bell is off (rnicd --no-bell)".into());
            }
            let bell = sh.bell.as_ref().ok_or("this engine has no bell")?;
            let fd = bell.try_clone_fd().map_err(|e| e.to_string())?;
            Ok((Response::Ok, Some(Attach::Fd(fd))))
        }
        Request::QueryDevice => ok(Response::Device {
            name: sh.cfg.name.clone(),
            gid: sh.cfg.gid.0,
            mac: sh.mac,
            mtu: sh.mtu,
            max_qp_wr: MAX_QP_WR,
            max_cqe: MAX_CQE,
            max_sge: MAX_SGE as u32,
        }),
        Request::AllocPd => {
            let pooled = sh.reg.lock().expect("registry").pd_pool.pop();
            let pd = match pooled {
                Some(pd) => pd,
                None => call(sh, |r| r.alloc_pd())?,
            };
            with_owned(sh, id, |o| o.pds.insert(pd));
            ok(Response::Pd { pd })
        }
        Request::DeallocPd { pd } => {
            let mut r = sh.reg.lock().expect("registry");
            let o = r.clients.entry(id).or_default();
            if !o.pds.contains(&pd) {
                return Err(format!("no PD {pd}"));
            }
            if o.mrs.values().any(|p| *p == pd)
                || o.mws.values().any(|p| *p == pd)
                || o.qps.values().any(|q| q.0 == pd)
                || o.ahs.values().any(|p| *p == pd)
                || o.srqs.values().any(|p| *p == pd)
            {
                return Err("the PD still has MRs, MWs, QPs, AHs or SRQs".into());
            }
            o.pds.remove(&pd);
            r.pd_pool.push(pd);
            ok(Response::Ok)
        }
        Request::RegMr {
            pd,
            offset,
            addr,
            len,
            access: acc,
        } => {
            if fds.len() != 1 {
                return Err("reg_mr needs exactly one memfd".into());
            }
            if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
                return Err(format!("no PD {pd}"));
            }
            let all = access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC
                | access::MW_BIND;
            if acc & !all != 0 {
                return Err("unknown access flags".into());
            }
            if len == 0 || len > crate::shm::MAX_MAP as u64 || offset.checked_add(len).is_none() {
                return Err("bad region".into());
            }
            if addr.checked_add(len).is_none() {
                return Err("bad address".into());
            }
            // only the region's pages are mapped: the memfd may be a
            // client's sparse file of all its registered pages
            let (map, at) = Mapping::window_from_untrusted_fd(fds.remove(0), offset, len as usize)
                .map_err(|e| e.to_string())?;
            let mem: Arc<dyn Memory> = Arc::new(map);
            let (lkey, rkey) = call(sh, move |r| r.reg_mr(pd, mem, at, addr, len, acc))?
                .map_err(|e| e.to_string())?;
            with_owned(sh, id, |o| o.mrs.insert(lkey, pd));
            ok(Response::Mr { lkey, rkey })
        }
        Request::DeregMr { lkey } => {
            if !with_owned(sh, id, |o| o.mrs.contains_key(&lkey)) {
                return Err(format!("no MR {lkey:#x}"));
            }
            // refused while memory windows are bound to it
            call(sh, move |r| r.dereg_mr(lkey))?.map_err(|e| e.to_string())?;
            with_owned(sh, id, |o| o.mrs.remove(&lkey));
            ok(Response::Ok)
        }
        Request::AllocMw { pd, mw_type } => {
            if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
                return Err(format!("no PD {pd}"));
            }
            let kind = MwType::from_ibv(mw_type).ok_or("unknown memory window type")?;
            let rkey = call(sh, move |r| r.alloc_mw(pd, kind))?.map_err(|e| e.to_string())?;
            with_owned(sh, id, |o| o.mws.insert(rkey >> 8, pd));
            ok(Response::Mw { rkey })
        }
        Request::DeallocMw { handle } => {
            if with_owned(sh, id, |o| o.mws.remove(&handle)).is_none() {
                return Err(format!("no MW {handle:#x}"));
            }
            call(sh, move |r| r.dealloc_mw(handle))?.map_err(|e| e.to_string())?;
            ok(Response::Ok)
        }
        Request::CreateCq { cqe } => {
            let entries = ring::ring_entries(cqe).ok_or("bad CQ size")?;
            let map = Arc::new(
                Mapping::create("softrnic-cq", ring::ring_bytes(entries, CQE_SIZE))
                    .map_err(|e| e.to_string())?,
            );
            let cap = entries as usize * 2;
            let pooled = {
                let mut r = sh.reg.lock().expect("registry");
                let i = r.cq_pool.iter().position(|(_, c)| *c >= cap);
                i.map(|i| r.cq_pool.swap_remove(i))
            };
            let cq = match pooled {
                Some((cq, _)) => cq,
                None => {
                    let cq = call(sh, move |r| r.create_cq(cap))?;
                    sh.reg.lock().expect("registry").cq_cap.insert(cq, cap);
                    cq
                }
            };
            // SAFETY: the ring covers the mapping, which CqRing keeps alive.
            let ring = unsafe { Ring::new(map.ptr(), entries, CQE_SIZE) };
            sh.dp.lock().expect("dp").add_cq(
                cq,
                CqRing {
                    _map: map.clone(),
                    ring,
                    prod: 0,
                    pending: Default::default(),
                    notify: None,
                    owner: id,
                },
            );
            with_owned(sh, id, |o| o.cqs.insert(cq));
            Ok((
                Response::Cq {
                    cq,
                    entries,
                    map_len: map.len() as u64,
                },
                Some(Attach::Map(map)),
            ))
        }
        Request::NotifyCq { cq } => {
            if !with_owned(sh, id, |o| o.cqs.contains(&cq)) {
                return Err(format!("no CQ {cq}"));
            }
            let fd = match (fds.pop(), fds.is_empty()) {
                (Some(fd), true) => fd,
                _ => return Err("notify_cq needs exactly one eventfd".into()),
            };
            event_fd(&fd)?;
            let mut dp = sh.dp.lock().expect("dp");
            let c = dp.cqs.get_mut(&cq).ok_or_else(|| format!("no CQ {cq}"))?;
            c.notify = Some(fd);
            ok(Response::Ok)
        }
        Request::DestroyCq { cq } => {
            let busy = with_owned(sh, id, |o| {
                if !o.cqs.contains(&cq) {
                    return Some(format!("no CQ {cq}"));
                }
                if o.qps.values().any(|q| q.1 == cq || q.2 == cq) {
                    return Some("the CQ still has QPs".into());
                }
                o.cqs.remove(&cq);
                None
            });
            if let Some(e) = busy {
                return Err(e);
            }
            release_cqs(sh, vec![cq]);
            ok(Response::Ok)
        }
        Request::CreateQp {
            pd,
            qp_type,
            send_cq,
            recv_cq,
            max_send_wr,
            max_recv_wr,
            sq_sig_all,
            srq,
        } => {
            let owns = with_owned(sh, id, |o| {
                o.pds.contains(&pd) && o.cqs.contains(&send_cq) && o.cqs.contains(&recv_cq)
            });
            if !owns {
                return Err("PD or CQ not found".into());
            }
            if let Some(s) = srq {
                // the transport scatters SRQ receives with the QP's PD:
                // the SRQ must be on the same one
                if with_owned(sh, id, |o| o.srqs.get(&s).copied()) != Some(pd) {
                    return Err(format!("no SRQ {s} on PD {pd}"));
                }
            }
            // with an SRQ the QP's own receive ring is unused: 1 slot
            let max_recv_wr = if srq.is_some() {
                max_recv_wr.max(1)
            } else {
                max_recv_wr
            };
            let sq_entries = ring::ring_entries(max_send_wr)
                .filter(|n| *n <= MAX_QP_WR)
                .ok_or("bad max_send_wr")?;
            let rq_entries = ring::ring_entries(max_recv_wr)
                .filter(|n| *n <= MAX_QP_WR)
                .ok_or("bad max_recv_wr")?;
            let sq_len = ring::ring_bytes(sq_entries, WQE_SIZE);
            let rq_offset = sq_len.next_multiple_of(4096);
            let total = rq_offset + ring::ring_bytes(rq_entries, WQE_SIZE);
            let map = Arc::new(Mapping::create("softrnic-qp", total).map_err(|e| e.to_string())?);
            let init = QpInit {
                qp_type: match qp_type {
                    QpKind::Rc => QpType::Rc,
                    QpKind::Uc => QpType::Uc,
                    QpKind::Ud => QpType::Ud,
                },
                pd,
                send_cq,
                recv_cq,
                srq,
                max_send_wr: sq_entries,
                max_recv_wr: rq_entries,
                sq_sig_all,
            };
            let qpn = call(sh, move |r| r.create_qp(init))?.map_err(|e| e.to_string())?;
            // SAFETY: both rings lie inside the mapping QpRings keeps alive.
            let (sq, rq) = unsafe {
                (
                    Ring::new(map.ptr(), sq_entries, WQE_SIZE),
                    Ring::new(map.ptr().add(rq_offset), rq_entries, WQE_SIZE),
                )
            };
            sh.dp.lock().expect("dp").add_qp(QpRings {
                qpn,
                _map: map.clone(),
                sq,
                rq,
                sq_cons: 0,
                rq_cons: 0,
                send_cq,
                recv_cq,
                broken: false,
                owner: id,
                pd,
                ud: qp_type == QpKind::Ud,
                srq,
            });
            {
                let mut r = sh.reg.lock().expect("registry");
                r.max_qpn = r.max_qpn.max(qpn);
                r.clients
                    .entry(id)
                    .or_default()
                    .qps
                    .insert(qpn, (pd, send_cq, recv_cq, srq));
            }
            Ok((
                Response::Qp {
                    qpn,
                    sq_entries,
                    rq_entries,
                    rq_offset: rq_offset as u64,
                    map_len: total as u64,
                },
                Some(Attach::Map(map)),
            ))
        }
        Request::ModifyQp { qpn, attr } => {
            if !with_owned(sh, id, |o| o.qps.contains_key(&qpn)) {
                return Err(format!("no QP {qpn:#x}"));
            }
            let a = attr.to_attr()?;
            call(sh, move |r| r.modify_qp(qpn, &a))?.map_err(|e| e.to_string())?;
            ok(Response::Ok)
        }
        Request::QueryQp { qpn } => {
            if !with_owned(sh, id, |o| o.qps.contains_key(&qpn)) {
                return Err(format!("no QP {qpn:#x}"));
            }
            let i = call(sh, move |r| r.query_qp(qpn))?.map_err(|e| e.to_string())?;
            ok(Response::QpInfo {
                qpn,
                state: proto::state_name(i.state).into(),
                dest_qpn: i.dest_qpn,
                mtu: i.mtu,
                sq_psn: i.sq_psn,
                rq_psn: i.rq_psn,
            })
        }
        Request::DestroyQp { qpn } => {
            if with_owned(sh, id, |o| o.qps.remove(&qpn)).is_none() {
                return Err(format!("no QP {qpn:#x}"));
            }
            destroy_qps(sh, vec![qpn]);
            ok(Response::Ok)
        }
        Request::CreateAh { pd, attr } => {
            let attr = attr.to_ah()?;
            let mut r = sh.reg.lock().expect("registry");
            if !r.clients.get(&id).is_some_and(|o| o.pds.contains(&pd)) {
                return Err(format!("no PD {pd}"));
            }
            let mut dp = sh.dp.lock().expect("dp");
            let mut ah = r.last_ah;
            loop {
                ah = ah.wrapping_add(1);
                if ah != 0 && !dp.ahs.contains_key(&ah) {
                    break;
                }
            }
            r.last_ah = ah;
            dp.ahs.insert(
                ah,
                Ah {
                    owner: id,
                    pd,
                    attr,
                },
            );
            r.clients.entry(id).or_default().ahs.insert(ah, pd);
            ok(Response::Ah { ah })
        }
        Request::DestroyAh { ah } => {
            if with_owned(sh, id, |o| o.ahs.remove(&ah)).is_none() {
                return Err(format!("no AH {ah}"));
            }
            sh.dp.lock().expect("dp").ahs.remove(&ah);
            ok(Response::Ok)
        }
        Request::CreateSrq { pd, max_wr } => {
            if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
                return Err(format!("no PD {pd}"));
            }
            let entries = ring::ring_entries(max_wr)
                .filter(|n| *n <= MAX_QP_WR)
                .ok_or("bad max_wr")?;
            let map = Arc::new(
                Mapping::create("softrnic-srq", ring::ring_bytes(entries, WQE_SIZE))
                    .map_err(|e| e.to_string())?,
            );
            let srq = call(sh, move |r| r.create_srq(pd, entries))?.map_err(|e| e.to_string())?;
            // SAFETY: the ring covers the mapping, which SrqRing keeps alive.
            let ring = unsafe { Ring::new(map.ptr(), entries, WQE_SIZE) };
            sh.dp.lock().expect("dp").add_srq(SrqRing {
                srqn: srq,
                _map: map.clone(),
                ring,
                cons: 0,
                broken: false,
                owner: id,
            });
            with_owned(sh, id, |o| o.srqs.insert(srq, pd));
            Ok((
                Response::Srq {
                    srq,
                    entries,
                    map_len: map.len() as u64,
                },
                Some(Attach::Map(map)),
            ))
        }
        Request::ModifySrq { srq, limit } => {
            if !with_owned(sh, id, |o| o.srqs.contains_key(&srq)) {
                return Err(format!("no SRQ {srq}"));
            }
            call(sh, move |r| r.arm_srq_limit(srq, limit))?.map_err(|e| e.to_string())?;
            ok(Response::Ok)
        }
        Request::QuerySrq { srq } => {
            if !with_owned(sh, id, |o| o.srqs.contains_key(&srq)) {
                return Err(format!("no SRQ {srq}"));
            }
            let (max_wr, limit, pending) =
                call(sh, move |r| r.query_srq(srq))?.map_err(|e| e.to_string())?;
            ok(Response::SrqInfo {
                max_wr,
                limit,
                pending: pending as u32,
            })
        }
        Request::AsyncEventFd => {
            let fd = match (fds.pop(), fds.is_empty()) {
                (Some(fd), true) => fd,
                _ => return Err("async_event_fd needs exactly one eventfd".into()),
            };
            event_fd(&fd)?;
            let mut dp = sh.dp.lock().expect("dp");
            let c = dp.events.entry(id).or_default();
            if !c.queue.is_empty() {
                use std::os::fd::AsFd;
                nic::io::bell::ring_fd(fd.as_fd());
            }
            c.fd = Some(fd);
            ok(Response::Ok)
        }
        Request::GetAsyncEvents => {
            let mut dp = sh.dp.lock().expect("dp");
            let events = match dp.events.get_mut(&id) {
                Some(c) => {
                    let n = c.queue.len().min(64);
                    c.queue.drain(..n).collect()
                }
                None => Vec::new(),
            };
            ok(Response::AsyncEvents { events })
        }
        Request::DestroySrq { srq } => {
            let err = with_owned(sh, id, |o| {
                if !o.srqs.contains_key(&srq) {
                    return Some(format!("no SRQ {srq}"));
                }
                if o.qps.values().any(|q| q.3 == Some(srq)) {
                    return Some("the SRQ still has QPs".into());
                }
                o.srqs.remove(&srq);
                None
            });
            if let Some(e) = err {
                return Err(e);
            }
            // the ring is no longer polled; the transport drops the WQEs
            // the SRQ still holds and may hand its number out again
            sh.dp.lock().expect("dp").remove_srq(srq);
            call(sh, move |r| r.destroy_srq(srq))?.map_err(|e| e.to_string())?;
            ok(Response::Ok)
        }
        Request::Stats => ok(Response::Stats(stats(sh))),
        Request::QueryPort { port } => {
            if port != 1 {
                return Err(format!("no port {port} (the device has one port: 1)"));
            }
            let p = call(sh, |r| r.port_attr())?;
            ok(Response::Port {
                state: p.state.ibv(),
                active_mtu: p.active_mtu,
                max_mtu: p.max_mtu,
                link_speed_bps: p.link_speed_bps,
            })
        }
    }
}

fn destroy_qps(sh: &Shared, qpns: Vec<u32>) {
    {
        let mut dp = sh.dp.lock().expect("dp");
        for q in &qpns {
            dp.remove_qp(*q);
        }
    }
    let _ = call(sh, move |r| {
        let err = QpAttr {
            state: Some(QpState::Err),
            ..Default::default()
        };
        for q in qpns {
            let _ = r.modify_qp(q, &err);
            let _ = r.destroy_qp(q);
        }
    });
}

fn release_cqs(sh: &Shared, cqs: Vec<u32>) {
    {
        let mut dp = sh.dp.lock().expect("dp");
        for c in &cqs {
            dp.remove_cq(*c);
        }
    }
    // drain what is left; an overrun CQ cannot be reset and is not reused
    let reusable = call(sh, move |r| {
        let mut out: Vec<Wc> = Vec::new();
        let mut keep = Vec::new();
        for c in cqs {
            loop {
                out.clear();
                match r.poll_cq(c, 4096, &mut out) {
                    Ok(0) => {
                        keep.push(c);
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        keep
    })
    .unwrap_or_default();
    let mut r = sh.reg.lock().expect("registry");
    for c in reusable {
        let cap = r.cq_cap.get(&c).copied().unwrap_or(0);
        r.cq_pool.push((c, cap));
    }
}

/// Tears down everything client `id` owned: its QPs go to the error state
/// (their WQEs flush; peers' packets to them are dropped, so peers see
/// retry-exceeded errors) and are destroyed, memory windows freed, MRs
/// deregistered (the
/// mappings are unmapped when the transport drops its last reference),
/// CQs drained and pooled, SRQs destroyed (their rings no longer polled),
/// AHs dropped, PDs pooled.
fn cleanup(sh: &Shared, id: u64) {
    let o = {
        let mut r = sh.reg.lock().expect("registry");
        r.clients.remove(&id).unwrap_or_default()
    };
    destroy_qps(sh, o.qps.keys().copied().collect());
    {
        let mut dp = sh.dp.lock().expect("dp");
        for s in o.srqs.keys() {
            dp.remove_srq(*s);
        }
        for a in o.ahs.keys() {
            dp.ahs.remove(a);
        }
        dp.events.remove(&id);
    }
    // its QPs are gone, so its SRQs have none attached
    let srqs: Vec<u32> = o.srqs.keys().copied().collect();
    let _ = call(sh, move |r| {
        for s in srqs {
            let _ = r.destroy_srq(s);
        }
    });
    // windows before regions: a region with bound windows stays
    let handles: Vec<u32> = o.mws.keys().copied().collect();
    let lkeys: Vec<u32> = o.mrs.keys().copied().collect();
    let _ = call(sh, move |r| {
        for h in handles {
            let _ = r.dealloc_mw(h);
        }
        for k in lkeys {
            let _ = r.dereg_mr(k);
        }
    });
    release_cqs(sh, o.cqs.into_iter().collect());
    let mut r = sh.reg.lock().expect("registry");
    r.pd_pool.extend(o.pds);
    r.reaped += 1;
}

fn stats(sh: &Shared) -> Stats {
    let (mut s, max_qpn) = {
        let r = sh.reg.lock().expect("registry");
        let mut s = Stats {
            clients: r.clients.len() as u32,
            clients_reaped: r.reaped,
            ..Default::default()
        };
        for o in r.clients.values() {
            s.pds += o.pds.len() as u32;
            s.mrs += o.mrs.len() as u32;
            s.cqs += o.cqs.len() as u32;
            s.qps += o.qps.len() as u32;
            s.ahs += o.ahs.len() as u32;
            s.srqs += o.srqs.len() as u32;
        }
        (s, r.max_qpn)
    };
    {
        let dp = sh.dp.lock().expect("dp");
        s.active_qp_rings = dp.qps.len() as u32;
        s.active_cq_rings = dp.cqs.len() as u32;
        s.active_srq_rings = dp.srqs.len() as u32;
    }
    s.rnic_qps = call(sh, move |r| {
        (FIRST_QPN..=max_qpn)
            .filter(|q| r.query_qp(*q).is_ok())
            .count() as u32
    })
    .unwrap_or(0);
    s
}
