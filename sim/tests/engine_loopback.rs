//! The engine's loopback on real threads: two RC QPs of ONE device (its own
//! GID and MAC as their peer's) exchange a WRITE; the frames never reach
//! the port's wire (the other end of the in-memory wire receives nothing),
//! the pcap tap records each once, as a capture of the wire would show
//! it, and a lossy impairment stage drops looped frames, which the QPs
//! then retransmit.

mod enginecommon;

use enginecommon::{wait, MEM, STUCK};
use nic::device::Rnic;
use nic::engine::{Engine, EngineConfig};
use nic::io::impair::{Impaired, Impairments, RandomImpairments};
use nic::io::pcap::PcapTap;
use nic::io::{FrameBatch, Port};
use nic::transport::{Counters, QpInit, RnicConfig};
use nic::verbs::{access, AhAttr, HeapMemory, Memory, QpType, SendOp, SendWr, Sgl, WcStatus};
use sim::{connect, PairConfig};
use std::sync::Arc;
use wire::{EthernetAddress, Gid, Opcode, RoceRepr};

const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x11]);
const LEN: usize = 64 * 1024;

/// A device on `port` with two RC QPs connected to each other through its
/// own address; A WRITEs `LEN` bytes into B's half of the region `rounds`
/// times. Returns the engine's statistics and A's counters.
fn write_to_self(port: Box<dyn Port>, rounds: u64) -> (nic::engine::EngineStats, Counters) {
    let gid = Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 7));
    let engine = Engine::start(
        Rnic::new(RnicConfig::new(MAC, gid)),
        port,
        EngineConfig::default(),
    );
    let dev = engine.device();
    let cq = dev.create_cq(1024).unwrap();
    let mem = Arc::new(HeapMemory::new(MEM));
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    mem.write(0, &data);
    let (m, cqn) = (mem.clone(), cq.cqn);
    let (qa, qb, lkey, rkey) = dev
        .call(move |r| {
            let pd = r.alloc_pd();
            let all = access::LOCAL_WRITE | access::REMOTE_WRITE;
            let (l, k) = r
                .reg_mr(pd, m as Arc<dyn Memory>, 0, 0x1000_0000, MEM as u64, all)
                .unwrap();
            let mk = || QpInit {
                qp_type: QpType::Rc,
                pd,
                send_cq: cqn,
                recv_cq: cqn,
                srq: None,
                max_send_wr: 64,
                max_recv_wr: 64,
                sq_sig_all: true,
            };
            (r.create_qp(mk()).unwrap(), r.create_qp(mk()).unwrap(), l, k)
        })
        .unwrap();
    let cfg = PairConfig {
        mtu: 1024,
        timeout: 10,
        retry_cnt: 7,
        ..PairConfig::default()
    };
    let ah = AhAttr::new(gid, MAC);
    for (q, peer) in [(qa, qb), (qb, qa)] {
        dev.call(move |r| connect(r, q, cfg, ah, peer, 100, 100))
            .unwrap();
    }
    for k in 0..rounds {
        let wr = SendWr::new(
            k,
            SendOp::Write {
                remote_addr: 0x1000_0000 + MEM as u64 / 2,
                rkey,
            },
            Sgl::single(0x1000_0000, LEN as u32, lkey),
        );
        dev.post_send(qa, wr).unwrap();
        let wc = wait(&cq, 1, STUCK);
        assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    }
    let mut got = vec![0u8; LEN];
    mem.read(MEM / 2, &mut got);
    assert!(got == data, "the WRITE's data arrived");
    let counters = dev.call(move |r| r.query_qp(qa).unwrap().counters).unwrap();
    (engine.stop(), counters)
}

#[test]
fn looped_frames_stay_off_the_wire_and_are_captured_once() {
    let (a, mut b) = nic::io::mem::pair([MAC, EthernetAddress([0x02, 0, 0, 0, 0, 0x12])], 1024);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loop.pcap");
    let tap = PcapTap::new(a, &file).unwrap();
    let (stats, c) = write_to_self(Box::new(tap), 1);
    assert_eq!((c.sent_pkts, c.retransmitted_pkts), (64, 0), "{c:?}");
    // 64 WRITE packets at MTU 1024 and their ACKs (coalesced: at least one)
    assert!(stats.looped_frames >= 65, "{stats:?}");
    assert_eq!(stats.tx_frames, 0, "nothing went to the wire: {stats:?}");
    let mut batch = FrameBatch::new(64);
    assert_eq!(b.recv(&mut batch), 0, "the wire's other end got nothing");
    // the capture: every looped frame once, the WRITEs in PSN order
    let f = std::fs::File::open(&file).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let (mut writes, mut acks, mut psns) = (0u64, 0u64, Vec::new());
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let repr = RoceRepr::parse(&p.data).expect("a RoCE frame");
        assert_eq!(repr.eth.dst, MAC);
        assert_eq!(repr.eth.src, MAC);
        match repr.bth.opcode {
            Opcode::RC_ACKNOWLEDGE => acks += 1,
            _ => {
                writes += 1;
                psns.push(repr.bth.psn.value());
            }
        }
    }
    assert_eq!(writes, 64);
    assert_eq!(psns, (100..164).collect::<Vec<u32>>(), "each PSN once");
    assert!(acks >= 1);
    assert_eq!(writes + acks, stats.looped_frames, "{stats:?}");
}

#[test]
fn a_lossy_stage_drops_looped_frames_and_the_qps_retransmit() {
    let (a, _b) = nic::io::mem::pair([MAC, EthernetAddress([0x02, 0, 0, 0, 0, 0x12])], 1024);
    let loss = Impairments {
        loss: 0.05,
        ..Impairments::default()
    };
    let port = Impaired::new(a, Box::new(RandomImpairments::new(loss, 7)));
    let (stats, c) = write_to_self(Box::new(port), 8);
    assert!(
        c.retransmitted_pkts > 0,
        "go-back-N after the losses: {c:?}"
    );
    assert!(stats.looped_frames >= 8 * 64, "{stats:?}");
    assert_eq!(stats.tx_frames, 0, "{stats:?}");
}
