//! An in-memory pair of ports: what one sends the other receives, through
//! bounded lock-free queues of pre-allocated buffers. An optional seeded
//! [`Interceptor`] on each direction drops, reorders, duplicates, corrupts
//! or CE-marks frames.

use super::{FrameBatch, Port, PortCounters, SLOT_LEN};
use crossbeam::queue::ArrayQueue;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use wire::EthernetAddress;

type Buf = Box<[u8; SLOT_LEN]>;

/// One direction of the wire.
struct Lane {
    full: ArrayQueue<(Buf, u16)>,
    free: ArrayQueue<Buf>,
    /// The thread to wake when a frame arrives (the receiving engine).
    waiter: Mutex<Option<Thread>>,
    dropped: AtomicU64,
}

impl Lane {
    fn new(depth: usize) -> Lane {
        let free = ArrayQueue::new(depth);
        for _ in 0..depth {
            let _ = free.push(Box::new([0u8; SLOT_LEN]));
        }
        Lane { full: ArrayQueue::new(depth), free, waiter: Mutex::new(None), dropped: AtomicU64::new(0) }
    }

    fn put(&self, frame: &[u8]) -> bool {
        let Some(mut b) = self.free.pop() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        b[..frame.len()].copy_from_slice(frame);
        if let Err((b, _)) = self.full.push((b, frame.len() as u16)) {
            let _ = self.free.push(b);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn wake(&self) {
        if let Ok(w) = self.waiter.lock() {
            if let Some(t) = w.as_ref() {
                t.unpark();
            }
        }
    }
}

/// What an interceptor decides for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
    /// Send it twice.
    Duplicate,
    /// Hold it back behind the next frame.
    Delay,
}

/// Looks at (and may modify) every frame a port sends.
pub trait Interceptor: Send {
    fn on_send(&mut self, frame: &mut [u8]) -> Verdict;
}

/// Seeded random impairments.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impairments {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub ce_mark: f64,
}

/// An interceptor applying [`Impairments`] with a seeded generator.
pub struct RandomImpairments {
    cfg: Impairments,
    rng: SmallRng,
}

impl RandomImpairments {
    pub fn new(cfg: Impairments, seed: u64) -> RandomImpairments {
        RandomImpairments { cfg, rng: SmallRng::seed_from_u64(seed) }
    }
}

impl Interceptor for RandomImpairments {
    fn on_send(&mut self, frame: &mut [u8]) -> Verdict {
        if self.rng.gen_bool(self.cfg.loss) {
            return Verdict::Drop;
        }
        if !frame.is_empty() && self.rng.gen_bool(self.cfg.corrupt) {
            let bit = self.rng.gen_range(0..frame.len() * 8);
            frame[bit / 8] ^= 1 << (bit % 8);
        }
        if self.rng.gen_bool(self.cfg.ce_mark) {
            crate::sim::mark_ce(frame);
        }
        if self.rng.gen_bool(self.cfg.duplicate) {
            return Verdict::Duplicate;
        }
        if self.rng.gen_bool(self.cfg.reorder) {
            return Verdict::Delay;
        }
        Verdict::Pass
    }
}

/// One end of an in-memory wire.
pub struct MemPort {
    tx: Arc<Lane>,
    rx: Arc<Lane>,
    mac: EthernetAddress,
    mtu: usize,
    speed: u64,
    counters: PortCounters,
    interceptor: Option<Box<dyn Interceptor>>,
    held: Option<(Box<[u8; SLOT_LEN]>, usize)>,
}

/// Two ports joined back to back; `depth` frames may be in flight each way.
pub fn pair(macs: [EthernetAddress; 2], depth: usize) -> (MemPort, MemPort) {
    let ab = Arc::new(Lane::new(depth));
    let ba = Arc::new(Lane::new(depth));
    let mk = |tx: &Arc<Lane>, rx: &Arc<Lane>, mac| MemPort {
        tx: tx.clone(),
        rx: rx.clone(),
        mac,
        mtu: 9000,
        speed: 100_000_000_000,
        counters: PortCounters::default(),
        interceptor: None,
        held: None,
    };
    (mk(&ab, &ba, macs[0]), mk(&ba, &ab, macs[1]))
}

impl MemPort {
    /// Runs every frame this port sends through `i`.
    pub fn set_interceptor(&mut self, i: Box<dyn Interceptor>) {
        self.interceptor = Some(i);
    }

    pub fn set_mtu(&mut self, mtu: usize) {
        self.mtu = mtu;
    }

    fn transmit(&mut self, frame: &[u8]) -> bool {
        let ok = self.tx.put(frame);
        if ok {
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += frame.len() as u64;
        } else {
            self.counters.tx_dropped += 1;
        }
        ok
    }
}

impl Port for MemPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        if let Ok(mut w) = self.rx.waiter.lock() {
            if w.is_none() {
                *w = Some(std::thread::current());
            }
        }
        let mut n = 0;
        while !batch.is_full() {
            let Some((buf, len)) = self.rx.full.pop() else { break };
            batch.push(&buf[..len as usize]);
            let _ = self.rx.free.push(buf);
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += len as u64;
            n += 1;
        }
        n
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let mut sent = 0;
        let mut scratch = [0u8; SLOT_LEN];
        for f in batch.iter() {
            let Some(i) = self.interceptor.as_mut() else {
                sent += self.transmit(f) as usize;
                continue;
            };
            let frame = &mut scratch[..f.len()];
            frame.copy_from_slice(f);
            match i.on_send(frame) {
                Verdict::Drop => {}
                Verdict::Pass => sent += self.transmit(frame) as usize,
                Verdict::Duplicate => {
                    sent += self.transmit(frame) as usize;
                    self.transmit(frame);
                }
                Verdict::Delay => {
                    let mut b = Box::new([0u8; SLOT_LEN]);
                    b[..frame.len()].copy_from_slice(frame);
                    if let Some((old, len)) = self.held.replace((b, frame.len())) {
                        self.transmit(&old[..len]);
                    }
                    sent += 1;
                    continue;
                }
            }
            if let Some((b, len)) = self.held.take() {
                self.transmit(&b[..len]);
            }
        }
        if sent > 0 {
            self.tx.wake();
        }
        sent
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn link_speed_bps(&self) -> u64 {
        self.speed
    }

    fn counters(&self) -> PortCounters {
        let mut c = self.counters.clone();
        c.rx_dropped = self.rx.dropped.load(Ordering::Relaxed);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_and_impairments_apply() {
        let (mut a, mut b) = pair([EthernetAddress([2, 0, 0, 0, 0, 1]), EthernetAddress([2, 0, 0, 0, 0, 2])], 64);
        let mut tx = FrameBatch::new(8);
        for i in 0..8u8 {
            tx.push(&[i; 60]);
        }
        assert_eq!(a.send(&tx), 8);
        let mut rx = FrameBatch::new(16);
        assert_eq!(b.recv(&mut rx), 8);
        assert_eq!(rx.get(3), &[3u8; 60][..]);
        a.set_interceptor(Box::new(RandomImpairments::new(Impairments { loss: 1.0, ..Default::default() }, 1)));
        assert_eq!(a.send(&tx), 0);
        rx.clear();
        assert_eq!(b.recv(&mut rx), 0);
        assert_eq!(a.counters().tx_packets, 8);
        assert_eq!(b.counters().rx_packets, 8);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let (mut a, mut b) = pair([EthernetAddress::default(); 2], 4);
        let mut tx = FrameBatch::new(8);
        for _ in 0..8 {
            tx.push(&[1; 60]);
        }
        assert_eq!(a.send(&tx), 4);
        assert_eq!(a.counters().tx_dropped, 4);
        let mut rx = FrameBatch::new(8);
        assert_eq!(b.recv(&mut rx), 4);
    }
}
