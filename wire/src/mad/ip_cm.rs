//! The RDMA IP CM service (IBA Annex A11): the service ID that carries the
//! port space and port, and the REQ private data with the IP addresses.

use super::*;

/// The RDMA IP CM service's service ID (IBA Annex A11): the prefix
/// 0x0000000001, the port space (its low byte: 0x06 TCP, 0x11 UDP, 0x3F IB)
/// and the port.
pub fn ip_cm_service_id(port_space: u8, port: u16) -> u64 {
    0x0000_0000_0100_0000 | u64::from(port_space) << 16 | u64::from(port)
}

/// The port space and the port of an RDMA IP CM service ID, or None when the
/// ID is not one.
pub fn ip_cm_service(service_id: u64) -> Option<(u8, u16)> {
    (service_id >> 24 == 1).then_some(((service_id >> 16) as u8, service_id as u16))
}

/// The head of a REQ's private data under the RDMA IP CM service (IBA Annex
/// A11.6): version, IP version, the client's port and both addresses; the
/// consumer's own private data follows it (56 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpCmPrivateData {
    /// 4 bits each.
    pub major_version: u8,
    /// Minor version, the low nibble of byte 0 after `major_version`.
    pub minor_version: u8,
    /// 4 bits: 4 or 6.
    pub ip_version: u8,
    /// 4 bits.
    pub reserved: u8,
    /// The active side's (client's) port; the passive side's is in the
    /// service ID.
    pub src_port: u16,
    /// IPv4 addresses sit in the last four bytes, the first twelve zero.
    pub src_ip: [u8; 16],
    /// The passive side's address, laid out as `src_ip`.
    pub dst_ip: [u8; 16],
}

impl IpCmPrivateData {
    /// Its length; the consumer's private data starts there.
    pub const LEN: usize = 36;

    /// Reads the 36-byte head of a REQ's private data.
    pub fn parse(b: &[u8]) -> Result<IpCmPrivateData> {
        need(Layer::Mad, b, Self::LEN)?;
        Ok(IpCmPrivateData {
            major_version: b[0] >> 4,
            minor_version: b[0] & 0x0F,
            ip_version: b[1] >> 4,
            reserved: b[1] & 0x0F,
            src_port: be16(b, 2),
            src_ip: array(b, 4),
            dst_ip: array(b, 20),
        })
    }

    /// Writes the 36-byte head into the front of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0] = (self.major_version & 0x0F) << 4 | (self.minor_version & 0x0F);
        b[1] = (self.ip_version & 0x0F) << 4 | (self.reserved & 0x0F);
        put16(b, 2, self.src_port);
        b[4..20].copy_from_slice(&self.src_ip);
        b[20..36].copy_from_slice(&self.dst_ip);
        Ok(())
    }

    /// The source and destination as IP addresses (by `ip_version`).
    pub fn addrs(&self) -> Option<(core::net::IpAddr, core::net::IpAddr)> {
        let v4 = |a: &[u8; 16]| core::net::IpAddr::from([a[12], a[13], a[14], a[15]]);
        let v6 = |a: &[u8; 16]| core::net::IpAddr::from(*a);
        match self.ip_version {
            4 => Some((v4(&self.src_ip), v4(&self.dst_ip))),
            6 => Some((v6(&self.src_ip), v6(&self.dst_ip))),
            _ => None,
        }
    }
}
