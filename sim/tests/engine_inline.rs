//! Inline engines (`Engine::start_inline`): no engine thread — the test's
//! own thread turns both devices' loops while it waits, as a
//! run-to-completion application does. RDMA WRITE, READ and SEND between
//! two of them on the in-memory wire, data checked byte for byte; control
//! calls run directly; a pcap tap with a frame limit records only the
//! first frames; stopping closes the port. Callers-turn engines
//! (`EngineConfig::callers_turn`): a thread of their own, which the
//! application's turns (`Device::try_turn`) join.

use nic::device::Rnic;
use nic::engine::{CqHandle, Device, Engine, EngineConfig};
use nic::io::mem::pair;
use nic::io::pcap::{read_pcap, PcapTap};
use nic::io::Port;
use nic::transport::{QpInit, RnicConfig};
use nic::verbs::{
    access, AhAttr, HeapMemory, Memory, QpType, RecvWr, SendOp, SendWr, Sgl, Wc, WcStatus,
};
use sim::{connect, PairConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{EthernetAddress, Gid};

struct Side {
    engine: Engine,
    dev: Device,
    cq: CqHandle,
    qpn: u32,
    mem: Arc<HeapMemory>,
    base: u64,
    lkey: u32,
    rkey: u32,
}

const MEM: usize = 1 << 20;

/// The two sides' MACs on the in-memory wire.
const MACS: [EthernetAddress; 2] = [
    EthernetAddress([2, 0, 0, 0, 0, 1]),
    EthernetAddress([2, 0, 0, 0, 0, 2]),
];

fn gid(i: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, i + 1))
}

/// How a side's engine runs.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    Inline,
    CallersTurn,
}

fn side(i: u8, port: Box<dyn Port>, run: Run) -> Side {
    let rnic = Rnic::new(RnicConfig::new(MACS[i as usize], gid(i)));
    let engine = match run {
        Run::Inline => Engine::start_inline(rnic, port, EngineConfig::default()),
        Run::CallersTurn => Engine::start(
            rnic,
            port,
            EngineConfig {
                callers_turn: true,
                ..Default::default()
            },
        ),
    };
    let dev = engine.device();
    assert_eq!(dev.is_inline(), run == Run::Inline);
    let cq = dev.create_cq(1024).unwrap();
    let mem = Arc::new(HeapMemory::new(MEM));
    let (m, cqn, base) = (mem.clone(), cq.cqn, 0x1000_0000 * (i as u64 + 1));
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
            let q = r
                .create_qp(QpInit {
                    qp_type: QpType::Rc,
                    pd,
                    send_cq: cqn,
                    recv_cq: cqn,
                    srq: None,
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    sq_sig_all: true,
                })
                .unwrap();
            (q, l, k)
        })
        .unwrap();
    Side {
        engine,
        dev,
        cq,
        qpn,
        mem,
        base,
        lkey,
        rkey,
    }
}

/// Turns both engines until `cq` holds `n` completions.
fn wait(sides: &[&Side], cq: &CqHandle, n: usize) -> Vec<Wc> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        for s in sides {
            s.dev.turn();
        }
        cq.poll(n - out.len(), &mut out);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "only {} of {n} completions: {out:?}",
            out.len()
        );
    }
    out
}

/// Connects the two sides' RC QPs.
fn connect_sides(a: &Side, b: &Side, macs: [EthernetAddress; 2]) {
    for (i, (me, peer)) in [(a, b), (b, a)].into_iter().enumerate() {
        let ah = AhAttr::new(gid(1 - i as u8), macs[1 - i]);
        let (q, pq) = (me.qpn, peer.qpn);
        let cfg = PairConfig {
            mtu: 1024,
            ..PairConfig::default()
        };
        me.dev
            .call(move |r| connect(r, q, cfg, ah, pq, 100, 100))
            .unwrap();
    }
}

#[test]
fn two_inline_engines_turned_by_one_thread() {
    let macs = MACS;
    let (pa, pb) = pair(macs, 1024);
    let dir = std::env::temp_dir().join(format!("softrnic-inline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("first.pcap");
    let pa = PcapTap::new(pa, &pcap).unwrap().with_limit(5);
    let (a, b) = (
        side(0, Box::new(pa), Run::Inline),
        side(1, Box::new(pb), Run::Inline),
    );
    connect_sides(&a, &b, macs);
    // nothing moves until someone turns the loops
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    a.mem.write(0, &data);
    b.mem.write(0x8_0000, &data[..50_000]);
    b.dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 9,
                sgl: Sgl::single(b.base + 0x4_0000, 4096, b.lkey),
            },
        )
        .unwrap();
    let w = |id, op, off: u64, len| SendWr::new(id, op, Sgl::single(a.base + off, len, a.lkey));
    for wr in [
        w(
            1,
            SendOp::Write {
                remote_addr: b.base,
                rkey: b.rkey,
            },
            0,
            100_000,
        ),
        w(
            2,
            SendOp::Read {
                remote_addr: b.base + 0x8_0000,
                rkey: b.rkey,
            },
            0x8_0000,
            50_000,
        ),
        w(3, SendOp::Send, 0, 3000),
    ] {
        a.dev.post_send(a.qpn, wr).unwrap();
    }
    let wcs = wait(&[&a, &b], &a.cq, 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let rx = wait(&[&a, &b], &b.cq, 1);
    assert_eq!((rx[0].wr_id, rx[0].byte_len), (9, 3000));
    let read = |m: &HeapMemory, off, len| {
        let mut v = vec![0u8; len];
        m.read(off, &mut v);
        v
    };
    assert_eq!(read(&b.mem, 0, 100_000), data);
    assert_eq!(read(&a.mem, 0x8_0000, 50_000), data[..50_000]);
    assert_eq!(read(&b.mem, 0x4_0000, 3000), data[..3000]);
    // control calls run on this thread
    let c = a.dev.counters().unwrap();
    assert!(c.sent_pkts > 100, "{c:?}");
    assert!(a.dev.port_counters().unwrap().tx_packets > 100);
    let sa = a.engine.stop();
    assert!(sa.turns > 0 && sa.tx_frames > 100, "{sa:?}");
    assert!(a.dev.post_send(a.qpn, w(4, SendOp::Send, 0, 1)).is_err());
    assert_eq!(a.dev.turn(), 0);
    drop(b.engine);
    // the tap kept only the first 5 frames and was flushed when the port closed
    assert_eq!(read_pcap(&pcap).unwrap().len(), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WRITE of `len` bytes from `a`'s offset 0 to `b`'s base, its
/// completion polled by `poll` (which may turn the engines).
fn write_once(a: &Side, b: &Side, id: u64, len: u32, mut poll: impl FnMut(&mut Vec<Wc>)) {
    let wr = SendWr::new(
        id,
        SendOp::Write {
            remote_addr: b.base,
            rkey: b.rkey,
        },
        Sgl::single(a.base, len, a.lkey),
    );
    a.dev.post_send(a.qpn, wr).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    while out.is_empty() {
        poll(&mut out);
        assert!(t0.elapsed() < Duration::from_secs(60), "no completion");
    }
    assert_eq!((out[0].wr_id, out[0].status), (id, WcStatus::Success));
}

#[test]
fn callers_turn_engines_move_data_with_and_without_the_application_turning() {
    let macs = MACS;
    let (pa, pb) = pair(macs, 1024);
    let (a, b) = (
        side(0, Box::new(pa), Run::CallersTurn),
        side(1, Box::new(pb), Run::CallersTurn),
    );
    connect_sides(&a, &b, macs);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 253) as u8).collect();
    a.mem.write(0, &data);
    // nobody turns: the engines' threads move it
    write_once(&a, &b, 1, 200_000, |out| {
        a.cq.poll(1, out);
        std::thread::yield_now();
    });
    let mut got = vec![0u8; data.len()];
    b.mem.read(0, &mut got);
    assert_eq!(got, data);
    // the application turns too: some of its turns are taken
    let rev: Vec<u8> = data.iter().rev().copied().collect();
    a.mem.write(0, &rev);
    let mut taken = 0;
    for id in 2..50 {
        write_once(&a, &b, id, 200_000, |out| {
            taken += a.dev.try_turn().is_some() as usize;
            b.dev.try_turn();
            a.cq.poll(1, out);
        });
    }
    assert!(taken > 0, "no turn of the application's was taken");
    b.mem.read(0, &mut got);
    assert_eq!(got, rev);
    // it stops turning: the threads serve it alone again
    a.dev.leave();
    b.dev.leave();
    write_once(&a, &b, 50, 4096, |out| {
        a.cq.poll(1, out);
        std::thread::yield_now();
    });
    let sa = a.engine.stop();
    assert!(sa.turns > 0 && sa.tx_frames > 100, "{sa:?}");
    assert!(a.dev.try_turn().is_none(), "a stopped engine turned");
    drop(b.engine);
}

#[test]
fn a_threaded_engine_takes_no_turn_of_the_application() {
    let macs = MACS;
    let (pa, _pb) = pair(macs, 16);
    let e = Engine::start(
        Rnic::new(RnicConfig::new(macs[0], gid(0))),
        Box::new(pa),
        EngineConfig::default(),
    );
    let d = e.device();
    assert!(!d.is_inline());
    assert_eq!(d.try_turn(), None);
    assert_eq!(d.turn(), 0);
    e.stop();
}
