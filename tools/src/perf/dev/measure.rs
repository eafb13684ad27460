//! The measurements of `rnic perf --dev`, each side of each test as
//! perftest 6.06 (bookworm's 4.5-0.17) runs it, so that either side can be
//! the real tool (`src/perftest_resources.c`):
//!
//! - bandwidth (`run_iter_bw`): the client keeps `-t` operations
//!   outstanding per QP, `-n` per QP (or `-D` seconds); WRITE, READ and
//!   atomic servers are passive; the SEND server (`run_iter_bw_server`)
//!   counts receives and reposts them.
//! - `ib_write_lat` (`run_iter_lat_write`): each side RDMA WRITEs its
//!   buffer to the other, the last byte carrying the iteration number
//!   (1, 2, … as a `char`), and polls the last byte of its own receive
//!   buffer for the other's; the *server* posts first.
//! - `ib_send_lat` (`run_iter_lat_send`): SEND ping-pong; the client
//!   sends first.
//! - `ib_read_lat`, `ib_atomic_lat` (`run_iter_lat`): one operation at a
//!   time on the client; the server is passive.
//!
//! Latency samples are perftest's: the time between successive posts
//! (`tposted[i+1] - tposted[i]`), halved for the ping-pongs. perftest does
//! no warm-up by default; neither do the latency tests and the SEND
//! bandwidth test here (the peer counts every message). WRITE, READ and
//! atomic bandwidth warm up with 2 × tx depth operations per QP, which a
//! passive peer does not see.
//!
//! Our region: the send half `[0, h)` holds [`pattern`], the receive half
//! `[h, 2h)` is the address the peer gets (zero, or the pattern on a READ
//! server).

use crate::netdev::NetDev;
use crate::perf::{
    check_wc, half, new_histogram, BwMeter, DataError, RunError, Settings, SizeResult, Target, Verb,
};
use crate::progress::Progress;
use hdrhistogram::Histogram;
use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode};
use std::time::{Duration, Instant};

/// A side gives up after this long without progress.
const STALL: Duration = Duration::from_secs(20);

/// The byte at offset `i` of a message between two rnic sides.
pub fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9) ^ 0xa5) as u8
}

/// Fills `[at, at + len)` of our region with the pattern (offset 0 at `at`).
pub fn fill_pattern(nd: &NetDev, at: usize, len: usize) {
    let p: Vec<u8> = (0..len).map(pattern).collect();
    nd.mem.write(at, &p);
}

/// Checks `[at, at + len)` against the pattern; names the first difference.
pub fn check_pattern(nd: &NetDev, at: usize, len: usize, what: &str) -> Result<(), DataError> {
    let mut got = vec![0u8; len];
    nd.mem.read(at, &mut got);
    match got.iter().enumerate().find(|&(i, &b)| b != pattern(i)) {
        None => Ok(()),
        Some((i, &b)) => Err(DataError {
            what: what.to_string(),
            at: i,
            len,
            got: b,
            want: pattern(i),
        }),
    }
}

/// Where the run happens: our device, our QPs and the peer's buffers.
pub struct Link<'a> {
    pub nd: &'a NetDev,
    s: &'a Settings,
    qpns: Vec<u32>,
    /// The peer's rkey and address per QP (its handshake's).
    peers: Vec<(u32, u64)>,
    /// Offset of our receive half.
    pub h: u64,
    wcs: Vec<Wc>,
    /// Send WRs posted and completed.
    pub posted: u64,
    pub completed: u64,
    /// Receive completions (each reposted at once).
    pub recvs: u64,
    first_recv: Option<Instant>,
    last_recv: Option<Instant>,
    /// Check each receive's first bytes against the pattern (SEND bandwidth
    /// between rnic sides): the message size, 0 for no check.
    pub check_recv: usize,
}

/// Busy-waiting with a stall guard.
struct Spin {
    last: Instant,
    n: u64,
}

impl Spin {
    fn new() -> Spin {
        Spin {
            last: Instant::now(),
            n: 0,
        }
    }

    fn progress(&mut self) {
        self.last = Instant::now();
    }

    fn idle(&mut self, link: &Link, what: &'static str) -> Result<(), RunError> {
        self.n += 1;
        link.nd.idle(self.n);
        if self.n.is_multiple_of(4096) && self.last.elapsed() > STALL {
            return Err(RunError::NoProgress {
                stall: STALL,
                what,
                qps: link.describe(),
            });
        }
        Ok(())
    }
}

impl<'a> Link<'a> {
    pub fn new(
        nd: &'a NetDev,
        s: &'a Settings,
        qpns: Vec<u32>,
        peers: Vec<(u32, u64)>,
    ) -> Link<'a> {
        Link {
            nd,
            s,
            qpns,
            peers,
            h: half(s.sizes.iter().copied().max().unwrap_or(8)) as u64,
            wcs: Vec::with_capacity(256),
            posted: 0,
            completed: 0,
            recvs: 0,
            first_recv: None,
            last_recv: None,
            check_recv: 0,
        }
    }

    fn describe(&self) -> String {
        let q = self.qpns.clone();
        self.nd
            .dev
            .call(move |r| q.iter().map(|&q| r.debug_qp(q)).collect::<String>())
            .unwrap_or_else(|e| e.to_string())
            .trim()
            .replace('\n', " | ")
    }

    fn work_request(&self, qi: usize, size: usize, wr_id: u64) -> SendWr {
        let (rkey, va) = self.peers[qi];
        let base = self.nd.base;
        let (op, local) = match self.s.verb {
            Verb::Write => (
                SendOp::Write {
                    remote_addr: va,
                    rkey,
                },
                base,
            ),
            Verb::Send => (SendOp::Send, base),
            Verb::Read => (
                SendOp::Read {
                    remote_addr: va,
                    rkey,
                },
                base + self.h,
            ),
            Verb::Atomic => (
                SendOp::FetchAdd {
                    remote_addr: va,
                    rkey,
                    add: 1,
                },
                base,
            ),
        };
        SendWr::new(wr_id, op, Sgl::single(local, size as u32, self.nd.lkey))
    }

    fn post_send(&mut self, qi: usize, size: usize, wr_id: u64) -> Result<(), RunError> {
        let wr = self.work_request(qi, size, wr_id);
        self.nd
            .dev
            .post_send(self.qpns[qi], wr)
            .map_err(RunError::post_send)?;
        self.posted += 1;
        Ok(())
    }

    /// Polls completions into `self.wcs` (cleared first): checks their
    /// status, counts sends, counts and reposts receives. Returns how many.
    pub fn poll(&mut self) -> Result<usize, RunError> {
        self.wcs.clear();
        let n = self.nd.cq.poll(256, &mut self.wcs);
        for i in 0..n {
            let wc = self.wcs[i];
            check_wc(&wc)?;
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                let now = Instant::now();
                self.first_recv.get_or_insert(now);
                self.last_recv = Some(now);
                self.recvs += 1;
                if self.check_recv > 0 {
                    if wc.byte_len as usize != self.check_recv {
                        return Err(RunError::RecvLength {
                            got: wc.byte_len,
                            due: self.check_recv,
                        });
                    }
                    check_pattern(
                        self.nd,
                        self.h as usize,
                        self.check_recv,
                        &format!("SEND {}", self.recvs),
                    )?;
                }
                let h = self.h;
                self.nd
                    .dev
                    .post_recv(
                        wc.qp_num,
                        RecvWr {
                            wr_id: wc.wr_id,
                            sgl: Sgl::single(self.nd.base + h, h as u32, self.nd.lkey),
                        },
                    )
                    .map_err(RunError::post_recv)?;
            } else {
                self.completed += 1;
            }
        }
        Ok(n)
    }

    /// Waits until every posted send WR has completed.
    pub fn quiesce(&mut self) -> Result<(), RunError> {
        let mut spin = Spin::new();
        while self.completed < self.posted {
            if self.poll()? == 0 {
                spin.idle(self, "the last completions")?;
            } else {
                spin.progress();
            }
        }
        Ok(())
    }

    fn byte(&self, at: usize) -> u8 {
        let mut b = [0u8];
        self.nd.mem.read(at, &mut b);
        b[0]
    }

    /// The receive statistics of a SEND bandwidth server: (receives, time
    /// from the first to the last).
    pub fn take_recv_stats(&mut self) -> (u64, Duration) {
        let d = match (self.first_recv.take(), self.last_recv.take()) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        };
        let n = self.recvs;
        self.recvs = 0;
        (n, d)
    }
}

// ---- latency ----

/// The clock of one latency run: when it ends (`-n` iterations or `-D`
/// seconds), the post timestamps it collects, and the progress bar.
struct LatClock {
    start: Instant,
    deadline: Option<Instant>,
    iters: u64,
    duration: Option<Duration>,
    /// Nanoseconds from `start` at each post.
    posts: Vec<u64>,
    last_progress: Instant,
}

impl LatClock {
    fn new(iters: u64, duration: Option<Duration>) -> Self {
        let start = Instant::now();
        LatClock {
            start,
            deadline: duration.map(|d| start + d),
            iters,
            duration,
            posts: Vec::with_capacity(iters.min(1 << 24) as usize),
            last_progress: start,
        }
    }

    /// Whether iteration `k + 1` runs.
    fn more(&self, k: u64) -> bool {
        match self.deadline {
            Some(d) => Instant::now() < d,
            None => k < self.iters,
        }
    }

    /// `-D` ran out.
    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Records a post, now.
    fn stamp(&mut self) {
        let ns = Instant::now().duration_since(self.start).as_nanos() as u64;
        self.posts.push(ns);
    }

    /// Moves the progress bar (at most every 50 ms) after iteration `k`.
    fn tick(&mut self, k: u64, progress: &mut Progress) {
        if self.last_progress.elapsed() > Duration::from_millis(50) {
            self.last_progress = Instant::now();
            progress.set(match self.duration {
                Some(d) => self.start.elapsed().as_secs_f64() / d.as_secs_f64(),
                None => k as f64 / self.iters as f64,
            });
        }
    }
}

/// One size of a latency test. `first`: this side posts first (the server
/// of ib_write_lat, the client of ib_send_lat). `check`: the peer is rnic;
/// verify the payload at the end of the size.
pub fn lat_run(
    link: &mut Link,
    size: usize,
    first: bool,
    check: bool,
    progress: &mut Progress,
) -> Result<SizeResult, RunError> {
    let s = link.s;
    let mut clock = LatClock::new(s.iters, s.duration);
    match s.verb {
        Verb::Write => lat_write(link, size, first, check, &mut clock, progress)?,
        Verb::Send => lat_send(link, size, first, check, &mut clock, progress)?,
        Verb::Read | Verb::Atomic => lat_read(link, size, check, &mut clock, progress)?,
    }
    let elapsed = clock.start.elapsed();
    // a WRITE or SEND ping-pong: a round trip is two one-way latencies
    let div = if matches!(s.verb, Verb::Write | Verb::Send) {
        2
    } else {
        1
    };
    let posts = clock.posts;
    let mut samples: Vec<u64> = posts.windows(2).map(|w| (w[1] - w[0]) / div).collect();
    let mut hist = new_histogram();
    for &t in &samples {
        hist.saturating_record(t.max(1));
    }
    samples.sort_unstable();
    Ok(SizeResult::lat(
        size,
        posts.len() as u64,
        samples,
        elapsed,
        hist,
    ))
}

/// The ping-pong of ib_write_lat and ib_send_lat: a side posts its
/// message `k` (`send`) once the peer's message `k - 1` arrived (`wait`,
/// given how many arrived before; `false` when `-D` ran out), the `first`
/// side without waiting for the first; at the end the first side waits
/// for the peer's last answer, and every send completes.
fn ping_pong(
    link: &mut Link,
    first: bool,
    clock: &mut LatClock,
    progress: &mut Progress,
    wait: impl Fn(&mut Link, &LatClock, u64) -> Result<bool, RunError>,
    send: impl Fn(&mut Link, &mut LatClock, u64) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let (mut k, mut r) = (0u64, 0u64);
    while clock.more(k) {
        if k != 0 || !first {
            if !wait(link, clock, r)? {
                break;
            }
            r += 1;
        }
        k += 1;
        send(link, clock, k)?;
        clock.tick(k, progress);
    }
    if first && clock.deadline.is_none() {
        wait(link, clock, r)?;
    }
    link.quiesce()
}

/// ib_write_lat: each side WRITEs when the peer's WRITE has landed;
/// perftest polls the last byte of its buffer for (char)rcnt.
fn lat_write(
    link: &mut Link,
    size: usize,
    first: bool,
    check: bool,
    clock: &mut LatClock,
    progress: &mut Progress,
) -> Result<(), RunError> {
    let h = link.h as usize;
    let at = h + size - 1;
    let wait = |link: &mut Link, clock: &LatClock, r: u64| -> Result<bool, RunError> {
        let want = (r + 1) as u8;
        let mut spin = Spin::new();
        while link.byte(at) != want {
            if clock.expired() {
                return Ok(false);
            }
            link.poll()?;
            spin.idle(link, "the peer's RDMA WRITE")?;
        }
        Ok(true)
    };
    let send = |link: &mut Link, clock: &mut LatClock, k: u64| -> Result<(), RunError> {
        link.nd.mem.write(size - 1, &[k as u8]);
        clock.stamp();
        link.post_send(0, size, k)?;
        link.poll()?;
        Ok(())
    };
    ping_pong(link, first, clock, progress, wait, send)?;
    link.nd.mem.write(size - 1, &[pattern(size - 1)]);
    if check {
        check_pattern(link.nd, h, size - 1, "the peer's last RDMA WRITE")?;
    }
    Ok(())
}

/// ib_send_lat: each side SENDs when the peer's SEND has arrived.
fn lat_send(
    link: &mut Link,
    size: usize,
    first: bool,
    check: bool,
    clock: &mut LatClock,
    progress: &mut Progress,
) -> Result<(), RunError> {
    let wait = |link: &mut Link, clock: &LatClock, r: u64| -> Result<bool, RunError> {
        let mut spin = Spin::new();
        while link.recvs <= r {
            if clock.expired() {
                return Ok(false);
            }
            if link.poll()? == 0 {
                spin.idle(link, "the peer's SEND")?;
            }
        }
        Ok(true)
    };
    let send = |link: &mut Link, clock: &mut LatClock, k: u64| -> Result<(), RunError> {
        clock.stamp();
        link.post_send(0, size, k)?;
        Ok(())
    };
    link.recvs = 0;
    ping_pong(link, first, clock, progress, wait, send)?;
    link.recvs = 0;
    if check {
        check_pattern(link.nd, link.h as usize, size, "the peer's last SEND")?;
    }
    Ok(())
}

/// ib_read_lat and ib_atomic_lat: one operation at a time, each posted
/// once the one before completed.
fn lat_read(
    link: &mut Link,
    size: usize,
    check: bool,
    clock: &mut LatClock,
    progress: &mut Progress,
) -> Result<(), RunError> {
    let mut k = 0u64;
    while clock.more(k) {
        k += 1;
        clock.stamp();
        link.post_send(0, size, k)?;
        let mut spin = Spin::new();
        while link.completed < link.posted {
            if link.poll()? == 0 {
                spin.idle(link, "the completion")?;
            }
        }
        clock.tick(k, progress);
    }
    if check && link.s.verb == Verb::Read {
        check_pattern(link.nd, link.h as usize, size, "the last RDMA READ's data")?;
    }
    Ok(())
}

// ---- bandwidth ----

/// The client of a bandwidth test. `check`: the peer is rnic (READ data
/// verified after the size).
pub fn bw_client(
    link: &mut Link,
    size: usize,
    check: bool,
    progress: &mut Progress,
) -> Result<SizeResult, RunError> {
    let s = link.s;
    let nq = link.qpns.len() as u64;
    if s.verb != Verb::Send {
        let warm = 2 * s.tx_depth as u64 * nq;
        let mut scratch = new_histogram();
        bw_loop(
            link,
            size,
            Target::Ops(warm),
            &mut scratch,
            &mut Progress::hidden(),
        )?;
    }
    let mut hist = new_histogram();
    let target = match s.duration {
        Some(d) => Target::Time(d),
        None => Target::Ops(s.iters * nq),
    };
    let (done, elapsed, peak) = bw_loop(link, size, target, &mut hist, progress)?;
    link.quiesce()?;
    if check && s.verb == Verb::Read {
        check_pattern(link.nd, link.h as usize, size, "the last RDMA READ's data")?;
    }
    Ok(SizeResult::bw(size, done, elapsed, hist, peak))
}

/// Keeps tx depth operations outstanding per QP, each QP posting its
/// share (perftest: `-n` per QP), until the target is met. Returns
/// (operations completed, wall time, peak bytes/s).
fn bw_loop(
    link: &mut Link,
    size: usize,
    target: Target,
    hist: &mut Histogram<u64>,
    progress: &mut Progress,
) -> Result<(u64, Duration, f64), RunError> {
    let depth = link.s.tx_depth.max(1) as usize;
    let nq = link.qpns.len();
    let per_qp = match target {
        Target::Ops(n) => n / nq as u64,
        Target::Time(_) => u64::MAX,
    };
    let mut outstanding = vec![0usize; nq];
    let mut posted_q = vec![0u64; nq];
    let mut posted = 0u64;
    let mut meter = BwMeter::new(target, depth, nq, size);
    let mut spin = Spin::new();
    let wr_base: u64 = 1 << 40;
    loop {
        let all_posted = meter.time_up() || posted_q.iter().all(|&p| p >= per_qp);
        if all_posted && outstanding.iter().all(|&o| o == 0) {
            break;
        }
        if !all_posted {
            for q in 0..nq {
                while outstanding[q] < depth && posted_q[q] < per_qp {
                    link.post_send(q, size, wr_base + posted)?;
                    meter.posted(posted);
                    outstanding[q] += 1;
                    posted_q[q] += 1;
                    posted += 1;
                }
            }
        }
        let now = meter.tick();
        if link.poll()? == 0 {
            spin.idle(link, "completions")?;
            continue;
        }
        spin.progress();
        for i in 0..link.wcs.len() {
            let wc = link.wcs[i];
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                continue;
            }
            let Some(q) = link.qpns.iter().position(|&x| x == wc.qp_num) else {
                continue;
            };
            outstanding[q] = outstanding[q].saturating_sub(1);
            meter.completed(wc.wr_id.wrapping_sub(wr_base), now, hist);
        }
        meter.progress(progress);
    }
    Ok(meter.finish())
}

/// The SEND bandwidth server's figures for one size, from its receives
/// (perftest's server prints its own line too).
pub fn send_server_result(size: usize, recvs: u64, elapsed: Duration) -> SizeResult {
    let secs = elapsed.as_secs_f64();
    let (bps, rate) = if secs > 0.0 {
        (recvs as f64 * size as f64 / secs, recvs as f64 / secs)
    } else {
        (0.0, 0.0)
    };
    SizeResult {
        bytes: size,
        iterations: recvs,
        elapsed,
        samples: Vec::new(),
        hist: new_histogram(),
        peak_bps: bps,
        avg_bps: bps,
        msg_rate: rate,
    }
}
