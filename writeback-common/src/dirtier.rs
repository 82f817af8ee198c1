//! Who dirtied it: dirty-time aggregation per (inode, process), read by
//! userspace to charge each writeback call's pages to the processes that
//! dirtied them.
use crate::MemberSpec;

/// Key of the `DIRTIERS` map: one process's dirtying of one inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirtierKey {
    pub ino: u64,
    /// Kernel `dev_t` of the inode's filesystem (`inode->i_sb->s_dev`),
    /// or 0 when the hook cannot see it (the classic tracepoint names the
    /// bdi, not the filesystem).
    pub dev: u32,
    /// Process (thread group) id of the dirtier.
    pub tgid: u32,
}

/// Value of the `DIRTIERS` map. `pages` only grows (atomic adds), from
/// the entry's creation on; `queued` is the last reading the entry was
/// announced for; the rest is taken when the entry is created.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtierEntry {
    /// Pages that went from clean to dirty (`folio_nr_pages()` per
    /// `writeback_dirty_folio` event).
    pub pages: u64,
    /// cgroup v2 id of the dirtier (`bpf_get_current_cgroup_id()`).
    pub cgroup_id: u64,
    /// cgroup id of the memcg the kernel charges the inode's writeback to
    /// (`inode->i_wb->memcg_css->cgroup->kn->id`); 0 without cgroup
    /// writeback (no `i_wb`).
    pub owner_cgroup_id: u64,
    /// Thread id of the first dirtying thread.
    pub pid: u32,
    /// The reading generation (`sampling::READING`) in which the entry
    /// was last sent to `DIRTYINGS` as a [`DirtierChanged`]: once a
    /// reading is enough.
    pub queued: u32,
    pub comm: [u8; 16],
    /// CLOCK_MONOTONIC ns when the entry was made (0 while its pages are
    /// still in a CPU's slot): an entry LRU-evicted and made again under
    /// the same key is told from the old one by it, its count starting
    /// from zero again.
    pub born_ns: u64,
}

/// Kind word of a [`DirtierChanged`] record in `DIRTYINGS`.
pub const DIRTIER_CHANGED_KIND: u32 = 0x4348_4e47; // "CHNG"

/// The per-folio program added pages to this `DIRTIERS` entry since the
/// reading before: the reading looks up just these entries (and every
/// entry once in a while) instead of the whole map, whose pairs grow with
/// the files the host has dirtied. Sent once per entry per reading (its
/// `queued`), to the same ring as [`InodeDirtying`] (one mode at a time
/// uses it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtierChanged {
    /// [`DIRTIER_CHANGED_KIND`].
    pub kind: u32,
    pub _pad: u32,
    pub key: DirtierKey,
}

/// The dirty-time program's per-CPU cache (`DIRTY_SLOT`, an array with a
/// slot per CPU): the last (inode, process) this CPU dirtied and its pages
/// not yet added to `DIRTIERS` (`entry.pages`). A run of dirtying by one
/// process of one file, the common case, then costs an array lookup per
/// folio instead of a hash lookup; the pages move to `DIRTIERS` when the
/// CPU dirties another (inode, process). Userspace adds both.
///
/// What a folio is matched against and what a hit adds to lie in the
/// first 32 bytes, so that a hit reads one cache line of the slot (at
/// most two: array values are only 8-byte aligned). 128 bytes a slot, so
/// that the lines one CPU writes on every hit are not another's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtierSlot {
    pub key: DirtierKey,
    /// 1 when the device or inode filter drops the slot's key: its folios
    /// are not counted (the filter is asked on a miss only).
    pub dropped: u32,
    pub _pad: u32,
    pub entry: DirtierEntry,
    pub _spare: [u64; 6],
}

/// Key of `FILTER_DIRTIED`: an inode the `--pid`/`--cgroup` filter's
/// process or cgroup dirtied, whose writeback calls are kept whoever
/// makes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InodeKey {
    pub ino: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// Kind word of an [`InodeDirtying`] record in `DIRTYINGS`.
pub const INODE_DIRTYING_KIND: u32 = 0x4449_5254; // "DIRT"

/// A process made an inode dirty: it went from clean to dirty
/// (`writeback_dirty_inode_enqueue`, fired by `__mark_inode_dirty()` in
/// fs/fs-writeback.c when `was_dirty` is 0 and the inode joins the
/// `b_dirty` list). Once per inode per clean → dirty transition, not per
/// folio: the default way of telling who dirtied the pages a call writes
/// (`DIRTYINGS`, a ring buffer of its own, drained by userspace at each
/// reading of the dirtier maps).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodeDirtying {
    /// [`INODE_DIRTYING_KIND`].
    pub kind: u32,
    /// Kernel `dev_t` of the inode's filesystem (`inode->i_sb->s_dev`;
    /// the classic tracepoint's `dev` is the same).
    pub dev: u32,
    pub ino: u64,
    /// CLOCK_MONOTONIC ns (`bpf_ktime_get_ns()`), the clock of a call's
    /// `start_ns`.
    pub at_ns: u64,
    /// cgroup v2 id of the dirtier.
    pub cgroup_id: u64,
    /// The inode's writeback cgroup (`inode->i_wb`'s memcg), 0 without
    /// cgroup writeback or from the classic tracepoint.
    pub owner_cgroup_id: u64,
    /// Process (thread group) and thread ids of the dirtier.
    pub tgid: u32,
    pub pid: u32,
    pub comm: [u8; 16],
}

/// Kind word of a [`DirtyingBatch`] record in `DIRTYINGS`.
pub const DIRTYING_BATCH_KIND: u32 = 0x4442_4154; // "DBAT"

/// Dirtyings a CPU keeps before sending them to `DIRTYINGS` in one record.
pub const DIRTYING_BATCH: usize = 8;

/// One CPU's [`InodeDirtying`]s, sent as one ring record once
/// [`DIRTYING_BATCH`] are kept, or when userspace asks for a quiet CPU's
/// before it drains the ring (writeback-ebpf dirtier.rs,
/// `flush_dirtying_batch`), for the reason [`crate::CallBatch`] is kept:
/// a ring record costs about 290 ns here, most of the dirtying program.
/// Its state is a [`crate::BatchState`] beside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirtyingBatch {
    /// [`DIRTYING_BATCH_KIND`].
    pub kind: u32,
    /// Dirtyings sent, the first `count` of `dirtyings`.
    pub count: u32,
    pub dirtyings: [InodeDirtying; DIRTYING_BATCH],
}

/// What the BTF dirty-time program reads, resolved from the kernel's BTF
/// apart from [`crate::KernelMembers`] (indexed by [`dirtier_members`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtierMembers {
    pub members: [MemberSpec; 12],
    /// Bit of `PG_head` in the folio's flags (`enum pageflags`): set on a
    /// large folio, whose `_nr_pages` is then valid.
    pub pg_head_bit: u32,
    pub _pad: u32,
}

impl DirtierMembers {
    pub const EMPTY: DirtierMembers = DirtierMembers {
        members: [MemberSpec::ABSENT; 12],
        pg_head_bit: 0,
        _pad: 0,
    };
}

/// [`DirtierMembers`] slots, with the `(struct, member paths tried in
/// order, required)` of each in [`dirtier_members::PATHS`].
pub mod dirtier_members {
    pub const FOLIO_FLAGS: usize = 0;
    pub const FOLIO_NR_PAGES: usize = 1;
    pub const MAPPING_HOST: usize = 2;
    pub const INODE_I_INO: usize = 3;
    pub const INODE_I_SB: usize = 4;
    pub const SB_S_DEV: usize = 5;
    pub const INODE_I_WB: usize = 6;
    pub const WB_MEMCG_CSS: usize = 7;
    pub const CSS_CGROUP: usize = 8;
    pub const CGROUP_KN: usize = 9;
    pub const KN_ID: usize = 10;
    /// Sources: include/linux/mm_types.h (struct folio: `flags` became a
    /// `memdesc_flags_t` holding `f` in 6.18; the page count of a large
    /// folio is `_nr_pages` from 6.15, `_folio_nr_pages` on 64-bit before,
    /// what `folio_nr_pages()` returns), include/linux/fs.h (address_space,
    /// inode, super_block), include/linux/backing-dev-defs.h
    /// (bdi_writeback.memcg_css, with CONFIG_CGROUP_WRITEBACK),
    /// include/linux/cgroup-defs.h and kernfs.h (the cgroup id is its
    /// kernfs node's id, what `bpf_get_current_cgroup_id()` returns).
    pub const PATHS: [(&str, &[&str], bool); 11] = [
        ("folio", &["flags.f", "flags"], true),
        ("folio", &["_nr_pages", "_folio_nr_pages"], false),
        ("address_space", &["host"], true),
        ("inode", &["i_ino"], true),
        ("inode", &["i_sb"], true),
        ("super_block", &["s_dev"], true),
        ("inode", &["i_wb"], false),
        ("bdi_writeback", &["memcg_css"], false),
        ("cgroup_subsys_state", &["cgroup"], false),
        ("cgroup", &["kn"], false),
        ("kernfs_node", &["id"], false),
    ];
}

/// Kind word of a [`TaskIo`] record read by the task iterator.
pub const TASK_IO_LIVE_KIND: u32 = 0x4c49_5645; // "LIVE"
/// Kind word of a [`TaskIo`] record sent to `DIRTYINGS` when a process
/// (its last thread) exits.
pub const TASK_IO_EXIT_KIND: u32 = 0x4558_4954; // "EXIT"

/// A process's I/O counts as the kernel keeps them per task (`struct
/// task_io_accounting`, include/linux/task_io_accounting.h, the figures
/// of /proc/PID/io), read by a BPF program instead of /proc: for the
/// living by the task iterator (one record per thread of a followed
/// process, the group leader's with the counts its exited threads left in
/// `signal->ioac`, which `__exit_signal()` in kernel/exit.c adds them to),
/// and once per process at its exit (its last thread's counts with
/// `signal->ioac`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIo {
    /// [`TASK_IO_LIVE_KIND`] or [`TASK_IO_EXIT_KIND`].
    pub kind: u32,
    pub tgid: u32,
    /// The thread group leader's `start_boottime` (ns of CLOCK_BOOTTIME):
    /// tells a process from a later one of the same pid.
    pub start_boottime: u64,
    /// Bytes passed to write-family system calls (`wchar`).
    pub wchar: u64,
    /// Bytes taken from clean to dirty in the page cache
    /// (`write_bytes`: `folio_account_dirtied()` → `task_io_account_write()`).
    pub write_bytes: u64,
    /// Dirty bytes truncated away before writeback
    /// (`cancelled_write_bytes`).
    pub cancelled_write_bytes: u64,
}

/// Where the task programs read a task's counts, resolved from the
/// kernel's BTF (indexed by [`task_io_members`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIoMembers {
    pub members: [MemberSpec; 11],
}

impl TaskIoMembers {
    pub const EMPTY: TaskIoMembers = TaskIoMembers {
        members: [MemberSpec::ABSENT; 11],
    };
}

/// [`TaskIoMembers`] slots, with the `(struct, member path)` of each in
/// [`task_io_members::PATHS`]; all are required.
pub mod task_io_members {
    pub const TASK_TGID: usize = 0;
    pub const TASK_GROUP_LEADER: usize = 1;
    pub const TASK_START_BOOTTIME: usize = 2;
    pub const TASK_SIGNAL: usize = 3;
    pub const TASK_WCHAR: usize = 4;
    pub const TASK_WRITE_BYTES: usize = 5;
    pub const TASK_CANCELLED: usize = 6;
    pub const SIGNAL_LIVE: usize = 7;
    pub const SIGNAL_WCHAR: usize = 8;
    pub const SIGNAL_WRITE_BYTES: usize = 9;
    pub const SIGNAL_CANCELLED: usize = 10;
    /// Sources: include/linux/sched.h (`task_struct`: `ioac` with
    /// CONFIG_TASK_XACCT for `wchar` and CONFIG_TASK_IO_ACCOUNTING for the
    /// byte counts; `start_boottime` since 5.5), include/linux/sched/
    /// signal.h (`signal_struct`: `live`, the threads not yet exiting, 0
    /// once the last has passed `do_exit()`'s `group_dead` test; `ioac`,
    /// the exited threads' sums).
    pub const PATHS: [(&str, &str); 11] = [
        ("task_struct", "tgid"),
        ("task_struct", "group_leader"),
        ("task_struct", "start_boottime"),
        ("task_struct", "signal"),
        ("task_struct", "ioac.wchar"),
        ("task_struct", "ioac.write_bytes"),
        ("task_struct", "ioac.cancelled_write_bytes"),
        ("signal_struct", "live.counter"),
        ("signal_struct", "ioac.wchar"),
        ("signal_struct", "ioac.write_bytes"),
        ("signal_struct", "ioac.cancelled_write_bytes"),
    ];
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] structs of plain integers with explicit padding.
    unsafe impl aya::Pod for super::DirtierKey {}
    unsafe impl aya::Pod for super::DirtierEntry {}
    unsafe impl aya::Pod for super::DirtierSlot {}
    unsafe impl aya::Pod for super::InodeKey {}
    unsafe impl aya::Pod for super::InodeDirtying {}
    unsafe impl aya::Pod for super::DirtyingBatch {}
    unsafe impl aya::Pod for super::DirtierMembers {}
    unsafe impl aya::Pod for super::TaskIo {}
    unsafe impl aya::Pod for super::TaskIoMembers {}
}
