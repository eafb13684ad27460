//! The header template frames are built from: a QP's Ethernet, IP and
//! UDP headers, fixed once it has a path.

use crate::verbs::AhAttr;
use wire::{
    EthernetAddress, EthernetRepr, Gid, IpRepr, Ipv4Repr, Ipv6Repr, UdpChecksum, UdpRepr,
    ROCEV2_PORT,
};

/// Ethernet/IP/UDP headers of a QP's frames (fixed once the QP has a path).
#[derive(Clone, Copy, Debug)]
pub struct HeaderTemplate {
    pub eth: EthernetRepr,
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub udp_checksum: UdpChecksum,
}

impl HeaderTemplate {
    /// Headers from `src` to the peer `ah`; the UDP source port follows the
    /// Linux rule (`rdma_get_udp_sport`) so our frames match rxe's.
    pub fn new(
        src_mac: EthernetAddress,
        src_gid: Gid,
        ah: &AhAttr,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> Self {
        let dscp = ah.traffic_class >> 2;
        let ecn = ah.traffic_class & 3;
        let ip = match (src_gid.to_ipv4(), ah.dgid.to_ipv4()) {
            (Some(src), Some(dst)) => IpRepr::V4(Ipv4Repr {
                src,
                dst,
                dscp,
                ecn,
                ident: 0,
                dont_frag: true,
                ttl: ah.hop_limit,
            }),
            _ => IpRepr::V6(Ipv6Repr {
                src: std::net::Ipv6Addr::from(src_gid.0),
                dst: std::net::Ipv6Addr::from(ah.dgid.0),
                dscp,
                ecn,
                flow_label: ah.flow_label,
                hop_limit: ah.hop_limit,
            }),
        };
        HeaderTemplate {
            eth: EthernetRepr {
                dst: ah.dmac,
                src: src_mac,
                vlan: ah.vlan,
                ethertype: 0,
            },
            ip,
            udp: UdpRepr {
                src_port: wire::udp::rdma_udp_sport(ah.flow_label, local_qpn, remote_qpn),
                dst_port: ROCEV2_PORT,
            },
            udp_checksum: UdpChecksum::default_for(&ip),
        }
    }
}

impl HeaderTemplate {
    /// Whether a received packet's IP header `ip` comes from the peer these
    /// headers address and to the address they send from (the same IP
    /// version, both addresses swapped).
    #[inline]
    pub fn is_from_peer(&self, ip: &IpRepr) -> bool {
        match (&self.ip, ip) {
            (IpRepr::V4(ours), IpRepr::V4(theirs)) => {
                theirs.src == ours.dst && theirs.dst == ours.src
            }
            (IpRepr::V6(ours), IpRepr::V6(theirs)) => {
                theirs.src == ours.dst && theirs.dst == ours.src
            }
            _ => false,
        }
    }
}
