//! Port state and the unaffiliated port events (IBTA 11.6.3.2 "Port
//! Active" / "Port Error"; rdma-core IBV_EVENT_PORT_ACTIVE = 9,
//! IBV_EVENT_PORT_ERR = 10): the engine reads the port's link state at most
//! every `LINK_POLL` of its clock and raises one event per change.
//!
//! The engine's clock is real time, so these tests turn (or let the thread
//! turn) until the event shows, bounded by a deadline: they check the
//! polling (the threaded one sleeps while the engine thread polls). The
//! once-per-change rule itself is checked without any clock in
//! `scenarios_events.rs`.

use nic::engine::{Device, Engine, EngineConfig, LINK_POLL};
use nic::io::mem::pair;
use nic::transport::{Affiliated, AsyncEvent, PortState, Rnic, RnicConfig};
use std::time::{Duration, Instant};
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

fn event(dev: &Device) -> Option<AsyncEvent> {
    dev.call(|r| r.poll_async_event()).unwrap()
}

/// Turns (an inline engine) until an event comes, for at most `limit`.
fn next_event(dev: &Device, limit: Duration) -> Option<AsyncEvent> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        dev.turn();
        if let Some(e) = event(dev) {
            return Some(e);
        }
        std::thread::yield_now();
    }
    None
}

#[test]
fn link_down_then_up_raises_port_err_then_port_active_once_each() {
    let (a, _b) = pair(macs(), 64);
    let link = a.link();
    let engine = Engine::start_inline(rnic(), Box::new(a), EngineConfig::default());
    let dev = engine.device();
    let p = dev.query_port().unwrap();
    assert_eq!(p.state, PortState::Active, "{p:?}");
    assert_eq!(p.state.ibv(), 4);
    // the in-memory wire: 9000-byte MTU (IB 4096), 100 Gb/s
    assert_eq!((p.active_mtu, p.max_mtu), (4096, 4096), "{p:?}");
    assert_eq!(p.link_speed_bps, 100_000_000_000);
    // nothing while the link stays up
    assert_eq!(next_event(&dev, LINK_POLL * 3), None);

    link.set_up(false);
    let e = next_event(&dev, Duration::from_secs(10)).expect("no PORT_ERR within 10 s");
    assert_eq!(e, AsyncEvent::PortErr(1));
    assert_eq!(e.ibv_event_type(), 10);
    assert_eq!(e.affiliated(), Affiliated::Port(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Down);
    assert_eq!(dev.query_port().unwrap().state.ibv(), 1);
    // no repeat while it stays down (several polls pass)
    assert_eq!(next_event(&dev, LINK_POLL * 3), None, "PORT_ERR repeated");

    link.set_up(true);
    let e = next_event(&dev, Duration::from_secs(10)).expect("no PORT_ACTIVE within 10 s");
    assert_eq!(e, AsyncEvent::PortActive(1));
    assert_eq!(e.ibv_event_type(), 9);
    assert_eq!(e.affiliated(), Affiliated::Port(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Active);
    assert_eq!(
        next_event(&dev, LINK_POLL * 3),
        None,
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
    let engine = Engine::start(rnic(), Box::new(a), EngineConfig::default());
    let dev = engine.device();
    assert_eq!(dev.query_port().unwrap().state, PortState::Down);
    std::thread::sleep(LINK_POLL * 3);
    assert_eq!(event(&dev), None, "an event for the state at start");

    link.set_up(true);
    let t0 = Instant::now();
    let e = loop {
        if let Some(e) = event(&dev) {
            break e;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no PORT_ACTIVE within 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(e, AsyncEvent::PortActive(1));
    assert_eq!(dev.query_port().unwrap().state, PortState::Active);
    engine.stop();
}
