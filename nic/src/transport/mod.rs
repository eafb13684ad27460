//! The per-QP transport, sans-I/O: each QP's requester builds request
//! packets, its responder checks and executes requests and owes responses,
//! its completer retires send WQEs on responses and timers (the split of
//! Linux rxe). Time comes in as `now`; nothing here reads a clock, opens a
//! socket or spawns a thread. [`crate::device::Rnic`] owns the QPs and
//! drives them.
//!
//! - `qp`: the QP, its attributes, its queues and the three roles it owns
//!   (`Requester`, `Responder`, `Completer`);
//! - `header`: the header template of a QP's frames;
//! - `qp_ops`: what the device asks of a QP — `modify`, `post_send`, the
//!   routing of packets, timers and transmit turns to the roles, and the
//!   error and flush rules that apply the faults they report;
//! - `requester`, `responder`, `completer`: the three roles, each a state
//!   machine owning its state, with `handle_*` inputs and `poll_*` outputs,
//!   seeing the rest of the QP through a context (`SendCtx`, `RespCtx`);
//! - `sq`: the send queue the requester and completer share, and
//!   `SendCtx`;
//! - `resources`: the tables the roles work against (memory, CQs, SRQs,
//!   events, drop counts) and the one place frames are built;
//! - `frame`: emitting a frame with its payload gathered from memory;
//! - `congestion`, `timers`, `counters`: DCQCN/PFC hooks, the deadline
//!   index, the rdma-statistic counters.

mod completer;
pub(crate) mod congestion;
pub mod counters;
mod frame;
mod header;
mod qp;
mod qp_ops;
mod requester;
pub(crate) mod resources;
mod responder;
mod sq;
pub mod timers;

pub use congestion::{CcConfig, PfcTxConfig, READ_BURST_BYTES};
pub use counters::Counters;
pub use header::HeaderTemplate;
pub(crate) use qp::Qp;
pub use qp::QpInit;
pub(crate) use resources::Resources;

use wire::{EthernetAddress, Gid};

/// First QPN handed out (QPs 0 and 1 are the IB management QPs).
pub const FIRST_QPN: u32 = 0x11;
/// A buffer of this many bytes holds any frame the transport sends
/// (VLAN + IPv6 + UDP + BTH + the largest header set + 4096 B + pad + ICRC).
pub const MAX_FRAME_LEN: usize = 18 + 40 + 8 + 12 + 32 + 4096 + 4 + 4;
/// The longest message, and the largest RETH DMA length, there is: 2^31
/// bytes (C9-94; the port's max_msg_sz).
pub const MAX_MSG_LEN: u64 = 1 << 31;

/// Device-wide settings.
#[derive(Clone, Debug)]
pub struct RnicConfig {
    pub mac: EthernetAddress,
    pub gid: Gid,
    /// Seeds key generation (and nothing else).
    pub seed: u64,
    /// Most PSNs a requester leaves unacknowledged.
    pub max_unacked_psns: u32,
    /// A requester asks for an ACK at least every this many packets.
    pub ack_every: u32,
    /// Simulation only: never give up retrying (retry_cnt is ignored).
    pub unlimited_retries: bool,
    /// DCQCN, CNPs, ECN marking and PFC.
    pub cc: CcConfig,
    /// Link speed (bit/s): the DCQCN line rate and the PFC quantum length.
    pub link_bps: u64,
    /// The port's active MTU (`ibv_port_attr.active_mtu`, one of
    /// [`crate::verbs::MTUS`]): the largest payload one packet carries on
    /// this port. UD QPs have no path MTU attribute (the INIT→RTR row for
    /// UD in IBA Table 93 has none) and use this one: a UD message is a
    /// single SEND ONLY packet (IBA 9.8, unreliable service), so it is also
    /// the largest UD message. A device on an
    /// interface sets it from the interface MTU as rxe does (the largest
    /// IB MTU that fits with the RoCEv2 headers); 4096 otherwise.
    pub port_mtu: u32,
}

impl RnicConfig {
    pub fn new(mac: EthernetAddress, gid: Gid) -> RnicConfig {
        RnicConfig {
            mac,
            gid,
            seed: 0x5eed,
            max_unacked_psns: 128,
            ack_every: 64,
            unlimited_retries: false,
            cc: CcConfig::default(),
            link_bps: 100_000_000_000,
            port_mtu: 4096,
        }
    }
}
