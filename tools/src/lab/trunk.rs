//! Two switches: `switches = 2` splits the hosts between switch 0
//! (h0..h(split-1)) and switch 1 (the rest), whose bridges a trunk joins:
//! a veth pair with, in each direction, an egress queue of its own (a tbf
//! of the trunk's rate, marked like a host port: [`super::net::ruleset`]).
//! This module reads and checks the `[trunk]` table; [`super::net`]
//! builds the second switch and the trunk ([`super::net::Trunk`]).
//! The egress of switch 0 toward switch 1 is the port `sw1`, the other
//! `sw0`. With PFC, each switch's stage pauses its ingress ports, the
//! trunk's among them, and honours the pauses it receives on the trunk by
//! holding that egress queue ([`super::pfc`]).

use super::setting::{parse_rate, rate_text, setting};
use super::LabError;
use serde::{Deserialize, Serialize};

/// The `[trunk]` table: every key optional, the rates and queues
/// defaulting to `[switch]`'s.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrunkFile {
    /// Hosts h0..h(split-1) on switch 0.
    pub split: Option<usize>,
    pub rate: Option<String>,
    pub ecn_kb: Option<u32>,
    pub queue_kb: Option<u32>,
}

impl TrunkFile {
    pub fn is_empty(&self) -> bool {
        *self == TrunkFile::default()
    }

    /// `over`'s keys where it has them, this table's elsewhere.
    pub fn overridden_by(self, over: TrunkFile) -> TrunkFile {
        TrunkFile {
            split: over.split.or(self.split),
            rate: over.rate.or(self.rate),
            ecn_kb: over.ecn_kb.or(self.ecn_kb),
            queue_kb: over.queue_kb.or(self.queue_kb),
        }
    }
}

/// A checked trunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrunkConfig {
    /// Hosts h0..h(split-1) on switch 0, the rest on switch 1.
    pub split: usize,
    pub rate_bps: u64,
    pub ecn_bytes: u64,
    pub queue_bytes: u64,
}

impl TrunkConfig {
    /// The trunk of a lab file's `switches` and `[trunk]` table `t`
    /// (`None` with one switch), for `hosts` hosts, its defaults the
    /// switch's `(rate_bps, ecn_kb, queue_kb)`; `xoff_kb`: the switch's
    /// PFC threshold when PFC is on.
    pub fn from_file(
        (switches, t): (Option<usize>, &TrunkFile),
        hosts: usize,
        (rate_bps, ecn_kb, queue_kb): (u64, u32, u32),
        xoff_kb: Option<u32>,
    ) -> Result<Option<TrunkConfig>, LabError> {
        match switches.unwrap_or(1) {
            1 if t.is_empty() => return Ok(None),
            1 => return Err(setting("trunk", "a [trunk] needs switches = 2")),
            2 => {}
            n => return Err(setting("switches", format!("{n}: want 1 or 2"))),
        }
        let split = t.split.unwrap_or((hosts / 2).max(1));
        if !(1..hosts).contains(&split) {
            return Err(setting(
                "trunk.split",
                format!("{split}: want 1 to {} (a host on each switch)", hosts - 1),
            ));
        }
        let rate_bps = match &t.rate {
            Some(r) => parse_rate(r)?,
            None => rate_bps,
        };
        let ecn_kb = t.ecn_kb.unwrap_or(ecn_kb);
        let queue_kb = t.queue_kb.unwrap_or(queue_kb);
        if queue_kb == 0 || ecn_kb >= queue_kb {
            return Err(setting(
                "trunk",
                format!("ecn_kb {ecn_kb} must be below queue_kb {queue_kb} (and queue_kb > 0)"),
            ));
        }
        if let Some(xoff) = xoff_kb {
            if xoff >= queue_kb {
                return Err(setting(
                    "trunk",
                    format!("switch.xoff_kb {xoff} must be below the trunk's queue_kb {queue_kb}"),
                ));
            }
        }
        Ok(Some(TrunkConfig {
            split,
            rate_bps,
            ecn_bytes: u64::from(ecn_kb) * 1000,
            queue_bytes: u64::from(queue_kb) * 1000,
        }))
    }

    /// As a `[trunk]` table.
    pub fn to_file(self) -> TrunkFile {
        TrunkFile {
            split: Some(self.split),
            rate: Some(rate_text(self.rate_bps)),
            ecn_kb: Some((self.ecn_bytes / 1000) as u32),
            queue_kb: Some((self.queue_bytes / 1000) as u32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::config::{LabConfig, LabFile};

    fn lab(text: &str) -> Result<LabConfig, LabError> {
        LabConfig::from_file(toml::from_str(text).unwrap())
    }

    #[test]
    fn a_trunk_defaults_to_the_switchs_queues_and_splits_the_hosts() {
        assert_eq!(lab("hosts = 4\n").unwrap().trunk, None);
        let c = lab("hosts = 5\nswitches = 2\n[switch]\nrate = \"1gbit\"\n").unwrap();
        assert_eq!(
            c.trunk,
            Some(TrunkConfig {
                split: 2,
                rate_bps: 1_000_000_000,
                ecn_bytes: 30_000,
                queue_bytes: 1_000_000
            })
        );
        let c = lab("hosts = 3\nswitches = 2\n[trunk]\nsplit = 1\nrate = \"400mbit\"\n").unwrap();
        assert_eq!(
            c.trunk.map(|t| (t.split, t.rate_bps)),
            Some((1, 400_000_000))
        );
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
    }

    #[test]
    fn a_bad_trunk_is_refused() {
        let bad = |t: &str| lab(t).unwrap_err().to_string();
        assert!(bad("switches = 3\n").contains("want 1 or 2"));
        assert!(bad("[trunk]\nsplit = 1\n").contains("switches = 2"));
        assert!(bad("hosts = 3\nswitches = 2\n[trunk]\nsplit = 3\n").contains("a host on each"));
        assert!(bad("switches = 2\n[trunk]\nsplit = 0\n").contains("trunk.split"));
        assert!(bad("switches = 2\n[trunk]\necn_kb = 50\nqueue_kb = 40\n").contains("ecn_kb"));
        assert!(bad(
            "switches = 2\n[switch]\npfc = true\nxoff_kb = 300\n[trunk]\nqueue_kb = 200\n"
        )
        .contains("xoff_kb"));
    }
}
