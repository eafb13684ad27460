//! The fabric: a switch namespace with a bridge, N host namespaces each
//! joined to it by a veth pair, and on each switch port (the egress
//! toward a host) a tbf queue of the link rate, with nftables CE-marking
//! the RoCEv2 frames toward a port while its queue is deeper than the ECN
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
}

/// The namespaces and links of one lab; deleted on drop.
pub struct Fabric {
    pub switch: String,
    pub hosts: Vec<HostNet>,
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
            made: Vec::new(),
        };
        f.add_ns(&f.switch.clone())?;
        let sw = f.switch.clone();
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        let mtu = cfg.mtu.to_string();
        for i in 0..cfg.hosts {
            let h = HostNet {
                name: format!("h{i}"),
                ns: format!("{id}-h{i}"),
                iface: format!("rnl{pid}h{i}"),
                port: format!("rnl{pid}s{i}"),
                addr: host_addr(i),
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
            f.hosts.push(h);
        }
        Ok(f)
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

    /// The queues: on each switch port a tbf of the link rate holding
    /// `queue_bytes`, and the nftables table that counts the RoCEv2
    /// frames toward each port and (with a threshold) CE-marks them while
    /// the port is in the set of deep queues (see [`ruleset`]).
    pub fn shape(&self, cfg: &LabConfig) -> Result<(), LabError> {
        let rate = format!("{}bit", cfg.rate_bps);
        // tbf's bucket: at least two frames, at least 1 ms of the rate
        let burst = (2 * u64::from(cfg.mtu) + 64).max(cfg.rate_bps / 8 / 1000);
        for h in &self.hosts {
            run(
                "tc",
                &[
                    "-n",
                    &self.switch,
                    "qdisc",
                    "add",
                    "dev",
                    &h.port,
                    "root",
                    "tbf",
                    "rate",
                    &rate,
                    "burst",
                    &burst.to_string(),
                    "limit",
                    &cfg.queue_bytes.to_string(),
                ],
            )?;
        }
        let rules = ruleset(&self.hosts, cfg);
        let file = std::env::temp_dir().join(format!("{}.nft", lab_id()));
        std::fs::write(&file, rules).map_err(|source| LabError::Io {
            what: file.display().to_string(),
            source,
        })?;
        let loaded = in_ns(&self.switch, &["nft", "-f", &file.to_string_lossy()]);
        let _ = std::fs::remove_file(&file);
        loaded.map(|_| ())
    }
}

/// The switch's nftables table (family `bridge`, hook `forward`): the
/// set [`DEEP_SET`] of the ports (interface indexes) whose queue is above
/// the ECN threshold, and per port a named counter `seen_hI` of the
/// RoCEv2 frames (UDP 4791) toward host I and, with a threshold, a rule
/// that sets CE on the ECN-capable ones while that port is in the set and
/// counts them in `marked_hI`.
///
/// The set is the queue's depth as the switch stage reads it: the stage
/// ([`super::pfc`]) reads every tbf backlog each 0.5 ms and adds a port
/// when its backlog is above the threshold, removes it when it is not
/// ([`super::mark::Marking`]). Marking is instantaneous-queue marking at
/// one threshold (DCTCP's K; a ConnectX-era switch's RED with Kmin = Kmax
/// and Pmax 100 %), sampled every 0.5 ms: this kernel has no RED (nor
/// codel or pie), and nftables cannot read a qdisc.
pub fn ruleset(hosts: &[HostNet], cfg: &LabConfig) -> String {
    let mut s = format!("table bridge {TABLE} {{\n  set {DEEP_SET} {{ type iface_index; }}\n");
    for h in hosts {
        s += &format!(
            "  counter seen_{0} {{ }}\n  counter marked_{0} {{ }}\n",
            h.name
        );
    }
    s += "  chain forward {\n    type filter hook forward priority 0; policy accept;\n";
    for h in hosts {
        s += &format!(
            "    oifname \"{}\" udp dport 4791 counter name \"seen_{}\"",
            h.port, h.name
        );
        if cfg.ecn_bytes > 0 {
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
        let hosts: Vec<HostNet> = (0..2)
            .map(|i| HostNet {
                name: format!("h{i}"),
                ns: String::new(),
                iface: String::new(),
                port: format!("p{i}"),
                addr: host_addr(i),
            })
            .collect();
        let r = ruleset(&hosts, &cfg);
        assert!(r.contains("set deep { type iface_index; }"), "{r}");
        assert!(r.contains("oifname \"p1\" udp dport 4791 counter name \"seen_h1\" oif @deep ip ecn != not-ect counter name \"marked_h1\" ip ecn set ce"), "{r}");
        let mut off = cfg.clone();
        off.ecn_bytes = 0;
        let r = ruleset(&hosts, &off);
        assert!(
            r.contains("counter name \"seen_h0\"\n") && !r.contains("ecn set ce"),
            "{r}"
        );
    }
}
