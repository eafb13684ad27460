//! Acceptance 1 of the engine issue over AF_PACKET: two engines in two
//! network namespaces joined by a veth pair exchange every RC verb and a UD
//! SEND; the data is checked byte for byte. The test makes its own
//! namespaces (addresses only inside them) and removes them even when it
//! fails.

mod enginecommon;

use enginecommon::{can_run, read, start, wait};
use nic::io::afpacket::{AfPacketPort, RingConfig};
use nic::io::netns::{self, Namespaces};
use nic::io::Port;
use nic::sim::PairConfig;
use nic::verbs::{AhAttr, Memory, RecvWr, SendOp, SendWr, Sgl, UdDest, WcOpcode, WcStatus};
use std::time::Duration;

#[test]
fn every_rc_verb_and_ud_send_over_afpacket_between_namespaces() {
    if !can_run("every_rc_verb_and_ud_send_over_afpacket_between_namespaces", &[]) {
        return;
    }
    let id = std::process::id() % 100_000;
    let (na, nb) = (netns::ns_name("pa"), netns::ns_name("pb"));
    let _ns = Namespaces::create(&[na.clone(), nb.clone()]).expect("create namespaces");
    let (va, vb) = (format!("rva{id}"), format!("rvb{id}"));
    netns::veth(&na, &va, "192.0.2.1/24", &nb, &vb, "192.0.2.2/24", 9000).expect("veth pair");
    let pa = netns::run_in(&na, || AfPacketPort::open(&va, RingConfig::default()))
        .unwrap()
        .expect("open port a");
    let pb = netns::run_in(&nb, || AfPacketPort::open(&vb, RingConfig::default()))
        .unwrap()
        .expect("open port b");
    assert_eq!(pa.mtu(), 9000);
    let cfg = PairConfig {
        mtu: 4096,
        timeout: 14,
        ..PairConfig::default()
    };
    let nodes = start(vec![Box::new(pa), Box::new(pb)], cfg);
    let (a, b) = (&nodes[0], &nodes[1]);

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
    // WRITE_WITH_IMM and SEND_WITH_IMM consume receives 91.. in order: post one more
    b.dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 92,
                sgl: Sgl::single(b.base + 0x32_0000, 16, b.lkey),
            },
        )
        .unwrap();
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

    let pc = a.dev.port_counters().unwrap();
    assert!(pc.tx_packets >= 50 && pc.rx_packets >= 50, "{pc:?}");
    for n in nodes {
        n.engine.stop();
    }
}
