//! The BPF run-time figures of `cargo xtask bench`: per-program tables of
//! the kernel's BPF statistics, the tracer's programs against empty ones
//! on the same events, and the overhead budget's figures (BPF time per
//! GiB of the budget's programs ≤ 1 ms, mean run time per invocation
//! ≤ 150 ns). Arithmetic over the `run_time` arrays of `wbscope trace --json`
//! lines, with no I/O.
use std::collections::BTreeMap;

use super::median;

/// The tracer's program on each event [`super::Side::Floor`] measures:
/// the list `probes --cost --on-hooks` attaches its floor to.
pub(super) const FLOOR_EVENTS: &[(&str, &str)] = writeback_common::DEFAULT_HOOKS;

/// Whether `program` came after the overhead budget was set (the budget
/// counts the programs that existed then; newer ones report their own
/// share beside): the dirty-time programs (`*dirty_folio`) and the
/// generic-call programs (`generic_*`). Everything else existed then (the
/// tp_btf twins added with the budget replace programs that did).
pub(super) fn added_after_budget(program: &str) -> bool {
    program.ends_with("dirty_folio") || program.starts_with("generic_")
}

/// `(invocations, run time ns)` of the budget's programs, and of those
/// added after it.
pub(super) fn split_by_budget(runs: &[serde_json::Value]) -> ((u64, u64), (u64, u64)) {
    let (mut old, mut new) = ((0, 0), (0, 0));
    for (name, (count, ns)) in per_program(runs) {
        let side = if added_after_budget(&name) {
            &mut new
        } else {
            &mut old
        };
        side.0 += count;
        side.1 += ns;
    }
    (old, new)
}

/// The overhead budget's three figures of the writes: BPF time per GiB
/// of the programs that existed when it was set
/// (goal 1 ms) with the newer ones' share beside, and the mean run time
/// per invocation of all programs (goal 150 ns), with the older ones'
/// mean beside, and the mean the programs would have if each of the
/// [`FLOOR_EVENTS`] programs cost what the empty program on its event
/// costs in `floor`, then what the counting one costs in `counting` (the
/// same writes): what no code reaches, and the least a program that
/// counts anything costs there.
pub(super) fn budget_figures(
    runs: &[serde_json::Value],
    floor: &[serde_json::Value],
    counting: &[serde_json::Value],
    gib_written: f64,
) -> String {
    let ((old_n, old_ns), (new_n, new_ns)) = split_by_budget(runs);
    format!(
        "The overhead budget's figures for these writes (programs added after it was set: \
         the dirtier's `*dirty_folio`, the generic calls' `generic_*`):\n\n\
         | figure | value | goal |\n|---|---|---|\n\
         | BPF time per GiB, the budget's programs (before the dirtier's and generic calls') | **{:.2} ms** | ≤ 1 ms |\n\
         | BPF time per GiB, programs added since (their own share) | {:.2} ms | reported beside |\n\
         | mean ns per invocation, all programs | **{}** | ≤ 150 |\n\
         | mean ns per invocation, the budget's programs (before the dirtier's and generic calls') | {} | |\n\
         | the mean of all programs with each of the programs below costing what an empty \
         program costs on its event | {} | what no code reaches |\n\
         | the same with each costing what a program that adds to one counter costs there \
         | {} | the least a counting program costs |\n\n",
        ms_per_gib(old_ns, runs, gib_written),
        ms_per_gib(new_ns, runs, gib_written),
        avg_ns(old_ns + new_ns, old_n + new_n),
        avg_ns(old_ns, old_n),
        mean_with_floor_at(runs, floor),
        mean_with_floor_at(runs, counting),
    )
}

/// `ns` of BPF time over the writes of `runs`, each of `gib_written`, in
/// ms per GiB.
pub(super) fn ms_per_gib(ns: u64, runs: &[serde_json::Value], gib_written: f64) -> f64 {
    ns as f64 / 1e6 / (gib_written * runs.len().max(1) as f64)
}

/// The average run time of `program` in a [`per_program`] table, if it
/// ran.
fn mean_of(table: &BTreeMap<String, (u64, u64)>, program: &str) -> Option<f64> {
    let &(count, ns) = table.get(program)?;
    (count > 0).then(|| ns as f64 / count as f64)
}

/// The mean run time of all programs in `runs` if each of the
/// [`FLOOR_EVENTS`] programs cost what the program in `base` on its event
/// costs (`base`: the empty or counting side of the same writes); "-"
/// without runs or without that side.
fn mean_with_floor_at(runs: &[serde_json::Value], base: &[serde_json::Value]) -> String {
    let traced = per_program(runs);
    let base = per_program(base);
    let (n, ns) = all_programs(&traced);
    let mut replaced = false;
    let mut total = ns as f64;
    for &(event, program) in FLOOR_EVENTS {
        let (tc, tns) = traced.get(program).copied().unwrap_or_default();
        if let Some(b) = mean_of(&base, event) {
            total += tc as f64 * b - tns as f64;
            replaced = true;
        }
    }
    if n > 0 && replaced {
        format!("{:.0}", total / n as f64)
    } else {
        "-".into()
    }
}

/// `(invocations, run time ns)` of all programs of a [`per_program`]
/// table together.
pub(super) fn all_programs(per_program: &BTreeMap<String, (u64, u64)>) -> (u64, u64) {
    per_program
        .values()
        .fold((0, 0), |(c, n), (count, ns)| (c + count, n + ns))
}

/// Per-program table of run-time arrays added up, and the average over
/// all programs.
pub(super) fn run_time_table(runs: &[serde_json::Value]) -> (String, String) {
    let per_program = per_program(runs);
    let (all_count, all_ns) = all_programs(&per_program);
    let mut table = String::from("| program | invocations | avg ns |\n|---|---|---|\n");
    for (name, (count, ns)) in per_program {
        table.push_str(&format!("| {name} | {count} | {} |\n", avg_ns(ns, count)));
    }
    let all = avg_ns(all_ns, all_count);
    table.push_str(&format!(
        "| **all programs** | **{all_count}** | **{all}** |\n"
    ));
    (table, all)
}

/// The mean over all programs of each write's run-time array, and their
/// median: the statistics count wall time, so one stall of the virtual
/// CPU inside a program (milliseconds on a busy hypervisor) moves the
/// mean of all writes together, and shows here as one write apart.
pub(super) fn per_write_means(runs: &[serde_json::Value]) -> String {
    let mut means: Vec<f64> = runs
        .iter()
        .filter_map(|run| {
            let (count, ns) = all_programs(&per_program(std::slice::from_ref(run)));
            (count > 0).then(|| ns as f64 / count as f64)
        })
        .collect();
    if means.is_empty() {
        return "none with runs".into();
    }
    let listed: Vec<String> = means.iter().map(|m| format!("{m:.0}")).collect();
    format!("{} ns, median {:.0}", listed.join(", "), median(&mut means))
}

/// `(invocations, run time ns)` per program, added up over run-time arrays.
pub(super) fn per_program(runs: &[serde_json::Value]) -> BTreeMap<String, (u64, u64)> {
    let mut per_program: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for run in runs {
        for r in run.as_array().into_iter().flatten() {
            let e = per_program
                .entry(r["program"].as_str().unwrap_or("?").to_string())
                .or_default();
            e.0 += r["run_count"].as_u64().unwrap_or(0);
            e.1 += r["run_time_ns"].as_u64().unwrap_or(0);
        }
    }
    per_program
}

/// The tracer's programs on its busiest events against empty programs
/// and counting programs on the same events during the same writes (the
/// floor and counting sides of the rotation): per event, and together,
/// weighted by the tracer's own invocations, which is what the tracer's
/// mean over these programs would be if each cost what the empty (or
/// counting) program costs on its event.
pub(super) fn floor_comparison(
    traced: &[serde_json::Value],
    floor: &[serde_json::Value],
    counting: &[serde_json::Value],
    floor_rate: f64,
) -> String {
    let traced = per_program(traced);
    let floor = per_program(floor);
    let counting = per_program(counting);
    let mut out = format!(
        "The same events with an empty program on each (`wbscope probes --cost --on-hooks`, \
         a fourth side of the rotation: the same writes, median {floor_rate:.1} MB/s), and \
         with a program that adds to one counter on each (`--counting`, a fifth side), \
         against the tracer's program on each during the writes:\n\n\
         | event | empty program: invocations, avg ns | counting program | tracer's program \
         | invocations, avg ns | tracer / empty | tracer / counting |\n\
         |---|---|---|---|---|---|---|\n"
    );
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let (mut n_all, mut ns_all, mut floor_ns_all, mut count_ns_all) = (0u64, 0u64, 0f64, 0f64);
    for &(event, program) in FLOOR_EVENTS {
        let (fc, fns) = floor.get(event).copied().unwrap_or_default();
        let (cc, cns) = counting.get(event).copied().unwrap_or_default();
        let (tc, tns) = traced.get(program).copied().unwrap_or_default();
        let (t, f, c) = (
            mean_of(&traced, program),
            mean_of(&floor, event),
            mean_of(&counting, event),
        );
        out.push_str(&format!(
            "| {event} | {fc}, {} | {cc}, {} | {program} | {tc}, {} | {} | {} |\n",
            avg_ns(fns, fc),
            avg_ns(cns, cc),
            avg_ns(tns, tc),
            ratio(t, f),
            ratio(t, c),
        ));
        if let (Some(f), Some(c)) = (f, c) {
            n_all += tc;
            ns_all += tns;
            floor_ns_all += tc as f64 * f;
            count_ns_all += tc as f64 * c;
        }
    }
    let per = |x: f64| {
        if n_all > 0 {
            x / n_all as f64
        } else {
            f64::NAN
        }
    };
    let (t, f, c) = (per(ns_all as f64), per(floor_ns_all), per(count_ns_all));
    out.push_str(&format!(
        "| **these events, weighted by the tracer's invocations** | **{f:.0}** | **{c:.0}** | | \
         **{n_all}, {t:.0}** | **{:.2}** | **{:.2}** |\n\n",
        t / f,
        t / c
    ));
    out
}

pub(super) fn avg_ns(ns: u64, count: u64) -> String {
    if count > 0 {
        format!("{:.0}", ns as f64 / count as f64)
    } else {
        "-".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One write's run-time array: `(program, run_count, run_time_ns)`.
    fn run_times(entries: &[(&str, u64, u64)]) -> serde_json::Value {
        entries
            .iter()
            .map(|(program, count, ns)| {
                serde_json::json!({"program": program, "run_count": count, "run_time_ns": ns})
            })
            .collect()
    }

    /// Each write's mean over all its programs, in order, and the median
    /// of those: a write with one slow program run stands apart.
    #[test]
    fn per_write_means_and_their_median() {
        let runs = [
            run_times(&[("a", 10, 1_000), ("b", 30, 7_000)]),
            run_times(&[("a", 4, 40_000)]),
            run_times(&[("a", 5, 1_500)]),
            run_times(&[("a", 0, 0)]),
        ];
        assert_eq!(per_write_means(&runs), "200, 10000, 300 ns, median 300");
        assert_eq!(per_write_means(&runs[3..]), "none with runs");
    }

    /// The budget's split: the dirty-time and generic-call programs came
    /// after it and report beside; the rest make its per-GiB figure. Two
    /// writes of 0.5 GiB: older 3.5 ms in 1 GiB, newer 0.5 ms; mean of
    /// all (4,000,000 ns / 20,000 runs) 200 ns, of the older 3,500,000 /
    /// 16,000 = 219 ns.
    #[test]
    fn budget_figures_split_older_and_newer_programs() {
        let runs = [
            run_times(&[
                ("tp_btf_rq_issue", 10_000, 2_000_000),
                ("tp_btf_folios_start", 4_000, 500_000),
            ]),
            run_times(&[
                ("tp_btf_rq_complete", 2_000, 1_000_000),
                ("generic_pass_end", 3_000, 400_000),
                ("dirty_folio", 1_000, 100_000),
            ]),
        ];
        // The empty program on the scan-pass start event: 50 ns; its 4,000
        // runs at 50 instead of 125 ns: 300,000 ns less, mean 185 ns. The
        // counting one: 100 ns, 100,000 ns less, mean 195 ns.
        let floor = [run_times(&[("ext4_da_write_folios_start", 10, 500)])];
        let counting = [run_times(&[("ext4_da_write_folios_start", 10, 1_000)])];
        let text = budget_figures(&runs, &floor, &counting, 0.5);
        for row in [
            "| BPF time per GiB, the budget's programs (before the dirtier's and generic calls') | **3.50 ms** | ≤ 1 ms |",
            "| BPF time per GiB, programs added since (their own share) | 0.50 ms |",
            "| mean ns per invocation, all programs | **200** | ≤ 150 |",
            "| mean ns per invocation, the budget's programs (before the dirtier's and generic calls') | 219 | |",
            "program costs on its event | 185 | what no code reaches |",
            "costs there | 195 | the least a counting program costs |",
        ] {
            assert!(text.contains(row), "{row} not in {text}");
        }
        assert!(added_after_budget("generic_iomap_folio"));
        assert!(!added_after_budget("tp_btf_folios_end"));
        assert!(!added_after_budget("balance_dirty"));
        assert_eq!(mean_with_floor_at(&runs, &[]), "-");
    }

    /// Each tracer program against the empty one on its event, and the
    /// floor of the events weighted by the tracer's own invocations: here
    /// 100 scan-pass starts at 300 ns over an empty 150, 300 call starts
    /// at 100 over an empty 50: floor (100 * 150 + 300 * 50) / 400 = 75,
    /// tracer (30000 + 30000) / 400 = 150, ratio 2. Counting programs at
    /// 200 and 75 ns: (100 * 200 + 300 * 75) / 400 = 106, ratio 1.41.
    #[test]
    fn tracer_programs_against_empty_ones_on_the_same_events() {
        let traced = [run_times(&[
            ("tp_btf_folios_start", 100, 30_000),
            ("tp_btf_writepages_start", 300, 30_000),
            ("tp_btf_extent", 7, 7_000),
        ])];
        let floor = [
            run_times(&[
                ("ext4_da_write_folios_start", 10, 1_500),
                ("ext4_writepages", 60, 3_000),
            ]),
            run_times(&[
                ("ext4_da_write_folios_start", 10, 1_500),
                ("ext4_writepages", 0, 0),
            ]),
        ];
        let counting = [run_times(&[
            ("ext4_da_write_folios_start", 10, 2_000),
            ("ext4_writepages", 30, 2_250),
        ])];
        let text = floor_comparison(&traced, &floor, &counting, 1000.0);
        for row in [
            "| ext4_da_write_folios_start | 20, 150 | 10, 200 | tp_btf_folios_start | 100, 300 \
             | 2.00 | 1.50 |",
            "| ext4_writepages | 60, 50 | 30, 75 | tp_btf_writepages_start | 300, 100 | 2.00 \
             | 1.33 |",
            "| ext4_da_write_folios_end | 0, - | 0, - | tp_btf_folios_end | 0, - | - | - |",
            "| **75** | **106** | | **400, 150** | **2.00** | **1.41** |",
        ] {
            assert!(text.contains(row), "{row} not in {text}");
        }
    }
}
