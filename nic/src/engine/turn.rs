//! The loop itself: one turn takes posted work, receives and dispatches a
//! batch, runs due timers, builds and sends a batch and moves completions
//! out; between turns the idle backoff (spin, then park on the bell).

use super::duty::Duty;
use super::*;

/// The loop's state: everything a turn needs.
pub(super) struct Loop {
    pub(super) rnic: Rnic,
    pub(super) port: Box<dyn Port>,
    cfg: EngineConfig,
    /// Control calls (threaded engines; an inline engine runs them directly).
    calls: Option<Receiver<Call>>,
    hook: Option<TurnHook>,
    start: std::time::Instant,
    /// The clock's last reading (the engine's duty cycle uses it after a
    /// turn instead of reading the clock again).
    last_wall: std::time::Instant,
    rx: FrameBatch,
    tx: FrameBatch,
    /// Frames the device sent to its own address (internal loopback),
    /// received at the next turn's receive step.
    looped: FrameBatch,
    cqs: Vec<(u32, Arc<ArrayQueue<Wc>>)>,
    wcs: Vec<Wc>,
    pub(super) stats: EngineStats,
    /// When the link state is next read (engine clock).
    link_check: Instant,
    /// A completion queue of the application was full at the last turn:
    /// its room comes back without a doorbell.
    cq_backlog: bool,
    /// The last turn stopped making frames at a full transmit queue
    /// ([`Port::tx_room`]).
    tx_backlog: bool,
}

impl Loop {
    pub(super) fn new(
        mut rnic: Rnic,
        port: Box<dyn Port>,
        cfg: EngineConfig,
        calls: Option<Receiver<Call>>,
        hook: Option<TurnHook>,
    ) -> Loop {
        // the state at start: no event (an unknown state counts as up)
        rnic.init_link_up(port.link_up().unwrap_or(true));
        // a port that sends trains gets them: each QP's turn fills one
        rnic.set_tx_quantum(cfg.tx_quantum.unwrap_or_else(|| port.train_bytes()));
        let start = std::time::Instant::now();
        Loop {
            rnic,
            port,
            calls,
            hook,
            start,
            last_wall: start,
            rx: FrameBatch::new(cfg.batch),
            tx: FrameBatch::new(cfg.batch),
            looped: FrameBatch::new(cfg.batch),
            cqs: Vec::new(),
            wcs: Vec::with_capacity(cfg.batch * 2),
            stats: EngineStats::default(),
            link_check: Instant::ZERO + LINK_POLL,
            cq_backlog: false,
            tx_backlog: false,
            cfg,
        }
    }

    /// Reads the port's link state if [`LINK_POLL`] has passed since the
    /// last read; a change raises the port event (see
    /// [`Rnic::set_link_up`]). Returns whether it changed.
    fn check_link(&mut self, now: Instant) -> bool {
        if now < self.link_check {
            return false;
        }
        self.link_check = now + LINK_POLL;
        let up = self.port.link_up().unwrap_or(true);
        self.rnic.set_link_up(up)
    }

    fn clock(&mut self) -> Instant {
        let wall = std::time::Instant::now();
        self.last_wall = wall;
        Instant::from_nanos(wall.duration_since(self.start).as_nanos() as u64)
    }

    /// One turn: control calls, doorbells, receive, timers, transmit,
    /// completions. Returns the work done (0: an idle turn).
    pub(super) fn turn(&mut self, sh: &Shared) -> usize {
        self.stats.turns += 1;
        let mut work = 0usize;
        // control path
        if let Some(calls) = &self.calls {
            while let Ok(call) = calls.try_recv() {
                call(&mut self.rnic, &*self.port);
                work += 1;
            }
        }
        if let Ok(mut new) = sh.new_cqs.try_lock() {
            self.cqs.append(&mut new);
        }
        let rnic = &mut self.rnic;
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
                    if let Some((_, q)) = self.cqs.iter().find(|(n, _)| *n == cq) {
                        let _ = q.push(wc);
                    }
                }
            }
        }
        // one clock read for the rest of the turn
        let now = self.clock();
        // the link state, now and then; before the hook, which hands the
        // device's events to their users
        if self.check_link(now) {
            work += 1;
        }
        let rnic = &mut self.rnic;
        if let Some(h) = self.hook.as_mut() {
            work += h.turn(rnic);
        }
        // receive and dispatch: first what the device sent itself
        let looped = self.looped.len();
        for f in self.looped.iter() {
            rnic.handle_frame(now, f);
        }
        self.looped.clear();
        self.stats.looped_frames += looped as u64;
        work += looped;
        self.rx.clear();
        let n = self.port.recv(&mut self.rx);
        for f in self.rx.iter() {
            rnic.handle_frame(now, f);
        }
        self.stats.rx_frames += n as u64;
        work += n;
        // PFC generation: what is still waiting in the receive ring
        if rnic.pfc_tx_enabled() {
            if let Some(b) = self.port.rx_backlog() {
                let by_prio = b.by_priority(&rnic.config().cc.qos);
                rnic.on_rx_backlogs(now, &by_prio);
            }
        }
        // timers
        if rnic.poll_timeout().is_some_and(|t| t <= now) {
            rnic.handle_timeout(now);
            work += 1;
        }
        work += self.transmit(now);
        // completions to the application
        let rnic = &mut self.rnic;
        if let Some(h) = self.hook.as_mut() {
            work += h.after_turn(rnic);
        }
        self.cq_backlog = false;
        for (cqn, q) in &self.cqs {
            let room = q.capacity() - q.len();
            if room == 0 {
                self.cq_backlog |= rnic.cq_len(*cqn) > 0;
                continue;
            }
            self.wcs.clear();
            let _ = rnic.poll_cq(*cqn, room, &mut self.wcs);
            for wc in self.wcs.drain(..) {
                let _ = q.push(wc);
            }
        }
        if work == 0 {
            self.stats.idle_turns += 1;
        }
        work
    }

    /// The turn's transmit step: frames to the wire, and frames to the
    /// device's own address back to it without the wire (as rxe loops a
    /// packet whose destination is local); the port may record or impair
    /// them. Makes no more wire frames than the port takes
    /// ([`Port::tx_room`]). Returns the work done.
    fn transmit(&mut self, now: Instant) -> usize {
        let mut work = 0;
        self.tx.clear();
        let room = self.port.tx_room(self.tx.capacity());
        self.tx_backlog = false;
        while !self.looped.is_full() {
            if self.tx.len() >= room {
                // the port's queue is full: the rest waits in the send
                // queues, and the engine looks again soon
                self.tx_backlog = true;
                break;
            }
            let Some(slot) = self.tx.next_slot() else {
                break;
            };
            let Some(len) = self.rnic.poll_transmit(now, slot) else {
                break;
            };
            let frame = &mut slot[..len];
            if !self.rnic.is_to_self(frame) {
                self.tx.commit(len);
            } else {
                work += 1;
                if self.port.loop_back(frame) {
                    self.looped.push(frame);
                }
            }
        }
        if !self.tx.is_empty() {
            self.port.send(&self.tx);
            self.stats.tx_frames += self.tx.len() as u64;
            work += self.tx.len();
        }
        work
    }

    /// How long to park: until the next timer (the device's, the link
    /// check's, the hook's), at most `cfg.park`, and at most
    /// [`BACKLOG_PARK`] while a completion queue or the port's transmit
    /// queue is full, or until the port takes frames again when it says
    /// ([`Port::tx_ready_in`]; [`park_plan`]).
    fn park_time(&mut self) -> Park {
        let hook = self.hook.as_mut().and_then(|h| h.poll_timeout(&self.rnic));
        let next = [self.rnic.poll_timeout(), Some(self.link_check), hook]
            .into_iter()
            .flatten()
            .min();
        let mut cap = if self.cq_backlog || self.tx_backlog {
            self.cfg.park.min(BACKLOG_PARK)
        } else {
            self.cfg.park
        };
        if self.tx_backlog {
            // a pacing port says when it takes frames again: wake then,
            // not a whole BACKLOG_PARK later (the rate would sag)
            if let Some(t) = self.port.tx_ready_in() {
                cap = cap.min(t);
            }
        }
        let now = self.clock();
        park_plan(&self.cfg, now, next, cap)
    }

    /// Announces a park to the device's ringers; false: work arrived.
    fn may_park(&mut self, sh: &Shared, park: &Park) -> bool {
        if !sh.park_on() || self.calls.as_ref().is_some_and(|c| !c.is_empty()) {
            sh.unpark();
            return false;
        }
        if let Some(h) = self.hook.as_mut() {
            if !h.before_park(&mut self.rnic, park) {
                h.after_park(&mut self.rnic);
                sh.unpark();
                return false;
            }
        }
        // a frame an in-memory peer queued before the announcement rang
        // no bell: take it instead of sleeping on it
        if self.port.pending() {
            self.parked(sh);
            return false;
        }
        true
    }

    fn parked(&mut self, sh: &Shared) {
        sh.unpark();
        if let Some(h) = self.hook.as_mut() {
            h.after_park(&mut self.rnic);
        }
    }

    /// The idle backoff's last step: wait for a frame, a doorbell or the
    /// next timer (at most `cfg.park`).
    fn park(&mut self, sh: &Shared) {
        let park = self.park_time();
        let t = park.time;
        match sh.bell.clone() {
            Some(bell) => {
                if !self.may_park(sh, &park) {
                    return;
                }
                self.stats.parks += 1;
                self.port.wait_or_ring(&bell, t);
                bell.drain_if_rung();
                self.parked(sh);
            }
            None => {
                self.stats.parks += 1;
                self.port.wait(t);
            }
        }
    }
}

/// The idle backoff's spin: the idle turns since the last work and when
/// the first of them read the clock.
#[derive(Default)]
struct Backoff {
    turns: u32,
    since: Option<std::time::Instant>,
}

impl Backoff {
    /// A turn did work: the next idle one starts a new spin.
    fn worked(&mut self) {
        *self = Backoff::default();
    }

    /// An idle turn that read the clock at `now`: whether the engine
    /// spins on (fewer than `cfg.spin` idle turns, for less than
    /// `cfg.spin_for`) rather than parks.
    fn spins(&mut self, cfg: &EngineConfig, now: std::time::Instant) -> bool {
        self.turns = self.turns.saturating_add(1);
        let since = *self.since.get_or_insert(now);
        self.turns < cfg.spin && now.saturating_duration_since(since) < cfg.spin_for
    }
}

/// The park after an idle backoff: until `next` (the earliest timer), at
/// most `cap`; said to end by the engine's own timer soon when it lasts at
/// most `cfg.self_wake` ([`Park::self_wake`]).
pub(super) fn park_plan(
    cfg: &EngineConfig,
    now: Instant,
    next: Option<Instant>,
    cap: Duration,
) -> Park {
    let time = next.map_or(cap, |t| t.saturating_since(now).min(cap));
    Park {
        time,
        self_wake: !cfg.self_wake.is_zero() && time <= cfg.self_wake,
        cpu: current_cpu(),
    }
}

/// The CPU the calling thread runs on now (a hint: it may move).
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no argument and only reads.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

/// Pins the calling engine thread and sets its scheduling; what it got
/// goes to every member's `granted`.
fn setup_thread(cfg: &EngineConfig, shareds: &[&Shared]) {
    if let Some(core) = cfg.core {
        core_affinity::set_for_current(core_affinity::CoreId { id: core });
    }
    let granted = super::sched::apply(cfg.priority);
    for sh in shareds {
        *sh.granted.lock().expect("not poisoned") = Some(granted);
    }
}

pub(super) fn run(mut lp: Loop, sh: Arc<Shared>) -> EngineStats {
    setup_thread(&lp.cfg, &[&sh]);
    *sh.thread.lock().expect("not poisoned") = Some(std::thread::current());
    let mut idle = Backoff::default();
    let mut duty = Duty::new(lp.cfg.busy_max, lp.cfg.busy_pause);
    while !sh.stop.load(Ordering::Acquire) {
        if lp.turn(&sh) > 0 {
            idle.worked();
            duty.after_work(lp.last_wall, &mut lp.stats.pauses);
            continue;
        }
        if idle.spins(&lp.cfg, lp.last_wall) {
            std::hint::spin_loop();
        } else {
            lp.park(&sh);
            duty.parked();
        }
    }
    lp.stats
}

/// The thread of a callers-turn engine ([`EngineConfig::callers_turn`]):
/// turns the loop in `sh.inline` under its lock, as the application's
/// threads do ([`Device::try_turn`]), and parks without the lock — on the
/// port's descriptor or bell ([`Port::wait_unheld`]) and the timer — so that
/// their turns run meanwhile: a frame wakes this thread only when no turn
/// of theirs takes it first. It spins only while they ask for no turns;
/// while they do, it parks at most [`CALLERS_PARK`] (their turns may
/// have set earlier timers). A port with neither is waited on
/// holding the lock, as [`run`] does (a post it keeps from turning rings
/// the doorbell and the bell instead).
pub(super) fn run_callers(sh: Arc<Shared>) -> EngineStats {
    let Some(m) = sh.inline.as_ref() else {
        return EngineStats::default();
    };
    let Some(cfg) = m
        .lock()
        .ok()
        .and_then(|g| g.as_ref().map(|lp| lp.cfg.clone()))
    else {
        return EngineStats::default();
    };
    setup_thread(&cfg, &[&sh]);
    *sh.thread.lock().expect("not poisoned") = Some(std::thread::current());
    let mut idle = Backoff::default();
    let mut seen = sh.asked.load(Ordering::Relaxed);
    let mut duty = Duty::new(cfg.busy_max, cfg.busy_pause);
    while !sh.stop.load(Ordering::Acquire) {
        let Ok(mut g) = m.lock() else { break };
        let Some(lp) = g.as_mut() else { break };
        if lp.turn(&sh) > 0 {
            idle.worked();
            duty.after_work(lp.last_wall, &mut lp.stats.pauses);
            continue;
        }
        let spins = idle.spins(&cfg, lp.last_wall);
        let asked = sh.asked.load(Ordering::Relaxed);
        let callers = asked != seen && !sh.left.swap(false, Ordering::AcqRel);
        seen = asked;
        if !callers && spins {
            drop(g);
            std::hint::spin_loop();
            continue;
        }
        let (Some(bell), Some(on)) = (sh.bell.clone(), lp.port.wait_unheld()) else {
            lp.park(&sh);
            duty.parked();
            continue;
        };
        let mut park = lp.park_time();
        if callers {
            park.time = park.time.min(CALLERS_PARK);
        }
        if !lp.may_park(&sh, &park) {
            continue;
        }
        lp.stats.parks += 1;
        drop(g);
        let fd = match on {
            // SAFETY: the descriptor is the port's, and the port lives in
            // the loop, which only this thread drops (below, after the
            // last wait).
            crate::io::Unheld::Fd(fd) => Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }),
            crate::io::Unheld::Bell => None,
        };
        bell.wait(fd, park.time);
        bell.drain_if_rung();
        if let Some(lp) = m.lock().ok().as_mut().and_then(|g| g.as_mut()) {
            lp.parked(&sh);
        }
        duty.parked();
    }
    // dropping the loop closes the port
    m.lock()
        .ok()
        .and_then(|mut g| g.take())
        .map(|lp| lp.stats)
        .unwrap_or_default()
}

pub(super) fn run_group(mut members: Vec<(Loop, Arc<Shared>)>, cfg: EngineConfig) {
    let shareds: Vec<&Shared> = members.iter().map(|(_, sh)| &**sh).collect();
    setup_thread(&cfg, &shareds);
    for (_, sh) in &members {
        *sh.thread.lock().expect("not poisoned") = Some(std::thread::current());
    }
    let mut idle = Backoff::default();
    let mut duty = Duty::new(cfg.busy_max, cfg.busy_pause);
    while !members.is_empty() {
        // a stopped member leaves its statistics and its loop (and port) goes
        members.retain(|(lp, sh)| {
            let stopped = sh.stop.load(Ordering::Acquire);
            if stopped {
                *sh.done.lock().expect("not poisoned") = Some(lp.stats.clone());
            }
            !stopped
        });
        let mut work = 0;
        for (lp, sh) in members.iter_mut() {
            work += lp.turn(sh);
        }
        // the latest clock reading of the turns just taken
        let wall = members.iter().map(|(lp, _)| lp.last_wall).max();
        if work > 0 {
            idle.worked();
            // a group's pauses count on its first member
            let mut pauses = 0;
            let wall = wall.unwrap_or_else(std::time::Instant::now);
            duty.after_work(wall, &mut pauses);
            if let Some((lp, _)) = members.first_mut() {
                lp.stats.pauses += pauses;
            }
            continue;
        }
        if wall.is_some_and(|w| idle.spins(&cfg, w)) {
            std::hint::spin_loop();
        } else {
            let park = members
                .iter_mut()
                .map(|(lp, _)| lp.park_time())
                .min_by_key(|p| p.time)
                .unwrap_or(Park {
                    time: cfg.park,
                    self_wake: false,
                    cpu: None,
                });
            let until = park.time;
            let bell = members.first().and_then(|(_, sh)| sh.bell.clone());
            match bell {
                Some(bell) => {
                    // every member announces the park; any with work cancels it
                    let mut go = true;
                    let mut announced = 0;
                    for (lp, sh) in members.iter_mut() {
                        if !lp.may_park(sh, &park) {
                            go = false;
                            break;
                        }
                        announced += 1;
                    }
                    if go {
                        for (lp, _) in members.iter_mut() {
                            lp.stats.parks += 1;
                        }
                        bell.wait(None, until);
                        bell.drain_if_rung();
                    }
                    for (lp, sh) in members.iter_mut().take(announced) {
                        lp.parked(sh);
                    }
                }
                None => {
                    for (lp, _) in members.iter_mut() {
                        lp.stats.parks += 1;
                    }
                    std::thread::park_timeout(until);
                }
            }
            duty.parked();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{mem, Bell};
    use crate::transport::RnicConfig;
    use wire::{EthernetAddress, Gid};

    /// A loop on one end of an in-memory wire, its bell attached, and the
    /// other end.
    fn engine_on_wire() -> (Loop, Shared, mem::MemPort) {
        let macs = [
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        ];
        let (mut port, peer) = mem::pair(macs, 16);
        let bell = Arc::new(Bell::new().expect("eventfd"));
        port.attach_bell(&bell);
        let rnic = Rnic::new(RnicConfig::new(
            macs[0],
            Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
        ));
        let cfg = EngineConfig::default();
        let sh = Shared::new(cfg.post_queue, None, Some(bell));
        (Loop::new(rnic, Box::new(port), cfg, None, None), sh, peer)
    }

    const LONG: Park = Park {
        time: LINK_POLL,
        self_wake: false,
        cpu: None,
    };

    #[test]
    fn a_frame_queued_before_the_park_is_announced_cancels_the_park() {
        let (mut lp, sh, mut peer) = engine_on_wire();
        // nothing waits: the engine may park
        assert!(lp.may_park(&sh, &LONG));
        lp.parked(&sh);
        // the peer queues a frame while the engine is awake (its bell is
        // not rung: the engine has not announced a park)
        let mut b = FrameBatch::new(1);
        b.push(&[0u8; 60]);
        assert_eq!(peer.send(&b), 1);
        assert_eq!(sh.bell.as_ref().expect("bell").drain(), 0, "no ring");
        // announcing the park now must find the frame, not sleep on it
        assert!(!lp.may_park(&sh, &LONG), "the park must be called off");
        // once received, the engine may park again
        let mut rx = FrameBatch::new(4);
        assert_eq!(lp.port.recv(&mut rx), 1);
        assert!(lp.may_park(&sh, &LONG));
    }

    #[test]
    fn the_spin_ends_at_its_turns_or_its_time_whichever_comes_first() {
        let us = Duration::from_micros;
        let cfg = EngineConfig {
            spin: 4,
            spin_for: us(50),
            ..Default::default()
        };
        let t0 = std::time::Instant::now();
        // quick turns: the count ends the spin (turns 1..3 spin, the 4th parks)
        let mut b = Backoff::default();
        let quick: Vec<bool> = (0..4).map(|i| b.spins(&cfg, t0 + us(i))).collect();
        assert_eq!(quick, [true, true, true, false]);
        // slow turns (30 µs each, as under an emulated CPU): the time does
        let mut b = Backoff::default();
        let slow: Vec<bool> = (0..3).map(|i| b.spins(&cfg, t0 + us(30 * i))).collect();
        assert_eq!(slow, [true, true, false]);
        // work starts a new spin, timed from its first idle turn
        b.worked();
        assert!(b.spins(&cfg, t0 + us(1000)));
        assert!(b.spins(&cfg, t0 + us(1049)));
        assert!(!b.spins(&cfg, t0 + us(1050)));
        // no spin at all
        let none = EngineConfig {
            spin_for: Duration::ZERO,
            ..cfg
        };
        assert!(!Backoff::default().spins(&none, t0));
    }

    #[test]
    fn a_park_says_it_ends_by_itself_only_when_short_enough() {
        let cfg = EngineConfig {
            self_wake: Duration::from_micros(50),
            ..Default::default()
        };
        let now = Instant::ZERO + Duration::from_millis(5);
        let cap = Duration::from_millis(100);
        // no timer: the whole cap, and nothing ends it soon
        let p = park_plan(&cfg, now, None, cap);
        assert_eq!((p.time, p.self_wake), (cap, false));
        // a timer in 30 µs: until then, and it ends by itself
        let p = park_plan(&cfg, now, Some(now + Duration::from_micros(30)), cap);
        assert_eq!((p.time, p.self_wake), (Duration::from_micros(30), true));
        // a timer already due: no park at all
        let p = park_plan(&cfg, now, Some(Instant::ZERO), cap);
        assert_eq!(p.time, Duration::ZERO);
        // self_wake zero: no park is ever said to end by itself
        let off = EngineConfig::default();
        for next in [Some(now + Duration::from_micros(30)), Some(now), None] {
            assert!(!park_plan(&off, now, next, cap).self_wake);
        }
    }

    /// A port that takes nothing now and says it takes frames again in
    /// `ready`: a pacer with an empty bucket.
    struct Held {
        inner: mem::MemPort,
        ready: Option<Duration>,
    }

    impl Port for Held {
        fn tx_room(&mut self, _want: usize) -> usize {
            0
        }
        fn tx_ready_in(&self) -> Option<Duration> {
            self.ready
        }
        crate::forward_port!(field inner: recv, send, mac, mtu, link_speed_bps, counters, wait, wait_or_ring, attach_bell, pending, rx_backlog, link_up, loop_back);
    }

    #[test]
    fn an_engine_held_by_a_pacing_port_parks_until_the_port_takes_frames() {
        let park_with = |ready: Option<Duration>| {
            let macs = [
                EthernetAddress([2, 0, 0, 0, 0, 1]),
                EthernetAddress([2, 0, 0, 0, 0, 2]),
            ];
            let (inner, _peer) = mem::pair(macs, 16);
            let rnic = Rnic::new(RnicConfig::new(
                macs[0],
                Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
            ));
            let held = Held { inner, ready };
            let mut lp = Loop::new(rnic, Box::new(held), EngineConfig::default(), None, None);
            // the turn's transmit step finds no room: a backlog
            lp.transmit(Instant::ZERO);
            assert!(lp.tx_backlog);
            lp.park_time().time
        };
        // the port says 50 µs: the engine parks no longer
        assert!(park_with(Some(Duration::from_micros(50))) <= Duration::from_micros(50));
        // it does not know: a whole BACKLOG_PARK at most, not less
        let t = park_with(None);
        assert!(t <= BACKLOG_PARK && t > Duration::from_micros(50), "{t:?}");
    }
}
