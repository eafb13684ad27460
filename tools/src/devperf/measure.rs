//! The measurements of `rnic perf --dev`: the client's latency and
//! bandwidth loops (perftest's, as the loopback runs them, over a device
//! on a real interface) and the server's side of each test.

use crate::netdev::NetDev;
use crate::oob::Ctrl;
use crate::perf::{check_wc, half, new_histogram, warmup_iters, Mode, Settings, SizeResult, Verb};
use crate::progress::Progress;
use crate::CliError;
use hdrhistogram::Histogram;
use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode};
use std::time::{Duration, Instant};

/// A side gives up after this long without progress.
const STALL: Duration = Duration::from_secs(20);

/// Where the run happens: our device, our QPs and the peer's memory.
pub struct Link<'a> {
    nd: &'a NetDev,
    s: &'a Settings,
    qpns: Vec<u32>,
    peer_rkey: u32,
    peer_va: u64,
    /// Offset of the receive half of each region.
    h: u64,
    wcs: Vec<Wc>,
    /// Send WRs posted and completed (to wait for quiet).
    posted: u64,
    completed: u64,
}

/// Busy-waiting with a stall guard: spin, and yield now and then so that
/// the engine thread (and the peer, on a small machine) get the core.
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

    fn idle(&mut self, link: &Link, what: &str) -> Result<(), String> {
        self.n += 1;
        link.nd.idle(self.n);
        if self.n.is_multiple_of(4096) && self.last.elapsed() > STALL {
            return Err(format!(
                "no progress for {} s waiting for {what}: {}",
                STALL.as_secs(),
                link.describe()
            ));
        }
        Ok(())
    }
}

impl<'a> Link<'a> {
    /// Our QPs `qpns` (in the order of the peer's) and the peer's region.
    pub fn new(
        nd: &'a NetDev,
        s: &'a Settings,
        qpns: Vec<u32>,
        peer_rkey: u32,
        peer_va: u64,
    ) -> Link<'a> {
        Link {
            nd,
            s,
            qpns,
            peer_rkey,
            peer_va,
            h: half(s.sizes.iter().copied().max().unwrap_or(8)) as u64,
            wcs: Vec::with_capacity(256),
            posted: 0,
            completed: 0,
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

    fn work_request(&self, size: usize, wr_id: u64) -> SendWr {
        let (op, local) = match self.s.verb {
            Verb::Write => (
                SendOp::Write {
                    remote_addr: self.peer_va + self.h,
                    rkey: self.peer_rkey,
                },
                self.nd.base,
            ),
            Verb::Send => (SendOp::Send, self.nd.base),
            Verb::Read => (
                SendOp::Read {
                    remote_addr: self.peer_va,
                    rkey: self.peer_rkey,
                },
                self.nd.base + self.h,
            ),
            Verb::Atomic => (
                SendOp::FetchAdd {
                    remote_addr: self.peer_va + self.h,
                    rkey: self.peer_rkey,
                    add: 1,
                },
                self.nd.base,
            ),
        };
        SendWr::new(wr_id, op, Sgl::single(local, size as u32, self.nd.lkey))
    }

    fn recv_request(&self, wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            sgl: Sgl::single(self.nd.base + self.h, self.h as u32, self.nd.lkey),
        }
    }

    fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), String> {
        self.nd
            .dev
            .post_send(qpn, wr)
            .map_err(|e| format!("post_send: {e}"))?;
        self.posted += 1;
        Ok(())
    }

    fn post_recv(&self, qpn: u32, wr_id: u64) -> Result<(), String> {
        self.nd
            .dev
            .post_recv(qpn, self.recv_request(wr_id))
            .map_err(|e| format!("post_recv: {e}"))
    }

    /// Polls completions into `self.wcs` (cleared first); checks their
    /// status and counts send completions. Returns how many.
    fn poll(&mut self) -> Result<usize, String> {
        self.wcs.clear();
        let n = self.nd.cq.poll(256, &mut self.wcs);
        for wc in &self.wcs {
            check_wc(wc)?;
            if !matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                self.completed += 1;
            }
        }
        Ok(n)
    }

    /// Waits until every posted send WR has completed.
    fn quiesce(&mut self) -> Result<(), String> {
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

    pub fn at(&self, size: usize) -> usize {
        self.h as usize + size - 1
    }

    fn byte(&self, at: usize) -> u8 {
        let mut b = [0u8];
        self.nd.mem.read(at, &mut b);
        b[0]
    }
}

// ---- the client's measurements ----

pub fn lat_client(
    link: &mut Link,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, String> {
    let s = link.s;
    let q = link.qpns[0];
    let at = link.at(size);
    let warm = warmup_iters(s.iters);
    let mut samples = Vec::with_capacity(s.iters.min(1 << 24) as usize);
    let mut hist = new_histogram();
    let mut measured_start = None;
    let mut it = 0u64;
    loop {
        if it == warm {
            measured_start = Some(Instant::now());
        }
        if it >= warm {
            let measured = it - warm;
            let elapsed = measured_start.map_or(Duration::ZERO, |t| t.elapsed());
            match s.duration {
                Some(d) if elapsed >= d => break,
                Some(d) => progress.set(elapsed.as_secs_f64() / d.as_secs_f64()),
                None if measured >= s.iters => break,
                None => progress.set(measured as f64 / s.iters as f64),
            }
        }
        let tag = (it % 250 + 1) as u8;
        let mut spin = Spin::new();
        let t0;
        match s.verb {
            Verb::Write => {
                link.nd.mem.write(size - 1, &[tag]);
                let wr = link.work_request(size, it);
                t0 = Instant::now();
                link.post_send(q, wr)?;
                while link.byte(at) != tag {
                    spin.idle(link, "the peer's RDMA WRITE")?;
                }
            }
            Verb::Send => {
                let wr = link.work_request(size, it);
                t0 = Instant::now();
                link.post_send(q, wr)?;
                loop {
                    link.poll()?;
                    let got = link
                        .wcs
                        .iter()
                        .filter(|w| w.opcode == WcOpcode::Recv)
                        .count();
                    for _ in 0..got {
                        link.post_recv(q, it)?;
                    }
                    if got > 0 {
                        break;
                    }
                    spin.idle(link, "the peer's SEND")?;
                }
            }
            Verb::Read | Verb::Atomic => {
                let wr = link.work_request(size, it);
                t0 = Instant::now();
                link.post_send(q, wr)?;
                while link.completed < link.posted {
                    if link.poll()? == 0 {
                        spin.idle(link, "the completion")?;
                    }
                }
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
        if matches!(s.verb, Verb::Write) {
            link.poll()?;
        }
        it += 1;
    }
    let elapsed = measured_start.map_or(Duration::ZERO, |t| t.elapsed());
    link.quiesce()?;
    samples.sort_unstable();
    let n = samples.len() as u64;
    Ok(SizeResult {
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
    })
}

#[derive(Clone, Copy)]
enum Target {
    Ops(u64),
    Time(Duration),
}

pub fn bw_client(
    link: &mut Link,
    size: usize,
    progress: &mut Progress,
) -> Result<SizeResult, String> {
    let s = link.s;
    let nq = link.qpns.len() as u64;
    let warm = (2 * s.tx_depth as u64 * nq).min(s.iters.max(1));
    let mut scratch = new_histogram();
    bw_loop(
        link,
        size,
        Target::Ops(warm),
        &mut scratch,
        &mut Progress::hidden(),
    )?;
    let mut hist = new_histogram();
    let target = match s.duration {
        Some(d) => Target::Time(d),
        None => Target::Ops(s.iters),
    };
    let (done, elapsed, peak) = bw_loop(link, size, target, &mut hist, progress)?;
    link.quiesce()?;
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(SizeResult {
        bytes: size,
        iterations: done,
        elapsed,
        samples: Vec::new(),
        hist,
        peak_bps: peak.max(done as f64 * size as f64 / secs),
        avg_bps: done as f64 * size as f64 / secs,
        msg_rate: done as f64 / secs,
    })
}

/// Keeps tx depth operations outstanding per QP until the target is met.
/// Returns (operations completed, wall time, peak bytes/s).
fn bw_loop(
    link: &mut Link,
    size: usize,
    target: Target,
    hist: &mut Histogram<u64>,
    progress: &mut Progress,
) -> Result<(u64, Duration, f64), String> {
    let depth = link.s.tx_depth.max(1) as usize;
    let nq = link.qpns.len();
    let cap = (depth * nq).next_power_of_two();
    let mut posted_at = vec![0u64; cap];
    let mut outstanding = vec![0usize; nq];
    let (mut posted, mut completed) = (0u64, 0u64);
    let window = match target {
        Target::Ops(n) => (2 * depth * nq).max(16).min((n as usize / 4).max(1)),
        Target::Time(_) => (2 * depth * nq).max(16),
    };
    let mut ring = vec![0u64; window];
    let mut peak = 0f64;
    let start = Instant::now();
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    let mut next_q = 0usize;
    let mut last_progress = Instant::now();
    let mut spin = Spin::new();
    let wr_base: u64 = 1 << 40;
    loop {
        let stop_posting = match target {
            Target::Ops(n) => posted >= n,
            Target::Time(d) => start.elapsed() >= d,
        };
        if stop_posting && outstanding.iter().all(|&o| o == 0) {
            break;
        }
        if !stop_posting {
            let mut tries = 0;
            while tries < nq {
                if matches!(target, Target::Ops(n) if posted >= n) {
                    break;
                }
                let q = next_q;
                next_q = (next_q + 1) % nq;
                if outstanding[q] >= depth {
                    tries += 1;
                    continue;
                }
                tries = 0;
                let wr = link.work_request(size, wr_base + posted);
                link.post_send(link.qpns[q], wr)?;
                posted_at[(posted as usize) & (cap - 1)] = ns(Instant::now());
                outstanding[q] += 1;
                posted += 1;
            }
        }
        if link.poll()? == 0 {
            spin.idle(link, "completions")?;
            continue;
        }
        spin.progress();
        let now = ns(Instant::now());
        for i in 0..link.wcs.len() {
            let wc = link.wcs[i];
            let Some(q) = link.qpns.iter().position(|&x| x == wc.qp_num) else {
                continue;
            };
            outstanding[q] = outstanding[q].saturating_sub(1);
            let id = wc.wr_id.wrapping_sub(wr_base);
            hist.saturating_record(
                now.saturating_sub(posted_at[(id as usize) & (cap - 1)])
                    .max(1),
            );
            let slot = (completed as usize) % window;
            if completed >= window as u64 {
                let dt = now.saturating_sub(ring[slot]);
                if dt > 0 {
                    peak = peak.max((window * size) as f64 * 1e9 / dt as f64);
                }
            }
            ring[slot] = now;
            completed += 1;
        }
        if last_progress.elapsed() > Duration::from_millis(50) {
            last_progress = Instant::now();
            progress.set(match target {
                Target::Ops(n) => completed as f64 / n.max(1) as f64,
                Target::Time(d) => start.elapsed().as_secs_f64() / d.as_secs_f64(),
            });
        }
    }
    Ok((completed, start.elapsed(), peak))
}

// ---- the server's part ----

/// Serves one size until the client's `end`: echoes ping-pongs, reposts
/// receives, or (READ, atomics, WRITE bandwidth) just waits.
pub fn serve(link: &mut Link, ctrl: &mut Ctrl, size: usize) -> Result<u64, CliError> {
    let s = link.s;
    let at = link.at(size);
    let fail = |e: String| CliError::new(e);
    if s.verb == Verb::Write && s.mode == Mode::Lat {
        link.nd.mem.write(at, &[0]);
    }
    ctrl.send_line("go")?;
    let mut it = 0u64;
    let mut served = 0u64;
    let mut spin = Spin::new();
    let active = matches!((s.verb, s.mode), (Verb::Write, Mode::Lat) | (Verb::Send, _));
    loop {
        let mut did = false;
        match (s.verb, s.mode) {
            (Verb::Write, Mode::Lat) => {
                let tag = (it % 250 + 1) as u8;
                if link.byte(at) == tag {
                    link.nd.mem.write(size - 1, &[tag]);
                    let wr = link.work_request(size, it);
                    link.post_send(link.qpns[0], wr).map_err(fail)?;
                    it += 1;
                    served += 1;
                    did = true;
                }
                link.poll().map_err(fail)?;
            }
            (Verb::Send, mode) => {
                link.poll().map_err(fail)?;
                for i in 0..link.wcs.len() {
                    let wc = link.wcs[i];
                    if wc.opcode != WcOpcode::Recv {
                        continue;
                    }
                    link.post_recv(wc.qp_num, wc.wr_id).map_err(fail)?;
                    served += 1;
                    did = true;
                    if mode == Mode::Lat {
                        let wr = link.work_request(size, served);
                        link.post_send(wc.qp_num, wr).map_err(fail)?;
                    }
                }
            }
            _ => {}
        }
        if did {
            spin.progress();
            continue;
        }
        // the client's `end`, checked now and then
        spin.n += 1;
        if spin.n.is_multiple_of(1024) || (!active && !link.nd.inline) {
            if let Some(l) = ctrl.try_line()? {
                if l.starts_with("end") {
                    break;
                }
                return Err(CliError::new(format!(
                    "the client said {l:?} in the middle of a test"
                )));
            }
        }
        if active || link.nd.inline {
            link.nd.idle(spin.n);
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    link.quiesce().map_err(fail)?;
    Ok(served)
}
