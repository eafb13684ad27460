//! Priorities and markings: which of the eight 802.1p priorities a frame
//! travels on, and how our own data frames are marked.
//!
//! A port classifies a frame either by its VLAN PCP ("trust pcp") or by its
//! IP DSCP ("trust dscp", through a DSCP → priority table whose default is
//! DSCP >> 3, the class selector). PFC pauses and resumes those priorities.
//!
//! Our data goes out ECT(0) with DSCP 26 (AF31, priority 3 under the
//! default table), CNPs with DSCP 48 and priority 6 ([`super::NpParams`]):
//! the usual lossless-RoCE layout (data on a PFC-enabled class, CNPs on a
//! higher class that is served first).

use wire::VlanTag;

/// ECN codepoints (RFC 3168 §5).
pub mod ecn {
    pub const NOT_ECT: u8 = 0;
    pub const ECT1: u8 = 1;
    pub const ECT0: u8 = 2;
    pub const CE: u8 = 3;

    /// Whether a switch may mark this packet CE instead of dropping it.
    pub const fn is_ect(ecn: u8) -> bool {
        matches!(ecn & 3, ECT1 | ECT0 | CE)
    }
}

/// Where the priority of a received frame comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum TrustMode {
    /// The VLAN PCP; untagged frames get `Qos::default_priority`.
    Pcp,
    /// The IP DSCP through `Qos::dscp2prio`.
    #[default]
    Dscp,
}

/// Priority classification and the marking of our own data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Qos {
    pub trust: TrustMode,
    /// DSCP → priority (trust dscp). Default: DSCP >> 3.
    pub dscp2prio: [u8; 64],
    /// Priority of untagged frames under trust pcp.
    pub default_priority: u8,
    /// DSCP of our data packets (default 26).
    pub data_dscp: u8,
    /// ECN codepoint of our data packets (default ECT(0)).
    pub data_ecn: u8,
}

impl Default for Qos {
    fn default() -> Qos {
        let mut dscp2prio = [0u8; 64];
        for (d, p) in dscp2prio.iter_mut().enumerate() {
            *p = (d >> 3) as u8;
        }
        Qos {
            trust: TrustMode::Dscp,
            dscp2prio,
            default_priority: 0,
            data_dscp: 26,
            data_ecn: ecn::ECT0,
        }
    }
}

impl Qos {
    /// The priority (0..=7) of a frame with this VLAN tag and IP DSCP.
    pub fn priority(&self, vlan: Option<VlanTag>, dscp: u8) -> u8 {
        match self.trust {
            TrustMode::Pcp => vlan.map_or(self.default_priority, |v| v.pcp) & 7,
            TrustMode::Dscp => self.dscp2prio[(dscp & 63) as usize] & 7,
        }
    }

    /// The priority our data travels on (its DSCP through the table).
    pub fn data_priority(&self) -> u8 {
        self.dscp2prio[(self.data_dscp & 63) as usize] & 7
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let q = Qos::default();
        assert_eq!(q.priority(None, 26), 3);
        assert_eq!(q.priority(None, 48), 6);
        assert_eq!(q.data_priority(), 3);
        assert_eq!(q.data_ecn, ecn::ECT0);
        let tag = VlanTag {
            pcp: 5,
            dei: false,
            vid: 10,
        };
        // trust dscp ignores the PCP
        assert_eq!(q.priority(Some(tag), 0), 0);
        let p = Qos {
            trust: TrustMode::Pcp,
            default_priority: 1,
            ..q
        };
        assert_eq!(p.priority(Some(tag), 0), 5);
        assert_eq!(p.priority(None, 48), 1);
        let mut custom = q;
        custom.dscp2prio[26] = 4;
        assert_eq!(custom.priority(None, 26), 4);
        assert_eq!(custom.priority(None, 0xFF), 7); // masked to 63 → 63 >> 3
        assert!(ecn::is_ect(ecn::ECT0) && ecn::is_ect(ecn::ECT1) && !ecn::is_ect(0));
    }
}
