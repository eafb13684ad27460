//! An in-process connection manager for the unit tests: devices with
//! addresses, event channels on eventfds (readable exactly while events
//! are queued, as the daemon's are), a log of every command, and the
//! events a daemon would answer some commands with.

use crate::backend::*;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

pub struct FakeChan {
    efd: OwnedFd,
    q: Mutex<VecDeque<CmEventMsg>>,
    token: u64,
    dev: String,
    /// The device is gone ([`Fake::remove`]): once its events are taken,
    /// `next` fails with ENODEV, as the daemon's channel does.
    gone: std::sync::atomic::AtomicBool,
}

impl FakeChan {
    pub fn push(&self, m: CmEventMsg) {
        self.q.lock().unwrap().push_back(m);
        self.wake();
    }

    fn wake(&self) {
        let one = 1u64;
        // SAFETY: an 8-byte write to our eventfd.
        let n = unsafe { libc::write(self.efd.as_raw_fd(), &one as *const u64 as *const _, 8) };
        assert_eq!(n, 8);
    }
}

impl CmChannel for FakeChan {
    fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
    fn token(&self) -> u64 {
        self.token
    }
    fn next(&self, _nonblocking: bool) -> Result<Option<CmEventMsg>> {
        let mut v = 0u64;
        // SAFETY: an 8-byte read from our non-blocking semaphore eventfd.
        let n = unsafe { libc::read(self.efd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
        if n == 8 {
            if let Some(m) = self.q.lock().unwrap().pop_front() {
                return Ok(Some(m));
            }
        }
        if self.gone.load(std::sync::atomic::Ordering::Acquire) {
            return Err(BackendError::new(libc::ENODEV, "the device is gone"));
        }
        Ok(None)
    }
}

#[derive(Default)]
pub struct State {
    pub log: Vec<String>,
    chans: HashMap<u64, Arc<FakeChan>>,
    /// (device, id) → channel token.
    ids: HashMap<(String, CmIdNo), u64>,
    next: u32,
    next_port: u16,
}

/// Devices `(name, address)`; answers resolve_addr / resolve_route /
/// connect / disconnect with the events a daemon sends.
pub struct Fake {
    pub devs: Vec<(String, IpAddr)>,
    pub st: Arc<Mutex<State>>,
}

impl Fake {
    pub fn new(devs: &[(&str, &str)]) -> Fake {
        Fake {
            devs: devs
                .iter()
                .map(|(n, a)| (n.to_string(), a.parse().unwrap()))
                .collect(),
            st: Arc::new(Mutex::new(State {
                next: 1,
                next_port: 40000,
                ..State::default()
            })),
        }
    }

    /// Device `dev` goes away: its channels wake and then fail with
    /// ENODEV.
    pub fn remove(st: &Mutex<State>, dev: &str) {
        let s = st.lock().unwrap();
        for c in s.chans.values().filter(|c| c.dev == dev) {
            c.gone.store(true, std::sync::atomic::Ordering::Release);
            c.wake();
        }
    }

    /// Queues `m` on the channel of `dev`'s ID `m.id` (or `m.listen_id`).
    pub fn send(st: &Mutex<State>, dev: &str, m: CmEventMsg) {
        let mut s = st.lock().unwrap();
        let owner = m.listen_id.unwrap_or(m.id);
        let tok = s.ids[&(dev.to_string(), owner)];
        let c = s.chans[&tok].clone();
        if m.listen_id.is_some() {
            s.ids.insert((dev.to_string(), m.id), tok);
        }
        drop(s);
        // a gone device sends nothing
        if !c.gone.load(std::sync::atomic::Ordering::Acquire) {
            c.push(m);
        }
    }
}

pub fn ev(id: CmIdNo, kind: u32) -> CmEventMsg {
    CmEventMsg {
        id,
        user_ctx: 0,
        kind: CmEventKind(kind),
        status: 0,
        listen_id: None,
        conn: None,
        ud: None,
        addrs: None,
    }
}

struct FakeDev {
    name: String,
    ip: IpAddr,
    st: Arc<Mutex<State>>,
}

impl FakeDev {
    fn log(&self, s: String) {
        self.st
            .lock()
            .unwrap()
            .log
            .push(format!("{} {s}", self.name));
    }
    fn answer(&self, id: CmIdNo, kind: u32) {
        Fake::send(&self.st, &self.name, ev(id, kind));
    }
}

impl DeviceCm for FakeDev {
    fn create_id(&self, chan: u64, _: PortSpace, _: CmQpType, _: u64) -> Result<CmIdNo> {
        let mut s = self.st.lock().unwrap();
        let no = s.next;
        s.next += 1;
        s.ids.insert((self.name.clone(), no), chan);
        drop(s);
        self.log(format!("create_id {no}"));
        Ok(no)
    }
    fn destroy_id(&self, id: CmIdNo) -> Result<u32> {
        self.log(format!("destroy_id {id}"));
        Ok(0)
    }
    fn bind(&self, id: CmIdNo, mut addr: SocketAddr) -> Result<Bound> {
        self.log(format!("bind {id} {addr}"));
        if addr.port() == 0 {
            let mut s = self.st.lock().unwrap();
            addr.set_port(s.next_port);
            s.next_port += 1;
        }
        if addr.ip().is_unspecified() {
            addr.set_ip(self.ip);
        }
        Ok(Bound {
            dev: self.name.clone(),
            port: 1,
            gid_index: 0,
            gid: [0; 16],
            addr,
        })
    }
    fn resolve_addr(
        &self,
        id: CmIdNo,
        _: Option<SocketAddr>,
        dst: SocketAddr,
        _: u32,
    ) -> Result<()> {
        self.log(format!("resolve_addr {id} {dst}"));
        self.answer(id, crate::abi::event::ADDR_RESOLVED);
        Ok(())
    }
    fn resolve_route(&self, id: CmIdNo, _: u32) -> Result<()> {
        self.log(format!("resolve_route {id}"));
        self.answer(id, crate::abi::event::ROUTE_RESOLVED);
        Ok(())
    }
    fn query(&self, _: CmIdNo) -> Result<IdInfo> {
        Ok(IdInfo {
            src: Some(SocketAddr::new(self.ip, 40000)),
            dst: None,
            dev: self.name.clone(),
            port: 1,
            sgid: [1; 16],
            dgid: Some([2; 16]),
            dmac: None,
            pkey: 0xffff,
            path_mtu: 1024,
            num_paths: 1,
            ps: PortSpace::TCP,
            qp_type: CmQpType::Rc,
        })
    }
    fn listen(&self, id: CmIdNo, backlog: u32) -> Result<()> {
        self.log(format!("listen {id} {backlog}"));
        Ok(())
    }
    fn connect(&self, id: CmIdNo, p: &ConnParam) -> Result<()> {
        self.log(format!(
            "connect {id} qpn {} pd {:?}",
            p.qpn, p.private_data
        ));
        self.answer(id, crate::abi::event::ESTABLISHED);
        Ok(())
    }
    fn accept(&self, id: CmIdNo, p: &ConnParam) -> Result<()> {
        self.log(format!("accept {id} qpn {}", p.qpn));
        self.answer(id, crate::abi::event::ESTABLISHED);
        Ok(())
    }
    fn reject(&self, id: CmIdNo, d: &[u8]) -> Result<()> {
        self.log(format!("reject {id} {d:?}"));
        Ok(())
    }
    fn disconnect(&self, id: CmIdNo) -> Result<()> {
        self.log(format!("disconnect {id}"));
        self.answer(id, crate::abi::event::DISCONNECTED);
        Ok(())
    }
    fn init_qp_attr(&self, _: CmIdNo, s: QpState) -> Result<(QpAttr, u32)> {
        // the path (RTR) and the QP's ACK timeout (RTS), as rnicd gives them
        Ok(match s {
            QpState::Rtr => (
                QpAttr {
                    ah: Some(softrnic::client::cm::AhAttr::new(
                        softrnic::client::cm::Gid([0; 16]),
                        softrnic::client::cm::EthernetAddress([0; 6]),
                    )),
                    ..Default::default()
                },
                crate::abi::IBV_QP_AV as u32,
            ),
            QpState::Rts => (
                QpAttr {
                    timeout: Some(14),
                    ..Default::default()
                },
                crate::abi::IBV_QP_TIMEOUT as u32,
            ),
            _ => (QpAttr::default(), 0),
        })
    }
    fn establish(&self, id: CmIdNo) -> Result<()> {
        self.log(format!("establish {id}"));
        Ok(())
    }
    fn notify(&self, id: CmIdNo, e: u32) -> Result<()> {
        self.log(format!("notify {id} {e}"));
        Ok(())
    }
    fn migrate_id(&self, id: CmIdNo, chan: u64) -> Result<u32> {
        self.log(format!("migrate_id {id}"));
        self.st
            .lock()
            .unwrap()
            .ids
            .insert((self.name.clone(), id), chan);
        Ok(0)
    }
}

impl CmBackend for Fake {
    fn device(&self, dev: &str) -> Result<Arc<dyn DeviceCm>> {
        let (name, ip) = self
            .devs
            .iter()
            .find(|d| d.0 == dev)
            .cloned()
            .ok_or_else(|| BackendError::new(libc::ENODEV, "no such device"))?;
        Ok(Arc::new(FakeDev {
            name,
            ip,
            st: self.st.clone(),
        }))
    }
    fn open_channel(&self, dev: &str) -> Result<Arc<dyn CmChannel>> {
        // SAFETY: eventfd has no memory preconditions.
        let fd = unsafe {
            libc::eventfd(
                0,
                libc::EFD_SEMAPHORE | libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
            )
        };
        assert!(fd >= 0);
        let mut s = self.st.lock().unwrap();
        let token = 100 + s.chans.len() as u64;
        let c = Arc::new(FakeChan {
            // SAFETY: the descriptor just made.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            q: Mutex::new(VecDeque::new()),
            token,
            dev: dev.to_string(),
            gone: Default::default(),
        });
        s.chans.insert(token, c.clone());
        Ok(c)
    }
}

/// Verbs that make QPs in memory and log every QP state change.
#[derive(Default)]
pub struct FakeVerbs {
    pub log: Arc<Mutex<Vec<String>>>,
    /// (name, address) of each device: its one GID.
    pub devs: Vec<(String, IpAddr)>,
    /// Moving a QP to RTR fails with EINVAL.
    pub fail_rtr: bool,
}

/// A QP of [`FakeVerbs`] (the header `ibv_qp` the library reads).
fn fake_qp(pd: *mut crate::abi::ibv_pd, num: u32) -> *mut crate::abi::ibv_qp {
    // SAFETY: ibv_qp is plain C data (pointers, integers, a pthread mutex
    // and condition) for which all-zero bytes are a valid value.
    let mut qp: crate::abi::ibv_qp = unsafe { std::mem::zeroed() };
    qp.context = std::ptr::dangling_mut();
    qp.pd = pd;
    qp.qp_num = num;
    qp.qp_type = crate::abi::IBV_QPT_RC;
    Box::into_raw(Box::new(qp))
}

impl crate::verbs::Verbs for FakeVerbs {
    fn devices(&self) -> Vec<(String, Vec<[u8; 16]>)> {
        self.devs
            .iter()
            .map(|(n, ip)| {
                let gid = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                    IpAddr::V6(v6) => v6.octets(),
                };
                (n.clone(), vec![gid])
            })
            .collect()
    }
    fn context(&self, _dev: &str) -> Option<*mut crate::abi::ibv_context> {
        Some(std::ptr::dangling_mut())
    }
    fn contexts(&self) -> Vec<*mut crate::abi::ibv_context> {
        vec![std::ptr::dangling_mut()]
    }
    unsafe fn default_pd(&self, ctx: *mut crate::abi::ibv_context) -> *mut crate::abi::ibv_pd {
        Box::into_raw(Box::new(crate::abi::ibv_pd {
            context: ctx,
            handle: 0,
        }))
    }
    unsafe fn gid_index(&self, _: *mut crate::abi::ibv_context, _: [u8; 16]) -> Option<u8> {
        Some(3)
    }
    unsafe fn create_qp(
        &self,
        pd: *mut crate::abi::ibv_pd,
        _: *mut crate::abi::ibv_qp_init_attr,
    ) -> *mut crate::abi::ibv_qp {
        fake_qp(pd, 0x99)
    }
    unsafe fn modify_qp(
        &self,
        _: *mut crate::abi::ibv_qp,
        a: *mut crate::abi::ibv_qp_attr,
        mask: libc::c_int,
    ) -> libc::c_int {
        // SAFETY: the library's attributes.
        let a = unsafe { &*a };
        self.log.lock().unwrap().push(format!(
            "modify {} mask {mask:#x} sgid {} rd {}/{}",
            a.qp_state, a.ah_attr.grh.sgid_index, a.max_rd_atomic, a.max_dest_rd_atomic
        ));
        if self.fail_rtr && a.qp_state == crate::abi::IBV_QPS_RTR {
            return libc::EINVAL;
        }
        0
    }
    unsafe fn destroy_qp(&self, qp: *mut crate::abi::ibv_qp) -> libc::c_int {
        // SAFETY: made by fake_qp.
        drop(unsafe { Box::from_raw(qp) });
        self.log.lock().unwrap().push("destroy_qp".into());
        0
    }
    unsafe fn create_comp_channel(
        &self,
        _: *mut crate::abi::ibv_context,
    ) -> *mut crate::abi::ibv_comp_channel {
        std::ptr::dangling_mut()
    }
    unsafe fn destroy_comp_channel(&self, _: *mut crate::abi::ibv_comp_channel) -> libc::c_int {
        0
    }
    unsafe fn create_cq(
        &self,
        _: *mut crate::abi::ibv_context,
        cqe: libc::c_int,
        _: *mut libc::c_void,
        _: *mut crate::abi::ibv_comp_channel,
    ) -> *mut crate::abi::ibv_cq {
        self.log.lock().unwrap().push(format!("create_cq {cqe}"));
        // each CQ its own address: the library tells them apart
        // SAFETY: ibv_cq is plain C data (pointers, integers, a pthread
        // mutex and condition) for which all-zero bytes are a valid value.
        Box::into_raw(Box::new(unsafe {
            std::mem::zeroed::<crate::abi::ibv_cq>()
        }))
    }
    unsafe fn destroy_cq(&self, _: *mut crate::abi::ibv_cq) -> libc::c_int {
        self.log.lock().unwrap().push("destroy_cq".into());
        0
    }
    unsafe fn create_srq(
        &self,
        _: *mut crate::abi::ibv_pd,
        _: *mut crate::abi::ibv_srq_init_attr,
    ) -> *mut crate::abi::ibv_srq {
        std::ptr::null_mut()
    }
    unsafe fn destroy_srq(&self, _: *mut crate::abi::ibv_srq) -> libc::c_int {
        0
    }
}
