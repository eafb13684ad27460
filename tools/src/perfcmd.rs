//! `rnic perf {write|read|send|atomic} {bw|lat}`.

use crate::loopback::{Loopback, LOOPBACK_NOTE};
use crate::perf::{run_size, Mode, Settings, SizeResult, Verb};
use crate::progress::Progress;
use crate::{report, stats, CliError};
use nic::verbs::QpType;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
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
    let tx_depth = match (mode, req.tx_depth) {
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
    };
    let sizes: Vec<usize> = if verb == Verb::Atomic {
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
    };
    // perftest (init_perftest_params): 5000 for ib_write_bw, 1000 otherwise
    // (a SEND server counts its receives: the defaults must agree)
    let iters = req.iters.unwrap_or(match (mode, verb) {
        (Mode::Bw, Verb::Write) => 5000,
        _ => 1000,
    });
    if iters == 0 {
        return Err(CliError::usage("-n 0: at least one iteration"));
    }
    let duration = match req.duration {
        Some(0) => return Err(CliError::usage("-D 0: the duration is at least 1 second")),
        Some(d) if d > 86_400 => {
            return Err(CliError::usage(format!(
                "-D {d}: at most a day (86400 seconds)"
            )))
        }
        Some(d) => Some(Duration::from_secs(d)),
        None => None,
    };
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

/// perftest's test title, e.g. "RDMA_Write Latency Test".
pub fn title(verb: Verb, mode: Mode) -> String {
    let op = match verb {
        Verb::Write => "RDMA_Write",
        Verb::Read => "RDMA_Read",
        Verb::Send => "Send",
        Verb::Atomic => "Atomic FETCH_AND_ADD",
    };
    let m = match mode {
        Mode::Bw => "BW",
        Mode::Lat => "Latency",
    };
    format!("{op} {m} Test")
}

/// The parameter block printed before the results.
pub fn header(s: &Settings) -> String {
    let conn = match s.qp_type {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    };
    let runs = match s.duration {
        Some(d) => format!("{} s per size", d.as_secs()),
        None => format!("{} per size", s.iters),
    };
    format!(
        "{line}\n{:>20}{}\n {LOOPBACK_NOTE}\n Method          : {}\n Device          : srnic0 <-> srnic1 (in-memory wire: no latency, unlimited bandwidth)\n local address   : srnic0 192.0.2.1 02:00:00:00:00:01 port 1\n remote address  : srnic1 192.0.2.2 02:00:00:00:00:02 port 1\n Number of qps   : {:<12} Transport type : RoCEv2 (UDP 4791, ICRC computed and verified)\n Connection type : {conn:<12} Mtu            : {}[B]\n TX depth        : {:<12} Iterations     : {runs}\n",
        "",
        title(s.verb, s.mode),
        s.method(),
        s.qps,
        s.mtu,
        s.tx_depth,
        line = report::RESULT_LINE
    )
}

/// `FILE` for one size; `stem-<size>B.ext` for each of several.
pub fn per_size_path(path: &Path, size: usize, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map_or("hist".into(), |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(e) => format!("{stem}-{size}B.{}", e.to_string_lossy()),
        None => format!("{stem}-{size}B"),
    };
    path.with_file_name(name)
}

fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))
}

/// The JSON document of a run.
pub fn json_doc(req: &PerfRequest, s: &Settings, results: &[SizeResult], lb: &Loopback) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|r| report::result_json(s, r, req.report_gbits))
        .collect();
    json_head(
        req,
        s,
        LOOPBACK_NOTE,
        results.into(),
        report::devices_json(lb),
    )
}

/// What every run's JSON document holds (the tool, the test, its settings,
/// the results and the devices); a run on real interfaces adds its role,
/// interface and backend.
pub fn json_head(
    req: &PerfRequest,
    s: &Settings,
    transport: &str,
    results: Value,
    devices: Value,
) -> Value {
    json!({
        "tool": "rnic",
        "version": env!("CARGO_PKG_VERSION"),
        "command": req.command,
        "test": s.verb.name(),
        "mode": s.mode.name(),
        "title": title(s.verb, s.mode),
        "transport": transport,
        "method": s.method(),
        "settings": {
            "connection": format!("{:?}", s.qp_type).to_uppercase(),
            "qps": s.qps,
            "mtu": s.mtu,
            "tx_depth": s.tx_depth,
            "iterations": s.iters,
            "duration_sec": s.duration.map(|d| d.as_secs()),
            "sizes": s.sizes,
            "report_gbits": req.report_gbits,
        },
        "results": results,
        "devices": devices,
    })
}

/// Checks the output paths before spending time on the run.
fn check_paths(req: &PerfRequest) -> Result<(), CliError> {
    for p in [&req.json, &req.hgrm, &req.plot, &req.pcap, &req.dump_mem]
        .into_iter()
        .flatten()
    {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(CliError::new(format!(
                    "cannot write {}: {} is not a directory",
                    p.display(),
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// Runs `rnic perf`.
pub fn run(req: &PerfRequest) -> Result<(), CliError> {
    let s = settings(req)?;
    check_paths(req)?;
    crate::netdev::parse_cc(&req.cc, req.pfc_tx.as_deref())?;
    if req.loopback && (req.cc != "nvidia" || req.pfc_tx.is_some()) {
        return Err(CliError::usage(
            "--cc and --pfc-tx set up a real interface's NIC (--dev); the loopback has no congestion",
        ));
    }
    if req.loopback && req.dump_mem.is_some() {
        return Err(CliError::usage(
            "--dump-mem records a real interface's test (--dev) for `rnic memcheck`; the loopback checks its own data",
        ));
    }
    if !req.loopback {
        if req.peer.is_none() && req.dev.is_none() {
            return Err(CliError::usage(
                "the server needs its interface: --dev IFACE (or --loopback for the in-process loopback)",
            ));
        }
        return crate::devperf::run(req, s);
    }
    crate::say(&header(&s))?;
    let mut lb = Loopback::new(s.mem_len());
    let mut progress = Progress::new(!req.no_progress);
    let mut results = Vec::new();
    let n = s.sizes.len() as f64;
    for (i, &size) in s.sizes.iter().enumerate() {
        progress.stage(
            format!("{} {} {size} B", s.verb.name(), s.mode.name()),
            i as f64 / n,
            1.0 / n,
        );
        let r = run_size(&mut lb, &s, size, &mut progress).map_err(|e| {
            progress.finish();
            CliError::new(format!("{} {} {size} B: {e}", s.verb.name(), s.mode.name()))
        })?;
        results.push(r);
    }
    progress.finish();
    crate::say(&report::text(&s, &results, req.report_gbits))?;
    let several = results.len() > 1;
    if let Some(p) = &req.hgrm {
        for r in &results {
            let path = per_size_path(p, r.bytes, several);
            write_file(&path, &report::hgrm(&r.hist))?;
            eprintln!("rnic: wrote {}", path.display());
        }
    }
    if let Some(p) = &req.plot {
        let t = format!(
            "rnic perf {} {}: {}",
            s.verb.name(),
            s.mode.name(),
            LOOPBACK_NOTE
        );
        write_file(p, &report::svg(&t, &results))?;
        eprintln!("rnic: wrote {}", p.display());
    }
    if let Some(p) = &req.pcap {
        let frames = std::mem::take(&mut lb.wire.borrow_mut().recorded);
        crate::capture::write_pcap(p, &frames)
            .map_err(|e| CliError::new(format!("cannot write {}: {e}", p.display())))?;
        eprintln!(
            "rnic: wrote {} ({} frames of the warm-up)",
            p.display(),
            frames.len()
        );
    }
    if let Some(p) = &req.json {
        let doc = json_doc(req, &s, &results, &lb);
        let text = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
        write_file(p, &(text + "\n"))?;
        eprintln!("rnic: wrote {}", p.display());
    }
    if let Err(e) = stats::save(&req.command, report::devices_json(&lb)) {
        eprintln!("rnic: warning: counters not saved for `rnic stats`: {e}");
    }
    Ok(())
}
