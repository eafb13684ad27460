//! A first look at a frame before it is parsed: what the Ethernet, IP and
//! transport headers say, read without trusting any length in them, so that
//! a capture's other traffic (ARP, TCP, fragments, frames cut by the snap
//! length) can be told from RoCEv2 that fails to parse.

use crate::bytes::be16;
use crate::{ethernet, ipv4, ipv6, udp};
use std::net::IpAddr;

/// What the headers of a frame say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// Shorter than an Ethernet header: its length.
    Runt(usize),
    /// Not IP: the EtherType after any 802.1Q / 802.1ad tags.
    NotIp(u16),
    /// An IP EtherType whose header is too short, or of another version,
    /// to tell what it carries.
    UnclearIp,
    /// An IPv4 fragment after the first (its transport header is elsewhere).
    Fragment {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
    /// An IP packet.
    Ip {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
        /// The IPv4 Protocol or IPv6 Next Header.
        protocol: u8,
        /// Source and destination port, when four bytes of the transport
        /// header are there (UDP and TCP both begin with them).
        ports: Option<(u16, u16)>,
    },
}

impl Peek {
    /// Whether the frame may be RoCEv2: UDP to port 4791, or an IP or UDP
    /// header cut short (parsing it then says what is wrong).
    pub fn may_be_roce(&self) -> bool {
        match *self {
            Peek::UnclearIp => true,
            Peek::Ip {
                protocol: ipv4::PROTOCOL_UDP,
                ports,
                ..
            } => ports.is_none_or(|(_, dst)| dst == udp::ROCEV2_PORT),
            _ => false,
        }
    }
}

/// Reads the headers of the Ethernet frame `b`.
pub fn peek(b: &[u8]) -> Peek {
    if b.len() < ethernet::HEADER_LEN {
        return Peek::Runt(b.len());
    }
    let mut at = ethernet::field::TYPE;
    let mut et = be16(b, at);
    // each tag is a TPID and a TCI; the EtherType follows
    while matches!(et, ethernet::ethertype::VLAN | ethernet::ethertype::QINQ) && b.len() >= at + 6 {
        at += 4;
        et = be16(b, at);
    }
    let l3 = &b[at + 2..];
    let (src, dst, protocol, l4) = match et {
        ethernet::ethertype::IPV4 => {
            if l3.len() < ipv4::HEADER_LEN {
                return Peek::UnclearIp;
            }
            let h = ipv4::Ipv4Packet::new_unchecked(l3);
            if h.version() != 4 {
                return Peek::UnclearIp;
            }
            let (src, dst) = (IpAddr::V4(h.src()), IpAddr::V4(h.dst()));
            if h.frag_offset() != 0 {
                return Peek::Fragment { src, dst };
            }
            (src, dst, h.protocol(), h.header_len().max(ipv4::HEADER_LEN))
        }
        ethernet::ethertype::IPV6 => {
            if l3.len() < ipv6::HEADER_LEN {
                return Peek::UnclearIp;
            }
            let h = ipv6::Ipv6Packet::new_unchecked(l3);
            (
                IpAddr::V6(h.src()),
                IpAddr::V6(h.dst()),
                h.next_header(),
                ipv6::HEADER_LEN,
            )
        }
        other => return Peek::NotIp(other),
    };
    let l4b = l3.get(l4..).unwrap_or(&[]);
    let ports = (l4b.len() >= udp::field::DST_PORT + 2).then(|| {
        (
            be16(l4b, udp::field::SRC_PORT),
            be16(l4b, udp::field::DST_PORT),
        )
    });
    Peek::Ip {
        src,
        dst,
        protocol,
        ports,
    }
}

/// How a receiver sorts the frame `b` into priorities: the PCP of its
/// outer 802.1Q / 802.1ad tag (`None` when untagged) and the DSCP of the IP
/// header after it (0 when it is not IP or is cut short). Never panics.
pub fn qos_class(b: &[u8]) -> (Option<u8>, u8) {
    let ty = |at: usize| (b.len() >= at + 2).then(|| be16(b, at));
    let mut at = ethernet::field::TYPE;
    let mut pcp = None;
    let mut et = ty(at);
    if matches!(
        et,
        Some(ethernet::ethertype::VLAN | ethernet::ethertype::QINQ)
    ) {
        pcp = ty(ethernet::field::TCI).map(|tci| ethernet::VlanTag::from_tci(tci).pcp);
        at += 4;
        et = ty(at);
    }
    let l3 = b.get(at + 2..).unwrap_or(&[]);
    let dscp = match et {
        Some(ethernet::ethertype::IPV4) if l3.len() > ipv4::field::TOS => {
            ipv4::Ipv4Packet::new_unchecked(l3).dscp()
        }
        Some(ethernet::ethertype::IPV6) if l3.len() >= 4 => {
            ipv6::Ipv6Packet::new_unchecked(l3).traffic_class() >> 2
        }
        _ => 0,
    };
    (pcp, dscp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_cut_and_tagged_frames_are_told_apart() {
        assert_eq!(peek(&[0; 10]), Peek::Runt(10));
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ethernet::ethertype::ARP.to_be_bytes());
        assert_eq!(peek(&f), Peek::NotIp(ethernet::ethertype::ARP));
        // IPv4 EtherType with no header: unclear, may be RoCE
        f[12..14].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        assert_eq!(peek(&f), Peek::UnclearIp);
        assert!(peek(&f).may_be_roce());
        // an 802.1Q tag, then IPv4 / UDP to 4791 with the UDP header cut after the ports
        let mut g = vec![0u8; 12];
        g.extend_from_slice(&ethernet::ethertype::VLAN.to_be_bytes());
        g.extend_from_slice(&[0, 5]);
        g.extend_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = ipv4::PROTOCOL_UDP;
        ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
        ip[16..20].copy_from_slice(&[192, 0, 2, 2]);
        g.extend_from_slice(&ip);
        g.extend_from_slice(&1234u16.to_be_bytes());
        g.extend_from_slice(&udp::ROCEV2_PORT.to_be_bytes());
        let p = peek(&g);
        assert!(p.may_be_roce(), "{p:?}");
        assert!(matches!(
            p,
            Peek::Ip {
                ports: Some((1234, 4791)),
                protocol: 17,
                ..
            }
        ));
        // a later fragment
        let at = 18 + 6;
        g[at..at + 2].copy_from_slice(&0x0010u16.to_be_bytes());
        assert!(matches!(peek(&g), Peek::Fragment { .. }));
    }

    #[test]
    fn qos_class_reads_the_pcp_and_the_dscp() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethernet::ethertype::VLAN.to_be_bytes());
        f.extend_from_slice(&((5u16 << 13) | 7).to_be_bytes());
        f.extend_from_slice(&ethernet::ethertype::IPV6.to_be_bytes());
        // version 6, traffic class DSCP 26 ECN 1
        let tc: u32 = (26 << 2) | 1;
        f.extend_from_slice(&((6u32 << 28) | (tc << 20)).to_be_bytes());
        assert_eq!(qos_class(&f), (Some(5), 26));
        // untagged IPv4 with DSCP 46, and frames too short to tell
        let mut g = vec![0u8; 12];
        g.extend_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        g.extend_from_slice(&[0x45, 46 << 2]);
        assert_eq!(qos_class(&g), (None, 46));
        assert_eq!(qos_class(&g[..15]), (None, 0));
        assert_eq!(qos_class(&[0u8; 3]), (None, 0));
    }
}
