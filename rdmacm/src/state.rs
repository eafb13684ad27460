//! What this library keeps: the library itself ([`Lib`]: the connection
//! manager it was given, libibverbs, and the table from the daemon's ID
//! numbers to the IDs), each ID ([`IdPriv`]: `struct rdma_cm_id` with its
//! state beside it) and each event handed out ([`EventPriv`]).
//!
//! Acknowledgements: every event handed out counts on its owner (the ID,
//! or the listener for a CONNECT_REQUEST); `rdma_ack_cm_event` counts it
//! back ([`ack`]), and `rdma_destroy_id` waits until all are back
//! ([`IdPriv::wait_acked`]), as librdmacm does.
//!
//! The IDs are made and destroyed by `id.rs`, their events made by
//! `deliver.rs`; this module names no other of the library's files but
//! `abi`, `backend`, `verbs` and `live`.

use crate::abi::*;
use crate::backend::{CmBackend, CmIdNo, CmQpType, DeviceCm, PortSpace};
use crate::live::Live;
use crate::verbs::Verbs;
use libc::c_int;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The IDs not yet destroyed.
static LIVE: Live = Live::new();

/// The library: the connection manager behind it and the IDs by their
/// daemon numbers.
pub struct Lib {
    pub backend: Box<dyn CmBackend>,
    pub verbs: Box<dyn Verbs>,
    /// (device, daemon ID) → `*const IdPriv`.
    ids: Mutex<HashMap<(String, CmIdNo), usize>>,
}

impl Lib {
    /// A library on the connection manager `backend` (rnicd's, chosen at
    /// the library's edge, or the unit tests' fake) and `verbs`.
    pub fn new(backend: Box<dyn CmBackend>, verbs: Box<dyn Verbs>) -> Arc<Lib> {
        Arc::new(Lib {
            backend,
            verbs,
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// The devices' names, in libibverbs' order.
    pub fn devices(&self) -> Vec<String> {
        self.verbs.devices().into_iter().map(|d| d.0).collect()
    }

    /// The device one of whose GIDs is `ip` (IPv4 as an IPv4-mapped GID,
    /// RoCEv2 A17.4.5.1).
    pub fn device_of(&self, ip: std::net::IpAddr) -> Option<String> {
        let gid = match ip {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(v6) => v6.octets(),
        };
        self.verbs
            .devices()
            .into_iter()
            .find(|d| d.1.contains(&gid))
            .map(|d| d.0)
    }

    fn table(&self) -> MutexGuard<'_, HashMap<(String, CmIdNo), usize>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The daemon calls ID `idp` `no` on device `dev`.
    pub fn register(&self, dev: &str, no: CmIdNo, idp: *const IdPriv) {
        self.table().insert((dev.to_string(), no), idp as usize);
    }

    /// The daemon IDs `remote` leave the table (before their ID is freed).
    pub fn unregister(&self, remote: &[Remote]) {
        let mut t = self.table();
        for r in remote {
            t.remove(&(r.dev.clone(), r.no));
        }
    }

    /// The ID the daemon calls `no` on `dev`, counted as the owner of one
    /// more event handed out (under the table's lock, so that
    /// `rdma_destroy_id` waits for it).
    pub fn hold(&self, dev: &str, no: CmIdNo) -> Option<&IdPriv> {
        let t = self.table();
        let p = *t.get(&(dev.to_string(), no))?;
        // SAFETY: IDs leave the table before they are freed, and the
        // delivered count taken here keeps it alive until acknowledged.
        let idp = unsafe { &*(p as *const IdPriv) };
        idp.state().delivered += 1;
        Some(idp)
    }

    /// The daemon IDs on device `dev` of the IDs whose events go to
    /// `chan`.
    pub fn ids_on(&self, dev: &str, chan: *mut rdma_event_channel) -> Vec<CmIdNo> {
        self.table()
            .iter()
            .filter(|((d, _), _)| d == dev)
            // SAFETY: IDs leave the table before they are freed; an ID's
            // channel is written only while no event of it is processed
            // (creation, rdma_migrate_id).
            .filter(|(_, p)| unsafe { (*(**p as *const IdPriv)).raw().channel } == chan)
            .map(|((_, no), _)| *no)
            .collect()
    }
}

/// An ID's daemon side on one device.
#[derive(Clone)]
pub struct Remote {
    pub dev: String,
    pub cm: Arc<dyn DeviceCm>,
    pub no: CmIdNo,
}

/// What this library keeps per ID.
#[derive(Default)]
pub struct IdState {
    /// The daemon's IDs: one once the ID is bound or resolving (a listener
    /// on the wildcard address has one per device).
    pub remote: Vec<Remote>,
    /// Events handed out on this ID / acknowledged.
    pub delivered: u64,
    pub acked: u64,
    /// Created without a channel: calls wait for their own event.
    pub sync: bool,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// The route's path record (`route.path_rec` points at it).
    pub path: Option<Box<ibv_sa_path_rec>>,
    /// A connection the library failed itself: the daemon's REJECTED or
    /// DISCONNECTED that follows is not reported.
    pub connect_error: bool,
    /// The QP is in RTS (moved by an accept or the answered connect).
    pub qp_ready: bool,
    /// `rdma_connect` was called and its answer (the REP) not yet
    /// reported.
    pub connecting: bool,
    /// `rdma_set_option`'s RDMA_OPTION_ID_ACK_TIMEOUT: the local ACK
    /// timeout of the QP's RTS instead of the daemon's.
    pub ack_timeout: Option<u8>,
    /// RDMA_OPTION_ID_TOS: the traffic class of the QP's path.
    pub tos: Option<u8>,
    /// `rdma_create_ep` on the passive side: the QP every request's ID
    /// gets from `rdma_get_request` (attributes, PD address).
    pub ep_attr: Option<(ibv_qp_init_attr, usize)>,
}

/// `struct rdma_cm_id` and this library's state of it.
#[repr(C)]
pub struct IdPriv {
    /// First, so that the application's pointer is this one's.
    pub id: std::cell::UnsafeCell<rdma_cm_id>,
    pub lib: Arc<Lib>,
    pub st: Mutex<IdState>,
    acks: Condvar,
}

impl IdPriv {
    /// A new live ID of `lib`: the application's view `id` and this
    /// library's state `st`.
    pub fn new(lib: Arc<Lib>, id: rdma_cm_id, st: IdState) -> *mut IdPriv {
        let p = Box::into_raw(Box::new(IdPriv {
            id: std::cell::UnsafeCell::new(id),
            lib,
            st: Mutex::new(st),
            acks: Condvar::new(),
        }));
        LIVE.add(p);
        p
    }

    /// Frees an ID [`IdPriv::new`] made, if it is still live (so once).
    ///
    /// # Safety
    /// `p` is out of its library's table, no event of it is outstanding,
    /// and nobody uses it any more.
    pub unsafe fn free(p: *mut IdPriv) {
        if LIVE.remove(p) {
            // SAFETY: made by Box::into_raw in `new`; live until now, so
            // freed once; the caller's promise covers its users.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// The ID an application's pointer names; None unless it is a live ID
    /// of this library.
    ///
    /// # Safety
    /// No other thread destroys the ID while the reference is in use.
    pub unsafe fn from_ptr<'a>(p: *mut rdma_cm_id) -> Option<&'a IdPriv> {
        if !LIVE.has(p) {
            return None;
        }
        // SAFETY: a live ID (the caller's promise covers its use by
        // another thread); `id` is the first field.
        unsafe { (p as *const IdPriv).as_ref() }
    }

    pub fn state(&self) -> MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An event of this ID was acknowledged.
    pub fn acked(&self) {
        self.state().acked += 1;
        self.acks.notify_all();
    }

    /// Waits until every event handed out on this ID is acknowledged; the
    /// state, locked, once they are.
    pub fn wait_acked(&self) -> MutexGuard<'_, IdState> {
        let mut st = self.state();
        while st.acked < st.delivered {
            st = self.acks.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st
    }

    /// The ID's daemon side on its device.
    pub fn remote(&self) -> Result<Remote, c_int> {
        self.state().remote.first().cloned().ok_or(libc::EINVAL)
    }

    /// The application's view (its fields are written by this library
    /// only while the application waits on a call of this ID, as in
    /// librdmacm).
    #[allow(clippy::mut_from_ref)]
    pub fn raw(&self) -> &mut rdma_cm_id {
        // SAFETY: `id` is the first field of a heap IdPriv that the
        // application names by this pointer; see above for who writes it.
        unsafe { &mut *self.id.get() }
    }

    pub fn port_space(&self) -> PortSpace {
        PortSpace(self.raw().ps as u16)
    }

    pub fn qp_type(&self) -> CmQpType {
        if self.raw().qp_type == IBV_QPT_UD {
            CmQpType::Ud
        } else {
            CmQpType::Rc
        }
    }
}

/// `struct rdma_cm_event` and what its acknowledgement needs.
#[repr(C)]
pub struct EventPriv {
    pub event: rdma_cm_event,
    /// The ID whose count of acknowledged events this event raises (the
    /// listener for a CONNECT_REQUEST).
    pub owner: *const IdPriv,
    /// Where `param.*.private_data` points.
    pub private_data: [u8; 256],
}

/// Acknowledges (and frees) an event this library handed out.
///
/// # Safety
/// `e` was handed out by `deliver::get_event` and is not acknowledged yet.
pub unsafe fn ack(e: *mut rdma_cm_event) {
    // SAFETY: the caller's promise: made by Box::into_raw as an EventPriv.
    let ev = unsafe { Box::from_raw(e as *mut EventPriv) };
    // SAFETY: the owner stays alive until all its events are acknowledged
    // (rdma_destroy_id waits for that).
    if let Some(owner) = unsafe { ev.owner.as_ref() } {
        owner.acked();
    }
}
