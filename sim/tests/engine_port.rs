//! Port state and the unaffiliated port events (IBTA 11.6.3.2 "Port
//! Active" / "Port Error"; rdma-core IBV_EVENT_PORT_ACTIVE = 9,
//! IBV_EVENT_PORT_ERR = 10): the engine reads the port's link state at most
//! every `LINK_POLL` of its clock and raises one event per change.
//!
//! The engine's clock is real time, so these tests count the engine's
//! reads of the link (through a port that counts them) instead of timing
//! them: a state that stays the same over several reads raises nothing,
//! and a change raises its event at the next read. The threaded engine
//! polls by itself; the inline one is turned by the test. The
//! once-per-change rule itself is checked without any clock in
//! `scenarios_events.rs`.

mod enginecommon;

use enginecommon::{wait_for, wait_until, STUCK};
use nic::device::{PortState, Rnic};
use nic::engine::{Device, Engine, EngineConfig};
use nic::io::mem::pair;
use nic::io::Port;
use nic::transport::RnicConfig;
use nic::verbs::{Affiliated, AsyncEvent};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wire::{EthernetAddress, Gid};

fn macs() -> [EthernetAddress; 2] {
    [
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    ]
}

fn rnic() -> Rnic {
    let gid = Gid::from_ipv4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    Rnic::new(RnicConfig::new(macs()[0], gid))
}

/// A port that counts how often its link state is read.
struct LinkReads<P: Port> {
    inner: P,
    reads: Arc<AtomicU64>,
}

impl<P: Port> LinkReads<P> {
    fn new(inner: P) -> (LinkReads<P>, Arc<AtomicU64>) {
        let reads = Arc::new(AtomicU64::new(0));
        let p = LinkReads {
            inner,
            reads: reads.clone(),
        };
        (p, reads)
    }
}

impl<P: Port> Port for LinkReads<P> {
    fn link_up(&self) -> Option<bool> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.link_up()
    }
    nic::forward_port!(field inner: recv, send, tx_room, train_bytes, mac, mtu, link_speed_bps, counters, wait, wait_or_ring, attach_bell, pending, rx_backlog, loop_back);
}

fn event(dev: &Device) -> Option<AsyncEvent> {
    dev.call(|r| r.poll_async_event()).unwrap()
}

/// Turns (an inline engine) until an event comes.
fn next_event(dev: &Device, what: &str) -> AsyncEvent {
    wait_for(STUCK, what, || {
        dev.turn();
        event(dev).ok_or_else(|| "no event".to_string())
    })
}

/// Turns (an inline engine) until it has read the link `n` more times;
/// returns the events raised meanwhile.
fn events_over_reads(dev: &Device, reads: &AtomicU64, n: u64) -> Vec<AsyncEvent> {
    let until = reads.load(Ordering::SeqCst) + n;
    let mut seen = Vec::new();
    wait_until(STUCK, &format!("{n} reads of the link"), || {
        dev.turn();
        seen.extend(event(dev));
        reads.load(Ordering::SeqCst) >= until
    });
    seen.extend(event(dev));
    seen
}

#[test]
fn link_down_then_up_raises_port_err_then_port_active_once_each() {
    let (a, _b) = pair(macs(), 64);
    let link = a.link();
    let (a, reads) = LinkReads::new(a);
    let engine = Engine::start_inline(rnic(), Box::new(a), EngineConfig::default());
    let dev = engine.device();
    let p = dev.query_port().unwrap();
    assert_eq!(p.state, PortState::Active, "{p:?}");
    assert_eq!(p.state.ibv(), 4);
    // the in-memory wire: 9000-byte MTU (IB 4096), 100 Gb/s
    assert_eq!((p.active_mtu, p.max_mtu), (4096, 4096), "{p:?}");
    assert_eq!(p.link_speed_bps, 100_000_000_000);
    // nothing while the link stays up
    assert_eq!(events_over_reads(&dev, &reads, 3), vec![]);

    link.set_up(false);
    let e = next_event(&dev, "PORT_ERR");
    assert_eq!(e, AsyncEvent::PortErr(1));
    assert_eq!(e.ibv_event_type(), 10);
    assert_eq!(e.affiliated(), Affiliated::Port(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Down);
    assert_eq!(dev.query_port().unwrap().state.ibv(), 1);
    // no repeat while it stays down
    assert_eq!(
        events_over_reads(&dev, &reads, 3),
        vec![],
        "PORT_ERR repeated"
    );

    link.set_up(true);
    let e = next_event(&dev, "PORT_ACTIVE");
    assert_eq!(e, AsyncEvent::PortActive(1));
    assert_eq!(e.ibv_event_type(), 9);
    assert_eq!(e.affiliated(), Affiliated::Port(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Active);
    assert_eq!(
        events_over_reads(&dev, &reads, 3),
        vec![],
        "PORT_ACTIVE repeated"
    );
    engine.stop();
}

/// A threaded engine polls the link by itself, also while idle and parked;
/// a port that starts down is DOWN without an event.
#[test]
fn a_threaded_engine_sees_the_link_change_and_a_port_starts_down_quietly() {
    let (a, _b) = pair(macs(), 64);
    let link = a.link();
    link.set_up(false);
    let (a, reads) = LinkReads::new(a);
    let engine = Engine::start(rnic(), Box::new(a), EngineConfig::default());
    let dev = engine.device();
    assert_eq!(dev.query_port().unwrap().state, PortState::Down);
    // the engine reads the (down) link three more times by itself; a call
    // runs at the start of a turn, before the turn's link read, so the
    // turns of those reads are over when `event` is answered
    let until = reads.load(Ordering::SeqCst) + 3;
    wait_until(STUCK, "3 reads of the link", || {
        reads.load(Ordering::SeqCst) >= until
    });
    assert_eq!(event(&dev), None, "an event for the state at start");

    // the first event after the link comes up is PORT_ACTIVE
    link.set_up(true);
    let e = wait_for(STUCK, "PORT_ACTIVE", || {
        event(&dev).ok_or_else(|| "no event".to_string())
    });
    assert_eq!(e, AsyncEvent::PortActive(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Active);
    engine.stop();
}
