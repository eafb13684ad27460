//! Typed parse errors. Every way a frame can be refused has its own variant so
//! that the NIC can count drops by reason (`Error::reason` gives a stable
//! counter name) and tools can say exactly what was wrong.

use core::fmt;

/// The protocol layer at which parsing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The Ethernet II header (MAC addresses, EtherType).
    Ethernet,
    /// The 802.1Q VLAN tag.
    Vlan,
    /// An 802.3 MAC control frame (PAUSE, PFC).
    MacControl,
    /// The IPv4 header (RFC 791).
    Ipv4,
    /// The IPv6 fixed header (RFC 8200).
    Ipv6,
    /// The UDP header (RFC 768).
    Udp,
    /// The Base Transport Header, IBA 9.2.
    Bth,
    /// One of the extension headers that follow the BTH (RETH, AETH, ...).
    ExtHeader,
    /// The payload after the headers, or a frame being emitted.
    Payload,
    /// The invariant CRC that ends the packet, IBA 7.8.1.
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
    /// A header or the packet ends before the bytes its layout requires.
    #[error("{layer}: truncated, need {need} bytes, have {have}")]
    Truncated {
        /// The header that did not fit.
        layer: Layer,
        /// Bytes required from the start of that header.
        need: usize,
        /// Bytes available from the start of that header.
        have: usize,
    },
    /// The EtherType (after any 802.1Q tag) is not 0x0800, 0x86DD or 0x8808.
    #[error("Ethernet: EtherType {0:#06x} is neither IPv4, IPv6 nor MAC control")]
    UnsupportedEtherType(u16),
    /// The IPv4 Version field is not 4 (RFC 791 3.1).
    #[error("IPv4: version field is {0}, expected 4")]
    Ipv4BadVersion(u8),
    /// IHL × 4 is below the 20-byte minimum header (RFC 791 3.1).
    #[error("IPv4: header length {0} bytes is invalid")]
    Ipv4BadHeaderLen(usize),
    /// IHL is above 5: the header carries options, which RoCEv2 does not use.
    #[error("IPv4: options are not used by RoCEv2 and are not supported")]
    Ipv4Options,
    /// The IPv4 header checksum does not verify (RFC 791 3.1).
    #[error("IPv4: header checksum {found:#06x} is wrong, expected {expected:#06x}")]
    Ipv4BadChecksum {
        /// Checksum carried in the header.
        found: u16,
        /// Checksum computed over the header.
        expected: u16,
    },
    /// Total Length is shorter than the header or longer than the frame.
    #[error("IPv4: total length {total} does not fit the {have}-byte frame")]
    Ipv4BadTotalLen {
        /// The Total Length field, in bytes.
        total: usize,
        /// Bytes present from the start of the IPv4 header.
        have: usize,
    },
    /// MF is set or the fragment offset is non-zero: a fragment, which a
    /// RoCEv2 packet never is.
    #[error("IPv4: fragments are not allowed for RoCEv2")]
    Ipv4Fragment,
    /// The IPv6 Version field is not 6 (RFC 8200 3).
    #[error("IPv6: version field is {0}, expected 6")]
    Ipv6BadVersion(u8),
    /// The fixed header and Payload Length run past the end of the frame.
    #[error("IPv6: payload length {payload} does not fit the {have}-byte frame")]
    Ipv6BadPayloadLen {
        /// The Payload Length field, in bytes.
        payload: usize,
        /// Bytes present from the start of the IPv6 header.
        have: usize,
    },
    /// The IPv4 Protocol or IPv6 Next Header is not 17 (UDP).
    #[error("IP: next protocol {0} is not UDP")]
    NotUdp(u8),
    /// The UDP destination port is not 4791, the RoCEv2 port (RoCEv2 A17.2.2).
    #[error("UDP: destination port {0} is not RoCEv2 (4791)")]
    NotRoce(u16),
    /// The UDP Length field disagrees with the length the IP header gives.
    #[error("UDP: length {udp} disagrees with the IP length {ip}")]
    UdpBadLength {
        /// The UDP Length field, header included.
        udp: usize,
        /// The IP payload length the UDP datagram must fill.
        ip: usize,
    },
    /// A non-zero UDP checksum does not verify (RFC 768).
    #[error("UDP: checksum {0:#06x} is wrong")]
    UdpBadChecksum(u16),
    /// The BTH TVer field is not 0 (IBA 9.2).
    #[error("BTH: transport header version {0} is not 0")]
    BadTver(u8),
    /// The BTH OpCode is not in the table of [`crate::opcode`].
    #[error("BTH: opcode {0:#04x} is not a known RC, UC, UD or CNP opcode")]
    UnknownOpcode(u8),
    /// The payload length or pad count breaks the opcode's rule: not a
    /// multiple of four, pad larger than the payload, a payload where the
    /// opcode has none, or not the exact size the opcode fixes (IBA 9.2).
    #[error("payload: {len} bytes with pad count {pad} is invalid for {opcode}")]
    BadLength {
        /// Name of the opcode, as in the IBA opcode table.
        opcode: &'static str,
        /// Bytes between the headers and the ICRC, pad included.
        len: usize,
        /// The BTH PadCnt field (0-3).
        pad: u8,
    },
    /// The ICRC at the end of the packet does not match (IBA 7.8.1).
    #[error("ICRC: found {found:#010x}, computed {expected:#010x}")]
    BadIcrc {
        /// ICRC carried in the packet.
        found: u32,
        /// ICRC computed over the masked packet.
        expected: u32,
    },
    /// An 802.3 MAC control opcode other than PAUSE (0x0001) or PFC (0x0101).
    #[error("MAC control: opcode {0:#06x} is neither PAUSE nor PFC")]
    UnknownMacControl(u16),
    /// A MAD payload longer than 256 bytes (IBA 13.4.1); a shorter one is
    /// [`Error::Truncated`].
    #[error("MAD: {0} bytes; a management datagram is 256")]
    BadMadLength(usize),
    /// The output buffer of an `emit` is shorter than the frame.
    #[error("emit: buffer of {have} bytes is too small, need {need}")]
    BufferTooSmall {
        /// Bytes the emitted frame needs.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
    /// A repr that cannot be emitted (e.g. an unknown opcode, or a payload
    /// its opcode does not allow); the text says which rule it breaks.
    #[error("emit: {0}")]
    InvalidRepr(&'static str),
}

/// Why a frame was refused, without the details: what drop counters are
/// kept by. Each has a stable, counter-friendly name ([`Reason::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// [`Error::Truncated`], at any layer.
    Truncated,
    /// [`Error::UnsupportedEtherType`].
    NotIp,
    /// [`Error::Ipv4BadVersion`] or [`Error::Ipv6BadVersion`].
    BadIpVersion,
    /// [`Error::Ipv4BadHeaderLen`] or [`Error::Ipv4Options`].
    BadIpHeader,
    /// [`Error::Ipv4BadChecksum`].
    BadIpChecksum,
    /// [`Error::Ipv4BadTotalLen`] or [`Error::Ipv6BadPayloadLen`].
    BadIpLength,
    /// [`Error::Ipv4Fragment`].
    IpFragment,
    /// [`Error::NotUdp`].
    NotUdp,
    /// [`Error::NotRoce`].
    NotRoce,
    /// [`Error::UdpBadLength`].
    BadUdpLength,
    /// [`Error::UdpBadChecksum`].
    BadUdpChecksum,
    /// [`Error::BadTver`].
    BadTver,
    /// [`Error::UnknownOpcode`].
    UnknownOpcode,
    /// [`Error::BadLength`].
    BadLength,
    /// [`Error::BadIcrc`].
    IcrcError,
    /// [`Error::UnknownMacControl`].
    UnknownMacControl,
    /// [`Error::BadMadLength`].
    BadMadLength,
    /// [`Error::BufferTooSmall`] or [`Error::InvalidRepr`]: a frame that
    /// could not be built rather than one refused on receive.
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

/// The result of every parse and emit in this crate.
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
