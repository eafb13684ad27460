//! The daemon's data plane: runs once per engine turn on the engine thread
//! (a `nic::engine::TurnHook`). It polls the doorbells (producer indices)
//! of every active QP's send and receive rings, fetches and validates the
//! new WQEs and posts them to the transport, then moves completions from
//! the transport's CQs into the clients' shared CQ rings.
//!
//! Every ring is hostile: the daemon keeps its own consumer/producer
//! indices and only *reads* the client's; a producer index more than a
//! ring's size ahead moves that QP to the error state; garbage WQEs
//! complete with errors on that client's CQ; a CQ ring whose consumer
//! index is wild counts as full (the client only hurts itself).

use ipc::doorbell::{Doorbells, Slots, Target};
use ipc::ring::{self, CqeRaw, Ring, WqeRaw};
use ipc::shm::Mapping;
use nic::device::Rnic;
use nic::verbs::VerbsError;
use nic::verbs::{AhAttr, QpAttr, QpState, UdDest, Wc, WcOpcode, WcStatus};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// WQEs taken from one ring per turn (fairness between QPs).
const BATCH: u32 = 32;

pub struct QpRings {
    pub qpn: u32,
    pub _map: Arc<Mapping>,
    pub sq: Ring,
    pub rq: Ring,
    pub sq_cons: u32,
    pub rq_cons: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub broken: bool,
    /// The client (connection) that owns the QP, its PD, whether it is a
    /// UD QP (send WQEs name an address handle) and its SRQ, if any.
    pub owner: u64,
    pub pd: u32,
    pub ud: bool,
    pub srq: Option<u32>,
}

/// A shared receive queue's ring.
pub struct SrqRing {
    pub srqn: u32,
    pub _map: Arc<Mapping>,
    pub ring: Ring,
    pub cons: u32,
    pub broken: bool,
    /// The client that owns it (its asynchronous events go there).
    pub owner: u64,
}

/// A client's asynchronous events not yet fetched, and its eventfd.
#[derive(Default)]
pub struct ClientEvents {
    pub queue: VecDeque<ipc::proto::AsyncEventMsg>,
    pub fd: Option<std::os::fd::OwnedFd>,
    /// Events dropped because the client did not fetch them (over 256).
    pub dropped: u64,
}

impl ClientEvents {
    /// Queues an event (beyond 256 the oldest is dropped and counted) and
    /// writes the client's eventfd.
    pub fn push(&mut self, msg: ipc::proto::AsyncEventMsg) {
        if self.queue.len() >= 256 {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(msg);
        if let Some(fd) = &self.fd {
            use std::os::fd::AsFd;
            nic::io::bell::ring_fd(fd.as_fd());
        }
    }
}

/// An address handle: its owner, its PD and the address.
#[derive(Clone, Copy, Debug)]
pub struct Ah {
    pub owner: u64,
    pub pd: u32,
    pub attr: AhAttr,
}

pub struct CqRing {
    pub _map: Arc<Mapping>,
    pub ring: Ring,
    pub prod: u32,
    /// Completions the daemon made itself (refused WQEs), written first.
    pub pending: VecDeque<Wc>,
    /// The client's completion-event eventfd (`NotifyCq`).
    pub notify: Option<std::os::fd::OwnedFd>,
    /// The client that owns it (its asynchronous events go there).
    pub owner: u64,
}

/// How long after a client posted on the engine's CPU (while it parked)
/// the engine keeps its parks short ([`DataPlane::shares_cpu`]).
pub const NEAR_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);

#[derive(Default)]
pub struct DataPlane {
    pub qps: Vec<QpRings>,
    pub cqs: HashMap<u32, CqRing>,
    pub srqs: Vec<SrqRing>,
    /// AH handle → AH (handles are daemon-wide, checked against the owner).
    pub ahs: HashMap<u32, Ah>,
    wcs: Vec<Wc>,
    /// WQEs refused by the daemon (bad opcode, SGE count, wild index).
    pub refused: u64,
    /// Asynchronous events by client.
    pub events: HashMap<u64, ClientEvents>,
    /// The doorbell pages' "parked" word (`ipc::doorbell::park_word`;
    /// 0: the engine runs).
    parked: u32,
    /// Until when the engine counts as sharing its CPU with a client: one
    /// posted on it while the engine parked, within [`NEAR_WINDOW`].
    near_until: Option<nic::Instant>,
    /// A CQ ring was full at the last turn with completions still waiting:
    /// the client that polls makes room without ringing.
    backlog: bool,
    /// CQs with new completions in a turn: (the device's sequence number of
    /// the oldest, CQ, whether one satisfies a solicited-only request).
    fire: Vec<(u64, u32, bool)>,
    /// Events fired so far (each CQ ring's event sequence word).
    events_fired: u32,
    /// CQs to visit at the next turn besides those the device lists as
    /// having new completions: a ring that was full with completions
    /// waiting, completions the daemon made itself.
    carry: Vec<u32>,
    /// The CQs a turn visits.
    visit: Vec<u32>,
    /// Each client's doorbell page, by owner.
    pages: HashMap<u64, ClientPage>,
    /// QPN → index in `qps`; SRQ number → index in `srqs`.
    qp_at: HashMap<u32, usize>,
    srq_at: HashMap<u32, usize>,
    /// Rings left with work at the last turn (a batch's worth was taken):
    /// fetched from again without a doorbell.
    again: Vec<Target>,
    /// The rings a turn fetches from.
    due: Vec<Target>,
}

/// A client's doorbell page and the rings its slots name.
struct ClientPage {
    map: Arc<Mapping>,
    db: Doorbells,
    slots: Slots,
}

/// A completion event, if the client armed the CQ for one these completions
/// satisfy (IBTA 11.4.2.2: the next completion, or with "solicited" the
/// next one with the Solicited Event bit or an unsuccessful one); the
/// request is used up. The CQEs are published before the armed word is
/// read, and the client arms before it polls once more: a completion is
/// either seen by that poll or signalled. `seq` goes into the ring's
/// event sequence word before the armed word goes to 0, for the client to
/// hand out CQs found fired together in the order they fired. Whether it
/// fired.
fn notify(ring: &Ring, fd: &std::os::fd::OwnedFd, solicited: bool, seq: u32) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    std::sync::atomic::fence(SeqCst);
    let armed = ring.armed().load(SeqCst);
    let wanted = armed == ring::ARM_NEXT || (armed == ring::ARM_SOLICITED && solicited);
    if !wanted {
        return false;
    }
    ring.event_seq().store(seq, SeqCst);
    if ring
        .armed()
        .compare_exchange(armed, 0, SeqCst, SeqCst)
        .is_err()
    {
        return false;
    }
    use std::os::fd::AsFd;
    nic::io::bell::ring_fd(fd.as_fd());
    true
}

fn status_of(e: &VerbsError) -> WcStatus {
    match e {
        VerbsError::InvalidWr(_) => WcStatus::LocQpOpErr,
        VerbsError::BadMr(_) => WcStatus::LocProtErr,
        _ => WcStatus::LocQpOpErr,
    }
}

impl DataPlane {
    /// Client `owner`'s doorbell page, made on first use (raised if the
    /// engine parks now).
    fn page(&mut self, owner: u64) -> std::io::Result<&mut ClientPage> {
        use std::collections::hash_map::Entry;
        match self.pages.entry(owner) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let map = Arc::new(Mapping::create("softrnic-db", ipc::doorbell::PAGE_LEN)?);
                // SAFETY: the mapping is PAGE_LEN bytes, page-aligned, and
                // the ClientPage keeps it alive as long as the view.
                let db = unsafe { Doorbells::new(map.ptr()) };
                db.parked()
                    .store(self.parked, std::sync::atomic::Ordering::SeqCst);
                Ok(e.insert(ClientPage {
                    map,
                    db,
                    slots: Slots::default(),
                }))
            }
        }
    }

    /// Client `owner`'s doorbell page, for its `Doorbells` request.
    pub fn doorbell_page(&mut self, owner: u64) -> std::io::Result<Arc<Mapping>> {
        Ok(self.page(owner)?.map.clone())
    }

    /// Whether client `owner` has room for `n` more rings.
    pub fn has_slots(&mut self, owner: u64, n: usize) -> bool {
        self.page(owner).is_ok_and(|p| p.slots.room(n))
    }

    /// Client `owner` is gone: its page goes (its rings went before).
    pub fn remove_client(&mut self, owner: u64) {
        self.pages.remove(&owner);
    }

    /// A slot of `owner`'s page for `t`, written into `ring`'s header (a
    /// full page, which `has_slots` rules out, leaves the ring unrung).
    fn give_slot(&mut self, owner: u64, ring: &Ring, t: Target) {
        let slot = self
            .page(owner)
            .ok()
            .and_then(|p| p.slots.alloc(t))
            .unwrap_or(u32::MAX);
        ring.slot().store(slot, std::sync::atomic::Ordering::SeqCst);
    }

    fn take_slots(&mut self, owner: u64, gone: impl FnMut(Target) -> bool) {
        if let Some(p) = self.pages.get_mut(&owner) {
            p.slots.release(gone);
        }
    }

    /// A new QP: its rings get their doorbell slots.
    pub fn add_qp(&mut self, q: QpRings) {
        self.give_slot(q.owner, &q.sq, Target::Sq(q.qpn));
        self.give_slot(q.owner, &q.rq, Target::Rq(q.qpn));
        self.qp_at.insert(q.qpn, self.qps.len());
        self.qps.push(q);
    }

    pub fn remove_qp(&mut self, qpn: u32) {
        let Some(&i) = self.qp_at.get(&qpn) else {
            return;
        };
        let q = self.qps.remove(i);
        self.take_slots(q.owner, |t| t == Target::Sq(qpn) || t == Target::Rq(qpn));
        self.qp_at = self
            .qps
            .iter()
            .enumerate()
            .map(|(i, q)| (q.qpn, i))
            .collect();
    }

    /// Drops every completion of the QPs `qpns` not yet written to a CQ
    /// ring: those waiting here and those in the device's CQs (which are
    /// moved here, in order, to make that possible).
    pub fn forget_completions_of(&mut self, rnic: &mut Rnic, qpns: &[u32]) {
        for (cqn, c) in self.cqs.iter_mut() {
            self.wcs.clear();
            let _ = rnic.poll_cq(*cqn, usize::MAX, &mut self.wcs);
            c.pending.extend(self.wcs.drain(..));
            c.pending.retain(|w| !qpns.contains(&w.qp_num));
            if !c.pending.is_empty() {
                self.carry.push(*cqn);
            }
        }
    }

    /// A new SRQ: its ring gets a doorbell slot.
    pub fn add_srq(&mut self, s: SrqRing) {
        self.give_slot(s.owner, &s.ring, Target::Srq(s.srqn));
        self.srq_at.insert(s.srqn, self.srqs.len());
        self.srqs.push(s);
    }

    /// Whether a CQ ring was full at the last turn with completions
    /// waiting for room.
    pub fn backlogged(&self) -> bool {
        self.backlog
    }

    pub fn remove_srq(&mut self, srqn: u32) {
        let Some(&i) = self.srq_at.get(&srqn) else {
            return;
        };
        let r = self.srqs.remove(i);
        self.take_slots(r.owner, |t| t == Target::Srq(srqn));
        self.srq_at = self
            .srqs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.srqn, i))
            .collect();
    }

    pub fn add_cq(&mut self, cqn: u32, c: CqRing) {
        self.cqs.insert(cqn, c);
    }

    pub fn remove_cq(&mut self, cqn: u32) {
        self.cqs.remove(&cqn);
    }

    fn error_wc(&mut self, cq: u32, wc: Wc) {
        self.refused += 1;
        if let Some(c) = self.cqs.get_mut(&cq) {
            if c.pending.len() < 4096 {
                c.pending.push_back(wc);
                self.carry.push(cq);
            }
        }
    }

    /// The engine is about to park on its bell: raise every doorbell
    /// page's "parked" word, then look at the pages' bits once more (the
    /// client marks its ring, fences, then reads the word: one of the two
    /// sees the other). False: a WQE came in meanwhile, do not park.
    pub fn announce_park(&mut self, park: &nic::engine::Park) -> bool {
        use std::sync::atomic::{fence, Ordering::SeqCst};
        self.set_parked(ipc::doorbell::park_word(park.cpu, park.self_wake));
        fence(SeqCst);
        let rung = self.pages.values().any(|p| p.db.any(p.slots.words()));
        self.again.is_empty() && !rung
    }

    /// The park is over: clients need not ring (nothing to do when the
    /// words are down already).
    pub fn end_park(&mut self) {
        if self.parked != 0 {
            self.set_parked(0);
        }
    }

    fn set_parked(&mut self, v: u32) {
        self.parked = v;
        for p in self.pages.values() {
            p.db.parked().store(v, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Hands the device's asynchronous events to the clients they concern
    /// (and writes each one's eventfd). Returns how many.
    pub fn async_events(&mut self, rnic: &mut Rnic) -> usize {
        let mut n = 0;
        while let Some(ev) = rnic.poll_async_event() {
            n += 1;
            use nic::verbs::Affiliated;
            // only the client that owns the object hears of it; events of
            // objects already released are dropped
            let owner = match ev.affiliated() {
                Affiliated::Srq(s) => self.srqs.iter().find(|r| r.srqn == s).map(|r| r.owner),
                Affiliated::Cq(c) => self.cqs.get(&c).map(|r| r.owner),
                Affiliated::Qp(q) => self.qps.iter().find(|r| r.qpn == q).map(|r| r.owner),
                // unaffiliated (IBTA 11.6.3.2): every user of the device
                // (every connected client, as every open context of a
                // verbs device gets its port events)
                Affiliated::Port(_) => {
                    let msg = ipc::proto::AsyncEventMsg::from(ev);
                    for c in self.events.values_mut() {
                        c.push(msg);
                    }
                    continue;
                }
            };
            let Some(owner) = owner else {
                continue;
            };
            let msg = ipc::proto::AsyncEventMsg::from(ev);
            self.events.entry(owner).or_default().push(msg);
        }
        n
    }

    /// One pass: doorbells, then completions. Returns the work done.
    pub fn turn(&mut self, rnic: &mut Rnic) -> usize {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        due.append(&mut self.again);
        self.take_near(rnic.last_now());
        for p in self.pages.values() {
            for w in 0..p.slots.words() {
                let mut bits = p.db.take(w);
                while bits != 0 {
                    let slot = (w * 64) as u32 + bits.trailing_zeros();
                    bits &= bits - 1;
                    // a bit of no ring of the client's: nothing to fetch
                    due.extend(p.slots.get(slot));
                }
            }
        }
        let mut work = 0;
        for &t in &due {
            let (n, more) = self.fetch(rnic, t);
            work += n;
            if more {
                self.again.push(t);
            }
        }
        self.due = due;
        work + self.complete(rnic) + self.async_events(rnic)
    }

    /// Takes the pages' "near" words: a client that posted on this CPU
    /// while the engine parked makes it count as sharing the CPU.
    fn take_near(&mut self, now: nic::Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut cpu = None;
        for p in self.pages.values() {
            let near = p.db.near();
            if near.load(Relaxed) == 0 {
                continue;
            }
            let v = near.swap(0, Relaxed);
            let here = *cpu.get_or_insert_with(nic::engine::current_cpu);
            if here.is_some_and(|c| v == c.saturating_add(1)) {
                self.near_until = Some(now + NEAR_WINDOW);
            }
        }
    }

    /// Whether the engine shares its CPU with a client now: a post on it
    /// while the engine parked, within [`NEAR_WINDOW`].
    pub fn shares_cpu(&self, now: nic::Instant) -> bool {
        self.near_until.is_some_and(|u| now < u)
    }

    /// Fetches from the ring `t` names: (work done, whether WQEs remain).
    fn fetch(&mut self, rnic: &mut Rnic, t: Target) -> (usize, bool) {
        use std::sync::atomic::Ordering::Acquire;
        match t {
            Target::Sq(qpn) | Target::Rq(qpn) => {
                let Some(&i) = self.qp_at.get(&qpn) else {
                    return (0, false);
                };
                let sq = matches!(t, Target::Sq(_));
                let n = if sq {
                    self.fetch_sq(rnic, i)
                } else {
                    self.fetch_rq(rnic, i)
                };
                let q = &self.qps[i];
                let more = !q.broken
                    && if sq {
                        q.sq.producer().load(Acquire) != q.sq_cons
                    } else {
                        q.rq.producer().load(Acquire) != q.rq_cons
                    };
                (n, more)
            }
            Target::Srq(srqn) => {
                let Some(&i) = self.srq_at.get(&srqn) else {
                    return (0, false);
                };
                let n = self.fetch_srq(rnic, i);
                let s = &self.srqs[i];
                (n, !s.broken && s.ring.producer().load(Acquire) != s.cons)
            }
        }
    }

    fn wild(&mut self, rnic: &mut Rnic, i: usize, cq: u32, opcode: WcOpcode) {
        let q = &mut self.qps[i];
        q.broken = true;
        let qpn = q.qpn;
        let _ = rnic.modify_qp(
            qpn,
            &QpAttr {
                state: Some(QpState::Err),
                ..Default::default()
            },
        );
        self.error_wc(cq, Wc::new(0, WcStatus::LocQpOpErr, opcode, qpn));
    }

    fn fetch_sq(&mut self, rnic: &mut Rnic, i: usize) -> usize {
        let q = &self.qps[i];
        if q.broken {
            return 0;
        }
        let prod = q.sq.producer().load(std::sync::atomic::Ordering::Acquire);
        let pending = prod.wrapping_sub(q.sq_cons);
        if pending == 0 {
            return 0;
        }
        if pending > q.sq.entries {
            let cq = q.send_cq;
            self.wild(rnic, i, cq, WcOpcode::Send);
            return 1;
        }
        let (qpn, cq, sq, ud, owner, pd) = (q.qpn, q.send_cq, q.sq, q.ud, q.owner, q.pd);
        let mut cons = q.sq_cons;
        let mut n = 0;
        while n < pending.min(BATCH) {
            let raw: WqeRaw = sq.read(cons);
            let decoded = ring::decode_send(&raw).and_then(|mut wr| {
                if ud {
                    // the handle must be this client's, on the QP's PD
                    // (IBA 10.2.1.1: an AH belongs to a PD)
                    let ah = self
                        .ahs
                        .get(&raw.ah)
                        .filter(|a| a.owner == owner && a.pd == pd)
                        .ok_or(ring::BadWqe::Ah)?;
                    wr.ud = Some(UdDest {
                        ah: ah.attr,
                        remote_qpn: raw.remote_qpn & 0x00ff_ffff,
                        remote_qkey: raw.remote_qkey,
                    });
                }
                Ok(wr)
            });
            match decoded {
                Ok(wr) => {
                    let (id, op) = (wr.wr_id, wr.op.wc_opcode());
                    match rnic.post_send(qpn, wr) {
                        Ok(()) => {}
                        // back-pressure: leave it in the ring for next turn
                        Err(VerbsError::QueueFull) => break,
                        Err(e) => self.error_wc(cq, Wc::new(id, status_of(&e), op, qpn)),
                    }
                }
                Err(bad) => {
                    self.error_wc(cq, Wc::new(raw.wr_id, bad.status(), WcOpcode::Send, qpn))
                }
            }
            cons = cons.wrapping_add(1);
            n += 1;
        }
        let q = &mut self.qps[i];
        q.sq_cons = cons;
        q.sq.consumer()
            .store(cons, std::sync::atomic::Ordering::Release);
        n as usize
    }

    fn fetch_rq(&mut self, rnic: &mut Rnic, i: usize) -> usize {
        let q = &self.qps[i];
        if q.broken {
            return 0;
        }
        let prod = q.rq.producer().load(std::sync::atomic::Ordering::Acquire);
        let pending = prod.wrapping_sub(q.rq_cons);
        if pending == 0 {
            return 0;
        }
        if pending > q.rq.entries {
            let cq = q.recv_cq;
            self.wild(rnic, i, cq, WcOpcode::Recv);
            return 1;
        }
        let (qpn, cq, rq) = (q.qpn, q.recv_cq, q.rq);
        let mut cons = q.rq_cons;
        let mut n = 0;
        while n < pending.min(BATCH) {
            let raw: WqeRaw = rq.read(cons);
            match ring::decode_recv(&raw) {
                Ok(wr) => match rnic.post_recv(qpn, wr) {
                    Ok(()) => {}
                    Err(VerbsError::QueueFull) => break,
                    Err(e) => {
                        self.error_wc(cq, Wc::new(raw.wr_id, status_of(&e), WcOpcode::Recv, qpn))
                    }
                },
                Err(bad) => {
                    self.error_wc(cq, Wc::new(raw.wr_id, bad.status(), WcOpcode::Recv, qpn))
                }
            }
            cons = cons.wrapping_add(1);
            n += 1;
        }
        let q = &mut self.qps[i];
        q.rq_cons = cons;
        q.rq.consumer()
            .store(cons, std::sync::atomic::Ordering::Release);
        n as usize
    }

    fn fetch_srq(&mut self, rnic: &mut Rnic, i: usize) -> usize {
        let s = &self.srqs[i];
        if s.broken {
            return 0;
        }
        let prod = s.ring.producer().load(std::sync::atomic::Ordering::Acquire);
        let pending = prod.wrapping_sub(s.cons);
        if pending == 0 {
            return 0;
        }
        let srqn = s.srqn;
        // refused WQEs complete on the receive CQ of a QP using the SRQ
        // (there is none of its own); with no such QP they are counted
        let err_cq = self
            .qps
            .iter()
            .find(|q| q.srq == Some(srqn))
            .map(|q| (q.recv_cq, q.qpn));
        if pending > s.ring.entries {
            self.srqs[i].broken = true;
            self.refused += 1;
            if let Some((cq, qpn)) = err_cq {
                self.error_wc(cq, Wc::new(0, WcStatus::LocQpOpErr, WcOpcode::Recv, qpn));
            }
            return 1;
        }
        let (ring_, mut cons) = (s.ring, s.cons);
        let mut n = 0;
        while n < pending.min(BATCH) {
            let raw: WqeRaw = ring_.read(cons);
            let status = match ring::decode_recv(&raw) {
                Ok(wr) => match rnic.post_srq_recv(srqn, wr) {
                    Ok(()) => None,
                    Err(VerbsError::QueueFull) => break,
                    Err(e) => Some(status_of(&e)),
                },
                Err(bad) => Some(bad.status()),
            };
            if let Some(st) = status {
                match err_cq {
                    Some((cq, qpn)) => {
                        self.error_wc(cq, Wc::new(raw.wr_id, st, WcOpcode::Recv, qpn))
                    }
                    None => self.refused += 1,
                }
            }
            cons = cons.wrapping_add(1);
            n += 1;
        }
        let s = &mut self.srqs[i];
        s.cons = cons;
        s.ring
            .consumer()
            .store(cons, std::sync::atomic::Ordering::Release);
        n as usize
    }

    /// Writes the device's completions into the CQ rings, then fires the
    /// events they call for in the order the completions came: on a
    /// completion channel shared by several CQs the events follow the
    /// completions, as on a NIC whose event queue takes them in order (a
    /// SEND's ACK before the peer's answer that came right after it).
    pub fn complete(&mut self, rnic: &mut Rnic) -> usize {
        let mut work = 0;
        self.backlog = false;
        self.fire.clear();
        // the CQs with something to write: O(active CQs), not O(all)
        self.visit.clear();
        rnic.take_ready_cqs(&mut self.visit);
        self.visit.append(&mut self.carry);
        self.visit.sort_unstable();
        self.visit.dedup();
        for cqn in &self.visit {
            let Some(c) = self.cqs.get_mut(cqn) else {
                continue;
            };
            let cons = c.ring.consumer().load(std::sync::atomic::Ordering::Acquire);
            let used = c.prod.wrapping_sub(cons);
            // a wild consumer index (used > entries): treat the ring as full
            let mut room = c.ring.entries.saturating_sub(used);
            let start = c.prod;
            // the daemon's own completions were made when their WQEs were
            // fetched, before the device's
            let oldest = if c.pending.is_empty() {
                rnic.cq_oldest(*cqn).unwrap_or(u64::MAX)
            } else {
                0
            };
            // does a completion written now satisfy a solicited-only request?
            let mut solicited = false;
            while room > 0 {
                let Some(wc) = c.pending.pop_front() else {
                    break;
                };
                solicited |= wc.solicited || wc.status != WcStatus::Success;
                c.ring.write::<CqeRaw>(c.prod, &ring::encode_cqe(&wc));
                c.prod = c.prod.wrapping_add(1);
                room -= 1;
            }
            if room > 0 {
                self.wcs.clear();
                let _ = rnic.poll_cq(*cqn, room as usize, &mut self.wcs);
                for wc in &self.wcs {
                    solicited |= wc.solicited || wc.status != WcStatus::Success;
                    c.ring.write::<CqeRaw>(c.prod, &ring::encode_cqe(wc));
                    c.prod = c.prod.wrapping_add(1);
                }
                room -= self.wcs.len() as u32;
            }
            if room == 0 && (!c.pending.is_empty() || rnic.cq_len(*cqn) > 0) {
                self.backlog = true;
                self.carry.push(*cqn);
            }
            if c.prod != start {
                c.ring
                    .producer()
                    .store(c.prod, std::sync::atomic::Ordering::Release);
                work += c.prod.wrapping_sub(start) as usize;
                if c.notify.is_some() {
                    self.fire.push((oldest, *cqn, solicited));
                }
            }
        }
        self.fire.sort_unstable();
        for &(_, cqn, solicited) in &self.fire {
            let Some(c) = self.cqs.get(&cqn) else {
                continue;
            };
            if let Some(fd) = &c.notify {
                if notify(&c.ring, fd, solicited, self.events_fired) {
                    self.events_fired = self.events_fired.wrapping_add(1);
                }
            }
        }
        work
    }
}

#[cfg(test)]
mod tests;
