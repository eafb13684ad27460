//! CM IDs: `struct rdma_cm_id` with this library's state beside it, the
//! table from the daemon's ID numbers to them, and the events the daemon
//! reports turned into `struct rdma_cm_event`s as librdmacm hands them out.
//!
//! Acknowledgements: every event handed out counts on its owner (the ID,
//! or the listener for a CONNECT_REQUEST); `rdma_ack_cm_event` counts it
//! back, and `rdma_destroy_id` waits until all are back, as librdmacm does.
//!
//! Length: the ID table and the event conversion share the ID's lock and
//! its acknowledgement count, so they stay in one file (just past ~600
//! lines).

use crate::abi::*;
use crate::backend::{CmBackend, CmEventMsg, CmIdNo, CmQpType, DeviceCm, PortSpace};
use crate::channel::{ChanPriv, EventPriv};
use crate::{complain, fail, sockaddr};
use libc::{c_int, c_void};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// The IDs not yet destroyed.
static LIVE: crate::Live = crate::Live::new();

/// The library: the connection manager behind it and the IDs by their
/// daemon numbers.
pub struct Lib {
    pub backend: Box<dyn CmBackend>,
    pub verbs: Box<dyn crate::verbs::Verbs>,
    /// (device, daemon ID) → `*const IdPriv`.
    ids: Mutex<HashMap<(String, CmIdNo), usize>>,
}

/// The process's library.
pub fn global() -> &'static Arc<Lib> {
    static LIB: OnceLock<Arc<Lib>> = OnceLock::new();
    LIB.get_or_init(|| Lib::new(backend(), Box::new(crate::verbs::Libibverbs::default())))
}

/// rnicd's CM.
fn backend() -> Box<dyn CmBackend> {
    Box::new(crate::rnicd::Rnicd::default())
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

    fn channel(&self) -> Option<&ChanPriv> {
        // SAFETY: an ID's channel lives at least as long as the ID.
        unsafe { ChanPriv::from_ptr(self.raw().channel) }
    }

    /// For an ID created without a channel: waits for the event of the
    /// call just made and keeps it in `id->event`; its status is the
    /// call's result.
    pub fn complete(&self) -> Result<(), c_int> {
        if !self.state().sync {
            return Ok(());
        }
        let raw = self.raw();
        if !raw.event.is_null() {
            // SAFETY: an event this library handed out on this ID.
            unsafe { crate::channel::ack(raw.event) };
            raw.event = std::ptr::null_mut();
        }
        let chan = self.channel().ok_or(libc::EINVAL)?;
        let ev = chan.get_event()?;
        raw.event = ev;
        // SAFETY: the event just handed out.
        let ev = unsafe { &*ev };
        match ev.status {
            // the device went away instead of answering (status 0)
            _ if ev.event == event::DEVICE_REMOVAL => Err(libc::ENODEV),
            0 => Ok(()),
            _ if ev.event == event::REJECTED => Err(libc::ECONNREFUSED),
            s if s < 0 => Err(-s),
            s => Err(s),
        }
    }
}

impl Lib {
    pub fn new(backend: Box<dyn CmBackend>, verbs: Box<dyn crate::verbs::Verbs>) -> Arc<Lib> {
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

    /// A new ID on `chan` (its events go there).
    pub fn create_id(
        self: &Arc<Lib>,
        chan: *mut rdma_event_channel,
        context: *mut c_void,
        ps: c_int,
        qp_type: c_int,
        sync: bool,
    ) -> *mut IdPriv {
        // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, no
        // address, no paths).
        let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
        id.channel = chan;
        id.context = context;
        id.ps = ps;
        id.qp_type = qp_type;
        let p = Box::into_raw(Box::new(IdPriv {
            id: std::cell::UnsafeCell::new(id),
            lib: self.clone(),
            st: Mutex::new(IdState {
                sync,
                responder_resources: RDMA_MAX_RESP_RES,
                initiator_depth: RDMA_MAX_INIT_DEPTH,
                ..IdState::default()
            }),
            acks: Condvar::new(),
        }));
        LIVE.add(p);
        p
    }

    /// Gives `idp` its daemon side on device `dev` (if it has none yet):
    /// a daemon ID whose events go to the ID's channel.
    pub fn attach(&self, idp: &IdPriv, dev: &str) -> Result<Remote, c_int> {
        if let Some(r) = idp.state().remote.iter().find(|r| r.dev == dev) {
            return Ok(r.clone());
        }
        let chan = idp.channel().ok_or(libc::EINVAL)?;
        let token = chan.on_device(dev)?.token();
        let cm = self.backend.device(dev).map_err(|e| {
            complain("rdma_cm", &e);
            e.errno
        })?;
        let no = cm
            .create_id(
                token,
                idp.port_space(),
                idp.qp_type(),
                idp as *const _ as u64,
            )
            .map_err(|e| {
                complain("rdma_create_id", &e);
                e.errno
            })?;
        let r = Remote {
            dev: dev.to_string(),
            cm,
            no,
        };
        self.table()
            .insert((dev.to_string(), no), idp as *const IdPriv as usize);
        idp.state().remote.push(r.clone());
        let raw = idp.raw();
        if raw.verbs.is_null() {
            self.set_device(raw, dev);
        }
        Ok(r)
    }

    /// The ID now belongs to device `dev`: its context, and the device's
    /// protection domain as `id->pd` (librdmacm gives every ID on a device
    /// that device's PD, which programs use for their own QPs and MRs).
    fn set_device(&self, raw: &mut rdma_cm_id, dev: &str) {
        raw.verbs = self.verbs.context(dev).unwrap_or(std::ptr::null_mut());
        if !raw.verbs.is_null() && raw.pd.is_null() {
            // SAFETY: `raw.verbs` is one of the library's contexts.
            raw.pd = unsafe { self.verbs.default_pd(raw.verbs) };
        }
    }

    /// The ID the daemon calls `no` on `dev`, counted as the owner of one
    /// more event handed out (under the table's lock, so that
    /// `rdma_destroy_id` waits for it).
    fn hold(&self, dev: &str, no: CmIdNo) -> Option<&IdPriv> {
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
    pub fn ids_on(&self, dev: &str, chan: &ChanPriv) -> Vec<CmIdNo> {
        let chan = chan as *const ChanPriv as *mut rdma_event_channel;
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

    /// RDMA_CM_EVENT_DEVICE_REMOVAL for the ID the daemon called `no` on
    /// `dev`; None when that ID is gone. (rdma_cm.h: on it the user
    /// destroys the ID and frees what it holds of the device.)
    pub fn removal(&self, dev: &str, no: CmIdNo) -> Option<Box<EventPriv>> {
        let idp = self.hold(dev, no)?;
        let mut ev = new_event(idp, event::DEVICE_REMOVAL, 0);
        ev.event.id = idp as *const IdPriv as *mut rdma_cm_id;
        Some(ev)
    }

    /// `rdma_destroy_id`: the daemon's IDs go, then this waits for every
    /// event handed out on the ID to be acknowledged.
    ///
    /// # Safety
    /// `p` is an ID of this library, used by no other call.
    pub unsafe fn destroy_id(&self, p: *mut IdPriv) {
        // SAFETY: the caller's ID.
        let idp = unsafe { &*p };
        let remote = std::mem::take(&mut idp.state().remote);
        {
            let mut t = self.table();
            for r in &remote {
                t.remove(&(r.dev.clone(), r.no));
            }
        }
        for r in &remote {
            if let Err(e) = r.cm.destroy_id(r.no) {
                complain("rdma_destroy_id", &e);
            }
        }
        let raw = idp.raw();
        if !raw.event.is_null() {
            // SAFETY: the event a synchronous call kept on this ID.
            unsafe { crate::channel::ack(raw.event) };
            raw.event = std::ptr::null_mut();
        }
        let mut st = idp.state();
        while st.acked < st.delivered {
            st = idp.acks.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let sync = st.sync;
        drop(st);
        if sync && !raw.channel.is_null() {
            // SAFETY: a synchronous ID's own channel, used by nobody else.
            unsafe { crate::channel::destroy(raw.channel as *mut ChanPriv) };
        }
        if LIVE.remove(p) {
            // SAFETY: made by Box::into_raw in create_id; out of the table
            // and with no event outstanding; live until now, so freed once.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// An event from the daemon on `chan`'s device `dev`, as the
    /// application gets it; `None` for one it must not see (its ID is
    /// gone, or the library consumed it).
    pub fn process(
        self: &Arc<Lib>,
        chan: &ChanPriv,
        dev: &str,
        msg: CmEventMsg,
    ) -> Option<Box<EventPriv>> {
        if msg.kind.0 == event::CONNECT_REQUEST {
            return self.connect_request(chan, dev, msg);
        }
        let idp = self.hold(dev, msg.id)?;
        let mut ev = new_event(idp, msg.kind.0, msg.status);
        ev.event.id = idp as *const IdPriv as *mut rdma_cm_id;
        let connect_error = idp.state().connect_error;
        match msg.kind.0 {
            event::ADDR_RESOLVED | event::ROUTE_RESOLVED => {
                if let Err(e) = crate::conn::query_route(idp, dev, msg.id) {
                    ev.event.event = msg.kind.0 + 1; // ADDR_ERROR / ROUTE_ERROR
                    ev.event.status = -e;
                }
            }
            event::REJECTED | event::DISCONNECTED if connect_error => {
                idp.acked();
                return None;
            }
            event::CONNECT_RESPONSE | event::ESTABLISHED => self.answered(idp, &mut ev, &msg),
            _ => {}
        }
        copy_params(&mut ev, &msg, idp.raw().qp_type);
        if msg.ud.is_some() && idp.raw().qp_type == IBV_QPT_UD {
            crate::ud::complete_ah(idp, &mut ev.event);
        }
        if msg.kind.0 == event::REJECTED {
            crate::qp::to_error(idp);
        }
        Some(ev)
    }

    /// The active side's connection is answered: a QP the library made
    /// goes to RTR and RTS (and the RTU is asked for when the daemon
    /// reports the REP as CONNECT_RESPONSE); if it cannot, the application
    /// sees CONNECT_ERROR and the connection is torn down.
    fn answered(&self, idp: &IdPriv, ev: &mut EventPriv, msg: &CmEventMsg) {
        let raw = idp.raw();
        let connecting = std::mem::take(&mut idp.state().connecting);
        if raw.qp.is_null() && connecting && raw.qp_type != IBV_QPT_UD {
            // as librdmacm: an ID without a QP hears CONNECT_RESPONSE and
            // its owner moves its own QP, then calls rdma_establish (the
            // daemon holds the RTU until then)
            ev.event.event = event::CONNECT_RESPONSE;
            return;
        }
        if raw.qp.is_null() || idp.state().qp_ready || raw.qp_type == IBV_QPT_UD {
            return;
        }
        let r = crate::qp::ready(idp, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).and_then(|_| {
            if msg.kind.0 != event::CONNECT_RESPONSE {
                return Ok(());
            }
            let r = idp.remote()?;
            r.cm.establish(r.no).map_err(|e| e.errno)
        });
        match r {
            Ok(()) => {
                idp.state().qp_ready = true;
                ev.event.event = event::ESTABLISHED;
            }
            Err(e) => {
                idp.state().connect_error = true;
                if let Ok(r) = idp.remote() {
                    let _ = r.cm.disconnect(r.no);
                }
                ev.event.event = event::CONNECT_ERROR;
                ev.event.status = -e;
            }
        }
    }

    /// CONNECT_REQUEST: a new ID for the connection, on the listener's
    /// channel with the listener's context; the event counts on the
    /// listener.
    fn connect_request(
        self: &Arc<Lib>,
        chan: &ChanPriv,
        dev: &str,
        msg: CmEventMsg,
    ) -> Option<Box<EventPriv>> {
        let listen_no = msg.listen_id?;
        let cm = self.backend.device(dev).ok();
        let Some(listener) = self.hold(dev, listen_no) else {
            // nobody listens any more: the daemon's new ID goes
            if let Some(cm) = cm {
                let _ = cm.destroy_id(msg.id);
            }
            return None;
        };
        let drop_request = |why: &str| {
            complain("connect request", why);
            if let Some(cm) = &cm {
                let _ = cm.reject(msg.id, &[]);
                let _ = cm.destroy_id(msg.id);
            }
            listener.acked();
            None
        };
        let Some(cm) = cm.clone() else {
            return drop_request("device gone");
        };
        let l = listener.raw();
        let p = self.create_id(l.channel, l.context, l.ps, l.qp_type, false);
        // SAFETY: just made.
        let idp = unsafe { &*p };
        {
            let mut st = idp.state();
            st.remote.push(Remote {
                dev: dev.to_string(),
                cm,
                no: msg.id,
            });
            if let Some(c) = &msg.conn {
                st.initiator_depth = c.initiator_depth;
                st.responder_resources = c.responder_resources;
            }
        }
        self.table().insert((dev.to_string(), msg.id), p as usize);
        let raw = idp.raw();
        self.set_device(raw, dev);
        raw.port_num = 1;
        if let Some((src, dst)) = msg.addrs {
            sockaddr::write(&mut raw.route.addr.src, src);
            sockaddr::write(&mut raw.route.addr.dst, dst);
        }
        if listener.state().sync {
            if let Err(e) = crate::conn::migrate(idp, std::ptr::null_mut()) {
                // SAFETY: our new ID, handed out to nobody.
                unsafe { self.destroy_id(p) };
                return drop_request(&format!("migrating to its own channel: errno {e}"));
            }
        }
        let _ = crate::conn::query_route(idp, dev, msg.id);
        let _ = chan;
        let mut ev = new_event(listener, msg.kind.0, msg.status);
        ev.event.id = p as *mut rdma_cm_id;
        ev.event.listen_id = listener as *const IdPriv as *mut rdma_cm_id;
        copy_params(&mut ev, &msg, listener.raw().qp_type);
        if msg.ud.is_some() && listener.raw().qp_type == IBV_QPT_UD {
            crate::ud::complete_ah(idp, &mut ev.event);
        }
        Some(ev)
    }
}

fn new_event(owner: &IdPriv, kind: u32, status: i32) -> Box<EventPriv> {
    // SAFETY: all-zero is a valid rdma_cm_event (NULL pointers, zero
    // parameters).
    let mut ev: Box<EventPriv> = Box::new(unsafe { std::mem::zeroed() });
    ev.owner = owner;
    ev.event.event = kind;
    ev.event.status = status;
    ev
}

/// The event's connection or datagram parameters, its private data in the
/// event's own buffer.
fn copy_params(ev: &mut EventPriv, msg: &CmEventMsg, qp_type: c_int) {
    let pd_ptr = ev.private_data.as_ptr() as *const c_void;
    if let Some(u) = msg.ud.as_ref().filter(|_| qp_type == IBV_QPT_UD) {
        let n = u.private_data.len().min(ev.private_data.len()).min(255);
        ev.private_data[..n].copy_from_slice(&u.private_data[..n]);
        let mut ah = ibv_ah_attr {
            is_global: 1,
            port_num: 1,
            ..ibv_ah_attr::default()
        };
        ah.grh.dgid.raw = u.dgid;
        ah.grh.hop_limit = 64;
        ev.event.param.ud = rdma_ud_param {
            private_data: if n > 0 { pd_ptr } else { std::ptr::null() },
            private_data_len: n as u8,
            ah_attr: ah,
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
    } else if let Some(c) = &msg.conn {
        let n = c.private_data.len().min(ev.private_data.len()).min(255);
        ev.private_data[..n].copy_from_slice(&c.private_data[..n]);
        ev.event.param.conn = rdma_conn_param {
            private_data: if n > 0 { pd_ptr } else { std::ptr::null() },
            private_data_len: n as u8,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: u8::from(c.flow_control),
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: u8::from(c.srq),
            qp_num: c.qp_num,
        };
    }
}

/// `rdma_create_id`: RDMA_PS_TCP and RDMA_PS_UDP; a NULL channel makes a
/// synchronous ID with a channel of its own.
///
/// # Safety
/// `chan` is NULL or a channel of this library; `id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_create_id(
    chan: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    let qp_type = match ps {
        RDMA_PS_TCP => IBV_QPT_RC,
        RDMA_PS_UDP => IBV_QPT_UD,
        RDMA_PS_IB | RDMA_PS_IPOIB => {
            complain(
                "rdma_create_id",
                "InfiniBand port spaces are not supported (RDMA_PS_TCP and RDMA_PS_UDP are)",
            );
            return fail(libc::EPROTONOSUPPORT);
        }
        _ => return fail(libc::EINVAL),
    };
    // SAFETY: the caller's channel.
    let lib = match unsafe { ChanPriv::from_ptr(chan) } {
        Some(c) => c.lib.clone(),
        None => global().clone(),
    };
    match create(&lib, chan, context, ps, qp_type) {
        Ok(p) => {
            // SAFETY: the caller's out-pointer.
            unsafe { *id = p as *mut rdma_cm_id };
            0
        }
        Err(e) => fail(e),
    }
}

/// A new ID of `lib` on `chan`, or (NULL) synchronous on a channel of its
/// own.
pub fn create(
    lib: &Arc<Lib>,
    chan: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut IdPriv, c_int> {
    let (chan, sync) = if chan.is_null() {
        (
            ChanPriv::create(lib.clone())? as *mut rdma_event_channel,
            true,
        )
    } else {
        (chan, false)
    };
    Ok(lib.create_id(chan, context, ps, qp_type, sync))
}

/// `rdma_destroy_id`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn scm_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: the caller's ID.
    let Some(idp) = (unsafe { IdPriv::from_ptr(id) }) else {
        return fail(libc::EINVAL);
    };
    let lib = idp.lib.clone();
    // SAFETY: the caller gives the ID up.
    unsafe { lib.destroy_id(id as *mut IdPriv) };
    0
}
