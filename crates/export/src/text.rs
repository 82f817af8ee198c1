//! `wbscope trace` without `--json`: a fixed-width table for people, in the
//! spirit of perf-trace and bcc's tools.
use wbscope_model::interval::IntervalLine;
use wbscope_model::plan::ProbeState;
use wbscope_model::summary::SummaryLine;
use wbscope_model::{CallRecord, cause_name, sync_mode_name};
use wbscope_sys::escape::escape_controls;

pub const HEADER: &str = "DEV        INO        PID     COMM             SYNC  ASKED      WRITTEN  SKIPPED  DUR_US     RET CAUSE         FS";

pub const INTERVAL_HEADER: &str =
    "TIME_S  CALLS  PAGES    SCAN/PG  NS/PG     DIRTY_PG  WB_PG     THROTTLE_MS  DEV_REQS  LOST";

pub fn call_row(c: &CallRecord) -> String {
    let asked = if c.nr_to_write == i64::MAX {
        "MAX".to_string()
    } else {
        c.nr_to_write.to_string()
    };
    format!(
        "{:<10} {:<10} {:<7} {:<16} {:<5} {:<10} {:<8} {:<8} {:<10} {:<3} {:<13} {}",
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
        cause_name(c.cause),
        escape_controls(&c.fs)
    )
}

/// One fsync, split (`--enable durability`): `fsync pid comm dev ino
/// total = writeback + wait + journal + flush + other (ms)`, and the
/// commit it waited on with its largest contributor.
/// One slow write, split: `write PID COMM DEV INO: 212.40 ms = throttle
/// ... + other ...; 4096 bytes; paused 3 times by bdi`.
pub fn write_row(w: &wbscope_model::writes::SlowWrite) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let p = &w.parts;
    let mut row = format!(
        "{} {} {} {} {}: {:.2} ms = throttle {:.2} + stable {:.2} + reclaim {:.2} + blocked \
         {:.2} + other {:.2}; {} {}",
        w.call,
        w.pid,
        escape_controls(&w.comm),
        w.dev,
        w.ino,
        ms(p.total_ns),
        ms(p.throttle_ns),
        ms(p.stable_ns),
        ms(p.reclaim_ns),
        ms(p.blocked_ns),
        ms(p.other_ns),
        w.ret,
        if w.ret < 0 { "(error)" } else { "bytes" },
    );
    if p.lock_ns + p.journal_ns > 0 {
        row.push_str(&format!(
            "; blocked in lock {:.2}, journal {:.2}",
            ms(p.lock_ns),
            ms(p.journal_ns)
        ));
    }
    if w.pauses > 0 {
        row.push_str(&format!(
            "; paused {} times by {}",
            w.pauses,
            if w.throttled_by.is_empty() {
                "an unknown limit".to_string()
            } else {
                w.throttled_by.join(" and ")
            }
        ));
    }
    row
}

pub fn sync_row(s: &wbscope_model::durability::SyncRecord) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let flush = s
        .flush_ns
        .map_or("-".to_string(), |f| format!("{:.2}", ms(f)));
    let mut row = format!(
        "{} {} {} {} {}: {:.2} ms = writeback {:.2} + wait {:.2} + journal {:.2} + flush {flush} \
         + other {:.2}; {} pages",
        s.kind,
        s.pid,
        escape_controls(&s.comm),
        s.dev,
        s.ino,
        ms(s.total_ns),
        ms(s.writeback_ns),
        ms(s.wait_ns),
        ms(s.journal_ns),
        ms(s.other_ns),
        s.pages
    );
    if let Some(c) = &s.commit {
        row.push_str(&format!(
            "; commit {} of {} blocks",
            c.transaction,
            c.blocks.map_or("?".to_string(), |b| b.to_string())
        ));
        if let Some(top) = c.contributors.first() {
            row.push_str(&format!(
                "; largest: pid {} ({}), {} blocks, {} pages written during it",
                top.pid,
                escape_controls(&top.comm),
                top.blocks,
                top.pages
            ));
        }
    }
    row
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
    if let Some(why) = &l.pages_dirtied_unmeasured {
        s.push_str(&format!(
            "  pages dirtied per process: not measured: {why}\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process name chosen by another process (or a recording) cannot
    /// drive the terminal the table is printed on.
    #[test]
    fn call_rows_escape_terminal_controls() {
        let c = CallRecord {
            comm: "\u{1b}[2Jx".into(),
            ..CallRecord::default()
        };
        let row = call_row(&c);
        assert!(!row.contains('\u{1b}'), "{row:?}");
        assert!(row.contains("\\u{1b}[2Jx"), "{row:?}");
    }
}
