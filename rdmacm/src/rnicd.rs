//! [`CmBackend`] over rnicd's CM: `softrnic::client::cm`, one command
//! connection per device for the process (the daemon's IDs live as long
//! as it) and an event channel per (library channel, device).

use crate::backend::{self as b, BackendError, CmBackend, CmChannel, DeviceCm};
use softrnic::client::cm;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// The errno a client-library error maps to, with its text.
fn err(e: softrnic::Error) -> BackendError {
    let errno = match &e {
        // rnicd killed or crashed, or no rnicd behind the device's socket:
        // the device is gone (as after a device removal, ENODEV)
        softrnic::Error::DeviceGone => libc::ENODEV,
        softrnic::Error::Io(io) if io.raw_os_error() == Some(libc::ECONNREFUSED) => libc::ENODEV,
        softrnic::Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        softrnic::Error::Timeout => libc::ETIMEDOUT,
        softrnic::Error::Daemon(why) => daemon_errno(why),
        _ => libc::EIO,
    };
    BackendError::new(errno, e.to_string())
}

/// The errno of a refusal by rnicd's CM (its `CmRequestError` texts).
fn daemon_errno(why: &str) -> i32 {
    if why.contains("is not this device's address") {
        libc::EADDRNOTAVAIL
    } else if why.contains("address is in use") {
        libc::EADDRINUSE
    } else if why.contains("port space") {
        libc::EPROTONOSUPPORT
    } else if why.contains("not supported") {
        libc::EOPNOTSUPP
    } else if why.contains("too many") {
        libc::ENOMEM
    } else {
        libc::EINVAL
    }
}

/// rnicd's CM.
#[derive(Default)]
pub struct Rnicd {
    clients: Mutex<HashMap<String, Arc<Client>>>,
}

impl CmBackend for Rnicd {
    fn device(&self, dev: &str) -> b::Result<Arc<dyn DeviceCm>> {
        let mut c = self
            .clients
            .lock()
            .map_err(|_| BackendError::new(libc::EIO, "poisoned"))?;
        if let Some(c) = c.get(dev) {
            return Ok(c.clone());
        }
        let client = Arc::new(Client(cm::CmClient::open_device(dev).map_err(err)?));
        c.insert(dev.to_string(), client.clone());
        Ok(client)
    }

    fn open_channel(&self, dev: &str) -> b::Result<Arc<dyn CmChannel>> {
        Ok(Arc::new(Channel(
            cm::EventChannel::open_device(dev).map_err(err)?,
        )))
    }
}

struct Channel(cm::EventChannel);

impl CmChannel for Channel {
    fn fd(&self) -> RawFd {
        self.0.fd()
    }
    fn token(&self) -> u64 {
        self.0.token()
    }
    fn next(&self, nonblocking: bool) -> b::Result<Option<b::CmEventMsg>> {
        self.0.next(nonblocking).map_err(err)
    }
}

struct Client(cm::CmClient);

impl DeviceCm for Client {
    fn create_id(
        &self,
        chan: u64,
        ps: b::PortSpace,
        qp_type: b::CmQpType,
        user_ctx: u64,
    ) -> b::Result<b::CmIdNo> {
        self.0.create_id(chan, ps, qp_type, user_ctx).map_err(err)
    }
    fn destroy_id(&self, id: b::CmIdNo) -> b::Result<u32> {
        match self.0.destroy_id(id) {
            // the ID went with its device
            Err(softrnic::Error::DeviceGone) => Ok(0),
            r => r.map_err(err),
        }
    }
    fn bind(&self, id: b::CmIdNo, addr: SocketAddr) -> b::Result<b::Bound> {
        self.0.bind(id, addr).map_err(err)
    }
    fn resolve_addr(
        &self,
        id: b::CmIdNo,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> b::Result<()> {
        self.0.resolve_addr(id, src, dst, timeout_ms).map_err(err)
    }
    fn resolve_route(&self, id: b::CmIdNo, timeout_ms: u32) -> b::Result<()> {
        self.0.resolve_route(id, timeout_ms).map_err(err)
    }
    fn query(&self, id: b::CmIdNo) -> b::Result<b::IdInfo> {
        self.0.query(id).map_err(err)
    }
    fn listen(&self, id: b::CmIdNo, backlog: u32) -> b::Result<()> {
        self.0.listen(id, backlog).map_err(err)
    }
    fn connect(&self, id: b::CmIdNo, p: &b::ConnParam) -> b::Result<()> {
        self.0.connect(id, p).map_err(err)
    }
    fn accept(&self, id: b::CmIdNo, p: &b::ConnParam) -> b::Result<()> {
        self.0.accept(id, p).map_err(err)
    }
    fn reject(&self, id: b::CmIdNo, private_data: &[u8]) -> b::Result<()> {
        self.0.reject(id, private_data).map_err(err)
    }
    fn disconnect(&self, id: b::CmIdNo) -> b::Result<()> {
        self.0.disconnect(id).map_err(err)
    }
    fn init_qp_attr(&self, id: b::CmIdNo, state: b::QpState) -> b::Result<(b::QpAttr, u32)> {
        self.0.init_qp_attr(id, state).map_err(err)
    }
    fn establish(&self, id: b::CmIdNo) -> b::Result<()> {
        self.0.establish(id).map_err(err)
    }
    fn notify(&self, id: b::CmIdNo, event: u32) -> b::Result<()> {
        self.0.notify(id, event).map_err(err)
    }
    fn migrate_id(&self, id: b::CmIdNo, chan: u64) -> b::Result<u32> {
        self.0.migrate_id(id, chan).map_err(err)
    }
}
