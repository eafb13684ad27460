//! The library's logic on the in-process connection manager of `fake`:
//! channels, IDs, events and their acknowledgement, synchronous IDs,
//! listeners on every device, and the errors of what is not supported;
//! the QPs the IDs drive (`qp.rs`) and devices that go away
//! (`removal.rs`).

use crate::abi::*;
use crate::channel::*;
use crate::conn::*;
use crate::deliver::*;
use crate::fake::{ev, Fake};
use crate::id;
use crate::state::Lib;
use libc::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod qp;
mod removal;

const STUCK: Duration = Duration::from_secs(60);

fn setup() -> (
    Arc<Lib>,
    Arc<Mutex<crate::fake::State>>,
    *mut rdma_event_channel,
) {
    setup_on(&[("t0", "192.0.2.1"), ("t1", "192.0.2.2")])
}

/// A library on the fake CM with devices `devs` (name, address), the
/// fake's state and an event channel.
fn setup_on(
    devs: &[(&str, &str)],
) -> (
    Arc<Lib>,
    Arc<Mutex<crate::fake::State>>,
    *mut rdma_event_channel,
) {
    let fake = Fake::new(devs);
    let st = fake.st.clone();
    let verbs = crate::fake::FakeVerbs {
        devs: fake.devs.clone(),
        ..Default::default()
    };
    let lib = Lib::new(Box::new(fake), Box::new(verbs));
    let chan = ChanPriv::create(lib.clone()).unwrap() as *mut rdma_event_channel;
    (lib, st, chan)
}

fn log(st: &Mutex<crate::fake::State>) -> Vec<String> {
    st.lock().unwrap().log.clone()
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn sa(s: &str) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid union value.
    let mut u: rdma_sockaddr = unsafe { std::mem::zeroed() };
    crate::sockaddr::write(&mut u, s.parse().unwrap());
    // SAFETY: the storage view of the union just written.
    unsafe { u.storage }
}

fn addr(s: &mut libc::sockaddr_storage) -> *mut libc::sockaddr {
    s as *mut _ as *mut libc::sockaddr
}

fn readable(chan: *mut rdma_event_channel) -> bool {
    // SAFETY: our channel.
    let fd = unsafe { (*chan).fd };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd that outlives the call.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

unsafe fn next(chan: *mut rdma_event_channel) -> *mut rdma_cm_event {
    let mut e = null_mut();
    // SAFETY: our channel and out-pointer.
    let r = unsafe { scm_rdma_get_cm_event(chan, &mut e) };
    assert_eq!(r, 0, "errno {}", errno());
    e
}

unsafe fn new_id(chan: *mut rdma_event_channel, ctx: usize) -> *mut rdma_cm_id {
    let mut id = null_mut();
    // SAFETY: our channel and out-pointer.
    let r = unsafe { id::scm_rdma_create_id(chan, &mut id, ctx as *mut c_void, RDMA_PS_TCP) };
    assert_eq!(r, 0);
    id
}

/// A synchronous RC ID (no channel of the caller's).
unsafe fn sync_id(lib: &Arc<Lib>) -> *mut rdma_cm_id {
    id::create(lib, null_mut(), null_mut(), RDMA_PS_TCP, IBV_QPT_RC).unwrap() as *mut rdma_cm_id
}

/// `rdma_resolve_addr` of `id` towards `dst`, which must succeed.
unsafe fn resolve(id: *mut rdma_cm_id, dst: &str) {
    let mut dst = sa(dst);
    // SAFETY: the caller's ID; the address lives across the call.
    let r = unsafe { scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000) };
    assert_eq!(r, 0, "errno {}", errno());
}

#[test]
fn the_channel_fd_is_readable_exactly_while_an_event_is_queued() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test, used as the C API documents.
    unsafe {
        let id = new_id(chan, 7);
        let mut src = sa("192.0.2.1:7000");
        assert_eq!(scm_rdma_bind_addr(id, addr(&mut src)), 0);
        assert_eq!(u16::from_be(scm_rdma_get_src_port(id)), 7000);
        assert!(!readable(chan));
        let fd = (*chan).fd;
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        let mut e = null_mut();
        assert_eq!(scm_rdma_get_cm_event(chan, &mut e), -1);
        assert_eq!(errno(), libc::EAGAIN);

        resolve(id, "192.0.2.2:7001");
        assert!(readable(chan));
        let e = next(chan);
        assert_eq!(((*e).event, (*e).status), (event::ADDR_RESOLVED, 0));
        assert_eq!((*e).id, id);
        assert_eq!((*id).context as usize, 7);
        assert_eq!((*id).port_num, 1);
        assert_eq!(u16::from_be(scm_rdma_get_dst_port(id)), 7001);
        assert_eq!(scm_rdma_ack_cm_event(e), 0);
        assert!(!readable(chan));
        assert_eq!(
            log(&st),
            [
                "t0 create_id 1",
                "t0 bind 1 192.0.2.1:7000",
                "t0 resolve_addr 1 192.0.2.2:7001"
            ]
        );
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
        scm_rdma_destroy_event_channel(chan);
    }
}

#[test]
fn an_unbound_id_resolves_from_the_device_that_is_not_the_destination() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        resolve(id, "192.0.2.2:7001");
        assert!(log(&st).contains(&"t0 resolve_addr 1 192.0.2.2:7001".to_string()));
        scm_rdma_ack_cm_event(next(chan));
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn destroy_id_waits_until_every_event_is_acknowledged() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test; the ID is destroyed by one thread
    // while this one holds its event, as a program may.
    unsafe {
        let id = new_id(chan, 0);
        let mut dst = sa("192.0.2.2:7001");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        let e = next(chan);
        let (tx, rx) = std::sync::mpsc::channel();
        let idu = id as usize;
        std::thread::spawn(move || {
            id::scm_rdma_destroy_id(idu as *mut rdma_cm_id);
            tx.send(()).unwrap();
        });
        testkit::wait_for(STUCK, "the daemon's ID destroyed", || {
            if log(&st).iter().any(|l| l.contains("destroy_id")) {
                Ok(())
            } else {
                Err("no destroy_id yet")
            }
        });
        assert!(
            rx.try_recv().is_err(),
            "destroy returned with an event outstanding"
        );
        scm_rdma_ack_cm_event(e);
        rx.recv_timeout(STUCK)
            .expect("destroy returns once acknowledged");
    }
}

#[test]
fn events_of_a_destroyed_id_are_not_reported() {
    let (_lib, _st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        let mut dst = sa("192.0.2.2:7001");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        assert!(readable(chan));
        id::scm_rdma_destroy_id(id);
        let fd = (*chan).fd;
        libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        let mut e = null_mut();
        assert_eq!(scm_rdma_get_cm_event(chan, &mut e), -1);
        assert_eq!(errno(), libc::EAGAIN);
    }
}

#[test]
fn a_wildcard_listener_hears_every_device_and_a_request_gets_a_new_id() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let l = new_id(chan, 42);
        let mut any = sa("0.0.0.0:0");
        assert_eq!(scm_rdma_bind_addr(l, addr(&mut any)), 0);
        assert_eq!(scm_rdma_listen(l, 8), 0);
        let lg = log(&st);
        assert_eq!(
            lg,
            [
                "t0 create_id 1",
                "t0 bind 1 0.0.0.0:0",
                "t0 listen 1 8",
                "t1 create_id 2",
                "t1 bind 2 0.0.0.0:40000",
                "t1 listen 2 8"
            ]
        );
        assert_eq!(u16::from_be(scm_rdma_get_src_port(l)), 40000);

        let mut req = ev(77, event::CONNECT_REQUEST);
        req.listen_id = Some(2);
        req.conn = Some(crate::backend::ConnEventParam {
            private_data: vec![1, 2, 3],
            initiator_depth: 4,
            responder_resources: 4,
            qp_num: 0x11,
            ..Default::default()
        });
        req.addrs = Some((
            "192.0.2.2:40000".parse().unwrap(),
            "192.0.2.1:5555".parse().unwrap(),
        ));
        Fake::send(&st, "t1", req);
        let e = next(chan);
        assert_eq!((*e).event, event::CONNECT_REQUEST);
        assert_eq!((*e).listen_id, l);
        let c = (*e).id;
        assert_ne!(c, l);
        assert_eq!((*c).context as usize, 42);
        let conn = (*e).param.conn;
        assert_eq!(conn.qp_num, 0x11);
        let pd = std::slice::from_raw_parts(conn.private_data as *const u8, 3);
        assert_eq!(pd, [1, 2, 3]);
        assert_eq!(u16::from_be(scm_rdma_get_dst_port(c)), 5555);

        let mut p: rdma_conn_param = std::mem::zeroed();
        p.qp_num = 0x22;
        p.responder_resources = RDMA_MAX_RESP_RES;
        p.initiator_depth = RDMA_MAX_INIT_DEPTH;
        assert_eq!(scm_rdma_accept(c, &mut p), 0);
        assert!(log(&st).contains(&"t1 accept 77 qpn 34".to_string()));
        let est = next(chan);
        assert_eq!(((*est).event, (*est).id), (event::ESTABLISHED, c));
        scm_rdma_ack_cm_event(est);
        scm_rdma_ack_cm_event(e);
        id::scm_rdma_destroy_id(c);
        id::scm_rdma_destroy_id(l);
        assert!(log(&st).ends_with(&[
            "t1 destroy_id 77".to_string(),
            "t0 destroy_id 1".to_string(),
            "t1 destroy_id 2".to_string()
        ]));
    }
}

/// The ID's source address (`rdma_get_local_addr`).
unsafe fn local(id: *mut rdma_cm_id) -> std::net::SocketAddr {
    // SAFETY: the caller's ID; its source is an address or zeroes.
    unsafe { crate::sockaddr::read(&(*id).route.addr.src.addr) }
        .unwrap()
        .unwrap()
}

/// `rdma_bind_addr(id, a)`, which must succeed.
unsafe fn bind_to(id: *mut rdma_cm_id, a: &str) {
    let mut a = sa(a);
    // SAFETY: the caller's ID; the address lives across the call.
    let r = unsafe { scm_rdma_bind_addr(id, addr(&mut a)) };
    assert_eq!(r, 0, "errno {}", errno());
}

#[test]
fn a_loopback_address_no_device_holds_binds_as_the_wildcard() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        // as the kernel's cma_any_addr: no device yet, the address kept
        let l = new_id(chan, 0);
        bind_to(l, "127.0.0.1:0");
        assert!((*l).verbs.is_null());
        assert!(log(&st).is_empty(), "{:?}", log(&st));
        // listening: every device, on the unspecified address
        assert_eq!(scm_rdma_listen(l, 4), 0);
        let want = ["create_id 1", "bind 1 0.0.0.0:0", "listen 1 4"].map(|w| format!("t0 {w}"));
        let want1 =
            ["create_id 2", "bind 2 0.0.0.0:40000", "listen 2 4"].map(|w| format!("t1 {w}"));
        assert_eq!(log(&st), [want, want1].concat());
        assert_eq!(local(l), "127.0.0.1:40000".parse().unwrap());
        id::scm_rdma_destroy_id(l);
        // resolving from ::1 picks the device towards the destination
        let c = new_id(chan, 0);
        bind_to(c, "[::1]:0");
        let (mut lo6, mut dst) = (sa("[::1]:0"), sa("192.0.2.2:7000"));
        let r = scm_rdma_resolve_addr(c, addr(&mut lo6), addr(&mut dst), 2000);
        assert_eq!(r, 0, "errno {}", errno());
        assert!(
            log(&st).contains(&"t0 create_id 3".to_string()),
            "{:?}",
            log(&st)
        );
        id::scm_rdma_destroy_id(c);
    }
}

#[test]
fn a_loopback_address_a_device_holds_binds_that_device() {
    let (_lib, st, chan) = setup_on(&[("t0", "127.0.0.1"), ("t1", "127.0.0.2")]);
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        bind_to(id, "127.0.0.2:0");
        assert_eq!(log(&st), ["t1 create_id 1", "t1 bind 1 127.0.0.2:0"]);
        assert!(!(*id).verbs.is_null());
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn a_synchronous_id_waits_for_the_event_of_each_call() {
    let (lib, st, _chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let id = sync_id(&lib);
        resolve(id, "192.0.2.2:7001");
        assert_eq!((*(*id).event).event, event::ADDR_RESOLVED);
        assert_eq!(scm_rdma_resolve_route(id, 2000), 0);
        assert_eq!((*(*id).event).event, event::ROUTE_RESOLVED);
        assert_eq!((*id).route.num_paths, 1);
        assert_eq!((*(*id).route.path_rec).mtu, 3);
        assert_eq!((*id).route.addr.ibaddr.dgid.raw, [2; 16]);
        let data = [9u8; 5];
        let mut p: rdma_conn_param = std::mem::zeroed();
        p.private_data = data.as_ptr() as *const c_void;
        p.private_data_len = 5;
        p.qp_num = 0x33;
        assert_eq!(scm_rdma_connect(id, &mut p), 0);
        // no QP of the library's: the owner moves its own, then
        // rdma_establish sends the RTU (as librdmacm)
        assert_eq!((*(*id).event).event, event::CONNECT_RESPONSE);
        assert!(log(&st).contains(&"t0 connect 1 qpn 51 pd [9, 9, 9, 9, 9]".to_string()));
        assert_eq!(scm_rdma_establish(id), 0);
        assert!(log(&st).contains(&"t0 establish 1".to_string()));
        assert_eq!(scm_rdma_disconnect(id), 0);
        assert_eq!((*(*id).event).event, event::DISCONNECTED);
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
    }
}

#[test]
fn migrate_id_moves_the_events_to_the_other_channel() {
    let (lib, _st, chan) = setup();
    let other = ChanPriv::create(lib).unwrap() as *mut rdma_event_channel;
    // SAFETY: the objects of this test.
    unsafe {
        let id = new_id(chan, 0);
        let mut src = sa("192.0.2.1:0");
        scm_rdma_bind_addr(id, addr(&mut src));
        assert_eq!(scm_rdma_migrate_id(id, other), 0);
        assert_eq!((*id).channel, other);
        let mut dst = sa("192.0.2.2:1");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 1);
        assert!(!readable(chan));
        assert!(readable(other));
        scm_rdma_ack_cm_event(next(other));
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn a_ud_ids_established_event_carries_the_peers_qp_qkey_and_a_usable_address() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let mut id = null_mut();
        assert_eq!(
            id::scm_rdma_create_id(chan, &mut id, null_mut(), RDMA_PS_UDP),
            0
        );
        assert_eq!((*id).qp_type, IBV_QPT_UD);
        let mut dst = sa("192.0.2.2:7174");
        scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 2000);
        scm_rdma_ack_cm_event(next(chan));
        let dgid = std::net::Ipv4Addr::new(192, 0, 2, 2)
            .to_ipv6_mapped()
            .octets();
        let mut private_data = b"welcome".to_vec();
        private_data.resize(136, 0);
        Fake::send(
            &st,
            "t0",
            crate::backend::CmEventMsg {
                ud: Some(crate::backend::UdEventParam {
                    private_data,
                    dgid,
                    dmac: [0; 6],
                    qp_num: 0x42,
                    qkey: RDMA_UDP_QKEY,
                }),
                ..ev(1, event::ESTABLISHED)
            },
        );
        let e = next(chan);
        assert_eq!((*e).event, event::ESTABLISHED);
        let ud = &(*e).param.ud;
        assert_eq!((ud.qp_num, ud.qkey), (0x42, RDMA_UDP_QKEY));
        assert_eq!(ud.private_data_len, 136);
        let pd = std::slice::from_raw_parts(ud.private_data as *const u8, 7);
        assert_eq!(pd, b"welcome");
        // what ibv_create_ah takes as it is: a global route from the ID's
        // own GID (libibverbs' index for it) on its port
        let ah = &ud.ah_attr;
        assert_eq!((ah.is_global, ah.port_num), (1, 1));
        assert_eq!(ah.grh.dgid.raw, dgid);
        assert_eq!(ah.grh.sgid_index, 3);
        scm_rdma_ack_cm_event(e);
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
    }
}

#[test]
fn what_is_not_supported_fails_with_a_clear_errno() {
    let (_lib, _st, chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let mut id = null_mut();
        assert_eq!(
            id::scm_rdma_create_id(chan, &mut id, null_mut(), RDMA_PS_IB),
            -1
        );
        assert_eq!(errno(), libc::EPROTONOSUPPORT);
        let id = new_id(chan, 0);
        let mut tos = 0u8;
        let v = &mut tos as *mut u8 as *mut c_void;
        assert_eq!(
            scm_rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, v, 1),
            0
        );
        assert_eq!(
            scm_rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, v, 4),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            scm_rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, v, 1),
            -1
        );
        assert_eq!(errno(), libc::ENOSYS);
        assert_eq!(crate::unsupported::scm_rdma_join_multicast(), -1);
        assert_eq!(errno(), libc::ENOSYS);
        let mut nowhere = sa("198.51.100.1:1");
        assert_eq!(scm_rdma_bind_addr(id, addr(&mut nowhere)), -1);
        assert_eq!(errno(), libc::EADDRNOTAVAIL);
        // no daemon ID yet: the verbs that need one say EINVAL
        assert_eq!(scm_rdma_resolve_route(id, 1), -1);
        assert_eq!(errno(), libc::EINVAL);
        id::scm_rdma_destroy_id(id);
    }
}

#[test]
fn migrate_id_takes_the_events_its_old_channel_had_not_handed_out() {
    let (lib, _st, chan) = setup();
    let other = ChanPriv::create(lib).unwrap() as *mut rdma_event_channel;
    // SAFETY: the objects of this test.
    unsafe {
        let (a, b) = (new_id(chan, 1), new_id(chan, 2));
        for (id, at) in [(a, "192.0.2.1:0"), (b, "192.0.2.1:0")] {
            let mut src = sa(at);
            assert_eq!(scm_rdma_bind_addr(id, addr(&mut src)), 0);
        }
        // queued on the old channel: b's event, then a's, then b's again
        for id in [b, a] {
            let mut dst = sa("192.0.2.2:1");
            assert_eq!(scm_rdma_resolve_addr(id, null_mut(), addr(&mut dst), 1), 0);
        }
        assert_eq!(scm_rdma_resolve_route(b, 1), 0);
        assert_eq!(scm_rdma_migrate_id(a, other), 0);
        assert!(readable(other));
        let e = next(other);
        assert_eq!(((*e).id, (*e).event), (a, event::ADDR_RESOLVED));
        scm_rdma_ack_cm_event(e);
        assert!(!readable(other), "a had one event");
        for want in [event::ADDR_RESOLVED, event::ROUTE_RESOLVED] {
            let e = next(chan);
            assert_eq!(((*e).id, (*e).event), (b, want), "b's stay, in order");
            scm_rdma_ack_cm_event(e);
        }
        assert!(!readable(chan));
        id::scm_rdma_destroy_id(a);
        id::scm_rdma_destroy_id(b);
    }
}
