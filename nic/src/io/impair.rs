//! Impairments: one seeded model of what a lossy path does to frames —
//! loss, bit corruption, CE marking, duplication, reordering — and a port
//! wrapper that applies it to what a port sends. The wrapper is the
//! impairment stage for real paths (the kernels here have no netem) and the
//! in-memory wire; the `sim` crate's links draw from the same model
//! ([`Chances::apply`]) and only decide, on their virtual clock, when a
//! duplicated or reordered frame arrives.

use super::{FrameBatch, Port, SLOT_LEN};
use rand::distributions::{Bernoulli, Distribution};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// What impairments did to one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fate {
    /// Dropped (nothing else happens to it).
    pub lost: bool,
    /// One bit flipped.
    pub corrupted: bool,
    /// Marked Congestion Experienced (only ECN-capable frames are).
    pub ce_marked: bool,
    /// Sent twice.
    pub duplicated: bool,
    /// Held back, so that frames sent after it overtake it.
    pub reordered: bool,
}

/// Looks at (and may modify) every frame a port sends.
pub trait Interceptor: Send {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate;
}

/// Seeded random impairments: the chance of each, per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairments {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub ce_mark: f64,
}

/// [`Impairments`] as samplers, made once: building one per draw
/// (`Rng::gen_bool`) converts a float to an integer each time. A sampler
/// draws from the generator exactly as `gen_bool` does.
#[derive(Clone, Copy, Debug)]
pub struct Chances {
    loss: Bernoulli,
    corrupt: Bernoulli,
    ce_mark: Bernoulli,
    duplicate: Bernoulli,
    reorder: Bernoulli,
    /// Every chance is zero: no frame is touched and nothing is drawn.
    none: bool,
}

impl Chances {
    /// Panics on a probability outside [0, 1], as `Rng::gen_bool` does.
    pub fn new(cfg: &Impairments) -> Chances {
        let b = |p: f64| Bernoulli::new(p).expect("impairment probabilities lie in [0, 1]");
        Chances {
            loss: b(cfg.loss),
            corrupt: b(cfg.corrupt),
            ce_mark: b(cfg.ce_mark),
            duplicate: b(cfg.duplicate),
            reorder: b(cfg.reorder),
            none: [
                cfg.loss,
                cfg.corrupt,
                cfg.ce_mark,
                cfg.duplicate,
                cfg.reorder,
            ]
            .iter()
            .all(|&p| p == 0.0),
        }
    }

    /// Decides what happens to `frame`, drawing from `rng` in this order:
    /// loss (a lost frame draws nothing more), corruption (then which bit),
    /// CE marking, duplication, reordering. Corruption and CE marking are
    /// applied to `frame`; the rest is the caller's to carry out.
    pub fn apply<R: Rng + ?Sized>(&self, frame: &mut [u8], rng: &mut R) -> Fate {
        let mut fate = Fate::default();
        if self.none {
            return fate;
        }
        if self.loss.sample(rng) {
            fate.lost = true;
            return fate;
        }
        if self.corrupt.sample(rng) && !frame.is_empty() {
            let bit = rng.gen_range(0..frame.len() * 8);
            frame[bit / 8] ^= 1 << (bit % 8);
            fate.corrupted = true;
        }
        fate.ce_marked = self.ce_mark.sample(rng) && wire::mark_ce(frame);
        fate.duplicated = self.duplicate.sample(rng);
        fate.reordered = self.reorder.sample(rng);
        fate
    }
}

/// An interceptor applying [`Impairments`] with a seeded generator.
pub struct RandomImpairments {
    chances: Chances,
    rng: SmallRng,
}

impl RandomImpairments {
    pub fn new(cfg: Impairments, seed: u64) -> RandomImpairments {
        RandomImpairments {
            chances: Chances::new(&cfg),
            rng: SmallRng::seed_from_u64(seed),
        }
    }
}

impl Interceptor for RandomImpairments {
    fn on_send(&mut self, frame: &mut [u8]) -> Fate {
        self.chances.apply(frame, &mut self.rng)
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
    fn send(&mut self, batch: &FrameBatch) -> usize {
        let mut out = std::mem::replace(&mut self.out, FrameBatch::new(0));
        out.clear();
        let mut scratch = [0u8; SLOT_LEN];
        let mut sent = 0;
        for f in batch.iter() {
            let frame = &mut scratch[..f.len()];
            frame.copy_from_slice(f);
            let fate = self.interceptor.on_send(frame);
            if out.capacity() - out.len() < 3 {
                sent += self.inner.send(&out);
                out.clear();
            }
            if fate.lost {
                continue;
            }
            if fate.duplicated {
                out.push(frame);
            }
            if fate.reordered {
                // held behind the next frame; the one held before goes now
                let mut b = Box::new([0u8; SLOT_LEN]);
                b[..frame.len()].copy_from_slice(frame);
                if let Some((old, len)) = self.held.replace((b, frame.len())) {
                    out.push(&old[..len]);
                }
                continue;
            }
            out.push(frame);
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
    /// A looped frame may be lost, corrupted or CE-marked; it is neither
    /// duplicated nor reordered (it is delivered within the next turn).
    fn loop_back(&mut self, frame: &mut [u8]) -> bool {
        let fate = self.interceptor.on_send(frame);
        !fate.lost && self.inner.loop_back(frame)
    }
    crate::forward_port!(field inner: recv, tx_room, tx_ready_in, train_bytes, mac, mtu, link_speed_bps, counters, wait, wait_or_ring, wait_unheld, attach_bell, pending, rx_backlog, link_up);
}
