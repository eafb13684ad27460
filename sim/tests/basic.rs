//! First smoke scenarios: every RC verb once over a clean link.

use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, WcOpcode, WcStatus};
use sim::{Pair, PairConfig};
use std::time::Duration;

fn fill(p: &Pair, i: usize, off: usize, data: &[u8]) {
    p.sides[i].mem.write(off, data);
}

fn read(p: &Pair, i: usize, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    p.sides[i].mem.read(off, &mut v);
    v
}

#[test]
fn rc_write_read_send_atomics() {
    let mut p = Pair::new(PairConfig::default());
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    fill(&p, 0, 0, &data);
    let (a, b) = (&p.sides[0], &p.sides[1]);
    let (qa, la, ba) = (a.qpn, a.lkey, a.base);
    let (qb, lb, bb, rb) = (b.qpn, b.lkey, b.base, b.rkey);
    // WRITE 5000 bytes A -> B at offset 0x1000
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(
                1,
                SendOp::Write {
                    remote_addr: bb + 0x1000,
                    rkey: rb,
                },
                Sgl::single(ba, 5000, la),
            ),
        )
        .unwrap();
    // SEND 3000 bytes A -> B into a receive buffer at 0x8000
    p.sim.nodes[1]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 77,
                sgl: Sgl::single(bb + 0x8000, 4096, lb),
            },
        )
        .unwrap();
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(2, SendOp::Send, Sgl::single(ba + 100, 3000, la)),
        )
        .unwrap();
    // READ 5000 bytes back from B:0x1000 into A:0x4000
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(
                3,
                SendOp::Read {
                    remote_addr: bb + 0x1000,
                    rkey: rb,
                },
                Sgl::single(ba + 0x4000, 5000, la),
            ),
        )
        .unwrap();
    // FETCH_ADD and CMP_SWAP on B:0x10000
    p.sides[1].mem.write(0x10000, &40u64.to_ne_bytes());
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(
                4,
                SendOp::FetchAdd {
                    remote_addr: bb + 0x10000,
                    rkey: rb,
                    add: 2,
                },
                Sgl::single(ba + 0x20000, 8, la),
            ),
        )
        .unwrap();
    p.sim.nodes[0]
        .post_send(
            qa,
            SendWr::new(
                5,
                SendOp::CompareSwap {
                    remote_addr: bb + 0x10000,
                    rkey: rb,
                    compare: 42,
                    swap: 7,
                },
                Sgl::single(ba + 0x20008, 8, la),
            ),
        )
        .unwrap();
    let mut done_a = Vec::new();
    let mut done_b = Vec::new();
    let ok = p.sim.run_until(Duration::from_millis(100), |s| {
        let mut out = Vec::new();
        let _ = s.nodes[0].poll_cq(0, 100, &mut out);
        done_a.append(&mut out);
        let _ = s.nodes[1].poll_cq(0, 100, &mut out);
        done_b.extend(out);
        done_a.len() == 5 && done_b.len() == 1
    });
    assert!(ok, "a: {done_a:?} b: {done_b:?}");
    assert!(
        done_a.iter().all(|w| w.status == WcStatus::Success),
        "{done_a:?}"
    );
    assert_eq!(
        done_a.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(done_b[0].opcode, WcOpcode::Recv);
    assert_eq!(done_b[0].byte_len, 3000);
    assert_eq!(read(&p, 1, 0x1000, 5000), data);
    assert_eq!(read(&p, 1, 0x8000, 3000), data[100..3100]);
    assert_eq!(read(&p, 0, 0x4000, 5000), data);
    assert_eq!(read(&p, 0, 0x20000, 8), 40u64.to_ne_bytes());
    assert_eq!(read(&p, 0, 0x20008, 8), 42u64.to_ne_bytes());
    assert_eq!(read(&p, 1, 0x10000, 8), 7u64.to_ne_bytes());
    let _ = qa;
}
