//! Random traffic on the virtual clock: two RC QPs exchange 100,000 random
//! messages (SEND, WRITE, WRITE_WITH_IMM, READ, atomics; 0 B..1 MiB; a
//! random MTU per run) through the simulator with up to 20 % loss plus
//! reordering, duplication and corruption. Every message completes exactly
//! once, in order, with byte-exact data; atomics agree with a sequential
//! model; with unlimited retries there is no error completion.
//!
//! Runs are seeded; a failure names its seed. Replay one run with
//! `SOFTRNIC_PROP_SEED=<seed> cargo test --release -p sim --test props -- --nocapture`.

use nic::io::impair::Impairments;
use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode, WcStatus};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use sim::{LinkConfig, Pair, PairConfig};
use std::collections::VecDeque;
use std::time::Duration;

const SLOTS: usize = 8;
const SLOT: u64 = 1 << 20;
// Buffer layout of each side, in slots: send sources, remote write targets,
// receive buffers, READ sources (filled by the peer test code), READ targets,
// then the atomic counter.
const SRC: u64 = 0;
const WRITE_DST: u64 = SLOTS as u64;
const RECV: u64 = 2 * SLOTS as u64;
const READ_SRC: u64 = 3 * SLOTS as u64;
const READ_DST: u64 = 4 * SLOTS as u64;
const ATOMIC: u64 = 5 * SLOTS as u64 * SLOT;
const ATOMIC_RESULT: u64 = ATOMIC + 64;
const MEM: usize = (5 * SLOTS as u64 * SLOT + 4096) as usize;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Send,
    Write,
    WriteImm,
    Read,
    FetchAdd(u64),
    CmpSwap { compare: u64, swap: u64 },
}

#[derive(Debug)]
struct Msg {
    id: u64,
    kind: Kind,
    len: usize,
    slot: usize,
    seed: u64,
    /// Atomics: the value the model says the target held before.
    expect_orig: u64,
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn size(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..100) {
        0..=1 => rng.gen_range(0..=SLOT as usize),
        2..=11 => rng.gen_range(0..=65536),
        12..=14 => 0,
        _ => rng.gen_range(1..=4096),
    }
}

/// One direction of traffic: what is in flight, the atomic model.
struct Flow {
    next_id: u64,
    inflight: VecDeque<Msg>,
    /// Receiver side: SEND / WRITE_WITH_IMM messages awaiting the receive completion.
    recv_expect: VecDeque<(u64, Kind, usize, usize, u64)>,
    model: u64,
    done: u64,
    recv_done: u64,
}

struct Run {
    p: Pair,
    rng: SmallRng,
    flows: [Flow; 2],
    seed: u64,
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mtu = [256, 512, 1024, 2048, 4096][rng.gen_range(0..5)];
        let loss = [0.0, 0.01, 0.05, 0.2][rng.gen_range(0..4)];
        let link = LinkConfig {
            latency: Duration::from_micros(rng.gen_range(1..20)),
            bandwidth_bps: [10_000_000_000, 100_000_000_000][rng.gen_range(0..2)],
            reorder_delay: Duration::from_micros(rng.gen_range(1..30)),
            impair: Impairments {
                loss,
                reorder: rng.gen_range(0.0..0.05),
                duplicate: rng.gen_range(0.0..0.03),
                corrupt: rng.gen_range(0.0..0.02),
                ..Default::default()
            },
            ..LinkConfig::default()
        };
        let cfg = PairConfig {
            mtu,
            mem_len: MEM,
            link,
            seed,
            // 4.096 us * 2^12 = 16.8 ms: longer than a 1 MiB READ takes at 10 Gb/s
            // (a shorter timeout retransmits forever, as on real RNICs)
            timeout: 12,
            unlimited_retries: true,
            sq_psn: [
                0xFF_FF00 + rng.gen_range(0..256),
                rng.gen_range(0..0xFF_FFFF),
            ],
            ..PairConfig::default()
        };
        eprintln!(
            "seed {seed}: mtu {mtu} loss {loss} reorder {:.3} dup {:.3} corrupt {:.3}",
            link.impair.reorder, link.impair.duplicate, link.impair.corrupt
        );
        let p = Pair::new(cfg);
        for i in 0..2 {
            p.sides[i].mem.write(ATOMIC as usize, &0u64.to_ne_bytes());
        }
        let flow = || Flow {
            next_id: 0,
            inflight: VecDeque::new(),
            recv_expect: VecDeque::new(),
            model: 0,
            done: 0,
            recv_done: 0,
        };
        Run {
            p,
            rng,
            flows: [flow(), flow()],
            seed,
        }
    }

    fn post(&mut self, from: usize) {
        let to = 1 - from;
        let id = self.flows[from].next_id;
        let slot = (id % SLOTS as u64) as usize;
        let mut len = size(&mut self.rng);
        let kind = match self.rng.gen_range(0..100) {
            0..=29 => Kind::Send,
            30..=54 => Kind::Write,
            55..=69 => Kind::WriteImm,
            70..=89 => Kind::Read,
            90..=94 => Kind::FetchAdd(self.rng.gen()),
            _ => {
                let hit = self.rng.gen_bool(0.5);
                let compare = if hit {
                    self.flows[from].model
                } else {
                    self.rng.gen()
                };
                Kind::CmpSwap {
                    compare,
                    swap: self.rng.gen(),
                }
            }
        };
        let dseed = self
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(id * 2 + from as u64);
        let (a, b) = (&self.p.sides[from], &self.p.sides[to]);
        let (lbase, lkey, rbase, rkey) = (a.base, a.lkey, b.base, b.rkey);
        let sl = slot as u64 * SLOT;
        let mut expect_orig = 0;
        let op = match kind {
            Kind::Send | Kind::Write | Kind::WriteImm => {
                a.mem.write((SRC * SLOT + sl) as usize, &data(dseed, len));
                match kind {
                    Kind::Send => {
                        // the receiver posts a receive of exactly the slot
                        let r = RecvWr {
                            wr_id: id,
                            sgl: Sgl::single(rbase + RECV * SLOT + sl, SLOT as u32, b.lkey),
                        };
                        let qpn = b.qpn;
                        self.p.sim.nodes[to].post_recv(qpn, r).unwrap();
                        self.flows[from]
                            .recv_expect
                            .push_back((id, kind, len, slot, dseed));
                        SendOp::Send
                    }
                    Kind::Write => SendOp::Write {
                        remote_addr: rbase + WRITE_DST * SLOT + sl,
                        rkey,
                    },
                    _ => {
                        let r = RecvWr {
                            wr_id: id,
                            sgl: Sgl::single(rbase, 0, b.lkey),
                        };
                        let qpn = b.qpn;
                        self.p.sim.nodes[to].post_recv(qpn, r).unwrap();
                        self.flows[from]
                            .recv_expect
                            .push_back((id, kind, len, slot, dseed));
                        SendOp::WriteWithImm {
                            remote_addr: rbase + WRITE_DST * SLOT + sl,
                            rkey,
                            imm: id as u32,
                        }
                    }
                }
            }
            Kind::Read => {
                b.mem
                    .write((READ_SRC * SLOT + sl) as usize, &data(dseed, len));
                SendOp::Read {
                    remote_addr: rbase + READ_SRC * SLOT + sl,
                    rkey,
                }
            }
            Kind::FetchAdd(add) => {
                len = 8;
                let f = &mut self.flows[from];
                expect_orig = f.model;
                f.model = f.model.wrapping_add(add);
                SendOp::FetchAdd {
                    remote_addr: rbase + ATOMIC,
                    rkey,
                    add,
                }
            }
            Kind::CmpSwap { compare, swap } => {
                len = 8;
                let f = &mut self.flows[from];
                expect_orig = f.model;
                if f.model == compare {
                    f.model = swap;
                }
                SendOp::CompareSwap {
                    remote_addr: rbase + ATOMIC,
                    rkey,
                    compare,
                    swap,
                }
            }
        };
        let local = match kind {
            Kind::Read => lbase + READ_DST * SLOT + sl,
            Kind::FetchAdd(_) | Kind::CmpSwap { .. } => lbase + ATOMIC_RESULT + slot as u64 * 8,
            _ => lbase + SRC * SLOT + sl,
        };
        let wr = SendWr::new(id, op, Sgl::single(local, len as u32, lkey));
        let qpn = a.qpn;
        self.p.sim.nodes[from]
            .post_send(qpn, wr)
            .unwrap_or_else(|e| panic!("seed {}: post: {e}", self.seed));
        self.flows[from].inflight.push_back(Msg {
            id,
            kind,
            len,
            slot,
            seed: dseed,
            expect_orig,
        });
        self.flows[from].next_id += 1;
    }

    fn check_send_completion(&mut self, from: usize, wc: Wc) {
        let seed = self.seed;
        let to = 1 - from;
        assert_eq!(
            wc.status,
            WcStatus::Success,
            "seed {seed}: error completion {wc:?}"
        );
        let m = self.flows[from]
            .inflight
            .pop_front()
            .unwrap_or_else(|| panic!("seed {seed}: completion {wc:?} with nothing in flight"));
        assert_eq!(
            wc.wr_id, m.id,
            "seed {seed}: completion out of order or twice"
        );
        let sl = m.slot as u64 * SLOT;
        let mem_of = |i: usize, off: u64, len: usize| {
            let mut v = vec![0u8; len];
            self.p.sides[i].mem.read(off as usize, &mut v);
            v
        };
        match m.kind {
            Kind::Write | Kind::WriteImm => {
                assert!(
                    mem_of(to, WRITE_DST * SLOT + sl, m.len) == data(m.seed, m.len),
                    "seed {seed}: WRITE {} data",
                    m.id
                )
            }
            Kind::Read => {
                assert!(
                    mem_of(from, READ_DST * SLOT + sl, m.len) == data(m.seed, m.len),
                    "seed {seed}: READ {} data",
                    m.id
                )
            }
            Kind::FetchAdd(_) | Kind::CmpSwap { .. } => {
                let got = u64::from_ne_bytes(
                    mem_of(from, ATOMIC_RESULT + m.slot as u64 * 8, 8)
                        .try_into()
                        .unwrap(),
                );
                assert_eq!(
                    got, m.expect_orig,
                    "seed {seed}: atomic {} returned {got:#x}, model {:#x}",
                    m.id, m.expect_orig
                );
            }
            Kind::Send => {}
        }
        self.flows[from].done += 1;
    }

    fn check_recv_completion(&mut self, from: usize, wc: Wc) {
        let seed = self.seed;
        let to = 1 - from;
        assert_eq!(
            wc.status,
            WcStatus::Success,
            "seed {seed}: error completion {wc:?}"
        );
        let (id, kind, len, slot, dseed) = self.flows[from]
            .recv_expect
            .pop_front()
            .unwrap_or_else(|| panic!("seed {seed}: unexpected receive {wc:?}"));
        assert_eq!(wc.wr_id, id, "seed {seed}: receive out of order or twice");
        assert_eq!(wc.byte_len as usize, len, "seed {seed}: byte_len of {id}");
        match kind {
            Kind::Send => {
                assert_eq!(wc.opcode, WcOpcode::Recv);
                let mut v = vec![0u8; len];
                self.p.sides[to]
                    .mem
                    .read((RECV * SLOT + slot as u64 * SLOT) as usize, &mut v);
                assert!(v == data(dseed, len), "seed {seed}: SEND {id} data");
            }
            _ => {
                assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
                assert_eq!(wc.imm, Some(id as u32), "seed {seed}: immediate of {id}");
            }
        }
        self.flows[from].recv_done += 1;
    }

    fn drain(&mut self) {
        for node in 0..2 {
            let mut out = Vec::new();
            let cq = self.p.sides[node].cq;
            self.p.sim.nodes[node]
                .poll_cq(cq, usize::MAX, &mut out)
                .unwrap();
            for wc in out {
                match wc.opcode {
                    WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                        self.check_recv_completion(1 - node, wc)
                    }
                    _ => self.check_send_completion(node, wc),
                }
            }
        }
    }

    /// Sends `n` messages each way, at most `SLOTS` in flight per direction.
    fn run(&mut self, n: u64) {
        let deadline = self.p.sim.now + Duration::from_secs(36_000);
        let mut steps = 0u64;
        while self
            .flows
            .iter()
            .any(|f| f.done < n || !f.recv_expect.is_empty())
        {
            for from in 0..2 {
                while self.flows[from].next_id < n
                    && self.flows[from].inflight.len() < SLOTS
                    && self.flows[from].recv_expect.len() < SLOTS
                {
                    self.post(from);
                }
            }
            if !self.p.sim.step() {
                match self.p.sim.next_event() {
                    Some(t) => self.p.sim.now = t.max(self.p.sim.now),
                    None => panic!(
                        "seed {}: stalled with work outstanding: {:?} / {:?}",
                        self.seed,
                        self.flows[0].inflight.front(),
                        self.flows[1].inflight.front()
                    ),
                }
            }
            assert!(
                self.p.sim.now < deadline,
                "seed {}: no progress in 10 h of virtual time",
                self.seed
            );
            steps += 1;
            if steps == 2_000_000 && std::env::var("SOFTRNIC_PROP_TRACE").is_ok() {
                eprintln!("{}", self.p.sim.nodes[0].debug_qp(self.p.sides[0].qpn));
                eprintln!("{}", self.p.sim.nodes[1].debug_qp(self.p.sides[1].qpn));
                let n = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
                self.p.sim.tap = Some(Box::new(move |t, dir, f| {
                    if n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 60 {
                        eprintln!(
                            "{t:?} {dir} {}",
                            wire::RoceRepr::parse(f)
                                .map(|r| r.to_string())
                                .unwrap_or_default()
                        );
                    }
                }));
            }
            if steps.is_multiple_of(200_000) && std::env::var("SOFTRNIC_PROP_TRACE").is_ok() {
                eprintln!(
                    "  t={:?} done {}/{} {}/{} q0 {:?} q1 {:?}",
                    self.p.sim.now,
                    self.flows[0].done,
                    self.flows[0].next_id,
                    self.flows[1].done,
                    self.flows[1].next_id,
                    self.p.sim.nodes[0].query_qp(self.p.sides[0].qpn).map(|q| (
                        q.state,
                        q.sq_psn,
                        q.rq_psn,
                        q.send_queue_len
                    )),
                    self.p.sim.nodes[1].query_qp(self.p.sides[1].qpn).map(|q| (
                        q.state,
                        q.sq_psn,
                        q.rq_psn,
                        q.send_queue_len
                    ))
                );
            }
            self.drain();
        }
        for (i, f) in self.flows.iter().enumerate() {
            assert_eq!(f.done, n, "seed {}: direction {i}", self.seed);
            let counter = u64::from_ne_bytes({
                let mut b = [0u8; 8];
                self.p.sides[1 - i].mem.read(ATOMIC as usize, &mut b);
                b
            });
            assert_eq!(counter, f.model, "seed {}: final atomic value", self.seed);
        }
    }
}

#[test]
fn hundred_thousand_random_messages_exactly_once_in_order() {
    let seeds: Vec<u64> = match std::env::var("SOFTRNIC_PROP_SEED") {
        Ok(s) => vec![s.parse().expect("SOFTRNIC_PROP_SEED is a number")],
        Err(_) => (1..=10).collect(),
    };
    let per_seed = 5_000;
    let mut total = 0;
    for seed in seeds {
        let mut r = Run::new(seed);
        r.run(per_seed);
        let c = r.p.sim.nodes[0].counters();
        eprintln!(
            "seed {seed}: {} messages each way; retransmitted {}, seq NAKs {}, timeouts {}, dup {}, link a->b {:?}",
            per_seed, c.retransmitted_pkts, c.packet_seq_err, c.local_ack_timeout_err, c.duplicate_request, r.p.sim.link_stats(0)
        );
        total += 2 * per_seed;
    }
    assert!(total >= 100_000 || std::env::var("SOFTRNIC_PROP_SEED").is_ok());
}
