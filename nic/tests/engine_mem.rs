//! Two engines on their own threads joined by the in-memory wire: every RC
//! verb, data checked byte for byte; then thousands of messages through a
//! seeded impairing interceptor; a pcap tap records what went over.

use nic::engine::{CqHandle, Device, Engine, EngineConfig};
use nic::io::impair::{Impaired, Impairments, RandomImpairments};
use nic::io::mem::pair;
use nic::io::pcap::{read_pcap, PcapTap};
use nic::io::Port;
use nic::sim::{connect, PairConfig};
use nic::transport::{QpInit, Rnic, RnicConfig};
use nic::verbs::{
    access, AhAttr, HeapMemory, Memory, QpType, RecvWr, SendOp, SendWr, Sgl, Wc, WcStatus,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{EthernetAddress, Gid};

const MEM: usize = 1 << 22;

struct Node {
    engine: Engine,
    dev: Device,
    cq: CqHandle,
    qpn: u32,
    mem: Arc<HeapMemory>,
    base: u64,
    lkey: u32,
    rkey: u32,
}

fn macs() -> [EthernetAddress; 2] {
    [
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    ]
}

fn gid(i: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, i + 1))
}

fn start(ports: [Box<dyn Port>; 2]) -> [Node; 2] {
    let mut nodes = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let rnic = Rnic::new(RnicConfig::new(macs()[i], gid(i as u8)));
        let cfg = EngineConfig {
            name: format!("engine-{i}"),
            ..Default::default()
        };
        let engine = Engine::start(rnic, port, cfg);
        let dev = engine.device();
        let cq = dev.create_cq(1 << 16).unwrap();
        let mem = Arc::new(HeapMemory::new(MEM));
        let m = mem.clone();
        let cqn = cq.cqn;
        let base = 0x1000_0000 * (i as u64 + 1);
        let (qpn, lkey, rkey) = dev
            .call(move |r| {
                let pd = r.alloc_pd();
                let all = access::LOCAL_WRITE
                    | access::REMOTE_WRITE
                    | access::REMOTE_READ
                    | access::REMOTE_ATOMIC;
                let (l, k) = r
                    .reg_mr(pd, m as Arc<dyn Memory>, 0, base, MEM as u64, all)
                    .unwrap();
                let init = QpInit {
                    qp_type: QpType::Rc,
                    pd,
                    send_cq: cqn,
                    recv_cq: cqn,
                    srq: None,
                    max_send_wr: 8192,
                    max_recv_wr: 8192,
                    sq_sig_all: true,
                };
                (r.create_qp(init).unwrap(), l, k)
            })
            .unwrap();
        nodes.push(Node {
            engine,
            dev,
            cq,
            qpn,
            mem,
            base,
            lkey,
            rkey,
        });
    }
    for i in 0..2 {
        let peer_qpn = nodes[1 - i].qpn;
        let qpn = nodes[i].qpn;
        let ah = AhAttr::new(gid(1 - i as u8), macs()[1 - i]);
        let cfg = PairConfig {
            timeout: 10,
            unlimited_retries: false,
            ..PairConfig::default()
        };
        nodes[i]
            .dev
            .call(move |r| connect(r, qpn, cfg, ah, peer_qpn, 100, 100))
            .unwrap();
    }
    nodes.try_into().ok().unwrap()
}

fn wait(cq: &CqHandle, n: usize, limit: Duration) -> Vec<Wc> {
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

#[test]
fn every_rc_verb_between_two_engine_threads() {
    let (a, b) = pair(macs(), 1024);
    let [na, nb] = start([Box::new(a), Box::new(b)]);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    na.mem.write(0, &data);
    nb.mem.write(0x10_0000, &data);
    nb.mem.write(0x20_0000, &5u64.to_ne_bytes());
    nb.dev
        .post_recv(
            nb.qpn,
            RecvWr {
                wr_id: 9,
                sgl: Sgl::single(nb.base + 0x30_0000, 65536, nb.lkey),
            },
        )
        .unwrap();
    let w = |id, op, off: u64, len| SendWr::new(id, op, Sgl::single(na.base + off, len, na.lkey));
    na.dev
        .post_send(
            na.qpn,
            w(
                1,
                SendOp::Write {
                    remote_addr: nb.base,
                    rkey: nb.rkey,
                },
                0,
                100_000,
            ),
        )
        .unwrap();
    na.dev
        .post_send(
            na.qpn,
            w(
                2,
                SendOp::Read {
                    remote_addr: nb.base + 0x10_0000,
                    rkey: nb.rkey,
                },
                0x10_0000,
                100_000,
            ),
        )
        .unwrap();
    na.dev
        .post_send(na.qpn, w(3, SendOp::Send, 0, 40_000))
        .unwrap();
    na.dev
        .post_send(
            na.qpn,
            w(
                4,
                SendOp::FetchAdd {
                    remote_addr: nb.base + 0x20_0000,
                    rkey: nb.rkey,
                    add: 10,
                },
                0x20_0000,
                8,
            ),
        )
        .unwrap();
    na.dev
        .post_send(
            na.qpn,
            w(
                5,
                SendOp::CompareSwap {
                    remote_addr: nb.base + 0x20_0000,
                    rkey: nb.rkey,
                    compare: 15,
                    swap: 99,
                },
                0x20_0008,
                8,
            ),
        )
        .unwrap();
    let wcs = wait(&na.cq, 5, Duration::from_secs(20));
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let recv = wait(&nb.cq, 1, Duration::from_secs(5));
    assert_eq!((recv[0].wr_id, recv[0].byte_len), (9, 40_000));
    let read = |m: &HeapMemory, off: usize, len: usize| {
        let mut v = vec![0u8; len];
        m.read(off, &mut v);
        v
    };
    assert_eq!(read(&nb.mem, 0, 100_000), data);
    assert_eq!(read(&na.mem, 0x10_0000, 100_000), data);
    assert_eq!(read(&nb.mem, 0x30_0000, 40_000), data[..40_000]);
    assert_eq!(read(&na.mem, 0x20_0000, 8), 5u64.to_ne_bytes());
    assert_eq!(read(&na.mem, 0x20_0008, 8), 15u64.to_ne_bytes());
    assert_eq!(read(&nb.mem, 0x20_0000, 8), 99u64.to_ne_bytes());
    let pc = na.dev.port_counters().unwrap();
    assert!(pc.tx_packets > 100 && pc.rx_packets > 100, "{pc:?}");
    let sa = na.engine.stop();
    let sb = nb.engine.stop();
    assert!(sa.tx_frames > 0 && sb.rx_frames > 0);
}

#[test]
fn thousands_of_messages_through_an_impairing_wire_with_a_pcap_tap() {
    let (a, b) = pair(macs(), 4096);
    let imp = Impairments {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        corrupt: 0.005,
        ce_mark: 0.0,
    };
    let b = Impaired::new(b, Box::new(RandomImpairments::new(imp, 12)));
    let dir = std::env::temp_dir().join(format!("softrnic-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("tap.pcap");
    // the tap sits under the impairments: it records what goes on the wire
    let tapped = Impaired::new(
        PcapTap::new(a, &pcap).unwrap(),
        Box::new(RandomImpairments::new(imp, 11)),
    );
    let [na, nb] = start([Box::new(tapped), Box::new(b)]);
    const N: u64 = 3000;
    let mut posted = 0u64;
    let mut done = Vec::new();
    let t0 = Instant::now();
    while (done.len() as u64) < N {
        while posted < N && posted - done.len() as u64 <= 64 {
            let off = (posted % 64) * 4096;
            let len = (posted * 37 % 4000) as u32 + 1;
            na.mem
                .write(off as usize, &vec![(posted % 256) as u8; len as usize]);
            let op = if posted % 3 == 0 {
                SendOp::Read {
                    remote_addr: nb.base + off,
                    rkey: nb.rkey,
                }
            } else {
                SendOp::Write {
                    remote_addr: nb.base + off,
                    rkey: nb.rkey,
                }
            };
            let wr = SendWr::new(
                posted,
                op,
                Sgl::single(
                    na.base + 0x20_0000 * (posted % 3 == 0) as u64 + off,
                    len,
                    na.lkey,
                ),
            );
            na.dev.post_send(na.qpn, wr).unwrap();
            posted += 1;
        }
        if na.cq.poll(64, &mut done) == 0 {
            std::thread::yield_now();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{} of {N} after 120 s",
            done.len()
        );
    }
    for (i, w) in done.iter().enumerate() {
        assert_eq!(w.wr_id, i as u64, "in order, exactly once");
        assert_eq!(w.status, WcStatus::Success);
    }
    let c = na.dev.counters().unwrap();
    assert!(
        c.retransmitted_pkts > 0,
        "loss must have caused retransmissions: {c:?}"
    );
    drop(na.engine);
    drop(nb.engine);
    let frames = read_pcap(&pcap).unwrap();
    assert!(
        frames.len() > N as usize,
        "the tap recorded {} frames",
        frames.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
