//! # cc — congestion control and flow control, sans-I/O
//!
//! What a hardware RNIC does about congestion, in the same shape as the
//! transport: every entry point takes `now` (a [`crate::Instant`]), nothing
//! reads a clock, opens a socket or spawns a thread, so the same code runs in
//! the simulators (the `sim` crate: `sim::Sim`, `sim::fabric`) and behind
//! real ports.
//!
//! - [`dcqcn`]: the DCQCN *reaction point* (RP), one [`ReactionPoint`] per
//!   QP: rate cut on CNP, α estimator, rate increase by timer and byte
//!   counter through fast recovery, additive and hyper increase. Knobs carry
//!   NVIDIA's names ([`DcqcnParams`]), with two presets: NVIDIA firmware
//!   defaults and the SIGCOMM 2015 paper's values. [`RpState`] is its
//!   state at one instant (RC, RT, α), for tools.
//! - [`np`]: the *notification point* (NP): a CE-marked RoCE packet makes a
//!   CNP, at most one per QP per `min_time_between_cnps` ([`CnpLimiter`]),
//!   with its own DSCP / 802.1p priority ([`NpParams`]).
//! - [`pacer`]: packet-granularity pacing of a QP to its DCQCN rate on the
//!   virtual clock ([`Pacer`]); [`SharedRate`] publishes a rate to another
//!   thread without a lock.
//! - [`pfc`]: 802.1Qbb priority flow control: the reaction to received PFC
//!   frames ([`PfcRx`]: pause-until per priority, refresh, resume, pause
//!   durations) and their generation from a receive backlog ([`PfcTx`]:
//!   XOFF / XON thresholds, refresh).
//! - [`qos`]: which priority a frame travels on (VLAN PCP, or DSCP in trust
//!   mode) and the marking of our own data (ECT(0), DSCP 26).
//!
//! Counters carry the names users know from mlx5 (`ethtool -S`,
//! `rdma statistic`): `np_ecn_marked_roce_packets`, `np_cnp_sent`,
//! `rp_cnp_handled`, `rp_cnp_ignored`, `rx_prio{p}_pause`,
//! `rx_prio{p}_pause_duration`, `tx_prio{p}_pause`,
//! `tx_prio{p}_pause_duration` ([`CcCounters`]).
//!
//! Wiring into the transport (`Rnic`: the NP on CE-marked requests, the RP on
//! received CNPs, the pacer and PFC gating in `poll_transmit`, PFC frames in
//! `handle_frame`) happens in `transport`; `sim::fabric` drives these pieces
//! with packet-level flows.

pub mod dcqcn;
pub mod np;
pub mod pacer;
pub mod pfc;
pub mod qos;

pub use dcqcn::{DcqcnParams, Increase, Phase, ReactionPoint, RpCounters, RpState, Trigger};
pub use np::{CnpLimiter, NpCounters, NpParams};
pub use pacer::{Pacer, SharedRate};
pub use pfc::{PfcCounters, PfcRx, PfcTx, PfcTxParams, PRIORITIES};
pub use qos::{ecn, Qos, TrustMode};

/// Every congestion-control counter of a device (or of a QP, for `np` and
/// `rp`), under the names mlx5 uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CcCounters {
    pub np: NpCounters,
    pub rp: RpCounters,
    pub pfc: PfcCounters,
}

impl CcCounters {
    /// (name, value) pairs in a stable order: NP, RP, then the PFC counters
    /// priority by priority (durations in microseconds, as mlx5 reports).
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.np
            .iter()
            .chain(self.rp.iter())
            .map(|(n, v)| (n.to_string(), v))
            .chain(self.pfc.iter())
    }

    /// The value of a counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &CcCounters) {
        self.np.add(&other.np);
        self.rp.add(&other.rp);
        self.pfc.add(&other.pfc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_the_mlx5_ones() {
        let mut c = CcCounters::default();
        c.np.np_cnp_sent = 3;
        c.rp.rp_cnp_ignored = 2;
        c.pfc.rx_pause[3] = 7;
        c.pfc.tx_pause_duration_ns[6] = 2_500;
        let names: Vec<String> = c.iter().map(|(n, _)| n).collect();
        for n in [
            "np_ecn_marked_roce_packets",
            "np_cnp_sent",
            "rp_cnp_handled",
            "rp_cnp_ignored",
            "rx_prio0_pause",
            "rx_prio7_pause_duration",
            "tx_prio3_pause",
            "tx_prio5_pause_duration",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing");
        }
        assert_eq!(names.len(), 4 + 4 * 8);
        assert_eq!(c.get("np_cnp_sent"), Some(3));
        assert_eq!(c.get("rp_cnp_ignored"), Some(2));
        assert_eq!(c.get("rx_prio3_pause"), Some(7));
        assert_eq!(c.get("tx_prio6_pause_duration"), Some(2)); // µs
        assert_eq!(c.get("nope"), None);
        let mut d = c.clone();
        d.add(&c);
        assert_eq!(d.get("rx_prio3_pause"), Some(14));
    }
}
