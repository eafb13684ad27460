//! Classifying frames before parsing them, and Linux cooked captures.

use super::Violation;
use std::borrow::Cow;
use std::net::IpAddr;
use wire::ethernet::ethertype;
use wire::sniff::{peek, Peek};

/// How a frame looks before it is parsed.
pub(super) enum Sniff {
    Roce,
    MacControl,
    Other(String),
}

pub(super) fn ip_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// Classifies an Ethernet frame without trusting any length in it
/// ([`wire::sniff::peek`]).
pub(super) fn sniff(b: &[u8]) -> Sniff {
    let p = peek(b);
    if p.may_be_roce() {
        return Sniff::Roce;
    }
    match p {
        Peek::Runt(n) => Sniff::Other(format!("runt frame ({n} bytes)")),
        Peek::NotIp(ethertype::MAC_CONTROL) => Sniff::MacControl,
        Peek::NotIp(ethertype::ARP) => Sniff::Other("ARP".into()),
        Peek::NotIp(ethertype::LLDP) => Sniff::Other("LLDP".into()),
        Peek::NotIp(ethertype::FCOE) => Sniff::Other("FCoE".into()),
        Peek::NotIp(other) => Sniff::Other(format!("EtherType {other:#06x}")),
        Peek::Fragment { src, dst } => Sniff::Other(format!("IPv4 fragment {src} > {dst}")),
        Peek::UnclearIp => Sniff::Roce,
        Peek::Ip {
            src,
            dst,
            protocol,
            ports,
        } => Sniff::Other(match (protocol, ports) {
            (17, Some((sp, dp))) => format!("UDP {} > {}", ip_port(src, sp), ip_port(dst, dp)),
            (6, Some((sp, dp))) => format!("TCP {} > {}", ip_port(src, sp), ip_port(dst, dp)),
            (6, None) => format!("TCP {src} > {dst}"),
            (1, _) => format!("ICMP {src} > {dst}"),
            (58, _) => format!("ICMPv6 {src} > {dst}"),
            (2, _) => format!("IGMP {src} > {dst}"),
            (p, _) => format!("IP protocol {p} {src} > {dst}"),
        }),
    }
}

/// The kind of a skipped frame, for the totals ("TCP", "ARP", ...).
pub(super) fn kind_of(what: &str) -> String {
    what.split(' ').next().unwrap_or(what).to_string()
}

/// Rewrites a Linux cooked capture (SLL, SLL2) frame as Ethernet (the
/// Ethernet header is not covered by the ICRC, so nothing is lost).
pub(super) fn to_ethernet(linktype: u32, data: &[u8]) -> Result<Cow<'_, [u8]>, Violation> {
    let (proto, addr, rest) = match linktype {
        crate::capture::LINKTYPE_ETHERNET => return Ok(Cow::Borrowed(data)),
        113 if data.len() >= 16 => (&data[14..16], &data[6..12], &data[16..]),
        276 if data.len() >= 20 => (&data[0..2], &data[12..18], &data[20..]),
        113 | 276 => return Err(Violation::CookedHeaderCut),
        other => return Err(Violation::LinkType(other)),
    };
    let mut v = Vec::with_capacity(14 + rest.len());
    v.extend_from_slice(&[0u8; 6]);
    v.extend_from_slice(addr);
    v.extend_from_slice(proto);
    v.extend_from_slice(rest);
    Ok(Cow::Owned(v))
}
