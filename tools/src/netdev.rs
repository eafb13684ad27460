//! A soft RNIC on a real interface, as `rnic perf --dev` and `rnic
//! pingpong` use it: the interface's address (its GID), a port (AF_XDP,
//! else AF_PACKET; optionally recorded to a pcap), the polling engine, one
//! PD, one CQ and one registered region; QPs created and connected through
//! the engine's control path; the device's counters as JSON.
//!
//! The peer's MAC is the next hop's, from the kernel's route and
//! neighbour tables (`nic::io::addr::next_hop_mac`): the process runs in
//! the interface's network namespace, and the kernel keeps ARP working
//! beside the port (AF_XDP's program passes everything that is not
//! RoCEv2; AF_PACKET only copies).

use crate::qp::{self, Connect, QpError};
use crate::CliError;
use nic::device::Rnic;
use nic::engine::{CqHandle, Device, Engine, EngineConfig};
use nic::io::addr::next_hop_mac;
use nic::io::afxdp::{AfXdpConfig, AfXdpPort, AttachMode};
use nic::io::pcap::PcapTap;
use nic::io::Port;
use nic::io::{open_port, Backend};
use nic::transport::RnicConfig;
use nic::verbs::{access, AhAttr, HeapMemory, Memory, QpType};
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wire::{EthernetAddress, Gid};

/// Which port to open on the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// AF_XDP if it opens (native XDP, else generic), else AF_PACKET.
    Auto,
    AfXdp,
    /// AF_XDP with the program attached in generic (SKB) mode: the XDP
    /// program then runs where the kernel receives the frame — on the CPU
    /// that RPS picks — rather than in the driver.
    AfXdpGeneric,
    /// AF_PACKET with TPACKET_V2 rings (each frame handed over at once).
    AfPacket,
    /// AF_PACKET with TPACKET_V3 rings (a block at a time; a block that
    /// does not fill waits for the kernel's 1 ms retire timer).
    AfPacketV3,
}

/// Parses `--backend`.
pub fn parse_backend(s: &str) -> Result<PortKind, CliError> {
    match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "auto" => Ok(PortKind::Auto),
        "afxdp" | "xdp" => Ok(PortKind::AfXdp),
        "afxdpgeneric" | "xdpgeneric" | "afxdpskb" => Ok(PortKind::AfXdpGeneric),
        "afpacket" | "packet" | "afpacketv2" | "packetv2" => Ok(PortKind::AfPacket),
        "afpacketv3" | "packetv3" => Ok(PortKind::AfPacketV3),
        _ => Err(CliError::usage(format!(
            "--backend {s}: one of auto, afxdp, afxdp-generic, afpacket, afpacket-v3"
        ))),
    }
}

/// Opens the port; returns it and what it is.
fn open(ifname: &str, kind: PortKind) -> Result<(Box<dyn Port>, &'static str), CliError> {
    let err = |e: &dyn std::fmt::Display| CliError::new(format!("interface {ifname}: {e}"));
    let named = |b: Backend| match b {
        Backend::AfPacket => "AF_PACKET (TPACKET_V2)",
        Backend::AfPacketV3 => "AF_PACKET (TPACKET_V3)",
        _ => "AF_XDP",
    };
    match kind {
        PortKind::AfXdpGeneric => {
            let cfg = AfXdpConfig {
                mode: Some(AttachMode::Generic),
                ..Default::default()
            };
            let p = AfXdpPort::open(ifname, cfg).map_err(|e| err(&e))?;
            Ok((Box::new(p), "AF_XDP (generic XDP)"))
        }
        k => {
            let b = match k {
                PortKind::AfXdp => Backend::AfXdp,
                PortKind::AfPacket => Backend::AfPacket,
                PortKind::AfPacketV3 => Backend::AfPacketV3,
                _ => Backend::Auto,
            };
            let (p, got) = open_port(ifname, b).map_err(|e| err(&e))?;
            Ok((p, named(got)))
        }
    }
}

/// Parses `--engine`: true for inline.
pub fn parse_engine(s: &str) -> Result<bool, CliError> {
    match s.to_ascii_lowercase().as_str() {
        "inline" | "" => Ok(true),
        "thread" | "threaded" => Ok(false),
        _ => Err(CliError::usage(format!("--engine {s}: inline or thread"))),
    }
}

/// The first address of `ifname` (IPv4, else a global IPv6), from the
/// kernel's address table in this process's network namespace.
pub fn interface_ip(ifname: &str) -> Result<IpAddr, CliError> {
    use nic::io::addr::{interface_addr, AddrError};
    interface_addr(ifname).map_err(|e| match e {
        AddrError::NoAddress(_) => CliError::new(format!("{e}: give one with --ip ADDR")),
        e => CliError::new(e.to_string()),
    })
}

/// The interface the kernel routes `dst` through (for a client without
/// `--dev`).
pub fn route_dev(dst: IpAddr) -> Result<String, CliError> {
    nic::io::addr::route(dst)
        .map(|r| r.dev)
        .map_err(|e| CliError::new(format!("{dst}: {e}: give the interface with --dev")))
}

/// Parses `--gid` (32 hex digits, or an IPv6/IPv4 address) or `--ip`.
pub fn parse_gid(s: &str) -> Result<Gid, CliError> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    if hex.len() == 32 {
        if let Some(g) = Gid::from_hex(&hex) {
            return Ok(g);
        }
    }
    s.parse::<IpAddr>()
        .map(Gid::from_ip)
        .map_err(|_| CliError::usage(format!("{s}: not a GID (32 hex digits) or an IP address")))
}

/// The largest IB MTU a port with this interface MTU carries.
pub fn max_ib_mtu(if_mtu: usize, ipv6: bool) -> u32 {
    nic::device::ib_mtu_for_ip_mtu(if_mtu, ipv6)
}

/// What to open.
#[derive(Clone, Debug)]
pub struct DevOptions {
    pub ifname: String,
    pub backend: PortKind,
    /// Our GID instead of the interface's address.
    pub gid: Option<Gid>,
    /// Record the port's first `pcap_frames` frames here.
    pub pcap: Option<PathBuf>,
    pub pcap_frames: usize,
    /// Bytes of the registered region.
    pub mem_len: usize,
    pub cq_len: usize,
    /// Pin the engine thread to this core.
    pub core: Option<usize>,
    /// Engine idle backoff: spinning turns before yielding, then parking.
    pub spin: u32,
    /// Run the engine inline (the application's thread turns it) rather
    /// than on a thread of its own.
    pub inline: bool,
    /// Congestion control: DCQCN/CNP, data marking, PFC.
    pub cc: nic::transport::CcConfig,
}

/// `--cc nvidia|sigcomm15|off` and `--pfc-tx XOFF:XON` → the device's
/// congestion settings. `nvidia` (the default) is a ConnectX NIC as
/// shipped: DCQCN with NVIDIA's firmware values, CNPs, data ECT(0) at DSCP
/// 26, PFC obeyed; `sigcomm15` the same with the DCQCN paper's values;
/// `off` is Linux rxe: no DCQCN, no CNPs, data not-ECT, PFC ignored.
/// `--pfc-tx` makes the NIC send PFC pauses when its receive backlog
/// reaches XOFF bytes (resuming at XON), on every priority.
pub fn parse_cc(cc: &str, pfc_tx: Option<&str>) -> Result<nic::transport::CcConfig, CliError> {
    use nic::transport::{CcConfig, PfcTxConfig};
    let mut c = match cc {
        "nvidia" => CcConfig::default(),
        "sigcomm15" => CcConfig {
            dcqcn: Some(nic::cc::DcqcnParams::sigcomm15()),
            ..CcConfig::default()
        },
        "off" => CcConfig::off(),
        other => {
            return Err(CliError::usage(format!(
                "--cc {other}: nvidia, sigcomm15 or off"
            )))
        }
    };
    if let Some(t) = pfc_tx {
        let bad = || CliError::usage(format!("--pfc-tx {t}: XOFF:XON in bytes, XON < XOFF"));
        let (off, on) = t.split_once(':').ok_or_else(bad)?;
        let (off, on): (u64, u64) = (
            off.trim().parse().map_err(|_| bad())?,
            on.trim().parse().map_err(|_| bad())?,
        );
        if off == 0 || on >= off {
            return Err(bad());
        }
        c.pfc_tx = Some(PfcTxConfig::new(off, on));
    }
    Ok(c)
}

impl DevOptions {
    pub fn new(ifname: &str, backend: PortKind, mem_len: usize) -> DevOptions {
        DevOptions {
            ifname: ifname.to_string(),
            backend,
            gid: None,
            pcap: None,
            pcap_frames: 0,
            mem_len,
            cq_len: 1 << 16,
            core: None,
            spin: EngineConfig::default().spin,
            inline: true,
            cc: nic::transport::CcConfig::default(),
        }
    }
}

/// A soft RNIC running on a real interface.
pub struct NetDev {
    engine: Option<Engine>,
    pub dev: Device,
    pub cq: CqHandle,
    pub pd: u32,
    pub mem: Arc<HeapMemory>,
    /// Virtual address of the region (what the peer puts in a RETH).
    pub base: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub gid: Gid,
    pub mac: EthernetAddress,
    pub ifname: String,
    /// The port that opened: "AF_XDP", "AF_XDP (generic XDP)", "AF_PACKET
    /// (TPACKET_V2)" or "AF_PACKET (TPACKET_V3)".
    pub backend: &'static str,
    /// The interface MTU and the largest IB MTU it carries.
    pub if_mtu: usize,
    pub max_mtu: u32,
    pub qps: Vec<u32>,
    pub pcap: Option<PathBuf>,
    started: std::time::Instant,
    /// The application turns the engine (see [`NetDev::idle`]).
    pub inline: bool,
}

/// A seed that differs between runs (keys, PSNs).
pub fn seed() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ ((std::process::id() as u64) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    // splitmix64
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A random 24-bit PSN (as ibv_rc_pingpong's `lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    (seed() & 0xFF_FFFF) as u32
}

fn engine_err(e: nic::engine::EngineError) -> CliError {
    CliError::new(format!("the engine: {e}"))
}

impl NetDev {
    /// Opens the port and starts the engine.
    pub fn open(o: &DevOptions) -> Result<NetDev, CliError> {
        let gid = match o.gid {
            Some(g) => g,
            None => Gid::from_ip(interface_ip(&o.ifname)?),
        };
        let (port, backend) = open(&o.ifname, o.backend)?;
        let mac = port.mac();
        let if_mtu = port.mtu();
        let port: Box<dyn Port> = match &o.pcap {
            Some(p) => Box::new(
                PcapTap::new(port, p)
                    .map_err(|e| CliError::new(format!("--pcap: {e}")))?
                    .with_limit(o.pcap_frames as u64),
            ),
            None => port,
        };
        let mut cfg = RnicConfig::new(mac, gid);
        cfg.seed = seed();
        cfg.cc = o.cc;
        let started = std::time::Instant::now();
        let ecfg = EngineConfig {
            core: o.core,
            spin: o.spin,
            name: format!("rnic-engine-{}", o.ifname),
            ..Default::default()
        };
        let engine = if o.inline {
            Engine::start_inline(Rnic::new(cfg), port, ecfg)
        } else {
            Engine::start(Rnic::new(cfg), port, ecfg)
        };
        let dev = engine.device();
        let cq = dev.create_cq(o.cq_len).map_err(engine_err)?;
        let pd = dev.call(|r| r.alloc_pd()).map_err(engine_err)?;
        let mut nd = NetDev {
            engine: Some(engine),
            dev,
            cq,
            pd,
            mem: Arc::new(HeapMemory::new(0)),
            base: 0x1000_0000,
            lkey: 0,
            rkey: 0,
            gid,
            mac,
            ifname: o.ifname.clone(),
            backend,
            if_mtu,
            max_mtu: max_ib_mtu(if_mtu, gid.to_ipv4().is_none()),
            qps: Vec::new(),
            pcap: o.pcap.clone(),
            started,
            inline: o.inline,
        };
        nd.register(o.mem_len)?;
        Ok(nd)
    }

    /// Registers a fresh region of `len` bytes at `base` (replacing the
    /// previous one) with every access right.
    pub fn register(&mut self, len: usize) -> Result<(), CliError> {
        let len = len.max(64);
        let mem = Arc::new(HeapMemory::new(len));
        let (m, base, pd, old) = (mem.clone(), self.base, self.pd, self.lkey);
        let (lkey, rkey) = self
            .dev
            .call(move |r| {
                if old != 0 {
                    // no windows are ever bound to the tool's region
                    r.dereg_mr(old).expect("the old region is ours");
                }
                let all = access::LOCAL_WRITE
                    | access::REMOTE_WRITE
                    | access::REMOTE_READ
                    | access::REMOTE_ATOMIC;
                r.reg_mr(pd, m as Arc<dyn Memory>, 0, base, len as u64, all)
            })
            .map_err(engine_err)?
            .map_err(|e| CliError::new(format!("reg_mr: {e}")))?;
        self.mem = mem;
        self.lkey = lkey;
        self.rkey = rkey;
        Ok(())
    }

    pub fn ip(&self) -> IpAddr {
        self.gid.to_ip()
    }

    /// What a waiting application does on its `n`th idle poll: turn an
    /// inline engine (yielding the core now and then, so that the kernel's
    /// threads and the peer get it on a small machine); with a threaded
    /// engine, spin and yield to it.
    pub fn idle(&self, n: u64) {
        if self.inline {
            self.dev.turn();
            if n % 1024 == 1023 {
                std::thread::yield_now();
            }
        } else if n % 16 == 15 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// Keeps an inline engine turning for `d` (frames in flight get their
    /// ACKs); a threaded engine just sleeps.
    pub fn turn_for(&self, d: Duration) {
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while t0.elapsed() < d {
            self.idle(n);
            n += 1;
            if !self.inline {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Creates a QP on the one CQ.
    pub fn create_qp(&mut self, qp_type: QpType, depth: u32) -> Result<u32, CliError> {
        let (pd, cqn) = (self.pd, self.cq.cqn);
        let qpn = self
            .dev
            .call(move |r| qp::create(r, qp_type, pd, cqn, depth))
            .map_err(QpError::from)??;
        self.qps.push(qpn);
        Ok(qpn)
    }

    /// RESET → INIT (receives may be posted from here on).
    pub fn init(&self, qpn: u32, qp_type: QpType) -> Result<(), CliError> {
        Ok(self
            .dev
            .call(move |r| qp::init(r, qpn, qp_type))
            .map_err(QpError::from)??)
    }

    /// INIT → RTR → RTS (see [`qp::connect`]).
    pub fn connect(&self, qpn: u32, c: Connect) -> Result<(), CliError> {
        Ok(self
            .dev
            .call(move |r| qp::connect(r, qpn, &c))
            .map_err(QpError::from)??)
    }

    /// Our address vector towards `peer`: its GID and the next hop's MAC.
    pub fn ah_to(&self, peer: Gid) -> Result<AhAttr, CliError> {
        let ip = peer.to_ip();
        let (route, mac) = next_hop_mac(ip, Duration::from_secs(3))
            .map_err(|e| CliError::new(format!("the MAC address of {ip}: {e}")))?;
        if route.dev != self.ifname {
            eprintln!(
                "rnic: warning: the kernel routes {ip} through {}, not {}: frames go to {} on {}",
                route.dev,
                self.ifname,
                crate::report::mac(mac.0),
                self.ifname
            );
        }
        Ok(AhAttr::new(peer, mac))
    }

    /// The device as JSON: addresses, port counters (`ethtool -S` names),
    /// device counters (`rdma statistic` names), drops by reason, PFC
    /// counters, and each QP with its counters.
    pub fn json(&self, role: &str) -> Value {
        let qps = self.qps.clone();
        let now = nic::time::Instant::from_nanos(self.started.elapsed().as_nanos() as u64);
        let inside = self.dev.call_with_port(move |r, p| {
            let counters: Map<String, Value> = r
                .counters()
                .iter()
                .map(|(k, v)| (k.into(), json!(v)))
                .collect();
            let mut port: Map<String, Value> = p
                .counters()
                .iter()
                .map(|(k, v)| (k.into(), json!(v)))
                .collect();
            let dropped: u64 = r.drops().values().sum();
            let drops: Map<String, Value> = r
                .drops()
                .iter()
                .map(|(k, v)| (format!("rx_drop_{k}"), json!(v)))
                .collect();
            port.insert("rx_roce_dropped".into(), json!(dropped));
            port.insert("rx_drops_by_reason".into(), Value::Object(drops));
            for (k, v) in r.pfc_counters(now).iter() {
                port.insert(k, json!(v));
            }
            let qps: Vec<Value> = qps
                .iter()
                .filter_map(|&q| r.query_qp(q).ok())
                .map(|q| {
                    let qc: Map<String, Value> = q
                        .counters
                        .iter()
                        .map(|(k, v)| (k.into(), json!(v)))
                        .collect();
                    json!({
                        "lqpn": q.qpn,
                        "rqpn": q.dest_qpn,
                        "type": format!("{:?}", q.qp_type).to_uppercase(),
                        "state": format!("{:?}", q.state).to_uppercase(),
                        "mtu": q.mtu,
                        "counters": qc,
                    })
                })
                .collect();
            (counters, port, qps)
        });
        let (counters, port, qps) = inside.unwrap_or_default();
        json!({
            "name": self.ifname,
            "role": role,
            "port": 1,
            "backend": self.backend,
            "mac": crate::report::mac(self.mac.0),
            "ip": self.ip().to_string(),
            "gid": self.gid.to_string(),
            "port_counters": port,
            "counters": counters,
            "qps": qps,
        })
    }

    /// Stops the engine (flushing a pcap) once every QP has sent what it
    /// owes — the ACK of the peer's last message above all — or after a
    /// second; idempotent.
    pub fn stop(&mut self) {
        let Some(e) = self.engine.take() else {
            return;
        };
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(1) {
            match self.dev.call(|r| r.is_idle()) {
                Ok(false) => self.turn_for(Duration::from_micros(200)),
                _ => break,
            }
        }
        // the last frames leave the port's ring
        self.turn_for(Duration::from_millis(2));
        e.stop();
    }
}

impl Drop for NetDev {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_the_interface_mtu() {
        assert_eq!(max_ib_mtu(9000, false), 4096);
        assert_eq!(max_ib_mtu(1500, false), 1024);
        assert_eq!(max_ib_mtu(4160, false), 4096);
        assert_eq!(max_ib_mtu(4159, false), 2048);
        assert_eq!(max_ib_mtu(4160, true), 2048);
        assert_eq!(max_ib_mtu(4180, true), 4096);
    }

    #[test]
    fn gids_parse_as_hex_or_addresses() {
        let g = parse_gid("00000000000000000000ffffc0000201").unwrap();
        assert_eq!(g.to_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(parse_gid("192.0.2.1").unwrap(), g);
        assert_eq!(parse_gid("::ffff:192.0.2.1").unwrap(), g);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201").unwrap(),
            g
        );
        assert!(parse_gid("nope").is_err());
    }
}
