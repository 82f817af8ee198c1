//! The `dirtier` concept's candidates (who dirtied it: per folio when
//! asked, once per inode made dirty by default; writeback-ebpf
//! dirtier.rs) and how often each hook of the plan runs.
use writeback_common::fields;

use super::{BtfAttach, Candidate, TracepointAttach, tp};
use wbscope_model::plan::HookKind;

/// `writeback:writeback_dirty_folio` (5.17+) and its older name: the
/// inode number only, one page per event (dirtier.rs).
pub(super) const DIRTY_FOLIO_TP: &[TracepointAttach] = &[tp(
    "dirty_folio",
    "writeback",
    "writeback_dirty_folio",
    "DIRTY_FOLIO_LAYOUT",
    &fields::dirty_folio::NAMES,
    &fields::dirty_folio::NAMES,
)];
pub(super) const DIRTY_PAGE_TP: &[TracepointAttach] = &[tp(
    "dirty_folio",
    "writeback",
    "writeback_dirty_page",
    "DIRTY_FOLIO_LAYOUT",
    &fields::dirty_folio::NAMES,
    &fields::dirty_folio::NAMES,
)];

/// The BTF tracepoint the dirtier candidate is known by.
pub(crate) const DIRTY_FOLIO: &str = "writeback_dirty_folio";

/// `writeback_dirty_folio` as a BTF tracepoint: the folio and its
/// mapping, so the filesystem's device, the folio's page count and the
/// inode's writeback cgroup too (`DirtierMembers`).
pub(crate) const TP_BTF_DIRTY_FOLIO: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[BtfAttach {
        program: "tp_btf_dirty_folio",
        target: DIRTY_FOLIO,
    }],
    fields: &["dev", "ino", "pages", "owner_cgroup_id"],
};

/// The BTF tracepoint of the default dirtier candidate: an inode went
/// from clean to dirty.
pub(crate) const DIRTY_INODE: &str = "writeback_dirty_inode_enqueue";

/// `writeback_dirty_inode_enqueue` as a BTF tracepoint: the inode, so its
/// device and writeback cgroup too.
pub(crate) const TP_BTF_DIRTY_INODE: Candidate = Candidate::BtfPrograms {
    kind: HookKind::TpBtf,
    attaches: &[BtfAttach {
        program: "tp_btf_dirty_inode",
        target: DIRTY_INODE,
    }],
    fields: &["dev", "ino", "owner_cgroup_id"],
};

/// The same as a classic tracepoint (5.9+): `dev` and `ino`.
pub(super) const DIRTY_INODE_TP: &[TracepointAttach] = &[tp(
    "dirty_inode",
    "writeback",
    DIRTY_INODE,
    "DIRTY_INODE_LAYOUT",
    &fields::dirty_inode::NAMES,
    &fields::dirty_inode::NAMES,
)];

/// How often each hook's programs run, by a part of its label, first
/// match: what the plan prints beside each hook (`Candidate::fires`).
/// Sources: mm/page-writeback.c (`folio_account_dirtied()`,
/// `balance_dirty_pages()`), fs/fs-writeback.c (`__mark_inode_dirty()`,
/// `writeback_sb_inodes()`), block/blk-mq.c.
pub(super) const FIRES: &[(&str, &str)] = &[
    (
        "writeback_dirty_folio",
        "per dirtied folio, in the writer's context",
    ),
    (
        "writeback_dirty_page",
        "per dirtied page, in the writer's context",
    ),
    (
        "dirty_inode_enqueue",
        "per inode made dirty (clean to dirty)",
    ),
    ("global_dirty_state", "per balance_dirty_pages() check"),
    (
        "balance_dirty_pages",
        "per pause of a throttled dirtier (past the freerun ceiling)",
    ),
    ("block_rq", "per block request issued and completed"),
    ("block_bio", "per bio queued"),
    ("wbc_writepage", "per folio written back"),
    ("write_folios", "per scan pass of a writepages call"),
    ("extent", "per extent mapped in a writepages call"),
    ("single_inode", "per inode pass of the flusher"),
    ("writeback_start", "per flusher work item"),
    ("writeback_written", "per flusher work item"),
    ("sched_switch", "per context switch"),
];
