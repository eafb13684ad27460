//! Typed parse errors. Every way a frame can be refused has its own variant so
//! that the NIC can count drops by reason (`Error::reason` gives a stable
//! counter name) and tools can say exactly what was wrong.

use core::fmt;

/// The protocol layer at which parsing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Ethernet,
    Vlan,
    MacControl,
    Ipv4,
    Ipv6,
    Udp,
    Bth,
    /// One of the extension headers that follow the BTH (RETH, AETH, ...).
    ExtHeader,
    Payload,
    Icrc,
    /// A management datagram to QP1 (its common header or class data).
    Mad,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q",
            Layer::MacControl => "MAC control",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
            Layer::Bth => "BTH",
            Layer::ExtHeader => "extension header",
            Layer::Payload => "payload",
            Layer::Icrc => "ICRC",
            Layer::Mad => "MAD",
        })
    }
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    #[error("{layer}: truncated, need {need} bytes, have {have}")]
    Truncated {
        layer: Layer,
        need: usize,
        have: usize,
    },
    #[error("Ethernet: EtherType {0:#06x} is neither IPv4, IPv6 nor MAC control")]
    UnsupportedEtherType(u16),
    #[error("IPv4: version field is {0}, expected 4")]
    Ipv4BadVersion(u8),
    #[error("IPv4: header length {0} bytes is invalid")]
    Ipv4BadHeaderLen(usize),
    #[error("IPv4: options are not used by RoCEv2 and are not supported")]
    Ipv4Options,
    #[error("IPv4: header checksum {found:#06x} is wrong, expected {expected:#06x}")]
    Ipv4BadChecksum { found: u16, expected: u16 },
    #[error("IPv4: total length {total} does not fit the {have}-byte frame")]
    Ipv4BadTotalLen { total: usize, have: usize },
    #[error("IPv4: fragments are not allowed for RoCEv2")]
    Ipv4Fragment,
    #[error("IPv6: version field is {0}, expected 6")]
    Ipv6BadVersion(u8),
    #[error("IPv6: payload length {payload} does not fit the {have}-byte frame")]
    Ipv6BadPayloadLen { payload: usize, have: usize },
    #[error("IP: next protocol {0} is not UDP")]
    NotUdp(u8),
    #[error("UDP: destination port {0} is not RoCEv2 (4791)")]
    NotRoce(u16),
    #[error("UDP: length {udp} disagrees with the IP length {ip}")]
    UdpBadLength { udp: usize, ip: usize },
    #[error("UDP: checksum {0:#06x} is wrong")]
    UdpBadChecksum(u16),
    #[error("BTH: transport header version {0} is not 0")]
    BadTver(u8),
    #[error("BTH: opcode {0:#04x} is not a known RC, UC, UD or CNP opcode")]
    UnknownOpcode(u8),
    #[error("payload: {len} bytes with pad count {pad} is invalid for {opcode}")]
    BadLength {
        opcode: &'static str,
        len: usize,
        pad: u8,
    },
    #[error("ICRC: found {found:#010x}, computed {expected:#010x}")]
    BadIcrc { found: u32, expected: u32 },
    #[error("MAC control: opcode {0:#06x} is neither PAUSE nor PFC")]
    UnknownMacControl(u16),
    #[error("MAD: {0} bytes; a management datagram is 256")]
    BadMadLength(usize),
    #[error("emit: buffer of {have} bytes is too small, need {need}")]
    BufferTooSmall { need: usize, have: usize },
    #[error("emit: {0}")]
    InvalidRepr(&'static str),
}

/// Why a frame was refused, without the details: what drop counters are
/// kept by. Each has a stable, counter-friendly name ([`Reason::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    Truncated,
    NotIp,
    BadIpVersion,
    BadIpHeader,
    BadIpChecksum,
    BadIpLength,
    IpFragment,
    NotUdp,
    NotRoce,
    BadUdpLength,
    BadUdpChecksum,
    BadTver,
    UnknownOpcode,
    BadLength,
    IcrcError,
    UnknownMacControl,
    BadMadLength,
    EmitError,
}

impl Reason {
    /// The stable counter name, e.g. `icrc_error`.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Truncated => "truncated",
            Reason::NotIp => "not_ip",
            Reason::BadIpVersion => "bad_ip_version",
            Reason::BadIpHeader => "bad_ip_header",
            Reason::BadIpChecksum => "bad_ip_checksum",
            Reason::BadIpLength => "bad_ip_length",
            Reason::IpFragment => "ip_fragment",
            Reason::NotUdp => "not_udp",
            Reason::NotRoce => "not_roce",
            Reason::BadUdpLength => "bad_udp_length",
            Reason::BadUdpChecksum => "bad_udp_checksum",
            Reason::BadTver => "bad_tver",
            Reason::UnknownOpcode => "unknown_opcode",
            Reason::BadLength => "bad_length",
            Reason::IcrcError => "icrc_error",
            Reason::UnknownMacControl => "unknown_mac_control",
            Reason::BadMadLength => "bad_mad_length",
            Reason::EmitError => "emit_error",
        }
    }
}

impl Error {
    /// What kind of refusal this is (the key drop counters are kept by).
    pub fn kind(&self) -> Reason {
        match self {
            Error::Truncated { .. } => Reason::Truncated,
            Error::UnsupportedEtherType(_) => Reason::NotIp,
            Error::Ipv4BadVersion(_) | Error::Ipv6BadVersion(_) => Reason::BadIpVersion,
            Error::Ipv4BadHeaderLen(_) | Error::Ipv4Options => Reason::BadIpHeader,
            Error::Ipv4BadChecksum { .. } => Reason::BadIpChecksum,
            Error::Ipv4BadTotalLen { .. } | Error::Ipv6BadPayloadLen { .. } => Reason::BadIpLength,
            Error::Ipv4Fragment => Reason::IpFragment,
            Error::NotUdp(_) => Reason::NotUdp,
            Error::NotRoce(_) => Reason::NotRoce,
            Error::UdpBadLength { .. } => Reason::BadUdpLength,
            Error::UdpBadChecksum(_) => Reason::BadUdpChecksum,
            Error::BadTver(_) => Reason::BadTver,
            Error::UnknownOpcode(_) => Reason::UnknownOpcode,
            Error::BadLength { .. } => Reason::BadLength,
            Error::BadIcrc { .. } => Reason::IcrcError,
            Error::UnknownMacControl(_) => Reason::UnknownMacControl,
            Error::BadMadLength(_) => Reason::BadMadLength,
            Error::BufferTooSmall { .. } | Error::InvalidRepr(_) => Reason::EmitError,
        }
    }

    /// A stable, counter-friendly name for the reason, e.g. `icrc_error`.
    pub fn reason(&self) -> &'static str {
        self.kind().name()
    }

    /// The layer the error belongs to.
    pub fn layer(&self) -> Layer {
        match self {
            Error::Truncated { layer, .. } => *layer,
            Error::UnsupportedEtherType(_) => Layer::Ethernet,
            Error::Ipv4BadVersion(_)
            | Error::Ipv4BadHeaderLen(_)
            | Error::Ipv4Options
            | Error::Ipv4BadChecksum { .. }
            | Error::Ipv4BadTotalLen { .. }
            | Error::Ipv4Fragment => Layer::Ipv4,
            Error::Ipv6BadVersion(_) | Error::Ipv6BadPayloadLen { .. } => Layer::Ipv6,
            Error::NotUdp(_) => Layer::Ipv4,
            Error::NotRoce(_) | Error::UdpBadLength { .. } | Error::UdpBadChecksum(_) => Layer::Udp,
            Error::BadTver(_) | Error::UnknownOpcode(_) => Layer::Bth,
            Error::BadLength { .. } => Layer::Payload,
            Error::BadIcrc { .. } => Layer::Icrc,
            Error::UnknownMacControl(_) => Layer::MacControl,
            Error::BadMadLength(_) => Layer::Mad,
            Error::BufferTooSmall { .. } | Error::InvalidRepr(_) => Layer::Payload,
        }
    }
}

pub type Result<T> = core::result::Result<T, Error>;

/// Check that `buf` holds at least `need` bytes.
#[inline]
pub(crate) fn need(layer: Layer, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            layer,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}
