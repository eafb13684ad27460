//! The DCQCN reaction point against trajectories
//! computed by hand (the numbers in the tables below were worked out on
//! paper from the update rules in `nic::cc::dcqcn`, not by running it).
//!
//! Setting, unless a test says otherwise: the SIGCOMM'15 preset on a
//! 40 Gb/s port (g = 1/256, α starts at 1, F = 5, R_AI = 40 Mb/s,
//! R_HAI = 200 Mb/s, timer 55 µs, byte counter 10 MB, RT = RC on cuts).
//! A first CNP at t = 0 halves 40 → 20 Gb/s (RT 40); a second at 10 µs sets
//! RT = 20 and halves RC to 10 Gb/s (α is still exactly 1: (1−g)·1 + g = 1,
//! and no α period has elapsed). Increases start from there.

use nic::cc::{DcqcnParams, Phase, ReactionPoint, Trigger};
use nic::Instant;
use std::time::Duration;

const G40: u64 = 40_000_000_000;
const MB10: u64 = 10_000_000;

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000)
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() < 1.0 // bits per second
}

#[track_caller]
fn assert_rate(rp: &ReactionPoint, rc_gbps: f64, rt_gbps: f64) {
    let (rc, rt) = (rp.current_rate(), rp.target_rate());
    assert!(
        close(rc, rc_gbps * 1e9) && close(rt, rt_gbps * 1e9),
        "RC {} RT {} Gb/s, expected RC {rc_gbps} RT {rt_gbps}",
        rc / 1e9,
        rt / 1e9
    );
}

/// The common start: cuts at 0 and 10 µs → RC 10, RT 20 Gb/s, α = 1.
fn two_cuts(p: DcqcnParams) -> ReactionPoint {
    let mut rp = ReactionPoint::new(p, G40);
    rp.handle_cnp(us(0));
    assert_rate(&rp, 20.0, 40.0);
    rp.handle_cnp(us(10));
    assert_rate(&rp, 10.0, 20.0);
    assert_eq!(rp.alpha(us(10)), 1.0);
    assert_eq!(rp.cuts(), 2);
    rp
}

/// (phase, RC Gb/s, RT Gb/s) after each increase event, by hand:
/// FR: RC = (RT+RC)/2; AI: RT += 0.04 first; HI: RT += i·0.2, i = count − F.
const ONE_COUNTER: [(Phase, f64, f64); 8] = [
    (Phase::FastRecovery, 15.0, 20.0),         // (20+10)/2
    (Phase::FastRecovery, 17.5, 20.0),         // (20+15)/2
    (Phase::FastRecovery, 18.75, 20.0),        // (20+17.5)/2
    (Phase::FastRecovery, 19.375, 20.0),       // (20+18.75)/2
    (Phase::AdditiveIncrease, 19.7075, 20.04), // count 5 = F: (20.04+19.375)/2
    (Phase::HyperIncrease, 19.97375, 20.24),   // i=1: (20.24+19.7075)/2
    (Phase::HyperIncrease, 20.306875, 20.64),  // i=2: (20.64+19.97375)/2
    (Phase::HyperIncrease, 20.7734375, 21.24), // i=3: (21.24+20.306875)/2
];

#[test]
fn first_cnp_at_line_rate_with_alpha_one_halves() {
    let mut rp = ReactionPoint::new(DcqcnParams::sigcomm15(), G40);
    assert!(!rp.is_limited());
    assert_eq!(rp.rate_bps(), G40);
    rp.handle_cnp(us(3));
    assert_eq!(rp.rate_bps(), 20_000_000_000);
    assert_eq!(rp.target_rate(), 40e9);
    assert_eq!(rp.alpha(us(3)), 1.0);
    assert_eq!(rp.counters().rp_cnp_handled, 1);
    // Same with NVIDIA's knobs when α starts at exactly 1 (1024/1024).
    let p = DcqcnParams {
        initial_alpha_value: 1024,
        ..DcqcnParams::nvidia()
    };
    let mut rp = ReactionPoint::new(p, 100_000_000_000);
    rp.handle_cnp(us(0));
    assert_eq!(rp.rate_bps(), 50_000_000_000);
}

#[test]
fn timer_only_fast_recovery_additive_hyper() {
    let p = DcqcnParams {
        rpg_byte_reset: 0,
        ..DcqcnParams::sigcomm15()
    };
    let mut rp = two_cuts(p);
    // Bytes do nothing with the byte counter off.
    rp.on_sent(us(11), 100 * MB10);
    assert_rate(&rp, 10.0, 20.0);
    for (k, &(phase, rc, rt)) in ONE_COUNTER.iter().enumerate() {
        let at = us(10 + 55 * (k as u64 + 1)); // 65, 120, 175, ... µs
        assert_eq!(rp.poll_timeout(), Some(at));
        rp.handle_timeout(Instant::from_nanos(at.as_nanos() - 1));
        assert_eq!(
            rp.last_increase().map(|i| i.at),
            (k > 0).then(|| us(10 + 55 * k as u64))
        );
        rp.handle_timeout(at);
        let inc = rp.last_increase().unwrap();
        assert_eq!(
            (inc.trigger, inc.phase, inc.stages),
            (Trigger::Timer, phase, (k as u32 + 1, 0))
        );
        assert_rate(&rp, rc, rt);
    }
}

#[test]
fn byte_counter_only_fast_recovery_additive_hyper() {
    let p = DcqcnParams {
        rpg_time_reset: Duration::ZERO,
        ..DcqcnParams::sigcomm15()
    };
    let mut rp = two_cuts(p);
    assert_eq!(rp.poll_timeout(), None, "no timer");
    rp.handle_timeout(us(1_000_000));
    assert_rate(&rp, 10.0, 20.0);
    for (k, &(phase, rc, rt)) in ONE_COUNTER.iter().enumerate() {
        let t = us(20 + k as u64);
        rp.on_sent(t, MB10 - 1);
        assert_eq!(
            rp.last_increase().map(|i| i.stages.1),
            (k > 0).then_some(k as u32)
        );
        rp.on_sent(t, 1);
        let inc = rp.last_increase().unwrap();
        assert_eq!(
            (inc.trigger, inc.phase, inc.stages),
            (Trigger::ByteCounter, phase, (0, k as u32 + 1))
        );
        assert_rate(&rp, rc, rt);
    }
}

/// (µs, trigger, (T, BC) after, phase, RC Gb/s, RT Gb/s)
type Step = (u64, Trigger, (u32, u32), Phase, f64, f64);

#[test]
fn timer_and_byte_counter_together() {
    use Phase::*;
    let mut rp = two_cuts(DcqcnParams::sigcomm15());
    // Timer events at 65 + 55k µs; byte events whenever 10 MB went out.
    // Phase by max(T, BC) < 5 (FR), min(T, BC) > 5 (HI, i = min − 5), else AI.
    #[rustfmt::skip]
    let script: [Step; 14] = [
        (65,  Trigger::Timer,       (1, 0), FastRecovery,     15.0,             20.0),
        (70,  Trigger::ByteCounter, (1, 1), FastRecovery,     17.5,             20.0),
        (120, Trigger::Timer,       (2, 1), FastRecovery,     18.75,            20.0),
        (125, Trigger::ByteCounter, (2, 2), FastRecovery,     19.375,           20.0),
        (175, Trigger::Timer,       (3, 2), FastRecovery,     19.6875,          20.0),
        (230, Trigger::Timer,       (4, 2), FastRecovery,     19.84375,         20.0),
        (285, Trigger::Timer,       (5, 2), AdditiveIncrease, 19.941875,        20.04), // max = F
        (340, Trigger::Timer,       (6, 2), AdditiveIncrease, 20.0109375,       20.08), // min 2 ≤ F
        (341, Trigger::ByteCounter, (6, 3), AdditiveIncrease, 20.06546875,      20.12),
        (342, Trigger::ByteCounter, (6, 4), AdditiveIncrease, 20.112734375,     20.16),
        (343, Trigger::ByteCounter, (6, 5), AdditiveIncrease, 20.1563671875,    20.20), // min = F
        (344, Trigger::ByteCounter, (6, 6), HyperIncrease,    20.27818359375,   20.40), // i = 1
        (395, Trigger::Timer,       (7, 6), HyperIncrease,    20.439091796875,  20.60), // i = 1
        (396, Trigger::ByteCounter, (7, 7), HyperIncrease,    20.7195458984375, 21.00), // i = 2
    ];
    for (at, trigger, stages, phase, rc, rt) in script {
        let now = us(at);
        rp.handle_timeout(now);
        if trigger == Trigger::ByteCounter {
            rp.on_sent(now, MB10);
        }
        let inc = rp.last_increase().unwrap();
        assert_eq!(
            (inc.at, inc.trigger, inc.stages, inc.phase),
            (now, trigger, stages, phase),
            "at {at} µs"
        );
        assert_rate(&rp, rc, rt);
    }
}

#[test]
fn alpha_decays_without_cnps() {
    // Counters off, so only α moves.
    let p = DcqcnParams {
        rpg_time_reset: Duration::ZERO,
        rpg_byte_reset: 0,
        ..DcqcnParams::sigcomm15()
    };
    let keep: f64 = 255.0 / 256.0;
    let mut rp = ReactionPoint::new(p, G40);
    rp.handle_cnp(us(0));
    assert_eq!(rp.alpha(us(0)), 1.0);
    assert_eq!(rp.alpha(Instant::from_nanos(54_999)), 1.0);
    assert_eq!(rp.alpha(us(55)), keep);
    assert!((rp.alpha(us(549)) - keep.powi(9)).abs() < 1e-15);
    let a10 = keep.powi(10);
    assert!((rp.alpha(us(550)) - a10).abs() < 1e-15);
    // A CNP at 550 µs cuts with the decayed α, then raises it by g.
    rp.handle_cnp(us(550));
    assert_rate(&rp, 10.0 * (2.0 - a10), 20.0); // 20·(1 − α/2)
    let a = (1.0 - 1.0 / 256.0) * a10 + 1.0 / 256.0;
    assert!((rp.alpha(us(550)) - a).abs() < 1e-15);
    // ... and the decay restarts from the cut.
    assert!((rp.alpha(us(604)) - a).abs() < 1e-15);
    assert!((rp.alpha(us(605)) - a * keep).abs() < 1e-15);

    // NVIDIA: g = 5/1024 every 1 µs, starting from 1023/1024.
    let mut rp = ReactionPoint::new(DcqcnParams::nvidia(), G40);
    rp.handle_cnp(us(0));
    let a0 = (1019.0 / 1024.0) * (1023.0 / 1024.0) + 5.0 / 1024.0;
    assert!((rp.alpha(us(0)) - a0).abs() < 1e-15);
    let want = a0 * (1019.0f64 / 1024.0).powi(100);
    assert!((rp.alpha(us(100)) - want).abs() < 1e-12);
}

#[test]
fn clamping_to_min_and_max_rate() {
    // Repeated cuts stop at rpg_min_rate_kbps (100 Mb/s): 40 G / 2^9 = 78 Mb/s.
    let p = DcqcnParams {
        rpg_time_reset: Duration::ZERO,
        rpg_byte_reset: 0,
        ..DcqcnParams::sigcomm15()
    };
    let mut rp = ReactionPoint::new(p, G40);
    for k in 0..20 {
        rp.handle_cnp(us(k));
        assert!(rp.rate_bps() >= 100_000_000);
    }
    assert_eq!(rp.rate_bps(), 100_000_000);

    // rpg_max_rate_kbps 30 Gb/s on a 40 Gb/s port: RT never above it; when RC
    // reaches it, the limiter is released and the QP runs at line rate.
    let p = DcqcnParams {
        rpg_max_rate_kbps: 30_000_000,
        ..DcqcnParams::sigcomm15()
    };
    let mut rp = ReactionPoint::new(p, G40);
    rp.handle_cnp(us(0));
    assert_rate(&rp, 20.0, 30.0);
    let mut t = us(0);
    let mut events = 0;
    while rp.is_limited() {
        t = rp.poll_timeout().unwrap();
        rp.handle_timeout(t);
        events += 1;
        if rp.is_limited() {
            assert!(rp.target_rate() <= 30e9 && rp.current_rate() <= 30e9);
        }
    }
    // FR halves the 10 Gb/s gap each event: below 1 Mb/s after 14 events.
    assert_eq!(events, 14);
    assert_eq!(t, us(55 * 14));
    assert_eq!(rp.rate_bps(), G40);
    assert_eq!(rp.poll_timeout(), None);
    // The next CNP starts over from the line rate.
    rp.handle_cnp(t);
    assert_rate(&rp, 20.0, 30.0);

    // rpg_min_dec_fac bounds a single cut: 75 % must remain.
    let p = DcqcnParams {
        rpg_min_dec_fac: 75,
        ..DcqcnParams::sigcomm15()
    };
    let mut rp = ReactionPoint::new(p, G40);
    rp.handle_cnp(us(0));
    assert_rate(&rp, 30.0, 40.0);
}

#[test]
fn target_clamping_knobs() {
    // NVIDIA's semantics. α is held at 1 (decay period 1 s) so that every
    // cut halves; each case starts with a first CNP: RC 20, RT 40.
    let base = DcqcnParams {
        clamp_tgt_rate: false,
        clamp_tgt_rate_after_time_inc: false,
        dce_tcp_rtt: Duration::from_secs(1),
        ..DcqcnParams::sigcomm15()
    };
    let start = |p: DcqcnParams| {
        let mut rp = ReactionPoint::new(p, G40);
        rp.handle_cnp(us(0));
        assert_rate(&rp, 20.0, 40.0);
        rp
    };
    // Neither knob, a timer increase: the cut leaves RT alone.
    let mut rp = start(base);
    rp.handle_timeout(us(55)); // FR: RC 30
    assert_rate(&rp, 30.0, 40.0);
    rp.handle_cnp(us(60));
    assert_rate(&rp, 15.0, 40.0);
    // Neither knob, a byte-counter increase: RT = RC.
    let mut rp = start(base);
    rp.on_sent(us(10), MB10); // FR: RC 30
    rp.handle_cnp(us(20));
    assert_rate(&rp, 15.0, 30.0);
    // clamp_tgt_rate_after_time_inc: a timer increase clamps too ...
    let mut rp = start(DcqcnParams {
        clamp_tgt_rate_after_time_inc: true,
        ..base
    });
    rp.handle_timeout(us(55));
    rp.handle_cnp(us(60));
    assert_rate(&rp, 15.0, 30.0);
    // ... but with no increase since the last cut RT stays.
    rp.handle_cnp(us(70));
    assert_rate(&rp, 7.5, 30.0);
    // clamp_tgt_rate (the paper): always.
    let mut rp = start(DcqcnParams {
        clamp_tgt_rate: true,
        ..base
    });
    rp.handle_cnp(us(1));
    assert_rate(&rp, 10.0, 20.0);
}

#[test]
fn at_most_one_cut_per_monitor_period() {
    // NVIDIA: rate_reduce_monitor_period 4 µs.
    let g = 5.0 / 1024.0;
    let mut rp = ReactionPoint::new(DcqcnParams::nvidia(), 100_000_000_000);
    rp.handle_cnp(us(0));
    let a0: f64 = 1023.0 / 1024.0;
    let r1 = 100e9 * (1.0 - a0 / 2.0);
    let a1 = (1.0 - g) * a0 + g;
    assert!(close(rp.current_rate(), r1));
    // CNPs at 1 and 2 µs: handled, folded into one cut at 4 µs.
    rp.handle_cnp(us(1));
    rp.handle_cnp(us(2));
    assert!(close(rp.current_rate(), r1));
    assert_eq!(rp.cuts(), 1);
    assert_eq!(rp.poll_timeout(), Some(us(4)));
    rp.handle_timeout(Instant::from_nanos(3_999));
    assert_eq!(rp.cuts(), 1);
    rp.handle_timeout(us(4));
    assert_eq!(rp.cuts(), 2);
    let a1_at4 = a1 * (1.0 - g).powi(4);
    let r2 = r1 * (1.0 - a1_at4 / 2.0);
    assert!(close(rp.current_rate(), r2));
    // Next period starts at the cut: a CNP at 8 µs cuts at once ...
    rp.handle_cnp(us(8));
    assert_eq!(rp.cuts(), 3);
    // ... one at 9 µs waits for 12 µs.
    rp.handle_cnp(us(9));
    assert_eq!(rp.cuts(), 3);
    assert_eq!(rp.poll_timeout(), Some(us(12)));
    rp.handle_timeout(us(50));
    assert_eq!(rp.cuts(), 4);
    assert_eq!(rp.counters().rp_cnp_handled, 5);
    assert_eq!(rp.counters().rp_cnp_ignored, 0);
    // Without a monitor period every CNP cuts.
    let mut rp = ReactionPoint::new(DcqcnParams::sigcomm15(), G40);
    for k in 0..5 {
        rp.handle_cnp(Instant::from_nanos(k));
    }
    assert_eq!(rp.cuts(), 5);
    // Disabled: ignored, counted.
    rp.set_enabled(false);
    rp.handle_cnp(us(1));
    assert_eq!(rp.counters().rp_cnp_ignored, 1);
    assert_eq!(rp.rate_bps(), G40);
}

/// The state snapshot (`ReactionPoint::state`) with NVIDIA's knobs on a
/// 100 Gb/s port, by hand: α₀ = 1023/1024, so the first cut leaves
/// RC = 100·(1 − 1023/2048) = 50.048828125 Gb/s with RT = 100 (RT = RC
/// before the cut), and α₁ = (1019/1024)·(1023/1024) + 5/1024 =
/// 1047557/1048576, which decays by 1019/1024 per µs (dce_tcp_rtt). The
/// first timer event (300 µs, T = 1 = F, BC = 0) is additive increase: RT
/// stays at the line rate, RC = (100 + 50.048828125)/2 Gb/s. RT = line
/// rate makes RC halve its distance to it on every event: within 16 events
/// (4.8 ms) it is within 1 Mb/s and the limiter is released.
#[test]
fn the_state_snapshot_shows_the_cut_alpha_and_the_recovery() {
    const G100: u64 = 100_000_000_000;
    let mut rp = ReactionPoint::new(DcqcnParams::nvidia(), G100);
    let before = rp.state(us(0));
    assert!(before.enabled && !before.limited);
    assert_eq!((before.rc_bps, before.rt_bps), (G100, G100));
    assert_eq!(before.alpha, 1023.0 / 1024.0);
    assert_eq!((before.cuts, before.cnps_handled), (0, 0));

    rp.handle_cnp(us(0));
    let cut = rp.state(us(0));
    assert!(cut.limited);
    assert_eq!((cut.rc_bps, cut.rt_bps), (50_048_828_125, G100));
    let alpha1 = 1_047_557.0 / 1_048_576.0;
    assert!((cut.alpha - alpha1).abs() < 1e-15, "α {}", cut.alpha);
    assert_eq!((cut.cuts, cut.cnps_handled), (1, 1));

    // reading ages α only; it changes nothing
    let later = rp.state(us(10));
    let decayed = alpha1 * (1019.0f64 / 1024.0).powi(10);
    assert!((later.alpha - decayed).abs() < 1e-15, "α {}", later.alpha);
    assert_eq!((later.rc_bps, later.rt_bps), (cut.rc_bps, cut.rt_bps));
    assert_eq!(rp.state(us(0)), cut);

    rp.handle_timeout(us(300));
    let up = rp.state(us(300));
    assert!(up.limited);
    assert_eq!((up.rc_bps, up.rt_bps), (75_024_414_063, G100));

    rp.handle_timeout(us(300 * 16));
    let back = rp.state(us(300 * 16));
    assert!(!back.limited, "{back:?}");
    assert_eq!((back.rc_bps, back.rt_bps), (G100, G100));
    assert_eq!((back.cuts, back.cnps_handled), (1, 1));
}
