//! `rnic plot`: an SVG line plot of a CSV of `series,x,y` rows, one line
//! per series, x on a log2 axis (message sizes 2 B ... 8 MiB) or linear
//! (time), y linear or log10. The comparison benchmark
//! (benches/compare-all.sh) draws its bandwidth and latency curves with
//! it, `rnic lab` its rates, queues and counters over time.

use super::plot::{escape, nice_step, ticks, trim, Frame};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One line of the plot: its name and its points, in the CSV's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A CSV that cannot be plotted.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("line {line}: want `series,x,y` with numeric x > 0 and y, got {text:?}")]
    Row { line: usize, text: String },
    #[error("no data rows (want a header `series,x,y` and one row a point)")]
    Empty,
}

impl crate::Failure for CsvError {}

/// Reads `series,x,y` rows (a first line that does not parse is a header;
/// blank lines and `#` comments are skipped; a `-` or `nan` y is a point
/// not measured and left out), series in the order they first appear.
pub fn parse_csv(text: &str) -> Result<Vec<Series>, CsvError> {
    let mut out: Vec<Series> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = l.split(',').map(str::trim).collect();
        let bad = || CsvError::Row {
            line: i + 1,
            text: raw.to_string(),
        };
        if cols.len() != 3 {
            return Err(bad());
        }
        let x = cols[1].parse::<f64>().ok().filter(|x| *x > 0.0);
        let Some(x) = x else {
            if i == 0 {
                continue; // the header
            }
            return Err(bad());
        };
        if matches!(cols[2], "-" | "nan" | "") {
            continue;
        }
        let y = cols[2]
            .parse::<f64>()
            .ok()
            .filter(|y| y.is_finite())
            .ok_or_else(bad)?;
        match out.iter_mut().find(|s| s.name == cols[0]) {
            Some(s) => s.points.push((x, y)),
            None => out.push(Series {
                name: cols[0].to_string(),
                points: vec![(x, y)],
            }),
        }
    }
    if out.is_empty() {
        return Err(CsvError::Empty);
    }
    Ok(out)
}

/// Reads the CSV at `path` (see [`parse_csv`]).
pub fn read_csv(path: &Path) -> Result<Vec<Series>, CsvError> {
    let text = std::fs::read_to_string(path).map_err(|source| CsvError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_csv(&text)
}

/// The titles and scale of a plot.
pub struct Labels<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
    /// y on a log10 axis (else linear from 0).
    pub log_y: bool,
    /// x on a log2 axis (message sizes; else linear from 0: time).
    pub log_x: bool,
}

const F: Frame = Frame {
    w: 960.0,
    h: 540.0,
    l: 80.0,
    r: 260.0,
    t: 50.0,
    b: 60.0,
};
const W: f64 = F.w;
const H: f64 = F.h;
const L: f64 = F.l;
const R: f64 = F.r;
const T: f64 = F.t;
const B: f64 = F.b;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

/// The y axis: its range in axis units, the grid step, and whether log10.
struct YAxis {
    lo: f64,
    hi: f64,
    step: f64,
    log: bool,
}

impl YAxis {
    fn new(series: &[Series], log: bool) -> YAxis {
        let ys = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let max = ys().fold(0.0f64, f64::max).max(1e-9);
        if log {
            let min = ys().filter(|&y| y > 0.0).fold(max, f64::min);
            let lo = min.log10().floor();
            YAxis {
                lo,
                hi: max.log10().ceil().max(lo + 1.0),
                step: 1.0,
                log,
            }
        } else {
            // all zero: a unit axis, not one of nanounits all labelled 0
            let max = if max > 1e-9 { max } else { 1.0 };
            let step = nice_step(max / 5.0);
            YAxis {
                lo: 0.0,
                hi: (max / step).ceil() * step,
                step,
                log,
            }
        }
    }

    fn unit(&self, y: f64) -> f64 {
        if self.log {
            y.max(1e-12).log10()
        } else {
            y
        }
    }

    fn value(&self, k: f64) -> f64 {
        if self.log {
            10f64.powf(k)
        } else {
            k
        }
    }
}

/// The x axis: log2 from the smallest to the largest x (ticks at powers
/// of two), or linear from 0 to the largest x (ticks at a nice step).
struct XAxis {
    lo: f64,
    hi: f64,
    step: f64,
    log: bool,
}

impl XAxis {
    fn new(series: &[Series], log: bool) -> XAxis {
        let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        if log {
            let lo = xs().fold(f64::MAX, f64::min).log2().floor();
            let hi = xs().fold(0.0f64, f64::max).log2().ceil().max(lo + 1.0);
            XAxis {
                lo,
                hi,
                step: ((hi - lo) / 12.0).ceil().max(1.0),
                log,
            }
        } else {
            let max = xs().fold(0.0f64, f64::max);
            let max = if max > 1e-9 { max } else { 1.0 };
            let step = nice_step(max / 10.0);
            XAxis {
                lo: 0.0,
                hi: (max / step).ceil() * step,
                step,
                log,
            }
        }
    }

    /// Where `x` falls, in axis units.
    fn unit(&self, x: f64) -> f64 {
        if self.log {
            x.log2()
        } else {
            x
        }
    }

    /// The tick label at `k` axis units.
    fn label(&self, k: f64) -> String {
        if self.log {
            size_label(2f64.powf(k))
        } else {
            trim(k)
        }
    }
}

/// A size on the x axis: 2, 1K, 64K, 8M (powers of two).
fn size_label(x: f64) -> String {
    let v = x as u64;
    match v {
        v if v >= 1 << 20 && v % (1 << 20) == 0 => format!("{}M", v >> 20),
        v if v >= 1 << 10 && v % (1 << 10) == 0 => format!("{}K", v >> 10),
        v => v.to_string(),
    }
}

/// The SVG: one polyline (with a dot at each point) per series and a
/// legend naming each; x on log2 from the smallest to the largest x, or
/// linear from 0. A point that is not finite (perftest prints `inf` for
/// a time it could not measure) has no place and is left out, as is one
/// of y <= 0 on a log y axis.
pub fn xy_svg(labels: &Labels, series: &[Series]) -> String {
    let placed =
        |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite() && (!labels.log_y || p.1 > 0.0);
    let kept: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().copied().filter(placed).collect(),
        })
        .collect();
    let series = &kept[..];
    let xa = XAxis::new(series, labels.log_x);
    let y = YAxis::new(series, labels.log_y);
    let pu = |k: f64| L + (k - xa.lo) / (xa.hi - xa.lo) * (W - L - R);
    let px = |x: f64| pu(xa.unit(x));
    let py = |v: f64| H - B - (y.unit(v) - y.lo) / (y.hi - y.lo) * (H - T - B);
    let mut s = F.open(labels.title);
    for k in ticks(xa.lo, xa.hi, xa.step) {
        let x = pu(k);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{T}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            H - B,
            H - B + 18.0,
            xa.label(k)
        );
    }
    for k in ticks(y.lo, y.hi, y.step) {
        let yy = py(y.value(k));
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 6.0,
            yy + 4.0,
            trim(y.value(k))
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{L}\" y=\"{T}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
         <text transform=\"translate(22 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}{}</text>",
        W - L - R,
        H - T - B,
        (W - R + L) / 2.0,
        H - 18.0,
        escape(labels.x),
        (H - B + T) / 2.0,
        escape(labels.y),
        if y.log { " (log scale)" } else { "" }
    );
    for (i, ser) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = ser
            .points
            .iter()
            .map(|&(x, v)| format!("{:.1},{:.1}", px(x), py(v)))
            .collect();
        let _ = writeln!(
            s,
            "<g class=\"series\" data-name=\"{}\"><polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
            escape(&ser.name),
            pts.join(" ")
        );
        for p in &pts {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                s,
                "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\" fill=\"{c}\"/>"
            );
        }
        let ly = T + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            "</g>\n<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            W - R + 12.0,
            W - R + 34.0,
            W - R + 40.0,
            ly + 4.0,
            escape(&ser.name)
        );
    }
    s += "</svg>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "series,x,y\n# comment\nrxe,2,1.5\nsoftrnic,2,3\nrxe,65536,40\nsoftrnic,65536,-\nsoftrnic,8388608,90\n";

    #[test]
    fn csv_groups_points_by_series_in_order() {
        let s = parse_csv(CSV).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "rxe");
        assert_eq!(s[0].points, vec![(2.0, 1.5), (65536.0, 40.0)]);
        assert_eq!(s[1].points, vec![(2.0, 3.0), (8388608.0, 90.0)]);
    }

    #[test]
    fn csv_rejects_a_bad_row_with_its_line() {
        let e = parse_csv("series,x,y\nrxe,2,1\nrxe,two,1\n").unwrap_err();
        assert!(matches!(e, CsvError::Row { line: 3, .. }), "{e}");
        assert!(matches!(parse_csv("series,x,y\n"), Err(CsvError::Empty)));
    }

    #[test]
    fn svg_draws_every_series_with_every_point() {
        for log_y in [false, true] {
            let series = parse_csv(CSV).unwrap();
            let labels = Labels {
                title: "bw <&>",
                x: "message size [B]",
                y: "MB/s",
                log_y,
                log_x: true,
            };
            let svg = xy_svg(&labels, &series);
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
            assert_eq!(svg.matches("<polyline").count(), 2);
            assert_eq!(svg.matches("<circle").count(), 4);
            assert!(svg.contains("data-name=\"rxe\"") && svg.contains("data-name=\"softrnic\""));
            assert!(svg.contains(">2</text>") && svg.contains(">8M</text>"));
            assert!(svg.contains("bw &lt;&amp;&gt;"));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
        }
    }

    #[test]
    fn a_linear_x_axis_starts_at_zero_with_plain_ticks() {
        let series = parse_csv("series,x,y\nh1,0.1,5\nh1,0.2,7\nh1,2.5,6\n").unwrap();
        let labels = Labels {
            title: "rate",
            x: "time [s]",
            y: "Mbit/s",
            log_y: false,
            log_x: false,
        };
        let svg = xy_svg(&labels, &series);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(
            svg.contains(">0</text>") && svg.contains(">2.5</text>"),
            "{svg}"
        );
        assert!(!svg.contains(">1K</text>") && !svg.contains("NaN"));
    }

    #[test]
    fn an_all_zero_series_gets_a_unit_axis() {
        let series = parse_csv("series,x,y\nmarks,0.1,0\nmarks,0.2,0\n").unwrap();
        let labels = untitled(false, false);
        let svg = xy_svg(&labels, &series);
        assert!(
            svg.contains(">1</text>") && svg.contains(">0.2</text>"),
            "{svg}"
        );
        assert_eq!(svg.matches(">0</text>").count(), 2, "{svg}");
    }

    /// Labels without text, on the axes' scales given.
    fn untitled(log_x: bool, log_y: bool) -> Labels<'static> {
        Labels {
            title: "",
            x: "",
            y: "",
            log_y,
            log_x,
        }
    }

    #[test]
    fn points_that_are_not_finite_are_left_out_and_huge_ones_bound_the_grid() {
        let series = vec![Series {
            name: "rtt".into(),
            points: vec![
                (1.0, 10.0),
                (2.0, f64::INFINITY),
                (3.0, f64::NAN),
                (f64::INFINITY, 5.0),
                (4.0, 20.0),
            ],
        }];
        for (log_x, log_y) in [(false, false), (true, true)] {
            let labels = untitled(log_x, log_y);
            let svg = xy_svg(&labels, &series);
            assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
            assert!(!svg.contains("inf") && !svg.contains("NaN"), "{svg}");
        }
        // a finite value whose axis would end past f64::MAX
        let huge = vec![Series {
            name: "big".into(),
            points: vec![(1.0, f64::MAX), (2.0, 1.0)],
        }];
        let labels = untitled(false, false);
        let svg = xy_svg(&labels, &huge);
        let most = 2 * (super::super::plot::MAX_TICKS + 1);
        assert!(svg.matches("<line").count() <= most, "{svg}");
    }

    #[test]
    fn log_y_leaves_out_zero_points() {
        let series = parse_csv("series,x,y\na,2,0\na,4,10\na,8,100\n").unwrap();
        let labels = |log_y| untitled(true, log_y);
        assert_eq!(xy_svg(&labels(true), &series).matches("<circle").count(), 2);
        assert_eq!(
            xy_svg(&labels(false), &series).matches("<circle").count(),
            3
        );
    }
}
