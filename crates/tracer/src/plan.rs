//! The probe plan: for each concept the tracer measures, the candidate
//! hooks in order of preference (fentry/fexit, kprobe/kretprobe, tp_btf,
//! classic tracepoint), which one this kernel lets us use, and why the
//! others were refused.
//!
//! Names moved between kernels (`ext4_da_writepages` → `ext4_writepages` →
//! `ext4_do_writepages`; `write_cache_pages` → `writeback_iter`;
//! `ext4_da_write_pages` → `ext4_da_write_folios_start/end`): they are
//! candidates of the same concept, and the plan takes whichever exists.
use writeback_common::fields;

use wbscope_model::plan::{Concept, DISKSTATS_SOURCE, HookKind, OptIn};

mod tracepoint;
pub use tracepoint::TracepointAttach;
use tracepoint::{bare, optional, sys_exit, tp};

/// One BTF-typed program (tp_btf, fentry, kprobe) and what it attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BtfAttach {
    pub program: &'static str,
    /// The BTF tracepoint or kernel function.
    pub target: &'static str,
}

/// A way to hook a concept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// BTF-typed programs of wbscope's own, reading struct members at
    /// offsets resolved from the kernel's BTF.
    BtfPrograms {
        kind: HookKind,
        attaches: &'static [BtfAttach],
        fields: &'static [&'static str],
    },
    /// Function hooks (fentry/fexit, kprobe/kretprobe) and BTF tracepoints
    /// are tried on `target` with an empty program to learn whether this
    /// kernel allows them.
    Function {
        kind: HookKind,
        target: &'static str,
    },
    /// Classic tracepoints, attached together (e.g. start and end).
    Tracepoints(&'static [TracepointAttach]),
    /// Figures the writepages call's own programs read at the call's start
    /// and end: no program or hook of its own, so nothing runs for it
    /// outside writeback. Available when the writepages call is hooked, by
    /// the same kind of hook, and when its struct members resolve.
    WithCall {
        what: &'static str,
        fields: &'static [&'static str],
    },
    /// Figures userspace reads from a /proc file at each interval: no
    /// program at all.
    Procfs {
        what: &'static str,
        fields: &'static [&'static str],
    },
}

impl Candidate {
    /// The kind of hook; `None` for [`Candidate::WithCall`], whose kind
    /// is the writepages call's, and for [`Candidate::Procfs`], which has
    /// none.
    pub fn kind(&self) -> Option<HookKind> {
        match self {
            Candidate::Function { kind, .. } | Candidate::BtfPrograms { kind, .. } => Some(*kind),
            Candidate::Tracepoints(_) => Some(HookKind::Tracepoint),
            Candidate::WithCall { .. } | Candidate::Procfs { .. } => None,
        }
    }

    /// The `--enable` a candidate waits for, if it is off by default,
    /// and why it is.
    pub(crate) fn opt_in(&self) -> Option<(OptIn, &'static str)> {
        if *self == Candidate::Tracepoints(GLOBAL_DIRTY_TP) {
            return Some((
                OptIn::GlobalDirtyState,
                "it runs on every balance_dirty_pages() check (~1,000 times per GiB written, \
                 0.1-0.4 ms of BPF time) for levels /proc/vmstat has",
            ));
        }
        if *self == TP_BTF_BLOCK || *self == Candidate::Tracepoints(BLOCK_TP) {
            return Some((
                OptIn::DeviceIo,
                "it runs per device request and per bio, which random 4 KiB writes make one of \
                 per page (4 runs per dirtied page under fio randwrite with an fsync every 64); \
                 the per-device counts and means come from /proc/diskstats instead",
            ));
        }
        if *self == TP_BTF_EXTENT || *self == Candidate::Tracepoints(EXTENT_TP) {
            return Some((
                OptIn::Extents,
                "it runs once per extent mapped, one per page under random 4 KiB writes; each \
                 call's extents and blocks are then 0",
            ));
        }
        if *self == Candidate::Tracepoints(durability::DURABILITY_TP) {
            return Some((OptIn::Durability, durability::WHY_OFF));
        }
        if durability::is_wait_hook(self) {
            return Some((OptIn::Durability, durability::WAITS_WHY_OFF));
        }
        if *self == writes::CANDIDATE {
            return Some((OptIn::Writes, writes::WHY_OFF));
        }
        if writes::is_wait_hook(self) {
            return Some((OptIn::Writes, writes::WAITS_WHY_OFF));
        }
        let per_folio = *self == TP_BTF_DIRTY_FOLIO
            || *self == Candidate::Tracepoints(DIRTY_FOLIO_TP)
            || *self == Candidate::Tracepoints(DIRTY_PAGE_TP);
        per_folio.then_some((
            OptIn::DirtyFolio,
            "it runs once per dirtied folio in the writer's own context (4 KiB writes: once \
             per write(2), which slowed them ~15%); who dirtied an inode comes from its \
             clean-to-dirty transition instead, exact unless several processes dirty one file",
        ))
    }

    /// How often the candidate's programs run, for the plan: what
    /// runs per write or per page on the writer's path. The
    /// measured runs per dirtied page are in BENCHMARKS.md (`cargo xtask
    /// bench`, "small writer").
    pub fn fires(&self) -> &'static str {
        match self {
            Candidate::WithCall { .. } => "with the call's own programs",
            Candidate::Procfs { .. } => "nothing runs: read each interval",
            _ => {
                let label = self.label();
                FIRES
                    .iter()
                    .chain(durability::FIRES)
                    .chain(writes::FIRES)
                    .find(|(needle, _)| label.contains(needle))
                    .map_or("per writeback event", |(_, rate)| rate)
            }
        }
    }

    /// Human name, e.g. `fentry ext4_writepages` or
    /// `tracepoint ext4:ext4_writepages + ext4:ext4_writepages_result`.
    pub fn label(&self) -> String {
        match self {
            Candidate::Function { kind, target } => format!("{kind} {target}"),
            Candidate::BtfPrograms { kind, attaches, .. } => {
                let mut targets: Vec<&str> = Vec::new();
                for a in attaches.iter() {
                    if !targets.contains(&a.target) {
                        targets.push(a.target);
                    }
                }
                format!("{kind} {}", targets.join(" + "))
            }
            Candidate::Tracepoints(tps) => format!(
                "tracepoint {}",
                tps.iter()
                    .map(|t| format!("{}:{}", t.system, t.event))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            Candidate::WithCall { what, .. } | Candidate::Procfs { what, .. } => {
                (*what).to_string()
            }
        }
    }
}

const WRITEPAGES_REQUIRED: &[&str] = &["dev", "ino", "nr_to_write"];
const RESULT_REQUIRED: &[&str] = &["dev", "ino", "pages_written"];

pub const WRITEPAGES_TP: &[TracepointAttach] = &[
    tp(
        "writepages_start",
        "ext4",
        "ext4_writepages",
        "WRITEPAGES_LAYOUT",
        &fields::writepages::NAMES,
        WRITEPAGES_REQUIRED,
    ),
    tp(
        "writepages_end",
        "ext4",
        "ext4_writepages_result",
        "WRITEPAGES_RESULT_LAYOUT",
        &fields::writepages_result::NAMES,
        RESULT_REQUIRED,
    ),
];

/// 2.6.3x – 3.10 names of the same events.
const DA_WRITEPAGES_TP: &[TracepointAttach] = &[
    tp(
        "writepages_start",
        "ext4",
        "ext4_da_writepages",
        "WRITEPAGES_LAYOUT",
        &fields::writepages::NAMES,
        WRITEPAGES_REQUIRED,
    ),
    tp(
        "writepages_end",
        "ext4",
        "ext4_da_writepages_result",
        "WRITEPAGES_RESULT_LAYOUT",
        &fields::writepages_result::NAMES,
        RESULT_REQUIRED,
    ),
];

const FOLIOS_TP: &[TracepointAttach] = &[
    tp(
        "folios_start",
        "ext4",
        "ext4_da_write_folios_start",
        "FOLIOS_START_LAYOUT",
        &fields::folios::NAMES,
        &["dev", "ino", "start_pos"],
    ),
    tp(
        "folios_end",
        "ext4",
        "ext4_da_write_folios_end",
        "FOLIOS_END_LAYOUT",
        &fields::folios::NAMES,
        &["dev", "ino", "next_pos"],
    ),
];

const WBC_WRITEPAGE_TP: &[TracepointAttach] = &[TracepointAttach {
    program: "wbc_writepage",
    system: "writeback",
    event: "wbc_writepage",
    layout_global: None,
    fields: &[],
    required: &[],
    copies_words: false,
    optional: false,
}];

const SINGLE_INODE_TP: &[TracepointAttach] = &[tp(
    "single_inode",
    "writeback",
    "writeback_single_inode",
    "SINGLE_INODE_LAYOUT",
    &fields::single_inode::NAMES,
    &fields::single_inode::NAMES,
)];

/// `writeback_single_inode` as a BTF tracepoint: the raw arguments
/// (inode, wbc, nr_to_write) give the inode's device and number too, so
/// passes are also added up per device (`INODE_PASS`).
pub(crate) const TP_BTF_SINGLE_INODE: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[BtfAttach {
        program: "tp_btf_single_inode",
        target: "writeback_single_inode",
    }],
    fields: &["dev", "ino", "nr_to_write", "wrote"],
};

const WB_WORK_TP: &[TracepointAttach] = &[
    tp(
        "wb_start",
        "writeback",
        "writeback_start",
        "WB_START_LAYOUT",
        &fields::wb_work::NAMES,
        &["nr_pages", "reason"],
    ),
    tp(
        "wb_written",
        "writeback",
        "writeback_written",
        "WB_WRITTEN_LAYOUT",
        &fields::wb_work::NAMES,
        &["nr_pages"],
    ),
];

const GLOBAL_DIRTY_TP: &[TracepointAttach] = &[TracepointAttach {
    copies_words: true,
    ..tp(
        "global_dirty",
        "writeback",
        "global_dirty_state",
        "GLOBAL_DIRTY_LAYOUT",
        &fields::global_dirty::NAMES,
        &["nr_dirty", "nr_writeback"],
    )
}];

const BALANCE_DIRTY_TP: &[TracepointAttach] = &[tp(
    "balance_dirty",
    "writeback",
    "balance_dirty_pages",
    "BALANCE_DIRTY_LAYOUT",
    &fields::balance_dirty::NAMES,
    &["pause"],
)];

const BLOCK_TP: &[TracepointAttach] = &[
    tp(
        "rq_issue",
        "block",
        "block_rq_issue",
        "RQ_ISSUE_LAYOUT",
        &fields::rq::NAMES,
        &["dev", "sector", "bytes"],
    ),
    tp(
        "rq_complete",
        "block",
        "block_rq_complete",
        "RQ_COMPLETE_LAYOUT",
        &fields::rq::NAMES,
        &fields::rq::COMPLETE_NAMES,
    ),
    tp(
        "bio_queue",
        "block",
        "block_bio_queue",
        "BIO_QUEUE_LAYOUT",
        &fields::bio_queue::NAMES,
        &fields::bio_queue::NAMES,
    ),
];

const EXTENT_TP: &[TracepointAttach] = &[tp(
    "extent",
    "ext4",
    "ext4_da_write_pages_extent",
    "EXTENT_LAYOUT",
    &fields::extent::NAMES,
    &fields::extent::NAMES,
)];

pub const SCHED_SWITCH_TP: &[TracepointAttach] = &[tp(
    "sched_switch",
    "sched",
    "sched_switch",
    "SCHED_SWITCH_LAYOUT",
    &fields::sched_switch::NAMES,
    &fields::sched_switch::NAMES,
)];

/// What the BTF-typed writepages programs (fentry, kprobe, tp_btf) read:
/// they see the wbc itself, so `for_background` too.
const FUNCTION_WRITEPAGES_FIELDS: &[&str] = &[
    "dev",
    "ino",
    "nr_to_write",
    "pages_skipped",
    "range_start",
    "range_end",
    "writeback_index",
    "sync_mode",
    "for_kupdate",
    "for_background",
    "range_cyclic",
    "ret",
    "pages_written",
];

/// fentry/fexit on `ext4_writepages(mapping, wbc)`; pages written is the
/// budget consumed, read from the wbc at exit.
pub(crate) const FENTRY_WRITEPAGES: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Fentry,
    attaches: &[
        BtfAttach {
            program: "fentry_writepages",
            target: "ext4_writepages",
        },
        BtfAttach {
            program: "fexit_writepages",
            target: "ext4_writepages",
        },
    ],
    fields: FUNCTION_WRITEPAGES_FIELDS,
};

/// kprobe/kretprobe on `ext4_writepages`.
pub(crate) const KPROBE_WRITEPAGES: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Kprobe,
    attaches: &[
        BtfAttach {
            program: "kprobe_writepages",
            target: "ext4_writepages",
        },
        BtfAttach {
            program: "kretprobe_writepages",
            target: "ext4_writepages",
        },
    ],
    fields: FUNCTION_WRITEPAGES_FIELDS,
};

/// `ext4_writepages` / `ext4_writepages_result` as BTF tracepoints: the
/// raw arguments (inode, wbc, ret, pages_written), so `for_background`
/// comes from the wbc itself.
pub(crate) const TP_BTF_WRITEPAGES: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[
        BtfAttach {
            program: "tp_btf_writepages_start",
            target: "ext4_writepages",
        },
        BtfAttach {
            program: "tp_btf_writepages_end",
            target: "ext4_writepages_result",
        },
    ],
    fields: FUNCTION_WRITEPAGES_FIELDS,
};

/// The same events as raw tracepoints attached by name: the same
/// arguments read through `bpf_probe_read_kernel`. Where ext4 is a
/// module, aya 0.14 cannot load tp_btf programs against its split BTF;
/// a raw tracepoint needs none (docs/probes.md, "Choosing hooks").
pub(crate) const RAW_TP_WRITEPAGES: Candidate = Candidate::BtfPrograms {
    kind: HookKind::RawTp,
    attaches: &[
        BtfAttach {
            program: "raw_tp_writepages_start",
            target: "ext4_writepages",
        },
        BtfAttach {
            program: "raw_tp_writepages_end",
            target: "ext4_writepages_result",
        },
    ],
    fields: FUNCTION_WRITEPAGES_FIELDS,
};

/// ext4's scan-pass function, the one `ext4_da_write_folios_start/end`
/// bracket on 6.16+ and the only scan hook on kernels without those
/// tracepoints (ext4 never calls write_cache_pages/writeback_iter for
/// delalloc writeback).
pub(crate) const EXT4_SCAN_FUNCTION: &str = "mpage_prepare_extent_to_map";

/// kprobe/kretprobe on `mpage_prepare_extent_to_map(mpd)`: scan start and
/// end read from `struct mpage_da_data` (ScanMembers).
pub(crate) const KPROBE_SCAN: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Kprobe,
    attaches: &[
        BtfAttach {
            program: "kprobe_scan",
            target: EXT4_SCAN_FUNCTION,
        },
        BtfAttach {
            program: "kretprobe_scan",
            target: EXT4_SCAN_FUNCTION,
        },
    ],
    fields: &["start_pos", "next_pos"],
};

/// `ext4_da_write_folios_start/end` as BTF tracepoints (6.16+).
pub(crate) const TP_BTF_SCAN: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[
        BtfAttach {
            program: "tp_btf_folios_start",
            target: "ext4_da_write_folios_start",
        },
        BtfAttach {
            program: "tp_btf_folios_end",
            target: "ext4_da_write_folios_end",
        },
    ],
    fields: &["dev", "ino", "start_pos", "next_pos"],
};

/// The block tracepoint the BTF device-I/O candidate is known by.
pub(crate) const BLOCK_RQ_ISSUE: &str = "block_rq_issue";

/// The block tracepoints as BTF tracepoints: requests and bios read with
/// plain loads instead of a helper call per field, and request latency
/// from the kernel's own issue stamp where block statistics are on
/// (writeback-ebpf/src/block.rs).
pub(crate) const TP_BTF_BLOCK: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[
        BtfAttach {
            program: "tp_btf_rq_issue",
            target: BLOCK_RQ_ISSUE,
        },
        BtfAttach {
            program: "tp_btf_rq_complete",
            target: "block_rq_complete",
        },
        BtfAttach {
            program: "tp_btf_bio_queue",
            target: "block_bio_queue",
        },
    ],
    fields: &["dev", "sector", "bytes", "io_start_time_ns", "bio_bytes"],
};

/// `sched_switch` as a BTF tracepoint: `next` from the task pointer, and
/// no trace record built on every context switch. Like the classic
/// [`SCHED_SWITCH_TP`], no candidate of the plan: a program on every
/// context switch of the machine is a cost paid where nothing is written.
/// Both stay for the test that checks [`TASK_RUNTIME`]
/// against them ([`sched_switch_candidates`]).
pub(crate) const TP_BTF_SCHED_SWITCH: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[BtfAttach {
        program: "tp_btf_sched_switch",
        target: "sched_switch",
    }],
    fields: &["prev_pid", "next_pid"],
};

/// The `sched_switch` way to on-CPU time, best first: the old candidates
/// of [`Concept::CpuTime`], for tests that compare the two methods.
pub fn sched_switch_candidates() -> Vec<Candidate> {
    vec![TP_BTF_SCHED_SWITCH, Candidate::Tracepoints(SCHED_SWITCH_TP)]
}

/// On-CPU time from the calling thread's own scheduler run time
/// (`TaskMembers`, writeback-ebpf/src/sched.rs), read by the writepages
/// programs: typed loads from `bpf_get_current_task_btf()` in tp_btf and
/// fentry/fexit programs, `bpf_get_current_task()` and
/// `bpf_probe_read_kernel` in kprobes and classic tracepoints.
pub const TASK_RUNTIME: Candidate = Candidate::WithCall {
    what: "task_struct.se.sum_exec_runtime + se.exec_start at each call's start and end",
    fields: &["sum_exec_runtime", "exec_start"],
};

/// The field [`TASK_RUNTIME`] adds to its plan when the run queue's
/// clocks resolved, so that its figures leave out the time stolen from
/// the CPU (`TaskMembers::UNCOUNTED_PATHS`).
pub const TASK_RUNTIME_STEAL_FIELD: &str = "rq.clock - rq.clock_task";

/// The dirty levels and global thresholds from /proc/vmstat, read at
/// every interval (`tracer::maps::read_vmstat`), which also hands the
/// thresholds to the throttle classifier (`GLOBAL_THRESH`). The
/// default: `global_dirty_state` waits for `--enable`.
pub const VMSTAT_DIRTY: Candidate = Candidate::Procfs {
    what: "/proc/vmstat",
    fields: &[
        "nr_dirty",
        "nr_writeback",
        "nr_dirty_threshold",
        "nr_dirty_background_threshold",
        "nr_dirtied",
        "nr_written",
    ],
};

/// Per-device request counts and means from /proc/diskstats, read at
/// every interval (`tracer::diskstats`): the default for the devices, as
/// the block tracepoints run per request and per bio and wait for
/// `--enable device_io`.
pub const DISKSTATS: Candidate = Candidate::Procfs {
    what: DISKSTATS_SOURCE,
    fields: &["dev", "requests", "bytes", "latency_mean", "in_flight_mean"],
};

/// The tracepoint the BTF extent program is attached to.
pub const EXT4_EXTENT_EVENT: &str = "ext4_da_write_pages_extent";

/// `ext4_da_write_pages_extent` as a BTF tracepoint: the inode and
/// `struct ext4_map_blocks` read with plain loads (`ExtentMembers`).
pub const TP_BTF_EXTENT: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[BtfAttach {
        program: "tp_btf_extent",
        target: EXT4_EXTENT_EVENT,
    }],
    fields: &["dev", "ino", "len"],
};

/// What the tracepoint-derived calls of other filesystems give
/// (docs/probes.md, "generic calls").
const GENERIC_FIELDS: &[&str] = &[
    "dev",
    "ino",
    "nr_to_write",
    "range_start",
    "range_end",
    "sync_mode",
    "for_kupdate",
    "for_background",
    "range_cyclic",
    "writeback_index",
    "pages_written",
    "folios",
    "folio_pages",
    "boundary",
];

const GENERIC_WBC: BtfAttach = BtfAttach {
    program: "generic_wbc_writepage",
    target: "wbc_writepage",
};
const GENERIC_IOMAP: BtfAttach = BtfAttach {
    program: "generic_iomap_folio",
    target: "iomap_writeback_folio",
};
const GENERIC_BTRFS: BtfAttach = BtfAttach {
    program: "generic_btrfs_folio",
    target: "extent_writepage",
};
const GENERIC_PASS_END: BtfAttach = BtfAttach {
    program: "generic_pass_end",
    target: "writeback_single_inode",
};

/// The per-folio BTF tracepoints of iomap filesystems (xfs, ...) and
/// btrfs, grouped into calls (writeback-ebpf/src/generic.rs).
pub(crate) const TP_BTF_GENERIC: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[GENERIC_WBC, GENERIC_IOMAP, GENERIC_BTRFS, GENERIC_PASS_END],
    fields: GENERIC_FIELDS,
};

/// iomap's per-folio event before 6.17's writeback rework:
/// `iomap_writepage(inode, pos, folio_size)` (fs/iomap/trace.h, the same
/// range event class), fired by `iomap_writepage_map()` (6.12) or
/// `iomap_do_writepage()` (6.1) right after `wbc_writepage`.
const GENERIC_IOMAP_OLD: BtfAttach = BtfAttach {
    program: "generic_iomap_folio",
    target: "iomap_writepage",
};

/// The derived path on kernels before iomap_writeback_folio.
const TP_BTF_GENERIC_IOMAP_OLD: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[GENERIC_WBC, GENERIC_IOMAP_OLD, GENERIC_PASS_END],
    fields: GENERIC_FIELDS,
};

/// The same on a kernel built without btrfs.
const TP_BTF_GENERIC_IOMAP: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[GENERIC_WBC, GENERIC_IOMAP, GENERIC_PASS_END],
    fields: GENERIC_FIELDS,
};

/// The same on a kernel built without iomap's tracepoints.
const TP_BTF_GENERIC_BTRFS: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[GENERIC_BTRFS, GENERIC_PASS_END],
    fields: GENERIC_FIELDS,
};

/// What the function hooks on `do_writepages` give: the call's own start
/// and end, pages as the budget consumed, no folios (writeback-ebpf
/// hook.rs).
const HOOK_GENERIC_FIELDS: &[&str] = &[
    "dev",
    "ino",
    "nr_to_write",
    "range_start",
    "range_end",
    "sync_mode",
    "for_kupdate",
    "for_background",
    "range_cyclic",
    "writeback_index",
    "pages_written",
    "ret",
    "boundary",
];

/// fentry/fexit on `do_writepages(mapping, wbc)`: every writepages call
/// but ext4's (which have their own records).
pub(crate) const FENTRY_GENERIC: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Fentry,
    attaches: &[
        BtfAttach {
            program: "generic_fentry_writepages",
            target: "do_writepages",
        },
        BtfAttach {
            program: "generic_fexit_writepages",
            target: "do_writepages",
        },
    ],
    fields: HOOK_GENERIC_FIELDS,
};

/// kprobe/kretprobe on `do_writepages`.
pub(crate) const KPROBE_GENERIC: Candidate = Candidate::BtfPrograms {
    kind: HookKind::Kprobe,
    attaches: &[
        BtfAttach {
            program: "generic_kprobe_writepages",
            target: "do_writepages",
        },
        BtfAttach {
            program: "generic_kretprobe_writepages",
            target: "do_writepages",
        },
    ],
    fields: HOOK_GENERIC_FIELDS,
};

/// Whether a candidate is one of the generic-call ones (they read
/// `struct folio` too).
pub(crate) fn is_generic(attaches: &[BtfAttach]) -> bool {
    attaches.iter().any(|a| a.program.starts_with("generic_"))
}

mod dirtier;
mod durability;
mod writes;
pub(crate) use dirtier::{DIRTY_FOLIO, DIRTY_INODE};
use dirtier::{
    DIRTY_FOLIO_TP, DIRTY_INODE_TP, DIRTY_PAGE_TP, FIRES, TP_BTF_DIRTY_FOLIO, TP_BTF_DIRTY_INODE,
};

const fn func(kind: HookKind, target: &'static str) -> Candidate {
    Candidate::Function { kind, target }
}

/// Candidates per concept, best first.
pub fn candidates(concept: Concept) -> Vec<Candidate> {
    use HookKind::*;
    match concept {
        // The call's own events before its kprobes: they carry what the
        // kprobes read (the inode and the wbc; the result its pages
        // written), and a kprobe and its kretprobe run under the one
        // per-CPU guard the bpf() syscall holds, preemptibly, while
        // wbscope reads its maps (`bpf_prog_active`: `trace_call_bpf()`,
        // kernel/trace/bpf_trace.c; `bpf_disable_instrumentation()`,
        // include/linux/bpf.h): on a kernel whose code is preemptible
        // (lazy or full preemption, RT) a call that lands while a read is
        // preempted on its CPU is skipped, and a skipped entry and exit
        // pair the next call's exit with a stale start. A raw
        // tracepoint's guard is its own (`prog->active`,
        // `__bpf_trace_run()`): a run is skipped only while another run
        // of the same program is preempted on its CPU, where tracepoint
        // probes run preemptibly (RT; the 7.3 guests' lazy preemption),
        // and its end names its own inode and pages, so no end is paired
        // with another call's start. Each also costs less than a trap and
        // a return trampoline.
        Concept::WritepagesCall => vec![
            FENTRY_WRITEPAGES,
            func(Fentry, "ext4_da_writepages"),
            TP_BTF_WRITEPAGES,
            RAW_TP_WRITEPAGES,
            KPROBE_WRITEPAGES,
            func(Kprobe, "ext4_da_writepages"),
            Candidate::Tracepoints(WRITEPAGES_TP),
            Candidate::Tracepoints(DA_WRITEPAGES_TP),
        ],
        Concept::Scan => vec![
            func(Fentry, EXT4_SCAN_FUNCTION),
            func(Fentry, "writeback_iter"),
            func(Fentry, "write_cache_pages"),
            KPROBE_SCAN,
            func(Kprobe, "writeback_iter"),
            func(Kprobe, "write_cache_pages"),
            TP_BTF_SCAN,
            Candidate::Tracepoints(FOLIOS_TP),
        ],
        Concept::PerPageWrite => vec![
            Candidate::BtfPrograms {
                kind: TpBtf,
                attaches: &[BtfAttach {
                    program: "tp_btf_wbc_writepage",
                    target: "wbc_writepage",
                }],
                fields: &[],
            },
            Candidate::Tracepoints(WBC_WRITEPAGE_TP),
        ],
        Concept::InodeWriteback => {
            vec![TP_BTF_SINGLE_INODE, Candidate::Tracepoints(SINGLE_INODE_TP)]
        }
        Concept::FlusherWork => vec![
            func(TpBtf, "writeback_start"),
            Candidate::Tracepoints(WB_WORK_TP),
        ],
        Concept::DirtyState => vec![
            func(TpBtf, "global_dirty_state"),
            Candidate::Tracepoints(GLOBAL_DIRTY_TP),
            VMSTAT_DIRTY,
        ],
        Concept::Throttling => vec![
            func(TpBtf, "balance_dirty_pages"),
            Candidate::Tracepoints(BALANCE_DIRTY_TP),
        ],
        // The block tracepoints when asked (`--enable device_io`), else
        // /proc/diskstats; the extents only when asked.
        Concept::DeviceIo => vec![TP_BTF_BLOCK, Candidate::Tracepoints(BLOCK_TP), DISKSTATS],
        Concept::Extents => vec![TP_BTF_EXTENT, Candidate::Tracepoints(EXTENT_TP)],
        // Nothing on the scheduler: see TASK_RUNTIME, TP_BTF_SCHED_SWITCH.
        Concept::CpuTime => vec![TASK_RUNTIME],
        Concept::GenericCall => vec![
            FENTRY_GENERIC,
            KPROBE_GENERIC,
            TP_BTF_GENERIC,
            TP_BTF_GENERIC_IOMAP,
            TP_BTF_GENERIC_IOMAP_OLD,
            TP_BTF_GENERIC_BTRFS,
        ],
        // Per folio when asked (`--enable dirty_folio`), else once per
        // inode made dirty: the opt-in candidates first, so that asking
        // for them takes them.
        Concept::Dirtier => vec![
            TP_BTF_DIRTY_FOLIO,
            Candidate::Tracepoints(DIRTY_FOLIO_TP),
            Candidate::Tracepoints(DIRTY_PAGE_TP),
            TP_BTF_DIRTY_INODE,
            Candidate::Tracepoints(DIRTY_INODE_TP),
        ],
        // Only when asked (`--enable durability`).
        Concept::Durability => vec![Candidate::Tracepoints(durability::DURABILITY_TP)],
        // Measured where function hooks load, inferred from the order of
        // the durability tracepoints without them (model/durability).
        Concept::SyncWaits => vec![durability::FENTRY_SYNC_WAITS, durability::KPROBE_SYNC_WAITS],
        Concept::JournalWait => vec![
            durability::FENTRY_JOURNAL_WAIT,
            durability::KPROBE_JOURNAL_WAIT,
        ],
        // Only when asked (`--enable writes`).
        Concept::Writes => vec![writes::CANDIDATE],
        // Measured where function hooks load, else in `blocked`.
        Concept::WriteLock => vec![writes::FENTRY_LOCK, writes::KPROBE_LOCK],
        Concept::WriteJournal => vec![writes::FENTRY_JOURNAL, writes::KPROBE_JOURNAL],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::plan::{ConceptPlan, ProbePlan};

    /// Every concept works with classic tracepoints alone: its last
    /// candidate is one, or is read by the writepages programs, which
    /// have one, or needs no program at all (/proc/vmstat).
    #[test]
    fn every_concept_has_a_classic_tracepoint_fallback_last() {
        for c in Concept::ALL {
            let cands = candidates(c);
            // Generic calls need a pointer to the inode or the wbc, which
            // no classic tracepoint record carries (docs/probes.md); the
            // measured waits are functions no tracepoint marks: without
            // them the durability tracepoints' order gives the parts.
            assert!(
                matches!(
                    c,
                    Concept::GenericCall
                        | Concept::SyncWaits
                        | Concept::JournalWait
                        | Concept::WriteLock
                        | Concept::WriteJournal
                ) || matches!(
                    cands.last(),
                    Some(
                        Candidate::Tracepoints(_)
                            | Candidate::WithCall { .. }
                            | Candidate::Procfs { .. }
                    )
                ),
                "{c:?}"
            );
            // Order of preference: fentry, kprobe, tp_btf, raw_tp,
            // tracepoint, among the default candidates and among the
            // opt-in ones; the writepages call's own events come before
            // its kprobes (`candidates`: the kprobes' shared guard).
            for opt_in in [true, false] {
                let ranks = ranks(
                    cands.iter().filter(|k| k.opt_in().is_some() == opt_in),
                    c == Concept::WritepagesCall,
                );
                assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{c:?}: {ranks:?}");
            }
        }
    }

    fn ranks<'a>(cands: impl Iterator<Item = &'a Candidate>, events_first: bool) -> Vec<u8> {
        cands
            .map(|k| match k.kind() {
                Some(HookKind::Fentry) => 0,
                Some(HookKind::Kprobe) if events_first => 4,
                Some(HookKind::Kprobe) => 1,
                Some(HookKind::TpBtf) => 2,
                Some(HookKind::RawTp) => 3,
                Some(HookKind::Tracepoint) | None => 5,
            })
            .collect()
    }

    /// The writepages call: its tp_btf, then its raw tracepoints, before
    /// its kprobes, and the raw tracepoints' programs are in the object
    /// (`the_object_has_every_program_and_global_the_loader_names`,
    /// object.rs).
    #[test]
    fn the_call_tries_its_events_before_its_kprobes() {
        let labels: Vec<String> = candidates(Concept::WritepagesCall)
            .iter()
            .map(Candidate::label)
            .collect();
        let at = |l: &str| labels.iter().position(|x| x == l).unwrap();
        assert!(
            at("tp_btf ext4_writepages + ext4_writepages_result")
                < at("raw_tp ext4_writepages + ext4_writepages_result")
        );
        assert!(
            at("raw_tp ext4_writepages + ext4_writepages_result") < at("kprobe ext4_writepages")
        );
    }

    /// `global_dirty_state`, the per-folio dirtier hooks and the per-call
    /// I/O anatomy wait for `--enable`, and what they measure has a
    /// default after them where anything else sees it: no program at all
    /// for the dirty levels and the devices, a once-per-inode one for who
    /// dirtied it.
    #[test]
    fn the_opt_in_hooks_have_a_cheaper_default() {
        for c in Concept::ALL {
            let cands = candidates(c);
            for (i, cand) in cands.iter().enumerate() {
                if let Some((opt_in, why)) = cand.opt_in() {
                    assert!(!why.is_empty());
                    let default = cands[i + 1..].iter().find(|l| l.opt_in().is_none());
                    match opt_in {
                        OptIn::GlobalDirtyState => {
                            assert!(matches!(default, Some(Candidate::Procfs { .. })), "{c:?}")
                        }
                        OptIn::DirtyFolio => assert_eq!(
                            default.map(Candidate::fires),
                            Some("per inode made dirty (clean to dirty)"),
                            "{c:?}"
                        ),
                        OptIn::DeviceIo => assert_eq!(default, Some(&DISKSTATS), "{c:?}"),
                        // Nothing else sees a call's extents, an
                        // fsync's span and commits, or a write's span.
                        OptIn::Extents | OptIn::Durability | OptIn::Writes => {
                            assert_eq!(default, None, "{c:?}")
                        }
                    }
                }
            }
        }
        assert!(Candidate::Tracepoints(GLOBAL_DIRTY_TP).opt_in().is_some());
        assert!(Candidate::Tracepoints(BALANCE_DIRTY_TP).opt_in().is_none());
        assert_eq!(
            TP_BTF_DIRTY_FOLIO.opt_in().map(|o| o.0),
            Some(OptIn::DirtyFolio)
        );
        assert!(TP_BTF_DIRTY_INODE.opt_in().is_none());
        assert!(TP_BTF_SCAN.opt_in().is_none(), "the scan cost stays on");
    }

    /// Every hook of the plan says how often it runs; those on the
    /// writer's own path say so.
    #[test]
    fn every_candidate_says_how_often_it_runs() {
        for c in Concept::ALL {
            for cand in candidates(c) {
                assert!(!cand.fires().is_empty(), "{}", cand.label());
            }
        }
        assert_eq!(
            TP_BTF_DIRTY_FOLIO.fires(),
            "per dirtied folio, in the writer's context"
        );
        assert_eq!(
            Candidate::Tracepoints(BLOCK_TP).fires(),
            "per block request issued and completed"
        );
    }

    /// No candidate of the plan hooks an event that fires
    /// without writeback or I/O; the scheduler's stay out of the plan.
    #[test]
    fn no_candidate_hooks_the_scheduler() {
        for c in Concept::ALL {
            for cand in candidates(c) {
                assert!(!cand.label().contains("sched"), "{c:?}: {}", cand.label());
            }
        }
        assert!(
            sched_switch_candidates()
                .iter()
                .all(|c| c.label().contains("sched_switch"))
        );
    }

    #[test]
    fn required_fields_are_read_fields() {
        for c in Concept::ALL {
            for cand in candidates(c) {
                if let Candidate::Tracepoints(tps) = cand {
                    for t in tps {
                        for r in t.required {
                            assert!(t.fields.contains(r), "{}:{} {r}", t.system, t.event);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn labels_and_json_shape() {
        assert_eq!(
            Candidate::Tracepoints(WRITEPAGES_TP).label(),
            "tracepoint ext4:ext4_writepages + ext4:ext4_writepages_result"
        );
        let mut plan = ConceptPlan::new(Concept::WritepagesCall);
        plan.reject(
            func(HookKind::Fentry, "ext4_writepages").label(),
            "BPF_PROG_LOAD returned EPERM",
        );
        plan.hook = Some(Candidate::Tracepoints(WRITEPAGES_TP).label());
        plan.kind = Some(HookKind::Tracepoint);
        let v = serde_json::to_value(ProbePlan {
            kernel: "6.18".into(),
            concepts: vec![plan, ConceptPlan::new(Concept::Scan)],
        })
        .unwrap();
        assert_eq!(v["concepts"][0]["concept"], "writepages_call");
        assert_eq!(v["concepts"][0]["kind"], "tracepoint");
        assert_eq!(
            v["concepts"][0]["rejected"][0]["hook"],
            "fentry ext4_writepages"
        );
        assert_eq!(v["concepts"][1]["hook"], serde_json::Value::Null);
        assert_eq!(v["concepts"][1]["kind"], serde_json::Value::Null);
    }
}
