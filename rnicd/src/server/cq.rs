//! Completion queues: a CQ ring shared with the client, backed by a
//! transport CQ (pooled and reused, since the transport never destroys
//! one).

use super::registry::{release_cqs, with_owned};
use super::{event_fd, ok, one_fd, Attach, Object, Reply, RequestError, Shared};
use crate::dataplane::CqRing;
use ipc::proto::Response;
use ipc::ring::{self, CqeRaw, Ring, CQE_SIZE};
use ipc::shm::Mapping;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A CQ ring of at least `cqe` entries in a new shared mapping: (its
/// entries, the mapping, the ring, which the mapping must outlive).
fn new_ring(cqe: u32) -> Result<(u32, Arc<Mapping>, Ring), RequestError> {
    let entries = ring::ring_entries(cqe).ok_or(RequestError::BadSize {
        what: "CQ size",
        value: cqe,
    })?;
    let map = Arc::new(Mapping::create(
        "softrnic-cq",
        ring::ring_bytes(entries, CQE_SIZE),
    )?);
    // SAFETY: the mapping is ring_bytes(entries, CQE_SIZE) long (made
    // above) and the CqRing that takes the ring keeps it alive as long;
    // entries is a power of two (ring_entries).
    let ring = unsafe { Ring::new(map.ptr(), entries, CQE_SIZE) };
    Ok((entries, map, ring))
}

/// The answer with a CQ's ring: its memfd travels with it.
fn cq_reply(cq: u32, entries: u32, map: Arc<Mapping>) -> Reply {
    let map_len = map.len() as u64;
    (
        Response::Cq {
            cq,
            entries,
            map_len,
        },
        Some(Attach::Map(map)),
    )
}

/// `CreateCq`: a ring of at least `cqe` entries (its memfd travels with
/// the answer) over a transport CQ of twice that.
pub(super) fn create_cq(sh: &Shared, id: u64, cqe: u32) -> Result<Reply, RequestError> {
    let (entries, map, ring) = new_ring(cqe)?;
    let cap = entries as usize * 2;
    let pooled = {
        let mut r = sh.reg.lock().expect("registry");
        let i = r.cq_pool.iter().position(|(_, c)| *c >= cap);
        i.map(|i| r.cq_pool.swap_remove(i))
    };
    let cq = match pooled {
        Some((cq, _)) => cq,
        None => {
            let cq = super::call(sh, move |r| r.create_cq(cap))?;
            sh.reg.lock().expect("registry").cq_cap.insert(cq, cap);
            cq
        }
    };
    sh.dataplane().add_cq(
        cq,
        CqRing {
            _map: map.clone(),
            ring,
            prod: 0,
            pending: Default::default(),
            notify: None,
            owner: id,
        },
    );
    with_owned(sh, id, |o| o.cqs.insert(cq));
    Ok(cq_reply(cq, entries, map))
}

/// `NotifyCq`: the eventfd the daemon writes for the CQ's completion
/// events.
pub(super) fn notify_cq(
    sh: &Shared,
    id: u64,
    cq: u32,
    fds: Vec<OwnedFd>,
) -> Result<Reply, RequestError> {
    if !with_owned(sh, id, |o| o.cqs.contains(&cq)) {
        return Err(RequestError::NotFound(Object::Cq(cq)));
    }
    let fd = one_fd(fds, "notify_cq", "eventfd")?;
    event_fd(&fd)?;
    let mut dp = sh.dataplane();
    let c = dp
        .cqs
        .get_mut(&cq)
        .ok_or(RequestError::NotFound(Object::Cq(cq)))?;
    c.notify = Some(fd);
    ok()
}

/// `ResizeCq`: a new ring of at least `cqe` entries with the completions
/// not yet polled copied to the same indices (so the producer and
/// consumer indices carry over), refused when they do not fit — those in
/// the ring once the engine has turned twice, so that what the device
/// completes without waiting for a peer (a UD send) is among them. The
/// transport CQ stays: it holds only what the ring has no room for.
pub(super) fn resize_cq(sh: &Shared, id: u64, cq: u32, cqe: u32) -> Result<Reply, RequestError> {
    if !with_owned(sh, id, |o| o.cqs.contains(&cq)) {
        return Err(RequestError::NotFound(Object::Cq(cq)));
    }
    let (entries, map, ring) = new_ring(cqe)?;
    // the completions of what the device has already done count: work
    // requests posted before this request are fetched and sent in the
    // engine's next turn and their completions written to the ring in the
    // one after (each call runs at the start of a turn)
    for _ in 0..3 {
        super::call(sh, |_| ())?;
    }
    let mut dp = sh.dataplane();
    let c = dp
        .cqs
        .get_mut(&cq)
        .ok_or(RequestError::NotFound(Object::Cq(cq)))?;
    use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};
    let cons = c.ring.consumer().load(Acquire);
    let unpolled = c.prod.wrapping_sub(cons);
    // (a wild consumer index reads as more than the old ring holds)
    if unpolled > c.ring.entries || unpolled > entries {
        return Err(RequestError::BadSize {
            what: "CQ size (below the completions not yet polled)",
            value: cqe,
        });
    }
    for i in 0..unpolled {
        let at = cons.wrapping_add(i);
        ring.write::<CqeRaw>(at, &c.ring.read::<CqeRaw>(at));
    }
    ring.consumer().store(cons, Release);
    ring.event_seq()
        .store(c.ring.event_seq().load(SeqCst), SeqCst);
    ring.armed().store(c.ring.armed().load(SeqCst), SeqCst);
    ring.producer().store(c.prod, Release);
    c.ring = ring;
    c._map = map.clone();
    Ok(cq_reply(cq, entries, map))
}

/// `DestroyCq`: refused while the client's QPs use it.
pub(super) fn destroy_cq(sh: &Shared, id: u64, cq: u32) -> Result<Reply, RequestError> {
    with_owned(sh, id, |o| {
        if !o.cqs.contains(&cq) {
            return Err(RequestError::NotFound(Object::Cq(cq)));
        }
        if o.qps.values().any(|q| q.send_cq == cq || q.recv_cq == cq) {
            return Err(RequestError::CqInUse);
        }
        o.cqs.remove(&cq);
        Ok(())
    })?;
    release_cqs(sh, vec![cq]);
    ok()
}
