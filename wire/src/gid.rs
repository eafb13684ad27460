//! Global identifiers. RoCEv2 GIDs are IPv6 addresses; an IPv4 endpoint uses
//! the IPv4-mapped form `::ffff:a.b.c.d` (RoCEv2 A17.4.5.1, RFC 4291 2.5.5.2).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit GID in network byte order; in RoCEv2 the IPv6 (or IPv4-mapped)
/// address of a port.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of 16 raw bytes, in network byte order.
    pub const fn from_bytes(b: [u8; 16]) -> Gid {
        Gid(b)
    }

    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub const fn from_ipv4(a: Ipv4Addr) -> Gid {
        let o = a.octets();
        Gid([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, o[0], o[1], o[2], o[3],
        ])
    }

    /// The GID of an IPv6 address (the same 16 bytes).
    pub const fn from_ipv6(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }

    /// The GID of an IP address: IPv4-mapped for IPv4, as is for IPv6.
    pub fn from_ip(a: IpAddr) -> Gid {
        match a {
            IpAddr::V4(v4) => Gid::from_ipv4(v4),
            IpAddr::V6(v6) => Gid::from_ipv6(v6),
        }
    }

    /// True for `::ffff:0:0/96`.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff
    }

    /// The IPv4 address of an IPv4-mapped GID, `None` for any other.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        self.is_ipv4_mapped()
            .then(|| Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }

    /// The IP address this GID stands for: IPv4 when mapped, IPv6 otherwise.
    pub fn to_ip(&self) -> IpAddr {
        match self.to_ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }

    /// 32 hex digits, as ibv_rc_pingpong's out-of-band exchange writes it.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse 32 hex digits (the form `to_hex` writes).
    pub fn from_hex(s: &str) -> Option<Gid> {
        let s = s.as_bytes();
        if s.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            let hi = (s[2 * i] as char).to_digit(16)?;
            let lo = (s[2 * i + 1] as char).to_digit(16)?;
            *o = (hi * 16 + lo) as u8;
        }
        Some(Gid(out))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_ipv4() {
            Some(v4) => write!(f, "::ffff:{v4}"),
            None => write!(f, "{}", Ipv6Addr::from(self.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_round_trip() {
        let g = Gid::from_ipv4(Ipv4Addr::new(10, 1, 16, 61));
        assert!(g.is_ipv4_mapped());
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(10, 1, 16, 61)));
        assert_eq!(g.to_hex(), "00000000000000000000ffff0a01103d");
        assert_eq!(Gid::from_hex(&g.to_hex()), Some(g));
        assert_eq!(g.to_string(), "::ffff:10.1.16.61");
        let v6 = Gid::from_ipv6("fe80::1".parse().unwrap());
        assert!(!v6.is_ipv4_mapped());
        assert_eq!(v6.to_ip(), IpAddr::V6("fe80::1".parse().unwrap()));
        assert_eq!(Gid::from_hex("zz"), None);
        assert_eq!(Gid::from_hex("0000000000000000000000000000000g"), None);
    }
}
