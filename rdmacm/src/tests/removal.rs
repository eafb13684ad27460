//! Devices that go away: a thread waiting on a destroyed channel, each
//! ID told once of its device's removal, synchronous calls on a removed
//! device.

use super::*;
use crate::fake::{ev, Fake};
use crate::id;
use std::ptr::null_mut;

#[test]
fn a_thread_waiting_on_a_destroyed_channel_keeps_waiting_and_gets_its_events() {
    // rping's CM thread waits in rdma_get_cm_event while its main thread
    // destroys the channel: as on a kernel channel, it is not woken by the
    // destroy, and the channel lives on until it returns
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test; the waiting thread's use of the
    // channel keeps it alive past its destroy.
    unsafe {
        let id = new_id(chan, 0);
        let mut src = sa("192.0.2.1:7000");
        assert_eq!(scm_rdma_bind_addr(id, addr(&mut src)), 0);
        let c = chan as usize;
        let waiter = std::thread::spawn(move || {
            let mut e = null_mut();
            // (in the test's unsafe block) the test's channel, held while
            // this call lasts
            let r = scm_rdma_get_cm_event(c as *mut rdma_event_channel, &mut e);
            (r, e as usize)
        });
        let p = chan as *const ChanPriv;
        testkit::wait_until(STUCK, "a thread waiting for an event", || (*p).holds() == 2);
        scm_rdma_destroy_event_channel(chan);
        Fake::send(&st, "t0", ev(1, event::ADDR_RESOLVED));
        testkit::wait_until(STUCK, "the event reached the waiting thread", || {
            waiter.is_finished()
        });
        let (r, e) = waiter.join().expect("the waiting thread");
        assert_eq!(r, 0, "errno {}", errno());
        let e = e as *mut rdma_cm_event;
        assert_eq!(((*e).event, (*e).id), (event::ADDR_RESOLVED, id));
        assert_eq!(scm_rdma_ack_cm_event(e), 0);
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
    }
}

#[test]
fn each_id_hears_its_device_removed_once_and_a_channel_of_gone_devices_fails() {
    let (_lib, st, chan) = setup();
    // SAFETY: the objects of this test, used as the C API documents.
    unsafe {
        let ids = [new_id(chan, 1), new_id(chan, 2), new_id(chan, 3)];
        for (id, a) in ids
            .iter()
            .zip(["192.0.2.1:7000", "192.0.2.1:0", "192.0.2.2:0"])
        {
            let mut src = sa(a);
            assert_eq!(scm_rdma_bind_addr(*id, addr(&mut src)), 0);
        }
        let fd = (*chan).fd;
        libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        Fake::remove(&st, "t0");
        // t0's two IDs, once each, in any order
        let mut heard = Vec::new();
        for _ in 0..2 {
            let e = next(chan);
            assert_eq!(((*e).event, (*e).status), (event::DEVICE_REMOVAL, 0));
            heard.push((*e).id);
            scm_rdma_ack_cm_event(e);
        }
        heard.sort();
        let mut want = vec![ids[0], ids[1]];
        want.sort();
        assert_eq!(heard, want);
        // t1 lives: nothing more, and no error
        let mut e = null_mut();
        assert_eq!(scm_rdma_get_cm_event(chan, &mut e), -1);
        assert_eq!(errno(), libc::EAGAIN);
        Fake::remove(&st, "t1");
        let r = next(chan);
        assert_eq!(((*r).event, (*r).id), (event::DEVICE_REMOVAL, ids[2]));
        scm_rdma_ack_cm_event(r);
        // every device of the channel is gone: an error, not a wait
        assert_eq!(scm_rdma_get_cm_event(chan, &mut e), -1);
        assert_eq!(errno(), libc::ENODEV);
        for id in ids {
            assert_eq!(id::scm_rdma_destroy_id(id), 0);
        }
        scm_rdma_destroy_event_channel(chan);
    }
}

#[test]
fn a_synchronous_call_on_a_removed_device_fails_with_enodev() {
    let (lib, st, _chan) = setup();
    // SAFETY: the objects of this test.
    unsafe {
        let id = sync_id(&lib);
        resolve(id, "192.0.2.2:7001");
        Fake::remove(&st, "t0");
        // the route's answer never comes: the call hears the removal
        assert_eq!(scm_rdma_resolve_route(id, 2000), -1);
        assert_eq!(errno(), libc::ENODEV);
        assert_eq!((*(*id).event).event, event::DEVICE_REMOVAL);
        assert_eq!(id::scm_rdma_destroy_id(id), 0);
    }
}
