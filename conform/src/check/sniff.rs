//! Classifying frames before parsing them, and Linux cooked captures.

use super::Violation;
use std::borrow::Cow;
use std::net::IpAddr;

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

/// Classifies an Ethernet frame without trusting any length in it.
pub(super) fn sniff(b: &[u8]) -> Sniff {
    if b.len() < 14 {
        return Sniff::Other(format!("runt frame ({} bytes)", b.len()));
    }
    let mut et = u16::from_be_bytes([b[12], b[13]]);
    let mut l3 = 14;
    while (et == 0x8100 || et == 0x88A8) && b.len() >= l3 + 4 {
        et = u16::from_be_bytes([b[l3 + 2], b[l3 + 3]]);
        l3 += 4;
    }
    let l3b = &b[l3..];
    let (proto, src, dst, l4) = match et {
        0x8808 => return Sniff::MacControl,
        0x0806 => return Sniff::Other("ARP".into()),
        0x88CC => return Sniff::Other("LLDP".into()),
        0x8906 => return Sniff::Other("FCoE".into()),
        0x0800 => {
            if l3b.len() < 20 || l3b[0] >> 4 != 4 {
                // too short to tell what it carries: parsed as RoCE, it is refused
                return Sniff::Roce;
            }
            let ihl = (l3b[0] & 0x0F) as usize * 4;
            let frag = u16::from_be_bytes([l3b[6], l3b[7]]) & 0x1FFF;
            let src = IpAddr::from([l3b[12], l3b[13], l3b[14], l3b[15]]);
            let dst = IpAddr::from([l3b[16], l3b[17], l3b[18], l3b[19]]);
            if frag != 0 {
                return Sniff::Other(format!("IPv4 fragment {src} > {dst}"));
            }
            (l3b[9], src, dst, ihl.max(20))
        }
        0x86DD => {
            if l3b.len() < 40 {
                return Sniff::Roce;
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&l3b[8..24]);
            d.copy_from_slice(&l3b[24..40]);
            (l3b[6], IpAddr::from(s), IpAddr::from(d), 40)
        }
        other => return Sniff::Other(format!("EtherType {other:#06x}")),
    };
    let l4b = l3b.get(l4..).unwrap_or(&[]);
    let ports = (l4b.len() >= 4).then(|| {
        (
            u16::from_be_bytes([l4b[0], l4b[1]]),
            u16::from_be_bytes([l4b[2], l4b[3]]),
        )
    });
    match (proto, ports) {
        (17, Some((_, 4791))) => Sniff::Roce,
        (17, Some((sp, dp))) => {
            Sniff::Other(format!("UDP {} > {}", ip_port(src, sp), ip_port(dst, dp)))
        }
        // a UDP header cut off: it may have been RoCE, so it counts as broken
        (17, None) => Sniff::Roce,
        (6, Some((sp, dp))) => {
            Sniff::Other(format!("TCP {} > {}", ip_port(src, sp), ip_port(dst, dp)))
        }
        (6, None) => Sniff::Other(format!("TCP {src} > {dst}")),
        (1, _) => Sniff::Other(format!("ICMP {src} > {dst}")),
        (58, _) => Sniff::Other(format!("ICMPv6 {src} > {dst}")),
        (2, _) => Sniff::Other(format!("IGMP {src} > {dst}")),
        (p, _) => Sniff::Other(format!("IP protocol {p} {src} > {dst}")),
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
