//! The simulator setup shared by `transport.rs` (criterion) and
//! `transport_ratio.rs` (interleaved): two RNICs over an ideal link, and a
//! batch of RC RDMA WRITEs from one to the other.

use nic::verbs::{Memory, QpType, SendOp, SendWr, Sgl, Wc, WcStatus};
use sim::{LinkConfig, Pair, PairConfig};

/// WRITEs outstanding per iteration (perftest's default `--tx-depth`).
pub const TX_DEPTH: usize = 128;
#[allow(dead_code)] // not every bench runs both sizes
pub const SIZES: [usize; 2] = [64, 64 * 1024];

/// A connected RC pair over an ideal link.
pub fn pair(size: usize) -> Pair {
    let link = LinkConfig::ideal();
    Pair::new(PairConfig {
        qp_type: QpType::Rc,
        mtu: 4096,
        mem_len: 2 * size.max(4096),
        link,
        max_wr: TX_DEPTH as u32,
        ..PairConfig::default()
    })
}

/// Posts `TX_DEPTH` WRITEs of `size` bytes from side 0 to side 1 and steps
/// the simulator until every one has completed.
pub fn write_batch(p: &mut Pair, size: usize, wcs: &mut Vec<Wc>) {
    let (a, b) = (&p.sides[0], &p.sides[1]);
    let (qpn, cq) = (a.qpn, a.cq);
    let sgl = Sgl::single(a.base, size as u32, a.lkey);
    let op = SendOp::Write {
        remote_addr: b.base + size as u64,
        rkey: b.rkey,
    };
    for i in 0..TX_DEPTH {
        p.sim.nodes[0]
            .post_send(qpn, SendWr::new(i as u64, op, sgl))
            .expect("post_send");
    }
    let mut done = 0;
    while done < TX_DEPTH {
        let busy = p.sim.step();
        wcs.clear();
        p.sim.nodes[0]
            .poll_cq(cq, usize::MAX, wcs)
            .expect("poll_cq");
        for wc in wcs.iter() {
            assert_eq!(wc.status, WcStatus::Success);
        }
        done += wcs.len();
        assert!(busy || done == TX_DEPTH, "the transport stalled");
    }
}

/// A non-trivial pattern of `len` bytes.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0x5A)
        .collect()
}

/// A pair ready for `write_batch` of `size`-byte WRITEs: the source holds
/// the pattern, one batch has run and landed.
pub fn ready_pair(size: usize) -> (Pair, Vec<Wc>) {
    let mut p = pair(size);
    p.sides[0].mem.write(0, &pattern(size));
    let mut wcs = Vec::with_capacity(TX_DEPTH);
    write_batch(&mut p, size, &mut wcs);
    let landed = p.sides[1].mem.to_vec();
    let want = pattern(size);
    if let Some(at) = (0..size).find(|&i| landed[size + i] != want[i]) {
        panic!("the WRITEs did not land: first difference at byte {at}");
    }
    (p, wcs)
}
