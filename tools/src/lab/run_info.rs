//! What a run was ([`RunInfo`], with a collective's [`CollectiveRun`]) and the plots drawn of it ([`Plot`], and
//! their CSV and SVG files): what the results folder ([`super::results`])
//! and its page ([`super::page`]) are written from.

use super::workload::{UcxTls, Workload};
use super::LabError;
use crate::report::{write_file, xy_svg, Labels, Series};
use std::fmt::Write as _;
use std::path::Path;

/// What the run was, for the summary and the page.
#[derive(Default)]
pub struct RunInfo<'a> {
    pub hosts: &'a [String],
    /// Each host's port backend as rnicd reported it.
    pub backends: &'a [String],
    /// The settings as a lab file.
    pub config_toml: String,
    /// What the CE marking is (real queue or proxy), one sentence.
    pub marking: String,
    /// ib_write_bw's own average per sender, Gbit/s.
    pub reported_gbits: Vec<Option<f64>>,
    /// The latency probe's rounds ([`super::probe`]), when it ran.
    pub probe: Option<&'a [Round]>,
    /// What the run's trustworthiness is judged from ([`super::scale`]).
    pub trust: Option<super::scale::Evidence>,
    /// A collective's run (every host sends); `None` for the incast.
    pub collective: Option<&'a CollectiveRun>,
    /// The trunk's egress ports (`sw1`: switch 0's toward switch 1,
    /// `sw0`), after the hosts' in the snapshots' port order; empty with
    /// one switch.
    pub trunk: &'a [String],
    /// A replayed trace's flows ([`super::replay`] runs them).
    pub trace: Option<&'a [super::trace::FlowResult]>,
}

impl RunInfo<'_> {
    /// The switch ports' names in the snapshots' order: the hosts', then
    /// the trunk's.
    pub fn port_names(&self) -> Vec<String> {
        self.hosts.iter().chain(self.trunk).cloned().collect()
    }

    /// Whether the run is the incast (h1..h(N-1) → h0), not a collective
    /// or a trace, where any host sends.
    pub fn incast(&self) -> bool {
        self.collective.is_none() && self.trace.is_none()
    }
}

/// What a collective run did.
pub struct CollectiveRun {
    pub workload: Workload,
    /// Its bytes (an allreduce's vector; each rank's alltoall buffer).
    pub size: u32,
    pub ucx_tls: UcxTls,
    /// Each iteration's completion time (the slowest rank's), µs.
    pub times_us: Vec<f64>,
    /// The transports UCX reported for its endpoints ([`super::mpi::endpoint_transports`]).
    pub endpoints: Vec<String>,
}

impl CollectiveRun {
    /// What each rank sends per byte of the size, on `ranks` ranks: a ring
    /// allreduce 2(N−1)/N (each byte twice round the ring but for its own
    /// share), an alltoall (N−1)/N (all but its own block).
    pub fn bus_factor(&self, ranks: usize) -> f64 {
        let n = ranks as f64;
        match self.workload {
            Workload::Allreduce => 2.0 * (n - 1.0) / n,
            _ => (n - 1.0) / n,
        }
    }

    /// The bytes all `ranks` sent each other over its completed
    /// iterations, at least (the collective's own, no header).
    pub fn bytes_sent(&self, ranks: usize) -> u64 {
        let per_iteration = f64::from(self.size) * ranks as f64 * self.bus_factor(ranks);
        (per_iteration * self.times_us.len() as f64) as u64
    }
}

/// One plot: its file stem, title, y label and series.
pub struct Plot {
    pub stem: &'static str,
    pub title: &'static str,
    pub y: &'static str,
    pub series: Vec<Series>,
}

impl Plot {
    /// Its series as `series,time_s,value` rows (what `rnic plot` reads).
    pub fn csv(&self) -> String {
        let mut s = String::from("series,time_s,value\n");
        for ser in &self.series {
            for (x, y) in &ser.points {
                let _ = writeln!(s, "{},{x:.3},{y:.3}", ser.name);
            }
        }
        s
    }

    /// Writes `<stem>.csv` ([`Self::csv`]) and `<stem>.svg` (over time;
    /// `log_y`: y on a log scale) into `out`.
    pub fn write(&self, out: &Path, log_y: bool) -> Result<(), LabError> {
        write_file(&out.join(format!("{}.csv", self.stem)), self.csv())?;
        let labels = Labels {
            title: self.title,
            x: "time [s]",
            y: self.y,
            log_y,
            log_x: false,
        };
        let svg = xy_svg(&labels, &self.series);
        write_file(&out.join(format!("{}.svg", self.stem)), svg)?;
        Ok(())
    }
}

/// One round of the latency probe ([`super::probe`]): its end (seconds since the workload's start) and each
/// ping-pong's half round trip, µs, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub end_s: f64,
    pub samples_us: Vec<f64>,
}

impl Round {
    /// Each sample with its time: reckoned back from the round's end, a
    /// round trip per ping-pong.
    pub fn timed(&self) -> Vec<(f64, f64)> {
        let mut t = self.end_s;
        let mut v: Vec<(f64, f64)> = self
            .samples_us
            .iter()
            .rev()
            .map(|&us| {
                let at = t;
                t -= 2.0 * us / 1e6;
                (at, us)
            })
            .collect();
        v.reverse();
        v
    }
}
