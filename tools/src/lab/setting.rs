//! What every part of a lab's settings shares: the error a refused
//! setting makes, rates in tc's words, the most hosts. A leaf: the
//! settings' modules ([`super::config`], [`super::machines`],
//! [`super::trunk`], [`super::trace`]) import it, it imports none of them.

use super::LabError;

/// The most hosts: their addresses are 192.0.2.1 .. 192.0.2.N.
pub const MAX_HOSTS: usize = 64;

/// The error of a refused setting `what`.
pub fn setting(what: &'static str, why: impl Into<String>) -> LabError {
    LabError::Setting {
        what,
        why: why.into(),
    }
}

pub use nic::rate::rate_text;

/// A rate in tc's bit-rate words ([`nic::rate`]: the grammar rnicd's
/// `--line-rate` reads too), 100kbit to 100gbit.
pub fn parse_rate(s: &str) -> Result<u64, LabError> {
    let bps = nic::rate::parse_rate(s).map_err(|e| setting("rate", e.to_string()))?;
    if !(100_000..=100_000_000_000).contains(&bps) {
        return Err(setting("rate", format!("{s:?}: want 100kbit to 100gbit")));
    }
    Ok(bps)
}
