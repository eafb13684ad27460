//! The fabric's configuration (links, switch, RED/ECN, PFC, flows), the
//! frame sizes it counts on the wire, and what a run records (transmitted
//! frames, samples).

use nic::cc::{DcqcnParams, NpParams, Qos};
use nic::Instant;

use std::time::Duration;
use wire::MacControl;

/// The Ethernet frame check sequence: on the wire, in no buffer.
pub(super) const FCS_LEN: usize = 4;
/// Bytes a data frame adds to its payload (Eth, IPv4, UDP, BTH, ICRC, FCS).
pub const DATA_OVERHEAD: u64 = (wire::ethernet::HEADER_LEN
    + wire::ipv4::HEADER_LEN
    + wire::udp::HEADER_LEN
    + wire::bth::HEADER_LEN
    + wire::icrc::ICRC_LEN
    + FCS_LEN) as u64;
/// A CNP frame (a data frame whose payload is the CNP's 16 reserved bytes).
pub const CNP_FRAME: u64 = DATA_OVERHEAD + wire::Header::CnpReserved.len() as u64;
/// A PFC frame (the minimum Ethernet frame and its FCS).
pub const PFC_FRAME: u64 = (wire::ethernet::MIN_FRAME_LEN + FCS_LEN) as u64;
/// Preamble, start delimiter and inter-frame gap.
pub const WIRE_EXTRA: u64 = 20;

/// RED/ECN marking: probability 0 up to `kmin_bytes`, rising linearly to
/// `pmax` at `kmax_bytes`, 1 beyond (the DCQCN paper's switch setting).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Red {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
}

impl Red {
    /// Kmin 5 KB, Kmax 200 KB, Pmax 1 % (SIGCOMM'15, 40 Gb/s).
    pub const fn sigcomm15() -> Red {
        Red {
            kmin_bytes: 5_000,
            kmax_bytes: 200_000,
            pmax: 0.01,
        }
    }

    /// The marking probability at a queue of `q` bytes.
    pub fn probability(&self, q: u64) -> f64 {
        if q <= self.kmin_bytes {
            0.0
        } else if q >= self.kmax_bytes {
            1.0
        } else {
            self.pmax * (q - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes) as f64
        }
    }
}

/// Switch PFC generation: per ingress port and priority.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SwitchPfc {
    pub xoff_bytes: u64,
    pub xon_bytes: u64,
    pub quanta: u16,
}

/// The switch.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct SwitchConfig {
    /// Buffer of each egress port, bytes; a frame that does not fit is dropped.
    pub buffer_bytes: u64,
    /// ECN marking of ECT packets; `None`: no marking.
    pub red: Option<Red>,
    /// PFC towards the senders; `None`: PFC off.
    pub pfc: Option<SwitchPfc>,
}

/// A whole fabric.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct FabricConfig {
    pub hosts: usize,
    /// Every link's rate, bits per second.
    pub link_bps: u64,
    /// One-way propagation delay of every link.
    pub prop_delay: Duration,
    /// Payload of a data packet (the path MTU), bytes.
    pub payload_bytes: u64,
    pub switch: SwitchConfig,
    /// DCQCN at the senders; `None`: reaction points disabled (CNPs are
    /// counted in `rp_cnp_ignored`, flows run at line rate).
    pub dcqcn: Option<DcqcnParams>,
    pub np: NpParams,
    pub qos: Qos,
    /// Seed of the switch's marking decisions.
    pub seed: u64,
    /// Period of [`Sample`]s; zero: none.
    pub sample_every: Duration,
    /// Record every frame a host starts ([`Fabric::tx_log`](super::Fabric::tx_log)).
    pub trace_tx: bool,
}

impl FabricConfig {
    /// `hosts` hosts on 40 Gb/s links with 1 µs propagation, 1024-byte
    /// payloads, a 1 MB buffer per port with the paper's RED setting, PFC
    /// off, DCQCN with the SIGCOMM'15 values.
    pub fn new(hosts: usize) -> FabricConfig {
        FabricConfig {
            hosts,
            link_bps: 40_000_000_000,
            prop_delay: Duration::from_micros(1),
            payload_bytes: 1024,
            switch: SwitchConfig {
                buffer_bytes: 1_000_000,
                red: Some(Red::sigcomm15()),
                pfc: None,
            },
            dcqcn: Some(DcqcnParams::sigcomm15()),
            np: NpParams::sigcomm15(),
            qos: Qos::default(),
            seed: 1,
            sample_every: Duration::from_micros(10),
            trace_tx: false,
        }
    }

    /// Goodput of one link when it carries back-to-back data packets.
    pub fn link_goodput_bps(&self) -> f64 {
        let frame = self.payload_bytes + DATA_OVERHEAD + WIRE_EXTRA;
        self.link_bps as f64 * self.payload_bytes as f64 / frame as f64
    }
}

/// One flow: `bytes` of payload from host `src` to host `dst`, from `start`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FlowSpec {
    pub src: usize,
    pub dst: usize,
    pub start: Instant,
    /// Payload bytes to send; `u64::MAX`: endless.
    pub bytes: u64,
    /// DSCP of its data; `None`: `Qos::data_dscp`.
    pub dscp: Option<u8>,
}

impl FlowSpec {
    pub fn endless(src: usize, dst: usize, start: Instant) -> FlowSpec {
        FlowSpec {
            src,
            dst,
            start,
            bytes: u64::MAX,
            dscp: None,
        }
    }
}

/// What a frame is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameKind {
    Data { flow: usize },
    Cnp { flow: usize },
    Pfc(MacControl),
}

/// A frame a host started to transmit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TxRecord {
    pub at: Instant,
    pub host: usize,
    pub prio: u8,
    pub kind: FrameKind,
    /// Until when it occupies the link.
    pub until: Instant,
}

/// The state of the fabric at one sampling instant.
#[derive(Clone, PartialEq, Debug)]
pub struct Sample {
    pub at: Instant,
    /// Each flow's reaction-point rate, bits per second.
    pub rate_bps: Vec<u64>,
    /// Each flow's delivered payload over the last period, bits per second.
    pub goodput_bps: Vec<f64>,
    /// Each switch port's queued bytes.
    pub queue_bytes: Vec<u64>,
}
