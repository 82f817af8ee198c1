//! The fsync storm in small (checks.sh `storm_run`): `STORM_FILES` files
//! of one page, each written and fsync'ed by a dd of its own, under one
//! `wbscope trace --events` with the default hooks. Under TCG a
//! program's nanoseconds say nothing of a real CPU, so what the guests
//! show of the storm's cost is the programs' runs per writepages call
//! (the host's `cargo xtask bench fsync-storm` has the nanoseconds); and
//! each file's one page must be in its calls, as on every other run.
use std::{collections::BTreeMap, path::Path};

use serde_json::Value;

use super::{
    checks::{Check, parse_lines, parse_stat},
    kernel_counts::{EXT4_CALL_PROGRAMS, skipped_runs},
};

const NAME: &str = "storm-calls";

/// The storm's check, or `None` when the guest made no storm run.
pub(crate) fn judge(out: &Path) -> Option<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    out.join("storm.rc").exists().then(|| {
        storm_calls(
            parse_lines(&read("storm.jsonl"), &read("storm.rc"), &read("storm.err")),
            &read("storm.stat"),
        )
    })
}

fn storm_calls(lines: Result<Vec<Value>, String>, stat: &str) -> Check {
    let lines = match lines {
        Ok(lines) => lines,
        Err(why) => return Check::new(NAME, false, why),
    };
    let files: Vec<(String, u64)> = stat.lines().filter_map(parse_stat).collect();
    let Some(summary) = lines.last() else {
        return Check::new(NAME, false, "no output".into());
    };
    let calls = summary["calls"].as_u64().unwrap_or(0);
    let lost = summary["lost_records"].as_u64().unwrap_or(0);
    // Each file's pages over its calls: one each.
    let mut pages: BTreeMap<(&str, u64), i64> =
        files.iter().map(|(d, i)| ((d.as_str(), *i), 0)).collect();
    for c in lines.iter().filter(|l| l["type"] == "call") {
        let (Some(dev), Some(ino)) = (c["dev"].as_str(), c["ino"].as_u64()) else {
            continue;
        };
        if let Some(p) = pages.get_mut(&(dev, ino)) {
            *p += c["pages_written"].as_i64().unwrap_or(0);
        }
    }
    let exact = pages.values().filter(|&&p| p == 1).count();
    let missing = pages.values().filter(|&&p| p == 0).count();
    // A call whose entry or exit run the kernel skipped (recursion_misses)
    // is in no record: its file may show no page, never a wrong count.
    let skipped = skipped_runs(Some(summary), &|p| EXT4_CALL_PROGRAMS.contains(&p)) as usize;
    let runs: Vec<(&str, u64)> = summary["run_time"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["program"].as_str()?, r["run_count"].as_u64()?)))
        .filter(|&(_, n)| n > 0)
        .collect();
    // The call's own start and end programs run once per call.
    let call_programs: Vec<(&str, u64)> = runs
        .iter()
        .copied()
        .filter(|(p, _)| EXT4_CALL_PROGRAMS.contains(p))
        .collect();
    let once = call_programs
        .iter()
        .all(|&(_, n)| n == calls || (skipped > 0 && n <= calls + skipped as u64));
    let per_call = |n: u64| n as f64 / calls.max(1) as f64;
    let table = runs
        .iter()
        .map(|&(p, n)| format!("{p} {:.2}", per_call(n)))
        .collect::<Vec<_>>()
        .join(", ");
    let total: u64 = runs.iter().map(|&(_, n)| n).sum();
    let pass = !files.is_empty()
        && exact + missing == files.len()
        && missing <= skipped
        && calls >= (files.len() - missing) as u64
        && call_programs.len() >= 2
        && once
        && lost == 0;
    Check::new(
        NAME,
        pass,
        format!(
            "{exact} of {} files with their one page counted ({missing} with none, {skipped} runs \
             of the call's programs skipped by the kernel); {calls} calls; program runs per call: \
             {:.2} in all ({table}); {lost} lost records",
            files.len(),
            per_call(total)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "65024 12\n65024 13\n";

    fn lines(calls: &[(u64, i64)], summary: &str) -> Result<Vec<Value>, String> {
        let mut v: Vec<Value> = calls
            .iter()
            .map(|&(ino, pages)| {
                serde_json::json!({"type": "call", "dev": "254:0", "ino": ino, "pages_written": pages})
            })
            .collect();
        v.push(serde_json::from_str(summary).unwrap());
        Ok(v)
    }

    const SUMMARY: &str = r#"{"type":"summary","calls":2,"lost_records":0,"run_time":[
        {"program":"kprobe_writepages","run_count":2},
        {"program":"kretprobe_writepages","run_count":2},
        {"program":"tp_btf_dirty_inode","run_count":2},
        {"program":"block_rq","run_count":6}]}"#;

    #[test]
    fn a_storm_with_each_page_once_passes_and_says_its_runs() {
        let c = storm_calls(lines(&[(12, 1), (13, 1)], SUMMARY), STAT);
        assert!(c.pass, "{}", c.detail);
        assert!(
            c.detail.contains("runs per call: 6.00 in all"),
            "{}",
            c.detail
        );
        assert!(c.detail.contains("kprobe_writepages 1.00"), "{}", c.detail);
        assert!(c.detail.contains("block_rq 3.00"), "{}", c.detail);
    }

    #[test]
    fn a_page_counted_twice_or_lost_or_a_second_run_per_call_fails() {
        let twice = storm_calls(lines(&[(12, 1), (13, 1), (13, 1)], SUMMARY), STAT);
        assert!(!twice.pass, "{}", twice.detail);
        let lost = storm_calls(lines(&[(12, 1)], SUMMARY), STAT);
        assert!(!lost.pass, "{}", lost.detail);
        let doubled = SUMMARY.replace(
            r#""kretprobe_writepages","run_count":2"#,
            r#""kretprobe_writepages","run_count":3"#,
        );
        let extra = storm_calls(lines(&[(12, 1), (13, 1)], &doubled), STAT);
        assert!(!extra.pass, "{}", extra.detail);
        let dropped = SUMMARY.replace(r#""lost_records":0"#, r#""lost_records":1"#);
        assert!(!storm_calls(lines(&[(12, 1), (13, 1)], &dropped), STAT).pass);
        assert!(!storm_calls(lines(&[(12, 1), (13, 1)], SUMMARY), "").pass);
        assert!(!storm_calls(Err("wbscope trace exited 1".into()), STAT).pass);
    }

    /// A call lost to a run the kernel skipped leaves its file without a
    /// page, which the skipped run accounts for.
    #[test]
    fn a_file_whose_call_a_skipped_run_lost_is_allowed() {
        let summary = r#"{"type":"summary","calls":1,"lost_records":0,"run_time":[
            {"program":"kprobe_writepages","run_count":2},
            {"program":"kretprobe_writepages","run_count":1,"recursion_misses":1}]}"#;
        let c = storm_calls(lines(&[(12, 1)], summary), STAT);
        assert!(c.pass, "{}", c.detail);
        assert!(c.detail.contains("1 with none, 1 runs"), "{}", c.detail);
    }
}
