//! The probe plan as data: which hook measures each concept on this
//! kernel, and why the other candidates were refused. The candidates
//! themselves, and how they are tried, are the tracer's `plan` module.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    Fentry,
    Kprobe,
    TpBtf,
    /// A raw tracepoint attached by name: the event's raw arguments, read
    /// with `bpf_probe_read_kernel` at offsets from vmlinux' BTF.
    RawTp,
    Tracepoint,
}

impl HookKind {
    /// Every kind, best first (the order the plan tries them in).
    pub const ALL: [HookKind; 5] = [
        HookKind::Fentry,
        HookKind::Kprobe,
        HookKind::TpBtf,
        HookKind::RawTp,
        HookKind::Tracepoint,
    ];

    /// The kind's name, as `--disable` takes it and lines print it.
    pub fn name(self) -> &'static str {
        match self {
            HookKind::Fentry => "fentry",
            HookKind::Kprobe => "kprobe",
            HookKind::TpBtf => "tp_btf",
            HookKind::RawTp => "raw_tp",
            HookKind::Tracepoint => "tracepoint",
        }
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Hooks wbscope leaves off unless asked (`--enable`), because what
/// they measure comes from elsewhere at no BPF cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptIn {
    /// `writeback:global_dirty_state`, for the `tracepoint` levels of
    /// interval lines (with `dirty_limit`, which /proc/vmstat lacks); it
    /// runs on every `balance_dirty_pages()` check and every read of
    /// /proc/vmstat.
    GlobalDirtyState,
    /// `writeback:writeback_dirty_folio`, for who dirtied it per folio:
    /// exact when several processes dirty one file, but it runs once per
    /// dirtied folio in the writer's own context (4 KiB buffered writes
    /// ran about 15% slower with it).
    DirtyFolio,
    /// The block tracepoints (`block_rq_issue`, `block_rq_complete`,
    /// `block_bio_queue`), for request size and latency histograms and
    /// each call's bios: they run per request and per bio, which random
    /// 4 KiB writes make one of per page (fio `randwrite` 4 KiB: 1.4 bio
    /// and 1.3 request runs per dirtied page, docs/bench-log/
    /// small-writer.md, Run S1). Per-device counts and means come from
    /// /proc/diskstats instead.
    DeviceIo,
    /// `ext4_da_write_pages_extent`, for each call's extents and blocks:
    /// once per extent mapped, one per page under random 4 KiB writes.
    Extents,
    /// The ext4 fsync spans and jbd2 commits: per fsync, per
    /// commit phase and per journal handle.
    Durability,
    /// Each buffered write system call's span and its parts: the write
    /// system calls' tracepoints fire for every write on the host,
    /// sockets and pipes too (filtered in the kernel before any work).
    Writes,
}

impl OptIn {
    /// The per-call I/O anatomy (`device_io`, `extents`): off by default
    /// for their cost on scattered writes, on where wbscope runs its own
    /// workload and the figures are the point (`compare`, `scenario`).
    pub(crate) const ANATOMY: [OptIn; 3] = [OptIn::DeviceIo, OptIn::Extents, OptIn::Durability];
    /// What `doctor` turns on: the fsync rules need the fsync anatomy,
    /// `write-amplified` the device bytes by class and the journal's
    /// handles, `write-stalled` the write spans.
    pub(crate) const DOCTOR: [OptIn; 3] = [OptIn::DeviceIo, OptIn::Durability, OptIn::Writes];
}

impl OptIn {
    /// Every optional hook, in the order `--help` lists them.
    pub const ALL: [OptIn; 6] = [
        OptIn::GlobalDirtyState,
        OptIn::DirtyFolio,
        OptIn::DeviceIo,
        OptIn::Extents,
        OptIn::Durability,
        OptIn::Writes,
    ];

    /// The hook's name, as `--enable` takes it and lines print it.
    pub fn name(self) -> &'static str {
        match self {
            OptIn::GlobalDirtyState => "global_dirty_state",
            OptIn::DirtyFolio => "dirty_folio",
            OptIn::DeviceIo => "device_io",
            OptIn::Extents => "extents",
            OptIn::Durability => "durability",
            OptIn::Writes => "writes",
        }
    }
}

impl fmt::Display for OptIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which hooks to avoid and which optional ones to attach (`--disable`,
/// `--enable`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookChoice {
    /// Hook kinds never to use.
    pub disabled: Vec<HookKind>,
    /// Optional hooks to attach.
    pub enabled: Vec<OptIn>,
}

impl HookChoice {
    /// The same choice with what `doctor`'s rules judge on:
    /// [`OptIn::DOCTOR`]. A watch is bounded and asked for, so it carries
    /// the per-request and per-fsync programs a default trace leaves off.
    pub fn for_doctor(&self) -> HookChoice {
        self.with_all(&OptIn::DOCTOR)
    }

    /// The same choice with the per-call I/O anatomy on
    /// ([`OptIn::ANATOMY`]).
    pub fn with_anatomy(&self) -> HookChoice {
        self.with_all(&OptIn::ANATOMY)
    }

    fn with_all(&self, opt_ins: &[OptIn]) -> HookChoice {
        let mut out = self.clone();
        for &o in opt_ins {
            if !out.enabled.contains(&o) {
                out.enabled.push(o);
            }
        }
        out
    }
}

/// What the tracer measures, independent of how a kernel exposes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concept {
    WritepagesCall,
    Scan,
    PerPageWrite,
    InodeWriteback,
    FlusherWork,
    DirtyState,
    Throttling,
    DeviceIo,
    Extents,
    CpuTime,
    /// Writepages calls of filesystems other than ext4 (writeback-ebpf
    /// generic.rs).
    GenericCall,
    /// Pages dirtied per (inode, process), at dirty time.
    Dirtier,
    /// Each fsync's span and the journal commits it waits on.
    Durability,
    /// Each fsync's page wait and cache flush, measured by function hooks
    /// (else inferred from [`Concept::Durability`]'s events).
    SyncWaits,
    /// Each fsync's wait for a journal commit and its transaction,
    /// measured by a function hook on jbd2.
    JournalWait,
    /// Each buffered write system call's span, split by what it waited
    /// for.
    Writes,
    /// Each write's wait for a contended folio lock, measured by a
    /// function hook (else in its `blocked` part).
    WriteLock,
    /// Each write's wait to start a journal handle, measured by a
    /// function hook on jbd2 (else in its `blocked` part).
    WriteJournal,
}

impl Concept {
    pub const ALL: [Concept; 18] = [
        Concept::WritepagesCall,
        Concept::Scan,
        Concept::PerPageWrite,
        Concept::InodeWriteback,
        Concept::FlusherWork,
        Concept::DirtyState,
        Concept::Throttling,
        Concept::DeviceIo,
        Concept::Extents,
        Concept::CpuTime,
        Concept::GenericCall,
        Concept::Dirtier,
        Concept::Durability,
        Concept::SyncWaits,
        Concept::JournalWait,
        Concept::Writes,
        Concept::WriteLock,
        Concept::WriteJournal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Concept::WritepagesCall => "writepages_call",
            Concept::Scan => "scan",
            Concept::PerPageWrite => "per_page_write",
            Concept::InodeWriteback => "inode_writeback",
            Concept::FlusherWork => "flusher_work",
            Concept::DirtyState => "dirty_state",
            Concept::Throttling => "throttling",
            Concept::DeviceIo => "device_io",
            Concept::Extents => "extents",
            Concept::CpuTime => "cpu_time",
            Concept::GenericCall => "generic_call",
            Concept::Dirtier => "dirtier",
            Concept::Durability => "durability",
            Concept::SyncWaits => "sync_waits",
            Concept::JournalWait => "journal_wait",
            Concept::Writes => "writes",
            Concept::WriteLock => "write_lock",
            Concept::WriteJournal => "write_journal",
        }
    }
}

/// The devices' default source, as the plan names it (no program: read
/// by userspace at each interval).
pub const DISKSTATS_SOURCE: &str = "/proc/diskstats";

impl ProbePlan {
    /// Whether the devices' figures come from [`DISKSTATS_SOURCE`] (counts
    /// and means) rather than the block tracepoints (histograms).
    pub fn devices_from_diskstats(&self) -> bool {
        self.concept(Concept::DeviceIo)
            .is_some_and(|c| c.hook.as_deref() == Some(DISKSTATS_SOURCE))
    }
}

/// How the reason of a candidate left off until `--enable` begins.
pub const OFF_BY_DEFAULT: &str = "off by default";

/// A refused candidate and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub hook: String,
    pub reason: String,
}

/// The outcome for one concept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConceptPlan {
    pub concept: Concept,
    /// The chosen hook's label, or `None` when nothing could be used.
    pub hook: Option<String>,
    pub kind: Option<HookKind>,
    /// Logical fields the chosen hook provides on this kernel.
    pub fields: Vec<String>,
    /// How often the chosen hook's programs run ("per dirtied folio, in
    /// the writer's context", ...); absent in recordings made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fires: Option<String>,
    pub rejected: Vec<Rejection>,
}

impl ConceptPlan {
    pub fn new(concept: Concept) -> ConceptPlan {
        ConceptPlan {
            concept,
            hook: None,
            kind: None,
            fields: Vec::new(),
            fires: None,
            rejected: Vec::new(),
        }
    }

    /// Records that the candidate hook labelled `hook` was refused.
    pub fn reject(&mut self, hook: String, reason: impl Into<String>) {
        self.rejected.push(Rejection {
            hook,
            reason: reason.into(),
        });
    }

    pub fn is_attached(&self) -> bool {
        self.hook.is_some()
    }

    /// Not attached only because its hooks wait for `--enable`.
    pub fn is_off_by_default(&self) -> bool {
        !self.is_attached()
            && !self.rejected.is_empty()
            && self
                .rejected
                .iter()
                .all(|r| r.reason.starts_with(OFF_BY_DEFAULT))
    }

    /// Attached, but not with the first candidate this kernel could
    /// have given: a candidate was refused for a reason other than
    /// waiting for `--enable` (the devices from /proc/diskstats, the
    /// default, have not fallen back).
    pub fn fell_back(&self) -> bool {
        self.is_attached()
            && self
                .rejected
                .iter()
                .any(|r| !r.reason.starts_with(OFF_BY_DEFAULT))
    }
}

/// Hook name of a rejection that applies to every candidate.
const ALL_HOOKS: &str = "all hooks";

/// The whole plan, as `wbscope probes --json` prints it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbePlan {
    pub kernel: String,
    pub concepts: Vec<ConceptPlan>,
}

impl ProbePlan {
    pub fn concept(&self, concept: Concept) -> Option<&ConceptPlan> {
        self.concepts.iter().find(|c| c.concept == concept)
    }

    pub fn attached(&self, concept: Concept) -> bool {
        self.concept(concept).is_some_and(ConceptPlan::is_attached)
    }

    /// A plan in which nothing could be attached, for one reason (missing
    /// privileges, no tracefs): every concept says so.
    pub fn unavailable(kernel: String, reason: &str) -> ProbePlan {
        ProbePlan {
            kernel,
            concepts: Concept::ALL
                .iter()
                .map(|&c| {
                    let mut plan = ConceptPlan::new(c);
                    plan.rejected.push(Rejection {
                        hook: ALL_HOOKS.into(),
                        reason: reason.to_string(),
                    });
                    plan
                })
                .collect(),
        }
    }

    /// One line for headers: `11/12 concepts attached`, and which of the
    /// others are only off by default (`--enable`), not missing.
    pub fn summary(&self) -> String {
        let attached = self.concepts.iter().filter(|c| c.is_attached()).count();
        let off: Vec<&str> = self
            .concepts
            .iter()
            .filter(|c| c.is_off_by_default())
            .map(|c| c.concept.name())
            .collect();
        let mut out = format!("{attached}/{} concepts attached", self.concepts.len());
        if !off.is_empty() {
            out.push_str(&format!(" ({} off by default: --enable)", off.join(", ")));
        }
        out
    }

    /// The table `wbscope probes` prints.
    pub fn table(&self) -> String {
        let mut out = format!("kernel {}\n\n", self.kernel);
        out.push_str(&format!(
            "{:<16} {:<11} {}\n",
            "CONCEPT", "KIND", "HOOK / FIELDS"
        ));
        for c in &self.concepts {
            match (&c.hook, c.kind) {
                (Some(hook), kind) => {
                    // No kind: read from a /proc file, no program.
                    let kind = kind.map_or_else(|| "-".to_string(), |k| k.to_string());
                    let hook = hook.strip_prefix(&format!("{kind} ")).unwrap_or(hook);
                    out.push_str(&format!("{:<16} {:<11} {}\n", c.concept.name(), kind, hook));
                    if !c.fields.is_empty() {
                        out.push_str(&format!("{:<28} fields: {}\n", "", c.fields.join(", ")));
                    }
                    if let Some(fires) = &c.fires {
                        out.push_str(&format!("{:<28} runs: {fires}\n", ""));
                    }
                    if let Some(mode) =
                        AttributionMode::of(self).filter(|_| c.concept == Concept::Dirtier)
                    {
                        out.push_str(&format!(
                            "{:<28} attribution: {} ({})\n",
                            "",
                            mode.name(),
                            mode.exactness()
                        ));
                    }
                }
                _ => out.push_str(&format!(
                    "{:<16} {:<11} {}\n",
                    c.concept.name(),
                    "-",
                    "(none)"
                )),
            }
            for r in &c.rejected {
                out.push_str(&format!("{:<28} rejected {}: {}\n", "", r.hook, r.reason));
            }
        }
        out
    }
}

/// How the figures of who dirtied it were made, from the hook
/// the probe plan chose for the `dirtier` concept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttributionMode {
    /// Pages dirtied per (inode, process), counted per dirtied folio
    /// (`--enable dirty_folio`): exact, at a cost per write.
    #[default]
    PerFolio,
    /// The process that made each inode dirty (once per inode), and the
    /// kernel's own per-process count of dirtied pages: exact while one
    /// process at a time dirties a file (model/dirtier/by_inode.rs).
    PerInode,
}

impl AttributionMode {
    /// The mode of a plan whose `dirtier` concept is attached.
    pub fn of(plan: &ProbePlan) -> Option<AttributionMode> {
        let hook = plan
            .concepts
            .iter()
            .find(|c| c.concept == Concept::Dirtier)?
            .hook
            .as_deref()?;
        Some(if hook.contains("dirty_inode") {
            AttributionMode::PerInode
        } else {
            AttributionMode::PerFolio
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AttributionMode::PerFolio => "per_folio",
            AttributionMode::PerInode => "per_inode",
        }
    }

    /// How exact the mode is, in one sentence for the plan and the docs.
    pub fn exactness(self) -> &'static str {
        match self {
            AttributionMode::PerFolio => {
                "exact: pages dirtied per (inode, process), counted at dirty time"
            }
            AttributionMode::PerInode => {
                "exact while one process at a time dirties a file; when several do, the one \
                 that made the inode dirty is charged for all; --enable dirty_folio splits them"
            }
        }
    }
}

/// Whether one concept is being measured, for status lines and the
/// `probes` array of trace summaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeStatus {
    pub concept: &'static str,
    pub hook: Option<String>,
    #[serde(flatten)]
    pub state: ProbeState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum ProbeState {
    Attached,
    Unavailable(String),
}

impl ProbePlan {
    pub fn statuses(&self) -> Vec<ProbeStatus> {
        self.concepts
            .iter()
            .map(|c| ProbeStatus {
                concept: c.concept.name(),
                hook: c.hook.clone(),
                state: match &c.hook {
                    Some(_) => ProbeState::Attached,
                    None => ProbeState::Unavailable(
                        c.rejected
                            .last()
                            .map(|r| match r.hook.as_str() {
                                ALL_HOOKS => r.reason.clone(),
                                hook => format!("{hook}: {}", r.reason),
                            })
                            .unwrap_or_else(|| "no candidate hook on this kernel".into()),
                    ),
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_what_is_only_off_by_default() {
        let rejected = |reason: &str| Rejection {
            hook: "tp_btf x".into(),
            reason: reason.into(),
        };
        let mut attached = ConceptPlan::new(Concept::Scan);
        attached.hook = Some("tp_btf y".into());
        let mut off = ConceptPlan::new(Concept::Extents);
        off.rejected = vec![
            rejected("off by default: it runs per extent; --enable extents attaches it"),
            rejected("off by default: the same"),
        ];
        let mut missing = ConceptPlan::new(Concept::Throttling);
        missing.rejected = vec![rejected("not in the kernel's BTF")];
        let plan = ProbePlan {
            kernel: "6.18".into(),
            concepts: vec![attached, off.clone(), missing.clone()],
        };
        assert_eq!(
            plan.summary(),
            "1/3 concepts attached (extents off by default: --enable)"
        );
        // Off by default for one candidate, missing for the other: missing.
        off.rejected.push(rejected("no such tracepoint"));
        let plan = ProbePlan {
            kernel: "6.18".into(),
            concepts: vec![off, missing],
        };
        assert_eq!(plan.summary(), "0/2 concepts attached");
    }
}
