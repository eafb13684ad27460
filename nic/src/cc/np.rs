//! The DCQCN notification point (NP): CE-marked RoCE packets in, CNPs out.
//!
//! RoCEv2 (IBTA Annex A17.9): when a RoCE packet arrives with IP ECN = 11
//! (CE), the receiver sends a Congestion Notification Packet (opcode 0x81,
//! BECN set) to the QP that sent it. Like NVIDIA firmware, at most one CNP
//! per QP per `min_time_between_cnps`; the CNP travels with its own DSCP and
//! 802.1p priority (`cnp_dscp`, `cnp_802p_prio`), Not-ECT.
//!
//! [`CnpLimiter`] is the per-QP state (one `Option<Instant>`); the caller
//! owns one per QP, so no lock is shared between QPs.

use super::qos::ecn;
use crate::time::Instant;
use std::time::Duration;
use wire::{EthernetRepr, IpRepr, Opcode, RoceRepr, UdpRepr, VlanTag, ROCEV2_PORT};

/// NP knobs (mlx5 `roce_np/*`, mlxconfig `MIN_TIME_BETWEEN_CNPS`,
/// `CNP_DSCP`, `CNP_802P_PRIO`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NpParams {
    /// Whether CE-marked packets produce CNPs (mlx5 `roce_np/enable/<prio>`).
    pub enabled: bool,
    /// At most one CNP per QP per this interval.
    pub min_time_between_cnps: Duration,
    /// DSCP of the CNPs we send.
    pub cnp_dscp: u8,
    /// 802.1p priority of the CNPs we send (VLAN PCP when tagged).
    pub cnp_802p_prio: u8,
}

impl NpParams {
    /// NVIDIA firmware defaults: MIN_TIME_BETWEEN_CNPS 4 µs, CNP_DSCP 48,
    /// CNP_802P_PRIO 6 (`mlxconfig -q`; NVIDIA "DCQCN CC Parameters"; see
    /// [`super::DcqcnParams::nvidia`]).
    pub const fn nvidia() -> NpParams {
        NpParams {
            enabled: true,
            min_time_between_cnps: Duration::from_micros(4),
            cnp_dscp: 48,
            cnp_802p_prio: 6,
        }
    }

    /// The SIGCOMM 2015 paper: one CNP per flow per N = 50 µs at most. The
    /// paper does not say how CNPs are marked; NVIDIA's DSCP 48 / priority
    /// 6 are kept.
    pub const fn sigcomm15() -> NpParams {
        NpParams {
            min_time_between_cnps: Duration::from_micros(50),
            ..NpParams::nvidia()
        }
    }
}

impl NpParams {
    /// For a link `s` times slower than these values were made for: the
    /// CNP interval × s (see [`super::DcqcnParams::scaled`]).
    pub fn scaled(&self, s: f64) -> NpParams {
        if !(s.is_finite() && s > 0.0) {
            return *self;
        }
        NpParams {
            min_time_between_cnps: super::dcqcn::scale_time(self.min_time_between_cnps, s),
            ..*self
        }
    }
}

impl Default for NpParams {
    fn default() -> NpParams {
        NpParams::nvidia()
    }
}

/// NP counters (mlx5 names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NpCounters {
    /// RoCE packets received CE-marked.
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs sent.
    pub np_cnp_sent: u64,
}

impl NpCounters {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
        ]
        .into_iter()
    }

    pub fn add(&mut self, o: &NpCounters) {
        self.np_ecn_marked_roce_packets += o.np_ecn_marked_roce_packets;
        self.np_cnp_sent += o.np_cnp_sent;
    }
}

/// The CNP rate limiter of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CnpLimiter {
    last_cnp: Option<Instant>,
}

impl CnpLimiter {
    pub const fn new() -> CnpLimiter {
        CnpLimiter { last_cnp: None }
    }

    /// When this QP last sent a CNP.
    pub fn last_cnp(&self) -> Option<Instant> {
        self.last_cnp
    }

    /// A RoCE packet (not itself a CNP) with IP ECN codepoint `ecn` arrived
    /// on this QP at `now`. Returns whether a CNP must be sent now; if so it
    /// is counted as sent.
    pub fn on_packet(
        &mut self,
        now: Instant,
        ecn_bits: u8,
        params: &NpParams,
        counters: &mut NpCounters,
    ) -> bool {
        if ecn_bits & 3 != ecn::CE {
            return false;
        }
        counters.np_ecn_marked_roce_packets += 1;
        if !params.enabled {
            return false;
        }
        if let Some(last) = self.last_cnp {
            if now < last + params.min_time_between_cnps {
                return false;
            }
        }
        self.last_cnp = Some(now);
        counters.np_cnp_sent += 1;
        true
    }

    /// [`Self::on_packet`] for a parsed frame: CNPs never trigger CNPs.
    pub fn on_roce(
        &mut self,
        now: Instant,
        rx: &RoceRepr<'_>,
        params: &NpParams,
        counters: &mut NpCounters,
    ) -> bool {
        if rx.bth.opcode == Opcode::CNP {
            return false;
        }
        self.on_packet(now, rx.ip.ecn(), params, counters)
    }
}

/// The CNP that answers the received packet `rx`, addressed to the sending
/// QP `dest_qp` (the QP context's remote QPN): Ethernet and IP addresses
/// swapped, IP DSCP `cnp_dscp`, Not-ECT, VLAN PCP `cnp_802p_prio` (VLAN id
/// kept) when `rx` was tagged, UDP source port of the flow (symmetric under
/// `wire::udp::rdma_udp_sport`), destination port 4791.
pub fn cnp_reply(rx: &RoceRepr<'_>, dest_qp: u32, params: &NpParams) -> RoceRepr<'static> {
    let eth = EthernetRepr {
        dst: rx.eth.src,
        src: rx.eth.dst,
        vlan: rx.eth.vlan.map(|v| VlanTag {
            pcp: params.cnp_802p_prio & 7,
            ..v
        }),
        ethertype: 0,
    };
    let ip = match rx.ip {
        IpRepr::V4(mut v) => {
            core::mem::swap(&mut v.src, &mut v.dst);
            v.dscp = params.cnp_dscp & 63;
            v.ecn = ecn::NOT_ECT;
            v.ident = 0;
            v.dont_frag = true;
            v.ttl = 64;
            IpRepr::V4(v)
        }
        IpRepr::V6(mut v) => {
            core::mem::swap(&mut v.src, &mut v.dst);
            v.dscp = params.cnp_dscp & 63;
            v.ecn = ecn::NOT_ECT;
            v.hop_limit = 64;
            IpRepr::V6(v)
        }
    };
    let udp = UdpRepr {
        src_port: rx.udp.src_port,
        dst_port: ROCEV2_PORT,
    };
    RoceRepr::cnp(eth, ip, udp, dest_qp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use wire::{BthRepr, EthernetAddress, ExtHeaders, Ipv4Repr, Psn, UdpChecksum};

    fn us(n: u64) -> Instant {
        Instant::from_nanos(n * 1000)
    }

    #[test]
    fn one_cnp_per_qp_per_interval() {
        let p = NpParams::nvidia();
        let mut c = NpCounters::default();
        let (mut a, mut b) = (CnpLimiter::new(), CnpLimiter::new());
        assert!(!a.on_packet(us(0), ecn::ECT0, &p, &mut c));
        assert_eq!(c.np_ecn_marked_roce_packets, 0);
        assert!(a.on_packet(us(1), ecn::CE, &p, &mut c));
        assert!(!a.on_packet(us(2), ecn::CE, &p, &mut c));
        // another QP is not held back by the first
        assert!(b.on_packet(us(2), ecn::CE, &p, &mut c));
        assert!(!a.on_packet(Instant::from_nanos(4_999), ecn::CE, &p, &mut c));
        assert!(a.on_packet(us(5), ecn::CE, &p, &mut c)); // exactly 4 µs later
        assert_eq!(a.last_cnp(), Some(us(5)));
        assert_eq!(c.np_ecn_marked_roce_packets, 5);
        assert_eq!(c.np_cnp_sent, 3);
        let off = NpParams {
            enabled: false,
            ..p
        };
        assert!(!a.on_packet(us(100), ecn::CE, &off, &mut c));
        assert_eq!((c.np_ecn_marked_roce_packets, c.np_cnp_sent), (6, 3));
        assert_eq!(
            NpParams::sigcomm15().min_time_between_cnps,
            Duration::from_micros(50)
        );
    }

    #[test]
    fn cnp_reply_addresses_the_sender() {
        let data = RoceRepr {
            eth: EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 100,
                }),
                ethertype: 0,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                dscp: 26,
                ecn: ecn::CE,
                ident: 7,
                dont_frag: true,
                ttl: 63,
            }),
            udp: UdpRepr {
                src_port: 0xC123,
                dst_port: ROCEV2_PORT,
            },
            udp_checksum: UdpChecksum::Zero,
            bth: BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(5)),
            ext: ExtHeaders::default(),
            payload: &[1, 2, 3, 4],
            trailer_len: 0,
        };
        let p = NpParams::nvidia();
        let mut lim = CnpLimiter::new();
        let mut c = NpCounters::default();
        assert!(lim.on_roce(us(0), &data, &p, &mut c));
        let cnp = cnp_reply(&data, 0x22, &p);
        assert_eq!(cnp.bth.opcode, Opcode::CNP);
        assert!(cnp.bth.becn);
        assert_eq!(cnp.bth.dest_qp, 0x22);
        assert_eq!(cnp.eth.dst, data.eth.src);
        assert_eq!(cnp.eth.vlan.unwrap().pcp, 6);
        assert_eq!(cnp.eth.vlan.unwrap().vid, 100);
        assert_eq!(cnp.ip.src(), data.ip.dst());
        assert_eq!(cnp.ip.dst(), data.ip.src());
        assert_eq!((cnp.ip.dscp(), cnp.ip.ecn()), (48, ecn::NOT_ECT));
        assert_eq!(cnp.udp.dst_port, ROCEV2_PORT);
        // it emits and parses back; a CE-marked CNP makes no CNP
        let mut buf = vec![0u8; cnp.buffer_len()];
        cnp.emit(&mut buf).unwrap();
        let mut back = RoceRepr::parse(&buf).unwrap();
        assert_eq!(back, cnp);
        back.ip.set_ecn(ecn::CE);
        assert!(!lim.on_roce(us(100), &back, &p, &mut c));
    }
}
