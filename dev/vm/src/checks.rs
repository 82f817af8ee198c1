//! Pass/fail decisions over what the guest wrote to its output share
//! (dev/vm/guest/checks.sh). Everything is judged here, on the host, so the
//! guest needs no JSON tooling and the rules are unit-tested.
use std::{fmt, path::Path};

use serde_json::Value;

use crate::kernel_counts::{
    EXT4_CALL_PROGRAMS, GENERIC_CALL_PROGRAMS, kretprobe_note, skipped_runs,
};

/// 64 MiB in 4 KiB pages: what the traced write + fsync must add up to.
const EXPECTED_PAGES: i64 = (64 << 20) / 4096;

/// A large folio can overshoot the budget by `folio_nr_pages - 1` pages
/// (docs/probes.md, "What the per-call figures mean").
const FOLIO_SLACK: i64 = 511;

/// The traced runs the guest makes: name, what was disabled, and the hook
/// kinds its writepages call may use.
const RUNS: &[(&str, &str, &[&str])] = &[
    ("default", "", CALL_KINDS),
    ("kprobes", "fentry,tp_btf,raw_tp", &["kprobe"]),
    (
        "tracepoints-only",
        "fentry,kprobe,tp_btf,raw_tp",
        &["tracepoint"],
    ),
];

/// The kinds the plan picks for the writepages call where the kernel
/// loads them, before its kprobes (crates/tracer/src/plan.rs,
/// `candidates`): they see the call's inode and wbc without the per-CPU
/// guard kprobes share with the bpf() syscall's map reads.
const CALL_KINDS: &[&str] = &["fentry", "tp_btf", "raw_tp"];

/// Functions whose hooks serve the scan concept (plan.rs's candidates):
/// ext4's own scan pass first (what ext4 delalloc writeback runs), then
/// the generic page-cache walkers.
const SCAN_FUNCTIONS: &[&str] = &[
    "mpage_prepare_extent_to_map",
    "writeback_iter",
    "write_cache_pages",
];

/// Page size of the guests (x86_64), for scan bytes against pages.
const PAGE_BYTES: u64 = 4096;

const FUNCTION_KINDS: &[&str] = &["fentry", "kprobe"];

/// The xfs runs (checks.sh `xfs_run`): name, and the hook kind its
/// generic_call must use. The guest skips them when xfs cannot be made.
const XFS_RUNS: &[(&str, &str)] = &[
    ("xfs-fentry", "fentry"),
    ("xfs-kprobe", "kprobe"),
    ("xfs-derived", "tp_btf"),
];

/// The 8 MiB O_DSYNC writes of the xfs runs: each one fsync of 2048 pages.
const XFS_CALLS: usize = 8;

#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) pass: bool,
    /// The kernel cannot give what the check needs, for the reason the
    /// probe plan states (`detail`): neither a pass nor a failure.
    pub(crate) not_given: bool,
    pub(crate) detail: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match (self.not_given, self.pass) {
            (true, _) => "N/A",
            (false, true) => "PASS",
            (false, false) => "FAIL",
        };
        write!(f, "{}: {verdict} ({})", self.name, self.detail)
    }
}

impl Check {
    pub(crate) fn new(name: &str, pass: bool, detail: String) -> Check {
        Check {
            name: name.to_string(),
            pass,
            not_given: false,
            detail,
        }
    }

    /// A check this kernel cannot give, with the plan's reason.
    pub(crate) fn not_given(name: &str, reason: String) -> Check {
        Check {
            name: name.to_string(),
            pass: true,
            not_given: true,
            detail: reason,
        }
    }
}

/// Why the plan could not use a `kind` hook for `concept` on this kernel,
/// when `wbscope probes` rejected every such candidate: the reasons, as
/// the plan states them.
fn refused(probes: &Value, concept_name: &str, kind: &str) -> Option<String> {
    let c = concept(probes, concept_name)?;
    if c["kind"].as_str() == Some(kind) {
        return None;
    }
    let prefix = format!("{kind} ");
    let reasons: Vec<String> = c["rejected"]
        .as_array()?
        .iter()
        .filter(|r| r["hook"].as_str().is_some_and(|h| h.starts_with(&prefix)))
        .map(|r| {
            format!(
                "{}: {}",
                r["hook"].as_str().unwrap_or("?"),
                r["reason"].as_str().unwrap_or("no reason given")
            )
        })
        .collect();
    (!reasons.is_empty()).then(|| {
        format!(
            "{concept_name} has no {kind} hook on this kernel: {}",
            reasons.join("; ")
        )
    })
}

fn check(name: &str, pass: bool, detail: String) -> Check {
    Check::new(name, pass, detail)
}

/// All checks, from the files in `out`.
/// `xfs`: whether the guest was asked for its xfs runs (WBSCOPE_VM_STEPS).
pub(crate) fn judge(out: &Path, xfs: bool) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let mut checks = Vec::new();
    let probes = parse_probes(
        &read("probes.json"),
        &read("probes.rc"),
        &read("probes.err"),
    );
    let functions = scan_functions(&read("functions.txt"));
    checks.push(writepages_hook(&probes));
    checks.push(scan_function_hook(&probes, &functions));
    checks.push(map_memory(&probes));
    for (run, disabled, kinds) in RUNS {
        let trace = TraceRun::parse(
            &read(&format!("{run}.jsonl")),
            &read(&format!("{run}.rc")),
            &read(&format!("{run}.err")),
            &read(&format!("{run}.stat")),
        );
        let startup_s = read(&format!("{run}.startup-ms"))
            .trim()
            .parse::<f64>()
            .map_or(f64::NAN, |ms| ms / 1000.0);
        let mut c = pages(run, &trace, startup_s);
        if let Some(note) = kretprobe_note(&read(&format!("{run}.kprobe-profile"))) {
            c.detail.push_str("; ");
            c.detail.push_str(&note);
        }
        checks.push(c);
        checks.push(invariants(run, &trace));
        if *run == "default" {
            checks.push(function_hook_fields(&trace, scan_gap(&probes)));
        }
        checks.push(kind_of_run(run, disabled, kinds, &trace, &probes));
    }
    if out.join("xfs-fentry.rc").exists() {
        let mut hook_calls = None;
        for (run, kind) in XFS_RUNS {
            let trace = TraceRun::parse(
                &read(&format!("{run}.jsonl")),
                &read(&format!("{run}.rc")),
                &read(&format!("{run}.err")),
                &read(&format!("{run}.stat")),
            );
            let kprobe = KprobeCount::parse(&read(&format!("{run}.kprobe")));
            if let Some(why) = probes
                .as_ref()
                .ok()
                .and_then(|p| refused(p, "generic_call", kind))
                .or_else(|| unavailable(&trace, "generic_call"))
            {
                checks.push(Check::not_given(&format!("{run}-calls"), why));
                continue;
            }
            let mut c = xfs_calls(run, kind, &trace, &kprobe, hook_calls);
            // The first function-hook run that passed gives the count
            // the derived run is held to.
            if hook_calls.is_none() && *kind != "tp_btf" && c.pass {
                hook_calls = Some(trace.file_calls().len());
            }
            if let Some(note) = kretprobe_note(&read(&format!("{run}.kprobe-profile"))) {
                c.detail.push_str("; ");
                c.detail.push_str(&note);
            }
            checks.push(c);
        }
    } else if xfs {
        checks.push(check(
            "xfs-function-hook",
            false,
            "the guest made no xfs runs (mkfs.xfs or mount failed: see mkfs-xfs.log, \
             mount-xfs.log)"
                .into(),
        ));
    }
    checks
}

/// A tracefs kprobe event on `do_writepages` (checks.sh): the calls of
/// each address_space, and which address_space `dd` wrote.
#[derive(Debug, Default)]
struct KprobeCount {
    /// (task, map, nr) per hit.
    hits: Vec<(String, String, i64)>,
}

impl KprobeCount {
    /// Lines like `  dd-123  [000] ..... 1.5: dwp: (do_writepages+0x0/0x90)
    /// map=0xffff888004a1c0d8 nr=9223372036854775807`.
    fn parse(text: &str) -> KprobeCount {
        let hits = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(" dwp: "))
            .filter_map(|l| {
                let task = l.split_whitespace().next()?;
                let comm = task.rsplit_once('-').map_or(task, |(c, _)| c);
                let value = |key: &str| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .map(str::to_string)
                };
                let nr = value("nr=")?.parse().ok()?;
                Some((comm.to_string(), value("map=")?, nr))
            })
            .collect();
        KprobeCount { hits }
    }

    /// Calls on the address_space `dd` wrote through (its O_DSYNC fsyncs
    /// are its only do_writepages calls).
    fn file_calls(&self) -> Option<usize> {
        let map = &self.hits.iter().find(|(comm, _, _)| comm == "dd")?.1;
        Some(self.hits.iter().filter(|(_, m, _)| m == map).count())
    }
}

/// Why a run had no hook at all for `concept`, as its summary states it
/// (the derived generic calls need `iomap_writeback_folio`, which 5.10
/// lacks).
fn unavailable(trace: &TraceRun, concept: &str) -> Option<String> {
    let p = trace
        .summary()?
        .get("probes")?
        .as_array()?
        .iter()
        .find(|p| p["concept"] == concept)?;
    (p["state"].as_str() != Some("attached")).then(|| {
        format!(
            "{concept} {} in this run: {}",
            p["state"].as_str().unwrap_or("not attached"),
            p["reason"].as_str().unwrap_or("no reason given")
        )
    })
}

/// The kind of hook a run's concept used, from its summary.
fn concept_kind(trace: &TraceRun, concept: &str) -> String {
    trace
        .summary()
        .and_then(|s| s["probes"].as_array())
        .and_then(|p| p.iter().find(|p| p["concept"] == concept))
        .and_then(|p| p["hook"].as_str())
        .and_then(|h| h.split_whitespace().next())
        .unwrap_or("nothing")
        .to_string()
}

/// One xfs run: its generic calls for the file add up to the 64 MiB, one
/// per 8 MiB write; with a function hook, as many calls as the kprobe
/// event counted on the file's address_space, each closed by the hook;
/// derived, as many as the function-hook run had.
fn xfs_calls(
    run: &str,
    kind: &str,
    trace: &TraceRun,
    kprobe: &KprobeCount,
    hook_calls: Option<usize>,
) -> Check {
    let name = format!("{run}-calls");
    if let Some(why) = &trace.broken {
        return check(&name, false, why.clone());
    }
    let calls = trace.file_calls();
    let pages: i64 = calls
        .iter()
        .filter_map(|c| c["pages_written"].as_i64())
        .sum();
    let hooked = calls.iter().filter(|c| c["boundary"] == "hook").count();
    let xfs = calls.iter().filter(|c| c["fs"] == "xfs").count();
    let used = concept_kind(trace, "generic_call");
    let lost = trace
        .summary()
        .and_then(|s| s["lost_records"].as_u64())
        .unwrap_or(0);
    let kprobe_calls = kprobe.file_calls();
    let total_hook = trace
        .calls()
        .filter(|c| c["boundary"] == "hook" && c["fs"] != "ext4")
        .count();
    // Calls that ended with no start seen (`unmatched_results`): on
    // PREEMPT_RT the kernel skips a program's run while another run of it
    // is preempted on the same CPU (writeback-ebpf hook.rs, `unstarted`),
    // and 6.12-rt lost one fentry of 42 so. Such a call's pages are not
    // in any record; the function-hook runs below require that every call
    // the kprobe counted is a record or one of these.
    let unmatched = trace
        .summary()
        .and_then(|s| s["unmatched_results"].as_u64())
        .unwrap_or(0) as usize;
    // A call whose entry or exit run the kernel skipped is in no record
    // and counted only there (`skipped_runs`; a 6.12-rt guest lost one
    // do_writepages() call of 20 to a skipped kprobe run).
    let skipped = skipped_runs(trace.summary(), &|p| GENERIC_CALL_PROGRAMS.contains(&p)) as usize;
    let pages_ok = if kind == "tp_btf" || unmatched + skipped == 0 {
        pages == EXPECTED_PAGES
    } else if unmatched == 0 {
        // The skipped call may have written nothing.
        pages <= EXPECTED_PAGES
    } else {
        pages < EXPECTED_PAGES
    };
    let mut pass = used == kind
        && pages_ok
        && calls.len() + unmatched + skipped >= XFS_CALLS
        && xfs == calls.len()
        && lost == 0;
    let compared = if kind == "tp_btf" {
        // Each derived call begins at a folio of one do_writepages call,
        // so there are at most as many as the run's own kprobe event
        // counted; fewer where calls wrote nothing (no folio to see).
        // The function-hook run's count is quoted, not required: on
        // 6.12-rt the flusher wrote the file in 34 calls in one run and
        // 41 in the next.
        pass &= kprobe_calls.is_some_and(|k| calls.len() <= k);
        format!(
            "kprobe event counted {} on the file; function-hook run had {}",
            kprobe_calls.map_or("nothing".into(), |n| n.to_string()),
            hook_calls.map_or("no usable count".into(), |n| format!("{n} call(s)"))
        )
    } else {
        // The function hooks read the thread's run clock at entry and exit
        // (hook.rs): each call has an on-CPU time within its wall time.
        let timed = calls
            .iter()
            .filter(|c| {
                let wall = c["duration_ns"].as_u64().unwrap_or(0);
                c["on_cpu_ns"].as_u64().is_some_and(|t| t > 0 && t <= wall)
            })
            .count();
        let seen = calls.len() + unmatched;
        pass &= hooked == calls.len()
            && kprobe_calls.is_some_and(|k| seen <= k && k <= seen + skipped)
            && timed == calls.len();
        format!(
            "{timed} with an on-CPU time within the wall time; kprobe event counted {} on the \
             file ({} in all; wbscope {total_hook} hook calls in all, {unmatched} ended with no \
             start seen, {skipped} runs of its programs skipped by the kernel)",
            kprobe_calls.map_or("nothing".into(), |n| n.to_string()),
            kprobe.hits.len()
        )
    };
    check(
        &name,
        pass,
        format!(
            "generic_call via {used} (want {kind}): {} call(s), {pages} pages, {hooked} closed by \
             the hook, {xfs} with fs xfs; {compared}; {lost} lost records",
            calls.len()
        ),
    )
}

/// `wbscope probes --json`, or why there is none.
fn parse_probes(json: &str, rc: &str, stderr: &str) -> Result<Value, String> {
    if rc.trim() != "0" {
        return Err(exit_reason("wbscope probes", rc, stderr));
    }
    serde_json::from_str(json).map_err(|e| format!("wbscope probes --json: {e}"))
}

fn concept<'a>(probes: &'a Value, name: &str) -> Option<&'a Value> {
    probes["concepts"]
        .as_array()?
        .iter()
        .find(|c| c["concept"] == name)
}

/// "chose K (HOOK); rejected: HOOK: REASON; ..." for one concept.
fn describe(concept: &Value) -> String {
    let kind = concept["kind"].as_str().unwrap_or("nothing");
    let hook = concept["hook"].as_str().unwrap_or("no hook");
    let rejected: Vec<String> = concept["rejected"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|r| {
                    format!(
                        "{}: {}",
                        r["hook"].as_str().unwrap_or("?"),
                        r["reason"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if rejected.is_empty() {
        format!("chose {kind} ({hook}); nothing rejected")
    } else {
        format!("chose {kind} ({hook}); rejected: {}", rejected.join("; "))
    }
}

/// Whether the maps' kernel memory `wbscope probes` stated before load
/// equals, map by map, what the kernel said of the loaded maps (`memlock:`
/// in their fdinfo), on this kernel and its possible CPUs.
pub(crate) fn map_memory(probes: &Result<Value, String>) -> Check {
    const NAME: &str = "probes-map-memory";
    let probes = match probes {
        Ok(p) => p,
        Err(e) => return check(NAME, false, e.clone()),
    };
    let memory = &probes["memory"];
    let Some(maps) = memory["maps"].as_array().filter(|m| !m.is_empty()) else {
        return check(NAME, false, "no maps in the plan's memory".into());
    };
    let wrong: Vec<String> = maps
        .iter()
        .filter(|m| m["measured"].as_u64().is_none() || m["measured"] != m["bytes"])
        .map(|m| {
            format!(
                "{} stated {} measured {}",
                m["name"], m["bytes"], m["measured"]
            )
        })
        .collect();
    let summary = format!(
        "{} maps at {} possible CPUs ({}): stated {} bytes, the kernel says {}",
        maps.len(),
        memory["possible_cpus"],
        memory["report"],
        memory["total_bytes"],
        maps.iter()
            .filter_map(|m| m["measured"].as_u64())
            .sum::<u64>()
    );
    if wrong.is_empty() {
        check(NAME, true, summary)
    } else {
        check(NAME, false, format!("{summary}; {}", wrong.join(", ")))
    }
}

fn writepages_hook(probes: &Result<Value, String>) -> Check {
    const NAME: &str = "probes-writepages-hook";
    let probes = match probes {
        Ok(p) => p,
        Err(e) => return check(NAME, false, e.clone()),
    };
    match concept(probes, "writepages_call") {
        None => check(NAME, false, "no writepages_call in the plan".into()),
        Some(c) => hook_of(NAME, probes, "writepages_call", c, CALL_KINDS, describe(c)),
    }
}

/// Whether the plan's `concept_name` (`c`) uses one of `kinds`: not
/// given when the plan refused every such kind, for its reasons
/// (PREEMPT_RT, no BTF), failed otherwise.
fn hook_of(
    name: &str,
    probes: &Value,
    concept_name: &str,
    c: &Value,
    kinds: &[&str],
    detail: String,
) -> Check {
    let hooked = c["kind"].as_str().is_some_and(|k| kinds.contains(&k));
    if !hooked
        && kinds
            .iter()
            .all(|k| refused(probes, concept_name, k).is_some())
    {
        return Check::not_given(name, detail);
    }
    check(name, hooked, detail)
}

/// Scan functions the guest's available_filter_functions listed (lines
/// like `writeback_iter` or `name [module]`).
fn scan_functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|f| SCAN_FUNCTIONS.contains(f))
        .map(str::to_string)
        .collect()
}

fn scan_function_hook(probes: &Result<Value, String>, functions: &[String]) -> Check {
    const NAME: &str = "probes-scan-function-hook";
    let probes = match probes {
        Ok(p) => p,
        Err(e) => return check(NAME, false, e.clone()),
    };
    let Some(c) = concept(probes, "scan") else {
        return check(NAME, false, "no scan in the plan".into());
    };
    if functions.is_empty() {
        return check(
            NAME,
            true,
            format!(
                "kernel traces none of {}: {}",
                SCAN_FUNCTIONS.join(", "),
                describe(c)
            ),
        );
    }
    hook_of(
        NAME,
        probes,
        "scan",
        c,
        FUNCTION_KINDS,
        format!("kernel has {}; {}", functions.join(", "), describe(c)),
    )
}

/// One traced run as the guest recorded it.
#[derive(Debug, Default)]
struct TraceRun {
    lines: Vec<Value>,
    /// `major:minor` and inode of the written file.
    file: Option<(String, u64)>,
    /// Why the run itself is unusable, if it is.
    broken: Option<String>,
}

impl TraceRun {
    fn parse(jsonl: &str, rc: &str, stderr: &str, stat: &str) -> TraceRun {
        let mut run = TraceRun::default();
        let mut bad = None;
        for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Value>(line) {
                Ok(v) => run.lines.push(v),
                Err(e) => {
                    bad.get_or_insert(format!("unparsable output line ({e}): {line}"));
                }
            }
        }
        run.file = parse_stat(stat);
        run.broken = if rc.trim() != "0" {
            Some(exit_reason("wbscope trace", rc, stderr))
        } else if let Some(bad) = bad {
            Some(bad)
        } else if run.lines.last().is_none_or(|l| l["type"] != "summary") {
            Some("no summary line at the end of the trace".into())
        } else if run.file.is_none() {
            Some(format!("no stat of the written file ({:?})", stat.trim()))
        } else {
            None
        };
        run
    }

    fn calls(&self) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter(|l| l["type"] == "call")
    }

    fn file_calls(&self) -> Vec<&Value> {
        match &self.file {
            Some((dev, ino)) => self
                .calls()
                .filter(|c| c["dev"] == dev.as_str() && c["ino"] == *ino)
                .collect(),
            None => Vec::new(),
        }
    }

    fn summary(&self) -> Option<&Value> {
        self.lines.last().filter(|l| l["type"] == "summary")
    }

    /// Kind of the hook the writepages call used (the first word of the
    /// summary's hook label, e.g. "fentry ext4_writepages").
    fn writepages_kind(&self) -> String {
        self.summary()
            .and_then(|s| s["probes"].as_array())
            .and_then(|p| p.iter().find(|p| p["concept"] == "writepages_call"))
            .map_or_else(
                || "unknown".to_string(),
                |p| match (p["hook"].as_str(), p["state"].as_str()) {
                    (Some(hook), Some("attached")) => {
                        hook.split_whitespace().next().unwrap_or("?").to_string()
                    }
                    (_, state) => format!(
                        "nothing ({}: {})",
                        state.unwrap_or("?"),
                        p["reason"].as_str().unwrap_or("no reason given")
                    ),
                },
            )
    }
}

/// `stat -c '%d %i'` → ("major:minor", ino); st_dev is glibc's encoding.
pub(super) fn parse_stat(text: &str) -> Option<(String, u64)> {
    let mut it = text.split_whitespace();
    let dev: u64 = it.next()?.parse().ok()?;
    let ino: u64 = it.next()?.parse().ok()?;
    Some((format!("{}:{}", libc::major(dev), libc::minor(dev)), ino))
}

fn pages(run: &str, trace: &TraceRun, startup_s: f64) -> Check {
    let name = format!("trace-{run}-16384-pages");
    if let Some(why) = &trace.broken {
        return check(&name, false, why.clone());
    }
    let calls = trace.file_calls();
    let written: i64 = calls
        .iter()
        .filter_map(|c| c["pages_written"].as_i64())
        .sum();
    let lost = trace
        .summary()
        .and_then(|s| s["lost_records"].as_u64())
        .unwrap_or(0);
    let (dev, ino) = trace.file.clone().unwrap_or_default();
    // Pages short only as a call whose entry or exit run the kernel
    // skipped and counted (`skipped_runs`), as the RT interleaving check
    // allows.
    let skipped = skipped_runs(trace.summary(), &|p| EXT4_CALL_PROGRAMS.contains(&p));
    let pages_ok = written == EXPECTED_PAGES || (skipped > 0 && written < EXPECTED_PAGES);
    check(
        &name,
        pages_ok && lost == 0,
        format!(
            "{written} pages in {} call(s) for {dev} ino {ino} via {}; {lost} lost records; \
             {skipped} runs of the call's programs skipped by the kernel; wbscope startup \
             {startup_s:.1}s",
            calls.len(),
            trace.writepages_kind()
        ),
    )
}

fn invariants(run: &str, trace: &TraceRun) -> Check {
    let name = format!("trace-{run}-call-invariants");
    if let Some(why) = &trace.broken {
        return check(&name, false, why.clone());
    }
    let mut checked = 0usize;
    let mut violations = Vec::new();
    for c in trace.calls() {
        checked += 1;
        if let (Some(on_cpu), Some(duration)) = (c["on_cpu_ns"].as_u64(), c["duration_ns"].as_u64())
            && on_cpu > duration
        {
            violations.push(format!("on_cpu_ns {on_cpu} > duration_ns {duration}"));
        }
        // Every page a call wrote lay inside one of its scan passes.
        if let (Some(scanned), Some(written)) =
            (c["scan"]["bytes"].as_u64(), c["pages_written"].as_u64())
            && scanned < written * PAGE_BYTES
        {
            violations.push(format!(
                "scan.bytes {scanned} < pages_written {written} x {PAGE_BYTES}"
            ));
        }
        if c["start_seen"] == true
            && let (Some(written), Some(asked)) =
                (c["pages_written"].as_i64(), c["nr_to_write"].as_i64())
            && written > asked.saturating_add(FOLIO_SLACK)
        {
            violations.push(format!(
                "pages_written {written} > nr_to_write {asked} + {FOLIO_SLACK}"
            ));
        }
    }
    match violations.first() {
        None if checked == 0 => check(&name, false, "no call records".into()),
        None => check(&name, true, format!("{checked} call(s) checked")),
        Some(first) => check(
            &name,
            false,
            format!(
                "{} violation(s) in {checked} call(s), first: {first}",
                violations.len()
            ),
        ),
    }
}

/// Why the plan has no scan hook at all, when it has none.
fn scan_gap(probes: &Result<Value, String>) -> Option<String> {
    let c = concept(probes.as_ref().ok()?, "scan")?;
    c["kind"]
        .is_null()
        .then(|| format!("no scan hook: {}", describe(c)))
}

/// The figures the function hooks add: scan and on-CPU time on the calls
/// for the written file (on-CPU time only where the plan has no scan
/// hook, `scan_gap`, which the detail then quotes).
fn function_hook_fields(trace: &TraceRun, scan_gap: Option<String>) -> Check {
    const NAME: &str = "trace-default-function-hook-fields";
    if let Some(why) = &trace.broken {
        return check(NAME, false, why.clone());
    }
    let calls = trace.file_calls();
    let with_scan = calls.iter().filter(|c| !c["scan"].is_null()).count();
    let with_cpu = calls.iter().filter(|c| !c["on_cpu_ns"].is_null()).count();
    let scan_ok = scan_gap.is_some() || with_scan == calls.len();
    check(
        NAME,
        !calls.is_empty() && scan_ok && with_cpu == calls.len(),
        format!(
            "of {} call(s) for the file: {with_scan} with scan, {with_cpu} with on_cpu_ns{}",
            calls.len(),
            scan_gap.map_or(String::new(), |g| format!(" ({g})"))
        ),
    )
}

fn kind_of_run(
    run: &str,
    disabled: &str,
    kinds: &[&str],
    trace: &TraceRun,
    probes: &Result<Value, String>,
) -> Check {
    let name = format!("trace-{run}-uses-{}", kinds.join("-or-"));
    if let Some(why) = &trace.broken {
        return check(&name, false, why.clone());
    }
    let kind = trace.writepages_kind();
    let disabled = if disabled.is_empty() {
        "nothing disabled".to_string()
    } else {
        format!("--disable {disabled}")
    };
    let detail = format!("{disabled}: writepages_call used {kind}");
    if kinds.contains(&kind.as_str()) {
        return check(&name, true, detail);
    }
    // Every kind the run may use refused by the plan, for its reasons
    // (PREEMPT_RT: fentry passed over, kprobes after tp_btf).
    let reasons: Option<Vec<String>> = kinds
        .iter()
        .map(|k| {
            probes
                .as_ref()
                .ok()
                .and_then(|p| refused(p, "writepages_call", k))
        })
        .collect();
    match reasons {
        Some(r) => Check::not_given(&name, format!("{detail}; {}", r.join("; "))),
        None => check(&name, false, detail),
    }
}

/// "exited N: last stderr line", or that the guest's `timeout` stopped it.
pub(super) fn exit_reason(what: &str, rc: &str, stderr: &str) -> String {
    match rc.trim() {
        // coreutils timeout's status when it had to kill the command.
        "124" => format!(
            "{what} timed out in the guest (its step limit); stderr: {}",
            last_line(stderr)
        ),
        "" => format!("{what} left no exit status; stderr: {}", last_line(stderr)),
        rc => format!("{what} exited {rc}: {}", last_line(stderr)),
    }
}

pub(super) fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
}

/// The trace's JSON lines, or why the run is unusable.
pub(super) fn parse_lines(jsonl: &str, rc: &str, stderr: &str) -> Result<Vec<Value>, String> {
    if rc.trim() != "0" {
        return Err(exit_reason("wbscope trace", rc, stderr));
    }
    let lines = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<Value>(l).map_err(|e| format!("unparsable line ({e}): {l}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if lines.last().is_none_or(|l| l["type"] != "summary") {
        return Err("no summary line at the end of the trace".into());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(dev: &str, ino: u64, pages: i64, asked: i64) -> String {
        format!(
            r#"{{"type":"call","dev":"{dev}","ino":{ino},"pages_written":{pages},"nr_to_write":{asked},"start_seen":true,"on_cpu_ns":5,"duration_ns":9,"scan":{{"iterations":1,"bytes":{},"first_pos":0,"last_pos":0}}}}"#,
            pages * 4096
        )
    }

    fn summary(hook: &str) -> String {
        format!(
            r#"{{"type":"summary","lost_records":0,"probes":[{{"concept":"writepages_call","hook":"{hook}","state":"attached"}}]}}"#
        )
    }

    #[test]
    fn pages_and_kind_of_a_good_run() {
        // 254:0 as glibc encodes it in st_dev.
        let dev = (254u64 << 8).to_string();
        let jsonl = [
            call("254:0", 12, 16000, i64::MAX),
            call("254:0", 12, 384, i64::MAX),
            call("254:0", 13, 7, 1024),
            summary("kprobe ext4_writepages"),
        ]
        .join("\n");
        let trace = TraceRun::parse(&jsonl, "0\n", "", &format!("{dev} 12\n"));
        assert_eq!(trace.broken, None);
        let c = pages("kprobes", &trace, 1.5);
        assert!(c.pass, "{c}");
        assert!(c.detail.contains("2 call(s)"), "{c}");
        // The 384-page call missing: a failure, unless the kernel counted
        // a skipped run of the call's entry or exit program (PREEMPT_RT).
        let short = |skipped_program: &str| {
            let summary = summary("kprobe ext4_writepages").replace(
                r#""lost_records":0"#,
                &format!(
                    r#""lost_records":0,"run_time":[{{"program":"{skipped_program}","recursion_misses":1}}]"#
                ),
            );
            let jsonl = [call("254:0", 12, 16000, i64::MAX), summary].join("\n");
            TraceRun::parse(&jsonl, "0\n", "", &format!("{dev} 12\n"))
        };
        let counted = pages("kprobes", &short("kprobe_writepages"), 1.5);
        assert!(
            counted.pass
                && counted
                    .detail
                    .contains("1 runs of the call's programs skipped"),
            "{counted}"
        );
        assert!(pages("kprobes", &short("kretprobe_writepages"), 1.5).pass);
        assert!(!pages("kprobes", &short("kprobe_scan"), 1.5).pass);
        assert!(invariants("kprobes", &trace).pass);
        assert!(function_hook_fields(&trace, None).pass);
        let no_scan = trace.lines.clone();
        let mut unscanned = TraceRun {
            lines: no_scan,
            ..TraceRun::default()
        };
        unscanned.file = trace.file.clone();
        for l in &mut unscanned.lines {
            if l["type"] == "call" {
                l["scan"] = Value::Null;
            }
        }
        assert!(!function_hook_fields(&unscanned, None).pass);
        let gap = function_hook_fields(&unscanned, Some("no scan hook: x".into()));
        assert!(
            gap.pass && gap.detail.ends_with("(no scan hook: x)"),
            "{gap}"
        );
        let no_plan = Err("no plan".to_string());
        assert!(
            kind_of_run(
                "kprobes",
                "fentry,tp_btf,raw_tp",
                &["kprobe"],
                &trace,
                &no_plan
            )
            .pass
        );
        let wrong = kind_of_run("x", "", &["fentry"], &trace, &no_plan);
        assert!(!wrong.pass);
        assert!(wrong.detail.contains("used kprobe"), "{wrong}");
        // Another kind is right when the plan refused each asked one.
        let rt_plan: Result<Value, String> = Ok(serde_json::json!({"concepts": [
            {"concept": "writepages_call", "kind": "kprobe", "hook": "kprobe ext4_writepages",
             "rejected": [{"hook": "fentry ext4_writepages", "reason": "PREEMPT_RT kernel: x"}]}
        ]}));
        let refused_fentry = kind_of_run("x", "", &["fentry"], &trace, &rt_plan);
        assert!(
            refused_fentry.pass && refused_fentry.not_given,
            "{refused_fentry}"
        );
        assert!(
            refused_fentry.detail.contains("PREEMPT_RT"),
            "{refused_fentry}"
        );
    }

    #[test]
    fn short_counts_overshoots_and_broken_runs_fail() {
        let dev = (254u64 << 8).to_string();
        let jsonl = [call("254:0", 12, 1024, 100), summary("tracepoint x")].join("\n");
        let trace = TraceRun::parse(&jsonl, "0", "", &format!("{dev} 12"));
        assert!(!pages("d", &trace, 0.0).pass);
        let inv = invariants("d", &trace);
        assert!(!inv.pass && inv.detail.contains("nr_to_write 100"), "{inv}");
        let short_scan = call("254:0", 12, 2, 2).replace(r#""bytes":8192"#, r#""bytes":4096"#);
        let trace = TraceRun::parse(
            &[short_scan, summary("kprobe x")].join("\n"),
            "0",
            "",
            &format!("{dev} 12"),
        );
        let inv = invariants("d", &trace);
        assert!(!inv.pass && inv.detail.contains("scan.bytes 4096"), "{inv}");

        let killed = TraceRun::parse("", "124", "wbscope: something\n", "");
        let c = pages("d", &killed, 0.0);
        assert!(
            !c.pass && c.detail.contains("timed out in the guest"),
            "{c}"
        );
        let crashed = TraceRun::parse("", "101", "wbscope: something\n", "");
        let c = pages("d", &crashed, 0.0);
        assert!(c.detail.ends_with("exited 101: wbscope: something"), "{c}");

        let no_summary = TraceRun::parse(&call("254:0", 12, 1, 1), "0", "", "1 2");
        assert!(no_summary.broken.is_some());
    }

    #[test]
    fn xfs_calls_match_the_kprobe_count_and_the_derived_run() {
        let dev = (254u64 << 8).to_string();
        let line = |pages: i64, boundary: &str| {
            let on_cpu = if boundary == "hook" { "400" } else { "null" };
            format!(
                r#"{{"type":"call","dev":"254:0","ino":12,"pages_written":{pages},"fs":"xfs","boundary":"{boundary}","duration_ns":1000,"on_cpu_ns":{on_cpu}}}"#
            )
        };
        let summary = |hook: &str| {
            format!(
                r#"{{"type":"summary","lost_records":0,"probes":[{{"concept":"generic_call","hook":"{hook}","state":"attached"}}]}}"#
            )
        };
        let mut lines: Vec<String> = (0..8).map(|_| line(2048, "hook")).collect();
        lines.push(summary("fentry do_writepages"));
        let trace = TraceRun::parse(&lines.join("\n"), "0", "", &format!("{dev} 12"));
        let mut kprobe_text = String::from("# tracer: nop\n");
        for i in 0..8 {
            kprobe_text.push_str(&format!(
                "              dd-77      [000] .....  1.{i}: dwp: (do_writepages+0x0/0x90) map=0xffff1 nr=9223372036854775807\n"
            ));
        }
        kprobe_text.push_str(
            "  kworker/u2:1-9 [000] .....  2.0: dwp: (do_writepages+0x0/0x90) map=0xffff2 nr=1024\n",
        );
        let kprobe = KprobeCount::parse(&kprobe_text);
        assert_eq!(kprobe.hits.len(), 9);
        assert_eq!(kprobe.file_calls(), Some(8));
        let c = xfs_calls("xfs-fentry", "fentry", &trace, &kprobe, None);
        assert!(c.pass, "{c}");
        // A hook call without its on-CPU time, or with more than its wall
        // time, fails.
        for bad in [r#""on_cpu_ns":null"#, r#""on_cpu_ns":1001"#] {
            let mut untimed = lines.clone();
            untimed[3] = untimed[3].replace(r#""on_cpu_ns":400"#, bad);
            let untimed = TraceRun::parse(&untimed.join("\n"), "0", "", &format!("{dev} 12"));
            assert!(!xfs_calls("xfs-fentry", "fentry", &untimed, &kprobe, None).pass);
        }
        // A call whose start the kernel skipped (PREEMPT_RT): counted as
        // unmatched, its pages in no record. Accounted for, it passes;
        // unaccounted (the kprobe saw one more), or with every page
        // still there, it fails.
        let missed = |n: i64, unmatched: u32| {
            let mut l: Vec<String> = (0..n).map(|_| line(2048, "hook")).collect();
            l.push(summary("fentry do_writepages").replace(
                r#""lost_records":0"#,
                &format!(r#""lost_records":0,"unmatched_results":{unmatched}"#),
            ));
            TraceRun::parse(&l.join("\n"), "0", "", &format!("{dev} 12"))
        };
        assert!(xfs_calls("xfs-fentry", "fentry", &missed(7, 1), &kprobe, None).pass);
        assert!(!xfs_calls("xfs-fentry", "fentry", &missed(7, 0), &kprobe, None).pass);
        assert!(!xfs_calls("xfs-fentry", "fentry", &missed(6, 1), &kprobe, None).pass);
        let mut all_pages: Vec<String> = (0..7).map(|_| line(16384 / 7 + 1, "hook")).collect();
        all_pages.push(summary("fentry do_writepages").replace(
            r#""lost_records":0"#,
            r#""lost_records":0,"unmatched_results":1"#,
        ));
        let all_pages = TraceRun::parse(&all_pages.join("\n"), "0", "", &format!("{dev} 12"));
        assert!(!xfs_calls("xfs-fentry", "fentry", &all_pages, &kprobe, None).pass);
        // A call lost to a skipped kprobe run (PREEMPT_RT): in no record,
        // counted in the entry program's recursion_misses. Accounted for,
        // it passes; a skip of another program accounts for nothing.
        let skipped = |program: &str| {
            let mut l: Vec<String> = (0..7).map(|_| line(2048, "hook")).collect();
            l.push(summary("kprobe do_writepages").replace(
                r#""lost_records":0"#,
                &format!(
                    r#""lost_records":0,"run_time":[{{"program":"{program}","recursion_misses":1}}]"#
                ),
            ));
            TraceRun::parse(&l.join("\n"), "0", "", &format!("{dev} 12"))
        };
        let c = xfs_calls(
            "xfs-kprobe",
            "kprobe",
            &skipped("generic_kprobe_writepages"),
            &kprobe,
            None,
        );
        assert!(
            c.pass && c.detail.contains("1 runs of its programs skipped"),
            "{c}"
        );
        assert!(
            !xfs_calls(
                "xfs-kprobe",
                "kprobe",
                &skipped("kprobe_scan"),
                &kprobe,
                None
            )
            .pass
        );
        // One call fewer than the kprobe saw, or the wrong hook kind: fail.
        let short = KprobeCount::parse(&kprobe_text.replacen("map=0xffff1", "map=0xffff3", 1));
        assert!(!xfs_calls("xfs-fentry", "fentry", &trace, &short, None).pass);
        assert!(!xfs_calls("xfs-kprobe", "kprobe", &trace, &kprobe, None).pass);
        // The derived run is compared with the function-hook run's count.
        let mut derived: Vec<String> = (0..8).map(|_| line(2048, "next_call")).collect();
        derived.push(summary("tp_btf wbc_writepage + iomap_writepage"));
        let derived = TraceRun::parse(&derived.join("\n"), "0", "", &format!("{dev} 12"));
        let empty = KprobeCount::default();
        assert!(xfs_calls("xfs-derived", "tp_btf", &derived, &kprobe, Some(8)).pass);
        assert!(xfs_calls("xfs-derived", "tp_btf", &derived, &kprobe, Some(9)).pass);
        // More derived calls than do_writepages calls, or no count: fail.
        let fewer = KprobeCount::parse(&kprobe_text.replacen("map=0xffff1", "map=0xffff3", 1));
        assert!(!xfs_calls("xfs-derived", "tp_btf", &derived, &fewer, Some(8)).pass);
        assert!(!xfs_calls("xfs-derived", "tp_btf", &derived, &empty, Some(8)).pass);
        // A run whose summary has no generic_call hook names why.
        let none = TraceRun::parse(
            r#"{"type":"summary","lost_records":0,"probes":[{"concept":"generic_call","hook":null,"state":"unavailable","reason":"x is not in the kernel's BTF"}]}"#,
            "0",
            "",
            &format!("{dev} 12"),
        );
        assert_eq!(
            unavailable(&none, "generic_call").as_deref(),
            Some("generic_call unavailable in this run: x is not in the kernel's BTF")
        );
        assert_eq!(unavailable(&derived, "generic_call"), None);
        // Pages counted twice fail.
        let mut twice: Vec<String> = (0..16).map(|_| line(2048, "hook")).collect();
        twice.push(summary("fentry do_writepages"));
        let twice = TraceRun::parse(&twice.join("\n"), "0", "", &format!("{dev} 12"));
        assert!(!xfs_calls("xfs-fentry", "fentry", &twice, &kprobe, None).pass);
    }

    #[test]
    fn probe_checks_report_the_choice_and_rejections() {
        let probes: Value = serde_json::from_str(
            r#"{"concepts":[
              {"concept":"writepages_call","kind":"tp_btf","hook":"tp_btf ext4_writepages",
               "rejected":[{"hook":"fentry ext4_writepages","reason":"no program"}]},
              {"concept":"scan","kind":"tracepoint","hook":"tracepoint a + b","rejected":[]}]}"#,
        )
        .unwrap();
        let probes = Ok(probes);
        let c = writepages_hook(&probes);
        assert!(c.pass);
        assert!(
            c.detail
                .starts_with("chose tp_btf (tp_btf ext4_writepages); rejected: fentry ext4_writepages: no program"),
            "{c}"
        );
        // A kprobe or a classic tracepoint, with the call's events not
        // refused, is not the plan's choice: a failure.
        for (kind, hook) in [
            ("kprobe", "kprobe ext4_writepages"),
            ("tracepoint", "tracepoint a + b"),
        ] {
            let other: Value = serde_json::from_str(&format!(
                r#"{{"concepts":[{{"concept":"writepages_call","kind":"{kind}","hook":"{hook}","rejected":[]}}]}}"#
            ))
            .unwrap();
            assert!(!writepages_hook(&Ok(other)).pass, "{kind}");
        }
        let functions = scan_functions("write_cache_pages\nwriteback_iter_x\n");
        assert_eq!(functions, vec!["write_cache_pages".to_string()]);
        assert!(!scan_function_hook(&probes, &functions).pass);
        let none = scan_function_hook(&probes, &[]);
        assert!(
            none.pass && none.detail.starts_with("kernel traces none"),
            "{none}"
        );

        // A kind every candidate of which the plan refused is N/A, with
        // the plan's reasons; one the plan chose, or never tried, is not.
        assert_eq!(
            refused(probes.as_ref().unwrap(), "writepages_call", "fentry").as_deref(),
            Some(
                "writepages_call has no fentry hook on this kernel: fentry ext4_writepages: no program"
            )
        );
        assert_eq!(
            refused(probes.as_ref().unwrap(), "writepages_call", "tp_btf"),
            None
        );
        assert_eq!(
            refused(probes.as_ref().unwrap(), "writepages_call", "kprobe"),
            None
        );
        let na = Check::not_given("x", "why".into());
        assert_eq!(na.to_string(), "x: N/A (why)");

        let failed = parse_probes("", "1\n", "wbscope: no BTF\n");
        assert_eq!(
            writepages_hook(&failed).detail,
            "wbscope probes exited 1: wbscope: no BTF"
        );
    }
}
