//! Addressing on real interfaces: RoCEv2 is routable, so the destination
//! MAC of a frame is the next hop's — the kernel's routing table picks the
//! next hop, its neighbour table (ARP / ND) gives the MAC. Both are asked
//! over rtnetlink ([`super::netlink`]) from the calling thread, so the
//! answer is the one of the thread's network namespace. A missing
//! neighbour entry is resolved by sending one UDP datagram towards the
//! destination (the kernel then ARPs) and asking again.

use super::netlink::{NetlinkError, Rtnl};
use netlink_packet_route::address::AddressScope;
use netlink_packet_route::AddressFamily;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};
use wire::EthernetAddress;

/// Why an address question found no answer.
#[derive(Debug, thiserror::Error)]
pub enum AddrError {
    #[error("asking the kernel: {0}")]
    Netlink(#[from] NetlinkError),
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    #[error("no neighbour entry for {hop} on {dev} after {waited:?}")]
    NoNeighbour {
        hop: IpAddr,
        dev: String,
        waited: Duration,
    },
    #[error("interface {0}: no such interface (in this network namespace)")]
    NoInterface(String),
    #[error("interface {0} has no IPv4 or global IPv6 address")]
    NoAddress(String),
}

/// The route the kernel would use for `dst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The gateway, or `dst` itself when it is on-link.
    pub next_hop: IpAddr,
    pub dev: String,
    pub src: Option<IpAddr>,
}

/// The route the kernel would use for `dst` (`ip route get DST`).
pub fn route(dst: IpAddr) -> Result<Route, AddrError> {
    let mut nl = Rtnl::open()?;
    route_with(&mut nl, dst)
}

fn route_with(nl: &mut Rtnl, dst: IpAddr) -> Result<Route, AddrError> {
    let r = match nl.route_get(dst) {
        Ok(r) => r,
        // ENETUNREACH, EHOSTUNREACH, ...: the kernel has no route
        Err(e) if e.kernel_errno().is_some() => return Err(AddrError::NoRoute(dst)),
        Err(e) => return Err(e.into()),
    };
    let oif = r.oif.ok_or(AddrError::NoRoute(dst))?;
    let dev = nl.link_name(oif)?.ok_or(AddrError::NoRoute(dst))?;
    Ok(Route {
        next_hop: r.gateway.unwrap_or(dst),
        dev,
        src: r.pref_src,
    })
}

/// The neighbour table's MAC for `hop` on `dev`, if it has a usable one
/// (an entry that is not FAILED, INCOMPLETE or NOARP, with a 6-byte
/// link-layer address).
pub fn neighbour(hop: IpAddr, dev: &str) -> Result<Option<EthernetAddress>, AddrError> {
    let mut nl = Rtnl::open()?;
    let ifindex = nl
        .link_index(dev)?
        .ok_or_else(|| AddrError::NoInterface(dev.into()))?;
    neighbour_with(&mut nl, hop, ifindex)
}

fn neighbour_with(
    nl: &mut Rtnl,
    hop: IpAddr,
    ifindex: u32,
) -> Result<Option<EthernetAddress>, AddrError> {
    Ok(nl
        .neighbours(ifindex, hop)?
        .into_iter()
        .filter(|n| n.usable())
        .find_map(|n| {
            let mac: [u8; 6] = n.lladdr?.as_slice().try_into().ok()?;
            Some(EthernetAddress(mac))
        }))
}

/// The address that names interface `ifname`: its first IPv4 address,
/// else its first global IPv6 address (what `ip -4 addr show dev`, then
/// `ip -6 addr show dev IFNAME scope global`, list first).
pub fn interface_addr(ifname: &str) -> Result<IpAddr, AddrError> {
    let mut nl = Rtnl::open()?;
    let ifindex = nl
        .link_index(ifname)?
        .ok_or_else(|| AddrError::NoInterface(ifname.into()))?;
    let v4 = nl.addresses(ifindex, AddressFamily::Inet)?;
    let v6 = nl.addresses(ifindex, AddressFamily::Inet6)?;
    pick_address(
        v4.iter()
            .chain(v6.iter())
            .map(|a| (a.addr, a.scope == AddressScope::Universe)),
    )
    .ok_or_else(|| AddrError::NoAddress(ifname.into()))
}

/// The first IPv4 address, else the first global IPv6 one, of
/// `(address, scope is global)` pairs in the kernel's order.
fn pick_address(addrs: impl Iterator<Item = (IpAddr, bool)> + Clone) -> Option<IpAddr> {
    addrs
        .clone()
        .find(|(a, _)| a.is_ipv4())
        .or_else(|| addrs.clone().find(|(a, global)| a.is_ipv6() && *global))
        .map(|(a, _)| a)
}

pub fn parse_mac(s: &str) -> Option<EthernetAddress> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for m in mac.iter_mut() {
        *m = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(EthernetAddress(mac))
}

/// The destination MAC for frames to `dst`: its next hop's, resolving the
/// neighbour if needed (waiting at most `patience`).
pub fn next_hop_mac(
    dst: IpAddr,
    patience: Duration,
) -> Result<(Route, EthernetAddress), AddrError> {
    let mut nl = Rtnl::open()?;
    let r = route_with(&mut nl, dst)?;
    let ifindex = nl
        .link_index(&r.dev)?
        .ok_or_else(|| AddrError::NoInterface(r.dev.clone()))?;
    let t0 = Instant::now();
    let mut poked = false;
    loop {
        if let Some(mac) = neighbour_with(&mut nl, r.next_hop, ifindex)? {
            return Ok((r, mac));
        }
        if !poked {
            // Any datagram towards dst makes the kernel resolve the next hop.
            let any: IpAddr = if dst.is_ipv6() {
                "::".parse().expect("literal")
            } else {
                "0.0.0.0".parse().expect("literal")
            };
            if let Ok(s) = UdpSocket::bind((any, 0)) {
                let _ = s.send_to(&[0], (dst, 9));
            }
            poked = true;
        }
        if t0.elapsed() > patience {
            return Err(AddrError::NoNeighbour {
                hop: r.next_hop,
                dev: r.dev,
                waited: patience,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01"),
            Some(EthernetAddress([2, 0, 10, 255, 0, 1]))
        );
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
        assert_eq!(parse_mac("zz:00:0a:ff:00:01"), None);
    }

    #[test]
    fn an_interface_is_named_by_its_ipv4_else_its_global_ipv6_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let v4 = (ip("192.0.2.1"), true);
        let v6_link = (ip("fe80::1"), false);
        let v6 = (ip("2001:db8::5"), true);
        assert_eq!(pick_address([v6, v4].into_iter()), Some(v4.0));
        assert_eq!(pick_address([v6_link, v6].into_iter()), Some(v6.0));
        assert_eq!(pick_address([v6_link].into_iter()), None);
        assert_eq!(pick_address(std::iter::empty()), None);
    }

    #[test]
    fn loopback_is_reached_on_lo() {
        let r = route(ip4("127.0.0.1")).unwrap();
        assert_eq!(r.dev, "lo");
        assert_eq!(r.next_hop, ip4("127.0.0.1"));
        assert!(matches!(
            neighbour(ip4("127.0.0.1"), "no-such-if0"),
            Err(AddrError::NoInterface(_))
        ));
        assert!(matches!(
            interface_addr("no-such-if0"),
            Err(AddrError::NoInterface(_))
        ));
        assert_eq!(interface_addr("lo").unwrap(), ip4("127.0.0.1"));
    }

    fn ip4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
}
