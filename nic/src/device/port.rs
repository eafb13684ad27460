//! The device's one port: its state and attributes (`ibv_query_port`),
//! link speed, MTU and PFC settings.

use super::Rnic;
use crate::time::Instant;
use crate::transport::{congestion, PfcTxConfig};
use crate::verbs::{AsyncEvent, ModifyError, VerbsError};
use wire::QpType;

/// A port's state (rdma-core `enum ibv_port_state`, IBTA 14.2.5.6
/// PortState): a RoCE port is ACTIVE while its link is up, else DOWN (no
/// subnet manager walks it through INIT and ARMED).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

impl PortState {
    /// The `enum ibv_port_state` number.
    pub fn ibv(self) -> u32 {
        self as u32
    }
}

/// What `ibv_query_port` tells of the device's one port.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PortAttr {
    pub state: PortState,
    /// The active IB MTU in bytes (256..4096), from the interface MTU.
    pub active_mtu: u32,
    /// The largest IB MTU the port supports (4096).
    pub max_mtu: u32,
    pub link_speed_bps: u64,
}

impl Rnic {
    /// The port's link state as its owner (the engine) sees it: on a
    /// change, IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE is raised for
    /// port 1 (IBTA 11.6.3.2); the same state again raises nothing. Only a
    /// report: the data path is unchanged (an RC QP retries and fails by
    /// its retry count, as on hardware). Returns whether it changed.
    pub fn set_link_up(&mut self, up: bool) -> bool {
        if self.res.link_up == up {
            return false;
        }
        self.res.link_up = up;
        self.res.raise(if up {
            AsyncEvent::PortActive(1)
        } else {
            AsyncEvent::PortErr(1)
        });
        true
    }

    /// The link state at start-up: no event (the port simply starts DOWN
    /// or ACTIVE).
    pub fn init_link_up(&mut self, up: bool) {
        self.res.link_up = up;
    }

    /// `ibv_query_port` for port 1.
    pub fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: if self.res.link_up {
                PortState::Active
            } else {
                PortState::Down
            },
            active_mtu: self.res.cfg.port_mtu,
            max_mtu: 4096,
            link_speed_bps: self.res.cfg.link_bps,
        }
    }

    /// The port's speed: DCQCN's line rate and PFC's quantum length follow it.
    pub fn set_link_speed(&mut self, bps: u64) {
        self.res.cfg.link_bps = bps;
        self.res.pfc = congestion::pfc_rx(&self.res.cfg.cc, bps);
        if let Some(tx) = &mut self.res.pfc_tx {
            tx.set_link_bps(bps);
        }
        for qp in self.qps.iter_mut().flatten() {
            qp.cc = congestion::QpCc::new(&self.res.cfg.cc, bps);
        }
        // a fresh DCQCN state has no timers: O(#QPs), but a configuration
        // call, not a turn
        for idx in 0..self.qps.len() {
            self.rearm(idx);
        }
    }

    /// Takes on a port's speed and interface MTU (the largest IP
    /// datagram): what an engine does with its port before the first turn,
    /// and what a view of the device shows of a port it has not opened.
    pub fn fit_port(&mut self, link_speed_bps: u64, ip_mtu: usize) {
        self.set_link_speed(link_speed_bps);
        self.set_port_ip_mtu(ip_mtu);
    }

    /// Sets the port's active MTU from the interface MTU (the largest IP
    /// datagram): the largest IB MTU whose packets fit (see
    /// [`ib_mtu_for_ip_mtu`]), as rxe derives its port's active MTU from
    /// its netdev's MTU.
    pub fn set_port_ip_mtu(&mut self, ip_mtu: usize) {
        let ipv6 = self.res.cfg.gid.to_ipv4().is_none();
        let _ = self.set_port_mtu(ib_mtu_for_ip_mtu(ip_mtu, ipv6));
    }

    /// Sets the port's active MTU (see [`RnicConfig::port_mtu`](crate::transport::RnicConfig::port_mtu)); UD QPs,
    /// existing and new, take it as their message limit.
    pub fn set_port_mtu(&mut self, mtu: u32) -> Result<(), VerbsError> {
        if !crate::verbs::MTUS.contains(&mtu) {
            return Err(VerbsError::Modify(ModifyError::OutOfRange {
                name: "active_mtu",
                value: mtu,
            }));
        }
        self.res.cfg.port_mtu = mtu;
        for qp in self.qps.iter_mut().flatten() {
            if qp.qp_type() == QpType::Ud {
                qp.mtu = mtu;
            }
        }
        Ok(())
    }

    /// The port's active MTU (`ibv_query_port`'s `active_mtu`).
    pub fn port_mtu(&self) -> u32 {
        self.res.cfg.port_mtu
    }

    /// PFC counters as of `now`, under the mlx5 `ethtool -S` names:
    /// `rx_prio{p}_pause`, `rx_prio{p}_pause_duration` (frames we obeyed)
    /// and `tx_prio{p}_pause`, `tx_prio{p}_pause_duration` (frames we
    /// generated, see [`Self::on_rx_backlog`]).
    pub fn pfc_counters(&self, now: Instant) -> crate::cc::PfcCounters {
        let mut c = self.res.pfc.counters(now);
        if let Some(tx) = &self.res.pfc_tx {
            c.add(&tx.counters(now));
        }
        c
    }

    /// The latest `now` handed to the device (by `handle_frame`,
    /// `handle_timeout`, `poll_transmit` or `on_rx_backlog`): what a
    /// caller without the driver's clock passes to [`Self::pfc_counters`].
    pub fn last_now(&self) -> Instant {
        self.res.now
    }

    /// Turns PFC generation on (or off with `None`), as
    /// [`CcConfig::pfc_tx`](crate::transport::CcConfig::pfc_tx) does at creation; counters start again.
    pub fn set_pfc_tx(&mut self, cfg: Option<PfcTxConfig>) {
        self.res.cfg.cc.pfc_tx = cfg;
        self.res.pfc_tx = congestion::pfc_tx(&self.res.cfg.cc, self.res.cfg.link_bps);
    }

    /// Whether the device generates PFC (so its driver should report the
    /// receive backlog through [`Self::on_rx_backlog`]).
    pub fn pfc_tx_enabled(&self) -> bool {
        self.res.pfc_tx.is_some()
    }

    /// The receive backlog of priority `prio` (bytes received by the port
    /// and not yet handed to [`Self::handle_frame`]) is `bytes` at `now`.
    /// With PFC generation on (IEEE 802.1Qbb): reaching the XOFF threshold
    /// queues a PFC frame pausing the peer on `prio`, refreshed every half
    /// pause time while the backlog stays above XON; falling to XON queues
    /// one with pause time 0. The frames leave through
    /// [`Self::poll_transmit`], ahead of any data. Without it, nothing.
    pub fn on_rx_backlog(&mut self, now: Instant, prio: u8, bytes: u64) {
        self.res.now = self.res.now.max(now);
        if let Some(tx) = &mut self.res.pfc_tx {
            tx.on_backlog(prio, bytes);
        }
    }

    /// [`Self::on_rx_backlog`] for the eight priorities at once.
    pub fn on_rx_backlogs(&mut self, now: Instant, bytes: &[u64; crate::cc::PRIORITIES]) {
        for (p, &b) in bytes.iter().enumerate() {
            self.on_rx_backlog(now, p as u8, b);
        }
    }
}

/// What a RoCEv2 packet adds to its payload inside the IP MTU, at most: IP
/// (20, or 40 for IPv6) + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 (RDMA
/// WRITE Only with Immediate carries both) + ICRC 4.
const ROCE_OVERHEAD_V4: usize = 20 + 8 + 12 + 16 + 4 + 4;

/// The largest IB MTU (256..4096) whose packets fit an interface whose IP
/// MTU is `ip_mtu`; 256 when nothing larger fits.
pub fn ib_mtu_for_ip_mtu(ip_mtu: usize, ipv6: bool) -> u32 {
    let room = ip_mtu.saturating_sub(ROCE_OVERHEAD_V4 + if ipv6 { 20 } else { 0 });
    crate::verbs::MTUS
        .iter()
        .rev()
        .copied()
        .find(|&m| m as usize <= room)
        .unwrap_or(256)
}
