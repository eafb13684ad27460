//! `rnic perf` on the in-process loopback ([`crate::loopback`]): the
//! header, the run and its reports ([`run`]), and the perftest-style
//! measurements of each message size ([`run_sizes`]).
//!
//! Latency tests (`lat`) follow the perftest tools: WRITE and SEND are
//! ping-pong (node 0 sends to node 1, node 1 answers as soon as it sees the
//! data — the last byte of the buffer for WRITE, a receive completion for
//! SEND — and a sample is half the round trip, as `ib_write_lat` and
//! `ib_send_lat` report); READ and atomics post one operation and wait for
//! its completion (a sample is the whole operation, as `ib_read_lat` and
//! `ib_atomic_lat` report). Bandwidth tests (`bw`) keep `tx_depth`
//! operations outstanding per QP and count the bytes completed; each
//! operation's time from post to completion goes into a histogram as well.

use super::conn_name;
use super::request::PerfRequest;
use super::title;
use super::{
    check_wc, half, new_histogram, BwMeter, Mode, RunError, Settings, SizeError, SizeResult,
    Target, Verb,
};
use crate::loopback::{Loopback, LOOPBACK_NOTE};
use crate::progress::Progress;
use crate::{report, stats, CliError};
use hdrhistogram::Histogram;
use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The parameter block printed before the results.
pub fn header(s: &Settings) -> String {
    let conn = conn_name(s.qp_type);
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

/// The JSON document of a run.
pub fn json_doc(req: &PerfRequest, s: &Settings, results: &[SizeResult], lb: &Loopback) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|r| report::result_json(s, r, req.report_gbits))
        .collect();
    report::json_head(
        req,
        s,
        LOOPBACK_NOTE,
        results.into(),
        report::devices_json(lb),
    )
}

/// Runs `rnic perf` on the loopback: `s` are the settings of `req`,
/// checked by [`super::run`].
pub fn run(req: &PerfRequest, s: &Settings) -> Result<(), CliError> {
    crate::say(&header(s))?;
    let mut lb = Loopback::new(s.mem_len());
    let mut progress = Progress::new(!req.no_progress);
    let results = run_sizes(&mut lb, s, &mut progress, 0.0, 1.0)?;
    progress.finish();
    crate::say(&report::text(s, &results, req.report_gbits))?;
    if let Some(p) = &req.hgrm {
        report::write_hgrms(p, &results)?;
    }
    if let Some(p) = &req.plot {
        report::write_plot(p, s, LOOPBACK_NOTE, &results)?;
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
        report::write_json(p, &json_doc(req, s, &results, &lb))?;
    }
    stats::save_or_warn(&req.command, report::devices_json(&lb));
    Ok(())
}

/// Waits give up after this much wall time without progress.
const STALL: Duration = Duration::from_secs(20);

/// Runs the simulator until `done` holds.
fn wait(
    lb: &mut Loopback,
    conn: usize,
    what: &'static str,
    mut done: impl FnMut(&mut Loopback) -> Result<bool, RunError>,
) -> Result<(), RunError> {
    let mut turns = 0u64;
    let start = Instant::now();
    loop {
        if done(lb)? {
            return Ok(());
        }
        if !lb.turn() {
            return Err(RunError::Stalled {
                what,
                qps: lb.describe(conn),
            });
        }
        turns += 1;
        if turns & 4095 == 0 {
            if !lb.healthy(conn) {
                return Err(RunError::LeftRtsWaiting {
                    what,
                    qps: lb.describe(conn),
                });
            }
            if start.elapsed() > STALL {
                return Err(RunError::NoProgress {
                    stall: STALL,
                    what,
                    qps: lb.describe(conn),
                });
            }
        }
    }
}

fn work_request(lb: &Loopback, s: &Settings, from: usize, size: usize, wr_id: u64) -> SendWr {
    let me = &lb.nodes[from];
    let peer = &lb.nodes[1 - from];
    let h = half(s.sizes.iter().copied().max().unwrap_or(8)) as u64;
    let (op, local) = match s.verb {
        Verb::Write => (
            SendOp::Write {
                remote_addr: peer.base + h,
                rkey: peer.rkey,
            },
            me.base,
        ),
        Verb::Send => (SendOp::Send, me.base),
        Verb::Read => (
            SendOp::Read {
                remote_addr: peer.base,
                rkey: peer.rkey,
            },
            me.base + h,
        ),
        Verb::Atomic => (
            SendOp::FetchAdd {
                remote_addr: peer.base + h,
                rkey: peer.rkey,
                add: 1,
            },
            me.base,
        ),
    };
    SendWr::new(wr_id, op, Sgl::single(local, size as u32, me.lkey))
}

fn recv_request(lb: &Loopback, s: &Settings, node: usize, wr_id: u64) -> RecvWr {
    let me = &lb.nodes[node];
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    RecvWr {
        wr_id,
        sgl: Sgl::single(me.base + h as u64, h as u32, me.lkey),
    }
}

/// Runs every size of `s` in turn, the progress bar going from `base` to
/// `base + span` and naming the size it is at; it is finished on an error.
pub fn run_sizes(
    lb: &mut Loopback,
    s: &Settings,
    progress: &mut Progress,
    base: f64,
    span: f64,
) -> Result<Vec<SizeResult>, SizeError> {
    let step = span / s.sizes.len().max(1) as f64;
    let mut results = Vec::new();
    for (i, &size) in s.sizes.iter().enumerate() {
        progress.stage(
            format!("{} {} {size} B", s.verb.name(), s.mode.name()),
            base + i as f64 * step,
            step,
        );
        let r = run_size(lb, s, size, progress).map_err(|e| {
            progress.finish();
            SizeError::new(s, size, e)
        })?;
        results.push(r);
    }
    Ok(results)
}

/// Runs one message size.
pub fn run_size(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, RunError> {
    match s.mode {
        Mode::Lat => run_lat(lb, s, size, progress),
        Mode::Bw => run_bw(lb, s, size, progress),
    }
}

/// Lets every frame in flight land and drains the completions, so that
/// the next test starts on a quiet wire (and a capture holds no stray
/// ACK of a test that was not recorded).
fn quiesce(lb: &mut Loopback, conn: usize) -> Result<(), RunError> {
    wait(lb, conn, "the wire to go quiet", |lb| {
        Ok(lb.sim.nodes[0].is_idle() && lb.sim.nodes[1].is_idle())
    })?;
    let mut wcs = Vec::new();
    for node in 0..2 {
        wcs.clear();
        lb.poll(node, &mut wcs);
        for wc in &wcs {
            check_wc(wc)?;
        }
    }
    Ok(())
}

pub fn warmup_iters(iters: u64) -> u64 {
    (iters / 10).clamp(1, 100)
}

fn run_lat(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, RunError> {
    let c = lb.connect(s.qp_type, s.mtu, 64)?;
    let qpn = lb.conns[c].qpn;
    let mut wcs = Vec::new();
    if s.verb == Verb::Send {
        for (node, &q) in qpn.iter().enumerate() {
            let wr = recv_request(lb, s, node, 0);
            lb.sim.nodes[node]
                .post_recv(q, wr)
                .map_err(RunError::post_recv)?;
        }
    }
    let warm = warmup_iters(s.iters);
    lb.wire.borrow_mut().record_budget = s.record;
    let mut samples = Vec::with_capacity(s.iters.min(1 << 24) as usize);
    let mut hist = new_histogram();
    let mut measured_start = None;
    let deadline = s.duration;
    let mut it = 0u64;
    loop {
        if it == warm {
            lb.wire.borrow_mut().record_budget = 0;
            measured_start = Some(Instant::now());
        }
        let measured = it - warm.min(it);
        if it >= warm {
            let elapsed = measured_start.map_or(Duration::ZERO, |t| t.elapsed());
            match deadline {
                Some(d) if elapsed >= d => break,
                Some(d) => progress.set(elapsed.as_secs_f64() / d.as_secs_f64()),
                None if measured >= s.iters => break,
                None => progress.set(measured as f64 / s.iters as f64),
            }
        }
        let t0 = Instant::now();
        lat_round(lb, s, c, size, it, &mut wcs)?;
        let rtt = t0.elapsed().as_nanos() as u64;
        let t = match s.verb {
            Verb::Write | Verb::Send => rtt / 2,
            _ => rtt,
        };
        if it >= warm {
            samples.push(t);
            hist.saturating_record(t.max(1));
        }
        // retire the send completions of the ping-pong
        for node in 0..2 {
            wcs.clear();
            lb.poll(node, &mut wcs);
            for wc in &wcs {
                check_wc(wc)?;
            }
        }
        it += 1;
    }
    let elapsed = measured_start.map_or(Duration::ZERO, |t| t.elapsed());
    quiesce(lb, c)?;
    samples.sort_unstable();
    let n = samples.len() as u64;
    Ok(SizeResult::lat(size, n, samples, elapsed, hist))
}

/// Round trip `it` of a latency test on connection `c`: a WRITE or SEND
/// each way, each side answering once the other's has landed, or one
/// READ or atomic and its completion.
fn lat_round(
    lb: &mut Loopback,
    s: &Settings,
    c: usize,
    size: usize,
    it: u64,
    wcs: &mut Vec<Wc>,
) -> Result<(), RunError> {
    let qpn = lb.conns[c].qpn;
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    let tag = (it % 250 + 1) as u8;
    match s.verb {
        Verb::Write => {
            for (from, &q) in qpn.iter().enumerate() {
                let to = 1 - from;
                lb.nodes[from].mem.write(size - 1, &[tag]);
                let wr = work_request(lb, s, from, size, it);
                lb.sim.nodes[from]
                    .post_send(q, wr)
                    .map_err(RunError::post_send)?;
                let at = h + size - 1;
                wait(lb, c, "the RDMA WRITE to land", |lb| {
                    let mut b = [0u8];
                    lb.nodes[to].mem.read(at, &mut b);
                    Ok(b[0] == tag)
                })?;
            }
        }
        Verb::Send => {
            for (from, &q) in qpn.iter().enumerate() {
                let to = 1 - from;
                let wr = work_request(lb, s, from, size, it);
                lb.sim.nodes[from]
                    .post_send(q, wr)
                    .map_err(RunError::post_send)?;
                wait(lb, c, "the SEND to arrive", |lb| {
                    wcs.clear();
                    lb.poll(to, wcs);
                    let mut got = false;
                    for wc in wcs.iter() {
                        check_wc(wc)?;
                        got |= wc.opcode == WcOpcode::Recv;
                    }
                    Ok(got)
                })?;
                let wr = recv_request(lb, s, to, it);
                lb.sim.nodes[to]
                    .post_recv(qpn[to], wr)
                    .map_err(RunError::post_recv)?;
            }
        }
        Verb::Read | Verb::Atomic => {
            let wr = work_request(lb, s, 0, size, it);
            lb.sim.nodes[0]
                .post_send(qpn[0], wr)
                .map_err(RunError::post_send)?;
            wait(lb, c, "the completion", |lb| {
                wcs.clear();
                lb.poll(0, wcs);
                let mut got = false;
                for wc in wcs.iter() {
                    check_wc(wc)?;
                    got |= wc.wr_id == it;
                }
                Ok(got)
            })?;
        }
    }
    Ok(())
}

fn run_bw(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, RunError> {
    let depth = s.tx_depth.max(1);
    let rx_depth = (depth * 2).max(16);
    let mut conns = Vec::new();
    for _ in 0..s.qps {
        conns.push(lb.connect(s.qp_type, s.mtu, depth.max(rx_depth))?);
    }
    let qpns: Vec<[u32; 2]> = conns.iter().map(|&c| lb.conns[c].qpn).collect();
    if s.verb == Verb::Send {
        for q in &qpns {
            for k in 0..rx_depth {
                let wr = recv_request(lb, s, 1, k as u64);
                lb.sim.nodes[1]
                    .post_recv(q[1], wr)
                    .map_err(RunError::post_recv)?;
            }
        }
    }
    let nq = qpns.len();
    // warm-up (recorded), then the measured run
    let warm = (2 * depth as u64 * nq as u64).min(s.iters.max(1));
    lb.wire.borrow_mut().record_budget = s.record;
    let mut scratch = new_histogram();
    let mut sink = Progress::hidden();
    bw_loop(
        lb,
        s,
        size,
        &conns,
        &qpns,
        Target::Ops(warm),
        &mut scratch,
        &mut sink,
    )?;
    lb.wire.borrow_mut().record_budget = 0;
    let mut hist = new_histogram();
    let target = match s.duration {
        Some(d) => Target::Time(d),
        None => Target::Ops(s.iters),
    };
    let (done, elapsed, peak) = bw_loop(lb, s, size, &conns, &qpns, target, &mut hist, progress)?;
    quiesce(lb, conns[0])?;
    Ok(SizeResult::bw(size, done, elapsed, hist, peak))
}

/// Keeps `tx_depth` operations outstanding per QP until the target is
/// met. Returns (operations completed, wall time, peak bytes/s).
#[allow(clippy::too_many_arguments)]
fn bw_loop(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    conns: &[usize],
    qpns: &[[u32; 2]],
    target: Target,
    hist: &mut Histogram<u64>,
    progress: &mut Progress,
) -> Result<(u64, Duration, f64), RunError> {
    let depth = s.tx_depth.max(1) as usize;
    let nq = qpns.len();
    let mut outstanding = vec![0usize; nq];
    let mut posted = 0u64;
    let mut meter = BwMeter::new(target, depth, nq, size);
    let mut wcs = Vec::new();
    let mut next_q = 0usize;
    let mut idle_turns = 0u64;
    let wr_base: u64 = 1 << 40;
    loop {
        let stop_posting = match target {
            Target::Ops(n) => posted >= n,
            Target::Time(_) => meter.time_up(),
        };
        if stop_posting && outstanding.iter().all(|&o| o == 0) {
            break;
        }
        if !stop_posting {
            // fill every QP's window, round robin
            let mut tries = 0;
            while tries < nq {
                if let Target::Ops(n) = target {
                    if posted >= n {
                        break;
                    }
                }
                let q = next_q;
                next_q = (next_q + 1) % nq;
                if outstanding[q] >= depth {
                    tries += 1;
                    continue;
                }
                tries = 0;
                let wr = work_request(lb, s, 0, size, wr_base + posted);
                lb.sim.nodes[0]
                    .post_send(qpns[q][0], wr)
                    .map_err(RunError::post_send)?;
                meter.posted(posted);
                outstanding[q] += 1;
                posted += 1;
            }
        }
        if !lb.turn() {
            return Err(RunError::StalledOutstanding {
                outstanding: outstanding.iter().sum::<usize>(),
                qps: lb.describe(conns[0]),
            });
        }
        wcs.clear();
        lb.poll(0, &mut wcs);
        let now = meter.tick();
        for wc in &wcs {
            check_wc(wc)?;
            let Some(q) = qpns.iter().position(|x| x[0] == wc.qp_num) else {
                continue;
            };
            outstanding[q] = outstanding[q].saturating_sub(1);
            meter.completed(wc.wr_id.wrapping_sub(wr_base), now, hist);
        }
        if s.verb == Verb::Send {
            wcs.clear();
            lb.poll(1, &mut wcs);
            for wc in &wcs {
                check_wc(wc)?;
                if let Some(q) = qpns.iter().position(|x| x[1] == wc.qp_num) {
                    let wr = recv_request(lb, s, 1, wc.wr_id);
                    lb.sim.nodes[1]
                        .post_recv(qpns[q][1], wr)
                        .map_err(RunError::post_recv)?;
                }
            }
        }
        if wcs.is_empty() {
            idle_turns += 1;
            if idle_turns & 4095 == 0 && !conns.iter().all(|&c| lb.healthy(c)) {
                return Err(RunError::LeftRts {
                    qps: lb.describe(conns[0]),
                });
            }
        }
        meter.progress(progress);
    }
    Ok(meter.finish())
}
