//! What a preemptible kernel changes in the probe plan: on PREEMPT_RT a
//! tracing program can be preempted by another task on its CPU, and the
//! kernel's recursion guards then skip runs (docs/toolchain.md,
//! "PREEMPT_RT"). fentry is passed over there; the scan tries tp_btf
//! before kprobes (the writepages call does so on every kernel:
//! `candidates` in plan.rs).
use super::plan::Candidate;
use wbscope_model::plan::{Concept, HookKind};

/// Why fentry/fexit are passed over on a PREEMPT_RT kernel. A
/// trampoline runs its program with migration, not preemption, disabled
/// (`__bpf_prog_enter_recur()`, kernel/bpf/trampoline.c), and skips a run
/// while another run of the same program is preempted on that CPU
/// (`prog->active`, counted in its `recursion_misses`): a skipped fentry
/// loses the call, a skipped fexit its end. kprobes run with preemption
/// off (the int3 handler) and tracepoints likewise, so they are not
/// skipped for this reason (for another, see [`KPROBE_ON_RT`]).
pub(super) const FENTRY_ON_RT: &str = "PREEMPT_RT kernel: fentry/fexit programs run preemptibly and the \
     kernel skips a run while another run of the same program is preempted on that CPU (a \
     6.12-rt guest skipped 33 of 368 do_writepages entries and lost 1 xfs call of 42); kprobes \
     and tracepoints run with preemption off";

/// Why a concept's kprobes come after its tp_btf programs on a
/// PREEMPT_RT kernel. kprobe (and classic tracepoint) programs run under
/// one per-CPU guard, `bpf_prog_active` (`trace_call_bpf()`,
/// kernel/trace/bpf_trace.c), which the bpf() syscall also raises while
/// it reads or writes a map (`bpf_disable_instrumentation()`,
/// kernel/bpf/syscall.c) with only migration disabled: on RT a writer can
/// preempt wbscope's own interval reads there, and its kprobe runs are
/// then skipped. tp_btf programs have a guard of their own
/// (`prog->active`) and run with preemption off on 6.12-rt.
pub(super) const KPROBE_ON_RT: &str = "PREEMPT_RT kernel: kprobe programs share one per-CPU guard with the \
     bpf() syscall's map reads, which an RT task can preempt while it is held, and the kernel then \
     skips them (a 6.12-rt guest lost 4 of 290 ext4_writepages calls so, recursion_misses 4); \
     the tp_btf programs, with a guard of their own, were tried first";

/// On a PREEMPT_RT kernel, moves the scan's kprobe candidates after its
/// tp_btf candidates, which give the same figures ([`KPROBE_ON_RT`]);
/// whether it moved any. The writepages call has its kprobes after its
/// own events on every kernel (`candidates` in plan.rs).
pub(super) fn defer_kprobes(concept: Concept, candidates: &mut Vec<Candidate>) -> bool {
    if concept != Concept::Scan {
        return false;
    }
    let Some(last_tp_btf) = candidates
        .iter()
        .rposition(|c| c.kind() == Some(HookKind::TpBtf))
    else {
        return false;
    };
    let (kprobes, others): (Vec<_>, Vec<_>) = candidates[..=last_tp_btf]
        .iter()
        .cloned()
        .partition(|c| c.kind() == Some(HookKind::Kprobe));
    if kprobes.is_empty() {
        return false;
    }
    let rest = candidates[last_tp_btf + 1..].to_vec();
    *candidates = others.into_iter().chain(kprobes).chain(rest).collect();
    true
}

/// Whether the running kernel is PREEMPT_RT: `/sys/kernel/realtime`
/// (kernel/ksysfs.c, CONFIG_PREEMPT_RT) or its version string
/// (`uname -v`, which names the preemption model).
pub(super) fn preempt_rt() -> bool {
    is_preempt_rt(
        std::fs::read_to_string("/sys/kernel/realtime")
            .ok()
            .as_deref(),
        std::fs::read_to_string("/proc/sys/kernel/version")
            .ok()
            .as_deref(),
    )
}

fn is_preempt_rt(realtime: Option<&str>, version: Option<&str>) -> bool {
    realtime.is_some_and(|s| s.trim() == "1")
        || version.is_some_and(|v| v.split_whitespace().any(|w| w == "PREEMPT_RT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On PREEMPT_RT the scan tries tp_btf before kprobes, the rest keep
    /// their order; the writepages call has them so already, and other
    /// concepts are untouched.
    #[test]
    fn kprobes_come_after_tp_btf_for_the_call_and_scan_on_rt() {
        let kinds = |c: &[Candidate]| c.iter().map(|c| c.kind()).collect::<Vec<_>>();
        for concept in [Concept::WritepagesCall, Concept::Scan] {
            let mut list = super::super::plan::candidates(concept);
            let before = list.len();
            let moved = defer_kprobes(concept, &mut list);
            assert_eq!(moved, concept == Concept::Scan, "{concept:?}");
            assert_eq!(list.len(), before);
            let k = kinds(&list);
            let first_kprobe = k.iter().position(|k| *k == Some(HookKind::Kprobe)).unwrap();
            let last_tp_btf = k.iter().rposition(|k| *k == Some(HookKind::TpBtf)).unwrap();
            assert!(last_tp_btf < first_kprobe, "{concept:?}: {k:?}");
            // Fentry first still (the RT plan rejects it with its reason).
            assert_eq!(k[0], Some(HookKind::Fentry));
        }
        let mut generic = super::super::plan::candidates(Concept::GenericCall);
        let same = kinds(&generic);
        assert!(!defer_kprobes(Concept::GenericCall, &mut generic));
        assert_eq!(kinds(&generic), same);
    }

    #[test]
    fn preempt_rt_from_the_realtime_file_or_the_version() {
        // Debian's 6.12 RT build and this host's.
        let rt = "#1 SMP PREEMPT_RT Debian 6.12.118-1 (2026-11-20)";
        assert!(is_preempt_rt(None, Some(rt)));
        assert!(is_preempt_rt(Some("1\n"), None));
        assert!(!is_preempt_rt(None, Some("#1 SMP PREEMPT_DYNAMIC @0")));
        assert!(!is_preempt_rt(
            Some("0\n"),
            Some("#1 SMP PREEMPT_RT_FULL_NOT")
        ));
        assert!(!is_preempt_rt(None, None));
    }
}
