//! An in-memory pair of ports: what one sends the other receives, through
//! a bounded lock-free queue of pre-allocated buffers. A frame is copied
//! once: the sender copies it into a free buffer of the lane and queues
//! that; the receiver puts the queued buffer into its batch whole and
//! frees the one it replaced. Free buffers are reused last-freed first,
//! so the buffers in use stay few and in cache however deep the lane is.
//! (Handing the sender's slot over instead of copying it costs more than
//! the copy: the engine then builds frames, ICRC and all, in buffers last
//! read by the other engine's core.) Wrap a port in
//! [`super::impair::Impaired`] to drop, reorder, duplicate, corrupt or
//! CE-mark what it sends.

use super::{new_slot, Bell, FrameBatch, Port, PortBase, PortCounters, RxBacklog, RxClasses, Slot};
use crossbeam::queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use wire::EthernetAddress;

/// A queued frame's class for the backlog accounting: bit 15 set when it
/// was counted, bit 12 when VLAN-tagged, bits 8..11 the PCP, 0..6 the DSCP.
type Tag = u16;
const COUNTED: Tag = 1 << 15;
const TAGGED: Tag = 1 << 12;

/// Bytes queued on a lane, by class (PFC generation reads them).
struct Backlog {
    /// Set by the first `rx_backlog` call: frames queued from then on are
    /// classified and counted (a port whose device does not generate PFC
    /// pays nothing).
    on: AtomicBool,
    frames: AtomicU64,
    bytes: AtomicU64,
    pcp: [AtomicU64; 8],
    dscp: [AtomicU64; 64],
}

impl Backlog {
    fn new() -> Backlog {
        Backlog {
            on: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            pcp: std::array::from_fn(|_| AtomicU64::new(0)),
            dscp: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn tag(&self, frame: &[u8]) -> Tag {
        if !self.on.load(Ordering::Relaxed) {
            return 0;
        }
        let (pcp, dscp) = RxClasses::classify(frame);
        COUNTED | pcp.map_or(0, |p| TAGGED | ((p as Tag & 7) << 8)) | (dscp as Tag & 63)
    }

    /// Adds (`add`) or removes a frame of `len` bytes, if it was counted.
    fn account(&self, tag: Tag, len: u16, add: bool) {
        if tag & COUNTED == 0 {
            return;
        }
        let op = |a: &AtomicU64, v: u64| {
            if add {
                a.fetch_add(v, Ordering::Relaxed);
            } else {
                a.fetch_sub(v, Ordering::Relaxed);
            }
        };
        let len = len as u64;
        op(&self.frames, 1);
        op(&self.bytes, len);
        if tag & TAGGED != 0 {
            op(&self.pcp[((tag >> 8) & 7) as usize], len);
        }
        op(&self.dscp[(tag & 63) as usize], len);
    }

    fn snapshot(&self) -> RxBacklog {
        self.on.store(true, Ordering::Relaxed);
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RxBacklog {
            frames: ld(&self.frames),
            bytes: ld(&self.bytes),
            classes: Some(RxClasses {
                pcp: std::array::from_fn(|i| ld(&self.pcp[i])),
                dscp: std::array::from_fn(|i| ld(&self.dscp[i])),
            }),
        }
    }
}

/// One direction of the wire.
struct Lane {
    full: ArrayQueue<(Slot, u16, Tag)>,
    /// A stack: taken and given back a batch at a time.
    free: Mutex<Vec<Slot>>,
    /// Whom to wake when a frame arrives: the receiving engine's thread,
    /// or its bell once it parks on one.
    waiter: Mutex<Option<Waiter>>,
    dropped: AtomicU64,
    backlog: Backlog,
}

impl Lane {
    fn new(depth: usize) -> Lane {
        Lane {
            full: ArrayQueue::new(depth),
            free: Mutex::new((0..depth).map(|_| new_slot()).collect()),
            waiter: Mutex::new(None),
            dropped: AtomicU64::new(0),
            backlog: Backlog::new(),
        }
    }

    /// The free buffers (a poisoned lock still holds them).
    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `frame` in the free buffer `b`; `Err(b)` if the queue is full.
    fn put(&self, frame: &[u8], mut b: Slot) -> Result<(), Slot> {
        let (len, tag) = (frame.len() as u16, self.backlog.tag(frame));
        b[..frame.len()].copy_from_slice(frame);
        // counted before it can be popped, so the sum never goes below zero
        self.backlog.account(tag, len, true);
        if let Err((b, _, _)) = self.full.push((b, len, tag)) {
            // cannot happen while the lane's buffers are `depth` in all
            // (its full queue, as deep, has room for each); undone anyway
            self.backlog.account(tag, len, false);
            return Err(b);
        }
        Ok(())
    }

    fn wake(&self) {
        if let Ok(w) = self.waiter.lock() {
            match w.as_ref() {
                Some(Waiter::Thread(t)) => t.unpark(),
                Some(Waiter::Bell(b)) => b.ring_if_parked(),
                None => {}
            }
        }
    }
}

enum Waiter {
    Thread(Thread),
    Bell(Arc<Bell>),
}

/// The cable of an in-memory wire: tests pull it and plug it back
/// ([`MemPort::link`]). Both ends see the same state. Only the link
/// state the ports report changes: frames still flow (a real NIC's RC QP
/// would retry and fail by its retry count; the test decides what to drop).
#[derive(Clone, Debug)]
pub struct MemLink(Arc<AtomicBool>);

impl MemLink {
    pub fn set_up(&self, up: bool) {
        self.0.store(up, Ordering::Release);
    }

    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The bytes of one flow's frames the in-memory wire takes in a row
/// ([`Port::train_bytes`]).
pub const MEM_QUANTUM: usize = 64 * 1024;

/// One end of an in-memory wire.
pub struct MemPort {
    tx: Arc<Lane>,
    rx: Arc<Lane>,
    /// Free buffers between the lane's free stack and a batch.
    spare: Vec<Slot>,
    link: MemLink,
    base: PortBase,
}

/// Two ports joined back to back; `depth` frames may be in flight each way.
pub fn pair(macs: [EthernetAddress; 2], depth: usize) -> (MemPort, MemPort) {
    let ab = Arc::new(Lane::new(depth));
    let ba = Arc::new(Lane::new(depth));
    let link = MemLink(Arc::new(AtomicBool::new(true)));
    let mk = |tx: &Arc<Lane>, rx: &Arc<Lane>, mac| MemPort {
        tx: tx.clone(),
        rx: rx.clone(),
        spare: Vec::with_capacity(depth),
        link: link.clone(),
        base: PortBase::wire(mac),
    };
    (mk(&ab, &ba, macs[0]), mk(&ba, &ab, macs[1]))
}

impl MemPort {
    pub fn set_mtu(&mut self, mtu: usize) {
        self.base.mtu = mtu;
    }

    /// The wire's cable, shared by both ends: take it before the port goes
    /// to an engine to set the link down and up later.
    pub fn link(&self) -> MemLink {
        self.link.clone()
    }

    /// The speed the port reports (default 100 Gb/s): the device's DCQCN
    /// line rate and PFC quantum length follow it.
    pub fn set_link_speed(&mut self, bps: u64) {
        self.base.speed = bps;
    }
}

impl Port for MemPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        if let Ok(mut w) = self.rx.waiter.lock() {
            if w.is_none() {
                *w = Some(Waiter::Thread(std::thread::current()));
            }
        }
        let mut n = 0;
        while !batch.is_full() {
            let Some((buf, len, tag)) = self.rx.full.pop() else {
                break;
            };
            self.rx.backlog.account(tag, len, false);
            // the batch is not full, and a queued frame fits a slot
            let freed = batch.push_slot(buf, len as usize).unwrap_or_else(|b| b);
            self.spare.push(freed);
            self.base.counters.received(len as usize);
            n += 1;
        }
        if !self.spare.is_empty() {
            self.rx.free().append(&mut self.spare);
        }
        n
    }

    /// The buffers free toward the peer: the wire is lossless, as an
    /// InfiniBand link whose sender spends the receiver's credits (IBA
    /// vol. 1 §7.9, link-level flow control): a frame waits in its send queue
    /// until the peer's engine has taken the ones before it.
    /// (A lane's buffers are `depth` in all, so its full queue, as deep,
    /// always has room for every free one.)
    fn tx_room(&mut self, want: usize) -> usize {
        want.min(self.tx.free().len())
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        {
            let mut free = self.tx.free();
            let take = batch.len().min(free.len());
            let from = free.len() - take;
            self.spare.extend(free.drain(from..));
        }
        // a prefix of the batch (see `Port::send`): as many frames as there
        // were free buffers, unless the queue refuses one
        let mut sent = 0;
        while let Some(b) = self.spare.pop() {
            if let Err(b) = self.tx.put(batch.get(sent), b) {
                self.spare.push(b);
                break;
            }
            self.base.counters.sent(batch.get(sent).len());
            sent += 1;
        }
        if !self.spare.is_empty() {
            self.tx.free().append(&mut self.spare);
        }
        let dropped = batch.len() - sent;
        self.tx.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        self.base.counters.tx_dropped += dropped as u64;
        if sent > 0 {
            self.tx.wake();
        }
        sent
    }

    crate::forward_port!(field base: mac, mtu, link_speed_bps);

    /// The port's counters; `rx_dropped`: the frames the sender could not
    /// queue towards it.
    fn counters(&self) -> PortCounters {
        self.base
            .counters_with_drops(self.rx.dropped.load(Ordering::Relaxed), 0)
    }

    /// The frames queued towards this port, by PCP and DSCP. Counting
    /// starts with the first call: frames queued before it are not in it.
    fn rx_backlog(&self) -> Option<RxBacklog> {
        Some(self.rx.backlog.snapshot())
    }

    fn link_up(&self) -> Option<bool> {
        Some(self.link.is_up())
    }

    /// A QP's turn sends up to 64 KiB: its requester state and send buffer
    /// here, its responder state and target memory at the other end, stay
    /// in the caches for those frames (64 clients × 16 QPs through one
    /// rnicd: about 1.4× the bytes per CPU cycle, BENCHMARKS.md).
    fn train_bytes(&self) -> usize {
        MEM_QUANTUM
    }

    /// The sender rings the attached bell.
    fn wait_unheld(&mut self) -> Option<super::Unheld> {
        Some(super::Unheld::Bell)
    }

    /// A frame put on the wire towards us rings the engine's bell.
    fn attach_bell(&mut self, bell: &Arc<Bell>) {
        if let Ok(mut w) = self.rx.waiter.lock() {
            *w = Some(Waiter::Bell(bell.clone()));
        }
    }

    /// Frames queued towards us. The sender pushes a frame, then reads the
    /// bell's "parked" flag (`Lane::wake`); the engine raises that flag,
    /// then asks this: with both sides' fences, one sees the other, so a
    /// frame queued just before the park is received, not slept on.
    fn pending(&self) -> bool {
        !self.rx.full.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::impair::{Impaired, Impairments, RandomImpairments};

    #[test]
    fn frames_cross_and_impairments_apply() {
        let (mut a, mut b) = pair(
            [
                EthernetAddress([2, 0, 0, 0, 0, 1]),
                EthernetAddress([2, 0, 0, 0, 0, 2]),
            ],
            64,
        );
        let mut tx = FrameBatch::new(8);
        for i in 0..8u8 {
            tx.push(&[i; 60]);
        }
        assert_eq!(a.send(&tx), 8);
        let mut rx = FrameBatch::new(16);
        assert_eq!(b.recv(&mut rx), 8);
        assert_eq!(rx.get(3), &[3u8; 60][..]);
        let mut a = Impaired::new(
            a,
            Box::new(RandomImpairments::new(
                Impairments {
                    loss: 1.0,
                    ..Default::default()
                },
                1,
            )),
        );
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

    #[test]
    fn slots_change_hands_without_loss_or_mixing() {
        // more frames than the lane has buffers, in rounds: every frame
        // arrives as sent, and the lane's buffers are all free again after
        // each round (none kept by a batch, none lost)
        let (mut a, mut b) = pair([EthernetAddress::default(); 2], 8);
        let (mut tx, mut rx) = (FrameBatch::new(8), FrameBatch::new(8));
        for round in 0..5u8 {
            tx.clear();
            for i in 0..8u8 {
                tx.push(&[round * 8 + i; 72][..60 + i as usize]);
            }
            assert_eq!(a.tx_room(64), 8, "round {round}: all buffers free");
            assert_eq!(a.send(&tx), 8);
            assert_eq!(a.tx_room(64), 0);
            rx.clear();
            assert_eq!(b.recv(&mut rx), 8);
            for i in 0..8u8 {
                assert_eq!(rx.get(i as usize), &[round * 8 + i; 72][..60 + i as usize]);
            }
        }
        assert_eq!(a.tx_room(64), 8);
        assert_eq!(a.counters().tx_dropped, 0);
    }
}
