//! `wbscope trace` without `--json`: a fixed-width table for people, in the
//! spirit of perf-trace and bcc's tools.
use crate::{
    loader::{KernelStats, ProbeStatus},
    model::{CallRecord, Totals, sync_mode_name},
};

pub const HEADER: &str = "DEV        INO        PID     COMM             SYNC  ASKED      WRITTEN  SKIPPED  DUR_US     RET";

pub fn call_row(c: &CallRecord) -> String {
    let asked = if c.nr_to_write == i64::MAX {
        "MAX".to_string()
    } else {
        c.nr_to_write.to_string()
    };
    format!(
        "{:<10} {:<10} {:<7} {:<16} {:<5} {:<10} {:<8} {:<8} {:<10} {}",
        c.dev.to_string(),
        c.ino,
        c.tgid,
        c.comm,
        sync_mode_name(c.sync_mode),
        asked,
        c.pages_written,
        c.pages_skipped,
        c.duration_ns / 1000,
        c.ret
    )
}

pub fn summary(
    duration_s: f64,
    totals: &Totals,
    kernel: &KernelStats,
    probes: &[ProbeStatus],
) -> String {
    let mut s = format!(
        "\n{} calls, {} pages written in {:.1} s; lost records: {}, unmatched results: {}\n",
        totals.calls,
        totals.pages_written,
        duration_s,
        kernel.lost_records,
        kernel.unmatched_results
    );
    for p in probes {
        s.push_str(&format!("  {p}\n"));
    }
    s
}
