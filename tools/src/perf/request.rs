//! What `rnic perf` was asked ([`PerfRequest`], flags as perftest spells
//! them) and the [`Settings`] it makes of it: perftest's defaults, and a
//! usage error for what makes no sense.

use super::{Mode, Settings, Verb};
use crate::CliError;
use nic::verbs::QpType;
use std::path::PathBuf;
use std::time::Duration;

/// Largest message `rnic perf` moves (each node registers twice this).
pub const MAX_SIZE: usize = 1 << 30;

/// Everything `rnic perf` was asked, flags as perftest spells them.
#[derive(Clone, Debug, Default)]
pub struct PerfRequest {
    pub verb: Option<Verb>,
    pub mode: Option<Mode>,
    pub peer: Option<String>,
    pub size: Option<usize>,
    pub iters: Option<u64>,
    pub all: bool,
    pub duration: Option<u64>,
    pub qps: u32,
    /// 0: not given (perftest: the port's active MTU).
    pub mtu: u32,
    pub port: u16,
    pub tx_depth: Option<u32>,
    pub connection: String,
    pub report_gbits: bool,
    pub dev: Option<String>,
    pub loopback: bool,
    pub json: Option<PathBuf>,
    pub hgrm: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub pcap: Option<PathBuf>,
    pub pcap_frames: usize,
    pub no_progress: bool,
    /// Real interfaces: the port backend (auto, afxdp, afxdp-generic, afpacket, afpacket-v3).
    pub backend: String,
    /// Real interfaces: our GID (or IP address) instead of the interface's.
    pub gid: Option<String>,
    /// Real interfaces: pin the polling engine to this core.
    pub core: Option<usize>,
    /// Real interfaces: "inline" (the measuring thread turns the engine) or "thread".
    pub engine: String,
    /// Real interfaces: congestion control preset (nvidia, sigcomm15, off).
    pub cc: String,
    /// Real interfaces: PFC generation thresholds "XOFF:XON" in bytes.
    pub pfc_tx: Option<String>,
    /// Real interfaces: write our memory region before and after the test,
    /// and what `rnic memcheck` needs to know, to PREFIX.{init,final,json}.
    pub dump_mem: Option<PathBuf>,
    /// The command line, for the report and `rnic stats`.
    pub command: String,
}

/// perftest's defaults: 2-byte latency tests, 64 KiB bandwidth tests,
/// 5000 iterations for WRITE bandwidth and 1000 for the rest, tx depth 1 / 128.
pub fn settings(req: &PerfRequest) -> Result<Settings, CliError> {
    let verb = req
        .verb
        .ok_or_else(|| CliError::usage("which operation?"))?;
    let mode = req.mode.ok_or_else(|| CliError::usage("bw or lat?"))?;
    if req.dev.is_some() && req.loopback {
        return Err(CliError::usage(
            "--dev and --loopback exclude each other: --loopback runs both NICs in this process",
        ));
    }
    if req.loopback && req.peer.is_some() {
        return Err(CliError::usage(
            "--loopback runs both sides in this process: give no peer address",
        ));
    }
    let qp_type = qp_type(req, verb)?;
    // 0: not given (perftest: the port's active MTU; the loopback: 1024)
    if req.mtu != 0 && !crate::check::MTUS.contains(&req.mtu) {
        return Err(CliError::usage(format!(
            "-m {}: the MTU is one of 256, 512, 1024, 2048, 4096",
            req.mtu
        )));
    }
    if req.qps == 0 || req.qps > 256 {
        return Err(CliError::usage(format!(
            "-q {}: the number of QPs is 1 to 256",
            req.qps
        )));
    }
    if mode == Mode::Lat && req.qps != 1 {
        return Err(CliError::usage(
            "latency tests use one QP (as perftest): drop -q",
        ));
    }
    let tx_depth = tx_depth(req, mode)?;
    let sizes = sizes(req, verb, mode)?;
    // perftest (init_perftest_params): 5000 for ib_write_bw, 1000 otherwise
    // (a SEND server counts its receives: the defaults must agree)
    let iters = req.iters.unwrap_or(match (mode, verb) {
        (Mode::Bw, Verb::Write) => 5000,
        _ => 1000,
    });
    if iters == 0 {
        return Err(CliError::usage("-n 0: at least one iteration"));
    }
    let duration = duration(req)?;
    Ok(Settings {
        verb,
        mode,
        sizes,
        iters,
        duration,
        qps: req.qps,
        mtu: if req.mtu == 0 { 1024 } else { req.mtu },
        tx_depth,
        qp_type,
        record: if req.pcap.is_some() {
            req.pcap_frames
        } else {
            0
        },
    })
}

/// `-c`: RC or UC; UC carries only SEND and RDMA WRITE.
fn qp_type(req: &PerfRequest, verb: Verb) -> Result<QpType, CliError> {
    let qp_type = match req.connection.to_ascii_uppercase().as_str() {
        "RC" => QpType::Rc,
        "UC" => QpType::Uc,
        "UD" => {
            return Err(CliError::usage(
                "-c UD is not supported by rnic perf yet (RC and UC are)",
            ))
        }
        other => {
            return Err(CliError::usage(format!(
                "-c {other}: the connection type is RC or UC"
            )))
        }
    };
    if qp_type == QpType::Uc && matches!(verb, Verb::Read | Verb::Atomic) {
        return Err(CliError::usage(format!(
            "{} needs RC: UC QPs carry only SEND and RDMA WRITE",
            verb.name()
        )));
    }
    Ok(qp_type)
}

/// `-t`: one operation in flight for latency tests, 128 by default for
/// bandwidth tests (perftest's `--tx-depth`).
fn tx_depth(req: &PerfRequest, mode: Mode) -> Result<u32, CliError> {
    Ok(match (mode, req.tx_depth) {
        (Mode::Lat, Some(t)) if t != 1 => {
            return Err(CliError::usage(
                "latency tests keep one operation in flight: -t is for bw tests",
            ))
        }
        (Mode::Lat, _) => 1,
        (Mode::Bw, Some(t)) if !(1..=8192).contains(&t) => {
            return Err(CliError::usage(format!(
                "-t {t}: the tx depth is 1 to 8192"
            )))
        }
        (Mode::Bw, t) => t.unwrap_or(128),
    })
}

/// The message sizes: `-s` (2 bytes for latency tests, 64 KiB for
/// bandwidth tests by default), every power of two up to 8 MiB with `-a`,
/// and 8 bytes for atomics.
fn sizes(req: &PerfRequest, verb: Verb, mode: Mode) -> Result<Vec<usize>, CliError> {
    Ok(if verb == Verb::Atomic {
        if let Some(s) = req.size.filter(|&s| s != 8) {
            return Err(CliError::usage(format!(
                "-s {s}: atomic operations move 8 bytes"
            )));
        }
        vec![8]
    } else if req.all {
        if req.size.is_some() {
            return Err(CliError::usage("-a runs every size: drop -s"));
        }
        (1..=23).map(|k| 1usize << k).collect()
    } else {
        let s = req.size.unwrap_or(match mode {
            Mode::Lat => 2,
            Mode::Bw => 65536,
        });
        if s == 0 || s > MAX_SIZE {
            return Err(CliError::usage(format!(
                "-s {s}: the message size is 1 to {MAX_SIZE} bytes"
            )));
        }
        vec![s]
    })
}

/// `-D`: 1 second to a day.
fn duration(req: &PerfRequest) -> Result<Option<Duration>, CliError> {
    Ok(match req.duration {
        Some(0) => return Err(CliError::usage("-D 0: the duration is at least 1 second")),
        Some(d) if d > 86_400 => {
            return Err(CliError::usage(format!(
                "-D {d}: at most a day (86400 seconds)"
            )))
        }
        Some(d) => Some(Duration::from_secs(d)),
        None => None,
    })
}
