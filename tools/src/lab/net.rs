//! The fabric: a switch namespace with a bridge (two, joined by a trunk:
//! [`super::trunk`]), N host namespaces each joined to its switch by a
//! veth pair, and on each switch port (the egress toward a host or across
//! the trunk) a tbf queue of the link rate, with nftables CE-marking the
//! RoCEv2 frames toward a port while its queue is deeper than the ECN
//! threshold (the switch stage follows the tbf backlog: [`ruleset`],
//! [`super::mark`]).
//!
//! Every name carries the lab's prefix `rnlab-<pid>` (interfaces:
//! `rnl<pid>h<i>` in host i, `rnl<pid>s<i>` its switch port), so a lab
//! never touches what others made; everything goes on drop (deleting a
//! namespace deletes its links), and a lab killed before its teardown is
//! reaped by the next one ([`reap_stale`]: only `rnlab-` namespaces whose
//! process is gone).

use super::config::LabConfig;
use super::mark::DEEP_SET;
use super::sys::{in_ns, ip, run};
use super::LabError;
use std::net::Ipv4Addr;

/// The prefix of every namespace a lab makes.
pub const NS_PREFIX: &str = "rnlab-";

/// The nftables table in the switch namespace.
pub const TABLE: &str = "rnlab";

/// One host's place in the fabric.
#[derive(Debug, Clone)]
pub struct HostNet {
    /// `h0`, `h1`, ...: also its rnicd device's name.
    pub name: String,
    pub ns: String,
    pub iface: String,
    /// Its veth's other end: the switch port whose egress queue leads to
    /// this host.
    pub port: String,
    pub addr: Ipv4Addr,
    /// The namespace of its switch.
    pub switch: String,
}

/// A switch's egress port and its queue: toward a host (named after it)
/// or across the trunk (named after the switch at the other end).
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    /// `h0`.. or `sw0`/`sw1`: the nftables counters' suffix, the plots'.
    pub name: String,
    /// The namespace of the switch it belongs to.
    pub switch: String,
    pub iface: String,
    pub rate_bps: u64,
    /// The CE-marking threshold (0: no marking).
    pub ecn_bytes: u64,
    pub queue_bytes: u64,
}

/// The namespaces and links of one lab; deleted on drop.
pub struct Fabric {
    /// Switch 0's namespace (h0's switch).
    pub switch: String,
    pub hosts: Vec<HostNet>,
    /// The second switch and the trunk, when there is one.
    pub trunk: Option<Trunk>,
    /// Every egress port: the hosts' in their order, then the trunk's.
    pub ports: Vec<Port>,
    /// The namespaces made so far, deleted on drop.
    made: Vec<String>,
}

/// Host `i`'s address: 192.0.2.(i+1).
pub fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 1 + i as u8)
}

/// This process's lab prefix, `rnlab-<pid>`.
pub fn lab_id() -> String {
    format!("{NS_PREFIX}{}", std::process::id())
}

impl Fabric {
    /// Makes the namespaces, the bridge and the veths, all up, with the
    /// MTU of `cfg`; no queues yet ([`Fabric::shape`]).
    pub fn build(cfg: &LabConfig) -> Result<Fabric, LabError> {
        let id = lab_id();
        let pid = std::process::id();
        let mut f = Fabric {
            switch: format!("{id}-sw"),
            hosts: Vec::new(),
            trunk: None,
            ports: Vec::new(),
            made: Vec::new(),
        };
        f.add_switch(&f.switch.clone())?;
        if let Some(t) = &cfg.trunk {
            f.trunk = Some(Trunk::build(&mut f, t, cfg.mtu)?);
        }
        let mtu = cfg.mtu.to_string();
        for i in 0..cfg.hosts {
            let sw = match (&f.trunk, &cfg.trunk) {
                (Some(t), Some(c)) if i >= c.split => t.ns.clone(),
                _ => f.switch.clone(),
            };
            let h = HostNet {
                name: format!("h{i}"),
                ns: format!("{id}-h{i}"),
                iface: format!("rnl{pid}h{i}"),
                port: format!("rnl{pid}s{i}"),
                addr: host_addr(i),
                switch: sw.clone(),
            };
            f.add_ns(&h.ns)?;
            ip(&[
                "link", "add", &h.iface, "netns", &h.ns, "type", "veth", "peer", "name", &h.port,
                "netns", &sw,
            ])?;
            ip(&[
                "-n", &sw, "link", "set", &h.port, "mtu", &mtu, "master", "br0", "up",
            ])?;
            ip(&["-n", &h.ns, "link", "set", &h.iface, "mtu", &mtu])?;
            ip(&[
                "-n",
                &h.ns,
                "addr",
                "add",
                &format!("{}/24", h.addr),
                "dev",
                &h.iface,
            ])?;
            ip(&["-n", &h.ns, "link", "set", &h.iface, "up"])?;
            f.ports.push(Port {
                name: h.name.clone(),
                switch: sw,
                iface: h.port.clone(),
                rate_bps: cfg.rate_bps,
                ecn_bytes: cfg.ecn_bytes,
                queue_bytes: cfg.queue_bytes,
            });
            f.hosts.push(h);
        }
        if let Some(t) = &f.trunk {
            f.ports.extend(t.ports.iter().cloned());
        }
        Ok(f)
    }

    /// The switches' namespaces: switch 0's, then switch 1's.
    pub fn switches(&self) -> Vec<String> {
        std::iter::once(self.switch.clone())
            .chain(self.trunk.as_ref().map(|t| t.ns.clone()))
            .collect()
    }

    /// A switch namespace with its bridge `br0`, up.
    pub(super) fn add_switch(&mut self, name: &str) -> Result<(), LabError> {
        self.add_ns(name)?;
        ip(&["-n", name, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", name, "link", "set", "br0", "up"])?;
        Ok(())
    }

    fn add_ns(&mut self, name: &str) -> Result<(), LabError> {
        ip(&["netns", "add", name])?;
        self.made.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// Whether every host's interface has carrier.
    pub fn all_up(&self) -> bool {
        self.hosts.iter().all(|h| {
            ip(&["-n", &h.ns, "-o", "link", "show", "dev", &h.iface])
                .is_ok_and(|o| o.contains("LOWER_UP"))
        })
    }

    /// The queues: on each switch port a tbf of its link rate holding its
    /// `queue_bytes` ([`tbf_args`]), and in each switch the nftables table
    /// that counts the RoCEv2 frames toward each port and (with a
    /// threshold) CE-marks them while the port is in the set of deep
    /// queues (see [`ruleset`]).
    pub fn shape(&self, mtu: u32) -> Result<(), LabError> {
        for p in &self.ports {
            let mut a = vec!["-n", &p.switch, "qdisc", "add", "dev", &p.iface, "root"];
            let tbf = tbf_args(p.rate_bps, p.queue_bytes, mtu);
            a.extend(tbf.iter().map(String::as_str));
            run("tc", &a)?;
        }
        for (k, sw) in self.switches().iter().enumerate() {
            let ports: Vec<Port> = self
                .ports
                .iter()
                .filter(|p| p.switch == *sw)
                .cloned()
                .collect();
            let file = std::env::temp_dir().join(format!("{}-{k}.nft", lab_id()));
            std::fs::write(&file, ruleset(&ports)).map_err(|source| LabError::Io {
                what: file.display().to_string(),
                source,
            })?;
            let loaded = in_ns(sw, &["nft", "-f", &file.to_string_lossy()]);
            let _ = std::fs::remove_file(&file);
            loaded?;
        }
        Ok(())
    }
}

/// Switch 1 and the trunk.
#[derive(Debug, Clone)]
pub struct Trunk {
    /// Switch 1's namespace.
    pub ns: String,
    /// Switch 0's egress toward switch 1 (`sw1`), switch 1's toward
    /// switch 0 (`sw0`).
    pub ports: [Port; 2],
}

impl Trunk {
    /// Makes switch 1 (in `f`, deleted with it) and the veth pair between
    /// the two bridges, up with `mtu`.
    pub fn build(
        f: &mut Fabric,
        t: &super::trunk::TrunkConfig,
        mtu: u32,
    ) -> Result<Trunk, LabError> {
        let ns = format!("{}-sw1", lab_id());
        f.add_switch(&ns)?;
        let pid = std::process::id();
        let port = |k: usize, switch: &str| Port {
            name: format!("sw{}", 1 - k),
            switch: switch.to_string(),
            iface: format!("rnl{pid}t{k}"),
            rate_bps: t.rate_bps,
            ecn_bytes: t.ecn_bytes,
            queue_bytes: t.queue_bytes,
        };
        let ports = [port(0, &f.switch), port(1, &ns)];
        ip(&[
            "link",
            "add",
            &ports[0].iface,
            "netns",
            &ports[0].switch,
            "type",
            "veth",
            "peer",
            "name",
            &ports[1].iface,
            "netns",
            &ports[1].switch,
        ])?;
        let mtu = mtu.to_string();
        for p in &ports {
            ip(&[
                "-n", &p.switch, "link", "set", &p.iface, "mtu", &mtu, "master", "br0", "up",
            ])?;
        }
        Ok(Trunk { ns, ports })
    }
}

/// A port's tbf (after `tc qdisc add|change dev D root`): `rate` bits per
/// second, a bucket of at least two frames of `mtu` and at least 1 ms of
/// the rate, `limit` bytes of queue.
pub fn tbf_args(rate_bps: u64, limit: u64, mtu: u32) -> Vec<String> {
    let burst = (2 * u64::from(mtu) + 64).max(rate_bps / 8 / 1000);
    [
        "tbf".to_string(),
        "rate".into(),
        format!("{rate_bps}bit"),
        "burst".into(),
        burst.to_string(),
        "limit".into(),
        limit.to_string(),
    ]
    .to_vec()
}

/// A switch's nftables table (family `bridge`, hook `forward`): the set
/// [`DEEP_SET`] of the ports (interface indexes) whose queue is above
/// their ECN threshold, and per port P of `ports` (that switch's) a named
/// counter `seen_P` of the RoCEv2 frames (UDP 4791) toward it and, with a
/// threshold, a rule that sets CE on the ECN-capable ones while that port
/// is in the set and counts them in `marked_P`.
///
/// The set is the queue's depth as the switch stage reads it: the stage
/// ([`super::pfc`]) reads every tbf backlog each 0.5 ms and adds a port
/// when its backlog is above the threshold, removes it when it is not
/// ([`super::mark::Marking`]). Marking is instantaneous-queue marking at
/// one threshold (DCTCP's K; a ConnectX-era switch's RED with Kmin = Kmax
/// and Pmax 100 %), sampled every 0.5 ms: this kernel has no RED (nor
/// codel or pie), and nftables cannot read a qdisc.
pub fn ruleset(ports: &[Port]) -> String {
    let mut s = format!("table bridge {TABLE} {{\n  set {DEEP_SET} {{ type iface_index; }}\n");
    for h in ports {
        s += &format!(
            "  counter seen_{0} {{ }}\n  counter marked_{0} {{ }}\n",
            h.name
        );
    }
    s += "  chain forward {\n    type filter hook forward priority 0; policy accept;\n";
    for h in ports {
        s += &format!(
            "    oifname \"{}\" udp dport 4791 counter name \"seen_{}\"",
            h.iface, h.name
        );
        if h.ecn_bytes > 0 {
            s += &format!(
                " oif @{DEEP_SET} ip ecn != not-ect counter name \"marked_{}\" ip ecn set ce",
                h.name
            );
        }
        s += "\n";
    }
    s + "  }\n}\n"
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for n in self.made.iter().rev() {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The lab namespaces (`rnlab-<pid>-...`) in `ip netns list`, with the
/// pid that made each.
pub fn lab_namespaces() -> Vec<(String, u32)> {
    let list = ip(&["netns", "list"]).unwrap_or_default();
    list.lines()
        .filter_map(|l| {
            let name = l.split_whitespace().next()?;
            let pid = name
                .strip_prefix(NS_PREFIX)?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), pid))
        })
        .collect()
}

/// Deletes the lab namespaces whose lab process is gone (a lab killed
/// before its teardown), and that lab's scratch folder; returns the
/// namespaces' names. Namespaces of running labs and every other
/// namespace are left alone.
pub fn reap_stale() -> Vec<String> {
    let mut gone = Vec::new();
    for (name, pid) in lab_namespaces() {
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("{NS_PREFIX}{pid}")));
        if ip(&["netns", "del", &name]).is_ok() {
            gone.push(name);
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::config::{LabConfig, LabFile};

    #[test]
    fn the_ruleset_counts_every_port_and_marks_the_deep_ones() {
        let cfg = LabConfig::from_file(LabFile::default()).unwrap();
        let ports = |ecn_bytes| -> Vec<Port> {
            (0..2)
                .map(|i| Port {
                    name: format!("h{i}"),
                    switch: String::new(),
                    iface: format!("p{i}"),
                    rate_bps: cfg.rate_bps,
                    ecn_bytes,
                    queue_bytes: cfg.queue_bytes,
                })
                .collect()
        };
        let r = ruleset(&ports(cfg.ecn_bytes));
        assert!(r.contains("set deep { type iface_index; }"), "{r}");
        assert!(r.contains("oifname \"p1\" udp dport 4791 counter name \"seen_h1\" oif @deep ip ecn != not-ect counter name \"marked_h1\" ip ecn set ce"), "{r}");
        let r = ruleset(&ports(0));
        assert!(
            r.contains("counter name \"seen_h0\"\n") && !r.contains("ecn set ce"),
            "{r}"
        );
    }
}
