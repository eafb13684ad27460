//! The hosts' rnicd daemons: one per host namespace on its veth, its
//! socket in a folder of the lab's own, its output in the results
//! folder's `logs/`. Each says on which port backend it opened its
//! interface (AF_XDP, or AF_PACKET when AF_XDP is missing here).

use super::net::HostNet;
use super::sys::{self, Proc};
use super::{LabConfig, LabError};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How long a daemon may take to be READY with its port active.
const START_S: u64 = 60;

/// A host's running rnicd.
pub struct Daemon {
    pub net: HostNet,
    pub proc: Proc,
    /// Its socket folder (`rnic exec --sock-dir`).
    pub sock_dir: PathBuf,
    pub log: PathBuf,
    /// The port backend rnicd reports (`AfXdp`, `AfPacket`).
    pub backend: String,
    /// A client connection for its statistics.
    pub ctx: Option<Arc<softrnic::Context>>,
}

impl Daemon {
    /// Starts `rnicd` on `net`'s interface and waits for its READY and an
    /// active port.
    pub fn start(
        rnicd: &Path,
        net: &HostNet,
        cfg: &LabConfig,
        run_dir: &Path,
        logs: &Path,
    ) -> Result<Daemon, LabError> {
        let sock_dir = run_dir.join(&net.name);
        std::fs::create_dir_all(&sock_dir).map_err(|source| LabError::Io {
            what: sock_dir.display().to_string(),
            source,
        })?;
        let log = logs.join(format!("rnicd-{}.log", net.name));
        let addr = net.addr.to_string();
        // a NIC's line rate is its link's: the switch's rate, not the
        // veth's 10 Gbit/s (DCQCN's ceiling and steps, PFC's quanta)
        let line_rate = cfg.rate_bps.to_string();
        // DCQCN's timers and steps scaled from the reference to that rate
        let reference = cfg.dcqcn_reference_bps.to_string();
        let mut args: Vec<&OsStr> = vec![
            rnicd.as_os_str(),
            "--iface".as_ref(),
            net.iface.as_ref(),
            "--gid".as_ref(),
            addr.as_ref(),
            "--name".as_ref(),
            net.name.as_ref(),
            "--backend".as_ref(),
            cfg.backend.arg().as_ref(),
            // the switch queues, marks and counts what a fabric carries:
            // frames, not UDP GSO super-frames
            "--gso".as_ref(),
            "off".as_ref(),
            "--sock-dir".as_ref(),
            sock_dir.as_os_str(),
            "--line-rate".as_ref(),
            line_rate.as_ref(),
            "--dcqcn-reference".as_ref(),
            reference.as_ref(),
        ];
        if !cfg.dcqcn {
            args.extend([OsStr::new("--dcqcn-rp"), OsStr::new("off")]);
        }
        let proc = Proc::spawn(&net.ns, &args, &log, format!("rnicd {}", net.name))?;
        let mut d = Daemon {
            net: net.clone(),
            proc,
            sock_dir,
            log,
            backend: String::new(),
            ctx: None,
        };
        sys::wait(&format!("rnicd of {} READY", net.name), START_S, || {
            d.check_alive()?;
            Ok(d.said().contains("READY").then_some(()))
        })?;
        d.backend = backend_of(&d.said(), &net.iface).unwrap_or_else(|| "unknown".into());
        let sock = d.sock_dir.join(format!("{}.sock", net.name));
        let ctx = softrnic::Context::open(&sock).map_err(|source| LabError::Stats {
            host: net.name.clone(),
            source,
        })?;
        sys::wait(&format!("{}: port active", net.name), START_S, || {
            d.check_alive()?;
            let p = ctx.query_port(1).map_err(|source| LabError::Stats {
                host: d.net.name.clone(),
                source,
            })?;
            Ok((p.state == 4).then_some(()))
        })?;
        d.ctx = Some(ctx);
        Ok(d)
    }

    /// What it said so far.
    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An error with its log once it has ended.
    pub fn check_alive(&mut self) -> Result<(), LabError> {
        match self.proc.ended() {
            None => Ok(()),
            Some(st) => Err(LabError::Rnicd {
                host: self.net.name.clone(),
                status: st.to_string(),
                log: self.said().lines().last().unwrap_or("").to_string(),
            }),
        }
    }

    /// The wire size of a full RoCEv2 data frame at its port's active MTU:
    /// Ethernet 14, IPv4 20, UDP 8, BTH 12, payload, ICRC 4 (a middle
    /// packet of a WRITE: IBA 9.2, RoCEv2 annex A17.4).
    pub fn data_frame_bytes(&self) -> Result<u64, LabError> {
        let ctx = self
            .ctx
            .as_ref()
            .ok_or_else(|| self.gone("not connected"))?;
        let p = ctx.query_port(1).map_err(|source| LabError::Stats {
            host: self.net.name.clone(),
            source,
        })?;
        Ok(u64::from(p.active_mtu) + 14 + 20 + 8 + 12 + 4)
    }

    fn gone(&self, status: &str) -> LabError {
        LabError::Rnicd {
            host: self.net.name.clone(),
            status: status.into(),
            log: String::new(),
        }
    }

    /// Its device's counters now.
    pub fn counters(&self) -> Result<std::collections::BTreeMap<String, u64>, LabError> {
        let ctx = self
            .ctx
            .as_ref()
            .ok_or_else(|| self.gone("not connected"))?;
        ctx.stats()
            .map(|s| s.counters)
            .map_err(|source| LabError::Stats {
                host: self.net.name.clone(),
                source,
            })
    }
}

impl Daemon {
    /// Its QPs' DCQCN reaction-point state now.
    pub fn cc_states(&self) -> Result<softrnic::proto::CcStates, LabError> {
        let ctx = self
            .ctx
            .as_ref()
            .ok_or_else(|| self.gone("not connected"))?;
        ctx.cc_states().map_err(|source| LabError::Stats {
            host: self.net.name.clone(),
            source,
        })
    }
}

/// The backend rnicd's log names for `iface` (`rnicd: IFACE: AfXdp`).
pub fn backend_of(log: &str, iface: &str) -> Option<String> {
    let key = format!("rnicd: {iface}: ");
    log.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map(|b| b.trim().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_backend_comes_from_rnicds_line_for_the_interface() {
        let log = "rnicd: other: AfPacket\nrnicd: rnl1h0: AfXdp\nREADY\n";
        assert_eq!(super::backend_of(log, "rnl1h0").as_deref(), Some("AfXdp"));
        assert_eq!(super::backend_of(log, "rnl1h1"), None);
    }
}
