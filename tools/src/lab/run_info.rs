//! What a run was ([`RunInfo`]) and the plots drawn of it ([`Plot`]):
//! what the results folder ([`super::results`]) and its page
//! ([`super::page`]) are written from.

use crate::report::Series;

/// What the run was, for the summary and the page.
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
}

/// One plot: its file stem, title, y label and series.
pub struct Plot {
    pub stem: &'static str,
    pub title: &'static str,
    pub y: &'static str,
    pub series: Vec<Series>,
}
