//! The cgroup v2 checks (dev/vm/guest/checks.sh, `cgroup_owners` and
//! `cgroup_doctor`): whose writes are these (each cgroup's calls and
//! charged pages) and a memcg's dirty limit named by doctor. The host's memory controller is on
//! cgroup v1, so only the guests can show cgroup writeback.
use std::path::Path;

use serde_json::Value;

use crate::{
    checks::{Check, exit_reason, last_line, parse_lines},
    kernel_counts,
};

/// 16 MiB in 4 KiB pages: what each cgroup's writer writes.
const CGROUP_PAGES: i64 = (16 << 20) / 4096;

/// The two writers' cgroups (directories under the guest's cgroup2 mount).
const CGROUPS: &[&str] = &["a", "b"];

/// Both checks, from the files in `out`.
pub(crate) fn judge(out: &Path) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    if !out.join("cg-owners.rc").exists() {
        let why = format!(
            "the guest set up no cgroup v2 with memory and io: {}",
            last_line(&read("cgroup.log"))
        );
        return vec![
            Check::new("cgroup-owners", false, why.clone()),
            Check::new("doctor-memcg-throttled", false, why),
        ];
    }
    let writers: Vec<Writer> = CGROUPS
        .iter()
        .map(|cg| {
            Writer::parse(
                cg,
                &read(&format!("cg-{cg}.stat")),
                &read(&format!("cg-{cg}.id")),
            )
        })
        .collect();
    let mut owners = owners(
        &read("cg-owners.jsonl"),
        &read("cg-owners.rc"),
        &read("cg-owners.err"),
        &writers,
    );
    // Two fsyncs in ext4_writepages at once: what a kretprobe with the
    // kernel's default maxactive missed beside wbscope's (checks.rs).
    if let Some(note) = kernel_counts::kretprobe_note(&read("cg-owners.kprobe-profile")) {
        owners.detail.push_str("; ");
        owners.detail.push_str(&note);
    }
    vec![
        owners,
        memcg_throttled(
            &read("cg-doctor.json"),
            &read("cg-doctor.rc"),
            &read("cg-doctor.err"),
            &read("cg-doctor.dd-ms"),
            &Pauses::parse(&read("cg-doctor.jsonl")),
            &read("cg-small.id"),
        ),
    ]
}

/// One cgroup's writer: the cgroup's id and the file it wrote.
#[derive(Debug)]
struct Writer {
    cgroup: String,
    id: Option<u64>,
    /// `major:minor` and inode.
    file: Option<(String, u64)>,
}

impl Writer {
    fn parse(cgroup: &str, stat: &str, id: &str) -> Writer {
        let mut it = stat.split_whitespace();
        let file = (|| {
            let dev: u64 = it.next()?.parse().ok()?;
            let ino: u64 = it.next()?.parse().ok()?;
            Some((format!("{}:{}", libc::major(dev), libc::minor(dev)), ino))
        })();
        Writer {
            cgroup: cgroup.to_string(),
            id: id.trim().parse().ok(),
            file,
        }
    }
}

/// Whose writes: every call writing a cgroup's file names that cgroup as
/// `owner_cgroup_id`, the calls write the file's 4096 pages, and the pages
/// charged to the cgroup — `dirtiers` of all calls and `owners`'
/// `pages_written` of all intervals — are those 4096.
///
/// Or, for a writer whose file's calls name no owner and charge no one,
/// its inode's one dirtying run was skipped by the kernel and counted:
/// on a PREEMPT_RT kernel whose tracepoints run preemptibly (7.3-rt) a
/// tp_btf run is skipped while another run of it is preempted on that
/// CPU (`recursion_misses`, docs/toolchain.md). Allowed only up to the
/// skipped runs of the dirtying programs, and said. Likewise a writer
/// whose file has no call at all, up to the skipped runs of the call's
/// own start and end programs: the two fsyncs run inside
/// `ext4_writepages()` at once, and on 7.3 (lazy preemption, tracepoint
/// probes under SRCU) one call's raw_tp end was skipped while the other's
/// was preempted on the guest's one CPU.
fn owners(jsonl: &str, rc: &str, stderr: &str, writers: &[Writer]) -> Check {
    const NAME: &str = "cgroup-owners";
    let lines = match parse_lines(jsonl, rc, stderr) {
        Ok(l) => l,
        Err(why) => return Check::new(NAME, false, why),
    };
    let calls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "call").collect();
    let summary = lines.iter().rev().find(|l| l["type"] == "summary");
    let mut skipped =
        kernel_counts::skipped_runs(summary, &|p| kernel_counts::DIRTYING_PROGRAMS.contains(&p));
    let mut calls_skipped =
        kernel_counts::skipped_runs(summary, &|p| kernel_counts::EXT4_CALL_PROGRAMS.contains(&p));
    let mut pass = true;
    let mut details = Vec::new();
    for w in writers {
        let (Some(id), Some((dev, ino))) = (w.id, &w.file) else {
            pass = false;
            details.push(format!("{}: no cgroup id or no stat of its file", w.cgroup));
            continue;
        };
        let file: Vec<&&Value> = calls
            .iter()
            .filter(|c| c["dev"] == dev.as_str() && c["ino"] == *ino)
            .collect();
        let written: i64 = file
            .iter()
            .filter_map(|c| c["pages_written"].as_i64())
            .sum();
        let owned = file
            .iter()
            .filter(|c| c["owner_cgroup_id"].as_u64() == Some(id))
            .count();
        let others: Vec<String> = file
            .iter()
            .map(|c| c["owner_cgroup_id"].to_string())
            .filter(|o| *o != id.to_string())
            .collect();
        let dirtiers: i64 = calls
            .iter()
            .filter_map(|c| c["dirtiers"].as_array())
            .flatten()
            .filter(|d| d["cgroup_id"].as_u64() == Some(id))
            .filter_map(|d| d["pages"].as_i64())
            .sum();
        let rows = lines
            .iter()
            .filter(|l| l["type"] == "interval")
            .filter_map(|l| l["owners"].as_array())
            .flatten()
            .filter(|o| o["cgroup_id"].as_u64() == Some(id));
        let (mut owners_written, mut owners_dirtied) = (0i64, 0i64);
        for o in rows {
            owners_written += o["pages_written"].as_i64().unwrap_or(0);
            owners_dirtied += o["pages_dirtied"].as_i64().unwrap_or(0);
        }
        // `pages_dirtied`: the kernel's per-task count, read by the task
        // iterator and at the writer's exit, true after the drop.
        let charged = owned == file.len()
            && dirtiers == CGROUP_PAGES
            && owners_written == CGROUP_PAGES
            && owners_dirtied == CGROUP_PAGES;
        // No owner anywhere and nothing charged: the writer's dirtying
        // was not seen at all, which a counted skip accounts for.
        let unseen = owned == 0
            && file.iter().all(|c| c["owner_cgroup_id"].is_null())
            && dirtiers == 0
            && owners_written == 0;
        let excused = !charged && unseen && skipped > 0;
        if excused {
            skipped -= 1;
        }
        // No call at all: its start or end run was skipped, counted.
        let call_lost = file.is_empty() && calls_skipped > 0;
        if call_lost {
            calls_skipped -= 1;
        }
        pass &= call_lost || (!file.is_empty() && written == CGROUP_PAGES && (charged || excused));
        let mut wrong = if others.is_empty() {
            String::new()
        } else {
            format!(" (others: {})", others.join(", "))
        };
        if excused {
            wrong.push_str(
                " (its inode's dirtying run was skipped by the kernel: recursion_misses of \
                 the dirtying program)",
            );
        }
        if call_lost {
            wrong.push_str(
                " (its call's start or end run was skipped by the kernel: recursion_misses of \
                 the call's programs)",
            );
        }
        details.push(format!(
            "cgroup {} id {id}: {} call(s) on {dev} ino {ino}, {written} pages, {owned} with \
             owner_cgroup_id {id}{wrong}; charged {dirtiers} pages in dirtiers, {owners_written} \
             written / {owners_dirtied} dirtied in owners",
            w.cgroup,
            file.len()
        ));
    }
    Check::new(NAME, pass, details.join("; "))
}

/// Dirty-throttled by a memcg: doctor's report has `dirty-throttled` with `limit` "memcg" for
/// a writer in a 64 MiB cgroup, `write-stalled` on its writes' throttle by
/// that memcg, and names that cgroup (`memcg_id`, the id the guest read). Without the programs' split (a kernel whose
/// tracepoint has no `limit`) it can only say `bdi-or-memcg`, which then
/// passes and says so.
fn memcg_throttled(
    json: &str,
    rc: &str,
    stderr: &str,
    dd_ms: &str,
    pauses: &Pauses,
    memcg_id: &str,
) -> Check {
    const NAME: &str = "doctor-memcg-throttled";
    // doctor exits 3 when it saw a warning or critical finding.
    if !matches!(rc.trim(), "0" | "3") {
        return Check::new(NAME, false, exit_reason("wbscope doctor", rc, stderr));
    }
    let report: Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return Check::new(NAME, false, format!("wbscope doctor --json: {e}")),
    };
    let writer = match dd_ms.trim().parse::<f64>() {
        Ok(ms) => format!("128 MiB written in {:.1} s; {pauses}", ms / 1000.0),
        Err(_) => format!("writer's time not recorded; {pauses}"),
    };
    let names: Vec<&str> = report["findings"]
        .as_array()
        .map(|f| f.iter().filter_map(|f| f["name"].as_str()).collect())
        .unwrap_or_default();
    let Some(found) = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "dirty-throttled"))
    else {
        return Check::new(
            NAME,
            false,
            format!(
                "no dirty-throttled (findings: [{}]); {writer}",
                names.join(", ")
            ),
        );
    };
    let ev = &found["evidence"];
    let limit = ev["limit"].as_str().unwrap_or("none");
    let named = ev["memcg_cgroup_id"].as_u64();
    let (pass, why) = match limit {
        // Which memcg: the writer's cgroup (its directory's inode number
        // is the cgroup id on cgroup v2).
        "memcg" if named.is_some() && named == memcg_id.trim().parse().ok() => {
            (true, format!(" (cgroup id {})", memcg_id.trim()))
        }
        "memcg" => (
            false,
            format!(
                " naming cgroup {:?}, the writer's is {}",
                named,
                memcg_id.trim()
            ),
        ),
        "bdi-or-memcg" => (
            true,
            " (no split: this kernel's tracepoint gives no limit)".to_string(),
        ),
        _ => (false, String::new()),
    };
    // The writer's write calls (doctor spans them): slow, asleep in the
    // memcg's throttle, where the programs split the pauses.
    let stalled = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "write-stalled"));
    let (writes_pass, writes) = match stalled {
        None => (false, "no write-stalled".to_string()),
        Some(w) => {
            let ev = &w["evidence"];
            let by: Vec<&str> = ev["throttled_by"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let pass = ev["part"] == "throttle" && (limit != "memcg" || by.contains(&"memcg"));
            (
                pass,
                format!(
                    "write-stalled {} part {} ({}), p99 {} ms, throttled by [{}]",
                    w["severity"].as_str().unwrap_or("?"),
                    ev["part"].as_str().unwrap_or("?"),
                    ev["part_share"],
                    ev["p99_ms"],
                    by.join(", ")
                ),
            )
        }
    };
    Check::new(
        NAME,
        pass && writes_pass,
        format!(
            "dirty-throttled {} limit {limit}{why}, pause_s_per_s {}, pause_ms_by_limit {}, dirty \
             {} MiB of global threshold {} MiB; {writes}; {writer}",
            found["severity"].as_str().unwrap_or("?"),
            ev["pause_s_per_s"],
            ev["pause_ms_by_limit"],
            ev["dirty_mib"],
            ev["dirty_threshold_mib"],
        ),
    )
}

/// The `balance_dirty_pages` pauses of the watch's interval lines (its
/// recording replayed), whatever doctor concluded from them.
#[derive(Debug, Default)]
struct Pauses {
    intervals: usize,
    pause_ms: u64,
    /// global, bdi, memcg ms.
    by_limit: [u64; 3],
    /// The most paused interval, in task-seconds per second.
    peak_s_per_s: f64,
}

impl Pauses {
    fn parse(jsonl: &str) -> Pauses {
        let mut p = Pauses::default();
        let lines = jsonl
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["type"] == "interval");
        for l in lines {
            p.intervals += 1;
            let t = &l["throttle"];
            let ms = t["pause_ms_total"].as_u64().unwrap_or(0);
            p.pause_ms += ms;
            for (i, k) in ["global_ms", "bdi_ms", "memcg_ms"].iter().enumerate() {
                p.by_limit[i] += t["limits"][k].as_u64().unwrap_or(0);
            }
            if let Some(s) = l["interval_s"].as_f64().filter(|s| *s > 0.0) {
                p.peak_s_per_s = p.peak_s_per_s.max(ms as f64 / 1000.0 / s);
            }
        }
        p
    }
}

impl std::fmt::Display for Pauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [g, b, m] = self.by_limit;
        write!(
            f,
            "{} interval(s) recorded: {} ms of pauses (global {g}, bdi {b}, memcg {m}), \
             peak {:.2} s/s",
            self.intervals, self.pause_ms, self.peak_s_per_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writers() -> Vec<Writer> {
        let dev = (254u64 << 8).to_string();
        vec![
            Writer::parse("a", &format!("{dev} 12"), "40\n"),
            Writer::parse("b", &format!("{dev} 13"), "41\n"),
        ]
    }

    fn call(ino: u64, owner: u64, pages: i64, dirtier_cg: u64) -> String {
        format!(
            r#"{{"type":"call","dev":"254:0","ino":{ino},"pages_written":{pages},"owner_cgroup_id":{owner},"dirtiers":[{{"pid":7,"comm":"dd","cgroup_id":{dirtier_cg},"pages":{pages}}}]}}"#
        )
    }

    fn interval(rows: &[(u64, i64)]) -> String {
        let rows: Vec<String> = rows
            .iter()
            .map(|(cg, p)| {
                format!(r#"{{"pid":7,"comm":"dd","cgroup_id":{cg},"pages_dirtied":{p},"pages_written":{p}}}"#)
            })
            .collect();
        format!(r#"{{"type":"interval","owners":[{}]}}"#, rows.join(","))
    }

    const SUMMARY: &str = r#"{"type":"summary","lost_records":0}"#;

    #[test]
    fn each_cgroup_owns_its_file_and_its_pages() {
        let good = [
            call(12, 40, 3000, 40),
            call(12, 40, 1096, 40),
            call(13, 41, 4096, 41),
            interval(&[(40, 4096), (41, 4096)]),
            SUMMARY.into(),
        ]
        .join("\n");
        let c = owners(&good, "0\n", "", &writers());
        assert!(c.pass, "{c}");
        assert!(c.detail.contains("cgroup a id 40: 2 call(s)"), "{c}");

        // b's file written back as owned by the root cgroup: fail, and say so.
        let root_owned = good.replace(
            r#""ino":13,"pages_written":4096,"owner_cgroup_id":41"#,
            r#""ino":13,"pages_written":4096,"owner_cgroup_id":1"#,
        );
        let c = owners(&root_owned, "0", "", &writers());
        assert!(!c.pass && c.detail.contains("(others: 1)"), "{c}");

        // b's pages charged to a's cgroup in the dirtiers: fail.
        let swapped = [
            call(12, 40, 4096, 40),
            call(13, 41, 4096, 40),
            interval(&[(40, 4096), (41, 4096)]),
            SUMMARY.into(),
        ]
        .join("\n");
        assert!(!owners(&swapped, "0", "", &writers()).pass);

        // Missing interval owners rows: fail.
        let no_owners = [
            call(12, 40, 4096, 40),
            call(13, 41, 4096, 41),
            SUMMARY.into(),
        ]
        .join("\n");
        let c = owners(&no_owners, "0", "", &writers());
        assert!(!c.pass && c.detail.contains("0 written"), "{c}");

        // b's dirtying never seen (no owner, nothing charged): a fail,
        // unless the kernel counted a skipped run of the dirtying program.
        let unseen = [
            call(12, 40, 4096, 40),
            r#"{"type":"call","dev":"254:0","ino":13,"pages_written":4096,"owner_cgroup_id":null,"dirtiers":[{"pid":0,"comm":"(unknown)","cgroup_id":0,"pages":4096}]}"#.into(),
            interval(&[(40, 4096)]),
        ];
        let c = owners(
            &[&unseen[..], &[SUMMARY.into()]].concat().join("\n"),
            "0",
            "",
            &writers(),
        );
        assert!(!c.pass, "{c}");
        let skipped = r#"{"type":"summary","lost_records":0,"run_time":[{"program":"tp_btf_dirty_inode","run_count":2,"run_time_ns":9,"recursion_misses":1}]}"#;
        let c = owners(
            &[&unseen[..], &[skipped.into()]].concat().join("\n"),
            "0",
            "",
            &writers(),
        );
        assert!(
            c.pass && c.detail.contains("dirtying run was skipped"),
            "{c}"
        );
        // A skipped run of another program accounts for nothing.
        let other = skipped.replace("tp_btf_dirty_inode", "kprobe_scan");
        assert!(
            !owners(
                &[&unseen[..], &[other]].concat().join("\n"),
                "0",
                "",
                &writers()
            )
            .pass
        );
        // One skip excuses one writer, not two.
        let both_unseen = [
            unseen[1].replace(r#""ino":13"#, r#""ino":12"#),
            unseen[1].clone(),
            skipped.to_string(),
        ]
        .join("\n");
        assert!(!owners(&both_unseen, "0", "", &writers()).pass);

        // b's file has no call: a fail, unless the kernel counted a
        // skipped run of the call's start or end program, once.
        let no_call = [call(12, 40, 4096, 40), interval(&[(40, 4096)])];
        let with = |summary: &str| {
            owners(
                &[&no_call[..], &[summary.to_string()]].concat().join("\n"),
                "0",
                "",
                &writers(),
            )
        };
        assert!(!with(SUMMARY).pass);
        let end_skipped = skipped.replace("tp_btf_dirty_inode", "raw_tp_writepages_end");
        let c = with(&end_skipped);
        assert!(
            c.pass && c.detail.contains("call's start or end run was skipped"),
            "{c}"
        );
        assert!(!with(&skipped.replace("tp_btf_dirty_inode", "kprobe_scan")).pass);

        let crashed = owners("", "101", "wbscope: boom\n", &writers());
        assert_eq!(crashed.detail, "wbscope trace exited 101: wbscope: boom");
    }

    #[test]
    fn doctor_must_name_the_memcg_limit() {
        let with_writes = |limit: &str, part: &str| {
            format!(
                r#"{{"duration_s":25,"findings":[{{"name":"dirty-throttled","severity":"critical","evidence":{{"limit":"{limit}","memcg_cgroup_id":61,"pause_s_per_s":0.9,"pause_ms_by_limit":{{"global":0,"bdi":10,"memcg":900}}}}}},{{"name":"write-stalled","severity":"critical","evidence":{{"part":"{part}","part_share":0.9,"p99_ms":700.0,"throttled_by":["memcg"]}}}}]}}"#
            )
        };
        let report = |limit: &str| with_writes(limit, "throttle");
        let lines = [
            r#"{"type":"interval","interval_s":1.0,"throttle":{"pause_ms_total":0,"limits":null}}"#,
            r#"{"type":"interval","interval_s":0.5,"throttle":{"pause_ms_total":300,"limits":{"global_ms":0,"bdi_ms":100,"memcg_ms":200}}}"#,
        ]
        .join("\n");
        let pauses = Pauses::parse(&lines);
        let c = memcg_throttled(&report("memcg"), "3\n", "", "20000\n", &pauses, "61\n");
        assert!(c.pass, "{c}");
        assert!(
            c.detail.ends_with(
                "128 MiB written in 20.0 s; 2 interval(s) recorded: 300 ms of pauses \
                 (global 0, bdi 100, memcg 200), peak 0.60 s/s"
            ),
            "{c}"
        );
        let quiet = Pauses::default();
        // The writes stalled in something else than the throttle: fails.
        let c = memcg_throttled(&with_writes("memcg", "other"), "3", "", "", &quiet, "61");
        assert!(!c.pass && c.detail.contains("part other"), "{c}");
        let c = memcg_throttled(&report("bdi-or-memcg"), "3", "", "", &quiet, "61");
        assert!(c.pass && c.detail.contains("no split"), "{c}");
        assert!(!memcg_throttled(&report("global"), "3", "", "", &quiet, "61").pass);
        assert!(!memcg_throttled(&report("bdi"), "3", "", "", &quiet, "61").pass);
        // Another cgroup named, or none: fails.
        let c = memcg_throttled(&report("memcg"), "3", "", "", &quiet, "23");
        assert!(!c.pass && c.detail.contains("the writer's is 23"), "{c}");
        let other = r#"{"findings":[{"name":"page-cache-cliff"}]}"#;
        let none = memcg_throttled(other, "3", "", "", &pauses, "61");
        assert!(
            !none.pass
                && none.detail.contains("[page-cache-cliff]")
                && none.detail.contains("peak 0.60"),
            "{none}"
        );
        let failed = memcg_throttled("", "1", "wbscope: no BTF\n", "", &quiet, "61");
        assert!(
            !failed.pass && failed.detail.ends_with("no BTF"),
            "{failed}"
        );
    }

    #[test]
    fn no_cgroups_fails_both_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("wbscope-cg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cgroup.log"),
            "mount: unknown filesystem type 'cgroup2'\n",
        )
        .unwrap();
        let checks = judge(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(checks.len(), 2);
        assert!(
            checks
                .iter()
                .all(|c| !c.pass && c.detail.contains("'cgroup2'"))
        );
    }
}
