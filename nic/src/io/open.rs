//! Opening a port on a network interface: AF_XDP when it can be had,
//! else AF_PACKET, or the backend asked for.

use super::afpacket::{AfPacketError, AfPacketPort, RingConfig, TpacketVersion};
use super::afxdp::{AfXdpConfig, AfXdpError, AfXdpPort};
use super::Port;

/// Which kind of port [`open_port`] opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP if it opens, else AF_PACKET with TPACKET_V2 rings (saying
    /// why on stderr).
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

/// What [`open_port_with`] may choose besides the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// AF_PACKET (TPACKET_V2): trains of frames go out as UDP GSO
    /// super-frames, where the kernel has it ([`RingConfig::gso`]). A
    /// capture on the interface (tcpdump) then shows super-frames, not
    /// the frames segmentation makes of them.
    pub gso: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { gso: true }
    }
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
    let packet = |v: TpacketVersion| {
        let cfg = RingConfig {
            gso: opts.gso,
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
