//! RDMA netlink's device commands (`nldev`, `<rdma/rdma_netlink.h>`) for a
//! fixed table of devices, answered as the kernel's
//! `drivers/infiniband/core/nldev.c` answers them for an rxe device on
//! the same netdev: what iproute2's `rdma link` and `rdma dev` read.
//!
//! Pure: [`answer()`] takes one datagram a program sent to the kernel and
//! gives the datagrams the kernel would queue for it; [`table`] is the
//! device table and its text form (how `rnic exec` hands it to the
//! netlink shim, `nlshim/`); [`msg`] the netlink framing both use.

pub mod answer;
pub mod msg;
pub mod table;

pub use answer::{answer, SockOpts};
pub use table::{Device, Netdev, TableError};
