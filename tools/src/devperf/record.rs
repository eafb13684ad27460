//! The out-of-band record of `rnic perf --dev` (the parent module's
//! documentation describes the whole exchange): what one side tells the
//! other, as `key value` lines ended by `end`, and the line protocol
//! around it.

use super::conn_name;
use crate::netdev::NetDev;
use crate::oob::Ctrl;
use crate::perf::{Mode, Verb};
use crate::{report, CliError};
use nic::verbs::QpType;
use wire::{EthernetAddress, Gid};

/// One side's record of the exchange.
#[derive(Clone, Debug, PartialEq)]
pub struct Hello {
    pub role: String,
    pub verb: Verb,
    pub mode: Mode,
    pub qp_type: QpType,
    pub mtu: u32,
    pub sizes: Vec<usize>,
    pub iters: u64,
    pub duration: u64,
    pub tx_depth: u32,
    pub gid: Gid,
    pub mac: EthernetAddress,
    pub rkey: u32,
    pub va: u64,
    pub len: u64,
    /// (QPN, first PSN) per QP.
    pub qps: Vec<(u32, u32)>,
}

fn hex(s: &str) -> Option<u64> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).ok()
}

impl Hello {
    pub fn to_lines(&self) -> Vec<String> {
        let mut v = vec![
            "rnic-perf 1".to_string(),
            format!("role {}", self.role),
            format!(
                "test {} {} {}",
                self.verb.name(),
                self.mode.name(),
                conn_name(self.qp_type)
            ),
            format!("mtu {}", self.mtu),
            format!(
                "sizes {}",
                self.sizes
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            format!("iters {}", self.iters),
            format!("duration {}", self.duration),
            format!("tx_depth {}", self.tx_depth),
            format!("gid {}", self.gid.to_hex()),
            format!("mac {}", report::mac(self.mac.0)),
            format!("mr {:#010x} {:#x} {}", self.rkey, self.va, self.len),
        ];
        for (q, p) in &self.qps {
            v.push(format!("qp {q:#08x} {p:#08x}"));
        }
        v.push("end".into());
        v
    }

    pub fn parse(lines: &[String]) -> Result<Hello, String> {
        let mut h = Hello {
            role: String::new(),
            verb: Verb::Write,
            mode: Mode::Bw,
            qp_type: QpType::Rc,
            mtu: 0,
            sizes: Vec::new(),
            iters: 0,
            duration: 0,
            tx_depth: 1,
            gid: Gid::default(),
            mac: EthernetAddress::default(),
            rkey: 0,
            va: 0,
            len: 0,
            qps: Vec::new(),
        };
        let mut seen = std::collections::BTreeSet::new();
        let bad = |l: &str| format!("bad line {l:?} in the peer's record");
        for l in lines {
            let w: Vec<&str> = l.split_whitespace().collect();
            let Some((&k, rest)) = w.split_first() else {
                continue;
            };
            seen.insert(k.to_string());
            match k {
                "rnic-perf" if rest.first() != Some(&"1") => {
                    return Err(format!("the peer speaks record format {rest:?}, not 1"));
                }
                "role" => h.role = rest.first().unwrap_or(&"").to_string(),
                "test" => {
                    let [v, m, c] = rest else { return Err(bad(l)) };
                    h.verb = match *v {
                        "write" => Verb::Write,
                        "read" => Verb::Read,
                        "send" => Verb::Send,
                        "atomic" => Verb::Atomic,
                        _ => return Err(bad(l)),
                    };
                    h.mode = match *m {
                        "bw" => Mode::Bw,
                        "lat" => Mode::Lat,
                        _ => return Err(bad(l)),
                    };
                    h.qp_type = match *c {
                        "RC" => QpType::Rc,
                        "UC" => QpType::Uc,
                        _ => return Err(bad(l)),
                    };
                }
                "mtu" => {
                    h.mtu = rest
                        .first()
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| bad(l))?
                }
                "sizes" => {
                    h.sizes = rest
                        .iter()
                        .map(|x| x.parse().map_err(|_| bad(l)))
                        .collect::<Result<_, _>>()?
                }
                "iters" => {
                    h.iters = rest
                        .first()
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| bad(l))?
                }
                "duration" => {
                    h.duration = rest
                        .first()
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| bad(l))?
                }
                "tx_depth" => {
                    h.tx_depth = rest
                        .first()
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| bad(l))?
                }
                "gid" => {
                    h.gid = rest
                        .first()
                        .and_then(|x| Gid::from_hex(x))
                        .ok_or_else(|| bad(l))?
                }
                "mac" => {
                    h.mac = rest
                        .first()
                        .and_then(|x| nic::io::addr::parse_mac(x))
                        .ok_or_else(|| bad(l))?
                }
                "mr" => {
                    let [k, va, len] = rest else {
                        return Err(bad(l));
                    };
                    h.rkey = hex(k)
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(|| bad(l))?;
                    h.va = hex(va).ok_or_else(|| bad(l))?;
                    h.len = len.parse().map_err(|_| bad(l))?;
                }
                "qp" => {
                    let [q, p] = rest else { return Err(bad(l)) };
                    let q = hex(q).filter(|&x| x <= 0xFF_FFFF).ok_or_else(|| bad(l))?;
                    let p = hex(p).filter(|&x| x <= 0xFF_FFFF).ok_or_else(|| bad(l))?;
                    h.qps.push((q as u32, p as u32));
                }
                _ => {} // a later version's key
            }
        }
        for k in [
            "rnic-perf",
            "role",
            "test",
            "mtu",
            "sizes",
            "gid",
            "mr",
            "qp",
        ] {
            if !seen.contains(k) {
                return Err(format!("the peer's record has no {k:?} line"));
            }
        }
        if h.sizes.is_empty()
            || h.sizes
                .iter()
                .any(|&s| s == 0 || s > crate::perfcmd::MAX_SIZE)
        {
            return Err("the peer's record has bad message sizes".into());
        }
        if !crate::check::MTUS.contains(&h.mtu) {
            return Err(format!("the peer's record has MTU {}", h.mtu));
        }
        if h.qps.len() > 256 || h.tx_depth == 0 || h.tx_depth > 8192 {
            return Err("the peer's record has bad QP count or tx depth".into());
        }
        Ok(h)
    }
}

pub fn send_hello(ctrl: &mut Ctrl, h: &Hello) -> Result<(), CliError> {
    let text = h.to_lines().join("\n") + "\n";
    ctrl.write_all(text.as_bytes())
}

pub fn recv_hello(ctrl: &mut Ctrl) -> Result<Hello, CliError> {
    let mut lines = Vec::new();
    loop {
        let l = ctrl.recv_line()?;
        if let Some(why) = l.strip_prefix("error ") {
            return Err(CliError::new(format!("the peer refused: {why}")));
        }
        if l == "end" {
            break;
        }
        lines.push(l);
        if lines.len() > 1000 {
            return Err(CliError::new("the peer's record does not end"));
        }
    }
    Hello::parse(&lines).map_err(CliError::new)
}

/// The next line from the peer, turning an inline engine meanwhile.
pub fn next_line(ctrl: &mut Ctrl, nd: &NetDev) -> Result<String, CliError> {
    if nd.inline {
        ctrl.recv_line_while(|n| nd.idle(n))
    } else {
        ctrl.recv_line()
    }
}

/// Expects `want` (a line's first word) from the peer.
pub fn expect(ctrl: &mut Ctrl, nd: &NetDev, want: &str) -> Result<String, CliError> {
    let l = next_line(ctrl, nd)?;
    if let Some(why) = l.strip_prefix("error ") {
        return Err(CliError::new(format!("the peer failed: {why}")));
    }
    if l.split_whitespace().next() != Some(want) {
        return Err(CliError::new(format!(
            "the peer said {l:?} where {want:?} was due"
        )));
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::{Mode, Verb};

    #[test]
    fn records_round_trip_and_reject_garbage() {
        let h = Hello {
            role: "client".into(),
            verb: Verb::Read,
            mode: Mode::Lat,
            qp_type: QpType::Uc,
            mtu: 2048,
            sizes: vec![2, 4096],
            iters: 1000,
            duration: 0,
            tx_depth: 1,
            gid: Gid::from_ipv4("192.0.2.1".parse().unwrap()),
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            rkey: 0xabcd,
            va: 0x1000_0000,
            len: 8192,
            qps: vec![(0x11, 0x123456), (0x12, 0xffffff)],
        };
        let lines = h.to_lines();
        assert_eq!(lines.last().map(|s| s.as_str()), Some("end"));
        let body: Vec<String> = lines[..lines.len() - 1].to_vec();
        assert_eq!(Hello::parse(&body), Ok(h.clone()));
        let mut extra = body.clone();
        extra.insert(3, "future_key 1 2 3".into());
        assert_eq!(Hello::parse(&extra), Ok(h));
        let no_qp: Vec<String> = body
            .iter()
            .filter(|l| !l.starts_with("qp "))
            .cloned()
            .collect();
        assert!(Hello::parse(&no_qp).unwrap_err().contains("\"qp\""));
        let mut bad = body.clone();
        bad[0] = "rnic-perf 2".into();
        assert!(Hello::parse(&bad).is_err());
        let mut bad = body;
        bad.push("qp 0x1000000 0".into());
        assert!(Hello::parse(&bad).is_err());
    }
}
