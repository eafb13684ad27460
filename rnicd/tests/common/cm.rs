//! What the RDMA CM tests share: one side of a connection (a QP of its
//! type, memory, a CQ, a CM connection and its event channel) on an
//! `rnicd --mem-pair`, and the steps every test takes with it.

use super::{tempdir, Daemon, T};
use nic::io::impair::{Impaired, Interceptor};
use nic::verbs::{QpAttr, Wc};
use rnicd::server::{CmTimers, Server, ServerConfig};
use softrnic::client::cm::{
    CmClient, CmEventKind, CmEventMsg, CmIdNo, CmQpType, EventChannel, PortSpace, QpState,
};
use softrnic::{Buffer, Context, Cq, Mr, Pd, Qp, QpInitAttr, QpKind, ACCESS_ALL};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The listening side's address: the pair's second device.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// An `rnicd --mem-pair --name c` with `extra` options; its two devices'
/// sockets.
pub fn daemon_with(tag: &str, extra: &[&str]) -> (Daemon, PathBuf, PathBuf) {
    let dir = tempdir(tag);
    // the addresses the in-process pair has too (SERVER_IP and its peer)
    let mut args = vec!["--mem-pair", "--name", "c", "--gid", "192.0.2.1"];
    args.extend_from_slice(extra);
    let d = Daemon::start(None, &args, &dir);
    let (a, b) = (PathBuf::from(d.sock("c0")), PathBuf::from(d.sock("c1")));
    (d, a, b)
}

pub fn daemon(tag: &str) -> (Daemon, PathBuf, PathBuf) {
    daemon_with(tag, &[])
}

pub fn server_addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(SERVER_IP), port)
}

/// Counter `k` of a device's CM counters (0 when absent).
pub fn count(st: &std::collections::BTreeMap<String, u64>, k: &str) -> u64 {
    st.get(k).copied().unwrap_or(0)
}

/// One side: verbs objects and a CM connection with its channel; its IDs
/// are of the port space and QP type of its QP (RC: RDMA_PS_TCP, UD:
/// RDMA_PS_UDP).
pub struct Side {
    pub ctx: Arc<Context>,
    pub pd: Pd,
    pub buf: Buffer,
    pub mr: Mr,
    pub cq: Cq,
    pub qp: Qp,
    pub cm: CmClient,
    pub ch: EventChannel,
    kind: QpKind,
}

impl Side {
    pub fn new(sock: &Path, kind: QpKind) -> Side {
        let ctx = Context::open(sock).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buffer(1 << 16).unwrap();
        let mr = pd.reg_mr(&buf, 0, 1 << 16, ACCESS_ALL).unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: kind,
                send_cq: cq.handle,
                recv_cq: cq.handle,
                max_send_wr: 16,
                max_recv_wr: 16,
                sq_sig_all: true,
                srq: None,
            })
            .unwrap();
        Side {
            ctx,
            pd,
            buf,
            mr,
            cq,
            qp,
            cm: CmClient::open(sock).unwrap(),
            ch: EventChannel::open(sock).unwrap(),
            kind,
        }
    }

    /// A new CM ID of the side's kind with the user context `ctx`.
    pub fn id(&self, ctx: u64) -> CmIdNo {
        let (ps, t) = match self.kind {
            QpKind::Ud => (PortSpace::UDP, CmQpType::Ud),
            _ => (PortSpace::TCP, CmQpType::Rc),
        };
        self.cm.create_id(self.ch.token(), ps, t, ctx).unwrap()
    }

    /// The next event, waiting on the channel's descriptor.
    pub fn event(&self) -> CmEventMsg {
        let mut p = libc::pollfd {
            fd: self.ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) };
        assert_eq!(n, 1, "no CM event within {T:?}");
        self.ch.next(true).unwrap().expect("readable: an event")
    }

    pub fn expect(&self, kind: CmEventKind) -> CmEventMsg {
        let e = self.event();
        assert_eq!(e.kind, kind, "{e:?}");
        e
    }

    /// Moves the QP to `state` with the CM's attributes; returns them.
    pub fn move_qp(&self, id: CmIdNo, state: QpState) -> QpAttr {
        let (attr, mask) = self.cm.init_qp_attr(id, state).unwrap();
        assert_ne!(mask, 0);
        self.qp.modify(&attr).unwrap();
        attr
    }

    pub fn wait_wc(&mut self) -> Wc {
        let mut out = Vec::new();
        testkit::wait_until(T, "a completion", || self.cq.poll(1, &mut out) > 0);
        out.remove(0)
    }

    /// The client's ID (user context 9) resolved towards `port` on the
    /// server: address and route.
    pub fn resolved(&self, port: u16) -> CmIdNo {
        let id = self.id(9);
        // nothing queued yet: the descriptor is not readable
        assert!(self.ch.next(true).unwrap().is_none());
        self.cm
            .resolve_addr(id, None, server_addr(port), 2000)
            .unwrap();
        let e = self.expect(CmEventKind::ADDR_RESOLVED);
        assert_eq!((e.id, e.user_ctx, e.status), (id, 9, 0));
        self.cm.resolve_route(id, 2000).unwrap();
        self.expect(CmEventKind::ROUTE_RESOLVED);
        let q = self.cm.query(id).unwrap();
        assert_eq!(q.dst, Some(server_addr(port)));
        assert_eq!((q.path_mtu, q.num_paths, q.pkey), (4096, 1, 0xFFFF));
        id
    }

    /// The server's listening ID (user context 7) on `port`.
    pub fn listening(&self, port: u16) -> CmIdNo {
        let l = self.id(7);
        let b = self.cm.bind(l, server_addr(port)).unwrap();
        assert_eq!((b.addr, b.port), (server_addr(port), 1));
        self.cm.listen(l, 8).unwrap();
        l
    }
}

/// Two devices in this process on an in-memory wire (192.0.2.1 and .2,
/// sockets `<tag>0` and `<tag>1`); device `which` sends through
/// `interceptor`; the CM timers `cm`.
pub fn pair_with(
    tag: &str,
    which: usize,
    interceptor: Box<dyn Interceptor>,
    cm: CmTimers,
) -> Vec<Server> {
    let dir = tempdir(tag);
    let macs = [
        wire::EthernetAddress([0x02, 0x53, 0x52, 0, 0, 1]),
        wire::EthernetAddress([0x02, 0x53, 0x52, 0, 0, 2]),
    ];
    let (p0, p1) = nic::io::mem::pair(macs, 4096);
    let (p0, p1): (Box<dyn nic::io::Port>, Box<dyn nic::io::Port>) = if which == 0 {
        (Box::new(Impaired::new(p0, interceptor)), Box::new(p1))
    } else {
        (Box::new(p0), Box::new(Impaired::new(p1, interceptor)))
    };
    let cfg = |i: u8| ServerConfig {
        name: format!("{tag}{i}"),
        sock_dir: dir.clone(),
        mode: 0o600,
        gid: wire::Gid::from_ipv4(Ipv4Addr::new(192, 0, 2, 1 + i)),
        netdev: None,
        engine: nic::engine::EngineConfig::default(),
        bell: true,
        cm,
        dcqcn_rp: true,
        dcqcn_reference_bps: None,
    };
    Server::start_many(vec![(p0, cfg(0)), (p1, cfg(1))], false).unwrap()
}
