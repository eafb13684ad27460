//! The SVG plot of `--plot`: latency against percentile, one line per
//! message size.

use crate::perf::SizeResult;
use std::fmt::Write as _;

/// The plot's size and margins (left, right, top, bottom), in pixels.
const W: f64 = 900.0;
const H: f64 = 520.0;
const L: f64 = 80.0;
const R: f64 = 170.0;
const T: f64 = 50.0;
const B: f64 = 60.0;

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line of the plot: a message size and its (x, latency in usec)
/// points.
type Series = (usize, Vec<(f64, f64)>);

/// The axes: x from 0 to `xmax`, y from `ylo` to `yhi` in steps of
/// `step`, on a log scale when `log` (then in decades).
struct Axes {
    xmax: f64,
    ylo: f64,
    yhi: f64,
    step: f64,
    log: bool,
}

impl Axes {
    fn of(series: &[Series]) -> Axes {
        let xmax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .fold(2.0f64, f64::max)
            .ceil()
            .min(5.0);
        let ys = || series.iter().flat_map(|(_, p)| p.iter().map(|x| x.1));
        let ymax_raw = ys().fold(0.0f64, f64::max).max(0.001);
        let ymin_raw = ys()
            .filter(|&y| y > 0.0)
            .fold(f64::MAX, f64::min)
            .min(ymax_raw);
        // a log scale when the sizes' latencies span more than two decades
        let log = ymax_raw / ymin_raw > 100.0;
        let (ylo, yhi, step) = if log {
            (
                ymin_raw.log10().floor(),
                ymax_raw.log10().ceil().max(ymin_raw.log10().floor() + 1.0),
                1.0,
            )
        } else {
            let step = nice_step(ymax_raw / 5.0);
            (0.0, (ymax_raw / step).ceil() * step, step)
        };
        Axes {
            xmax,
            ylo,
            yhi,
            step,
            log,
        }
    }

    fn px(&self, x: f64) -> f64 {
        L + x / self.xmax * (W - L - R)
    }

    fn py(&self, y: f64) -> f64 {
        let yv = if self.log { y.max(1e-9).log10() } else { y };
        H - B - (yv - self.ylo) / (self.yhi - self.ylo) * (H - T - B)
    }
}

/// A latency distribution plot: latency against percentile, the
/// percentile axis stretched as HdrHistogram's plotter does (by
/// 1/(1-percentile)), one line per message size.
pub fn svg(title: &str, results: &[SizeResult]) -> String {
    // x: log10(1/(1-q)) from 0 (0 %) to 5 (99.999 %)
    let series: Vec<Series> = results
        .iter()
        .map(|r| {
            let pts = r
                .hist
                .iter_quantiles(5)
                .map(|v| {
                    let q = v.quantile_iterated_to().min(0.99999);
                    (
                        (1.0 / (1.0 - q)).log10(),
                        v.value_iterated_to() as f64 / 1000.0,
                    )
                })
                .collect();
            (r.bytes, pts)
        })
        .collect();
    let axes = Axes::of(&series);
    let frame = Frame {
        w: W,
        h: H,
        l: L,
        r: R,
        t: T,
        b: B,
    };
    let mut s = frame.open(title);
    grid(&mut s, &axes);
    lines(&mut s, &series, &axes);
    s += "</svg>\n";
    s
}

/// The grid lines with their labels, the frame, and the axis titles.
fn grid(s: &mut String, axes: &Axes) {
    for k in ticks(0.0, axes.xmax, 1.0) {
        let x = axes.px(k);
        let label = match k as u32 {
            0 => "0%".to_string(),
            n => {
                let p = 100.0 - 100.0 / 10f64.powi(n as i32);
                format!("{}%", trim(p))
            }
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            H - B,
            H - B + 18.0
        );
    }
    for k in ticks(axes.ylo, axes.yhi, axes.step) {
        let value = if axes.log { 10f64.powf(k) } else { k };
        let yy = axes.py(value);
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 6.0,
            yy + 4.0,
            trim(value)
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{L}\" y=\"{T}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"black\"/>",
        W - L - R,
        H - T - B
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile</text>",
        (W - R + L) / 2.0,
        H - 18.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(22 {:.1}) rotate(-90)\" text-anchor=\"middle\">latency [usec]{}</text>",
        (H - B + T) / 2.0,
        if axes.log { " (log scale)" } else { "" }
    );
}

/// One polyline per message size, with its legend entry.
fn lines(s: &mut String, series: &[Series], axes: &Axes) {
    for (i, (bytes, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", axes.px(x.min(axes.xmax)), axes.py(*y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let ly = T + 10.0 + (H - T - B - 10.0) / series.len().max(1) as f64 * i as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{bytes} bytes</text>",
            W - R + 15.0,
            W - R + 40.0,
            W - R + 46.0,
            ly + 4.0
        );
    }
}

/// A plot's size and margins (pixels): width, height, left, right, top,
/// bottom.
#[derive(Clone, Copy)]
pub(super) struct Frame {
    pub w: f64,
    pub h: f64,
    pub l: f64,
    pub r: f64,
    pub t: f64,
    pub b: f64,
}

impl Frame {
    /// The SVG's opening: its size, a white background and the title.
    pub(super) fn open(&self, title: &str) -> String {
        let Frame { w, h, l, .. } = *self;
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
             <text x=\"{l}\" y=\"24\" font-size=\"13\">{}</text>\n",
            escape(title)
        )
    }
}

/// Most grid lines an axis draws (a range too wide for its step, as from
/// a value near `f64::MAX`, draws this many).
pub(super) const MAX_TICKS: usize = 200;

/// The grid positions from `lo` to `hi` by `step`, in axis units: none
/// for a range or step that is not finite.
pub(super) fn ticks(lo: f64, hi: f64, step: f64) -> impl Iterator<Item = f64> {
    let n = if lo.is_finite() && hi.is_finite() && step.is_finite() && step > 0.0 {
        ((hi - lo) / step + 1e-6)
            .floor()
            .clamp(0.0, MAX_TICKS as f64) as usize
            + 1
    } else {
        0
    };
    (0..n).map(move |i| lo + i as f64 * step)
}

pub(super) fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let n = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * mag
}

pub(super) fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
