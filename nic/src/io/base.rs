//! What every port keeps and reports alike: its MAC, MTU, link speed and
//! the frames it counted itself. A port holds a [`PortBase`], forwards the
//! [`Port`](super::Port) methods to it
//! (`forward_port!(field base: mac, mtu, link_speed_bps)`) and writes only
//! what it adds (drops the kernel counted, its link state).

use super::iface::Interface;
use super::PortCounters;
use wire::EthernetAddress;

/// Link speed of a port on an interface until it is told otherwise: what
/// veth reports (pause quanta and pacing are computed at it).
pub const IFACE_SPEED_BPS: u64 = 10_000_000_000;
/// MTU of a port on a software wire (the in-memory pair, a replay).
pub const WIRE_MTU: usize = 9000;
/// Link speed of a port on a software wire.
pub const WIRE_SPEED_BPS: u64 = 100_000_000_000;

/// A port's MAC, MTU, link speed and own counters.
#[derive(Clone, Debug)]
pub struct PortBase {
    pub mac: EthernetAddress,
    /// Largest IP datagram (the interface MTU).
    pub mtu: usize,
    /// Bits per second: the device's DCQCN line rate and PFC quantum
    /// length follow it.
    pub speed: u64,
    /// What the port counted itself (not the kernel's drops).
    pub counters: PortCounters,
}

impl PortBase {
    pub fn new(mac: EthernetAddress, mtu: usize, speed: u64) -> PortBase {
        PortBase {
            mac,
            mtu,
            speed,
            counters: PortCounters::default(),
        }
    }

    /// A port on a software wire: [`WIRE_MTU`], [`WIRE_SPEED_BPS`].
    pub fn wire(mac: EthernetAddress) -> PortBase {
        PortBase::new(mac, WIRE_MTU, WIRE_SPEED_BPS)
    }

    /// A port on `iface`: its MAC and MTU, at [`IFACE_SPEED_BPS`].
    pub fn of(iface: &Interface) -> PortBase {
        PortBase::new(iface.mac, iface.mtu, IFACE_SPEED_BPS)
    }

    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    pub fn mtu(&self) -> usize {
        self.mtu
    }

    pub fn link_speed_bps(&self) -> u64 {
        self.speed
    }

    pub fn counters(&self) -> PortCounters {
        self.counters.clone()
    }

    /// The port's counters with the frames dropped where it does not count
    /// them itself (the kernel, the other end of a queue) added in.
    pub fn counters_with_drops(&self, rx_dropped: u64, tx_dropped: u64) -> PortCounters {
        let mut c = self.counters.clone();
        c.rx_dropped += rx_dropped;
        c.tx_dropped += tx_dropped;
        c
    }
}
