//! A one-line progress bar on stderr for runs longer than a couple of
//! seconds. It draws only on a terminal and only once the run has lasted
//! [`SHOW_AFTER`], so short runs and redirected output stay clean.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A run shorter than this shows no progress bar.
pub const SHOW_AFTER: Duration = Duration::from_secs(2);

pub struct Progress {
    enabled: bool,
    start: Instant,
    last_draw: Option<Instant>,
    drawn: bool,
    label: String,
    /// The current stage covers [base, base + span) of the whole run.
    base: f64,
    span: f64,
}

impl Progress {
    /// A bar that draws when stderr is a terminal and `wanted` holds.
    pub fn new(wanted: bool) -> Progress {
        Progress {
            enabled: wanted && std::io::stderr().is_terminal(),
            start: Instant::now(),
            last_draw: None,
            drawn: false,
            label: String::new(),
            base: 0.0,
            span: 1.0,
        }
    }

    /// A bar that never draws.
    pub fn hidden() -> Progress {
        let mut p = Progress::new(false);
        p.enabled = false;
        p
    }

    /// Starts a stage covering `span` of the run from `base` (fractions).
    pub fn stage(&mut self, label: impl Into<String>, base: f64, span: f64) {
        self.label = label.into();
        self.base = base;
        self.span = span;
    }

    /// Reports the current stage as `frac` done.
    pub fn set(&mut self, frac: f64) {
        if !self.enabled || self.start.elapsed() < SHOW_AFTER {
            return;
        }
        if self
            .last_draw
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last_draw = Some(Instant::now());
        let total = (self.base + self.span * frac.clamp(0.0, 1.0)).clamp(0.0, 1.0);
        let width = 30;
        let full = (total * width as f64) as usize;
        let bar: String = (0..width)
            .map(|i| if i < full { '#' } else { '-' })
            .collect();
        let elapsed = self.start.elapsed().as_secs_f64();
        let eta = if total > 0.01 {
            format!("{:.0} s left", elapsed * (1.0 - total) / total)
        } else {
            String::new()
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{bar}] {:3.0}% {:.0} s {eta:<12} {:<30}",
            total * 100.0,
            elapsed,
            self.label
        );
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the bar, if it was drawn.
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:100}\r", "");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
