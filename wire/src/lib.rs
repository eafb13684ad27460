//! # wire — the RoCEv2 packet codec of softrnic
//!
//! Bytes in, typed packets out, and back; no I/O, no clock, no allocation on
//! the parse path. Modelled on smoltcp's `wire`: each header has a zero-copy
//! view (`*Packet`/`*Header`, `new_checked` validates lengths once so no
//! accessor can panic) and a plain `*Repr` with `parse` and `emit`.
//!
//! - [`ethernet`]: Ethernet II with an optional 802.1Q tag.
//! - [`ipv4`], [`ipv6`], [`udp`]: the RoCEv2 encapsulation (UDP port 4791,
//!   the Linux source-port rule [`udp::rdma_udp_sport`]).
//! - [`opcode`]: the one opcode table for RC, UC, UD and CNP.
//! - [`bth`], [`ext`]: the Base Transport Header and RETH, AETH, AtomicETH,
//!   AtomicAckETH, ImmDt, IETH, DETH, FETH.
//! - [`icrc`]: the invariant CRC over IPv4 and IPv6.
//! - [`crc_copy`]: copy and CRC-32 in one pass (a payload copied into its
//!   frame while the ICRC folds it in).
//! - [`roce`]: a whole frame ([`RocePacket`] view, [`RoceRepr`]), CNPs.
//! - [`emit`]: the one emitter, with the payload written into place.
//! - [`gso`]: trains of frames sent as one UDP GSO super-frame, and
//!   super-frames cut back into frames.
//! - [`sniff`]: a first look at any frame, trusting no length in it.
//! - [`mac_control`]: 802.3x PAUSE and 802.1Qbb PFC frames.
//! - [`mad`]: management datagrams to QP1 and the Communication Manager's
//!   messages (REQ, REP, RTU, REJ, MRA, DREQ, DREP), the RDMA IP CM
//!   service's private data.
//! - [`psn`], [`gid`]: 24-bit PSN arithmetic and GIDs.
//! - [`Frame`]: classify any received frame.
//!
//! The L2-L4 headers are implemented here rather than through etherparse so
//! that parse stays zero-copy and emit is byte-exact with the ICRC masks in
//! one pass; the tests use etherparse as an independent decoder.

#![deny(missing_docs)]

pub mod bth;
mod bytes;
pub mod crc_copy;
mod display;
pub mod emit;
pub mod error;
pub mod ethernet;
pub mod ext;
pub mod gid;
pub mod gso;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod mac_control;
pub mod mad;
pub mod opcode;
pub mod psn;
pub mod roce;
pub mod sniff;
pub mod udp;

pub use bth::BthRepr;
pub use error::{Error, Layer, Reason, Result};
pub use ethernet::{EthernetAddress, EthernetRepr, VlanTag};
pub use ext::{Aeth, AtomicEth, Deth, ExtHeaders, Feth, NakCode, Reth, Syndrome};
pub use gid::Gid;
pub use icrc::IpVersion;
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use mac_control::{MacControl, MacControlRepr};
pub use opcode::{
    Direction, Header, Opcode, OpcodeInfo, Operation, PayloadRule, Position, QpType, Transport,
};
pub use psn::Psn;
pub use roce::{mark_ce, pad_for, IpRepr, RocePacket, RoceRepr, UdpChecksum};
pub use udp::{UdpRepr, ROCEV2_PORT};

/// Any frame softrnic handles: RoCEv2, or a MAC control frame.
// A parsed frame lives on the stack for one dispatch; boxing the large
// variant would put an allocation on every received packet.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Frame<'a> {
    /// A RoCEv2 packet, parsed and ICRC-checked.
    Roce(RoceRepr<'a>),
    /// An 802.3x PAUSE or 802.1Qbb PFC frame.
    MacControl(MacControlRepr),
}

impl<'a> Frame<'a> {
    /// Classifies and fully parses (ICRC included) a received frame. Frames
    /// that are neither RoCEv2 nor MAC control give `UnsupportedEtherType`,
    /// `NotUdp` or `NotRoce`, which an engine passes to the kernel or counts.
    pub fn parse(frame: &'a [u8]) -> Result<Frame<'a>> {
        let eth = ethernet::EthernetFrame::new_checked(frame)?;
        if eth.ethertype() == ethernet::ethertype::MAC_CONTROL {
            return MacControlRepr::parse(frame).map(Frame::MacControl);
        }
        RoceRepr::parse(frame).map(Frame::Roce)
    }
}
