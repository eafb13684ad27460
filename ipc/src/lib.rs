//! ipc: what crosses between a client process and `rnicd`. Both sides
//! depend on this crate and on nothing of each other's.
//!
//! - [`proto`]: the control protocol (requests, responses, CM messages)
//!   on a `SOCK_SEQPACKET` socket, and its conversions to the verbs types.
//! - [`ring`]: the layouts of the shared-memory work-queue and completion
//!   rings and the encoding of their entries.
//! - [`shm`]: memfd mappings, the control socket and passing descriptors.
//! - [`doorbell`]: a client's doorbell page (one bit per ring, one parked
//!   word the engine raises before it sleeps).

pub mod doorbell;
pub mod proto;
pub mod ring;
pub mod shm;
