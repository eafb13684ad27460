//! A hostile peer: frames that pass every outer check (addressing, lengths,
//! a correct ICRC) but carry whatever header values an attacker or a broken
//! peer may send — any opcode with its extension headers, PSNs around the
//! live ones and far away, other QPNs, R_Keys of regions without remote
//! access or of no region, addresses and lengths at and past the bounds,
//! payloads up to twice the MTU, random AETH syndromes and MSNs, forged READ
//! responses and atomic ACKs. They are injected in both directions while QP
//! A carries real traffic (WRITEs and SENDs to the victim, READs and atomics
//! back).
//!
//! RoCE has no authentication: a forged packet with the right PSN is
//! accepted, may complete a message early or break the connection, and may
//! write where the R_Key it names allows. What must hold all the same
//! (IBA 9.7.5.1: the responder's checks come before any execution; 10.6.3:
//! a key grants only the accesses it was registered with; 11.4.2: each WQE
//! completes exactly once):
//!
//! - no panic, whatever arrives;
//! - memory registered without remote access, and memory registered
//!   read-only, is never changed (byte for byte, both sides); on the
//!   requester's side, whose keys the forged frames never name, nothing
//!   outside the local buffers of its own READs and atomics changes (a
//!   forged READ response or atomic ACK lands only there);
//! - every send and receive WQE posted on QP A completes exactly once
//!   (successfully, in error, or flushed when the QP is moved to ERR —
//!   whenever a forgery broke it, after which both ends are reset and
//!   connected again with new PSNs, and at the end);
//! - another QP (B) on the same two devices, never named by a forged frame,
//!   is unaffected: afterwards a WRITE, READ, SEND and two atomics on it
//!   complete successfully with byte-exact data, and its error counters are
//!   zero.
//!
//! Seeds are printed on failure for replay.

#![allow(clippy::needless_range_loop)] // two sides, indexed alike in several arrays

mod common;

use nic::device::Rnic;
use nic::transport::QpInit;
use nic::verbs::{
    access, AhAttr, HeapMemory, Memory, QpAttr, QpState, QpType, RecvWr, SendOp, SendWr, Sge, Sgl,
    Wc, WcStatus,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{connect, Pair, PairConfig};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use wire::opcode::Header as Hd;
use wire::{Aeth, AtomicEth, Deth, ExtHeaders, Feth, Opcode, Psn, Reth, RoceRepr, Syndrome};

const MTU: u32 = 1024;
const MAIN_LEN: usize = 1 << 20;
/// Side 0's READ and atomic results land here (and nowhere else).
const LAND: (usize, usize) = (0x8_0000, 0x9_0000);
/// Side 0's WRITE and SEND sources.
const SRC_LEN: usize = 0x1_0000;
/// The victim's WRITE targets and receive buffers (side 1).
const DST: usize = 0x2_0000;

/// One extra region of a device, with the keys it was registered under.
struct Region {
    mem: Arc<HeapMemory>,
    base: u64,
    lkey: u32,
    rkey: u32,
    init: Vec<u8>,
}

impl Region {
    fn new(r: &mut Rnic, pd: u32, base: u64, len: usize, acc: u32, seed: u32) -> Region {
        let mem = Arc::new(HeapMemory::new(len));
        let init = common::pattern(seed, len);
        mem.write(0, &init);
        let (lkey, rkey) = r
            .reg_mr(pd, mem.clone() as Arc<dyn Memory>, 0, base, len as u64, acc)
            .expect("register");
        Region {
            mem,
            base,
            lkey,
            rkey,
            init,
        }
    }

    fn unchanged(&self, what: &str, seed: u64) {
        let now = self.mem.to_vec();
        if let Some(at) = now.iter().zip(&self.init).position(|(a, b)| a != b) {
            panic!("seed {seed:#x}: {what} changed at offset {at:#x}");
        }
    }
}

/// What a forged frame may name on one device.
struct Keys {
    /// (base, len, rkey) of each region.
    regions: Vec<(u64, u64, u32)>,
    /// QPNs the forgery may address (QP A; never QP B).
    qpn: u32,
}

fn pick_va(rng: &mut SmallRng, regions: &[(u64, u64, u32)]) -> u64 {
    let (base, len, _) = regions[rng.gen_range(0..regions.len())];
    match rng.gen_range(0..8) {
        0 => rng.gen(),
        1 => base.wrapping_sub(rng.gen_range(1..64)),
        2 => base + len - rng.gen_range(0..16),
        3 => u64::MAX - rng.gen_range(0..4096),
        4 => base + len + rng.gen_range(0..4096),
        _ => base + rng.gen_range(0..len) / 8 * 8,
    }
}

fn pick_rkey(rng: &mut SmallRng, regions: &[(u64, u64, u32)], lkeys: &[u32]) -> u32 {
    match rng.gen_range(0..6) {
        0 => rng.gen(),
        1 => lkeys[rng.gen_range(0..lkeys.len())],
        2 => regions[rng.gen_range(0..regions.len())].2 ^ (1 << rng.gen_range(0..32)),
        _ => regions[rng.gen_range(0..regions.len())].2,
    }
}

fn pick_len(rng: &mut SmallRng) -> u32 {
    match rng.gen_range(0..8) {
        0 => 0,
        1 => rng.gen(),
        2 => u32::MAX - rng.gen_range(0..8),
        3 => MTU,
        4 => 8,
        _ => rng.gen_range(1..4 * MTU),
    }
}

/// A forged version of `template` (a frame that went the same way): same
/// addressing, everything from the BTH on chosen by `rng`, a correct ICRC.
fn forge(rng: &mut SmallRng, template: &[u8], keys: &Keys, lkeys: &[u32]) -> Option<Vec<u8>> {
    let t = RoceRepr::parse(template).ok()?;
    let infos: Vec<_> = Opcode::all().collect();
    let info = if rng.gen_bool(0.8) {
        // mostly RC (the QP's transport), sometimes anything
        let rc: Vec<_> = infos.iter().filter(|i| i.opcode < 0x20).collect();
        rc[rng.gen_range(0..rc.len())]
    } else {
        &infos[rng.gen_range(0..infos.len())]
    };
    let has = |h| info.headers.contains(h);
    let r = &keys.regions;
    let ext = ExtHeaders {
        deth: has(Hd::Deth).then(|| Deth {
            qkey: rng.gen(),
            src_qp: rng.gen_range(0..1 << 24),
        }),
        feth: has(Hd::Feth).then(|| Feth {
            selectivity: rng.gen_range(0..4),
            placement_type: rng.gen_range(0..16),
        }),
        reth: has(Hd::Reth).then(|| Reth {
            va: pick_va(rng, r),
            rkey: pick_rkey(rng, r, lkeys),
            dma_len: pick_len(rng),
        }),
        atomic: has(Hd::AtomicEth).then(|| AtomicEth {
            va: pick_va(rng, r),
            rkey: pick_rkey(rng, r, lkeys),
            swap_add: rng.gen(),
            compare: if rng.gen() { 0 } else { rng.gen() },
        }),
        aeth: has(Hd::Aeth).then(|| Aeth {
            syndrome: Syndrome::from_byte(rng.gen()),
            msn: if rng.gen() {
                t.ext.aeth.map_or(0, |a| a.msn) + rng.gen_range(0..4)
            } else {
                rng.gen_range(0..1 << 24)
            },
        }),
        atomic_ack: has(Hd::AtomicAckEth).then(|| rng.gen()),
        imm: has(Hd::ImmDt).then(|| rng.gen()),
        // Any key, QP B's region's too: a SEND with Invalidate can revoke
        // only a bound type 2 window (IBA 10.6.7.3), and there is none.
        ieth: has(Hd::Ieth).then(|| pick_rkey(rng, r, lkeys)),
    };
    let psn = match rng.gen_range(0..10) {
        0 => Psn::new(rng.gen()),
        1 => t.bth.psn.add(rng.gen_range(4..1 << 23)),
        _ => t.bth.psn.add(rng.gen_range(0..6)).sub(2),
    };
    let dest_qp = match rng.gen_range(0..20) {
        0 => rng.gen_range(0..1 << 24),
        1 => rng.gen_range(0..2),
        _ => keys.qpn,
    };
    let mut bth = t.bth;
    bth.opcode = Opcode(info.opcode);
    bth.psn = psn;
    bth.dest_qp = dest_qp;
    bth.ack_req = rng.gen();
    bth.solicited = rng.gen();
    if rng.gen_ratio(1, 20) {
        bth.pkey = rng.gen();
    }
    let payload_len = match info.payload {
        wire::PayloadRule::None => 0,
        wire::PayloadRule::Exactly(n) => n as usize,
        wire::PayloadRule::Any => match rng.gen_range(0..6) {
            0 => 0,
            1 => MTU as usize,
            2 => MTU as usize + rng.gen_range(1..MTU as usize),
            _ => rng.gen_range(1..MTU as usize),
        },
    };
    let payload: Vec<u8> = (0..payload_len).map(|_| rng.gen()).collect();
    let f = RoceRepr {
        bth,
        ext,
        payload: &payload,
        trailer_len: 0,
        ..t
    };
    let mut b = vec![0u8; f.buffer_len()];
    f.emit(&mut b).ok()?;
    Some(b)
}

/// Moves `qpn` to `state` (ERR and RESET are legal from every state).
fn to_state(r: &mut Rnic, qpn: u32, state: QpState, seed: u64) {
    r.modify_qp(
        qpn,
        &QpAttr {
            state: Some(state),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("seed {seed:#x}: QP {qpn:#x} to {state:?}: {e}"));
}

fn post(r: &mut Rnic, qpn: u32, wr: SendWr, posted: &mut BTreeMap<(u32, u64), u32>) {
    if r.post_send(qpn, wr.clone()).is_ok() {
        *posted.entry((qpn, wr.wr_id)).or_default() += 1;
    }
}

fn sge(addr: u64, length: u32, lkey: u32) -> Sgl {
    Sgl::new(&[Sge { addr, length, lkey }]).expect("one SGE")
}

/// Runs one seed: the barrage, the invariants, the control QP.
fn run(seed: u64, frames: usize) {
    let cfg = PairConfig {
        mtu: MTU,
        mem_len: MAIN_LEN,
        seed,
        timeout: 4,
        retry_cnt: 3,
        rnr_retry: 2,
        ..PairConfig::default()
    };
    let mut p = Pair::new(cfg);
    // extra regions and QP B on each device
    let mut secret = Vec::new();
    let mut ro = Vec::new();
    let mut cq_b = [0u32; 2];
    let mut qp_b = [0u32; 2];
    for i in 0..2 {
        let r = &mut p.sim.nodes[i];
        let pd = p.sides[i].pd;
        let off = 0x1000_0000u64 * (i as u64 + 1);
        secret.push(Region::new(
            r,
            pd,
            off + 0x100_0000,
            64 * 1024,
            access::LOCAL_WRITE,
            100 + i as u32,
        ));
        ro.push(Region::new(
            r,
            pd,
            off + 0x200_0000,
            64 * 1024,
            access::REMOTE_READ,
            200 + i as u32,
        ));
        cq_b[i] = r.create_cq(1024);
        qp_b[i] = r
            .create_qp(QpInit {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq_b[i],
                recv_cq: cq_b[i],
                srq: None,
                max_send_wr: 64,
                max_recv_wr: 64,
                sq_sig_all: false,
            })
            .expect("QP B");
    }
    for i in 0..2 {
        let peer = &p.sides[1 - i];
        let ah = AhAttr::new(peer.gid, peer.mac);
        connect(
            &mut p.sim.nodes[i],
            qp_b[i],
            PairConfig {
                retry_cnt: 7,
                timeout: 8,
                ..cfg
            },
            ah,
            qp_b[1 - i],
            0x5000 + i as u32,
            0x5000 + (1 - i) as u32,
        );
    }
    let main_init: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            let d = common::pattern(300 + i as u32, MAIN_LEN);
            p.sides[i].mem.write(0, &d);
            d
        })
        .collect();
    // what a forgery toward side i may name: side i's regions and QP A
    let keys: Vec<Keys> = (0..2)
        .map(|i| {
            let s = &p.sides[i];
            let mut regions = vec![
                (secret[i].base, 64 * 1024, secret[i].rkey),
                (ro[i].base, 64 * 1024, ro[i].rkey),
            ];
            // toward the victim (side 1) its main region's key too; never
            // side 0's, so that whatever changes there came through its own
            // READs and atomics
            if i == 1 {
                regions.push((s.base, MAIN_LEN as u64, s.rkey));
            }
            Keys {
                regions,
                qpn: s.qpn,
            }
        })
        .collect();
    let lkeys: Vec<Vec<u32>> = (0..2)
        .map(|i| vec![secret[i].lkey, ro[i].lkey, p.sides[i].lkey])
        .collect();

    // the last frames each side sent (templates for the forgeries)
    let seen: Rc<RefCell<[Vec<Vec<u8>>; 2]>> = Rc::default();
    let tap_seen = seen.clone();
    p.sim.tap = Some(Box::new(move |_, dir, f| {
        let mut s = tap_seen.borrow_mut();
        let v = &mut s[dir];
        if v.len() >= 32 {
            v.remove(0);
        }
        v.push(f.to_vec());
    }));

    let mut rng = SmallRng::seed_from_u64(seed);
    let (a0, a1) = (p.sides[0].qpn, p.sides[1].qpn);
    let (base0, lkey0, base1, rkey1, lkey1) = (
        p.sides[0].base,
        p.sides[0].lkey,
        p.sides[1].base,
        p.sides[1].rkey,
        p.sides[1].lkey,
    );
    let mut posted: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut next_id = 1u64;
    let mut land = LAND.0;
    let mut wcs: [Vec<Wc>; 2] = Default::default();
    let mut injected = 0usize;
    let mut revivals = 0usize;
    while injected < frames {
        // real traffic on QP A, a little at a time
        if rng.gen_bool(0.3) {
            let id = next_id;
            next_id += 1;
            let len = rng.gen_range(0..3 * MTU);
            let src = sge(
                base0 + rng.gen_range(0..(SRC_LEN as u64 - 4096)),
                len,
                lkey0,
            );
            let dst = base1 + DST as u64 + rng.gen_range(0..0x4_0000);
            let op = match rng.gen_range(0..5) {
                0 => SendOp::Send,
                1 => SendOp::Write {
                    remote_addr: dst,
                    rkey: rkey1,
                },
                2 | 3 => {
                    // READ or atomic into the landing zone
                    let l = if rng.gen() { len.max(1) } else { 8 };
                    if land + l as usize > LAND.1 {
                        land = LAND.0;
                    }
                    let sgl = sge(base0 + land as u64, l, lkey0);
                    land = (land + l as usize).div_ceil(8) * 8;
                    let op = if l == 8 && rng.gen() {
                        SendOp::FetchAdd {
                            remote_addr: base1 + DST as u64 / 8 * 8,
                            rkey: rkey1,
                            add: 1,
                        }
                    } else {
                        SendOp::Read {
                            remote_addr: dst,
                            rkey: rkey1,
                        }
                    };
                    post(
                        &mut p.sim.nodes[0],
                        a0,
                        SendWr::new(id, op, sgl),
                        &mut posted,
                    );
                    continue;
                }
                _ => SendOp::WriteWithImm {
                    remote_addr: dst,
                    rkey: rkey1,
                    imm: id as u32,
                },
            };
            post(
                &mut p.sim.nodes[0],
                a0,
                SendWr::new(id, op, src),
                &mut posted,
            );
        }
        if rng.gen_bool(0.3) {
            let id = next_id;
            next_id += 1;
            let at = base1 + DST as u64 + rng.gen_range(0..0x4_0000);
            if p.sim.nodes[1]
                .post_recv(
                    a1,
                    RecvWr {
                        wr_id: id,
                        sgl: sge(at, 4 * MTU, lkey1),
                    },
                )
                .is_ok()
            {
                *posted.entry((a1, id)).or_default() += 1;
            }
        }
        // a forgery, toward a random side, shaped after what went that way
        let dir = rng.gen_range(0..2usize);
        let template = {
            let s = seen.borrow();
            let v = &s[dir];
            (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())].clone())
        };
        if let Some(t) = template {
            let to = 1 - dir;
            if let Some(f) = forge(&mut rng, &t, &keys[to], &lkeys[to]) {
                p.sim.inject(dir, &f);
                injected += 1;
            }
        } else {
            injected += 1; // nothing sent yet: count the turn, go on
        }
        for _ in 0..rng.gen_range(1..4) {
            p.sim.step();
        }
        if rng.gen_ratio(1, 50) {
            // let timers fire now and then
            let until = p.sim.now + Duration::from_micros(rng.gen_range(1..2000));
            p.sim
                .run_until(Duration::from_millis(5), |s| s.now >= until);
        }
        for i in 0..2 {
            let _ = p.sim.nodes[i].poll_cq(p.sides[i].cq, usize::MAX, &mut wcs[i]);
        }
        // a forgery broke QP A: flush both ends and connect them again
        // (new PSNs), so that the barrage goes on against a live QP
        let broken = [(0, a0), (1, a1)].iter().any(|&(i, q)| {
            p.sim.nodes[i]
                .query_qp(q)
                .map_or(true, |info| info.state == QpState::Err)
        });
        if broken {
            revivals += 1;
            for (i, qpn) in [(0, a0), (1, a1)] {
                to_state(&mut p.sim.nodes[i], qpn, QpState::Err, seed);
                let _ = p.sim.nodes[i].poll_cq(p.sides[i].cq, usize::MAX, &mut wcs[i]);
                to_state(&mut p.sim.nodes[i], qpn, QpState::Reset, seed);
            }
            let psns = [rng.gen_range(0..1 << 24), rng.gen_range(0..1 << 24)];
            for i in 0..2 {
                let peer = &p.sides[1 - i];
                let ah = AhAttr::new(peer.gid, peer.mac);
                let qpn = p.sides[i].qpn;
                connect(
                    &mut p.sim.nodes[i],
                    qpn,
                    cfg,
                    ah,
                    peer.qpn,
                    psns[i],
                    psns[1 - i],
                );
            }
        }
    }
    // end QP A on both sides: every WQE left is flushed
    p.sim.tap = None;
    for (i, qpn) in [(0, a0), (1, a1)] {
        to_state(&mut p.sim.nodes[i], qpn, QpState::Err, seed);
    }
    p.sim.run_until(Duration::from_secs(1), |_| false);
    for i in 0..2 {
        let _ = p.sim.nodes[i].poll_cq(p.sides[i].cq, usize::MAX, &mut wcs[i]);
    }

    // every WQE posted on QP A completed exactly once
    let mut done: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for w in wcs.iter().flatten() {
        assert!(
            w.qp_num == a0 || w.qp_num == a1,
            "seed {seed:#x}: a completion of QP {:#x} on QP A's CQ",
            w.qp_num
        );
        *done.entry((w.qp_num, w.wr_id)).or_default() += 1;
    }
    for (k, n) in &posted {
        let got = done.get(k).copied().unwrap_or(0);
        assert_eq!(
            got, *n,
            "seed {seed:#x}: WQE {k:?} posted {n}×, completed {got}×"
        );
    }
    for (k, n) in &done {
        assert!(
            posted.contains_key(k),
            "seed {seed:#x}: {n} completion(s) of a WQE never posted: {k:?}"
        );
    }
    let statuses: BTreeMap<String, usize> =
        wcs.iter().flatten().fold(BTreeMap::new(), |mut m, w| {
            *m.entry(format!("{:?}", w.status)).or_default() += 1;
            m
        });

    // protected memory untouched
    for i in 0..2 {
        secret[i].unchanged(&format!("side {i}'s local-only region"), seed);
        ro[i].unchanged(&format!("side {i}'s read-only region"), seed);
    }
    let now0 = p.sides[0].mem.to_vec();
    if let Some(at) = now0
        .iter()
        .zip(&main_init[0])
        .enumerate()
        .position(|(k, (a, b))| a != b && !(LAND.0..LAND.1).contains(&k))
    {
        panic!(
            "seed {seed:#x}: side 0's region changed at {at:#x}, outside its READ/atomic buffers"
        );
    }

    // QP B still works, byte for byte
    let b_data = common::pattern(seed as u32, 3000);
    p.sides[0].mem.write(0x4_0000, &b_data);
    let b_dst = base1 + 0x6_0000;
    let mut ops = vec![
        (
            SendOp::Write {
                remote_addr: b_dst,
                rkey: rkey1,
            },
            sge(base0 + 0x4_0000, 3000, lkey0),
        ),
        (
            SendOp::Read {
                remote_addr: b_dst,
                rkey: rkey1,
            },
            sge(base0 + 0x5_0000, 3000, lkey0),
        ),
        (SendOp::Send, sge(base0 + 0x4_0000, 3000, lkey0)),
    ];
    p.sides[1].mem.write(0x7_0000, &40u64.to_ne_bytes());
    ops.push((
        SendOp::FetchAdd {
            remote_addr: base1 + 0x7_0000,
            rkey: rkey1,
            add: 2,
        },
        sge(base0 + 0x5_1000, 8, lkey0),
    ));
    ops.push((
        SendOp::CompareSwap {
            remote_addr: base1 + 0x7_0000,
            rkey: rkey1,
            compare: 42,
            swap: 7,
        },
        sge(base0 + 0x5_1008, 8, lkey0),
    ));
    p.sim.nodes[1]
        .post_recv(
            qp_b[1],
            RecvWr {
                wr_id: 900,
                sgl: sge(base1 + 0x8_0000, 4096, lkey1),
            },
        )
        .expect("QP B recv");
    for (k, (op, sgl)) in ops.into_iter().enumerate() {
        let mut w = SendWr::new(800 + k as u64, op, sgl);
        w.flags.fence = true; // the READ after the WRITE, the CAS after the FAA
        p.sim.nodes[0].post_send(qp_b[0], w).expect("QP B send");
    }
    let mut bw: [Vec<Wc>; 2] = Default::default();
    p.sim.run_until(Duration::from_secs(1), |s| {
        for i in 0..2 {
            let _ = s.nodes[i].poll_cq(cq_b[i], usize::MAX, &mut bw[i]);
        }
        bw[0].len() >= 5 && !bw[1].is_empty()
    });
    let st: Vec<_> = bw[0].iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        (800..805)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>(),
        "seed {seed:#x}: QP B's requester"
    );
    assert_eq!(
        bw[1]
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(900, WcStatus::Success)],
        "seed {seed:#x}: QP B's responder"
    );
    let read = |m: &HeapMemory, off: usize, len: usize| {
        let mut v = vec![0u8; len];
        m.read(off, &mut v);
        v
    };
    common::same(
        &read(&p.sides[1].mem, 0x6_0000, 3000),
        &b_data,
        "QP B WRITE",
    );
    common::same(&read(&p.sides[0].mem, 0x5_0000, 3000), &b_data, "QP B READ");
    common::same(&read(&p.sides[1].mem, 0x8_0000, 3000), &b_data, "QP B SEND");
    let u64_at = |m: &HeapMemory, off| u64::from_ne_bytes(read(m, off, 8).try_into().unwrap());
    assert_eq!(
        u64_at(&p.sides[0].mem, 0x5_1000),
        40,
        "FETCH_ADD's old value"
    );
    assert_eq!(
        u64_at(&p.sides[0].mem, 0x5_1008),
        42,
        "CMP_SWAP's old value"
    );
    assert_eq!(u64_at(&p.sides[1].mem, 0x7_0000), 7, "CMP_SWAP's new value");
    for i in 0..2 {
        let c = p.sim.nodes[i].query_qp(qp_b[i]).expect("QP B").counters;
        for (name, v) in c.iter() {
            let bad = name.contains("err")
                || name.contains("out_of_sequence")
                || name.contains("duplicate")
                || name.contains("retransmit")
                || name.contains("timeout");
            assert!(
                !bad || v == 0,
                "seed {seed:#x}: QP B side {i}: {name} = {v}"
            );
        }
    }
    // no retransmission storm: forged responses once made a READ replay
    // restart for ever (`completer::implied_nak`)
    let sent: u64 = (0..2).map(|i| p.sim.nodes[i].counters().sent_pkts).sum();
    assert!(
        sent < 20 * frames as u64,
        "seed {seed:#x}: {sent} packets sent for {frames} forged frames"
    );
    let dev = p.sim.nodes[1].counters();
    eprintln!(
        "seed {seed:#x}: {injected} forged frames, QP A reconnected {revivals}×; QP A completions by status {statuses:?}; victim device: {}",
        dev.iter()
            .filter(|(_, v)| *v > 0)
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

#[test]
fn forged_frames_never_panic_corrupt_or_complete_twice() {
    for seed in [0x0051_7E01u64, 0x0051_7E02, 0x0051_7E03, 0x0051_7E04] {
        run(seed, 10_000);
    }
}
