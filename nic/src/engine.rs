//! The polling engine: a run-to-completion loop on its own thread that
//! owns an [`Rnic`] and a [`Port`], like one lcore of a DPDK application.
//!
//! Each turn: take posted work requests (the doorbell) → receive a batch →
//! parse and dispatch by destination QP → run due timers → build and send a
//! batch → move completions to the completion queues the application
//! polls. Nothing allocates per packet; the only locks are on the control
//! path (creating objects). When a turn finds nothing to do the loop backs
//! off: spin, then yield, then park until a doorbell, a frame or the next
//! timer — an idle NIC does not burn a core. `stop` ends it cleanly.
//!
//! Applications talk to it through a [`Device`]: control verbs run as
//! closures on the engine thread (`call`), posts go through a lock-free
//! queue, completions come back through per-CQ lock-free queues, so the
//! data path has no syscall in either direction (a post wakes a parked
//! engine with `unpark`, which is a syscall only when it was parked).

use crate::io::{FrameBatch, Port, PortCounters};
use crate::time::Instant;
use crate::transport::{Counters, Rnic, VerbsError};
use crate::verbs::{RecvWr, SendWr, Wc, WcOpcode, WcStatus};
use crossbeam::channel::{self, Receiver, Sender};
use crossbeam::queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// How the engine thread runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Core to pin the thread to (core_affinity numbering); None: no pinning.
    pub core: Option<usize>,
    /// Frames per receive and send batch.
    pub batch: usize,
    /// Idle turns spent spinning, then yielding, before parking.
    pub spin: u32,
    pub yields: u32,
    /// Longest park when idle (a timer or a doorbell ends it earlier).
    pub park: Duration,
    /// Posts that may wait for the engine.
    pub post_queue: usize,
    pub name: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            core: None,
            batch: 32,
            spin: 200,
            yields: 50,
            park: Duration::from_millis(1),
            post_queue: 16384,
            name: "rnic-engine".into(),
        }
    }
}

enum Post {
    Send(u32, SendWr),
    Recv(u32, RecvWr),
}

type Call = Box<dyn FnOnce(&mut Rnic, &dyn Port) + Send>;

struct Shared {
    stop: AtomicBool,
    posts: ArrayQueue<Post>,
    thread: Mutex<Option<Thread>>,
    /// CQ number → the queue the application polls.
    new_cqs: Mutex<Vec<(u32, Arc<ArrayQueue<Wc>>)>>,
}

impl Shared {
    fn wake(&self) {
        if let Ok(t) = self.thread.lock() {
            if let Some(t) = t.as_ref() {
                t.unpark();
            }
        }
    }
}

/// Why a device call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the engine has stopped")]
    Stopped,
    #[error("the post queue is full")]
    PostQueueFull,
    #[error(transparent)]
    Verbs(#[from] VerbsError),
}

/// What the loop did, returned by `stop`.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    pub turns: u64,
    pub idle_turns: u64,
    pub parks: u64,
    pub rx_frames: u64,
    pub tx_frames: u64,
}

/// The running engine.
pub struct Engine {
    shared: Arc<Shared>,
    calls: Sender<Call>,
    join: Option<JoinHandle<EngineStats>>,
}

/// A completion queue as the application sees it.
#[derive(Clone)]
pub struct CqHandle {
    pub cqn: u32,
    queue: Arc<ArrayQueue<Wc>>,
}

impl CqHandle {
    /// Moves up to `max` completions into `out`; no syscall, no lock.
    pub fn poll(&self, max: usize, out: &mut Vec<Wc>) -> usize {
        let mut n = 0;
        while n < max {
            let Some(wc) = self.queue.pop() else { break };
            out.push(wc);
            n += 1;
        }
        n
    }
}

/// The application's handle on a running engine.
#[derive(Clone)]
pub struct Device {
    shared: Arc<Shared>,
    calls: Sender<Call>,
}

impl Engine {
    /// Starts the loop on a new thread.
    pub fn start(mut rnic: Rnic, port: Box<dyn Port>, cfg: EngineConfig) -> Engine {
        rnic.set_link_speed(port.link_speed_bps());
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            posts: ArrayQueue::new(cfg.post_queue.max(1)),
            thread: Mutex::new(None),
            new_cqs: Mutex::new(Vec::new()),
        });
        let (calls, rx) = channel::unbounded::<Call>();
        let sh = shared.clone();
        let join = std::thread::Builder::new()
            .name(cfg.name.clone())
            .spawn(move || run(rnic, port, cfg, sh, rx))
            .expect("spawn the engine thread");
        // wait until the loop has registered itself for wake-ups
        while shared.thread.lock().map(|t| t.is_none()).unwrap_or(false) {
            std::thread::yield_now();
        }
        Engine {
            shared,
            calls,
            join: Some(join),
        }
    }

    pub fn device(&self) -> Device {
        Device {
            shared: self.shared.clone(),
            calls: self.calls.clone(),
        }
    }

    /// Stops the loop and waits for it.
    pub fn stop(mut self) -> EngineStats {
        self.halt()
    }

    fn halt(&mut self) -> EngineStats {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        self.join
            .take()
            .and_then(|j| j.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.join.is_some() {
            self.halt();
        }
    }
}

impl Device {
    /// Runs `f` on the engine thread and returns its result (control path).
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Rnic) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        self.call_with_port(move |r, _| f(r))
    }

    /// Like `call`, with the port in reach (for its counters).
    pub fn call_with_port<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Rnic, &dyn Port) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(EngineError::Stopped);
        }
        let (tx, rx) = channel::bounded(1);
        let call: Call = Box::new(move |r, p| {
            let _ = tx.send(f(r, p));
        });
        self.calls.send(call).map_err(|_| EngineError::Stopped)?;
        self.shared.wake();
        rx.recv().map_err(|_| EngineError::Stopped)
    }

    /// Creates a completion queue whose completions the application polls
    /// directly.
    pub fn create_cq(&self, capacity: usize) -> Result<CqHandle, EngineError> {
        let cqn = self.call(move |r| r.create_cq(capacity))?;
        let queue = Arc::new(ArrayQueue::new(capacity.max(1)));
        self.shared
            .new_cqs
            .lock()
            .expect("not poisoned")
            .push((cqn, queue.clone()));
        // make the engine pick the new CQ up before anything completes on it
        self.call(|_| ())?;
        Ok(CqHandle { cqn, queue })
    }

    /// Posts a send WR (the doorbell). Errors the transport finds later
    /// (bad state, queue full) come back as a completion with status
    /// LOC_QP_OP_ERR for this `wr_id`.
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<(), EngineError> {
        self.post(Post::Send(qpn, wr))
    }

    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<(), EngineError> {
        self.post(Post::Recv(qpn, wr))
    }

    fn post(&self, p: Post) -> Result<(), EngineError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(EngineError::Stopped);
        }
        self.shared
            .posts
            .push(p)
            .map_err(|_| EngineError::PostQueueFull)?;
        self.shared.wake();
        Ok(())
    }

    pub fn counters(&self) -> Result<Counters, EngineError> {
        self.call(|r| r.counters())
    }

    pub fn port_counters(&self) -> Result<PortCounters, EngineError> {
        self.call_with_port(|_, p| p.counters())
    }
}

fn run(
    mut rnic: Rnic,
    mut port: Box<dyn Port>,
    cfg: EngineConfig,
    sh: Arc<Shared>,
    calls: Receiver<Call>,
) -> EngineStats {
    if let Some(core) = cfg.core {
        core_affinity::set_for_current(core_affinity::CoreId { id: core });
    }
    *sh.thread.lock().expect("not poisoned") = Some(std::thread::current());
    let start = std::time::Instant::now();
    let clock = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let mut rx = FrameBatch::new(cfg.batch);
    let mut tx = FrameBatch::new(cfg.batch);
    let mut cqs: Vec<(u32, Arc<ArrayQueue<Wc>>)> = Vec::new();
    let mut wcs: Vec<Wc> = Vec::with_capacity(cfg.batch * 2);
    let mut stats = EngineStats::default();
    let mut idle = 0u32;
    while !sh.stop.load(Ordering::Acquire) {
        stats.turns += 1;
        let mut work = 0usize;
        // control path
        while let Ok(call) = calls.try_recv() {
            call(&mut rnic, &*port);
            work += 1;
        }
        if let Ok(mut new) = sh.new_cqs.try_lock() {
            cqs.append(&mut new);
        }
        // doorbells: posted work requests
        while let Some(p) = sh.posts.pop() {
            work += 1;
            let (res, wr_id, qpn, opcode) = match p {
                Post::Send(q, wr) => {
                    let (id, op) = (wr.wr_id, wr.op.wc_opcode());
                    (rnic.post_send(q, wr), id, q, op)
                }
                Post::Recv(q, wr) => (rnic.post_recv(q, wr), wr.wr_id, q, WcOpcode::Recv),
            };
            if res.is_err() {
                // report the refusal as a completion on the QP's CQ
                let wc = Wc::new(wr_id, WcStatus::LocQpOpErr, opcode, qpn);
                if let Some(cq) = rnic.qp_cq(qpn, opcode == WcOpcode::Recv) {
                    if let Some((_, q)) = cqs.iter().find(|(n, _)| *n == cq) {
                        let _ = q.push(wc);
                    }
                }
            }
        }
        // receive and dispatch
        let now = clock();
        rx.clear();
        let n = port.recv(&mut rx);
        for f in rx.iter() {
            rnic.handle_frame(now, f);
        }
        stats.rx_frames += n as u64;
        work += n;
        // timers
        if rnic.poll_timeout().is_some_and(|t| t <= now) {
            rnic.handle_timeout(now);
            work += 1;
        }
        // transmit
        tx.clear();
        while let Some(slot) = tx.next_slot() {
            match rnic.poll_transmit(now, slot) {
                Some(len) => tx.commit(len),
                None => break,
            }
        }
        if !tx.is_empty() {
            port.send(&tx);
            stats.tx_frames += tx.len() as u64;
            work += tx.len();
        }
        // completions to the application
        for (cqn, q) in &cqs {
            let room = q.capacity() - q.len();
            if room == 0 {
                continue;
            }
            wcs.clear();
            let _ = rnic.poll_cq(*cqn, room, &mut wcs);
            for wc in wcs.drain(..) {
                let _ = q.push(wc);
            }
        }
        if work > 0 {
            idle = 0;
            continue;
        }
        stats.idle_turns += 1;
        idle = idle.saturating_add(1);
        if idle < cfg.spin {
            std::hint::spin_loop();
        } else if idle < cfg.spin + cfg.yields {
            std::thread::yield_now();
        } else {
            let until_timer = rnic
                .poll_timeout()
                .map(|t| t.saturating_since(clock()))
                .unwrap_or(cfg.park);
            stats.parks += 1;
            port.wait(until_timer.min(cfg.park));
        }
    }
    stats
}
