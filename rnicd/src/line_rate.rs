//! `rnicd --line-rate`: a port whose link speed is given rather than the
//! interface's (a veth reports 10 Gbit/s whatever it stands for). The
//! device takes its line rate from the port: DCQCN's ceiling and its
//! rate steps are relative to it, and PFC pause quanta last 512 bit
//! times at it. Frames pass as they are.

use nic::io::Port;

/// `inner` with the link speed `bps`.
pub struct LineRate {
    inner: Box<dyn Port>,
    bps: u64,
}

impl LineRate {
    pub fn new(inner: Box<dyn Port>, bps: u64) -> LineRate {
        LineRate { inner, bps }
    }
}

impl Port for LineRate {
    fn link_speed_bps(&self) -> u64 {
        self.bps
    }
    nic::forward_port!(field inner: recv, send, tx_room, mac, mtu, counters, wait, wait_or_ring, attach_bell, pending, rx_backlog, link_up, loop_back);
}

/// A rate that [`parse_rate`] refuses.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: want a rate of 1k to 1000g bit/s, e.g. 100m, 25g or 1000000")]
pub struct BadRate(String);

/// A rate in bits per second from `N`, `Nk`, `Nm` or `Ng` (powers of
/// 1000; `bit`, `bit/s` or `bps` may follow): `100m`, `25gbit`.
pub fn parse_rate(s: &str) -> Result<u64, BadRate> {
    rate(s).ok_or_else(|| BadRate(s.to_string()))
}

fn rate(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    let t = ["bit/s", "bps", "bit"]
        .iter()
        .find_map(|u| t.strip_suffix(u))
        .unwrap_or(&t);
    let (num, scale) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1e3),
        'm' => (&t[..t.len() - 1], 1e6),
        'g' => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    let bps = (v * scale).round();
    (1e3..=1e12).contains(&bps).then_some(bps as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_in_powers_of_1000() {
        assert_eq!(parse_rate("100m").unwrap(), 100_000_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("25Gbit/s").unwrap(), 25_000_000_000);
        assert_eq!(parse_rate("2.5g").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("500000").unwrap(), 500_000);
        for bad in ["", "fast", "10", "2t", "-1g"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_port_reports_the_given_speed_and_passes_the_rest() {
        let macs = [
            wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            wire::EthernetAddress([2, 0, 0, 0, 0, 2]),
        ];
        let (a, _b) = nic::io::mem::pair(macs, 16);
        let mut p = LineRate::new(Box::new(a), 100_000_000);
        assert_eq!(p.link_speed_bps(), 100_000_000);
        assert_eq!(p.mac(), macs[0]);
        // the wire's 16 buffers, not the 64 asked for: the engine must
        // not make frames the port would drop
        assert_eq!(p.tx_room(64), 16);
    }
}
