//! Impairments on any port: a seeded interceptor that drops, reorders,
//! duplicates, corrupts or CE-marks what a port sends — the impairment stage
//! for real paths (the kernels here have no netem) and the in-memory wire.

use super::{FrameBatch, Port, PortCounters, SLOT_LEN};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use wire::EthernetAddress;

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
        RandomImpairments {
            cfg,
            rng: SmallRng::seed_from_u64(seed),
        }
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
            wire::mark_ce(frame);
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

/// Wraps a port: every frame it sends goes through an interceptor first.
pub struct Impaired<P: Port> {
    inner: P,
    interceptor: Box<dyn Interceptor>,
    out: FrameBatch,
    held: Option<(Box<[u8; SLOT_LEN]>, usize)>,
}

impl<P: Port> Impaired<P> {
    pub fn new(inner: P, interceptor: Box<dyn Interceptor>) -> Impaired<P> {
        Impaired {
            inner,
            interceptor,
            out: FrameBatch::new(64),
            held: None,
        }
    }

    pub fn into_inner(self) -> P {
        self.inner
    }
}

impl<P: Port> Port for Impaired<P> {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        self.inner.recv(batch)
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let mut out = std::mem::replace(&mut self.out, FrameBatch::new(0));
        out.clear();
        let mut scratch = [0u8; SLOT_LEN];
        let mut sent = 0;
        for f in batch.iter() {
            let frame = &mut scratch[..f.len()];
            frame.copy_from_slice(f);
            let v = self.interceptor.on_send(frame);
            if out.capacity() - out.len() < 3 {
                sent += self.inner.send(&out);
                out.clear();
            }
            match v {
                Verdict::Drop => continue,
                Verdict::Pass => {
                    out.push(frame);
                }
                Verdict::Duplicate => {
                    out.push(frame);
                    out.push(frame);
                }
                Verdict::Delay => {
                    let mut b = Box::new([0u8; SLOT_LEN]);
                    b[..frame.len()].copy_from_slice(frame);
                    if let Some((old, len)) = self.held.replace((b, frame.len())) {
                        out.push(&old[..len]);
                    }
                    continue;
                }
            }
            if let Some((b, len)) = self.held.take() {
                out.push(&b[..len]);
            }
        }
        if !out.is_empty() {
            sent += self.inner.send(&out);
        }
        self.out = out;
        sent
    }

    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn link_speed_bps(&self) -> u64 {
        self.inner.link_speed_bps()
    }
    fn counters(&self) -> PortCounters {
        self.inner.counters()
    }
    fn wait(&mut self, timeout: Duration) {
        self.inner.wait(timeout)
    }
    fn wait_or_ring(&mut self, bell: &std::sync::Arc<super::Bell>, timeout: Duration) {
        self.inner.wait_or_ring(bell, timeout)
    }
    fn attach_bell(&mut self, bell: &std::sync::Arc<super::Bell>) {
        self.inner.attach_bell(bell)
    }
    fn rx_backlog(&self) -> Option<super::RxBacklog> {
        self.inner.rx_backlog()
    }
    fn link_up(&self) -> Option<bool> {
        self.inner.link_up()
    }
}
