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
    let mut nodes = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let mac = port.mac();
        let rnic = Rnic::new(RnicConfig::new(mac, gids[i]));
        let engine = Engine::start(
            rnic,
            port,
            EngineConfig {
                name: format!("engine-{i}"),
                ..Default::default()
            },
        );
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
