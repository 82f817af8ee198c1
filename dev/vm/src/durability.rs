//! The fsync anatomy in the guest (checks.sh `durability_run`):
//! 20 O_DSYNC writes of `dd` are 20 `o_dsync` sync lines and its
//! `conv=fsync` one `fsync` line, each with parts that add up to its
//! time, on every kernel of the matrix. A missing one passes only as a
//! run of the fsync programs the kernel counted as skipped. With
//! `device_io` on beside it, the disk's empty flush requests in the
//! interval lines are its own flush counter's growth over the writes
//! (`device-flushes-by-class`: the tp_btf path's `cmd_flags` bits from
//! each kernel's BTF, or the tracepoints' `rwbs`). Where the kernel lets
//! function hooks load (`durability-waits-measured`), every sync line of
//! the dd has its page wait and cache flush measured
//! (`file_write_and_wait_range()`, `blkdev_issue_flush()`), and
//! those that waited for a commit name it by the transaction
//! `jbd2_log_wait_commit()` was given, a commit the jbd2 tracepoints saw
//! end inside the fsync.
use std::path::Path;

use serde_json::Value;

use crate::{
    checks::{Check, parse_lines},
    kernel_counts::skipped_runs,
};

const NAME: &str = "durability-fsyncs-split";
const FLUSH_NAME: &str = "device-flushes-by-class";
const WAITS_NAME: &str = "durability-waits-measured";
const WRITES_NAME: &str = "writes-journal-hooked";
const JOURNAL_WAIT_NAME: &str = "writes-journal-wait-caused";
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

/// What the names of the programs on the waits' functions hold
/// (writeback-ebpf syncwait.rs: `kprobe_write_wait`, `fexit_log_wait`, …).
const WAIT_PROGRAM_PARTS: [&str; 4] = ["write_wait", "fdatawait", "issue_flush", "log_wait"];

pub(crate) fn judge(out: &Path) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    if !out.join("durability.rc").exists() {
        return Vec::new();
    }
    judge_run(
        &read("durability.jsonl"),
        &read("durability.rc"),
        &read("durability.err"),
        read("durability.dev").trim(),
        [&read("durability.stat0"), &read("durability.stat1")],
    )
}

/// The three checks of one run: its lines parsed once; a run that failed
/// or left no summary fails them all, for that reason.
fn judge_run(jsonl: &str, rc: &str, stderr: &str, dev: &str, stats: [&str; 2]) -> Vec<Check> {
    let lines = match parse_lines(jsonl, rc, stderr) {
        Ok(lines) => lines,
        Err(why) => {
            return [NAME, WAITS_NAME, FLUSH_NAME, WRITES_NAME]
                .iter()
                .map(|name| Check::new(name, false, why.clone()))
                .collect();
        }
    };
    let dd: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "sync" && l["comm"] == "dd")
        .collect();
    vec![
        split(&lines, &dd),
        waits(&lines, &dd),
        flushes(&lines, dev, stats),
        writes(&lines),
    ]
}

/// The write spans of the same run (`--enable writes`): the two dd's
/// write calls, at least their 24 appends (20 O_DSYNC writes of 4 KiB, 4
/// of 1 MiB; their status lines to stderr, a file here, are writes too),
/// whose new sizes and times dirty the inode through journal handles
/// (`ext4_dirty_inode()`, fs/ext4/inode.c): where the journal hook loads
/// (`write_journal`, a kprobe on jbd2's module) it marks handles started
/// inside them, and the parts of lock and journal stay within blocked.
fn writes(lines: &[Value]) -> Check {
    let summary = &lines[lines.len() - 1];
    let dd: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .flat_map(|l| l["writes"].as_array().into_iter().flatten())
        .filter(|w| w["comm"] == "dd")
        .collect();
    let sum = |key: &str| dd.iter().map(|w| w[key].as_u64().unwrap_or(0)).sum::<u64>();
    let (writes, starts) = (sum("writes"), sum("journal_starts"));
    let within = dd.iter().all(|w| {
        w["lock_ns"].as_u64().unwrap_or(0) + w["journal_ns"].as_u64().unwrap_or(0)
            <= w["blocked_ns"].as_u64().unwrap_or(0)
    });
    let hook = hook_of(summary, "write_journal");
    let lock = hook_of(summary, "write_lock").unwrap_or_else(|why| why);
    let figures = format!(
        "{writes} dd write calls, {starts} journal handles started inside ({} ms waiting), {} \
         contended folio locks ({} ms); write_lock {lock}",
        sum("journal_ns") as f64 / 1e6,
        sum("locks"),
        sum("lock_ns") as f64 / 1e6,
    );
    match hook {
        Err(why) => Check::not_given(WRITES_NAME, format!("{why}; {figures}")),
        Ok(hook) => Check::new(
            WRITES_NAME,
            writes >= 24 && starts > 0 && within,
            format!("write_journal {hook}: {figures}"),
        ),
    }
}

/// The caused journal wait (checks.sh, the `journal` group): the
/// appending dd (512 bytes a write) waits to start journal handles
/// inside its writes, measured by the journal hook, within `blocked`.
pub(crate) fn judge_journal(out: &Path) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    if !out.join("writes-journal.rc").exists() {
        return vec![Check::new(
            JOURNAL_WAIT_NAME,
            false,
            "the guest made no writes-journal run (its ext4 with a small journal failed?)"
                .to_string(),
        )];
    }
    let lines = match parse_lines(
        &read("writes-journal.jsonl"),
        &read("writes-journal.rc"),
        &read("writes-journal.err"),
    ) {
        Ok(lines) => lines,
        Err(why) => return vec![Check::new(JOURNAL_WAIT_NAME, false, why)],
    };
    vec![journal_wait(&lines)]
}

/// The appender's write calls (the dd of 6,000 calls, 512 bytes each):
/// journal waits measured inside, at most its `blocked`.
fn journal_wait(lines: &[Value]) -> Check {
    let summary = &lines[lines.len() - 1];
    let hook = match hook_of(summary, "write_journal") {
        Ok(h) => h,
        Err(why) => return Check::not_given(JOURNAL_WAIT_NAME, why),
    };
    let mut per: std::collections::BTreeMap<u64, [u64; 5]> = std::collections::BTreeMap::new();
    for w in lines
        .iter()
        .filter(|l| l["type"] == "interval")
        .flat_map(|l| l["writes"].as_array().into_iter().flatten())
        .filter(|w| w["comm"] == "dd")
    {
        let e = per.entry(w["pid"].as_u64().unwrap_or(0)).or_default();
        for (i, k) in [
            "writes",
            "bytes",
            "journal_starts",
            "journal_ns",
            "blocked_ns",
        ]
        .iter()
        .enumerate()
        {
            e[i] += w[*k].as_u64().unwrap_or(0);
        }
    }
    // Its 6,000 appends (and dd's status lines to stderr, a file), less
    // the calls whose enter or exit program the kernel skipped as already
    // running on the CPU (kernel/trace/bpf_trace.c `trace_call_bpf`:
    // counted, `recursion_misses`; dozens on the newest kernels' TCG
    // guests): the dd with the most calls, far more than the syncing one's
    // 1,500.
    let Some([writes, _, starts, journal_ns, blocked_ns]) = per
        .values()
        .filter(|[writes, bytes, ..]| *writes >= 5000 && *bytes < writes * 1024)
        .max_by_key(|[writes, ..]| *writes)
        .copied()
    else {
        return Check::new(
            JOURNAL_WAIT_NAME,
            false,
            format!("no dd wrote 5,000 calls or more of 512 bytes: {per:?}"),
        );
    };
    let skipped = skipped_runs(Some(summary), &|p| {
        p == "sys_enter_write" || p == "sys_exit_write"
    });
    Check::new(
        JOURNAL_WAIT_NAME,
        journal_ns > 0 && starts > 0 && journal_ns <= blocked_ns,
        format!(
            "write_journal {hook}: the appender's {writes} write calls started {starts} journal \
             handles and waited {:.1} ms in them, of {:.1} ms blocked; {skipped} runs of the \
             write programs skipped by the kernel",
            journal_ns as f64 / 1e6,
            blocked_ns as f64 / 1e6
        ),
    )
}

/// The hook the trace's summary names for `concept`, or why none.
fn hook_of(summary: &Value, concept: &str) -> Result<String, String> {
    let c = summary["probes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["concept"] == concept)
        .ok_or_else(|| format!("{concept} not in the plan"))?;
    match c["hook"].as_str() {
        Some(hook) => Ok(hook.split(' ').next().unwrap_or(hook).to_string()),
        None => Err(format!(
            "{concept}: {}",
            c["reason"].as_str().unwrap_or("no hook")
        )),
    }
}

/// The dd's sync lines with the parts function hooks measured. `lines`
/// end with the summary ([`parse_lines`]).
fn waits(lines: &[Value], mine: &[&Value]) -> Check {
    let summary = &lines[lines.len() - 1];
    let (waits, journal) = (
        hook_of(summary, "sync_waits"),
        hook_of(summary, "journal_wait"),
    );
    if let (Err(w), Err(j)) = (&waits, &journal) {
        return Check::not_given(WAITS_NAME, format!("{w}; {j}"));
    }
    let has = |l: &Value, part: &str| {
        l["measured"]
            .as_array()
            .is_some_and(|m| m.iter().any(|p| p == part))
    };
    // ext4's flush is measured with the page wait (one candidate): 0 when
    // the commit carried it.
    let waited = mine
        .iter()
        .filter(|l| has(l, "wait") && has(l, "flush"))
        .count();
    let journaled: Vec<&&Value> = mine.iter().filter(|l| has(l, "journal")).collect();
    // The commit the hook named ended inside the fsync.
    let inside = |l: &Value| {
        let (start, total) = (l["start_ns"].as_u64(), l["total_ns"].as_u64());
        let end = l["commit"]["end_ns"].as_u64();
        matches!((start, total, end), (Some(s), Some(t), Some(e)) if e > s && e <= s + t)
    };
    let named = journaled.iter().filter(|l| inside(l)).count();
    let strays = journaled
        .iter()
        .filter(|l| !l["commit"].is_null() && !inside(l))
        .count();
    // A span or wait program's run the kernel skipped (PREEMPT_RT: a
    // kprobe while another BPF program is preempted on that CPU,
    // kernel/trace/bpf_trace.c `trace_call_bpf`) leaves a line without
    // the part it would have marked: allowed, one line per skipped run.
    let skipped = skipped_runs(Some(summary), &|p| {
        SPAN_PROGRAMS.contains(&p) || WAIT_PROGRAM_PARTS.iter().any(|w| p.contains(w))
    }) as usize;
    let unmeasured = mine.len() - waited;
    let pass = !mine.is_empty()
        && (waits.is_err() || unmeasured <= skipped)
        && (journal.is_err() || (named > 0 && strays == 0));
    let kind = |h: &Result<String, String>| h.clone().unwrap_or_else(|_| "-".into());
    Check::new(
        WAITS_NAME,
        pass,
        format!(
            "sync_waits {}, journal_wait {}: of {} dd sync lines {waited} with the page wait \
             and flush measured, {} with the journal wait, {named} naming a commit that ended inside, \
             {strays} one that did not; {skipped} runs of the span and wait programs skipped",
            kind(&waits),
            kind(&journal),
            mine.len(),
            journaled.len()
        ),
    )
}

/// Flush requests completed, field 16 of a /sys/block/DEV/stat line.
fn flush_count(stat: &str) -> Option<u64> {
    stat.split_whitespace().nth(15)?.parse().ok()
}

/// The empty flushes of device `dev` in the interval lines against the
/// growth of its flush counter between `stat0` and `stat1`. The guest is
/// idle but for the writes, so the two windows hold the same flushes.
fn flushes(lines: &[Value], dev: &str, [stat0, stat1]: [&str; 2]) -> Check {
    let (Some(before), Some(after)) = (flush_count(stat0), flush_count(stat1)) else {
        return Check::new(FLUSH_NAME, false, format!("no flush counter for {dev:?}"));
    };
    let mut classes: std::collections::BTreeMap<String, u64> = Default::default();
    for l in lines {
        if l["type"] != "interval" {
            continue;
        }
        let devices = l["devices"].as_array().into_iter().flatten();
        for f in devices
            .filter(|d| d["dev"] == dev)
            .flat_map(|d| d["flushes"].as_array().into_iter().flatten())
        {
            let kind = f["kind"].as_str().unwrap_or("?").to_string();
            *classes.entry(kind).or_default() += f["requests"].as_u64().unwrap_or(0);
        }
    }
    let counted = after.saturating_sub(before);
    let traced = classes.get("flush").copied().unwrap_or(0);
    Check::new(
        FLUSH_NAME,
        counted > 0 && traced == counted,
        format!(
            "{dev}: {traced} empty flush requests traced, {counted} by the disk's flush \
             counter; by class {classes:?}"
        ),
    )
}

/// `lines` end with the summary ([`parse_lines`]).
fn split(lines: &[Value], mine: &[&Value]) -> Check {
    let summary = lines.last();
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
    let pass = dsync <= DSYNC_WRITES
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

    /// The three checks of a run that printed `lines`, then `summary`.
    fn checks(lines: &[String], summary: &str, stats: [&str; 2]) -> Vec<Check> {
        let mut text = lines.join("\n");
        text.push('\n');
        text.push_str(summary);
        judge_run(&text, "0\n", "", "254:0", stats)
    }

    fn run(lines: &[String], summary: &str) -> Check {
        checks(lines, summary, ["", ""]).remove(0)
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
        assert!(!judge_run("", "1\n", "wbscope: error: x", "254:0", ["", ""])[0].pass);
    }

    #[test]
    fn measured_waits_must_be_on_every_line_and_name_a_commit_inside() {
        let summary = |sync: &str, journal: &str| {
            format!(
                r#"{{"type":"summary","probes":[{{"concept":"sync_waits","hook":{sync}}},{{"concept":"journal_wait","hook":{journal},"reason":"no kprobes"}}]}}"#
            )
        };
        let line = |measured: &str, end: u64| {
            format!(
                r#"{{"type":"sync","comm":"dd","start_ns":100,"total_ns":50,"measured":[{measured}],"commit":{{"end_ns":{end}}}}}"#
            )
        };
        let hooked = summary(r#""fentry x""#, r#""kprobe y""#);
        let run = |lines: &[String], summary: &str| checks(lines, summary, ["", ""]).remove(1);
        let good = [
            line(r#""wait","flush","journal""#, 140),
            line(r#""wait","flush""#, 0),
        ];
        assert!(run(&good, &hooked).pass, "{}", run(&good, &hooked).detail);
        // A line without its page wait measured fails, unless a span or
        // wait program's run was skipped.
        let unwaited = [line(r#""wait","flush","journal""#, 140), line("", 0)];
        assert!(!run(&unwaited, &hooked).pass);
        let skipped = hooked.replace(
            r#""probes""#,
            r#""run_time":[{"program":"kretprobe_write_wait","recursion_misses":1}],"probes""#,
        );
        assert!(
            run(&unwaited, &skipped).pass,
            "{}",
            run(&unwaited, &skipped).detail
        );
        let other = hooked.replace(
            r#""probes""#,
            r#""run_time":[{"program":"handle_stats","recursion_misses":1}],"probes""#,
        );
        assert!(!run(&unwaited, &other).pass);
        // A named commit that ended after the fsync returned fails.
        let late = [line(r#""wait","flush","journal""#, 151)];
        assert!(!run(&late, &hooked).pass);
        // Without the journal hook only the waits are asked for.
        let no_journal = summary(r#""fentry x""#, "null");
        assert!(run(&[line(r#""wait","flush""#, 0)], &no_journal).pass);
        // Neither hook: not given, with the plan's reasons.
        let neither = run(&[line("", 0)], &summary("null", "null"));
        assert!(neither.not_given && neither.detail.contains("no kprobes"));
    }

    #[test]
    fn traced_flushes_must_be_the_disks_own_count() {
        let stat = |flushes: u64| format!("1 0 8 0 40 0 320 5 0 9 9 0 0 0 0 {flushes} 3\n");
        let interval = |n: u64| {
            format!(
                r#"{{"type":"interval","devices":[{{"dev":"254:0","flushes":[{{"kind":"flush","requests":{n}}},{{"kind":"fua","requests":2}}]}},{{"dev":"7:0","flushes":[{{"kind":"flush","requests":50}}]}}]}}"#
            )
        };
        let two = [interval(10), interval(13)];
        let run = |lines: &[String], stats: [&str; 2]| checks(lines, SUMMARY, stats).remove(2);
        assert!(run(&two, [&stat(100), &stat(123)]).pass);
        assert!(!run(&two, [&stat(100), &stat(124)]).pass);
        // None at all proves nothing.
        assert!(!run(&[], [&stat(5), &stat(5)]).pass);
        // A kernel without flush fields (before 5.5) is a failure said.
        let old_stat = "1 0 8 0 40 0 320 5 0 9 9\n";
        let old = run(&two, [old_stat, old_stat]);
        assert!(
            !old.pass && old.detail.contains("no flush counter"),
            "{}",
            old.detail
        );
    }
}
