//! `rnic pcap check | dump | replay`.

use crate::capture::{CaptureReader, Record};
use crate::check::{summary_line, Checker, Class};
use crate::out::write_or_quit;
use crate::CliError;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// Checks every file; the first broken frame ends the run with an error
/// naming the file, the frame and the rule.
pub fn check(files: &[std::path::PathBuf], quiet: bool, lossy: bool) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    for path in files {
        let line = check_with(path, lossy)?;
        if !quiet {
            write_or_quit(&mut out, format_args!("{}: ok: {line}\n", path.display()))?;
        }
    }
    Ok(())
}

/// Checks one file: `Ok(summary)` or the first problem.
pub fn check_one(path: &Path) -> Result<String, CliError> {
    check_with(path, false)
}

/// Like `check_one`; `lossy`: the capture was taken behind a lossy hop, so
/// packets missing from it are counted, not failures (`Checker::lossy`).
pub fn check_with(path: &Path, lossy: bool) -> Result<String, CliError> {
    conform::check_file(path, lossy).map_err(|e| CliError::new(e.to_string()))
}

fn secs(d: Duration) -> String {
    format!("{}.{:06}", d.as_secs(), d.subsec_micros())
}

/// One line per frame: number, time since the first frame, addresses, QP,
/// opcode, PSN, headers, sizes, ICRC status, then notes and problems.
pub fn dump(path: &Path, limit: Option<u64>, roce_only: bool) -> Result<(), CliError> {
    let reader = CaptureReader::open(path).map_err(|e| CliError::new(e.to_string()))?;
    let mut checker = Checker::new();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut t0: Option<Duration> = None;
    let mut broken = 0u64;
    let mut printed = 0u64;
    for rec in reader {
        let rec: Record = match rec {
            Ok(r) => r,
            Err(e) => {
                let _ = out.flush();
                return Err(CliError::new(format!("{}: {e}", path.display())));
            }
        };
        if limit.is_some_and(|n| printed >= n) {
            break;
        }
        let t = *t0.get_or_insert(rec.ts);
        let rel = secs(rec.ts.saturating_sub(t));
        let f = checker.frame(&rec);
        if roce_only && matches!(f.class, Class::Other(_)) {
            continue;
        }
        printed += 1;
        let mut line = format!("{:>6} {:>11} ", rec.number, rel);
        match (&f.class, &f.summary) {
            (Class::Other(what), _) => {
                line += &format!("-- not RoCE: {what} frame={}", rec.orig_len);
            }
            (_, Some(s)) => {
                line += s;
                line += &format!(" frame={}", rec.orig_len);
                match f.icrc_ok {
                    Some(true) => line += " icrc=ok",
                    Some(false) => line += " icrc=BAD",
                    None => {}
                }
            }
            (_, None) => line += &format!("?? frame={}", rec.orig_len),
        }
        if !f.notes.is_empty() {
            line += " [";
            line += &f.notes.join("; ");
            line += "]";
        }
        if let Some(p) = &f.problem {
            broken += 1;
            line += " !! ";
            line += &p.to_string();
        }
        line.push('\n');
        write_or_quit(&mut out, format_args!("{line}"))?;
    }
    if let Err(e) = out.flush() {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
    eprintln!(
        "{}: {}{}",
        path.display(),
        summary_line(&checker.stats, checker.streams()),
        if broken > 0 {
            format!("; {broken} broken frames (marked !!)")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Feeds the requests of each RC connection of the capture to our
/// responder and reports every difference from the capture's responses.
/// Our responses the capture stops before — no frame of the responder's
/// address after they were due (`nic::replay`) — are listed apart and are
/// not differences; a file that ends inside a frame is
/// replayed up to the frame before. Ends with one summary line. Exits
/// non-zero when any differs.
pub fn replay(path: &Path) -> Result<(), CliError> {
    let reader = CaptureReader::open(path).map_err(|e| CliError::new(e.to_string()))?;
    let mut frames = Vec::new();
    let mut cut = None;
    for rec in reader {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e @ crate::capture::CaptureError::Truncated { .. }) => {
                cut = Some(e);
                break;
            }
            Err(e) => return Err(CliError::new(format!("{}: {e}", path.display()))),
        };
        if rec.linktype != crate::capture::LINKTYPE_ETHERNET {
            return Err(CliError::new(format!(
                "{}: link type {} is not Ethernet: replay needs Ethernet frames",
                path.display(),
                rec.linktype
            )));
        }
        frames.push((nic::Instant::from_nanos(rec.ts.as_nanos() as u64), rec.data));
    }
    guard_spans(path, &frames)?;
    let reports = nic::replay::replay(&frames);
    let mut out = io::stdout().lock();
    if let Some(e) = cut {
        write_or_quit(
            &mut out,
            format_args!(
                "{}: {e}: replaying the {} frames before it\n",
                path.display(),
                frames.len()
            ),
        )?;
    }
    if reports.is_empty() {
        write_or_quit(
            &mut out,
            format_args!(
                "{}: no RC requests in the capture: nothing to replay\n",
                path.display()
            ),
        )?;
    }
    let mut differing = 0;
    for r in &reports {
        let verdict = if r.matches() {
            match r.after_end.len() {
                0 => "identical".to_string(),
                n => format!(
                    "identical up to the end of the capture, {n} response{} after it",
                    plural(n)
                ),
            }
        } else {
            differing += 1;
            let n = r.mismatches.len();
            format!("{n} difference{}", plural(n))
        };
        write_or_quit(
            &mut out,
            format_args!(
                "{} -> {} (UDP source port {}, path MTU {}): {} requests replayed, {} responses in the capture, {} from our responder: {verdict}\n",
                r.requester, r.responder, r.udp_sport, r.mtu, r.requests, r.expected, r.produced
            ),
        )?;
        for m in &r.mismatches {
            write_or_quit(&mut out, format_args!("  {m}\n"))?;
        }
        for a in &r.after_end {
            write_or_quit(
                &mut out,
                format_args!("  after the end of the capture: {a}\n"),
            )?;
        }
        if r.unjudged_bytes > 0 {
            write_or_quit(
                &mut out,
                format_args!(
                    "  not judged: {} written byte{} whose WRITE the capture does not show acknowledged\n",
                    r.unjudged_bytes,
                    plural(r.unjudged_bytes)
                ),
            )?;
        }
    }
    let sum = |f: fn(&nic::replay::ConnectionReport) -> usize| reports.iter().map(f).sum::<usize>();
    write_or_quit(
        &mut out,
        format_args!(
            "{} response{} matched, {} differed, {} after the end of the capture\n",
            sum(|r| r.matched),
            plural(sum(|r| r.matched)),
            sum(|r| r.differed),
            sum(|r| r.after_end.len()),
        ),
    )?;
    if differing > 0 {
        return Err(CliError::new(format!(
            "{}: {differing} of {} connections answered differently from the capture",
            path.display(),
            reports.len()
        )));
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Refuses captures whose R_Keys span more memory than a replay should
/// allocate (the replay backs each R_Key's whole VA range).
fn guard_spans(path: &Path, frames: &[(nic::Instant, Vec<u8>)]) -> Result<(), CliError> {
    use std::collections::HashMap;
    let mut spans: HashMap<u32, (u64, u64)> = HashMap::new();
    for (_, f) in frames {
        let Ok(r) = wire::RoceRepr::parse(f) else {
            continue;
        };
        let (rkey, va, len) = match (r.ext.reth, r.ext.atomic) {
            (Some(x), _) => (x.rkey, x.va, x.dma_len as u64),
            (_, Some(a)) => (a.rkey, a.va, 8),
            _ => continue,
        };
        let end = va.saturating_add(len);
        let e = spans.entry(rkey).or_insert((va, end));
        e.0 = e.0.min(va);
        e.1 = e.1.max(end);
        if e.1 - e.0 > nic::replay::SPAN_LIMIT {
            return Err(CliError::new(format!(
                "{}: R_Key {rkey:#x} is used across {} MiB of addresses; replay backs that range with memory and stops at {} MiB",
                path.display(),
                (e.1 - e.0) >> 20,
                nic::replay::SPAN_LIMIT >> 20
            )));
        }
    }
    Ok(())
}
