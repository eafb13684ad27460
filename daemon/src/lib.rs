//! softrnic: the daemon that owns a soft-RNIC (`rnicd`) and the client
//! library applications link. See README.md for the design.
//!
//! - [`client`]: the Rust verbs API (device, PD, MR, CQ, QP, post, poll).
//! - [`capi`]: the C API (`include/softrnic.h`, `libsoftrnic.so`).
//! - [`server`]: the daemon side (control socket, clients, cleanup).
//! - [`dataplane`]: the engine hook that polls doorbells and fills CQ rings.
//! - [`ring`], [`shm`], [`proto`]: ring layouts, shared memory, messages.
//! - [`usermem`]: registering the process's own memory (pages moved onto
//!   shared memory at the same address).

pub mod capi;
pub mod client;
pub mod dataplane;
pub mod doorbell;
pub mod proto;
pub mod ring;
pub mod server;
pub mod shm;
pub mod usermem;

pub use client::{
    Ah, Buffer, ConnectParams, Context, Cq, DeviceInfo, Error, Mr, Mw, Pd, PortInfo, ProtocolError,
    Qp, QpInfo, QpInitAttr, Srq, ACCESS_ALL, PORT_ACTIVE, PORT_DOWN,
};
pub use proto::{QpKind, Stats};
