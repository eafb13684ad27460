//! `rnic demo`: two emulated NICs on the in-memory wire run a short
//! perftest suite (WRITE, READ, SEND and atomic latency; WRITE, READ and
//! SEND bandwidth, a few sizes each), print the tables and percentiles,
//! write the warm-up frames of every test to a pcap, and check that pcap.

use crate::loopback::{Loopback, LOOPBACK_NOTE};
use crate::perf::local::run_sizes;
use crate::perf::{title, Mode, Settings, Verb};
use crate::progress::Progress;
use crate::{report, say, stats, CliError};
use nic::verbs::QpType;
use serde_json::json;
use std::path::PathBuf;

pub struct DemoOptions {
    pub out: PathBuf,
    pub json: Option<PathBuf>,
    /// Fewer iterations (for tests and slow machines).
    pub quick: bool,
    pub no_progress: bool,
    pub command: String,
}

/// Frames of each size's warm-up written to the pcap.
const RECORD_LAT: usize = 24;
const RECORD_BW: usize = 300;

fn suite(quick: bool) -> Vec<Settings> {
    let (lat_iters, bw_iters) = if quick { (200, 400) } else { (10_000, 5000) };
    let case = |verb, mode, sizes: &[usize]| Settings {
        verb,
        mode,
        sizes: sizes.to_vec(),
        iters: if mode == Mode::Lat {
            lat_iters
        } else {
            bw_iters
        },
        duration: None,
        qps: 1,
        mtu: 1024,
        tx_depth: if mode == Mode::Lat { 1 } else { 128 },
        qp_type: QpType::Rc,
        record: if mode == Mode::Lat {
            RECORD_LAT
        } else {
            RECORD_BW
        },
    };
    vec![
        case(Verb::Write, Mode::Lat, &[2, 4096]),
        case(Verb::Read, Mode::Lat, &[2, 4096]),
        case(Verb::Send, Mode::Lat, &[2, 4096]),
        case(Verb::Atomic, Mode::Lat, &[8]),
        case(Verb::Write, Mode::Bw, &[4096, 65536]),
        case(Verb::Read, Mode::Bw, &[4096, 65536]),
        case(Verb::Send, Mode::Bw, &[4096, 65536]),
    ]
}

pub fn run(opts: &DemoOptions) -> Result<(), CliError> {
    let cases = suite(opts.quick);
    report::check_dirs([opts.out.as_path()])?;
    let mem = cases.iter().map(|c| c.mem_len()).max().unwrap_or(1 << 20);
    let mut lb = Loopback::new(mem);
    say(&format!(
        "rnic demo: two soft RNICs (srnic0 192.0.2.1, srnic1 192.0.2.2) on the in-memory wire\n\
         {LOOPBACK_NOTE}\n\
         RC, MTU 1024, {} latency / {} bandwidth iterations per size\n",
        cases[0].iters,
        cases[cases.len() - 1].iters
    ))?;
    let mut progress = Progress::new(!opts.no_progress);
    let total: usize = cases.iter().map(|c| c.sizes.len()).sum();
    let mut done = 0usize;
    let mut all = Vec::new();
    for s in &cases {
        let (base, span) = (
            done as f64 / total as f64,
            s.sizes.len() as f64 / total as f64,
        );
        let results = run_sizes(&mut lb, s, &mut progress, base, span)
            .map_err(|e| CliError::new(format!("demo: {e}")))?;
        done += s.sizes.len();
        progress.finish();
        say(&format!(
            "\n{}  ({})\n{}",
            title(s.verb, s.mode),
            s.method(),
            report::text(s, &results, false)
        ))?;
        all.push((s.clone(), results));
    }
    let frames = std::mem::take(&mut lb.wire.borrow_mut().recorded);
    crate::capture::write_pcap(&opts.out, &frames)
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", opts.out.display())))?;
    let verdict = match crate::pcapcmd::check_one(&opts.out) {
        Ok(line) => format!("rnic pcap check: ok: {line}"),
        Err(e) => {
            return Err(CliError::new(format!(
                "demo wrote a capture that fails its own check: {e}"
            )))
        }
    };
    say(&format!(
        "\n{}: {} frames (the warm-up of every test); {verdict}\nOpen it in Wireshark, or: tshark -r {}\n",
        opts.out.display(),
        frames.len(),
        opts.out.display()
    ))?;
    let devices = report::devices_json(&lb);
    if let Some(p) = &opts.json {
        let doc = json!({
            "tool": "rnic",
            "version": env!("CARGO_PKG_VERSION"),
            "command": opts.command,
            "transport": LOOPBACK_NOTE,
            "pcap": opts.out.display().to_string(),
            "tests": all.iter().map(|(s, rs)| json!({
                "test": s.verb.name(),
                "mode": s.mode.name(),
                "title": title(s.verb, s.mode),
                "method": s.method(),
                "results": rs.iter().map(|r| report::result_json(s, r, false)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "devices": devices.clone(),
        });
        report::write_json(p, &doc)?;
    }
    stats::save_or_warn(&opts.command, devices);
    Ok(())
}
