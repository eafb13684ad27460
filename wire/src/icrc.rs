//! The invariant CRC (RoCEv2 A17.4.3.1, IBA 7.8.1).
//!
//! The ICRC is a CRC-32 (the Ethernet/zlib polynomial, initial value and
//! final complement) over: 8 bytes of 0xFF standing for the LRH that RoCEv2
//! does not carry, then the IP header, the UDP header and the BTH with the
//! fields a router may change replaced by ones (IPv4 TOS, TTL and header
//! checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum;
//! BTH byte 4 with FECN, BECN and Resv6), then everything after the BTH up to
//! the ICRC itself. It is sent least-significant byte first.

use crate::{bth, ipv4, ipv6, udp};

pub const ICRC_LEN: usize = 4;

/// IP version of the datagram the ICRC covers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpVersion {
    V4,
    V6,
}

impl IpVersion {
    pub const fn header_len(self) -> usize {
        match self {
            IpVersion::V4 => ipv4::HEADER_LEN,
            IpVersion::V6 => ipv6::HEADER_LEN,
        }
    }
}

/// The ICRC of `datagram`: the IP header through the last payload/pad byte
/// (the ICRC itself excluded). `datagram` must hold the IP, UDP and BTH
/// headers.
pub fn compute(version: IpVersion, datagram: &[u8]) -> u32 {
    let ip_len = version.header_len();
    let masked_len = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
    let mut masked = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN];
    let m = &mut masked[..masked_len];
    m.copy_from_slice(&datagram[..masked_len]);
    match version {
        IpVersion::V4 => ipv4::icrc_mask(&mut m[..ip_len]),
        IpVersion::V6 => ipv6::icrc_mask(&mut m[..ip_len]),
    }
    udp::icrc_mask(&mut m[ip_len..]);
    bth::icrc_mask(&mut m[ip_len + udp::HEADER_LEN..]);

    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(m);
    h.update(&datagram[masked_len..]);
    h.finalize()
}

/// Reads the ICRC stored after `datagram`'s covered bytes (little-endian).
pub fn read(icrc_bytes: &[u8]) -> u32 {
    u32::from_le_bytes([icrc_bytes[0], icrc_bytes[1], icrc_bytes[2], icrc_bytes[3]])
}

/// Stores an ICRC in wire order.
pub fn write(icrc_bytes: &mut [u8], icrc: u32) {
    icrc_bytes[..ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
}
