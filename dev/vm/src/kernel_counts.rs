//! What the guest kernel itself counted about wbscope's programs: its
//! kretprobes' hits and misses (`kprobe_profile`) and the runs it skipped
//! (`recursion_misses`), the evidence the checks quote or allow for.
use serde_json::Value;

/// The kretprobes' hits and misses from the `kprobe_profile` the guest
/// saved during a traced run (checks.sh `trace_run`): the default-maxactive
/// probe of the check (`wbcheck/ewp`) and wbscope's own
/// (crates/tracer/src/retprobe.rs). Evidence for the figure,
/// not a verdict: the default's misses are the kernel's.
/// Before 5.13 or so `kprobe_profile` names an event without its group
/// (`ewp`, `ext4_writepages_0`).
pub(super) fn kretprobe_note(profile: &str) -> Option<String> {
    let probes: Vec<String> = profile
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [name, hits, misses] = w[..] else {
                return None;
            };
            let event = name.rsplit('/').next().unwrap_or(name);
            let who = if event == "ewp" {
                "default maxactive"
            } else if event.starts_with("ext4_writepages_") || event.starts_with("do_writepages_") {
                "wbscope's"
            } else {
                return None;
            };
            Some(format!("{name} ({who}) {hits} hits {misses} misses"))
        })
        .collect();
    (!probes.is_empty()).then(|| format!("kretprobes: {}", probes.join(", ")))
}

/// The programs that start or end an ext4 writepages call, by hook kind
/// (writeback-ebpf writepages.rs): a call whose entry or exit run the
/// kernel skipped is in no record. A skipped exit leaves the thread
/// marked inside an ext4 call, so the generic hook's exit does not write
/// the call either (hook.rs `end_with`): a 7.3-rt guest lost one call of
/// 71 so, `kretprobe_writepages` counting the skipped run. The entries
/// first, then the exits ([`ext4_call_entry`]).
pub(super) const EXT4_CALL_PROGRAMS: [&str; 10] = [
    "kprobe_writepages",
    "fentry_writepages",
    "tp_btf_writepages_start",
    "raw_tp_writepages_start",
    "writepages_start",
    "kretprobe_writepages",
    "fexit_writepages",
    "tp_btf_writepages_end",
    "raw_tp_writepages_end",
    "writepages_end",
];

/// Whether `program` is one of [`EXT4_CALL_PROGRAMS`]' entries (their
/// first half): an end whose entry's run the kernel skipped is unmatched.
pub(super) fn ext4_call_entry(program: &str) -> bool {
    EXT4_CALL_PROGRAMS[..EXT4_CALL_PROGRAMS.len() / 2].contains(&program)
}

/// The programs that start or end a generic (`do_writepages()`) call, by
/// hook kind (writeback-ebpf hook.rs): a call whose entry or exit run the
/// kernel skipped is in no record.
pub(super) const GENERIC_CALL_PROGRAMS: [&str; 4] = [
    "generic_fentry_writepages",
    "generic_fexit_writepages",
    "generic_kprobe_writepages",
    "generic_kretprobe_writepages",
];

/// The programs that tell who made an inode dirty (writeback-ebpf
/// dirtier.rs), per inode and per folio: a skipped run of the per-inode
/// ones leaves that inode's writeback to `(unknown)`, with no owner.
pub(super) const DIRTYING_PROGRAMS: [&str; 4] = [
    "tp_btf_dirty_inode",
    "dirty_inode",
    "tp_btf_dirty_folio",
    "dirty_folio",
];

/// Runs of the programs `of` names that the kernel skipped because a run
/// was already under way on that CPU: `recursion_misses` of the summary's
/// `run_time` lines, present when not 0. On PREEMPT_RT a kprobe run is
/// skipped while any task on its CPU holds the kprobe path's guard, which
/// wbscope's own bpf() map reads raise and an RT writer can preempt
/// (crates/tracer/src/preempt.rs, KPROBE_ON_RT); a call whose entry
/// or exit run is skipped so is lost, and counted here.
pub(super) fn skipped_runs(summary: Option<&Value>, of: &dyn Fn(&str) -> bool) -> u64 {
    summary
        .and_then(|s| s["run_time"].as_array())
        .map(|runs| {
            runs.iter()
                .filter(|r| r["program"].as_str().is_some_and(of))
                .filter_map(|r| r["recursion_misses"].as_u64())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_are_the_first_half_of_the_call_programs() {
        let (entries, exits): (Vec<&str>, Vec<&str>) =
            EXT4_CALL_PROGRAMS.iter().partition(|p| ext4_call_entry(p));
        assert_eq!(
            entries,
            [
                "kprobe_writepages",
                "fentry_writepages",
                "tp_btf_writepages_start",
                "raw_tp_writepages_start",
                "writepages_start"
            ]
        );
        assert!(
            exits
                .iter()
                .all(|p| p.ends_with("_end") || p.contains("ret") || p.starts_with("fexit"))
        );
        assert!(!ext4_call_entry("kprobe_scan"));
    }

    #[test]
    fn kretprobe_misses_are_quoted() {
        let profile = "  wbcheck/ewp                     9  1\n  wbscope_80/ext4_writepages_0   10  0\n  \
                       other/x  1 1\n";
        assert_eq!(
            kretprobe_note(profile).as_deref(),
            Some(
                "kretprobes: wbcheck/ewp (default maxactive) 9 hits 1 misses, \
                 wbscope_80/ext4_writepages_0 (wbscope's) 10 hits 0 misses"
            )
        );
        assert_eq!(kretprobe_note(""), None);
        assert_eq!(
            kretprobe_note("  ewp   3   2\n  ext4_writepages_0   3   0\n").as_deref(),
            Some(
                "kretprobes: ewp (default maxactive) 3 hits 2 misses, ext4_writepages_0 \
                 (wbscope's) 3 hits 0 misses"
            )
        );
    }

    #[test]
    fn skipped_runs_sum_the_named_programs() {
        let summary: Value = serde_json::from_str(
            r#"{"run_time":[{"program":"kprobe_writepages","recursion_misses":2},{"program":"kprobe_scan","recursion_misses":5},{"program":"fentry_writepages"}]}"#,
        )
        .unwrap();
        assert_eq!(
            skipped_runs(Some(&summary), &|p| EXT4_CALL_PROGRAMS.contains(&p)),
            2
        );
        assert_eq!(skipped_runs(Some(&summary), &|_| true), 7);
        assert_eq!(skipped_runs(None, &|_| true), 0);
    }
}
