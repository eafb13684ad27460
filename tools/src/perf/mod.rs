//! `rnic perf {write|read|send|atomic} {bw|lat}`: perftest's tools on a
//! soft RNIC. [`run`] (`command.rs`) checks the request ([`request`] turns
//! it into [`Settings`]) and runs it on the in-process loopback ([`local`])
//! or on a real interface against a peer ([`dev`], `--dev`; `rnic
//! memcheck` compares the memory its `--dump-mem` recorded,
//! [`dev::memcheck`]).
//!
//! This module holds the vocabulary both share, and the reports too: the
//! operation and mode, the settings of a run, the result of one message
//! size with its latency statistics and histogram, the bookkeeping of a
//! bandwidth run ([`BwMeter`]), and why a run failed ([`RunError`]).

mod command;
pub mod dev;
pub mod local;
pub mod request;

pub use command::run;

use crate::progress::Progress;
use crate::qp::QpError;
use hdrhistogram::Histogram;
use nic::engine::EngineError;
use nic::verbs::{QpType, Wc, WcOpcode, WcStatus};
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

/// A work request that completed with an error status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "work request {wr_id} ({opcode:?}) on QP {qpn:#x} completed with status {}",
    .status.as_str()
)]
pub struct WcError {
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub qpn: u32,
    pub status: WcStatus,
}

/// Success, or the completion's error.
pub fn check_wc(wc: &Wc) -> Result<(), WcError> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(WcError {
            wr_id: wc.wr_id,
            opcode: wc.opcode,
            qpn: wc.qp_num,
            status: wc.status,
        })
    }
}

/// Received data that is not what the sender wrote.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: byte {at} of {len} is {got:#04x}, the sender wrote {want:#04x}")]
pub struct DataError {
    /// Which data ("the last RDMA WRITE's data", "SEND 7", ...).
    pub what: String,
    pub at: usize,
    pub len: usize,
    pub got: u8,
    pub want: u8,
}

/// Why a measurement stopped. `qps` is the state of the QPs involved, for
/// the reader of the message.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Nothing was left to happen on the loopback and the wait was not over.
    #[error("the transport stalled waiting for {what}: {qps}")]
    Stalled { what: &'static str, qps: String },
    /// The same, in a bandwidth run.
    #[error("the transport stalled with {outstanding} operations outstanding: {qps}")]
    StalledOutstanding { outstanding: usize, qps: String },
    /// A QP went to the error state during a wait.
    #[error("a QP left RTS waiting for {what}: {qps}")]
    LeftRtsWaiting { what: &'static str, qps: String },
    /// A QP went to the error state during a bandwidth run.
    #[error("a QP left RTS: {qps}")]
    LeftRts { qps: String },
    /// Wall time passed without a completion or the awaited data.
    #[error("no progress for {} s waiting for {what}: {qps}", .stall.as_secs())]
    NoProgress {
        stall: Duration,
        what: &'static str,
        qps: String,
    },
    #[error(transparent)]
    Completion(#[from] WcError),
    /// The device refused a work request.
    #[error("{op}: {source}")]
    Post {
        op: &'static str,
        source: EngineError,
    },
    /// A receive of another length than the message size.
    #[error("a SEND of {got} bytes arrived where {due} were due")]
    RecvLength { got: u32, due: usize },
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Qp(#[from] QpError),
}

/// A run that failed at one message size.
#[derive(Debug, thiserror::Error)]
#[error("{} {} {size} B: {source}", .verb.name(), .mode.name())]
pub struct SizeError {
    pub verb: Verb,
    pub mode: Mode,
    pub size: usize,
    pub source: RunError,
}

impl crate::Failure for SizeError {}

impl SizeError {
    /// `source` stopped the run of `s` at `size` bytes.
    pub fn new(s: &Settings, size: usize, source: RunError) -> SizeError {
        SizeError {
            verb: s.verb,
            mode: s.mode,
            size,
            source,
        }
    }
}

impl RunError {
    /// `post_send` refused.
    pub fn post_send(e: impl Into<EngineError>) -> RunError {
        RunError::Post {
            op: "post_send",
            source: e.into(),
        }
    }

    /// `post_recv` refused.
    pub fn post_recv(e: impl Into<EngineError>) -> RunError {
        RunError::Post {
            op: "post_recv",
            source: e.into(),
        }
    }
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

/// The connection type as perftest prints it.
pub fn conn_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// The work request of one operation from `from` to the other node.
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
    /// Nanoseconds since `start` at the last `tick`: one clock read serves
    /// a loop's posts, completions, deadline and progress.
    now: u64,
    last_progress: u64,
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
            now: 0,
            last_progress: 0,
        }
    }

    /// Reads the clock: nanoseconds since the run started, which
    /// `time_up`, `posted` and `progress` use until the next tick.
    pub fn tick(&mut self) -> u64 {
        self.now = self.start.elapsed().as_nanos() as u64;
        self.now
    }

    /// Whether a timed run's duration had passed at the last `tick`.
    pub fn time_up(&self) -> bool {
        matches!(self.target, Target::Time(d) if u128::from(self.now) >= d.as_nanos())
    }

    /// Operation number `op` was posted just now (at the last `tick`).
    pub fn posted(&mut self, op: u64) {
        let mask = self.posted_at.len() - 1;
        self.posted_at[op as usize & mask] = self.now;
    }

    /// Operation number `op` completed at `now` (from [`Self::tick`]).
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

    /// Moves the progress bar (at most every 50 ms, as of the last `tick`).
    pub fn progress(&mut self, progress: &mut Progress) {
        const EVERY: u64 = 50_000_000;
        if self.now.saturating_sub(self.last_progress) > EVERY {
            self.last_progress = self.now;
            progress.set(match self.target {
                Target::Ops(n) => self.completed as f64 / n.max(1) as f64,
                Target::Time(d) => self.now as f64 / d.as_nanos().max(1) as f64,
            });
        }
    }

    /// (operations completed, wall time, peak bytes/s).
    pub fn finish(&self) -> (u64, Duration, f64) {
        (self.completed, self.start.elapsed(), self.peak)
    }
}
