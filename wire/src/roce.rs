//! A whole RoCEv2 frame: Ethernet [802.1Q] / IPv4|IPv6 / UDP 4791 / BTH /
//! extension headers / payload / pad / ICRC.
//!
//! `RocePacket` is the zero-copy view: `new_checked` walks the headers once,
//! validating every length, so no accessor can panic afterwards. `RoceRepr`
//! is the plain description a transport builds and `emit`s (the emitter is
//! in `emit.rs`); `parse` fills it from a view without copying the
//! payload.
//!
//! Length: The view, the repr and parsing with the ICRC stay together (they
//! share the layout arithmetic); about 560 lines.

use crate::bth::{self, BthHeader, BthRepr};
use crate::error::{need, Error, Layer, Result};
use crate::ethernet::{self, ethertype, EthernetFrame, EthernetRepr};
use crate::ext::ExtHeaders;
use crate::icrc::{self, IpVersion, ICRC_LEN};
use crate::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::opcode::{Opcode, OpcodeInfo, PayloadRule};
use crate::udp::{self, UdpPacket, UdpRepr, ROCEV2_PORT};
use std::net::IpAddr;

/// The IP header of a RoCEv2 frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpRepr {
    /// RoCEv2 over IPv4 (EtherType 0x0800).
    V4(Ipv4Repr),
    /// RoCEv2 over IPv6 (EtherType 0x86DD).
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Which IP version the header is.
    pub fn version(&self) -> IpVersion {
        match self {
            IpRepr::V4(_) => IpVersion::V4,
            IpRepr::V6(_) => IpVersion::V6,
        }
    }
    /// The IP header's length: 20 bytes for IPv4, 40 for IPv6.
    pub fn header_len(&self) -> usize {
        self.version().header_len()
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src),
            IpRepr::V6(r) => IpAddr::V6(r.src),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst),
            IpRepr::V6(r) => IpAddr::V6(r.dst),
        }
    }
    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }
    /// ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }
    /// Sets the ECN codepoint (the low 2 bits of `ecn`).
    pub fn set_ecn(&mut self, ecn: u8) {
        match self {
            IpRepr::V4(r) => r.ecn = ecn & 3,
            IpRepr::V6(r) => r.ecn = ecn & 3,
        }
    }
    pub(crate) fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ethertype::IPV4,
            IpRepr::V6(_) => ethertype::IPV6,
        }
    }
}

/// What goes into the UDP checksum field.
///
/// Linux rxe sends 0 over IPv4 and IPv6 alike; RoCEv2 relies on the ICRC.
/// IPv6 (RFC 8200 8.1) only allows a zero UDP checksum for tunnels that opt
/// in (RFC 6935/6936), and Wireshark flags it, so softrnic sends a real
/// checksum over IPv6 by default (`UdpChecksum::default_for`) and accepts
/// both on receive, as rxe's tunnel socket does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UdpChecksum {
    /// The field is 0: no checksum.
    Zero,
    /// The checksum over the IP pseudo-header and the datagram (RFC 768).
    Computed,
}

impl UdpChecksum {
    /// What softrnic sends: `Zero` over IPv4, `Computed` over IPv6.
    pub fn default_for(ip: &IpRepr) -> UdpChecksum {
        match ip {
            IpRepr::V4(_) => UdpChecksum::Zero,
            IpRepr::V6(_) => UdpChecksum::Computed,
        }
    }
}

/// Marks an Ethernet frame's IPv4 or IPv6 header Congestion Experienced,
/// as an ECN-marking switch does (RoCEv2 A17.9: the notification point
/// answers CE-marked packets with CNPs). The ICRC masks the ECN bits
/// (A17.4.3.1), so it stays valid. False for a Not-ECT packet, a frame that is not IP, or one
/// too short to hold its IP header.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Ok(eth) = crate::ethernet::EthernetFrame::new_checked(&frame[..]) else {
        return false;
    };
    let (l3, et) = (eth.header_len(), eth.ethertype());
    match et {
        crate::ethernet::ethertype::IPV4 => crate::ipv4::mark_ce(&mut frame[l3..]),
        crate::ethernet::ethertype::IPV6 => crate::ipv6::mark_ce(&mut frame[l3..]),
        _ => false,
    }
}

/// The pad count that brings `len` payload bytes to a multiple of four.
#[inline]
pub const fn pad_for(len: usize) -> u8 {
    ((4 - (len & 3)) & 3) as u8
}

/// `N` bytes of `b` from `at`, as an array: a header view over it knows its
/// length at compile time, so its accessors need no bounds checks.
#[inline(always)]
fn fixed<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N]
        .try_into()
        .expect("lengths checked by new_checked")
}

/// A validated zero-copy view of a RoCEv2 frame.
#[derive(Debug, Clone, Copy)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
    version: IpVersion,
    ip_at: usize,
    udp_at: usize,
    bth_at: usize,
    payload_at: usize,
    payload_len: usize,
    icrc_at: usize,
    info: &'static OpcodeInfo,
}

/// Where the headers of a validated frame are: what `RocePacket::new_checked`
/// finds, computed by a non-generic function so that it is compiled once.
#[derive(Clone, Copy)]
struct Layout {
    version: IpVersion,
    ip_at: usize,
    udp_at: usize,
    bth_at: usize,
    payload_at: usize,
    payload_len: usize,
    icrc_at: usize,
    info: &'static OpcodeInfo,
}

impl Layout {
    /// Walks and validates every header and length of `b`, and the UDP
    /// checksum when it is not zero.
    ///
    /// Always inlined into `new_checked`, so that the layout stays in
    /// registers and the view is written once, straight into the caller's
    /// `Result` (returning it through memory costs store-forwarding stalls
    /// worth more than the header checks themselves).
    #[inline(always)]
    fn walk(b: &[u8]) -> Result<Layout> {
        let eth = EthernetFrame::new_checked(b)?;
        let ip_at = eth.header_len();
        let (version, ip_end) = match eth.ethertype() {
            ethertype::IPV4 => {
                let ip = Ipv4Packet::new_checked(&b[ip_at..])?;
                if ip.protocol() != ipv4::PROTOCOL_UDP {
                    return Err(Error::NotUdp(ip.protocol()));
                }
                (IpVersion::V4, ip_at + ip.total_len() as usize)
            }
            ethertype::IPV6 => {
                let ip = Ipv6Packet::new_checked(&b[ip_at..])?;
                if ip.next_header() != ipv6::NEXT_HEADER_UDP {
                    return Err(Error::NotUdp(ip.next_header()));
                }
                (
                    IpVersion::V6,
                    ip_at + ipv6::HEADER_LEN + ip.payload_len() as usize,
                )
            }
            other => return Err(Error::UnsupportedEtherType(other)),
        };
        let udp_at = ip_at + version.header_len();
        let udp = UdpPacket::new_checked(&b[udp_at..ip_end])?;
        // RoCEv2 A17.2.2: RoCEv2 packets are identified by UDP destination port 4791.
        if udp.dst_port() != ROCEV2_PORT {
            return Err(Error::NotRoce(udp.dst_port()));
        }
        let bth_at = udp_at + udp::HEADER_LEN;
        let bth = BthHeader::new_checked(&b[bth_at..ip_end])?;
        let info = bth
            .opcode()
            .info()
            .ok_or(Error::UnknownOpcode(bth.opcode().0))?;
        let ext_len = info.ext_len();
        let ext_at = bth_at + bth::HEADER_LEN;
        let payload_at = ext_at + ext_len;
        need(Layer::ExtHeader, &b[ext_at..ip_end], ext_len + ICRC_LEN)?;
        let icrc_at = ip_end - ICRC_LEN;
        let padded = icrc_at - payload_at;
        let pad = bth.pad() as usize;
        // IBA 9.2 (PadCnt): the pad brings the payload to a multiple of four
        // bytes; an opcode without payload carries neither payload nor pad.
        let ok = match info.payload {
            PayloadRule::None => padded == 0 && pad == 0,
            PayloadRule::Any => padded.is_multiple_of(4) && padded >= pad,
            PayloadRule::Exactly(n) => {
                padded.is_multiple_of(4) && padded >= pad && padded - pad == n as usize
            }
        };
        if !ok {
            return Err(Error::BadLength {
                opcode: info.name,
                len: padded,
                pad: bth.pad(),
            });
        }
        // Linux rxe sends a zero UDP checksum; only a non-zero one is checked.
        if udp.checksum() != 0 {
            check_udp_checksum(b, version, ip_at, udp_at, ip_end)?;
        }
        Ok(Layout {
            version,
            ip_at,
            udp_at,
            bth_at,
            payload_at,
            payload_len: padded - pad,
            icrc_at,
            info,
        })
    }
}

/// Verifies the non-zero UDP checksum of the datagram `b[udp_at..ip_end]`.
///
/// A checksum that holds just the pseudo-header's sum is a checksum left
/// for offload and never finished — what a UDP GSO segment carries when
/// veth hands it to XDP or a packet socket (it trusts CHECKSUM_PARTIAL and
/// computes nothing) — and is taken as no checksum, as the kernel takes
/// such a datagram: the ICRC covers every byte it would have (RoCEv2
/// A17.4.3.1 masks only the checksum itself).
fn check_udp_checksum(
    b: &[u8],
    version: IpVersion,
    ip_at: usize,
    udp_at: usize,
    ip_end: usize,
) -> Result<()> {
    let datagram = &b[udp_at..ip_end];
    let udp = UdpPacket::new_unchecked(datagram);
    let (src, dst) = match version {
        IpVersion::V4 => (ip_at + 12..ip_at + 16, ip_at + 16..ip_at + 20),
        IpVersion::V6 => (ip_at + 8..ip_at + 24, ip_at + 24..ip_at + 40),
    };
    let unfinished = udp::pseudo_header_sum(&b[src], &b[dst], datagram.len());
    if udp.checksum() == unfinished {
        return Ok(());
    }
    let sum = match version {
        IpVersion::V4 => {
            let ip = Ipv4Packet::new_unchecked(&b[ip_at..]);
            udp::checksum_ipv4(ip.src(), ip.dst(), datagram)
        }
        IpVersion::V6 => {
            let ip = Ipv6Packet::new_unchecked(&b[ip_at..]);
            udp::checksum_ipv6(ip.src(), ip.dst(), datagram)
        }
    };
    if udp::checksum_ok(sum) {
        Ok(())
    } else {
        Err(Error::UdpBadChecksum(udp.checksum()))
    }
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Walks and validates every header and length; the ICRC is not checked
    /// here (`verify_icrc`), so tools can still show a frame with a bad one.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let l = Layout::walk(buffer.as_ref())?;
        Ok(RocePacket {
            buffer,
            version: l.version,
            ip_at: l.ip_at,
            udp_at: l.udp_at,
            bth_at: l.bth_at,
            payload_at: l.payload_at,
            payload_len: l.payload_len,
            icrc_at: l.icrc_at,
            info: l.info,
        })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Whether the frame is RoCEv2 over IPv4 or IPv6.
    pub fn ip_version(&self) -> IpVersion {
        self.version
    }
    /// The opcode table row of the BTH's opcode (known, as `new_checked` ran).
    pub fn opcode_info(&self) -> &'static OpcodeInfo {
        self.info
    }
    /// A view of the Ethernet header.
    pub fn ethernet(&self) -> EthernetFrame<&[u8]> {
        EthernetFrame::new_unchecked(self.buffer.as_ref())
    }
    /// A view of the BTH.
    pub fn bth(&self) -> BthHeader<&[u8]> {
        BthHeader::new_unchecked(&self.buffer.as_ref()[self.bth_at..])
    }
    /// The bytes of the extension headers.
    pub fn ext_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[self.bth_at + bth::HEADER_LEN..self.payload_at]
    }
    /// The payload without its pad.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_at..self.payload_at + self.payload_len]
    }
    /// Offset of the payload within the frame.
    pub fn payload_offset(&self) -> usize {
        self.payload_at
    }
    /// IP header through the last pad byte: what the ICRC covers.
    pub fn icrc_covered(&self) -> &[u8] {
        &self.buffer.as_ref()[self.ip_at..self.icrc_at]
    }
    /// The ICRC as carried in the frame.
    pub fn stored_icrc(&self) -> u32 {
        icrc::read(&self.buffer.as_ref()[self.icrc_at..])
    }
    /// The ICRC the frame should carry.
    pub fn computed_icrc(&self) -> u32 {
        icrc::compute(self.version, self.icrc_covered())
    }
    /// Checks the stored ICRC against the computed one ([`Error::BadIcrc`]).
    pub fn verify_icrc(&self) -> Result<()> {
        let expected = self.computed_icrc();
        let found = self.stored_icrc();
        if expected == found {
            Ok(())
        } else {
            Err(Error::BadIcrc { found, expected })
        }
    }
    /// Bytes after the IP datagram (Ethernet padding of short frames).
    pub fn trailer(&self) -> &[u8] {
        &self.buffer.as_ref()[self.icrc_at + ICRC_LEN..]
    }
}

/// Everything in a RoCEv2 frame, parsed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RoceRepr<'a> {
    /// The Ethernet header; its `ethertype` is set from `ip` on emit.
    pub eth: EthernetRepr,
    /// The IPv4 or IPv6 header.
    pub ip: IpRepr,
    /// The UDP ports; the length is set on emit.
    pub udp: UdpRepr,
    /// Whether the UDP checksum is zero or computed.
    pub udp_checksum: UdpChecksum,
    /// The BTH; its `pad` is set from the payload length on emit.
    pub bth: BthRepr,
    /// The extension headers; exactly those the opcode names.
    pub ext: ExtHeaders,
    /// The payload, without pad.
    pub payload: &'a [u8],
    /// Zero bytes after the IP datagram (padding up to the Ethernet minimum).
    pub trailer_len: usize,
}

impl<'a> RoceRepr<'a> {
    /// Parses a frame completely: headers, lengths and the ICRC.
    pub fn parse(frame: &'a [u8]) -> Result<RoceRepr<'a>> {
        let p = RocePacket::new_checked(frame)?;
        // The extension headers are parsed before the ICRC is checked (they
        // are only used if it matches). The 120-byte `ExtHeaders` is built
        // on the stack with narrow stores (a discriminant here, a field
        // there) and copied into the repr with 16-byte loads, which cannot
        // be forwarded from those stores and wait until they reach the
        // cache. Built before the 4 KiB CRC, the stores have long reached it
        // when the copy runs; built after it (as `from_packet` does), the
        // copy stalls: about 3 ns of a 130 ns 4 KiB parse.
        let ext = Self::ext_of(&p);
        p.verify_icrc()?;
        Ok(Self::from_packet_and_ext(&p, ext))
    }

    /// The extension headers of a validated view.
    #[inline(always)]
    fn ext_of(p: &RocePacket<&'a [u8]>) -> ExtHeaders {
        ExtHeaders::parse(p.info, &p.buffer[p.bth_at + bth::HEADER_LEN..p.payload_at])
    }

    /// The repr of an already validated view (the ICRC is not looked at).
    #[inline]
    pub fn from_packet(p: &RocePacket<&'a [u8]>) -> RoceRepr<'a> {
        Self::from_packet_and_ext(p, Self::ext_of(p))
    }

    /// `from_packet` with the extension headers already parsed (`ext_of`).
    /// Parsing them before the rest, rather than in the struct literal
    /// below, is 2 ns faster (the copy of the 120-byte value waits less
    /// for its stores).
    #[inline(always)]
    fn from_packet_and_ext(p: &RocePacket<&'a [u8]>, ext: ExtHeaders) -> RoceRepr<'a> {
        let b: &'a [u8] = p.buffer;
        // Each view is built over a fixed-size array (`new_checked` has
        // checked the lengths), so its accessors need no bounds checks. The
        // Ethernet view gets 18 bytes, room for a VLAN tag, which it only
        // reads when the frame is tagged. `new_checked` has also checked the
        // protocol / next header, so the IP repr is built field by field
        // rather than through the `Result` of `Ipv4Repr::parse` /
        // `Ipv6Repr::parse` (same fields).
        let ip = match p.version {
            IpVersion::V4 => {
                let v = Ipv4Packet::new_unchecked(fixed::<{ ipv4::HEADER_LEN }>(b, p.ip_at));
                IpRepr::V4(Ipv4Repr {
                    src: v.src(),
                    dst: v.dst(),
                    dscp: v.dscp(),
                    ecn: v.ecn(),
                    ident: v.ident(),
                    dont_frag: v.dont_frag(),
                    ttl: v.ttl(),
                })
            }
            IpVersion::V6 => {
                let v = Ipv6Packet::new_unchecked(fixed::<{ ipv6::HEADER_LEN }>(b, p.ip_at));
                let tc = v.traffic_class();
                IpRepr::V6(Ipv6Repr {
                    src: v.src(),
                    dst: v.dst(),
                    dscp: tc >> 2,
                    ecn: tc & 3,
                    flow_label: v.flow_label(),
                    hop_limit: v.hop_limit(),
                })
            }
        };
        let eth = EthernetFrame::new_unchecked(fixed::<{ ethernet::VLAN_HEADER_LEN }>(b, 0));
        let udp_view = UdpPacket::new_unchecked(fixed::<{ udp::HEADER_LEN }>(b, p.udp_at));
        let bth_view = BthHeader::new_unchecked(fixed::<{ bth::HEADER_LEN }>(b, p.bth_at));
        RoceRepr {
            eth: EthernetRepr::parse(&eth),
            ip,
            udp: UdpRepr::parse(&udp_view),
            udp_checksum: if udp_view.checksum() == 0 {
                UdpChecksum::Zero
            } else {
                UdpChecksum::Computed
            },
            bth: BthRepr::parse(&bth_view),
            ext,
            payload: &b[p.payload_at..p.payload_at + p.payload_len],
            trailer_len: b.len() - (p.icrc_at + ICRC_LEN),
        }
    }

    /// The opcode table row of the BTH's opcode, or `None` when unknown.
    pub fn opcode_info(&self) -> Option<&'static OpcodeInfo> {
        self.bth.opcode.info()
    }

    /// Bytes from the IP header to the ICRC inclusive.
    pub fn ip_len(&self) -> usize {
        let ext = self.opcode_info().map_or(0, |i| i.ext_len());
        self.ip_len_with(ext, self.payload.len())
    }

    /// `ip_len` with `ext` bytes of extension headers and a payload of
    /// `payload_len` bytes.
    #[inline]
    fn ip_len_with(&self, ext: usize, payload_len: usize) -> usize {
        self.ip.header_len()
            + udp::HEADER_LEN
            + bth::HEADER_LEN
            + ext
            + payload_len
            + pad_for(payload_len) as usize
            + ICRC_LEN
    }

    /// The whole frame's length.
    pub fn buffer_len(&self) -> usize {
        self.eth.header_len() + self.ip_len() + self.trailer_len
    }

    /// Checks that the repr describes a frame we may send.
    pub fn validate(&self) -> Result<&'static OpcodeInfo> {
        self.validate_with_payload_len(self.payload.len())
    }

    /// `validate` for the frame this repr describes with a payload of
    /// `payload_len` bytes in place of `payload` (for a frame whose payload
    /// is written into place afterwards).
    #[inline]
    pub fn validate_with_payload_len(&self, payload_len: usize) -> Result<&'static OpcodeInfo> {
        let info = self
            .opcode_info()
            .ok_or(Error::InvalidRepr("unknown opcode"))?;
        if !self.ext.matches(info) {
            return Err(Error::InvalidRepr(
                "extension headers do not match the opcode",
            ));
        }
        match info.payload {
            PayloadRule::None if payload_len != 0 => {
                return Err(Error::InvalidRepr("this opcode carries no payload"))
            }
            PayloadRule::Exactly(n) if payload_len != n as usize => {
                return Err(Error::InvalidRepr(
                    "payload length is fixed for this opcode",
                ))
            }
            _ => {}
        }
        if self.ip_len_with(info.ext_len(), payload_len) > u16::MAX as usize {
            return Err(Error::InvalidRepr("datagram longer than 65535 bytes"));
        }
        Ok(info)
    }

    /// A Congestion Notification Packet (RoCEv2 A17.9.2) to `dest_qp`:
    /// opcode 0x81, BECN set, P_Key 0xFFFF, PSN 0, 16 reserved zero bytes.
    /// `eth`, `ip` and `udp` address the reaction point.
    pub fn cnp(eth: EthernetRepr, ip: IpRepr, udp: UdpRepr, dest_qp: u32) -> RoceRepr<'static> {
        let mut bth = BthRepr::new(Opcode::CNP, dest_qp, crate::Psn::new(0));
        bth.becn = true;
        RoceRepr {
            eth: EthernetRepr {
                ethertype: ip.ethertype(),
                ..eth
            },
            ip,
            udp,
            udp_checksum: UdpChecksum::default_for(&ip),
            bth,
            ext: ExtHeaders::default(),
            payload: &[],
            trailer_len: 0,
        }
    }
}
