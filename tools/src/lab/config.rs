//! A lab's settings: a short TOML file, flags for the common case (a flag
//! wins over the file), and the checks that make them safe to build.
//!
//! ```toml
//! hosts = 3               # h0 receives, h1..h(N-1) send (incast N-1 → 1)
//! switches = 1           # 1, or 2 joined by a trunk ([`super::trunk`])
//! backend = "auto"        # rnicd's port: auto (AF_XDP, else AF_PACKET) | afxdp | afpacket
//! dcqcn = true            # the hosts' DCQCN reaction points (rnicd --dcqcn-rp on|off)
//! dcqcn_reference = "25gbit" # the link rate DCQCN's values are scaled from (rnicd --dcqcn-reference)
//!
//! [switch]
//! rate = "100mbit"        # each egress queue's link rate (tc's bits: kbit, mbit, gbit; nic::rate)
//! ecn_kb = 30             # CE-mark above this many KB (0: no marking)
//! queue_kb = 1000         # the queue's capacity: tail drop beyond it
//! mtu = 1500
//! pfc = false             # 802.1Qbb PFC from the switch toward the senders
//! xoff_kb = 300           # PFC: pause when a queue holds this many KB
//! xon_kb = 250            # PFC: resume when it falls to this many KB
//!
//! [trunk]                 # with switches = 2: the link between them
//! split = 1               # h0..h(split-1) on switch 0, the rest on switch 1
//! rate = "100mbit"        # each direction's egress queue (default: [switch]'s)
//! ecn_kb = 30             # (default: [switch]'s)
//! queue_kb = 1000         # (default: [switch]'s)
//!
//! [workload]
//! kind = "incast"         # ib_write_bw h1..h(N-1) → h0 | allreduce | alltoall (MPI)
//! duration_s = 10
//! size = 65536            # ib_write_bw -s; a collective's bytes (default 1 MiB)
//! iterations = 0          # a collective's iterations (0: as many as duration_s holds)
//! ucx_tls = "rdma"        # a collective's UCX transports: rdma (verbs) | tcp (sockets)
//! sample_ms = 100         # counter sampling period
//! probe = false           # ib_send_lat h1 → h0 through the same queue ([`super::probe`])
//! ```
//!
//! `[[machine]]` tables instead of the lab's own fabric: one rnicd per real
//! host, started through a launcher ([`super::machines`]).

use super::machines::{self, Machine, MachineFile};
pub use super::setting::{parse_rate, rate_text, setting, MAX_HOSTS};
pub use super::trace::Trace;
pub use super::trunk::{TrunkConfig, TrunkFile};
use super::workload::{UcxTls, Workload};
use super::LabError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The settings as the file gives them: every key optional.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LabFile {
    pub hosts: Option<usize>,
    pub backend: Option<String>,
    pub dcqcn: Option<bool>,
    pub switches: Option<usize>,
    pub dcqcn_reference: Option<String>,
    #[serde(default)]
    pub switch: SwitchFile,
    #[serde(default, skip_serializing_if = "TrunkFile::is_empty")]
    pub trunk: TrunkFile,
    #[serde(default)]
    pub workload: WorkloadFile,
    /// Real hosts instead of the lab's namespaces ([`super::machines`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine: Vec<MachineFile>,
}

/// The `[switch]` table.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SwitchFile {
    pub rate: Option<String>,
    pub ecn_kb: Option<u32>,
    pub queue_kb: Option<u32>,
    pub mtu: Option<u32>,
    pub pfc: Option<bool>,
    pub xoff_kb: Option<u32>,
    pub xon_kb: Option<u32>,
}

/// The `[workload]` table.
#[derive(Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub kind: Option<String>,
    pub duration_s: Option<u32>,
    pub size: Option<u32>,
    pub sample_ms: Option<u32>,
    pub probe: Option<bool>,
    pub iterations: Option<u32>,
    pub ucx_tls: Option<String>,
    /// `kind = "trace"`: the trace file ([`super::trace`]).
    pub trace: Option<String>,
}

impl LabFile {
    /// Reads and parses a lab file.
    pub fn read(path: &Path) -> Result<LabFile, LabError> {
        let text = std::fs::read_to_string(path).map_err(|source| LabError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut f: LabFile = toml::from_str(&text).map_err(|e| LabError::File {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        // a trace's path is relative to the lab file's folder
        let dir = path.parent().unwrap_or(Path::new("."));
        f.workload.trace = f.workload.trace.map(|t| Trace::resolve(&t, dir));
        Ok(f)
    }

    /// `over`'s keys where it has them, this file's elsewhere.
    pub fn overridden_by(self, over: LabFile) -> LabFile {
        LabFile {
            hosts: over.hosts.or(self.hosts),
            backend: over.backend.or(self.backend),
            dcqcn: over.dcqcn.or(self.dcqcn),
            switches: over.switches.or(self.switches),
            trunk: self.trunk.overridden_by(over.trunk),
            dcqcn_reference: over.dcqcn_reference.or(self.dcqcn_reference),
            switch: SwitchFile {
                rate: over.switch.rate.or(self.switch.rate),
                ecn_kb: over.switch.ecn_kb.or(self.switch.ecn_kb),
                queue_kb: over.switch.queue_kb.or(self.switch.queue_kb),
                mtu: over.switch.mtu.or(self.switch.mtu),
                pfc: over.switch.pfc.or(self.switch.pfc),
                xoff_kb: over.switch.xoff_kb.or(self.switch.xoff_kb),
                xon_kb: over.switch.xon_kb.or(self.switch.xon_kb),
            },
            workload: WorkloadFile {
                kind: over.workload.kind.or(self.workload.kind),
                duration_s: over.workload.duration_s.or(self.workload.duration_s),
                size: over.workload.size.or(self.workload.size),
                sample_ms: over.workload.sample_ms.or(self.workload.sample_ms),
                probe: over.workload.probe.or(self.workload.probe),
                iterations: over.workload.iterations.or(self.workload.iterations),
                ucx_tls: over.workload.ucx_tls.or(self.workload.ucx_tls),
                trace: over.workload.trace.or(self.workload.trace),
            },
            machine: if over.machine.is_empty() {
                self.machine
            } else {
                over.machine
            },
        }
    }
}

/// rnicd's `--backend` for the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortBackend {
    /// AF_XDP, else AF_PACKET (rnicd's log says which each host got).
    Auto,
    AfXdp,
    AfPacket,
}

impl PortBackend {
    /// rnicd's word for it.
    pub fn arg(self) -> &'static str {
        match self {
            PortBackend::Auto => "auto",
            PortBackend::AfXdp => "afxdp",
            PortBackend::AfPacket => "afpacket",
        }
    }
}

/// A checked lab: what the fabric and the workload are built from.
#[derive(Debug, Clone, PartialEq)]
pub struct LabConfig {
    /// Hosts h0..h(N-1); h0 receives.
    pub hosts: usize,
    pub backend: PortBackend,
    /// The hosts' DCQCN reaction points (`rnicd --dcqcn-rp`): off, the
    /// senders ignore CNPs and send at the line rate.
    pub dcqcn: bool,
    /// The link rate the hosts' DCQCN values are made for (`rnicd
    /// --dcqcn-reference`): at the lab's rate they run scaled by
    /// reference / rate (default 25 Gbit/s, NVIDIA's slowest ConnectX).
    pub dcqcn_reference_bps: u64,
    /// Each egress queue's rate, bits per second.
    pub rate_bps: u64,
    /// The CE-marking threshold in bytes (0: no marking).
    pub ecn_bytes: u64,
    /// Each egress queue's capacity in bytes.
    pub queue_bytes: u64,
    pub mtu: u32,
    /// The switch's PFC stage: XOFF and XON in bytes ([`super::pfc`]);
    /// `None`: no PFC.
    pub pfc: Option<PfcThresholds>,
    pub duration_s: u32,
    /// ib_write_bw's message size; a collective's bytes.
    pub size: u32,
    pub sample_ms: u32,
    /// The latency probe: ib_send_lat h1 → h0 alongside the incast
    /// ([`super::probe`]).
    pub probe: bool,
    pub workload: Workload,
    /// A collective's iterations (0: as many as `duration_s` holds).
    pub iterations: u32,
    /// A collective's UCX transports.
    pub ucx_tls: UcxTls,
    /// The second switch and the trunk to it; `None`: one switch.
    pub trunk: Option<TrunkConfig>,
    /// `kind = "trace"`: the flows to replay.
    pub trace: Option<Trace>,
    /// The real hosts of a lab across machines; empty: the lab's own
    /// namespaces and switch.
    pub machines: Vec<Machine>,
}

/// The switch's PFC thresholds on each egress queue's backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcThresholds {
    /// Pause the senders when the queue holds this many bytes.
    pub xoff_bytes: u64,
    /// Resume them when it falls to this many bytes (below XOFF).
    pub xon_bytes: u64,
}

impl LabConfig {
    /// Checks `f` and fills in the defaults (3 hosts, 100 Mbit/s, marking
    /// above 30 KB, a 1000 KB queue, MTU 1500, 10 s of 64 KiB writes,
    /// sampled every 100 ms).
    pub fn from_file(f: LabFile) -> Result<LabConfig, LabError> {
        let machines = machines::check(&f.machine, f.hosts, &switch_keys(&f.switch))?;
        if !machines.is_empty() && (f.switches.is_some_and(|n| n != 1) || !f.trunk.is_empty()) {
            return Err(setting(
                "switches",
                "a lab across machines builds no switch, nor a trunk between two",
            ));
        }
        let hosts = f.hosts.unwrap_or(if machines.is_empty() {
            3
        } else {
            machines.len()
        });
        if !(2..=MAX_HOSTS).contains(&hosts) {
            return Err(setting("hosts", format!("{hosts}: want 2 to {MAX_HOSTS}")));
        }
        let backend = match f.backend.as_deref().unwrap_or("auto") {
            "auto" => PortBackend::Auto,
            "afxdp" => PortBackend::AfXdp,
            "afpacket" => PortBackend::AfPacket,
            b => {
                return Err(setting(
                    "backend",
                    format!("{b}: want auto, afxdp or afpacket"),
                ))
            }
        };
        let rate_bps = parse_rate(f.switch.rate.as_deref().unwrap_or("100mbit"))?;
        let (workload, ucx_tls) = workload_of(&f.workload)?;
        let ecn_kb = f.switch.ecn_kb.unwrap_or(30);
        let queue_kb = f.switch.queue_kb.unwrap_or(1000);
        if queue_kb == 0 || (ecn_kb >= queue_kb) {
            return Err(setting(
                "switch",
                format!("ecn_kb {ecn_kb} must be below queue_kb {queue_kb} (and queue_kb > 0)"),
            ));
        }
        let mtu = f.switch.mtu.unwrap_or(1500);
        if !(1280..=9000).contains(&mtu) {
            return Err(setting("switch.mtu", format!("{mtu}: want 1280 to 9000")));
        }
        let pfc = pfc_thresholds(&f.switch, queue_kb)?;
        let trunk = TrunkConfig::from_file(
            (f.switches, &f.trunk),
            hosts,
            (rate_bps, ecn_kb, queue_kb),
            f.switch.xoff_kb.filter(|_| f.switch.pfc == Some(true)),
        )?;
        if workload != Workload::Trace && f.workload.trace.is_some() {
            return Err(setting("workload.trace", "a trace is for kind = \"trace\""));
        }
        let trace = (workload == Workload::Trace)
            .then(|| Trace::of_setting(f.workload.trace.as_deref(), hosts))
            .transpose()?;
        let duration_s = f.workload.duration_s.unwrap_or(10);
        let size = f.workload.size.unwrap_or(workload.default_size());
        let sample_ms = f.workload.sample_ms.unwrap_or(100);
        if duration_s == 0 || size == 0 || !(10..=10_000).contains(&sample_ms) {
            return Err(setting(
                "workload",
                "duration_s and size must be > 0, sample_ms 10 to 10000",
            ));
        }
        Ok(LabConfig {
            hosts,
            backend,
            dcqcn: f.dcqcn.unwrap_or(true),
            dcqcn_reference_bps: parse_rate(f.dcqcn_reference.as_deref().unwrap_or("25gbit"))?,
            rate_bps,
            ecn_bytes: u64::from(ecn_kb) * 1000,
            queue_bytes: u64::from(queue_kb) * 1000,
            mtu,
            pfc,
            duration_s,
            size,
            sample_ms,
            probe: f.workload.probe.unwrap_or(false),
            workload,
            iterations: f.workload.iterations.unwrap_or(0),
            ucx_tls,
            trunk,
            trace,
            machines,
        })
    }

    /// The settings as a lab file (written into the results folder, so
    /// the run can be repeated with `--file`).
    pub fn to_toml(&self) -> String {
        let mut f = LabFile {
            hosts: Some(self.hosts),
            backend: Some(self.backend.arg().into()),
            dcqcn: Some(self.dcqcn),
            switches: Some(1 + usize::from(self.trunk.is_some())),
            trunk: self.trunk.map(|t| t.to_file()).unwrap_or_default(),
            dcqcn_reference: Some(rate_text(self.dcqcn_reference_bps)),
            switch: SwitchFile {
                rate: Some(rate_text(self.rate_bps)),
                ecn_kb: Some((self.ecn_bytes / 1000) as u32),
                queue_kb: Some((self.queue_bytes / 1000) as u32),
                mtu: Some(self.mtu),
                pfc: Some(self.pfc.is_some()),
                xoff_kb: self.pfc.map(|p| (p.xoff_bytes / 1000) as u32),
                xon_kb: self.pfc.map(|p| (p.xon_bytes / 1000) as u32),
            },
            workload: WorkloadFile {
                kind: Some(self.workload.word().into()),
                duration_s: Some(self.duration_s),
                size: Some(self.size),
                sample_ms: Some(self.sample_ms),
                probe: Some(self.probe),
                iterations: self.workload.is_collective().then_some(self.iterations),
                ucx_tls: self
                    .workload
                    .is_collective()
                    .then(|| self.ucx_tls.word().into()),
                trace: self.trace.as_ref().map(|t| t.path.display().to_string()),
            },
            machine: self.machines.iter().map(Machine::to_file).collect(),
        };
        if !self.machines.is_empty() {
            // across machines there is no switch of the lab's
            f.switch = SwitchFile::default();
        }
        toml::to_string(&f).unwrap_or_default()
    }
}

/// The workload's kind and UCX transports (`tcp` only for a collective:
/// ib_write_bw has no UCX).
/// The `[switch]` keys a lab file (or a flag) gives, by name.
fn switch_keys(s: &SwitchFile) -> Vec<String> {
    toml::Value::try_from(s)
        .ok()
        .and_then(|v| v.as_table().map(|t| t.keys().cloned().collect()))
        .unwrap_or_default()
}

fn workload_of(w: &WorkloadFile) -> Result<(Workload, UcxTls), LabError> {
    let kind = w.kind.as_deref().unwrap_or("incast");
    let workload = Workload::parse(kind).ok_or_else(|| {
        setting(
            "workload.kind",
            format!("{kind}: want incast, allreduce, alltoall or trace"),
        )
    })?;
    let tls = w.ucx_tls.as_deref().unwrap_or("rdma");
    let ucx_tls = UcxTls::parse(tls)
        .ok_or_else(|| setting("workload.ucx_tls", format!("{tls}: want rdma or tcp")))?;
    if ucx_tls == UcxTls::Tcp && !workload.is_collective() {
        return Err(setting(
            "workload.ucx_tls",
            "tcp is for the MPI collectives (allreduce, alltoall); the incast has no UCX",
        ));
    }
    Ok((workload, ucx_tls))
}

/// The PFC thresholds of `[switch]`: XON < XOFF < the queue's capacity
/// (a queue that tail-drops before XOFF would never pause anyone).
fn pfc_thresholds(s: &SwitchFile, queue_kb: u32) -> Result<Option<PfcThresholds>, LabError> {
    if s.pfc != Some(true) {
        return Ok(None);
    }
    let xoff_kb = s.xoff_kb.unwrap_or(300);
    let xon_kb = s.xon_kb.unwrap_or(xoff_kb.saturating_sub(50));
    if xon_kb >= xoff_kb || xoff_kb >= queue_kb {
        return Err(setting(
            "switch",
            format!("xon_kb {xon_kb} < xoff_kb {xoff_kb} < queue_kb {queue_kb} does not hold"),
        ));
    }
    Ok(Some(PfcThresholds {
        xoff_bytes: u64::from(xoff_kb) * 1000,
        xon_bytes: u64::from(xon_kb) * 1000,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_tc_units() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("2.5Gbit").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        for r in ["1gbit", "2500mbit", "500kbit", "100001bit"] {
            assert_eq!(rate_text(parse_rate(r).unwrap()), r);
        }
        for bad in ["1gbps", "fast", "mbit", "10bit", "1000gbit"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert!(parse_rate("1gbps")
            .unwrap_err()
            .to_string()
            .contains("BYTES per second"));
    }

    #[test]
    fn a_file_fills_what_flags_leave_and_flags_win() {
        let file: LabFile = toml::from_str(
            "hosts = 5\n[switch]\nrate = \"1gbit\"\necn_kb = 50\n[workload]\nduration_s = 3\n",
        )
        .unwrap();
        let flags = LabFile {
            hosts: Some(4),
            ..LabFile::default()
        };
        let c = LabConfig::from_file(file.overridden_by(flags)).unwrap();
        assert_eq!(
            (c.hosts, c.rate_bps, c.ecn_bytes),
            (4, 1_000_000_000, 50_000)
        );
        assert_eq!((c.duration_s, c.size, c.sample_ms), (3, 65536, 100));
        assert_eq!(c.backend, PortBackend::Auto);
        assert!(c.dcqcn && !c.probe);
        let f: LabFile = toml::from_str("dcqcn = false\n[workload]\nprobe = true\n").unwrap();
        let c = LabConfig::from_file(f).unwrap();
        assert!(!c.dcqcn && c.probe);
        assert_eq!(c.dcqcn_reference_bps, 25_000_000_000);
        let f: LabFile = toml::from_str("dcqcn_reference = \"100gbit\"\n").unwrap();
        assert_eq!(
            LabConfig::from_file(f).unwrap().dcqcn_reference_bps,
            100_000_000_000
        );
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
    }

    #[test]
    fn the_written_file_reads_back_to_the_same_lab() {
        let c = LabConfig::from_file(LabFile::default()).unwrap();
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
        let mut f = LabFile::default();
        (f.switch.pfc, f.switch.xoff_kb) = (Some(true), Some(200));
        let c = LabConfig::from_file(f).unwrap();
        assert_eq!(
            c.pfc,
            Some(PfcThresholds {
                xoff_bytes: 200_000,
                xon_bytes: 150_000
            })
        );
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
        let mut f = LabFile::default();
        (f.workload.kind, f.workload.ucx_tls) = (Some("alltoall".into()), Some("tcp".into()));
        f.workload.iterations = Some(20);
        let c = LabConfig::from_file(f).unwrap();
        assert_eq!(
            (c.workload, c.ucx_tls, c.iterations, c.size),
            (Workload::Alltoall, UcxTls::Tcp, 20, 1 << 20)
        );
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<LabFile>("hostz = 3\n").is_err());
        let bad = |f: LabFile| LabConfig::from_file(f).unwrap_err().to_string();
        let hosts = |n| LabFile {
            hosts: Some(n),
            ..LabFile::default()
        };
        assert!(bad(hosts(1)).contains("hosts"));
        assert!(bad(hosts(65)).contains("hosts"));
        let mut f = LabFile::default();
        f.switch.ecn_kb = Some(2000);
        assert!(bad(f).contains("ecn_kb"));
        let mut f = LabFile::default();
        f.workload.kind = Some("allgather".into());
        assert!(bad(f).contains("want incast, allreduce, alltoall or trace"));
        let mut f = LabFile::default();
        f.workload.ucx_tls = Some("tcp".into());
        assert!(bad(f).contains("collectives"));
        let mut f = LabFile::default();
        f.workload.trace = Some("t.csv".into());
        assert!(bad(f).contains("kind = \"trace\""));
        let mut f = LabFile::default();
        f.workload.kind = Some("trace".into());
        assert!(bad(f).contains("needs trace"));
        let mut f = LabFile::default();
        (f.workload.kind, f.workload.ucx_tls) = (Some("allreduce".into()), Some("ib".into()));
        assert!(bad(f).contains("want rdma or tcp"));
        let mut f = LabFile::default();
        (f.switch.pfc, f.switch.xoff_kb, f.switch.xon_kb) = (Some(true), Some(100), Some(100));
        assert!(bad(f).contains("xon_kb"));
        let mut f = LabFile::default();
        (f.switch.pfc, f.switch.xoff_kb) = (Some(true), Some(1000));
        assert!(bad(f).contains("queue_kb"));
    }
}
