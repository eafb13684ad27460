//! The polling engine: a run-to-completion loop on its own thread that
//! owns an [`Rnic`] and a [`Port`], like one lcore of a DPDK application.
//!
//! Each turn: take posted work requests (the doorbell) → receive a batch →
//! parse and dispatch by destination QP → report the receive backlog left
//! in the port's ring (PFC generation, when configured) → run due timers →
//! build and send a batch → move completions to the completion queues the application
//! polls. Nothing allocates per packet; the only locks are on the control
//! path (creating objects). When a turn finds nothing to do the loop backs
//! off: spin, then park until a doorbell, a frame or the next timer — an
//! idle NIC does not burn a core. `stop` ends it cleanly.
//!
//! Applications talk to it through a [`Device`]: control verbs run as
//! closures on the engine thread (`call`), posts go through a lock-free
//! queue, completions come back through per-CQ lock-free queues, so the
//! data path has no syscall in either direction. A parked engine waits on
//! its [`Bell`] (an eventfd) and, for a socket port, on the socket: a post
//! or call rings the bell only when the engine said it is parking, so a
//! busy engine costs no syscall; other processes ring it through a
//! duplicate ([`Engine::bell`], the daemon's clients).
//!
//! An inline engine ([`Engine::start_inline`]) has no thread: the
//! application turns the same loop from its own thread ([`Device::turn`]),
//! run to completion — one busy thread per device instead of two.

mod duty;
mod sched;
mod turn;

use crate::device::{PortAttr, Rnic};
use crate::io::{Bell, FrameBatch, Port, PortCounters};
use crate::time::Instant;
use crate::transport::Counters;
use crate::verbs::VerbsError;
use crate::verbs::{RecvWr, SendWr, Wc, WcOpcode, WcStatus};
use crossbeam::channel::{self, Receiver, Sender};
use crossbeam::queue::ArrayQueue;
pub use sched::{apply as apply_priority, Granted, Priority, SchedError, SHORT_SLICE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;
pub use turn::current_cpu;
use turn::{run, run_callers, run_group, Loop};

/// How often the loop asks the port for its link state ([`Port::link_up`]:
/// an ioctl of about a microsecond, so never per turn). A change shows as
/// IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE within about this long.
pub const LINK_POLL: Duration = Duration::from_millis(100);

/// How long an idle loop parks while a completion queue is full: the
/// application that makes room rings no bell, so the loop looks again
/// this soon.
pub const BACKLOG_PARK: Duration = Duration::from_micros(200);

/// The longest park of a [`EngineConfig::callers_turn`] engine thread
/// while the application turns the loop: how late a timer their turns
/// set fires when they stop turning without saying so.
pub const CALLERS_PARK: Duration = Duration::from_millis(1);

/// A park the engine is about to begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Park {
    /// How long it parks at most.
    pub time: Duration,
    /// The park ends by the engine's own timer within
    /// [`EngineConfig::self_wake`]: a ringer may leave the wake to it.
    pub self_wake: bool,
    /// The CPU the engine parks on (None: unknown).
    pub cpu: Option<u32>,
}

/// How the engine thread runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Core to pin the thread to (core_affinity numbering); None: no pinning.
    pub core: Option<usize>,
    /// The scheduling the engine thread asks for ([`Priority`]): what
    /// lets a woken engine run at once while applications busy-poll.
    pub priority: Priority,
    /// Frames per receive and send batch.
    pub batch: usize,
    /// Idle turns spent spinning before parking. The backoff never calls
    /// `sched_yield`: under the EEVDF scheduler (Linux 6.6 and later) each
    /// yield pushes the thread's virtual deadline back by a slice, so an
    /// engine that yields while other threads want the CPU waits behind
    /// all of them, and was seen off the CPU for ~0.8 s (its peer's
    /// requests unanswered until their retries ran out). A parked engine
    /// wakes on a frame or a doorbell with a fresh deadline instead.
    /// An idle turn of one device on the in-memory wire takes ≈ 0.1 µs
    /// here, so the default spins some tens of µs after the last work.
    pub spin: u32,
    /// The longest the spin lasts, whatever `spin` allows: where a turn
    /// is slow (a CPU emulated by QEMU's TCG runs an idle turn in tens of
    /// µs) a count of turns would spin for milliseconds on a CPU the
    /// programs the engine serves are waiting for.
    pub spin_for: Duration,
    /// Longest park when idle. A frame, a doorbell or the next timer ends
    /// it earlier, so this only bounds how late nothing-announced work is
    /// seen (the link state, read every [`LINK_POLL`], is a timer too).
    pub park: Duration,
    /// A park at most this long counts as ending by the engine's own
    /// timer soon ([`Park::self_wake`]), which the hook tells those who
    /// ring. Zero: none does.
    pub self_wake: Duration,
    /// Running this long without a park under sustained load, the engine
    /// steps aside for `busy_pause` (see `duty.rs`). Zero: never.
    pub busy_max: Duration,
    /// How long it steps aside.
    pub busy_pause: Duration,
    /// Posts that may wait for the engine.
    pub post_queue: usize,
    /// Bytes a QP sends in a row in its turn of the device's transmit
    /// round robin ([`Rnic::set_tx_quantum`]); `None`: what the port
    /// sends as one unit ([`Port::train_bytes`]).
    pub tx_quantum: Option<usize>,
    /// The application's threads turn the loop too ([`Device::try_turn`],
    /// as rxe runs a post in the caller's context): the engine thread
    /// parks without the loop's lock, so a post goes out from the posting
    /// thread and a polling thread takes frames off the port, and the
    /// engine thread serves what they leave (a frame nobody polls for,
    /// timers). While they turn it, it never spins and parks at most
    /// [`CALLERS_PARK`]. For a device hosted in the application's process.
    pub callers_turn: bool,
    pub name: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            core: None,
            priority: Priority::Normal,
            batch: 64,
            spin: 300,
            spin_for: Duration::from_micros(50),
            park: LINK_POLL,
            self_wake: Duration::ZERO,
            busy_max: Duration::ZERO,
            busy_pause: Duration::ZERO,
            post_queue: 16384,
            tx_quantum: None,
            callers_turn: false,
            name: "rnic-engine".into(),
        }
    }
}

enum Post {
    Send(u32, SendWr),
    Recv(u32, RecvWr),
}

type Call = Box<dyn FnOnce(&mut Rnic, &dyn Port) + Send>;

/// Work the loop does for someone else on the engine thread. The softrnic
/// daemon polls the doorbells of shared-memory rings and moves completions
/// out; a closure `FnMut(&mut Rnic) -> usize` is a hook that only turns.
pub trait EngineHook: Send {
    /// Once per turn, right after taking posted work requests; returns how
    /// much work it did (0: none, which lets the loop back off).
    fn turn(&mut self, rnic: &mut Rnic) -> usize;
    /// The loop is about to park on its bell: announce it to whoever rings
    /// the bell (and then look once more); `false` means work arrived, do
    /// not park.
    fn before_park(&mut self, _rnic: &mut Rnic, _park: &Park) -> bool {
        true
    }
    /// The park has ended.
    fn after_park(&mut self, _rnic: &mut Rnic) {}
    /// Once per turn, after its receive, timer and transmit steps: hands
    /// out what they completed (the daemon's CQ rings) in the same turn;
    /// returns how much it did.
    fn after_turn(&mut self, _rnic: &mut Rnic) -> usize {
        0
    }
    /// The hook's next deadline (the engine's clock, as
    /// [`Rnic::last_now`]): the loop parks no longer than that.
    fn poll_timeout(&mut self, _rnic: &Rnic) -> Option<Instant> {
        None
    }
}

impl<F: FnMut(&mut Rnic) -> usize + Send> EngineHook for F {
    fn turn(&mut self, rnic: &mut Rnic) -> usize {
        self(rnic)
    }
}

/// The per-turn hook a device runs (see [`EngineHook`]).
pub type TurnHook = Box<dyn EngineHook>;

struct Shared {
    stop: AtomicBool,
    posts: ArrayQueue<Post>,
    thread: Mutex<Option<Thread>>,
    /// CQ number → the queue the application polls.
    new_cqs: Mutex<Vec<(u32, Arc<ArrayQueue<Wc>>)>>,
    /// An inline engine's loop, turned by the application (`Device::turn`),
    /// or a callers-turn engine's, turned by its thread and the
    /// application's; None for a threaded engine. Empty once stopped.
    inline: Option<Mutex<Option<Loop>>>,
    /// A thread turns the loop in `inline` too ([`EngineConfig::callers_turn`]).
    callers: bool,
    /// Turns the application asked for, taken or not: the thread of a
    /// callers-turn engine compares it from one park to the next.
    asked: std::sync::atomic::AtomicU64,
    /// The application stopped turning ([`Device::leave`]).
    left: AtomicBool,
    /// A member of a group ([`Engine::start_group`]): its loop's statistics,
    /// left here by the group thread when it drops the loop after `stop`.
    done: Mutex<Option<EngineStats>>,
    /// The scheduling the thread got (None: an inline engine, or not
    /// started yet); why not, when the asked-for one was refused.
    granted: Mutex<Option<Result<Granted, SchedError>>>,
    /// What a parked engine thread waits on (None: no eventfd here; the
    /// thread then parks and is unparked).
    bell: Option<Arc<Bell>>,
}

impl Shared {
    fn new(
        post_queue: usize,
        inline: Option<Mutex<Option<Loop>>>,
        bell: Option<Arc<Bell>>,
    ) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            posts: ArrayQueue::new(post_queue.max(1)),
            thread: Mutex::new(None),
            new_cqs: Mutex::new(Vec::new()),
            inline,
            callers: false,
            asked: Default::default(),
            left: AtomicBool::new(false),
            done: Mutex::new(None),
            granted: Mutex::new(None),
            bell,
        }
    }
}

impl Shared {
    /// The loop of an inline engine, which has no thread of its own (a
    /// callers-turn engine's thread owns the stopping and the calls).
    fn inline_only(&self) -> Option<&Mutex<Option<Loop>>> {
        self.inline.as_ref().filter(|_| !self.callers)
    }

    /// After publishing work (a post, a call, `stop`): wake the thread if
    /// it parks (the bell's fences pair with [`Shared::park_on`]'s: either
    /// the engine sees the work or this sees it parked).
    fn wake(&self) {
        match &self.bell {
            Some(b) => b.ring_if_parked(),
            None => {
                if let Ok(t) = self.thread.lock() {
                    if let Some(t) = t.as_ref() {
                        t.unpark();
                    }
                }
            }
        }
    }

    /// Announces the park; false when work arrived meanwhile.
    fn park_on(&self) -> bool {
        if let Some(b) = &self.bell {
            b.announce();
        }
        self.posts.is_empty() && !self.stop.load(Ordering::SeqCst)
    }

    fn unpark(&self) {
        if let Some(b) = &self.bell {
            b.clear();
        }
    }
}

/// The bell of a new engine thread; None if the kernel gives no eventfd:
/// the thread then waits in [`Port::wait`] (a group thread in
/// `std::thread::park_timeout`), which the unpark of [`Shared::wake`] ends
/// early only where that wait parks the thread.
fn new_bell() -> Option<Arc<Bell>> {
    Bell::new().ok().map(Arc::new)
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
    /// Frames the device sent to its own address and took back without
    /// the wire (counted once, when received).
    pub looped_frames: u64,
    /// Times the engine stepped aside after running `busy_max` without
    /// a park.
    pub pauses: u64,
}

/// The running engine.
pub struct Engine {
    shared: Arc<Shared>,
    calls: Sender<Call>,
    join: Option<JoinHandle<EngineStats>>,
    /// A group member: the group's thread, joined by whichever member
    /// stops last.
    group: Option<Arc<Mutex<Option<JoinHandle<()>>>>>,
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
    pub fn start(rnic: Rnic, port: Box<dyn Port>, cfg: EngineConfig) -> Engine {
        Engine::start_with_hook(rnic, port, cfg, None)
    }

    /// Like `start`, with a per-turn callback (see [`TurnHook`]).
    pub fn start_with_hook(
        mut rnic: Rnic,
        port: Box<dyn Port>,
        cfg: EngineConfig,
        hook: Option<TurnHook>,
    ) -> Engine {
        rnic.fit_port(port.link_speed_bps(), port.mtu());
        let mut port = port;
        let bell = new_bell();
        if let Some(b) = &bell {
            port.attach_bell(b);
        }
        let (calls, rx) = channel::unbounded::<Call>();
        let name = cfg.name.clone();
        let callers = cfg.callers_turn;
        let post_queue = cfg.post_queue;
        let lp = Loop::new(rnic, port, cfg, Some(rx), hook);
        let (shared, lp) = if callers {
            let mut sh = Shared::new(post_queue, Some(Mutex::new(Some(lp))), bell);
            sh.callers = true;
            (Arc::new(sh), None)
        } else {
            (Arc::new(Shared::new(post_queue, None, bell)), Some(lp))
        };
        let sh = shared.clone();
        let join = std::thread::Builder::new()
            .name(name)
            .spawn(move || match lp {
                Some(lp) => run(lp, sh),
                None => run_callers(sh),
            })
            .expect("spawn the engine thread");
        // wait until the loop has registered itself for wake-ups
        while shared.thread.lock().map(|t| t.is_none()).unwrap_or(false) {
            std::thread::yield_now();
        }
        Engine {
            shared,
            calls,
            join: Some(join),
            group: None,
        }
    }

    /// Several devices on ONE engine thread, turned one after the other
    /// each round (as one DPDK lcore serves several ports): e.g. both ends
    /// of an in-memory wire, so that a two-core machine has one busy engine
    /// thread instead of two. Each member gets its own [`Engine`] (posts,
    /// calls, completions and `stop` are per device); the thread ends when
    /// every member has stopped. When all members are idle the thread
    /// parks until a doorbell or the next timer (at most `cfg.park`): a
    /// frame arriving on a port does not end the park early, unlike a
    /// single-device engine, which waits on its port.
    pub fn start_group(
        members: Vec<(Rnic, Box<dyn Port>, Option<TurnHook>)>,
        cfg: EngineConfig,
    ) -> Vec<Engine> {
        let mut loops = Vec::new();
        let mut engines = Vec::new();
        let group = Arc::new(Mutex::new(None));
        // one thread, one bell for every member
        let bell = new_bell();
        for (mut rnic, mut port, hook) in members {
            rnic.fit_port(port.link_speed_bps(), port.mtu());
            if let Some(b) = &bell {
                port.attach_bell(b);
            }
            let shared = Arc::new(Shared::new(cfg.post_queue, None, bell.clone()));
            let (calls, rx) = channel::unbounded::<Call>();
            loops.push((
                Loop::new(rnic, port, cfg.clone(), Some(rx), hook),
                shared.clone(),
            ));
            engines.push(Engine {
                shared,
                calls,
                join: None,
                group: Some(group.clone()),
            });
        }
        let shareds: Vec<Arc<Shared>> = loops.iter().map(|(_, s)| s.clone()).collect();
        let join = std::thread::Builder::new()
            .name(cfg.name.clone())
            .spawn(move || run_group(loops, cfg))
            .expect("spawn the engine thread");
        *group.lock().expect("not poisoned") = Some(join);
        for sh in shareds {
            while sh.thread.lock().map(|t| t.is_none()).unwrap_or(false) {
                std::thread::yield_now();
            }
        }
        engines
    }

    /// An engine without a thread of its own (run to completion, as a
    /// DPDK application polls its port from the thread that does the
    /// work): the application turns the loop with [`Device::turn`]
    /// whenever it polls — while waiting for a completion, and now and
    /// then while it does nothing else, since frames, ACKs and timers
    /// wait for the next turn. Control verbs (`call`) run directly on the
    /// calling thread. A process then needs one busy thread per device
    /// instead of two, which on a machine with few cores is the difference
    /// between a core of its own and sharing one with the engine.
    pub fn start_inline(mut rnic: Rnic, port: Box<dyn Port>, cfg: EngineConfig) -> Engine {
        rnic.fit_port(port.link_speed_bps(), port.mtu());
        if let Some(core) = cfg.core {
            core_affinity::set_for_current(core_affinity::CoreId { id: core });
        }
        let post_queue = cfg.post_queue;
        let lp = Loop::new(rnic, port, cfg, None, None);
        let shared = Arc::new(Shared::new(post_queue, Some(Mutex::new(Some(lp))), None));
        // calls never go through the channel of an inline engine
        let (calls, _) = channel::unbounded::<Call>();
        Engine {
            shared,
            calls,
            join: None,
            group: None,
        }
    }

    /// The scheduling the engine thread got, or why it did not get what
    /// [`EngineConfig::priority`] asked for (None: an inline engine).
    pub fn priority(&self) -> Option<Result<Granted, SchedError>> {
        self.shared.granted.lock().ok().and_then(|g| *g)
    }

    /// The bell the engine thread parks on (None: an inline engine, or no
    /// eventfd): ring it, after publishing work and finding the engine
    /// parked, to wake it. The daemon hands duplicates to its clients.
    pub fn bell(&self) -> Option<Arc<Bell>> {
        self.shared.bell.clone()
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
        if let Some(m) = self.shared.inline_only() {
            // dropping the loop closes the port
            let lp = m.lock().ok().and_then(|mut l| l.take());
            return lp.map(|l| l.stats).unwrap_or_default();
        }
        self.shared.wake();
        if let Some(group) = self.group.take() {
            // wait for the group thread to drop this member's loop
            loop {
                if let Some(s) = self.shared.done.lock().ok().and_then(|mut d| d.take()) {
                    break s;
                }
                let mut j = group.lock().expect("not poisoned");
                if j.as_ref().is_none_or(|h| h.is_finished()) {
                    // the thread is gone (every member stopped, or it
                    // panicked): join it once, report what is left
                    if let Some(h) = j.take() {
                        let _ = h.join();
                    }
                    break self
                        .shared
                        .done
                        .lock()
                        .ok()
                        .and_then(|mut d| d.take())
                        .unwrap_or_default();
                }
                drop(j);
                self.shared.wake();
                std::thread::sleep(Duration::from_micros(100));
            }
        } else {
            self.join
                .take()
                .and_then(|j| j.join().ok())
                .unwrap_or_default()
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.join.is_some() || self.group.is_some() || self.shared.inline.is_some() {
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
        if let Some(m) = self.shared.inline_only() {
            let mut guard = m.lock().map_err(|_| EngineError::Stopped)?;
            let lp = guard.as_mut().ok_or(EngineError::Stopped)?;
            return Ok(f(&mut lp.rnic, &*lp.port));
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

    /// `ibv_query_port` for port 1: the state the engine last read (at most
    /// [`LINK_POLL`] old), active and largest MTU, link speed.
    pub fn query_port(&self) -> Result<PortAttr, EngineError> {
        self.call(|r| r.port_attr())
    }

    /// An inline engine ([`Engine::start_inline`]): runs one turn of the
    /// loop on the calling thread and returns how much it did (0: nothing
    /// to do). A threaded engine turns by itself: this returns 0.
    pub fn turn(&self) -> usize {
        self.try_turn().unwrap_or(0)
    }

    /// An inline or a callers-turn engine ([`EngineConfig::callers_turn`]):
    /// one turn of the loop on the calling thread, how much it did; None
    /// when another thread is turning it (or it is a plain threaded
    /// engine, or stopped): the work is that thread's.
    pub fn try_turn(&self) -> Option<usize> {
        let m = self.shared.inline.as_ref()?;
        if self.shared.callers {
            self.shared.asked.fetch_add(1, Ordering::Relaxed);
        }
        let mut g = m.try_lock().ok()?;
        g.as_mut().map(|lp| lp.turn(&self.shared))
    }

    /// A callers-turn engine: the application stops turning the loop for
    /// a while (it blocks waiting for an event), so the engine thread
    /// serves the port again now rather than after its park.
    pub fn leave(&self) {
        if self.shared.callers {
            self.shared.left.store(true, Ordering::SeqCst);
            self.shared.wake();
        }
    }

    /// Whether the application must turn this engine itself.
    pub fn is_inline(&self) -> bool {
        self.shared.inline_only().is_some()
    }
}
