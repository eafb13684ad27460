//! Opening a port on a network interface: on a veth AF_PACKET with UDP
//! GSO, elsewhere AF_XDP when it can be had, else AF_PACKET; or the
//! backend asked for.

use super::afpacket::{AfPacketError, AfPacketPort, RingConfig, TpacketVersion};
use super::afxdp::{AfXdpConfig, AfXdpError, AfXdpPort};
use super::Port;

/// Which kind of port [`open_port`] opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// On a veth, AF_PACKET with TPACKET_V2 rings and UDP GSO (when the
    /// kernel has it and GSO is not off); elsewhere AF_XDP if it opens,
    /// else AF_PACKET with TPACKET_V2 rings (saying why on stderr).
    Auto,
    AfXdp,
    /// AF_PACKET with TPACKET_V2 rings: each frame handed over at once.
    AfPacket,
    /// AF_PACKET with TPACKET_V3 rings: frames handed over a block at a
    /// time, a block that does not fill only when its 1 ms retire timer
    /// expires.
    AfPacketV3,
}

/// Why no port could be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    AfXdp(#[from] AfXdpError),
    #[error(transparent)]
    AfPacket(#[from] AfPacketError),
    #[error("AF_XDP: {xdp}; AF_PACKET: {packet}")]
    Neither {
        xdp: AfXdpError,
        packet: AfPacketError,
    },
}

/// Whether an AF_PACKET port sends trains of frames as UDP GSO
/// super-frames ([`RingConfig::gso`]), where the kernel has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Gso {
    /// On a veth (no qdisc, so nothing is lost by leaving the qdisc
    /// bypass; the peer takes a super-frame whole), off elsewhere.
    #[default]
    Auto,
    On,
    Off,
}

/// What [`open_port_with`] may choose besides the backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// AF_PACKET (TPACKET_V2): UDP GSO. A capture on the interface
    /// (tcpdump) then shows super-frames, not the frames segmentation
    /// makes of them.
    pub gso: Gso,
}

/// Whether `ifname` is one end of a veth pair.
fn is_veth(ifname: &str) -> bool {
    super::iface::driver(ifname).as_deref() == Some("veth")
}

/// Whether an AF_PACKET port on `ifname` opened with `opts` sends UDP GSO
/// super-frames (the kernel permitting: [`super::afpacket::gso_available`]).
pub fn gso_wanted(ifname: &str, opts: OpenOptions) -> bool {
    gso_on(opts, is_veth(ifname))
}

/// [`gso_wanted`] for an interface already known to be a veth or not.
fn gso_on(opts: OpenOptions, veth: bool) -> bool {
    let on = match opts.gso {
        Gso::Auto => veth,
        Gso::On => true,
        Gso::Off => false,
    };
    on && super::afpacket::gso_available()
}

/// Opens a port on `ifname` (in the calling thread's namespace) with
/// default geometry; returns it and the backend that opened it.
pub fn open_port(ifname: &str, backend: Backend) -> Result<(Box<dyn Port>, Backend), OpenError> {
    open_port_with(ifname, backend, OpenOptions::default())
}

/// [`open_port`] with `opts`.
pub fn open_port_with(
    ifname: &str,
    backend: Backend,
    opts: OpenOptions,
) -> Result<(Box<dyn Port>, Backend), OpenError> {
    let veth = is_veth(ifname);
    let gso = gso_on(opts, veth);
    let packet = |v: TpacketVersion| {
        let cfg = RingConfig {
            gso,
            ..RingConfig::with_version(v)
        };
        AfPacketPort::open(ifname, cfg).map(|p| Box::new(p) as Box<dyn Port>)
    };
    match backend {
        Backend::AfXdp => Ok((
            Box::new(AfXdpPort::open(ifname, AfXdpConfig::default())?),
            Backend::AfXdp,
        )),
        Backend::AfPacket => Ok((packet(TpacketVersion::V2)?, Backend::AfPacket)),
        Backend::AfPacketV3 => Ok((packet(TpacketVersion::V3)?, Backend::AfPacketV3)),
        // On a veth AF_XDP runs in copy mode, and AF_PACKET with UDP GSO
        // moves a train per skb: 2-4x the bandwidth, latency alike
        // (BENCHMARKS.md, "UDP GSO over AF_PACKET").
        Backend::Auto if gso && veth => Ok((packet(TpacketVersion::V2)?, Backend::AfPacket)),
        Backend::Auto => match AfXdpPort::open(ifname, AfXdpConfig::default()) {
            Ok(p) => Ok((Box::new(p), Backend::AfXdp)),
            Err(xdp) => {
                eprintln!("softrnic: {ifname}: AF_XDP not used ({xdp}); falling back to AF_PACKET");
                match packet(TpacketVersion::V2) {
                    Ok(p) => Ok((p, Backend::AfPacket)),
                    Err(packet) => Err(OpenError::Neither { xdp, packet }),
                }
            }
        },
    }
}

/// [`open_port`] with [`Backend::Auto`]: the best port this machine offers.
pub fn open_best(ifname: &str) -> Result<Box<dyn Port>, OpenError> {
    open_port(ifname, Backend::Auto).map(|(p, _)| p)
}
