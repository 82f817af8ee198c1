//! Byte sizes as people type them: `4096`, `4k`, `8M`, `8MiB`, `1G`, `1.5GiB`, `100MB`.
//!
//! Convention (the one dd(1) and fio use by default): a bare multiplier
//! letter is binary, so `K`/`M`/`G`/`T` and `KiB`/`MiB`/`GiB`/`TiB` are powers
//! of 1024, case-insensitive. Only the explicit SI spellings `kB`/`KB`, `MB`,
//! `GB`, `TB` are powers of 1000. A fractional number is accepted when it
//! gives a whole number of bytes (`1.5GiB` yes, `1.3k` no).
use std::fmt;

/// Why a size string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("{0:?} is not a size: expected a number like 4096, 64k, 8M, 1.5GiB")]
    NotANumber(String),
    #[error(
        "{input:?} has an unknown unit {unit:?} (use K, M, G, T = 1024^n, KiB..TiB, or kB, MB, GB, TB = 1000^n)"
    )]
    UnknownUnit { input: String, unit: String },
    #[error("{0:?} is not a whole number of bytes")]
    Fractional(String),
    #[error("{0:?} is too large")]
    Overflow(String),
}

fn multiplier(unit: &str) -> Option<u64> {
    const K: u64 = 1024;
    let m = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => K,
        "m" | "mi" | "mib" => K * K,
        "g" | "gi" | "gib" => K * K * K,
        "t" | "ti" | "tib" => K * K * K * K,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        "tb" => 1000 * 1000 * 1000 * 1000,
        _ => return None,
    };
    Some(m)
}

/// Parse a byte size (see the module docs for the accepted forms).
/// Zero parses as 0: whether 0 is acceptable is the caller's decision.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(num_end);
    let unit = unit.trim_start();
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(SizeError::NotANumber(input.to_string()));
    }
    let mult = multiplier(unit).ok_or_else(|| SizeError::UnknownUnit {
        input: input.to_string(),
        unit: unit.to_string(),
    })?;
    let overflow = || SizeError::Overflow(input.to_string());
    let int: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| overflow())?
    };
    let mut bytes = int.checked_mul(mult).ok_or_else(overflow)?;
    let frac_digits = frac_part.trim_end_matches('0');
    if !frac_digits.is_empty() {
        if frac_digits.len() > 18 {
            return Err(SizeError::Fractional(input.to_string()));
        }
        let frac: u128 = frac_digits.parse().map_err(|_| overflow())?;
        let scale = 10u128.pow(frac_digits.len() as u32);
        let scaled = frac * u128::from(mult);
        if !scaled.is_multiple_of(scale) {
            return Err(SizeError::Fractional(input.to_string()));
        }
        let extra = u64::try_from(scaled / scale).map_err(|_| overflow())?;
        bytes = bytes.checked_add(extra).ok_or_else(overflow)?;
    }
    Ok(bytes)
}

/// Formats a size the shortest exact way: the largest IEC unit that divides it
/// (`8388608` → `8MiB`), else plain bytes. `parse_size(&format_size(n)) == n`.
pub fn format_size(bytes: u64) -> String {
    ByteSize(bytes).to_string()
}

/// Display adapter for [`format_size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        let n = self.0;
        for (name, unit) in UNITS {
            if n != 0 && n.is_multiple_of(unit) {
                return write!(f, "{}{name}", n / unit);
            }
        }
        write!(f, "{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_and_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("8mib"), Ok(8 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size(" 64M "), Ok(64 << 20));
        assert_eq!(parse_size("512b"), Ok(512));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn si_suffixes_are_powers_of_1000() {
        assert_eq!(parse_size("1kB"), Ok(1000));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
    }

    #[test]
    fn fractions_must_give_whole_bytes() {
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size("1.50M"), Ok(3 << 19));
        assert_eq!(parse_size(".5M"), Ok(1 << 19));
        assert_eq!(
            parse_size("1.3k"),
            Err(SizeError::Fractional("1.3k".into()))
        );
        assert_eq!(parse_size("1.5"), Err(SizeError::Fractional("1.5".into())));
    }

    #[test]
    fn garbage_is_refused_with_the_reason() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(
            parse_size("8Q"),
            Err(SizeError::UnknownUnit {
                input: "8Q".into(),
                unit: "Q".into()
            })
        );
        assert_eq!(parse_size("M"), Err(SizeError::NotANumber("M".into())));
        assert_eq!(parse_size("-1"), Err(SizeError::NotANumber("-1".into())));
        assert_eq!(
            parse_size("1.2.3"),
            Err(SizeError::NotANumber("1.2.3".into()))
        );
        assert_eq!(
            parse_size("99999999999T"),
            Err(SizeError::Overflow("99999999999T".into()))
        );
        let msg = parse_size("8Q").unwrap_err().to_string();
        assert!(msg.contains("unknown unit \"Q\""), "{msg}");
    }

    #[test]
    fn format_picks_the_largest_exact_unit() {
        assert_eq!(format_size(8 << 20), "8MiB");
        assert_eq!(format_size(4096), "4KiB");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(3 << 29), "1536MiB");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(n in any::<u64>()) {
            prop_assert_eq!(parse_size(&format_size(n)), Ok(n));
        }

        #[test]
        fn unit_multiples_round_trip(n in 0u64..(1 << 20), unit in prop::sample::select(vec![
            ("k", 1u64 << 10), ("M", 1 << 20), ("GiB", 1 << 30), ("kB", 1000), ("MB", 1_000_000),
        ])) {
            prop_assert_eq!(parse_size(&format!("{n}{}", unit.0)), Ok(n * unit.1));
        }
    }
}
