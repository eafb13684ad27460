//! Link rates as people write them, in one grammar for every tool of the
//! project (`rnicd --line-rate`, `rnic lab`'s `rate`): tc's bit rates.
//!
//! A number (decimals allowed) and a unit of bits per second in powers of
//! 1000: `bit` (or none), `kbit`, `mbit`, `gbit`, `tbit`, or the short
//! `k`, `m`, `g`, `t`; any case. `100mbit`, `25gbit`, `100m`, `2.5g`.
//!
//! Refused with a message that says why: the `bps` family (`gbps`,
//! `mbps`, ...), which tc reads as BYTES per second (`25gbps` is 200
//! Gbit/s to tc), so a lab file handed to tc and to rnicd would name two
//! rates; `bit/s`-style spellings and tc's IEC units (`kibit`), which
//! nothing here needs.

/// A rate [`parse_rate`] refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRate {
    #[error("{0:?}: tc reads `bps` units as BYTES per second; write bits: e.g. 100mbit, 25gbit")]
    Bytes(String),
    #[error(
        "{0:?}: want a number and bit, kbit, mbit, gbit or tbit (or k, m, g, t): e.g. 100mbit, 25g"
    )]
    Unit(String),
    #[error("{0:?}: want 1kbit to 10tbit")]
    Range(String),
}

/// The rates [`parse_rate`] takes, bits per second.
pub const RANGE: std::ops::RangeInclusive<u64> = 1_000..=10_000_000_000_000;

/// A rate in bits per second from tc's bit-rate spelling (see the
/// module's grammar).
pub fn parse_rate(s: &str) -> Result<u64, BadRate> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "bit" => 1e0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        "t" | "tbit" => 1e12,
        u if u.ends_with("bps") => return Err(BadRate::Bytes(s.to_string())),
        _ => return Err(BadRate::Unit(s.to_string())),
    };
    let v: f64 = num.parse().map_err(|_| BadRate::Unit(s.to_string()))?;
    let bps = (v * scale).round();
    if !(*RANGE.start() as f64..=*RANGE.end() as f64).contains(&bps) {
        return Err(BadRate::Range(s.to_string()));
    }
    Ok(bps as u64)
}

/// A rate in bits per second in tc's words, the largest unit that keeps
/// it whole (`100mbit`, `2500mbit`, `1gbit`); [`parse_rate`] reads it back.
pub fn rate_text(bps: u64) -> String {
    match bps {
        0 => "0bit".into(),
        b if b % 1_000_000_000 == 0 => format!("{}gbit", b / 1_000_000_000),
        b if b % 1_000_000 == 0 => format!("{}mbit", b / 1_000_000),
        b if b % 1_000 == 0 => format!("{}kbit", b / 1_000),
        b => format!("{b}bit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_bit_rates_and_their_short_forms_read_in_powers_of_1000() {
        for (s, bps) in [
            ("100mbit", 100_000_000),
            ("100m", 100_000_000),
            ("25Gbit", 25_000_000_000),
            ("25g", 25_000_000_000),
            ("2.5g", 2_500_000_000),
            ("500kbit", 500_000),
            ("1000000", 1_000_000),
            ("1000000bit", 1_000_000),
            (" 1tbit ", 1_000_000_000_000),
        ] {
            assert_eq!(parse_rate(s), Ok(bps), "{s}");
        }
        for r in ["1gbit", "2500mbit", "500kbit", "100001bit"] {
            assert_eq!(rate_text(parse_rate(r).unwrap()), r);
        }
    }

    #[test]
    fn byte_rates_are_refused_rather_than_read_otherwise_than_tc() {
        for s in ["25gbps", "100Mbps", "1000bps", "1kbps"] {
            let e = parse_rate(s).unwrap_err();
            assert_eq!(e, BadRate::Bytes(s.into()));
            assert!(e.to_string().contains("BYTES per second"), "{e}");
        }
    }

    #[test]
    fn other_units_numbers_and_ranges_are_refused() {
        for s in [
            "", "fast", "mbit", "1kibit", "2x", "25gbit/s", "-1g", "1.2.3m",
        ] {
            assert_eq!(parse_rate(s), Err(BadRate::Unit(s.into())), "{s}");
        }
        for s in ["10", "999bit", "11tbit"] {
            assert_eq!(parse_rate(s), Err(BadRate::Range(s.into())), "{s}");
        }
    }
}
