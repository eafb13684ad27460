//! Port state and the unaffiliated port events through the daemon
//! (`ibv_query_port`; IBTA 11.6.3.2 "Port Active" / "Port Error", rdma-core
//! IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR): rnicd on the in-memory wire,
//! whose cable SIGUSR1 pulls and SIGUSR2 plugs back; every connected client
//! of either device hears each change once.

mod common;

use common::{tempdir, wait_for, Daemon, T};
use softrnic::proto::AsyncEventMsg;
use softrnic::{Context, PORT_ACTIVE, PORT_DOWN};
use std::time::Duration;

fn signal(d: &Daemon, sig: libc::c_int) {
    // SAFETY: a signal to the daemon process this test started.
    let r = unsafe { libc::kill(d.child.id() as i32, sig) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
}

/// Waits until `ctx`'s port shows `state`.
fn wait_state(ctx: &Context, state: u32) {
    wait_for(T, &format!("port state {state}"), || {
        let p = ctx.query_port(1).expect("query_port(1)");
        if p.state == state {
            Ok(())
        } else {
            Err(format!("state {}", p.state))
        }
    });
}

#[test]
fn every_client_hears_port_err_and_port_active_once_and_query_port_answers() {
    let dir = tempdir("port-events");
    let d = Daemon::start(None, &["--mem-pair", "--name", "p"], &dir);
    let clients = [
        Context::open(d.sock("p0")).expect("p0"),
        Context::open(d.sock("p0")).expect("p0 again"),
        Context::open(d.sock("p1")).expect("p1"),
    ];
    let p = clients[0].query_port(1).unwrap();
    assert_eq!(p.state, PORT_ACTIVE, "{p:?}");
    assert_eq!((p.active_mtu, p.max_mtu), (4096, 4096), "{p:?}");
    assert_eq!(p.link_speed_bps, 100_000_000_000, "{p:?}");
    for bad in [0u8, 2, 255] {
        let e = clients[0]
            .query_port(bad)
            .expect_err("a port other than 1 is refused");
        assert!(e.to_string().contains(&format!("no port {bad}")), "{e}");
    }
    // one client listens on its event descriptor before the change
    assert!(clients[1].async_event_fd().unwrap() >= 0);
    for c in &clients {
        assert_eq!(c.get_async_event(Duration::ZERO).unwrap(), None);
    }

    signal(&d, libc::SIGUSR1);
    for (i, c) in clients.iter().enumerate() {
        let e = c.get_async_event(T).unwrap();
        assert_eq!(e, Some(AsyncEventMsg::PortErr { port: 1 }), "client {i}");
        assert_eq!(e.unwrap().ibv_event_type(), Some(10));
    }
    wait_state(&clients[0], PORT_DOWN);
    wait_state(&clients[2], PORT_DOWN);
    // no repeat while the link stays down: the daemon reads the link every
    // 100 ms, and nothing it does says when it has, so this is a window of
    // several reads; a repeat after it would still come before the
    // PORT_ACTIVE the next step expects first
    for (i, c) in clients.iter().enumerate() {
        let e = c.get_async_event(Duration::from_millis(350)).unwrap();
        assert_eq!(e, None, "client {i}: a repeated event");
    }

    signal(&d, libc::SIGUSR2);
    for (i, c) in clients.iter().enumerate() {
        let e = c.get_async_event(T).unwrap();
        assert_eq!(e, Some(AsyncEventMsg::PortActive { port: 1 }), "client {i}");
        assert_eq!(e.unwrap().ibv_event_type(), Some(9));
    }
    wait_state(&clients[1], PORT_ACTIVE);
    // the same window for PORT_ACTIVE, then a change whose event must be
    // the next one each client gets
    for (i, c) in clients.iter().enumerate() {
        let e = c.get_async_event(Duration::from_millis(350)).unwrap();
        assert_eq!(e, None, "client {i}: a repeated event");
    }
    signal(&d, libc::SIGUSR1);
    for (i, c) in clients.iter().enumerate() {
        let e = c.get_async_event(T).unwrap();
        assert_eq!(e, Some(AsyncEventMsg::PortErr { port: 1 }), "client {i}");
    }
}
