//! `wbscope trace` without `--json`: a fixed-width table for people, in the
//! spirit of perf-trace and bcc's tools.
use std::borrow::Cow;

use crate::{
    export::json_lines::SummaryLine,
    interval::IntervalLine,
    model::{CallRecord, cause_name, sync_mode_name},
    plan::ProbeState,
};

pub const HEADER: &str = "DEV        INO        PID     COMM             SYNC  ASKED      WRITTEN  SKIPPED  DUR_US     RET CAUSE";

pub const INTERVAL_HEADER: &str =
    "TIME_S  CALLS  PAGES    SCAN/PG  NS/PG     DIRTY_PG  WB_PG     THROTTLE_MS  DEV_REQS  LOST";

pub fn call_row(c: &CallRecord) -> String {
    let asked = if c.nr_to_write == i64::MAX {
        "MAX".to_string()
    } else {
        c.nr_to_write.to_string()
    };
    format!(
        "{:<10} {:<10} {:<7} {:<16} {:<5} {:<10} {:<8} {:<8} {:<10} {:<3} {}",
        c.dev.to_string(),
        c.ino,
        c.tgid,
        escape_controls(&c.comm),
        sync_mode_name(c.sync_mode),
        asked,
        c.pages_written,
        c.pages_skipped,
        c.duration_ns / 1000,
        c.ret,
        cause_name(c.cause)
    )
}

fn opt(v: Option<f64>, width: usize) -> String {
    match v {
        Some(v) => format!("{v:<width$.1}"),
        None => format!("{:<width$}", "-"),
    }
}

/// One row per interval.
pub fn interval_row(l: &IntervalLine) -> String {
    format!(
        "{:<7.1} {:<6} {:<8} {} {} {:<9} {:<9} {:<12} {:<9} {}",
        l.time_s,
        l.calls,
        l.pages_written,
        opt(l.scan.pages_scanned_per_page_written, 8),
        opt(l.ns_per_written_page, 9),
        l.dirty.vmstat.nr_dirty,
        l.dirty.vmstat.nr_writeback,
        l.throttle.pause_ms_total,
        l.devices.iter().map(|d| d.requests).sum::<u64>(),
        l.lost_records
    )
}

/// The closing lines of a text trace.
pub fn summary(l: &SummaryLine<'_>) -> String {
    let mut s = format!(
        "\n{} calls, {} pages written in {:.1} s; lost records: {}, unmatched results: {}\n",
        l.calls, l.pages_written, l.duration_s, l.lost_records, l.unmatched_results
    );
    for p in l.probes {
        match &p.state {
            ProbeState::Attached => s.push_str(&format!(
                "  {}: {}\n",
                p.concept,
                escape_controls(p.hook.as_deref().unwrap_or("-"))
            )),
            ProbeState::Unavailable(why) => s.push_str(&format!(
                "  {}: unavailable: {}\n",
                p.concept,
                escape_controls(why)
            )),
        }
    }
    s
}

/// Characters that drive a terminal rather than show on it: C0 and C1
/// controls (ESC starts the sequences that retitle, clear or move; in
/// UTF-8, U+009B is CSI to some terminals), DEL, and the bidirectional
/// marks and overrides that reorder the text after them (Unicode UAX #9).
fn drives_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with the characters that drive a terminal written as Rust escapes
/// (`\u{1b}`, `\n`): for anything printed that a recording or another
/// process chose (a process name, a host name), so that printing it cannot
/// rewrite the terminal.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(drives_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if drives_terminal(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Every string in `value` passed through [`escape_controls`].
pub fn escape_json_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(escaped) = escape_controls(s) {
                *s = escaped;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_json_strings),
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(escape_json_strings);
            // Keys too: they are printed as well.
            if map.keys().any(|k| k.chars().any(drives_terminal)) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (escape_controls(&k).into_owned(), v))
                    .collect();
            }
        }
        _ => {}
    }
}

/// A line of JSON with the terminal-driving characters serde_json leaves
/// raw in strings (it escapes only U+0000 to U+001F: DEL, the C1 controls
/// and the bidirectional marks stay) written as `\uXXXX` escapes. They can
/// only occur inside strings, so the line decodes to the same value.
pub fn escape_json_line(line: &str) -> Cow<'_, str> {
    if !line.chars().any(drives_terminal) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if drives_terminal(c) {
            // All of them are in the Basic Multilingual Plane.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(escape_controls("dd"), "dd");
        assert!(matches!(escape_controls("kworker/u8:2"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;owned\u{7}\u{1b}[2J\n\u{9b}31m\u{202e}é"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\n\\u{9b}31m\\u{202e}é"
        );
        let c = CallRecord {
            comm: "\u{1b}[2Jx".into(),
            ..CallRecord::default()
        };
        let row = call_row(&c);
        assert!(!row.contains('\u{1b}'), "{row:?}");
        assert!(row.contains("\\u{1b}[2Jx"), "{row:?}");
    }

    #[test]
    fn json_lines_keep_their_value_without_raw_controls() {
        let v = serde_json::json!({"comm": "a\u{1b}b\u{7f}c\u{9b}d\u{2066}e", "n": 1});
        let line = serde_json::to_string(&v).unwrap();
        assert!(
            line.contains('\u{9b}'),
            "serde_json leaves C1 raw: {line:?}"
        );
        let escaped = escape_json_line(&line);
        assert!(!escaped.chars().any(drives_terminal), "{escaped:?}");
        assert!(escaped.contains("\\u009b"), "{escaped}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&escaped).unwrap(),
            v
        );
    }

    #[test]
    fn every_string_of_a_value_is_escaped() {
        let mut v = serde_json::json!({"host\u{1b}": ["\u{1b}]0;t\u{7}", {"k": "ok"}], "n": 2});
        escape_json_strings(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"host\\u{1b}": ["\\u{1b}]0;t\\u{7}", {"k": "ok"}], "n": 2})
        );
    }
}
