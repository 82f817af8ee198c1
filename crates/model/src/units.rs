//! Number formats, the one set of them for every front end (panes,
//! tables, reports): short, fixed units, so columns line up and a figure
//! reads at a glance; and the page, the unit the kernel counts in.

/// A count or rate with a decimal SI suffix: `0`, `12.5`, `3.1K`, `12M`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".into()
    } else if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}K", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Bytes with a binary suffix and one decimal: `512B`, `4.0K`, `1.5G`.
pub fn bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if b >= unit {
            return format!("{:.1}{name}", b as f64 / unit as f64);
        }
    }
    format!("{b}B")
}

/// Bytes per second in decimal megabytes, as `wbscope write` reports them.
pub fn mb_s(bytes_per_s: f64) -> String {
    format!("{:.0} MB/s", bytes_per_s / 1e6)
}

/// A duration in nanoseconds, in the unit that keeps it short.
pub fn ns(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}us", v / 1e3)
    } else {
        format!("{v:.0}ns")
    }
}

/// A latency given in microseconds (writer-core's unit).
pub fn us(v: f64) -> String {
    ns(v * 1e3)
}

/// Powers of two with binary suffixes: 1024 -> "1K", 262144 -> "256K",
/// 1048576 -> "1M", 2^30 -> "1G" (other values are floored to their unit).
pub(crate) fn pow2(v: u64) -> String {
    match v {
        _ if v >= 1 << 60 => format!("{}E", v >> 60),
        _ if v >= 1 << 50 => format!("{}P", v >> 50),
        _ if v >= 1 << 40 => format!("{}T", v >> 40),
        _ if v >= 1 << 30 => format!("{}G", v >> 30),
        _ if v >= 1 << 20 => format!("{}M", v >> 20),
        _ if v >= 1 << 10 => format!("{}K", v >> 10),
        _ => v.to_string(),
    }
}

/// A byte count on a log2 bucket bound: `512B`, `4K`, `1M`.
pub fn pow2_bytes(b: u64) -> String {
    if b < 1 << 10 {
        format!("{b}B")
    } else {
        pow2(b)
    }
}

/// `Some(x)` formatted, or `-` for a figure that is undefined (no calls).
pub fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a Unix time (days to civil date:
/// H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
pub fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86400) as i64;
    let secs = unix_s % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Page size the kernel counts pages in (4 KiB on x86_64).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}

/// log2 of the page size (pages are a power of two).
pub fn page_shift() -> u32 {
    page_size().trailing_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_shift_matches_the_page_size() {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        assert_eq!(1i64 << page_shift(), size);
        assert_eq!(page_size() as i64, size);
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_767_225_599), "2025-12-31 23:59:59 UTC");
    }

    #[test]
    fn formats() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(12.25), "12.2");
        assert_eq!(si(3100.0), "3.1K");
        assert_eq!(si(16384.0), "16K");
        assert_eq!(si(2.5e6), "2.5M");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(1536 << 20), "1.5G");
        assert_eq!(ns(1500.0), "1.5us");
        assert_eq!(us(2500.0), "2.5ms");
        assert_eq!(opt(None, si), "-");
        assert_eq!(pow2(262144), "256K");
        assert_eq!(pow2(1 << 63), "8E");
        assert_eq!(pow2_bytes(512), "512B");
        assert_eq!(pow2_bytes(4096), "4K");
    }
}
