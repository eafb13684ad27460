//! The DCQCN reaction point (RP): one [`ReactionPoint`] per QP.
//!
//! DCQCN is the congestion control of RoCEv2 RNICs (Zhu et al.,
//! "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015;
//! implemented in ConnectX-4 and later). Switches mark packets CE (RED/ECN),
//! the receiver (notification point, [`super::np`]) answers with CNPs, and
//! the sender's RP adjusts the QP's rate:
//!
//! ```text
//! CNP (at most one cut per rate_reduce_monitor_period):
//!     RT = RC                       (see "target clamping" below)
//!     RC = RC · (1 − α/2)           (α/2 is α·2^10 / 2^rpg_gd; floor rpg_min_dec_fac)
//!     α  = (1 − g)·α + g            (g = (1024 − dce_tcp_g) / 1024)
//!     restart: T = BC = 0, byte counter 0, timer rpg_time_reset from now
//! every dce_tcp_rtt without a cut:   α = (1 − g)·α
//! every rpg_time_reset (T += 1) and every rpg_byte_reset bytes sent (BC += 1):
//!     max(T, BC) <  F   fast recovery       RC = (RT + RC)/2
//!     min(T, BC) >  F   hyper increase      RT += (min(T, BC) − F)·R_HAI; RC = (RT + RC)/2
//!     otherwise         additive increase   RT += R_AI;                   RC = (RT + RC)/2
//! RC, RT are clamped to [rpg_min_rate_kbps, rpg_max_rate_kbps or line rate]; when RC
//! comes back to the maximum the rate limiter is released (the QP runs
//! unlimited until its next CNP).
//! ```
//!
//! `F` is `rpg_threshold`. A counter that is switched off (`rpg_time_reset`
//! zero, `rpg_byte_reset` zero) does not hold the other back: with one
//! counter only, `max` and `min` are that counter, so timer-only and
//! byte-only configurations also pass through all three phases.
//!
//! Target clamping follows NVIDIA's two knobs (QCN 802.1Qau's rule with
//! NVIDIA's extension): on a cut, RT = RC if `clamp_tgt_rate`, or if the
//! rate was increased by the byte counter since the last cut, or (with
//! `clamp_tgt_rate_after_time_inc`) by the timer; otherwise RT keeps its
//! value. The paper's algorithm always sets RT = RC (`clamp_tgt_rate`).
//!
//! Model choices, stated: α is updated at the cut itself (the paper's
//! formulation), and its decay is computed lazily — α at time `t` is
//! α_cut·(1 − g)^⌊(t − t_cut)/dce_tcp_rtt⌋ — so an idle QP needs no timer
//! every microsecond; NVIDIA firmware instead samples "a CNP arrived in this
//! dce_tcp_rtt period" (identical when every period with a CNP has a cut).
//! CNPs that arrive within `rate_reduce_monitor_period` of the last cut are
//! folded into one cut at the end of that period ("the flow rate is reduced
//! at the beginning of the next rate_reduce_monitor_period interval").
//!
//! Everything is sans-I/O: `handle_cnp(now)`, `on_sent(now, bytes)`,
//! `handle_timeout(now)` in; `rate_bps()` and `poll_timeout()` out.
//!
//! Length: About 70 of its lines are tests; the reaction point's state and its
//! timers are one state machine.

use crate::time::Instant;
use std::time::Duration;

const KBPS: f64 = 1e3;

/// The DCQCN knobs of one RP, under NVIDIA's names (mlx5 sysfs
/// `/sys/class/net/<if>/ecn/roce_rp/*`, mlxconfig `RPG_*`, `DCE_TCP_*`, ...)
/// and in NVIDIA's units, except that times are [`Duration`]s and rates
/// kb/s (fine enough for the steps of [`DcqcnParams::scaled`] to a slow
/// link). The NP's
/// knobs (`min_time_between_cnps`, `cnp_dscp`, `cnp_802p_prio`) are in
/// [`super::NpParams`].
///
/// Presets: [`DcqcnParams::nvidia`] (the default) and
/// [`DcqcnParams::sigcomm15`]; the sources of every value are listed there.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct DcqcnParams {
    /// Time between rate increases while no CNP arrives (the rate-increase
    /// timer). Zero switches the timer off; below 1 µs (NVIDIA's unit) it
    /// counts as 1 µs.
    pub rpg_time_reset: Duration,
    /// Bytes transmitted between rate increases while no CNP arrives (the
    /// byte counter). Zero switches the byte counter off.
    pub rpg_byte_reset: u64,
    /// `F`: how many timer / byte-counter events before the RP leaves fast
    /// recovery (and, past it, enters hyper increase).
    pub rpg_threshold: u32,
    /// Additive increase step of the target rate, kb/s (NVIDIA's
    /// RPG_AI_RATE is in Mb/s: 5 there is 5000 here).
    pub rpg_ai_rate_kbps: u32,
    /// Hyper increase step of the target rate, kb/s.
    pub rpg_hai_rate_kbps: u32,
    /// Maximum rate while limited, kb/s; 0 = line rate. When the current
    /// rate reaches it, the rate limiter is released.
    pub rpg_max_rate_kbps: u32,
    /// Minimum rate, kb/s.
    pub rpg_min_rate_kbps: u32,
    /// Largest single cut, as the percentage of the current rate that must
    /// remain (50: never below half; 100: never cut; 0: no bound).
    pub rpg_min_dec_fac: u8,
    /// log2 of the divisor of α in the cut: RC·(1 − α·2^10/2^rpg_gd);
    /// 11 gives the paper's RC·(1 − α/2).
    pub rpg_gd: u8,
    /// Current and target rate set on the first CNP of a flow, kb/s; 0 =
    /// cut from the line rate as on any other CNP.
    pub rate_to_set_on_first_cnp_kbps: u32,
    /// Minimum time between two rate cuts of one QP.
    pub rate_reduce_monitor_period: Duration,
    /// α gain as NVIDIA encodes it: g = (1024 − dce_tcp_g) / 1024
    /// (1019 → g = 5/1024; the paper's g = 1/256 is 1020).
    pub dce_tcp_g: u16,
    /// α decay period.
    pub dce_tcp_rtt: Duration,
    /// α on the first CNP of a flow, in 1/1024 (1024 = α of exactly 1).
    pub initial_alpha_value: u16,
    /// On every cut, RT = RC.
    pub clamp_tgt_rate: bool,
    /// On a cut, RT = RC also when the timer (not only the byte counter)
    /// increased the rate since the last cut.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// The rate limiter's granularity, kb/s: it is released when RC is
    /// within this of the maximum (NVIDIA's 1 Mb/s; not a firmware knob).
    pub rate_granularity_kbps: u32,
}

impl DcqcnParams {
    /// NVIDIA ConnectX firmware defaults (ConnectX-4 and later).
    ///
    /// Sources: NVIDIA, "DCQCN CC Parameters" (DOCA SDK documentation,
    /// <https://networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters>,
    /// formerly Mellanox community DOC-2790 "DCQCN Parameters"): dce_tcp_g
    /// 1019, dce_tcp_rtt 1 µs, initial_alpha_value 1023,
    /// rate_to_set_on_first_cnp_kbps 0, rpg_min_dec_fac 50 %, rpg_min_rate_kbps
    /// 1 Mb/s, rpg_gd 11, rate_reduce_monitor_period 4 µs. The rate-increase
    /// defaults as `mlxconfig -q` prints them on a ConnectX
    /// (CLAMP_TGT_RATE False, CLAMP_TGT_RATE_AFTER_TIME_INC True,
    /// RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1,
    /// RPG_MAX_RATE 0, RPG_AI_RATE 5, RPG_HAI_RATE 50; quoted e.g. in
    /// <https://github.com/Mellanox/mstflint/issues/830>), the same values
    /// Google's isekai simulator takes as "DCQCN parameters" from the
    /// Mellanox page (`RdmaCcDcqcnOptions`). RPG_BYTE_RESET is documented
    /// in bytes and is used as bytes here.
    pub const fn nvidia() -> DcqcnParams {
        DcqcnParams {
            rpg_time_reset: Duration::from_micros(300),
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_ai_rate_kbps: 5_000,
            rpg_hai_rate_kbps: 50_000,
            rpg_max_rate_kbps: 0,
            rpg_min_rate_kbps: 1_000,
            rpg_min_dec_fac: 50,
            rpg_gd: 11,
            rate_to_set_on_first_cnp_kbps: 0,
            rate_reduce_monitor_period: Duration::from_micros(4),
            dce_tcp_g: 1019,
            dce_tcp_rtt: Duration::from_micros(1),
            initial_alpha_value: 1023,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rate_granularity_kbps: 1_000,
        }
    }

    /// The values of the DCQCN paper (Zhu et al., "Congestion Control for
    /// Large-Scale RDMA Deployments", SIGCOMM 2015), for 40 Gb/s links:
    /// g = 1/256 (dce_tcp_g 1020), α decay timer K = 55 µs, rate-increase
    /// timer T = 55 µs, byte counter B = 10 MB, F = 5, R_AI = 40 Mb/s,
    /// α initialised to 1, RT = RC on every cut, RC·(1 − α/2); the NP's
    /// N = 50 µs is in [`super::NpParams::sigcomm15`] (switch: Kmin 5 KB,
    /// Kmax 200 KB, Pmax 1 %). Knobs the paper does not set come from the
    /// authors' companion simulator, bobzhuyb/ns3-rdma (`mix/config.txt`:
    /// RATE_HAI 200Mb/s, CLAMP_TARGET_RATE 1, CLAMP_TARGET_RATE_AFTER_TIMER
    /// 0; `QbbNetDevice` MinRate 100Mb/s): R_HAI = 200 Mb/s and a minimum
    /// rate of 100 Mb/s. The paper has no monitor period, no decrease floor
    /// and no first-CNP rate: 0 for each. The same timers, g, B and F are
    /// the defaults of htsim's DCQCN model.
    pub const fn sigcomm15() -> DcqcnParams {
        DcqcnParams {
            rpg_time_reset: Duration::from_micros(55),
            rpg_byte_reset: 10_000_000,
            rpg_threshold: 5,
            rpg_ai_rate_kbps: 40_000,
            rpg_hai_rate_kbps: 200_000,
            rpg_max_rate_kbps: 0,
            rpg_min_rate_kbps: 100_000,
            rpg_min_dec_fac: 0,
            rpg_gd: 11,
            rate_to_set_on_first_cnp_kbps: 0,
            rate_reduce_monitor_period: Duration::ZERO,
            dce_tcp_g: 1020,
            dce_tcp_rtt: Duration::from_micros(55),
            initial_alpha_value: 1024,
            clamp_tgt_rate: true,
            clamp_tgt_rate_after_time_inc: false,
            rate_granularity_kbps: 1_000,
        }
    }

    /// The same control loop for a link `s` times slower than the one
    /// these values were made for (`s` = reference rate / line rate; the
    /// lab's 100 Mbit/s against 25 Gbit/s is s = 250): every time × s
    /// (rate-increase timer, monitor period, α decay period), every rate ÷
    /// s (the increase steps, the maximum, the first-CNP rate, the
    /// granularity; a nonzero one stays at least 1 kb/s) but the minimum
    /// rate. `rpg_min_rate_kbps` keeps its value: it is the floor that
    /// keeps a cut QP within its transport's timers (the local ACK
    /// timeout, IBA 9.7.6.1.3), which are the application's and are not
    /// scaled; 1 Mb/s ÷ 250 would send one 1 KB frame in 2 s, past any
    /// ACK timeout perftest sets, and end the QP in retry-exceeded. The
    /// byte counter
    /// keeps its bytes: at 1/s of the rate they take s times as long, as
    /// the timer does. g, F, the cut's gd and floor are ratios and stay.
    /// `s` ≤ 0 or not finite leaves the values as they are.
    pub fn scaled(&self, s: f64) -> DcqcnParams {
        if !(s.is_finite() && s > 0.0) {
            return *self;
        }
        let rate = |kbps: u32| match kbps {
            0 => 0,
            r => ((r as f64 / s).round() as u32).max(1),
        };
        DcqcnParams {
            rpg_time_reset: scale_time(self.rpg_time_reset, s),
            rate_reduce_monitor_period: scale_time(self.rate_reduce_monitor_period, s),
            dce_tcp_rtt: scale_time(self.dce_tcp_rtt, s),
            rpg_ai_rate_kbps: rate(self.rpg_ai_rate_kbps),
            rpg_hai_rate_kbps: rate(self.rpg_hai_rate_kbps),
            rpg_max_rate_kbps: rate(self.rpg_max_rate_kbps),
            rate_to_set_on_first_cnp_kbps: rate(self.rate_to_set_on_first_cnp_kbps),
            rate_granularity_kbps: rate(self.rate_granularity_kbps),
            ..*self
        }
    }

    /// The α gain g (0..=1).
    pub fn g(&self) -> f64 {
        (1024 - self.dce_tcp_g.min(1024)) as f64 / 1024.0
    }

    /// α on the first CNP (0..=1).
    pub fn initial_alpha(&self) -> f64 {
        self.initial_alpha_value.min(1024) as f64 / 1024.0
    }
}

/// `d` × `s`, saturating (to the ns).
pub fn scale_time(d: Duration, s: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * s).unwrap_or(Duration::MAX)
}

impl Default for DcqcnParams {
    fn default() -> DcqcnParams {
        DcqcnParams::nvidia()
    }
}

/// RP counters (mlx5 names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RpCounters {
    /// CNPs the RP processed to throttle a QP.
    pub rp_cnp_handled: u64,
    /// CNPs received while the RP is disabled (mlx5: "verify that ECN is
    /// enabled on the adapter").
    pub rp_cnp_ignored: u64,
}

impl RpCounters {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
        ]
        .into_iter()
    }

    pub fn add(&mut self, o: &RpCounters) {
        self.rp_cnp_handled += o.rp_cnp_handled;
        self.rp_cnp_ignored += o.rp_cnp_ignored;
    }
}

/// The phase a rate increase was taken in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    FastRecovery,
    AdditiveIncrease,
    HyperIncrease,
}

/// What triggered a rate increase.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Trigger {
    Timer,
    ByteCounter,
}

/// One rate increase, as it happened (for tests and traces).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Increase {
    pub at: Instant,
    pub trigger: Trigger,
    pub phase: Phase,
    /// Timer and byte-counter stages after the event (T, BC).
    pub stages: (u32, u32),
    /// RT after the event, bits per second.
    pub target_bps: f64,
    /// RC after the event, bits per second.
    pub current_bps: f64,
}

/// What a reaction point's state is at one instant: what tools plot as
/// "DCQCN state per QP over time". Taking it changes nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RpState {
    /// DCQCN is on for the QP (else CNPs are ignored and nothing is paced).
    pub enabled: bool,
    /// A rate limiter is allocated: a CNP arrived and RC has not come back
    /// to the maximum yet.
    pub limited: bool,
    /// The current rate RC, bits per second (the line rate when unlimited).
    pub rc_bps: u64,
    /// The target rate RT, bits per second (the line rate when unlimited).
    pub rt_bps: u64,
    /// α at the instant (its decay included); while unlimited, the α the
    /// next first CNP starts from.
    pub alpha: f64,
    /// Rate cuts so far (a first-CNP rate counts as one).
    pub cuts: u64,
    /// CNPs the RP processed (`rp_cnp_handled`).
    pub cnps_handled: u64,
}

/// The DCQCN state of one QP.
#[derive(Clone, Debug)]
pub struct ReactionPoint {
    p: DcqcnParams,
    line_bps: f64,
    enabled: bool,
    /// A rate limiter is allocated (a CNP arrived and RC has not come back).
    limited: bool,
    rc: f64,
    rt: f64,
    /// α as of `last_cut`; decays lazily from there.
    alpha: f64,
    t_stage: u32,
    bc_stage: u32,
    byte_count: u64,
    timer_increased: bool,
    byte_increased: bool,
    last_cut: Instant,
    next_increase: Option<Instant>,
    pending_cut: Option<Instant>,
    last_increase: Option<Increase>,
    cuts: u64,
    counters: RpCounters,
}

impl ReactionPoint {
    /// An RP for a QP on a port of `line_rate_bps`, enabled and unlimited.
    pub fn new(params: DcqcnParams, line_rate_bps: u64) -> ReactionPoint {
        let line = line_rate_bps.max(1) as f64;
        ReactionPoint {
            p: params,
            line_bps: line,
            enabled: true,
            limited: false,
            rc: line,
            rt: line,
            alpha: params.initial_alpha(),
            t_stage: 0,
            bc_stage: 0,
            byte_count: 0,
            timer_increased: false,
            byte_increased: false,
            last_cut: Instant::ZERO,
            next_increase: None,
            pending_cut: None,
            last_increase: None,
            cuts: 0,
            counters: RpCounters::default(),
        }
    }

    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// New knobs; they apply from the next event on.
    pub fn set_params(&mut self, params: DcqcnParams) {
        self.p = params;
    }

    /// Enables or disables DCQCN for this QP (mlx5 `roce_rp/enable/<prio>`).
    /// Disabling releases the rate limiter; CNPs are then counted in
    /// `rp_cnp_ignored`.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
        if !on {
            self.release();
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether a rate limiter is allocated.
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// The rate the QP may send at now (RC, or the line rate when
    /// unlimited), bits per second.
    pub fn current_rate(&self) -> f64 {
        if self.limited {
            self.rc
        } else {
            self.line_bps
        }
    }

    /// [`Self::current_rate`] rounded to whole bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.current_rate().round() as u64
    }

    /// The target rate RT, bits per second.
    pub fn target_rate(&self) -> f64 {
        if self.limited {
            self.rt
        } else {
            self.line_bps
        }
    }

    /// α at time `now` (decays included); before the first CNP, the α the
    /// first CNP will use.
    pub fn alpha(&self, now: Instant) -> f64 {
        if !self.limited {
            return self.p.initial_alpha();
        }
        self.alpha_at(now)
    }

    /// The most recent rate increase.
    pub fn last_increase(&self) -> Option<Increase> {
        self.last_increase
    }

    /// Rate cuts so far.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    pub fn counters(&self) -> &RpCounters {
        &self.counters
    }

    /// The state at `now` ([`RpState`]): RC, RT, α with its decay to
    /// `now`, and the cut and CNP counts. Read-only; `now` only ages α.
    pub fn state(&self, now: Instant) -> RpState {
        RpState {
            enabled: self.enabled,
            limited: self.limited,
            rc_bps: self.rate_bps(),
            rt_bps: self.target_rate().round() as u64,
            alpha: self.alpha(now),
            cuts: self.cuts,
            cnps_handled: self.counters.rp_cnp_handled,
        }
    }

    fn max_rate(&self) -> f64 {
        let m = self.p.rpg_max_rate_kbps as f64 * KBPS;
        if m > 0.0 && m < self.line_bps {
            m
        } else {
            self.line_bps
        }
    }

    fn min_rate(&self) -> f64 {
        (self.p.rpg_min_rate_kbps as f64 * KBPS).min(self.max_rate())
    }

    fn clamp(&self, r: f64) -> f64 {
        r.clamp(self.min_rate(), self.max_rate())
    }

    fn alpha_at(&self, now: Instant) -> f64 {
        let k = self.p.dce_tcp_rtt.as_nanos() as u64;
        if k == 0 {
            return self.alpha;
        }
        let periods = now.as_nanos().saturating_sub(self.last_cut.as_nanos()) / k;
        if periods == 0 {
            return self.alpha;
        }
        // powi, not powf: the same bits on every platform.
        let keep = 1.0 - self.p.g();
        self.alpha * keep.powi(periods.min(i32::MAX as u64) as i32)
    }

    /// A CNP for this QP arrived at `now`.
    pub fn handle_cnp(&mut self, now: Instant) {
        if !self.enabled {
            self.counters.rp_cnp_ignored += 1;
            return;
        }
        self.counters.rp_cnp_handled += 1;
        if !self.limited {
            // First CNP: allocate a rate limiter at the line rate.
            self.limited = true;
            self.alpha = self.p.initial_alpha();
            self.last_cut = now;
            self.rc = self.line_bps;
            self.rt = self.line_bps;
            let first = self.p.rate_to_set_on_first_cnp_kbps as f64 * KBPS;
            if first > 0.0 {
                self.rc = self.clamp(first);
                self.rt = self.rc;
                self.restart(now);
            } else {
                self.cut(now, true);
            }
            return;
        }
        let period = self.p.rate_reduce_monitor_period;
        if !period.is_zero() && now < self.last_cut + period {
            // At most one cut per monitor period: fold this CNP into a cut
            // at the start of the next period.
            if self.pending_cut.is_none() {
                self.pending_cut = Some(self.last_cut + period);
            }
            return;
        }
        self.cut(now, false);
    }

    fn cut(&mut self, now: Instant, first: bool) {
        let alpha = self.alpha_at(now);
        if first
            || self.p.clamp_tgt_rate
            || self.byte_increased
            || (self.p.clamp_tgt_rate_after_time_inc && self.timer_increased)
        {
            self.rt = self.rc;
        }
        let gd = (self.p.rpg_gd as i32).clamp(0, 62);
        let factor = (alpha * 1024.0 / 2f64.powi(gd)).clamp(0.0, 1.0);
        let floor = self.p.rpg_min_dec_fac.min(100) as f64 / 100.0;
        let cut = (self.rc * (1.0 - factor)).max(self.rc * floor);
        self.rc = self.clamp(cut);
        self.rt = self.clamp(self.rt);
        let g = self.p.g();
        self.alpha = (1.0 - g) * alpha + g;
        self.restart(now);
    }

    /// A cut (or first-CNP rate) happened at `now`: restart the increase
    /// machinery and the α decay.
    fn restart(&mut self, now: Instant) {
        self.last_cut = now;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.byte_count = 0;
        self.timer_increased = false;
        self.byte_increased = false;
        self.pending_cut = None;
        self.next_increase = self.increase_period().map(|d| now + d);
        self.cuts += 1;
    }

    fn increase_period(&self) -> Option<Duration> {
        let d = self.p.rpg_time_reset;
        (!d.is_zero()).then(|| d.max(Duration::from_micros(1)))
    }

    fn release(&mut self) {
        self.limited = false;
        self.rc = self.line_bps;
        self.rt = self.line_bps;
        self.next_increase = None;
        self.pending_cut = None;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.byte_count = 0;
        self.timer_increased = false;
        self.byte_increased = false;
    }

    fn increase(&mut self, at: Instant, trigger: Trigger) {
        let f = self.p.rpg_threshold;
        let timer_on = !self.p.rpg_time_reset.is_zero();
        let byte_on = self.p.rpg_byte_reset > 0;
        let (t, bc) = (self.t_stage, self.bc_stage);
        let (hi, lo) = match (timer_on, byte_on) {
            (true, false) => (t, t),
            (false, true) => (bc, bc),
            _ => (t.max(bc), t.min(bc)),
        };
        let phase = if hi < f {
            Phase::FastRecovery
        } else if lo > f {
            Phase::HyperIncrease
        } else {
            Phase::AdditiveIncrease
        };
        match phase {
            Phase::FastRecovery => {}
            Phase::AdditiveIncrease => self.rt += self.p.rpg_ai_rate_kbps as f64 * KBPS,
            Phase::HyperIncrease => {
                self.rt += (lo - f) as f64 * self.p.rpg_hai_rate_kbps as f64 * KBPS;
            }
        }
        self.rt = self.clamp(self.rt);
        self.rc = self.clamp((self.rt + self.rc) / 2.0);
        self.last_increase = Some(Increase {
            at,
            trigger,
            phase,
            stages: (t, bc),
            target_bps: self.rt,
            current_bps: self.rc,
        });
        // Back at the maximum (to the limiter's granularity): release.
        if self.rc + self.p.rate_granularity_kbps.max(1) as f64 * KBPS >= self.max_rate() {
            self.release();
        }
    }

    /// `bytes` of this QP went on the wire at `now` (feeds the byte counter).
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        let reset = self.p.rpg_byte_reset;
        if !self.limited || reset == 0 {
            return;
        }
        self.byte_count += bytes;
        while self.limited && self.byte_count >= reset {
            self.byte_count -= reset;
            self.bc_stage = self.bc_stage.saturating_add(1);
            self.byte_increased = true;
            self.increase(now, Trigger::ByteCounter);
        }
    }

    /// The next instant [`Self::handle_timeout`] has work: the rate-increase
    /// timer or a folded cut. (α decay needs no wake-up.)
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.limited {
            return None;
        }
        Instant::earliest(self.pending_cut, self.next_increase)
    }

    /// Runs every timer event due at or before `now`, each at its own
    /// deadline, in time order.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(at) = self.poll_timeout() {
            if at > now {
                break;
            }
            if self.pending_cut == Some(at) {
                self.cut(at, false);
                continue;
            }
            self.t_stage = self.t_stage.saturating_add(1);
            self.timer_increased = true;
            self.next_increase = self.increase_period().map(|d| at + d);
            self.increase(at, Trigger::Timer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    fn us(n: u64) -> Instant {
        Instant::from_nanos(n * 1000)
    }

    #[test]
    fn presets() {
        let n = DcqcnParams::nvidia();
        assert_eq!(DcqcnParams::default(), n);
        assert_eq!(n.g(), 5.0 / 1024.0);
        assert_eq!(n.initial_alpha(), 1023.0 / 1024.0);
        let s = DcqcnParams::sigcomm15();
        assert_eq!(s.g(), 1.0 / 256.0);
        assert_eq!(s.initial_alpha(), 1.0);
    }

    #[test]
    fn unlimited_until_first_cnp_and_disabled_ignores() {
        let mut rp = ReactionPoint::new(DcqcnParams::nvidia(), G100);
        assert_eq!(rp.rate_bps(), G100);
        assert_eq!(rp.poll_timeout(), None);
        rp.on_sent(us(1), 1 << 30);
        assert_eq!(rp.rate_bps(), G100);
        rp.set_enabled(false);
        rp.handle_cnp(us(2));
        assert_eq!(rp.rate_bps(), G100);
        assert_eq!(rp.counters().rp_cnp_ignored, 1);
        assert_eq!(rp.counters().rp_cnp_handled, 0);
        rp.set_enabled(true);
        rp.handle_cnp(us(3));
        assert!(rp.is_limited());
        assert_eq!(rp.counters().rp_cnp_handled, 1);
        // NVIDIA: α = 1023/1024, so the cut is a hair more than half.
        let expect = 1e11 * (1.0 - 1023.0 / 2048.0);
        assert!((rp.current_rate() - expect).abs() < 1.0);
    }

    #[test]
    fn scaling_stretches_times_and_shrinks_rates_by_s() {
        // NVIDIA's values made for 25 Gbit/s, run at 100 Mbit/s: s = 250
        let p = DcqcnParams::nvidia().scaled(250.0);
        assert_eq!(p.rpg_time_reset, Duration::from_millis(75));
        assert_eq!(p.rate_reduce_monitor_period, Duration::from_millis(1));
        assert_eq!(p.dce_tcp_rtt, Duration::from_micros(250));
        assert_eq!(p.rpg_ai_rate_kbps, 20);
        assert_eq!(p.rpg_hai_rate_kbps, 200);
        // the floor stays: transport timers are not scaled
        assert_eq!(p.rpg_min_rate_kbps, 1_000);
        assert_eq!(p.rate_granularity_kbps, 4);
        assert_eq!(
            (p.rpg_max_rate_kbps, p.rate_to_set_on_first_cnp_kbps),
            (0, 0)
        );
        // bytes and ratios stay
        let n = DcqcnParams::nvidia();
        assert_eq!(
            (p.rpg_byte_reset, p.rpg_threshold, p.dce_tcp_g, p.rpg_gd),
            (n.rpg_byte_reset, n.rpg_threshold, n.dce_tcp_g, n.rpg_gd)
        );
        // a tiny rate keeps 1 kb/s; s = 1 and nonsense change nothing
        let q = DcqcnParams {
            rpg_ai_rate_kbps: 3,
            ..n
        };
        assert_eq!(q.scaled(1000.0).rpg_ai_rate_kbps, 1);
        for s in [1.0, 0.0, -2.0, f64::NAN, f64::INFINITY] {
            assert_eq!(n.scaled(s), n, "{s}");
        }
        let np = crate::cc::NpParams::nvidia().scaled(250.0);
        assert_eq!(np.min_time_between_cnps, Duration::from_millis(1));
    }

    #[test]
    fn a_scaled_rp_runs_the_same_loop_s_times_slower() {
        // the same CNP and timer sequence at 25 Gbit/s and at 100 Mbit/s
        // with s = 250 and times × 250: every rate ÷ 250
        let fast = DcqcnParams::nvidia();
        let mut a = ReactionPoint::new(fast, 25_000_000_000);
        let mut b = ReactionPoint::new(fast.scaled(250.0), 100_000_000);
        for k in 0..3 {
            a.handle_cnp(us(k * 10));
            b.handle_cnp(us(k * 10 * 250));
        }
        for k in 1..=40 {
            a.handle_timeout(us(30 + k * 300));
            b.handle_timeout(us((30 + k * 300) * 250));
            assert_eq!(a.is_limited(), b.is_limited(), "step {k}");
            let (ra, rb) = (a.current_rate(), b.current_rate() * 250.0);
            assert!((ra - rb).abs() <= ra * 1e-9, "step {k}: {ra} against {rb}");
        }
    }

    #[test]
    fn first_cnp_rate_and_degenerate_knobs_do_not_panic() {
        let p = DcqcnParams {
            rate_to_set_on_first_cnp_kbps: 10_000_000,
            ..DcqcnParams::nvidia()
        };
        let mut rp = ReactionPoint::new(p, G100);
        rp.handle_cnp(us(0));
        assert_eq!(rp.rate_bps(), 10_000_000_000);
        assert_eq!(rp.target_rate(), 1e10);
        let wild = DcqcnParams {
            rpg_gd: 255,
            rpg_min_dec_fac: 255,
            dce_tcp_g: u16::MAX,
            initial_alpha_value: u16::MAX,
            rpg_min_rate_kbps: u32::MAX,
            rpg_max_rate_kbps: 1,
            rpg_threshold: 0,
            ..DcqcnParams::nvidia()
        };
        let mut rp = ReactionPoint::new(wild, 0);
        for i in 0..100 {
            rp.handle_cnp(us(i));
            rp.on_sent(us(i), 1 << 20);
            rp.handle_timeout(us(i * 1000));
        }
        assert!(rp.current_rate() >= 1.0);
    }
}
