//! Two engines with one connected RC QP and one UD QP each, over any ports.
#![allow(dead_code)]

use nic::device::Rnic;
use nic::engine::{CqHandle, Device, Engine, EngineConfig};
use nic::io::Port;
use nic::transport::{QpInit, RnicConfig};
use nic::verbs::{access, AhAttr, HeapMemory, Memory, QpType, Wc};
use sim::{connect, PairConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::Gid;

pub const MEM: usize = 1 << 22;

/// How long a test waits for a condition (a count, a state, a frame): far
/// more than a loaded machine needs, so only a stuck run reaches it.
pub const STUCK: Duration = Duration::from_secs(60);

// each test binary uses some of them
#[allow(unused_imports)]
pub use testkit::{poll_within, wait_for, wait_until};

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
    let ready = testkit::netns::available()
        .map_err(|e| e.to_string())
        .and_then(|()| missing_tool.map_or(Ok(()), Err));
    testkit::runs_here(test, ready)
}

/// A ── R ── B (`testkit::netns::Routed`) with the tests' conveniences:
/// creation and rule loading that fail the test, and ports opened on A or B.
pub struct Routed(pub testkit::netns::Routed);

impl std::ops::Deref for Routed {
    type Target = testkit::netns::Routed;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Routed {
    /// `tag` keeps concurrent tests apart (a short word and a digit).
    pub fn new(tag: &str) -> Routed {
        Routed(testkit::netns::Routed::create(tag).expect("A ── R ── B namespaces"))
    }

    /// Loads an nftables ruleset into the router.
    pub fn nft(&self, rules: &str) {
        self.0.nft(rules).expect("nft ruleset");
    }

    /// Opens side 0 (A) or 1 (B) with `backend`; returns the port and the
    /// MAC of its next hop towards the other side. AF_PACKET sends frame
    /// by frame (no UDP GSO), so that a capture on the path sees the
    /// frames themselves.
    pub fn open(
        &self,
        side: usize,
        backend: nic::io::Backend,
    ) -> (Box<dyn Port>, wire::EthernetAddress) {
        let (ns, dev, peer) = if side == 0 {
            (&self.a, &self.va, self.gb)
        } else {
            (&self.b, &self.vb, self.ga)
        };
        testkit::netns::run_in(ns, || {
            let opts = nic::io::OpenOptions {
                gso: nic::io::Gso::Off,
            };
            let (p, got) = nic::io::open_port_with(dev, backend, opts).expect("open port");
            assert!(backend == nic::io::Backend::Auto || got == backend);
            let (_, mac) =
                nic::io::addr::next_hop_mac(std::net::IpAddr::V4(peer), STUCK).expect("next hop");
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
    let wcs = wait(&a.cq, 7, STUCK);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    let rx = wait(&b.cq, 3, STUCK);
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
    let sent = wait(&a.cq, 1, STUCK);
    assert_eq!(sent[0].status, WcStatus::Success);
    let got = wait(&b.cq, 1, STUCK);
    assert_eq!(
        (got[0].wr_id, got[0].byte_len, got[0].src_qp),
        (200, 1040, a.ud_qpn)
    );
    assert_eq!(read(&b.mem, 0x3A_0000 + 40, 1000), data[..1000]);
}

/// What the sender's port saw, in the order its engine saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A PFC frame received: its pause time for priority 3, if named.
    Pfc(Option<u16>),
    /// A RoCE frame sent.
    Data,
}

/// A port that logs PFC frames received and RoCE frames sent.
pub struct Logged<P: Port> {
    pub inner: P,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
}

impl<P: Port> Port for Logged<P> {
    fn recv(&mut self, batch: &mut nic::io::FrameBatch) -> usize {
        let before = batch.len();
        let n = self.inner.recv(batch);
        let mut log = self.log.lock().unwrap();
        for i in before..batch.len() {
            if let Ok(m) = wire::MacControlRepr::parse(batch.get(i)) {
                if let wire::MacControl::Pfc {
                    class_enable,
                    quanta,
                } = m.control
                {
                    log.push(Seen::Pfc((class_enable & 1 << 3 != 0).then_some(quanta[3])));
                }
            }
        }
        n
    }
    fn send(&mut self, batch: &nic::io::FrameBatch) -> usize {
        let n = self.inner.send(batch);
        let mut log = self.log.lock().unwrap();
        for f in batch.iter().take(n) {
            if wire::RoceRepr::parse(f).is_ok() {
                log.push(Seen::Data);
            }
        }
        n
    }
    nic::forward_port!(field inner: tx_room, train_bytes, mac, mtu, link_speed_bps, counters, wait, wait_or_ring, attach_bell, pending, rx_backlog, loop_back);
}

/// PFC generation end to end over any pair of ports (the sender's first):
/// the receiver's engine is held inside a control call while the sender
/// fills the receiver's ring with a whole window of 4 KiB WRITEs. Once
/// released, the receiver sees the backlog above XOFF and pauses priority 3
/// (DSCP 26) before anything else; the sender, which the ACKs of that
/// window would let go on, sends nothing until the backlog has drained
/// below XON and the receiver has sent pause time 0; then the rest of the
/// WRITEs go and land intact. Counters on both sides agree. Ordering only:
/// no timing is asserted (give the ports a slow link speed, e.g. 10 Mb/s,
/// so that a pause lasts seconds, far longer than the drain).
pub fn pfc_stalled_receiver(sender: Box<dyn Port>, receiver: Box<dyn Port>) {
    use nic::transport::{CcConfig, PfcTxConfig};
    use nic::verbs::{SendOp, SendWr, Sgl, WcStatus};
    use std::sync::{mpsc, Mutex};
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Logged {
        inner: sender,
        log: log.clone(),
    };
    let cc = CcConfig {
        pfc_tx: Some(PfcTxConfig::new(256 << 10, 64 << 10)),
        ..CcConfig::default()
    };
    let ports: Vec<Box<dyn Port>> = vec![Box::new(a), receiver];
    let m = [ports[0].mac(), ports[1].mac()];
    let nodes = start_cc(
        ports,
        vec![gid(0), gid(1)],
        vec![m[1], m[0]],
        PairConfig {
            mtu: 4096,
            timeout: 20, // ~4 s: no retransmission while the receiver is held
            ..PairConfig::default()
        },
        cc,
    );
    let (na, nb) = (&nodes[0], &nodes[1]);
    // hold the receiver's engine
    let (held_tx, held_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let dev_b = nb.dev.clone();
    let holder = std::thread::spawn(move || {
        dev_b
            .call(move |_| {
                held_tx.send(()).unwrap();
                let _ = gate_rx.recv();
            })
            .unwrap()
    });
    held_rx.recv().unwrap();
    // a window (128 PSNs) of 4 KiB WRITEs reaches its ring; 72 more wait
    const N: u64 = 200;
    for i in 0..N {
        let off = i * 4096;
        na.mem
            .write(off as usize, &vec![(i * 7 % 251) as u8 + 1; 4096]);
        let wr = SendWr::new(
            i,
            SendOp::Write {
                remote_addr: nb.base + off,
                rkey: nb.rkey,
            },
            Sgl::single(na.base + off, 4096, na.lkey),
        );
        na.dev.post_send(na.qpn, wr).unwrap();
    }
    wait_until(STUCK, "the sender's window left", || {
        na.dev.port_counters().unwrap().tx_packets >= 128
    });
    let sent_before = log.lock().unwrap().len();
    assert_eq!(sent_before, 128, "a window, then the sender waits for ACKs");
    gate_tx.send(()).unwrap();
    holder.join().unwrap();
    let done = wait(&na.cq, N as usize, STUCK);
    assert!(
        done.iter().all(|w| w.status == WcStatus::Success),
        "{done:?}"
    );

    // the sender's view, in order
    let log = log.lock().unwrap().clone();
    assert!(log[..128].iter().all(|s| *s == Seen::Data));
    let mut paused = false;
    let (mut xoff, mut xon, mut after_xon) = (0, 0, 0);
    for (i, s) in log.iter().enumerate() {
        match *s {
            Seen::Pfc(Some(0)) => {
                paused = false;
                xon += 1;
            }
            Seen::Pfc(Some(q)) => {
                assert_eq!(q, 0xFFFF);
                paused = true;
                xoff += 1;
            }
            Seen::Pfc(None) => panic!("a PFC frame not naming priority 3"),
            Seen::Data => {
                assert!(
                    !paused,
                    "frame {i} sent while priority 3 was paused: {log:?}"
                );
                after_xon += (xon > 0) as usize;
            }
        }
    }
    assert!(xoff >= 1 && xon >= 1, "{log:?}");
    assert!(!paused, "resumed at the end");
    assert!(
        matches!(log[128], Seen::Pfc(Some(0xFFFF))),
        "the pause is the first thing the receiver sends: {:?}",
        &log[128..]
    );
    assert!(after_xon >= (N - 128) as usize, "the rest went after XON");

    // counters: every PFC frame B sent, A received (a lossless wire)
    let ca = na.dev.call(|r| r.pfc_counters(r.last_now())).unwrap();
    let cb = nb.dev.call(|r| r.pfc_counters(r.last_now())).unwrap();
    assert_eq!(ca.rx_pause[3], (xoff + xon) as u64);
    assert_eq!(cb.tx_pause[3], ca.rx_pause[3]);
    assert_eq!(cb.tx_pause.iter().sum::<u64>(), cb.tx_pause[3]);
    assert_eq!(ca.tx_pause, [0; 8], "the sender's ring never backed up");
    let names: Vec<(String, u64)> = cb.iter().collect();
    assert!(names.iter().any(|(n, v)| n == "tx_prio3_pause" && *v >= 2));
    assert!(names.iter().any(|(n, _)| n == "tx_prio3_pause_duration"));
    // the data landed
    let got = read(&nb.mem, 0, (N * 4096) as usize);
    for i in 0..N as usize {
        let want = (i as u64 * 7 % 251) as u8 + 1;
        if let Some(at) = got[i * 4096..(i + 1) * 4096]
            .iter()
            .position(|&x| x != want)
        {
            panic!("WRITE {i}: byte {at} differs");
        }
    }
    for n in nodes {
        n.engine.stop();
    }
}
