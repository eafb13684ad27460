//! Two engines with one connected RC QP and one UD QP each, over any ports.
#![allow(dead_code)]

use nic::engine::{CqHandle, Device, Engine, EngineConfig};
use nic::io::Port;
use nic::sim::{connect, PairConfig};
use nic::transport::{QpInit, Rnic, RnicConfig};
use nic::verbs::{access, AhAttr, HeapMemory, Memory, QpType, Wc};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::Gid;

pub const MEM: usize = 1 << 22;

pub struct Node {
    pub engine: Engine,
    pub dev: Device,
    pub cq: CqHandle,
    pub qpn: u32,
    pub ud_qpn: u32,
    pub mem: Arc<HeapMemory>,
    pub base: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub gid: Gid,
    pub mac: wire::EthernetAddress,
}

pub fn gid(i: usize) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, i as u8 + 1))
}

/// Starts an engine per port and connects the RC QPs (PSNs start at 100);
/// the peers are on one link (192.0.2.1 and .2).
pub fn start(ports: Vec<Box<dyn Port>>, cfg: PairConfig) -> Vec<Node> {
    let macs: Vec<_> = ports.iter().map(|p| p.mac()).collect();
    start_with(ports, vec![gid(0), gid(1)], vec![macs[1], macs[0]], cfg)
}

/// Like `start`, with each node's GID and the MAC its frames go to (the
/// next hop towards the peer).
pub fn start_with(
    ports: Vec<Box<dyn Port>>,
    gids: Vec<Gid>,
    dmacs: Vec<wire::EthernetAddress>,
    cfg: PairConfig,
) -> Vec<Node> {
    start_cc(ports, gids, dmacs, cfg, nic::transport::CcConfig::default())
}

/// Like `start_with`, with the congestion control settings `cc`.
pub fn start_cc(
    ports: Vec<Box<dyn Port>>,
    gids: Vec<Gid>,
    dmacs: Vec<wire::EthernetAddress>,
    cfg: PairConfig,
    cc: nic::transport::CcConfig,
) -> Vec<Node> {
    start_engines(ports, gids, dmacs, cfg, cc, false)
}

/// Like `start`, with both devices on ONE engine thread
/// (`Engine::start_group`).
pub fn start_grouped(ports: Vec<Box<dyn Port>>, cfg: PairConfig) -> Vec<Node> {
    let macs: Vec<_> = ports.iter().map(|p| p.mac()).collect();
    let cc = nic::transport::CcConfig::default();
    start_engines(
        ports,
        vec![gid(0), gid(1)],
        vec![macs[1], macs[0]],
        cfg,
        cc,
        true,
    )
}

fn start_engines(
    ports: Vec<Box<dyn Port>>,
    gids: Vec<Gid>,
    dmacs: Vec<wire::EthernetAddress>,
    cfg: PairConfig,
    cc: nic::transport::CcConfig,
    grouped: bool,
) -> Vec<Node> {
    let mut members = Vec::new();
    let mut macs = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let mac = port.mac();
        let mut rc = RnicConfig::new(mac, gids[i]);
        rc.cc = cc;
        rc.unlimited_retries = cfg.unlimited_retries;
        members.push((Rnic::new(rc), port, None));
        macs.push(mac);
    }
    let engines = if grouped {
        Engine::start_group(members, EngineConfig::default())
    } else {
        members
            .into_iter()
            .enumerate()
            .map(|(i, (rnic, port, _))| {
                let cfg = EngineConfig {
                    name: format!("engine-{i}"),
                    ..Default::default()
                };
                Engine::start(rnic, port, cfg)
            })
            .collect()
    };
    let mut nodes = Vec::new();
    for (i, engine) in engines.into_iter().enumerate() {
        let mac = macs[i];
        let dev = engine.device();
        let cq = dev.create_cq(1 << 16).unwrap();
        let mem = Arc::new(HeapMemory::new(MEM));
        let m = mem.clone();
        let cqn = cq.cqn;
        let base = 0x1000_0000 * (i as u64 + 1);
        let (qpn, ud_qpn, lkey, rkey) = dev
            .call(move |r| {
                let pd = r.alloc_pd();
                let all = access::LOCAL_WRITE
                    | access::REMOTE_WRITE
                    | access::REMOTE_READ
                    | access::REMOTE_ATOMIC;
                let (l, k) = r
                    .reg_mr(pd, m as Arc<dyn Memory>, 0, base, MEM as u64, all)
                    .unwrap();
                let mk = |t| QpInit {
                    qp_type: t,
                    pd,
                    send_cq: cqn,
                    recv_cq: cqn,
                    srq: None,
                    max_send_wr: 8192,
                    max_recv_wr: 8192,
                    sq_sig_all: true,
                };
                (
                    r.create_qp(mk(QpType::Rc)).unwrap(),
                    r.create_qp(mk(QpType::Ud)).unwrap(),
                    l,
                    k,
                )
            })
            .unwrap();
        nodes.push(Node {
            engine,
            dev,
            cq,
            qpn,
            ud_qpn,
            mem,
            base,
            lkey,
            rkey,
            gid: gids[i],
            mac,
        });
    }
    for i in 0..2 {
        let (peer_qpn, peer_gid, peer_mac) = (nodes[1 - i].qpn, nodes[1 - i].gid, dmacs[i]);
        let (qpn, ud_qpn) = (nodes[i].qpn, nodes[i].ud_qpn);
        let ah = AhAttr::new(peer_gid, peer_mac);
        nodes[i]
            .dev
            .call(move |r| connect(r, qpn, cfg, ah, peer_qpn, 100, 100))
            .unwrap();
        let ud = PairConfig {
            qp_type: QpType::Ud,
            ..cfg
        };
        nodes[i]
            .dev
            .call(move |r| connect(r, ud_qpn, ud, ah, 0, 0, 0))
            .unwrap();
    }
    nodes
}

/// Waits (yielding) for `n` completions.
pub fn wait(cq: &CqHandle, n: usize, limit: Duration) -> Vec<Wc> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        if cq.poll(n - out.len(), &mut out) == 0 {
            assert!(
                t0.elapsed() < limit,
                "only {} of {n} completions after {limit:?}: {out:?}",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

pub fn read(m: &HeapMemory, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    m.read(off, &mut v);
    v
}

/// Whether this test can run here: root (namespaces) and the given tools.
/// Under CI it must: a missing piece fails the test instead of skipping it.
pub fn can_run(test: &str, tools: &[&str]) -> bool {
    let missing_tool = tools
        .iter()
        .find(|t| {
            std::process::Command::new(t)
                .arg("--version")
                .output()
                .is_err()
        })
        .map(|t| format!("`{t}` is not installed"));
    match nic::io::netns::available().err().or(missing_tool) {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: {why} — CI must run this test as root with {tools:?}")
        }
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A ── R ── B (`nic::io::netns::Routed`) with the tests' conveniences:
/// creation and rule loading that fail the test, and ports opened on A or B.
pub struct Routed(pub nic::io::netns::Routed);

impl std::ops::Deref for Routed {
    type Target = nic::io::netns::Routed;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Routed {
    /// `tag` keeps concurrent tests apart (a short word and a digit).
    pub fn new(tag: &str) -> Routed {
        Routed(nic::io::netns::Routed::create(tag).expect("A ── R ── B namespaces"))
    }

    /// Loads an nftables ruleset into the router.
    pub fn nft(&self, rules: &str) {
        self.0.nft(rules).expect("nft ruleset");
    }

    /// Opens side 0 (A) or 1 (B) with `backend`; returns the port and the
    /// MAC of its next hop towards the other side.
    pub fn open(
        &self,
        side: usize,
        backend: nic::io::afxdp::Backend,
    ) -> (Box<dyn Port>, wire::EthernetAddress) {
        let (ns, dev, peer) = if side == 0 {
            (&self.a, &self.va, self.gb)
        } else {
            (&self.b, &self.vb, self.ga)
        };
        nic::io::netns::run_in(ns, || {
            let (p, got) = nic::io::afxdp::open_port(dev, backend).expect("open port");
            assert!(backend == nic::io::afxdp::Backend::Auto || got == backend);
            let (_, mac) =
                nic::io::addr::next_hop_mac(std::net::IpAddr::V4(peer), Duration::from_secs(5))
                    .expect("next hop");
            (p, mac)
        })
        .unwrap()
    }

    pub fn gids(&self) -> Vec<Gid> {
        vec![Gid::from_ipv4(self.ga), Gid::from_ipv4(self.gb)]
    }
}

/// Every RC verb A → B and a UD SEND, data checked byte for byte.
pub fn every_verb(a: &Node, b: &Node) {
    use nic::verbs::{AhAttr, RecvWr, SendOp, SendWr, Sgl, UdDest, WcOpcode, WcStatus};
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    a.mem.write(0, &data);
    b.mem.write(0x10_0000, &data);
    b.mem.write(0x20_0000, &7u64.to_ne_bytes());
    b.dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 90,
                sgl: Sgl::single(b.base + 0x30_0000, 65536, b.lkey),
            },
        )
        .unwrap();
    b.dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 91,
                sgl: Sgl::single(b.base + 0x31_0000, 16, b.lkey),
            },
        )
        .unwrap();
    b.dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 92,
                sgl: Sgl::single(b.base + 0x32_0000, 16, b.lkey),
            },
        )
        .unwrap();
    let w = |id, op, off: u64, len| SendWr::new(id, op, Sgl::single(a.base + off, len, a.lkey));
    let (rb, bb) = (b.rkey, b.base);
    let posts = [
        w(
            1,
            SendOp::Write {
                remote_addr: bb,
                rkey: rb,
            },
            0,
            200_000,
        ),
        w(
            2,
            SendOp::Read {
                remote_addr: bb + 0x10_0000,
                rkey: rb,
            },
            0x10_0000,
            200_000,
        ),
        w(3, SendOp::Send, 0, 50_000),
        w(
            4,
            SendOp::WriteWithImm {
                remote_addr: bb + 0x38_0000,
                rkey: rb,
                imm: 0xabcd,
            },
            0,
            10_000,
        ),
        w(
            5,
            SendOp::FetchAdd {
                remote_addr: bb + 0x20_0000,
                rkey: rb,
                add: 3,
            },
            0x20_0000,
            8,
        ),
        w(
            6,
            SendOp::CompareSwap {
                remote_addr: bb + 0x20_0000,
                rkey: rb,
                compare: 10,
                swap: 77,
            },
            0x20_0008,
            8,
        ),
        w(7, SendOp::SendWithImm { imm: 0x1234 }, 1000, 0),
    ];
    for p in posts {
        a.dev.post_send(a.qpn, p).unwrap();
    }
    let wcs = wait(&a.cq, 7, Duration::from_secs(30));
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    let rx = wait(&b.cq, 3, Duration::from_secs(10));
    assert_eq!(
        (rx[0].wr_id, rx[0].opcode, rx[0].byte_len),
        (90, WcOpcode::Recv, 50_000)
    );
    assert_eq!(
        (rx[1].wr_id, rx[1].opcode, rx[1].imm),
        (91, WcOpcode::RecvRdmaWithImm, Some(0xabcd))
    );
    assert_eq!(
        (rx[2].wr_id, rx[2].imm, rx[2].byte_len),
        (92, Some(0x1234), 0)
    );
    assert_eq!(read(&b.mem, 0, 200_000), data);
    assert_eq!(read(&a.mem, 0x10_0000, 200_000), data);
    assert_eq!(read(&b.mem, 0x30_0000, 50_000), data[..50_000]);
    assert_eq!(read(&b.mem, 0x38_0000, 10_000), data[..10_000]);
    assert_eq!(read(&a.mem, 0x20_0000, 8), 7u64.to_ne_bytes());
    assert_eq!(read(&a.mem, 0x20_0008, 8), 10u64.to_ne_bytes());
    assert_eq!(read(&b.mem, 0x20_0000, 8), 77u64.to_ne_bytes());

    // UD SEND with the 40-byte GRH in front of the data
    b.dev
        .post_recv(
            b.ud_qpn,
            RecvWr {
                wr_id: 200,
                sgl: Sgl::single(b.base + 0x3A_0000, 4096, b.lkey),
            },
        )
        .unwrap();
    let mut wr = SendWr::new(100, SendOp::Send, Sgl::single(a.base, 1000, a.lkey));
    wr.ud = Some(UdDest {
        ah: AhAttr::new(b.gid, b.mac),
        remote_qpn: b.ud_qpn,
        remote_qkey: 0x1111_1111,
    });
    a.dev.post_send(a.ud_qpn, wr).unwrap();
    let sent = wait(&a.cq, 1, Duration::from_secs(10));
    assert_eq!(sent[0].status, WcStatus::Success);
    let got = wait(&b.cq, 1, Duration::from_secs(10));
    assert_eq!(
        (got[0].wr_id, got[0].byte_len, got[0].src_qp),
        (200, 1040, a.ud_qpn)
    );
    assert_eq!(read(&b.mem, 0x3A_0000 + 40, 1000), data[..1000]);
}
