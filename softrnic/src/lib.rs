//! softrnic: the client library applications link to use an `rnicd`
//! device. See README.md.
//!
//! - [`client`]: the Rust verbs API (device, PD, MR, CQ, QP, post, poll).
//! - [`capi`]: the C API (`include/softrnic.h`, `libsoftrnic.so`).
//! - [`usermem`]: registering the process's own memory (pages moved onto
//!   shared memory at the same address).
//! - [`proto`], [`ring`], [`shm`], [`doorbell`]: the `ipc` crate's
//!   protocol, rings, shared memory and doorbell pages, which the client
//!   API hands out (raw ring entries, CM messages).

pub mod capi;
pub mod client;
pub mod usermem;

pub use ipc::{doorbell, proto, ring, shm};

pub use client::{
    Ah, Buffer, ConnectParams, Context, Cq, DeviceInfo, Error, Mr, Mw, Pd, PortInfo, ProtocolError,
    Qp, QpInfo, QpInitAttr, Srq, ACCESS_ALL, PORT_ACTIVE, PORT_DOWN,
};
pub use proto::{QpKind, Stats};
