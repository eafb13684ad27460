//! DCQCN on the fabric simulator
//! (`sim::fabric`): two senders into one receiver through a switch whose
//! egress port towards the receiver is the bottleneck (2 × 40 Gb/s into
//! 40 Gb/s), RED/ECN marking with the SIGCOMM'15 setting (Kmin 5 KB, Kmax
//! 200 KB, Pmax 1 %), a 1 MB buffer per egress port.
//!
//! Flow 0 starts alone at t = 0 and runs at line rate; flow 1 joins at
//! 5 ms. With DCQCN (SIGCOMM'15 values) the two converge to within 10 % of
//! the fair share (measured over 200..300 ms), the queue stays near the
//! marking thresholds, nothing is dropped. Without DCQCN the queue hits the
//! buffer limit and drops (PFC off), or the switch pauses the senders again
//! and again (PFC on); the tests assert the difference.
//!
//! The main run writes `dcqcn-fabric.csv` (rates, goodputs and queues every
//! 10 µs) into Cargo's test temp dir and regenerates the committed plot
//! `docs/img/dcqcn-fabric.svg` from it (rewritten only when it changes; the
//! run is deterministic).

use nic::Instant;
use sim::fabric::{Fabric, FabricConfig, FlowSpec, Red, Sample, SwitchPfc, DATA_OVERHEAD};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

const JOIN_MS: u64 = 5;
const END_MS: u64 = 300;
const WINDOW_MS: u64 = 100;
const BOTTLENECK: usize = 2;

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn config(seed: u64) -> FabricConfig {
    FabricConfig {
        seed,
        sample_every: Duration::from_micros(10),
        ..FabricConfig::new(3)
    }
}

fn flows() -> [FlowSpec; 2] {
    [
        FlowSpec::endless(0, BOTTLENECK, Instant::ZERO),
        FlowSpec::endless(1, BOTTLENECK, ms(JOIN_MS)),
    ]
}

/// PFC at the switch: XOFF at 300 KB of one ingress port's priority-3
/// backlog, XON at 250 KB (two senders can hold at most ~620 KB with
/// headroom, inside the 1 MB buffer).
fn pfc() -> SwitchPfc {
    SwitchPfc {
        xoff_bytes: 300_000,
        xon_bytes: 250_000,
        quanta: 0xFFFF,
    }
}

struct Outcome {
    /// Goodput of each flow over the last `WINDOW_MS`, bits per second.
    goodput: [f64; 2],
    fair: f64,
    /// Bottleneck queue: max over the run, and max / mean once both flows
    /// have run for 1 ms.
    max_queue: u64,
    steady_max_queue: u64,
    steady_mean_queue: f64,
    drops: u64,
    /// PFC frames the switch sent (priority 3, both sender ports).
    switch_pauses: u64,
    /// PFC frames the senders received (priority 3).
    host_pauses: u64,
}

fn run(cfg: FabricConfig, end_ms: u64, window_ms: u64) -> (Fabric, Outcome) {
    let mut f = Fabric::new(cfg, &flows());
    f.run_until(ms(end_ms - window_ms));
    let before = [f.delivered(0), f.delivered(1)];
    f.run_until(ms(end_ms));
    let secs = window_ms as f64 / 1e3;
    let goodput = [0, 1].map(|i| (f.delivered(i) - before[i]) as f64 * 8.0 / secs);
    let steady: Vec<u64> = f
        .samples()
        .iter()
        .filter(|s| s.at >= ms(JOIN_MS + 1))
        .map(|s| s.queue_bytes[BOTTLENECK])
        .collect();
    let o = Outcome {
        goodput,
        fair: cfg.link_goodput_bps() / 2.0,
        max_queue: f.max_queue_bytes(BOTTLENECK),
        steady_max_queue: steady.iter().copied().max().unwrap_or(0),
        steady_mean_queue: steady.iter().sum::<u64>() as f64 / steady.len().max(1) as f64,
        drops: f.drops(),
        switch_pauses: (0..2).map(|p| f.switch_pfc_counters(p).tx_pause[3]).sum(),
        host_pauses: (0..2)
            .map(|h| f.host_counters(h).get("rx_prio3_pause").unwrap())
            .sum(),
    };
    (f, o)
}

#[track_caller]
fn assert_fair(o: &Outcome, what: &str) {
    for (i, g) in o.goodput.iter().enumerate() {
        let off = (g / o.fair - 1.0).abs();
        assert!(
            off <= 0.10,
            "{what}: flow {i} at {:.2} Gb/s, {:.1} % from the fair share {:.2} Gb/s",
            g / 1e9,
            off * 100.0,
            o.fair / 1e9
        );
    }
}

#[track_caller]
fn assert_bounded_queue(o: &Outcome, red: Red, what: &str) {
    // Near the marking thresholds: between Kmin and Kmax on average, never
    // above Kmax once converged, and within 25 % of Kmax even while the
    // second flow joins at line rate. Far from the 1 MB buffer.
    assert!(
        o.steady_mean_queue > red.kmin_bytes as f64 && o.steady_mean_queue < red.kmax_bytes as f64,
        "{what}: mean queue {:.0} B",
        o.steady_mean_queue
    );
    assert!(
        o.steady_max_queue <= red.kmax_bytes,
        "{what}: {}",
        o.steady_max_queue
    );
    assert!(
        o.max_queue <= red.kmax_bytes * 5 / 4,
        "{what}: {}",
        o.max_queue
    );
    assert_eq!(o.drops, 0, "{what}: drops");
}

#[test]
fn dcqcn_two_flows_converge_to_fair_share_queue_bounded_nothing_dropped() {
    let cfg = config(1);
    let red = cfg.switch.red.unwrap();
    let (f, o) = run(cfg, END_MS, WINDOW_MS);
    println!(
        "DCQCN (SIGCOMM'15 values), 2 flows into 1 at 40 Gb/s: goodput over {}..{END_MS} ms \
         {:.2} / {:.2} Gb/s (fair {:.2}: {:+.1} % / {:+.1} %); queue mean {:.1} KB, max {:.1} KB \
         after the join, {:.1} KB overall; drops {}; CE marks {}; CNPs {}",
        END_MS - WINDOW_MS,
        o.goodput[0] / 1e9,
        o.goodput[1] / 1e9,
        o.fair / 1e9,
        (o.goodput[0] / o.fair - 1.0) * 100.0,
        (o.goodput[1] / o.fair - 1.0) * 100.0,
        o.steady_mean_queue / 1e3,
        o.steady_max_queue as f64 / 1e3,
        o.max_queue as f64 / 1e3,
        o.drops,
        f.ce_marked(),
        f.host_counters(BOTTLENECK).np.np_cnp_sent,
    );
    assert_fair(&o, "DCQCN");
    assert_bounded_queue(&o, red, "DCQCN");
    // The loop actually ran: marks, CNPs at the receiver, cuts at both senders.
    let np = f.host_counters(BOTTLENECK).np;
    assert!(np.np_ecn_marked_roce_packets >= np.np_cnp_sent && np.np_cnp_sent > 100);
    for h in 0..2 {
        let rp = f.host_counters(h).rp;
        assert!(rp.rp_cnp_handled > 50 && rp.rp_cnp_ignored == 0, "{rp:?}");
    }
    // The whole link is used.
    let total = o.goodput[0] + o.goodput[1];
    assert!(total > 0.95 * cfg.link_goodput_bps(), "{total}");

    // The CSV, and the plot made from it.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let csv = dir.join("dcqcn-fabric.csv");
    let mut bytes = Vec::new();
    f.write_csv(&mut bytes).unwrap();
    std::fs::write(&csv, &bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "time_us,flow0_rate_gbps,flow0_goodput_gbps,flow1_rate_gbps,flow1_goodput_gbps,\
         port0_queue_kb,port1_queue_kb,port2_queue_kb"
    );
    assert_eq!(lines.count(), f.samples().len());
    assert_eq!(f.samples().len() as u64, END_MS * 100 + 1);
    println!("CSV: {}", csv.display());
    let svg = plot(f.samples(), o.fair, red, cfg.link_bps as f64);
    write_if_changed(&docs_plot(), svg.as_bytes());
}

#[test]
fn dcqcn_fairness_does_not_depend_on_the_seed() {
    let cfgs = [2, 3, 4].map(|seed| FabricConfig {
        sample_every: Duration::from_micros(100),
        ..config(seed)
    });
    let outcomes = std::thread::scope(|s| {
        let runs = cfgs.map(|cfg| s.spawn(move || run(cfg, END_MS, WINDOW_MS).1));
        runs.map(|h| h.join().unwrap())
    });
    for (cfg, o) in cfgs.iter().zip(&outcomes) {
        assert_fair(o, &format!("seed {}", cfg.seed));
        assert_eq!(o.drops, 0);
        assert!(o.max_queue <= cfg.switch.red.unwrap().kmax_bytes * 5 / 4);
    }
}

#[test]
fn without_dcqcn_the_queue_hits_the_buffer_and_drops() {
    let on_cfg = config(1);
    let off_cfg = FabricConfig {
        dcqcn: None,
        ..config(1)
    };
    let buffer = off_cfg.switch.buffer_bytes;
    let (_, on) = run(on_cfg, 20, 10);
    let (off_fabric, off) = run(off_cfg, 20, 10);
    println!(
        "20 ms, PFC off: DCQCN on: max queue {:.1} KB, drops {}; DCQCN off: max queue {:.1} KB, \
         drops {}",
        on.max_queue as f64 / 1e3,
        on.drops,
        off.max_queue as f64 / 1e3,
        off.drops
    );
    assert_eq!(on.drops, 0);
    assert!(on.max_queue <= on_cfg.switch.red.unwrap().kmax_bytes * 5 / 4);
    assert!(off.max_queue > buffer - (on_cfg.payload_bytes + DATA_OVERHEAD));
    // Half of what the two senders offer for 15 ms cannot fit.
    assert!(off.drops > 10_000, "{}", off.drops);
    // The receiver still sent CNPs; the disabled RPs ignored them.
    assert!(off_fabric.host_counters(BOTTLENECK).np.np_cnp_sent > 0);
    let ignored: u64 = (0..2)
        .map(|h| off_fabric.host_counters(h).rp.rp_cnp_ignored)
        .sum();
    assert!(ignored > 0);
}

#[test]
fn without_dcqcn_pfc_pauses_pile_up() {
    let with_pfc = |c: FabricConfig| FabricConfig {
        switch: sim::fabric::SwitchConfig {
            pfc: Some(pfc()),
            ..c.switch
        },
        ..c
    };
    let on_cfg = with_pfc(config(1));
    let off_cfg = with_pfc(FabricConfig {
        dcqcn: None,
        ..config(1)
    });
    let (_, on) = run(on_cfg, 20, 10);
    let (off_fabric, off) = run(off_cfg, 20, 10);
    println!(
        "20 ms, PFC on: DCQCN on: {} pause frames, max queue {:.1} KB; DCQCN off: {} pause \
         frames, max queue {:.1} KB, senders paused {} / {} µs",
        on.switch_pauses,
        on.max_queue as f64 / 1e3,
        off.switch_pauses,
        off.max_queue as f64 / 1e3,
        off_fabric
            .host_counters(0)
            .get("rx_prio3_pause_duration")
            .unwrap(),
        off_fabric
            .host_counters(1)
            .get("rx_prio3_pause_duration")
            .unwrap(),
    );
    // Lossless either way ...
    assert_eq!((on.drops, off.drops), (0, 0));
    // ... but without DCQCN only because the switch keeps pausing.
    assert_eq!(on.switch_pauses, 0);
    assert!(off.switch_pauses > 500, "{}", off.switch_pauses);
    assert_eq!(off.host_pauses, off.switch_pauses);
    assert!(off.max_queue > 2 * pfc().xon_bytes);
    // Paused, the two senders share the link: PFC is fair here, just slow
    // to signal and spreading.
    assert_fair(&off, "PFC without DCQCN");
}

// ---------------------------------------------------------------------------
// The plot: plain SVG, from the samples.

fn docs_plot() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/img/dcqcn-fabric.svg")
}

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return;
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension(format!("svg.tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    println!("wrote {}", path.display());
}

/// Two panels over time: goodput (1 ms bins, solid) and DCQCN rate (thin)
/// of both flows with the fair share; the bottleneck queue (mean and max
/// per 1 ms) with Kmin and Kmax.
fn plot(samples: &[Sample], fair_bps: f64, red: Red, link_bps: f64) -> String {
    const W: f64 = 900.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 50.0;
    const TOP1: f64 = 50.0;
    const H1: f64 = 220.0;
    const TOP2: f64 = 330.0;
    const H2: f64 = 180.0;
    const H: f64 = 570.0;
    let end_ms = samples.last().map_or(1.0, |s| s.at.as_nanos() as f64 / 1e6);
    let x = |t_ms: f64| LEFT + (W - LEFT - RIGHT) * t_ms / end_ms;
    let ymax1 = link_bps / 1e9 * 1.05;
    let y1 = |gbps: f64| TOP1 + H1 * (1.0 - gbps / ymax1);
    let ymax2 = red.kmax_bytes as f64 / 1e3 * 1.25;
    let y2 = |kb: f64| TOP2 + H2 * (1.0 - (kb / ymax2).min(1.0));

    // 1 ms bins (the first sample, at t = 0, has no goodput)
    let bins = end_ms.round() as usize;
    let mut acc = vec![([0.0f64; 2], [0.0f64; 2], 0.0f64, 0.0f64, 0u32); bins];
    for s in samples.iter().skip(1) {
        let t = s.at.as_nanos() as f64 / 1e6;
        let b = ((t - 1e-9).floor() as usize).min(bins - 1);
        let a = &mut acc[b];
        for i in 0..2 {
            a.0[i] += s.goodput_bps[i] / 1e9;
            a.1[i] += s.rate_bps[i] as f64 / 1e9;
        }
        let q = s.queue_bytes[BOTTLENECK] as f64 / 1e3;
        a.2 += q;
        a.3 = a.3.max(q);
        a.4 += 1;
    }
    let path = |pts: &mut dyn Iterator<Item = (f64, f64)>| {
        let mut d = String::new();
        for (k, (px, py)) in pts.enumerate() {
            let _ = write!(d, "{}{px:.1},{py:.1}", if k == 0 { "M" } else { " L" });
        }
        d
    };
    let mid = |b: usize| b as f64 + 0.5;
    let colors = ["#1f77b4", "#d62728"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">DCQCN on the \
         softrnic fabric simulator: 2 senders into 1 receiver, 40 Gb/s, flow 1 joins at \
         {JOIN_MS} ms</text>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"38\" fill=\"#555\">SIGCOMM'15 parameters; RED/ECN Kmin {} KB, \
         Kmax {} KB, Pmax {} %; 1 MB buffer, PFC off; sim/tests/cc_fabric.rs</text>",
        red.kmin_bytes / 1000,
        red.kmax_bytes / 1000,
        red.pmax * 100.0
    );
    // frames, grids, ticks
    for (top, h, ymax, unit, step) in [
        (TOP1, H1, ymax1, "Gb/s", 10.0),
        (TOP2, H2, ymax2, "queue KB", 50.0),
    ] {
        let _ = writeln!(
            s,
            "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{h}\" fill=\"none\" \
             stroke=\"#333\"/>",
            W - LEFT - RIGHT
        );
        let mut v = 0.0;
        while v <= ymax {
            let py = top + h * (1.0 - v / ymax);
            let _ = writeln!(
                s,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
                W - RIGHT,
                LEFT - 6.0,
                py + 4.0
            );
            v += step;
        }
        let _ = writeln!(
            s,
            "<text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">{unit}</text>",
            top + h / 2.0
        );
    }
    let mut t = 0.0;
    while t <= end_ms + 1e-9 {
        for (top, h) in [(TOP1, H1), (TOP2, H2)] {
            let _ = writeln!(
                s,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{top}\" y2=\"{1:.1}\" stroke=\"#eee\"/>\
                 <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{t}</text>",
                x(t),
                top + h,
                top + h + 15.0
            );
        }
        t += 25.0;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (ms)</text>",
        (LEFT + W - RIGHT) / 2.0,
        TOP2 + H2 + 32.0
    );
    // top panel
    let fy = y1(fair_bps / 1e9);
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{fy:.1}\" y2=\"{fy:.1}\" stroke=\"#2ca02c\" \
         stroke-dasharray=\"6,4\"/>",
        W - RIGHT
    );
    for (i, color) in colors.iter().enumerate() {
        let rate = path(
            &mut acc
                .iter()
                .enumerate()
                .filter(|(_, a)| a.4 > 0)
                .map(|(b, a)| (x(mid(b)), y1(a.1[i] / a.4 as f64))),
        );
        let good = path(
            &mut acc
                .iter()
                .enumerate()
                .filter(|(_, a)| a.4 > 0)
                .map(|(b, a)| (x(mid(b)), y1(a.0[i] / a.4 as f64))),
        );
        let _ = writeln!(
            s,
            "<path d=\"{rate}\" fill=\"none\" stroke=\"{0}\" stroke-width=\"0.8\" \
             stroke-opacity=\"0.6\"/>\n<path d=\"{good}\" fill=\"none\" stroke=\"{0}\" \
             stroke-width=\"1.8\"/>",
            color
        );
    }
    for (i, label) in ["flow 0 goodput (1 ms)", "flow 1 goodput (1 ms)"]
        .iter()
        .enumerate()
    {
        let ly = TOP1 + 16.0 + 16.0 * i as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" x2=\"{1:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{2}\" \
             stroke-width=\"2\"/><text x=\"{3:.1}\" y=\"{4:.1}\">{label}</text>",
            W - RIGHT - 260.0,
            W - RIGHT - 235.0,
            colors[i],
            W - RIGHT - 230.0,
            ly + 4.0
        );
    }
    let ly = TOP1 + 48.0;
    let _ = writeln!(
        s,
        "<line x1=\"{0:.1}\" x2=\"{1:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"#777\" \
         stroke-width=\"0.8\"/><text x=\"{2:.1}\" y=\"{3:.1}\">thin: DCQCN rate RC</text>",
        W - RIGHT - 260.0,
        W - RIGHT - 235.0,
        W - RIGHT - 230.0,
        ly + 4.0
    );
    let ly = TOP1 + 64.0;
    let _ = writeln!(
        s,
        "<line x1=\"{0:.1}\" x2=\"{1:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"#2ca02c\" \
         stroke-dasharray=\"6,4\"/><text x=\"{2:.1}\" y=\"{3:.1}\">fair share {4:.2} Gb/s</text>",
        W - RIGHT - 260.0,
        W - RIGHT - 235.0,
        W - RIGHT - 230.0,
        ly + 4.0,
        fair_bps / 1e9
    );
    // bottom panel
    for (k, label) in [(red.kmin_bytes, "Kmin"), (red.kmax_bytes, "Kmax")] {
        let py = y2(k as f64 / 1e3);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ff7f0e\" \
             stroke-dasharray=\"6,4\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#ff7f0e\">{label}</text>",
            W - RIGHT,
            W - RIGHT + 4.0,
            py + 4.0
        );
    }
    let qmax = path(
        &mut acc
            .iter()
            .enumerate()
            .filter(|(_, a)| a.4 > 0)
            .map(|(b, a)| (x(mid(b)), y2(a.3))),
    );
    let qmean = path(
        &mut acc
            .iter()
            .enumerate()
            .filter(|(_, a)| a.4 > 0)
            .map(|(b, a)| (x(mid(b)), y2(a.2 / a.4 as f64))),
    );
    let _ = writeln!(
        s,
        "<path d=\"{qmax}\" fill=\"none\" stroke=\"#9467bd\" stroke-width=\"0.8\" \
         stroke-opacity=\"0.7\"/>\n<path d=\"{qmean}\" fill=\"none\" stroke=\"#4b2a7b\" \
         stroke-width=\"1.6\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#4b2a7b\">bottleneck queue: mean (bold) and max \
         (thin) per 1 ms</text>",
        LEFT + 8.0,
        TOP2 + 16.0
    );
    s.push_str("</svg>\n");
    s
}
