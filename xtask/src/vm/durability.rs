//! The fsync anatomy in the guest (checks.sh `durability_run`, issue 27):
//! 20 O_DSYNC writes of `dd` are 20 `o_dsync` sync lines and its
//! `conv=fsync` one `fsync` line, each with parts that add up to its
//! time, on every kernel of the matrix. A missing one passes only as a
//! run of the fsync programs the kernel counted as skipped.
use std::path::Path;

use serde_json::Value;

use super::{
    checks::{Check, exit_reason},
    kernel_counts::skipped_runs,
};

const NAME: &str = "durability-fsyncs-split";
/// What checks.sh makes: O_DSYNC writes, and fsync(2) calls.
const DSYNC_WRITES: usize = 20;
const FSYNCS: usize = 1;

/// The programs whose skipped run loses a sync line (writeback-ebpf
/// durability.rs).
const SPAN_PROGRAMS: [&str; 6] = [
    "sys_enter_fsync",
    "sys_exit_fsync",
    "sync_file_enter",
    "sync_file_exit",
    "sys_enter_fdatasync",
    "sys_exit_fdatasync",
];

pub fn judge(out: &Path) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    if !out.join("durability.rc").exists() {
        return Vec::new();
    }
    vec![split(
        &read("durability.jsonl"),
        &read("durability.rc"),
        &read("durability.err"),
    )]
}

fn split(jsonl: &str, rc: &str, stderr: &str) -> Check {
    if rc.trim() != "0" {
        return Check::new(NAME, false, exit_reason("wbscope trace", rc, stderr));
    }
    let lines: Vec<Value> = jsonl
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary = lines.last().filter(|l| l["type"] == "summary");
    let mine: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "sync" && l["comm"] == "dd")
        .collect();
    let kind = |k: &str| mine.iter().filter(|l| l["kind"] == k).count();
    let (dsync, fsync) = (kind("o_dsync"), kind("fsync"));
    let parts = |l: &Value| {
        ["writeback_ns", "wait_ns", "journal_ns", "other_ns"]
            .iter()
            .filter_map(|k| l[*k].as_u64())
            .sum::<u64>()
            + l["flush_ns"].as_u64().unwrap_or(0)
    };
    let untiled = mine
        .iter()
        .filter(|l| l["total_ns"].as_u64() != Some(parts(l)))
        .count();
    let committed = mine.iter().filter(|l| !l["commit"].is_null()).count();
    let skipped = skipped_runs(summary, &|p| SPAN_PROGRAMS.contains(&p)) as usize;
    let missing = DSYNC_WRITES.saturating_sub(dsync) + FSYNCS.saturating_sub(fsync);
    let pass = summary.is_some()
        && dsync <= DSYNC_WRITES
        && fsync <= FSYNCS
        && missing <= skipped
        && untiled == 0
        && committed > 0;
    Check::new(
        NAME,
        pass,
        format!(
            "dd: {dsync} of {DSYNC_WRITES} O_DSYNC writes and {fsync} of {FSYNCS} fsync as sync \
             lines, {untiled} whose parts do not add up, {committed} with the commit they \
             waited on; {skipped} runs of the span programs skipped"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, total: u64, journal: u64, commit: bool) -> String {
        let commit = if commit {
            r#"{"transaction":7}"#
        } else {
            "null"
        };
        format!(
            r#"{{"type":"sync","comm":"dd","kind":"{kind}","total_ns":{total},"writeback_ns":1,"wait_ns":1,"journal_ns":{journal},"flush_ns":0,"other_ns":{},"commit":{commit}}}"#,
            total - 2 - journal
        )
    }

    fn run(lines: &[String], summary: &str) -> Check {
        let mut text = lines.join("\n");
        text.push('\n');
        text.push_str(summary);
        split(&text, "0\n", "")
    }

    const SUMMARY: &str = r#"{"type":"summary","run_time":[]}"#;

    #[test]
    fn every_sync_of_dd_is_a_line_of_its_kind() {
        let mut lines: Vec<String> = (0..20).map(|_| line("o_dsync", 100, 50, true)).collect();
        lines.push(line("fsync", 1000, 900, true));
        assert!(run(&lines, SUMMARY).pass);
        // One missing: fails, unless a span program's run was skipped.
        let short = &lines[1..];
        assert!(!run(short, SUMMARY).pass);
        let skipped =
            r#"{"type":"summary","run_time":[{"program":"sync_file_exit","recursion_misses":1}]}"#;
        assert!(run(short, skipped).pass);
        // Another program's skip does not account for it.
        let other =
            r#"{"type":"summary","run_time":[{"program":"handle_stats","recursion_misses":1}]}"#;
        assert!(!run(short, other).pass);
        // Parts that do not add up fail.
        let mut bad = lines.clone();
        bad[0] = bad[0].replace(r#""total_ns":100"#, r#""total_ns":101"#);
        assert!(!run(&bad, SUMMARY).pass);
        // No commit at all fails (ext4 commits for O_DSYNC appends).
        let none: Vec<String> = (0..20)
            .map(|_| line("o_dsync", 100, 0, false))
            .chain([line("fsync", 1000, 0, false)])
            .collect();
        assert!(!run(&none, SUMMARY).pass);
        // wbscope failing is said.
        assert!(!split("", "1\n", "wbscope: error: x").pass);
    }
}
