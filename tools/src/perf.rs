//! perftest-style measurements on the in-process loopback.
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

use crate::loopback::Loopback;
use crate::progress::Progress;
use hdrhistogram::Histogram;
use nic::verbs::{Memory, QpType, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode, WcStatus};
use std::time::{Duration, Instant};

/// The operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Send => "send",
            Verb::Atomic => "atomic",
        }
    }
}

/// Bandwidth or latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Bw,
    Lat,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Bw => "bw",
            Mode::Lat => "lat",
        }
    }
}

/// Everything a run needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    pub verb: Verb,
    pub mode: Mode,
    pub sizes: Vec<usize>,
    pub iters: u64,
    /// Run each size for this long instead of `iters` operations.
    pub duration: Option<Duration>,
    pub qps: u32,
    pub mtu: u32,
    pub tx_depth: u32,
    pub qp_type: QpType,
    /// Frames of the warm-up to keep for a capture file.
    pub record: usize,
}

impl Settings {
    /// Memory each node registers: a send half and a receive half, each
    /// large enough for the largest message.
    pub fn mem_len(&self) -> usize {
        2 * half(self.sizes.iter().copied().max().unwrap_or(8))
    }

    /// How the latency is sampled, for the report header.
    pub fn method(&self) -> &'static str {
        match (self.mode, self.verb) {
            (Mode::Lat, Verb::Write) => "ping-pong: each side RDMA WRITEs to the other, which polls the last byte of its buffer; t = round trip / 2 (as ib_write_lat)",
            (Mode::Lat, Verb::Send) => "ping-pong: each side SENDs to the other, which waits for the receive completion; t = round trip / 2 (as ib_send_lat)",
            (Mode::Lat, Verb::Read) => "one RDMA READ at a time, post to completion (as ib_read_lat)",
            (Mode::Lat, Verb::Atomic) => "one FETCH_AND_ADD at a time, post to completion (as ib_atomic_lat)",
            (Mode::Bw, _) => "tx-depth operations outstanding per QP; bytes completed over wall time; per-operation latency is post to completion",
        }
    }
}

/// The send/receive halves of a node's region start at 0 and at this.
pub fn half(max_size: usize) -> usize {
    max_size.max(8).div_ceil(4096) * 4096
}

/// The result for one message size.
#[derive(Clone)]
pub struct SizeResult {
    pub bytes: usize,
    pub iterations: u64,
    pub elapsed: Duration,
    /// Latency samples in nanoseconds, sorted (latency tests only).
    pub samples: Vec<u64>,
    /// Every sample, in nanoseconds.
    pub hist: Histogram<u64>,
    /// Bandwidth tests: best rate over any window of completions (two
    /// rounds of tx depth × QPs, at most a quarter of the run), and the
    /// average, in bytes per second.
    pub peak_bps: f64,
    pub avg_bps: f64,
    /// Messages per second.
    pub msg_rate: f64,
}

/// Latency statistics in the shape of perftest's report (microseconds).
#[derive(Clone, Copy, Debug)]
pub struct LatStats {
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

impl SizeResult {
    /// A bandwidth result: `done` messages of `size` bytes in `elapsed`,
    /// with the best window's rate `peak` (bytes per second).
    pub fn bw(
        size: usize,
        done: u64,
        elapsed: Duration,
        hist: Histogram<u64>,
        peak: f64,
    ) -> SizeResult {
        let secs = elapsed.as_secs_f64().max(1e-9);
        SizeResult {
            bytes: size,
            iterations: done,
            elapsed,
            samples: Vec::new(),
            hist,
            peak_bps: peak.max(done as f64 * size as f64 / secs),
            avg_bps: done as f64 * size as f64 / secs,
            msg_rate: done as f64 / secs,
        }
    }

    /// A latency result: `n` messages of `size` bytes over `elapsed`, and
    /// the `samples` taken (nanoseconds, sorted).
    pub fn lat(
        size: usize,
        n: u64,
        samples: Vec<u64>,
        elapsed: Duration,
        hist: Histogram<u64>,
    ) -> SizeResult {
        SizeResult {
            bytes: size,
            iterations: n,
            elapsed,
            samples,
            hist,
            peak_bps: 0.0,
            avg_bps: 0.0,
            msg_rate: if elapsed.is_zero() {
                0.0
            } else {
                n as f64 / elapsed.as_secs_f64()
            },
        }
    }

    pub fn lat_stats(&self) -> LatStats {
        let s = &self.samples;
        let us = |ns: u64| ns as f64 / 1000.0;
        if s.is_empty() {
            return LatStats {
                t_min: 0.0,
                t_max: 0.0,
                t_typical: 0.0,
                t_avg: 0.0,
                t_stdev: 0.0,
                p99: 0.0,
                p999: 0.0,
            };
        }
        let n = s.len();
        let avg = s.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = s
            .iter()
            .map(|&x| (x as f64 - avg) * (x as f64 - avg))
            .sum::<f64>()
            / n as f64;
        // perftest: the sample at ceil(n * q) - 1 of the sorted array
        let at = |q: f64| s[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
        LatStats {
            t_min: us(s[0]),
            t_max: us(s[n - 1]),
            t_typical: us(s[n / 2]),
            t_avg: avg / 1000.0,
            t_stdev: var.sqrt() / 1000.0,
            p99: us(at(0.99)),
            p999: us(at(0.999)),
        }
    }

    /// The HDR histogram's percentiles in microseconds: p50, p90, p99,
    /// p99.9, p99.99, max.
    pub fn hdr_percentiles(&self) -> [(&'static str, f64); 6] {
        let h = &self.hist;
        let v = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        [
            ("p50", v(0.5)),
            ("p90", v(0.9)),
            ("p99", v(0.99)),
            ("p99.9", v(0.999)),
            ("p99.99", v(0.9999)),
            ("max", h.max() as f64 / 1000.0),
        ]
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Waits give up after this much wall time without progress.
const STALL: Duration = Duration::from_secs(20);

/// Runs the simulator until `done` holds.
fn wait(
    lb: &mut Loopback,
    conn: usize,
    what: &str,
    mut done: impl FnMut(&mut Loopback) -> Result<bool, String>,
) -> Result<(), String> {
    let mut turns = 0u64;
    let start = Instant::now();
    loop {
        if done(lb)? {
            return Ok(());
        }
        if !lb.turn() {
            return Err(format!(
                "the transport stalled waiting for {what}: {}",
                lb.describe(conn)
            ));
        }
        turns += 1;
        if turns & 4095 == 0 {
            if !lb.healthy(conn) {
                return Err(format!(
                    "a QP left RTS waiting for {what}: {}",
                    lb.describe(conn)
                ));
            }
            if start.elapsed() > STALL {
                return Err(format!(
                    "no progress for {} s waiting for {what}: {}",
                    STALL.as_secs(),
                    lb.describe(conn)
                ));
            }
        }
    }
}

pub fn check_wc(wc: &Wc) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!(
            "work request {} ({:?}) on QP {:#x} completed with status {}",
            wc.wr_id,
            wc.opcode,
            wc.qp_num,
            wc.status.as_str()
        ))
    }
}

/// The work request of one operation from `from` to the other node.
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

/// Runs one message size.
pub fn run_size(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, String> {
    match s.mode {
        Mode::Lat => run_lat(lb, s, size, progress),
        Mode::Bw => run_bw(lb, s, size, progress),
    }
}

/// Lets every frame in flight land and drains the completions, so that
/// the next test starts on a quiet wire (and a capture holds no stray
/// ACK of a test that was not recorded).
fn quiesce(lb: &mut Loopback, conn: usize) -> Result<(), String> {
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
) -> Result<SizeResult, String> {
    let c = lb.connect(s.qp_type, s.mtu, 64)?;
    let qpn = lb.conns[c].qpn;
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    let mut wcs = Vec::new();
    if s.verb == Verb::Send {
        for (node, &q) in qpn.iter().enumerate() {
            let wr = recv_request(lb, s, node, 0);
            lb.sim.nodes[node]
                .post_recv(q, wr)
                .map_err(|e| format!("post_recv: {e}"))?;
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
        let tag = (it % 250 + 1) as u8;
        let t0 = Instant::now();
        match s.verb {
            Verb::Write => {
                for (from, &q) in qpn.iter().enumerate() {
                    let to = 1 - from;
                    lb.nodes[from].mem.write(size - 1, &[tag]);
                    let wr = work_request(lb, s, from, size, it);
                    lb.sim.nodes[from]
                        .post_send(q, wr)
                        .map_err(|e| format!("post_send: {e}"))?;
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
                        .map_err(|e| format!("post_send: {e}"))?;
                    wait(lb, c, "the SEND to arrive", |lb| {
                        wcs.clear();
                        lb.poll(to, &mut wcs);
                        let mut got = false;
                        for wc in &wcs {
                            check_wc(wc)?;
                            got |= wc.opcode == WcOpcode::Recv;
                        }
                        Ok(got)
                    })?;
                    let wr = recv_request(lb, s, to, it);
                    lb.sim.nodes[to]
                        .post_recv(qpn[to], wr)
                        .map_err(|e| format!("post_recv: {e}"))?;
                }
            }
            Verb::Read | Verb::Atomic => {
                let wr = work_request(lb, s, 0, size, it);
                lb.sim.nodes[0]
                    .post_send(qpn[0], wr)
                    .map_err(|e| format!("post_send: {e}"))?;
                wait(lb, c, "the completion", |lb| {
                    wcs.clear();
                    lb.poll(0, &mut wcs);
                    let mut got = false;
                    for wc in &wcs {
                        check_wc(wc)?;
                        got |= wc.wr_id == it;
                    }
                    Ok(got)
                })?;
            }
        }
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

fn run_bw(
    lb: &mut Loopback,
    s: &Settings,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, String> {
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
                    .map_err(|e| format!("post_recv: {e}"))?;
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

/// How long a bandwidth run lasts: a number of operations (-n) or a time (-D).
#[derive(Clone, Copy)]
pub enum Target {
    Ops(u64),
    Time(Duration),
}

/// The bookkeeping of a bandwidth run, the same on the loopback and on a
/// real interface: when each outstanding operation was posted (its post →
/// completion time goes into the histogram), the completion times of the
/// last `window` operations (the peak, perftest's "BW peak": the rate over
/// that window, two rounds of every QP's window — completions come in
/// bursts, one ACK retiring many — but no more than a quarter of the run),
/// and the progress bar.
pub struct BwMeter {
    target: Target,
    size: usize,
    start: Instant,
    posted_at: Vec<u64>,
    ring: Vec<u64>,
    peak: f64,
    pub completed: u64,
    last_progress: Instant,
}

impl BwMeter {
    /// `depth` operations outstanding on each of `qps` QPs, `size` bytes each.
    pub fn new(target: Target, depth: usize, qps: usize, size: usize) -> BwMeter {
        let window = match target {
            Target::Ops(n) => (2 * depth * qps).max(16).min((n as usize / 4).max(1)),
            Target::Time(_) => (2 * depth * qps).max(16),
        };
        let now = Instant::now();
        BwMeter {
            target,
            size,
            start: now,
            posted_at: vec![0; (depth * qps).next_power_of_two()],
            ring: vec![0; window],
            peak: 0.0,
            completed: 0,
            last_progress: now,
        }
    }

    /// Nanoseconds since the run started.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn time_up(&self) -> bool {
        matches!(self.target, Target::Time(d) if self.start.elapsed() >= d)
    }

    /// Operation number `op` was posted just now.
    pub fn posted(&mut self, op: u64) {
        let mask = self.posted_at.len() - 1;
        self.posted_at[op as usize & mask] = self.now();
    }

    /// Operation number `op` completed at `now` (from [`Self::now`]).
    pub fn completed(&mut self, op: u64, now: u64, hist: &mut Histogram<u64>) {
        let mask = self.posted_at.len() - 1;
        hist.saturating_record(
            now.saturating_sub(self.posted_at[op as usize & mask])
                .max(1),
        );
        let window = self.ring.len();
        let slot = (self.completed as usize) % window;
        if self.completed >= window as u64 {
            let dt = now.saturating_sub(self.ring[slot]);
            if dt > 0 {
                self.peak = self.peak.max((window * self.size) as f64 * 1e9 / dt as f64);
            }
        }
        self.ring[slot] = now;
        self.completed += 1;
    }

    /// Moves the progress bar (at most every 50 ms).
    pub fn progress(&mut self, progress: &mut Progress) {
        if self.last_progress.elapsed() > Duration::from_millis(50) {
            self.last_progress = Instant::now();
            progress.set(match self.target {
                Target::Ops(n) => self.completed as f64 / n.max(1) as f64,
                Target::Time(d) => self.start.elapsed().as_secs_f64() / d.as_secs_f64(),
            });
        }
    }

    /// (operations completed, wall time, peak bytes/s).
    pub fn finish(&self) -> (u64, Duration, f64) {
        (self.completed, self.start.elapsed(), self.peak)
    }
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
) -> Result<(u64, Duration, f64), String> {
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
                    .map_err(|e| format!("post_send: {e}"))?;
                meter.posted(posted);
                outstanding[q] += 1;
                posted += 1;
            }
        }
        if !lb.turn() {
            return Err(format!(
                "the transport stalled with {} operations outstanding: {}",
                outstanding.iter().sum::<usize>(),
                lb.describe(conns[0])
            ));
        }
        wcs.clear();
        lb.poll(0, &mut wcs);
        let now = meter.now();
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
                        .map_err(|e| format!("post_recv: {e}"))?;
                }
            }
        }
        if wcs.is_empty() {
            idle_turns += 1;
            if idle_turns & 4095 == 0 && !conns.iter().all(|&c| lb.healthy(c)) {
                return Err(format!("a QP left RTS: {}", lb.describe(conns[0])));
            }
        }
        meter.progress(progress);
    }
    Ok(meter.finish())
}
