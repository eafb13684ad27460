//! Addressing on real interfaces: RoCEv2 is routable, so the destination
//! MAC of a frame is the next hop's — the kernel's routing table picks the
//! next hop, its neighbour table (ARP / ND) gives the MAC. Both are asked
//! through iproute2 from the calling thread, so the answer is the one of
//! the thread's network namespace. A missing neighbour entry is resolved by
//! sending one UDP datagram towards the destination (the kernel then ARPs)
//! and asking again.

use std::net::{IpAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};
use wire::EthernetAddress;

#[derive(Debug, thiserror::Error)]
pub enum AddrError {
    #[error("running ip: {0}")]
    Ip(std::io::Error),
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    #[error("no neighbour entry for {hop} on {dev} after {waited:?}")]
    NoNeighbour {
        hop: IpAddr,
        dev: String,
        waited: Duration,
    },
}

/// The route the kernel would use for `dst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The gateway, or `dst` itself when it is on-link.
    pub next_hop: IpAddr,
    pub dev: String,
    pub src: Option<IpAddr>,
}

fn ip_cmd(v6: bool, args: &[&str]) -> Result<String, AddrError> {
    let mut c = Command::new("ip");
    if v6 {
        c.arg("-6");
    }
    let out = c.args(args).output().map_err(AddrError::Ip)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip route get DST`, parsed.
pub fn route(dst: IpAddr) -> Result<Route, AddrError> {
    let text = ip_cmd(dst.is_ipv6(), &["-o", "route", "get", &dst.to_string()])?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |k: &str| {
        words
            .iter()
            .position(|w| *w == k)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    let dev = after("dev").ok_or(AddrError::NoRoute(dst))?.to_string();
    let next_hop = after("via").and_then(|v| v.parse().ok()).unwrap_or(dst);
    let src = after("src").and_then(|v| v.parse().ok());
    Ok(Route { next_hop, dev, src })
}

/// The neighbour table's MAC for `hop` on `dev`, if it has a usable one.
pub fn neighbour(hop: IpAddr, dev: &str) -> Result<Option<EthernetAddress>, AddrError> {
    let text = ip_cmd(
        hop.is_ipv6(),
        &["neigh", "show", "to", &hop.to_string(), "dev", dev],
    )?;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.iter().any(|w| *w == "FAILED" || *w == "INCOMPLETE") {
            continue;
        }
        if let Some(i) = words.iter().position(|w| *w == "lladdr") {
            if let Some(mac) = words.get(i + 1).and_then(|m| parse_mac(m)) {
                return Ok(Some(mac));
            }
        }
    }
    Ok(None)
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
    let r = route(dst)?;
    let t0 = Instant::now();
    let mut poked = false;
    loop {
        if let Some(mac) = neighbour(r.next_hop, &r.dev)? {
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
}
