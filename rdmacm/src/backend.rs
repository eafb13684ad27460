//! What this library needs from the connection manager in rnicd: the shape
//! of `softrnic::client::cm` (a command per verb on a device's
//! [`DeviceCm`], events on a [`CmChannel`] whose descriptor is readable
//! exactly when an event is queued), behind a trait so that the library's
//! logic (IDs, events, acknowledgements) runs the same on the daemon and
//! on the in-process fake of the unit tests.
//!
//! The types are the client API's; an adapter over `softrnic::client::cm` (`rnicd.rs`)
//! implements [`CmBackend`];
//! [`Unavailable`] answers every command with ENODEV.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

/// The client API's own types, which the library takes as they are: ID
/// numbers, port spaces, QP types, connection parameters, where `bind` put
/// an ID, what `query` tells of one, events and their parameters, the QP
/// states
/// `init_qp_attr` is asked for and the attributes it answers (each present
/// one is in the mask, `enum ibv_qp_attr_mask` bits).
pub use softrnic::client::cm::{
    Bound, CmEventKind, CmEventMsg, CmIdNo, CmQpType, ConnEventParam, ConnParam, IdInfo, PortSpace,
    QpAttr, QpState, UdEventParam,
};

/// Why the daemon refused a command: the errno the caller sees and the
/// daemon's reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub struct BackendError {
    pub errno: i32,
    pub why: String,
}

impl BackendError {
    pub fn new(errno: i32, why: impl Into<String>) -> BackendError {
        BackendError {
            errno,
            why: why.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// An event channel on one device.
pub trait CmChannel: Send + Sync {
    /// Readable exactly when an event is queued.
    fn fd(&self) -> RawFd;
    /// Names the channel in `create_id` and `migrate_id`.
    fn token(&self) -> u64;
    /// The next event; `None` when `nonblocking` and none is queued;
    /// ENODEV once the device is gone (rnicd killed or crashed) and every
    /// event it queued was taken.
    fn next(&self, nonblocking: bool) -> Result<Option<CmEventMsg>>;
}

/// The CM commands on one device (`softrnic::client::cm::CmClient`).
pub trait DeviceCm: Send + Sync {
    fn create_id(
        &self,
        chan: u64,
        ps: PortSpace,
        qp_type: CmQpType,
        user_ctx: u64,
    ) -> Result<CmIdNo>;
    fn destroy_id(&self, id: CmIdNo) -> Result<u32>;
    fn bind(&self, id: CmIdNo, addr: SocketAddr) -> Result<Bound>;
    fn resolve_addr(
        &self,
        id: CmIdNo,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> Result<()>;
    fn resolve_route(&self, id: CmIdNo, timeout_ms: u32) -> Result<()>;
    fn query(&self, id: CmIdNo) -> Result<IdInfo>;
    fn listen(&self, id: CmIdNo, backlog: u32) -> Result<()>;
    fn connect(&self, id: CmIdNo, p: &ConnParam) -> Result<()>;
    fn accept(&self, id: CmIdNo, p: &ConnParam) -> Result<()>;
    fn reject(&self, id: CmIdNo, private_data: &[u8]) -> Result<()>;
    fn disconnect(&self, id: CmIdNo) -> Result<()>;
    fn init_qp_attr(&self, id: CmIdNo, state: QpState) -> Result<(QpAttr, u32)>;
    fn establish(&self, id: CmIdNo) -> Result<()>;
    fn notify(&self, id: CmIdNo, event: u32) -> Result<()>;
    fn migrate_id(&self, id: CmIdNo, chan: u64) -> Result<u32>;
}

/// The connection manager: per device, the commands and event channels.
/// (Which device an address belongs to is libibverbs' answer: the
/// devices' GIDs, see `Lib::device_of`.)
pub trait CmBackend: Send + Sync {
    /// The command connection of device `dev`.
    fn device(&self, dev: &str) -> Result<Arc<dyn DeviceCm>>;
    /// A new event channel on device `dev`.
    fn open_channel(&self, dev: &str) -> Result<Arc<dyn CmChannel>>;
}

/// No connection manager: every command fails with ENODEV.
pub struct Unavailable;

impl CmBackend for Unavailable {
    fn device(&self, dev: &str) -> Result<Arc<dyn DeviceCm>> {
        Err(BackendError::new(
            libc::ENODEV,
            format!("no RDMA CM service for device {dev}"),
        ))
    }
    fn open_channel(&self, dev: &str) -> Result<Arc<dyn CmChannel>> {
        Err(BackendError::new(
            libc::ENODEV,
            format!("no RDMA CM service for device {dev}"),
        ))
    }
}
