//! `--since` / `--until`: a moment as RFC 3339 (`2026-12-02T03:10:00Z`),
//! a local date and time (`2026-12-02 03:10`), a clock time today in the
//! local time zone (`03:10`, `03:10:30`), a time back from now (`2h ago`,
//! `90s ago`, `1 day ago`), or seconds since the Unix epoch
//! (`1764645000`, `1764645000.5`).
use clap::Args;

use wbscope_model::when::TimeWindow;
use wbscope_sys::UsageError;

/// The window of a recording or store to read.
#[derive(Debug, Default, Args)]
pub(crate) struct WindowArgs {
    /// Only what happened at or after WHEN: RFC 3339, a local "YYYY-MM-DD
    /// HH:MM", a clock time today (03:10), "2h ago", or epoch seconds.
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    pub(crate) since: Option<u64>,

    /// Only what happened before WHEN (same forms as --since).
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    pub(crate) until: Option<u64>,
}

impl WindowArgs {
    pub(crate) fn window(&self) -> Result<TimeWindow, UsageError> {
        if let (Some(s), Some(u)) = (self.since, self.until)
            && s >= u
        {
            return Err(UsageError(
                "--since must be before --until (the window is empty)".into(),
            ));
        }
        Ok(TimeWindow {
            since_ns: self.since,
            until_ns: self.until,
        })
    }
}

/// WHEN as ns since the Unix epoch.
pub(crate) fn parse_when(s: &str) -> Result<u64, String> {
    parse_when_at(s, &jiff::ZonedDateTime::now())
}

/// WHEN, with `now` as the present (and its time zone as the local one).
fn parse_when_at(s: &str, now: &jiff::ZonedDateTime) -> Result<u64, String> {
    let t = s.trim();
    let bad = || {
        format!(
            "`{s}` is not a time: use RFC 3339 (2026-12-02T03:10:00Z), \"2026-12-02 03:10\", \
             03:10 (today), \"2h ago\" or epoch seconds"
        )
    };
    let ts: jiff::Timestamp = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        let secs: f64 = t.parse().map_err(|_| bad())?;
        jiff::Timestamp::from_nanosecond((secs * 1e9) as i128).map_err(|_| bad())?
    } else if let Some(back) = t.strip_suffix("ago") {
        let span: jiff::Span = back.trim().parse().map_err(|_| bad())?;
        now.checked_sub(span).map_err(|_| bad())?.timestamp()
    } else if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        ts
    } else if let Ok(time) = t.parse::<jiff::civil::Time>()
        && !t.contains('-')
    {
        now.with()
            .time(time)
            .build()
            .map_err(|_| bad())?
            .timestamp()
    } else if let Ok(dt) = t.parse::<jiff::civil::DateTime>() {
        dt.to_zoned_datetime(now.time_zone().clone())
            .map_err(|_| bad())?
            .timestamp()
    } else {
        return Err(bad());
    };
    u64::try_from(ts.as_nanosecond()).map_err(|_| format!("`{s}` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn now() -> jiff::ZonedDateTime {
        // 2026-12-02T05:00:00 in a zone two hours ahead of UTC.
        "2026-12-02T05:00:00+02:00[Etc/GMT-2]".parse().unwrap()
    }

    #[test]
    fn every_form_of_when() {
        let at = |s| parse_when_at(s, &now());
        let utc_3 = 1_796_180_400 * SEC; // 2026-12-02T03:00:00Z
        assert_eq!(at("2026-12-02T03:00:00Z"), Ok(utc_3));
        assert_eq!(at("2026-12-02T05:00:00+02:00"), Ok(utc_3));
        assert_eq!(at("1796180400"), Ok(utc_3));
        assert_eq!(at("1796180400.5"), Ok(utc_3 + SEC / 2));
        // Now is 03:00Z; local clock times and dates are in its zone.
        assert_eq!(at("05:00"), Ok(utc_3));
        assert_eq!(at("04:10:30"), Ok(utc_3 - 50 * 60 * SEC + 30 * SEC));
        assert_eq!(at("2026-12-02 05:00"), Ok(utc_3));
        assert_eq!(at("2h ago"), Ok(utc_3 - 2 * 3600 * SEC));
        assert_eq!(at("90s ago"), Ok(utc_3 - 90 * SEC));
        assert_eq!(at("1 day ago"), Ok(utc_3 - 86_400 * SEC));
        for bad in [
            "",
            "yesterday",
            "2h",
            "25:00",
            "ago",
            "1969-01-01T00:00:00Z",
        ] {
            assert!(at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_empty_window_is_a_usage_error() {
        let w = WindowArgs {
            since: Some(10),
            until: Some(10),
        };
        assert!(w.window().is_err());
        let w = WindowArgs {
            since: Some(10),
            until: None,
        };
        assert_eq!(
            w.window().unwrap(),
            TimeWindow {
                since_ns: Some(10),
                until_ns: None
            }
        );
    }
}
