//! Who dirtied it: charging each writeback call's pages to the processes
//! that dirtied them (docs/trace-json.md, "dirtiers").
//!
//! The kernel counts pages dirtied per (inode, process) at dirty time
//! (writeback-ebpf/src/dirtier.rs): cumulative counters, read by
//! userspace. The join with the calls happens here, not in the kernel:
//! the per-call record already names the inode, the dirty-time program
//! stays one lookup and one add, and the rule below can be changed and
//! tested without touching the kernel side.
//!
//! The rule. Per inode, every process has *outstanding* pages: pages it
//! dirtied (clean → dirty transitions) that no call has been charged for
//! yet. A call on the inode that wrote `n` pages charges them to the
//! inode's processes in proportion to their outstanding pages (largest
//! remainders, so the shares add up to `n` exactly), and never more than
//! a process has outstanding; pages beyond all outstanding pages are
//! charged to `(unknown)` (dirtied before the trace started, or by a path
//! the dirty hook does not see). A WB_SYNC_ALL call over the whole file
//! leaves the inode clean of what was dirty when it started: outstanding
//! pages read before its start that it did not write were cleaned without
//! writeback (truncated, hole-punched, cancelled) and are dropped. Pages
//! read after its start may have been dirtied while it ran, behind its
//! tagging (`tag_pages_for_writeback()` in mm/page-writeback.c), and stay
//! outstanding: charges take a process's oldest pages first.
use std::collections::{BTreeMap, HashMap};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::CallRecord;
pub use crate::plan::AttributionMode;

mod aged;
mod by_inode;
mod owners;
pub use by_inode::{InodeDirtyingReading, TaskReading};
pub use owners::OwnerTotal;
pub(crate) use owners::add_known;

/// Entries a call line lists before the rest go to one `(others)` entry.
pub(crate) const MAX_CALL_DIRTIERS: usize = 8;
/// Rows an interval's `owners` lists before the rest go to `(others)`.
pub(crate) const MAX_OWNERS: usize = 16;
/// Comm of the entry that sums the dirtiers past the cap.
pub const OTHERS: &str = "(others)";
/// Comm of the entry for pages no seen dirtying accounts for.
pub(crate) const UNKNOWN: &str = "(unknown)";

/// foldhash's fast seeded hasher: the attribution's tables are updated
/// once per inode dirtying and looked up once per writepages call, 10,000
/// times a second each under an fsync storm, where std's SipHash showed
/// in the profile (docs/bench-log/fsync-storm.md).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Readings whose growth each (inode, process) remembers with its time,
/// newest last, for the whole-file sync rule; older growth counts as read
/// before any call still to come started. Readings come every interval
/// and before a short batch: 16 cover the seconds a sync call lasts.
const RECENT_READINGS: usize = 16;

/// One process's share of a call: `pages` of the pages the call wrote
/// were dirtied by it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dirtier {
    /// Process (thread group) id; 0 for `(others)` and `(unknown)`.
    pub pid: u32,
    /// Inline, as a call record's (one per call).
    pub comm: CompactString,
    /// cgroup v2 id of the dirtier; 0 for `(others)` and `(unknown)`.
    pub cgroup_id: u64,
    pub pages: u64,
}

/// A call's dirtiers: one in place (a file has one writer, mostly), so
/// that charging a call allocates nothing.
pub type Dirtiers = smallvec::SmallVec<[Dirtier; 1]>;

/// One (inode, process) entry of the kernel's `DIRTIERS` map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirtierReading {
    /// Kernel `dev_t`; 0 when the hook could not see it.
    pub dev: u32,
    pub ino: u64,
    pub tgid: u32,
    /// Cumulative pages dirtied since the entry was created.
    pub pages: u64,
    /// Thread that first dirtied, its comm and cgroup.
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// The inode's writeback cgroup (0 = none).
    pub owner_cgroup_id: u64,
    /// When the kernel made the entry (CLOCK_MONOTONIC ns; 0 for pages
    /// still in a CPU's slot): a new time under a known key is a new
    /// entry, made after the old one was evicted, counting from zero.
    pub born_ns: u64,
}

/// Everything the dirty-time and throttling maps hold, read at once.
#[derive(Clone, Debug, Default)]
pub struct DirtierSnapshot {
    pub entries: Vec<DirtierReading>,
    /// Whether `entries` holds every entry of the map (a whole reading),
    /// not only those that changed since the reading before: only a
    /// whole reading tells that an entry is gone.
    pub whole: bool,
    /// Cumulative `(pauses, pause_ms)` per tgid; `None` when not read
    /// (a re-read for a batch of calls: the pauses only feed the
    /// interval's `owners`, read again before it ends).
    pub throttled: Option<HashMap<u32, (u64, u64)>>,
    /// CLOCK_MONOTONIC ns when the reading ended (the clock of a call's
    /// `start_ns`): every page it counts was dirtied before. 0: unknown.
    pub taken_ns: u64,
    /// Inodes made dirty since the last reading (the default mode).
    pub dirtyings: Vec<InodeDirtyingReading>,
    /// The kernel's count of pages dirtied by each process seen making an
    /// inode dirty (the default mode).
    pub tasks: Vec<TaskReading>,
    /// Whether `tasks` was read: a re-read for a batch of calls drains
    /// the dirtyings only (the counts only feed the interval's `owners`,
    /// and reading /proc for every process at each re-read cost a file
    /// open per process up to twice per drain); an empty `tasks` then
    /// means "not read", not "all exited".
    pub tasks_read: bool,
    /// Why the per-process counts cannot be read at all in this run (a
    /// dropped run where the task iterator did not load); `None` when
    /// they can.
    pub tasks_unread: Option<String>,
}

/// `{"pid", "comm", "cgroup_id", ...}` of an interval's `owners`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "OwnerLineJson", from = "OwnerLineJson")]
pub struct OwnerLine {
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// Pages the process dirtied in the interval (0 when
    /// `dirtied_unmeasured`).
    pub pages_dirtied: u64,
    /// `pages_dirtied` could not be measured in this run (the kernel's
    /// per-process counts were unreadable: [`DirtierSnapshot::tasks_unread`]):
    /// the figure is absent from the JSON line, not 0.
    pub dirtied_unmeasured: bool,
    /// Pages of the process's written back in the interval, by anyone.
    pub pages_written: u64,
    /// The part another process wrote (the flusher, someone's sync).
    pub pages_written_by_others: u64,
    /// The part written under flusher work (a kworker).
    pub pages_written_by_flusher: u64,
    /// `balance_dirty_pages` pauses of the process, and their sum (ms).
    pub throttle_pauses: u64,
    pub throttle_pause_ms: u64,
    /// 95% half-width of `pages_dirtied` when the per-folio counts were
    /// sampled (the interval's `budget`); absent when exact.
    pub pages_dirtied_error: Option<u64>,
    /// Bytes the process passed to write-family system calls in the
    /// interval (the kernel's `wchar`: files, pipes and sockets alike),
    /// and dirty bytes of its that were truncated or deleted before
    /// writeback (`cancelled_write_bytes`). From the per-process counts
    /// the default attribution reads; `None` where they are not read
    /// (`--enable dirty_folio`, or not measurable).
    pub write_call_bytes: Option<u64>,
    pub cancelled_bytes: Option<u64>,
}

/// [`OwnerLine`] as JSON lines and recordings have it: `pages_dirtied`
/// absent when it was not measured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct OwnerLineJson {
    pid: u32,
    comm: String,
    cgroup_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pages_dirtied: Option<u64>,
    pages_written: u64,
    pages_written_by_others: u64,
    #[serde(default)]
    pages_written_by_flusher: u64,
    throttle_pauses: u64,
    throttle_pause_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pages_dirtied_error: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    write_call_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cancelled_bytes: Option<u64>,
}

impl From<OwnerLine> for OwnerLineJson {
    fn from(o: OwnerLine) -> OwnerLineJson {
        OwnerLineJson {
            pid: o.pid,
            comm: o.comm,
            cgroup_id: o.cgroup_id,
            pages_dirtied: (!o.dirtied_unmeasured).then_some(o.pages_dirtied),
            pages_written: o.pages_written,
            pages_written_by_others: o.pages_written_by_others,
            pages_written_by_flusher: o.pages_written_by_flusher,
            throttle_pauses: o.throttle_pauses,
            throttle_pause_ms: o.throttle_pause_ms,
            pages_dirtied_error: o.pages_dirtied_error,
            write_call_bytes: o.write_call_bytes,
            cancelled_bytes: o.cancelled_bytes,
        }
    }
}

impl From<OwnerLineJson> for OwnerLine {
    fn from(o: OwnerLineJson) -> OwnerLine {
        OwnerLine {
            pid: o.pid,
            comm: o.comm,
            cgroup_id: o.cgroup_id,
            pages_dirtied: o.pages_dirtied.unwrap_or(0),
            dirtied_unmeasured: o.pages_dirtied.is_none(),
            pages_written: o.pages_written,
            pages_written_by_others: o.pages_written_by_others,
            pages_written_by_flusher: o.pages_written_by_flusher,
            throttle_pauses: o.throttle_pauses,
            throttle_pause_ms: o.throttle_pause_ms,
            pages_dirtied_error: o.pages_dirtied_error,
            write_call_bytes: o.write_call_bytes,
            cancelled_bytes: o.cancelled_bytes,
        }
    }
}

/// Pages of one process outstanding on one inode.
#[derive(Clone, Debug)]
struct Outstanding {
    tgid: u32,
    pages: u64,
    /// `(taken_ns, pages)` of the last readings' growth still outstanding,
    /// oldest first; their sum is at most `pages` (the rest is older).
    recent: Vec<(u64, u64)>,
}

impl Outstanding {
    fn grow(&mut self, taken_ns: u64, pages: u64) {
        self.pages += pages;
        if self.recent.len() == RECENT_READINGS {
            self.recent.remove(0);
        }
        self.recent.push((taken_ns, pages));
    }

    /// Takes `pages`, oldest first: what is left of the recent growth is
    /// at most what is left.
    fn take(&mut self, pages: u64) {
        self.pages -= pages;
        let recent: u64 = self.recent.iter().map(|r| r.1).sum();
        let mut excess = recent.saturating_sub(self.pages);
        for r in &mut self.recent {
            let cut = excess.min(r.1);
            r.1 -= cut;
            excess -= cut;
        }
        self.recent.retain(|r| r.1 > 0);
    }

    /// Keeps only what was read after `start_ns` (the rule for a
    /// whole-file sync that started then).
    fn keep_read_after(&mut self, start_ns: u64) {
        self.recent.retain(|r| r.0 > start_ns);
        self.pages = self.recent.iter().map(|r| r.1).sum();
    }
}

#[derive(Clone, Debug, Default)]
struct InodeState {
    dirtiers: Vec<Outstanding>,
    owner_cgroup_id: u64,
    /// When it last grew (the table's clock), for forgetting.
    touched: u64,
}

impl aged::Aged for InodeState {
    fn touched(&self) -> u64 {
        self.touched
    }
    fn set_touched(&mut self, at: u64) {
        self.touched = at;
    }
}

/// One `DIRTIERS` entry as last read.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// Its cumulative count.
    pages: u64,
    /// Its `born_ns` (0: not yet known).
    born_ns: u64,
    /// The reading (`generation`) it was last in.
    last: u64,
}

/// Who a tgid is, as last seen dirtying.
#[derive(Clone, Debug, Default)]
struct Identity {
    comm: CompactString,
    cgroup_id: u64,
}

/// The attribution state of one trace: what each process has outstanding
/// on each inode, and the interval's per-process figures.
#[derive(Clone, Debug, Default)]
pub struct Attribution {
    /// Last cumulative count per (dev, ino, tgid) entry; foldhash's
    /// seeded hasher, not SipHash: a host's tens of thousands of entries
    /// go through it at every whole reading.
    seen: FastMap<(u32, u64, u32), Seen>,
    /// The generation of the last whole reading.
    last_whole: u64,
    /// Inodes with outstanding pages; past the bound, those idle the
    /// longest are forgotten (their pages then go to `(unknown)`).
    inodes: aged::AgedTable<(u32, u64), InodeState>,
    identities: FastMap<u32, Identity>,
    interval: BTreeMap<u32, OwnerLine>,
    /// Pages charged in the interval per (process, call's device): the
    /// ledger's device rows, taken with the owners.
    written_on: BTreeMap<(u32, crate::DevId), u64>,
    throttle_seen: HashMap<u32, (u64, u64)>,
    generation: u64,
    mode: AttributionMode,
    by_inode: by_inode::ByInode,
    /// The last reading said the per-process counts cannot be read.
    dirtied_unmeasured: bool,
    /// Why, as the reading said it.
    unmeasured_why: Option<String>,
}

/// Kernel `dev_t` of a device number (include/linux/kdev_t.h).
fn kernel_dev(c: &CallRecord) -> u32 {
    (c.dev.major << 20) | c.dev.minor
}

impl Attribution {
    pub fn new(mode: AttributionMode) -> Attribution {
        Attribution {
            mode,
            ..Attribution::default()
        }
    }

    /// Takes a new reading of the maps: what each entry grew by since the
    /// last one becomes outstanding (and dirtied in this interval). A
    /// count never goes back: a reading that races the move of a CPU's
    /// cached pages into the hash may miss them once, and they count at
    /// the next. An entry under a known key with another birth time was
    /// made anew after an eviction: it counts from 0. An entry missing
    /// from two whole readings in a row (and seen in no reading between)
    /// is forgotten: the kernel never deletes one but by eviction, and a
    /// race hides one from a single reading at most.
    pub fn update(&mut self, snap: &DirtierSnapshot) {
        self.generation += 1;
        let generation = self.generation;
        // Updated in place: a host's map holds tens of thousands of
        // entries, most unchanged from one reading to the next.
        for e in &snap.entries {
            let key = (e.dev, e.ino, e.tgid);
            let seen = self.seen.entry(key).or_insert(Seen {
                pages: 0,
                born_ns: e.born_ns,
                last: generation,
            });
            if e.born_ns != 0 && e.born_ns != seen.born_ns {
                // Known only from a CPU's slot so far (0), or made again.
                if seen.born_ns != 0 {
                    seen.pages = 0;
                }
                seen.born_ns = e.born_ns;
            }
            let before = seen.pages;
            seen.pages = e.pages.max(before);
            seen.last = generation;
            let delta = e.pages.saturating_sub(before);
            if delta == 0 && self.identities.contains_key(&e.tgid) {
                continue;
            }
            self.identities.insert(
                e.tgid,
                Identity {
                    comm: e.comm.as_str().into(),
                    cgroup_id: e.cgroup_id,
                },
            );
            if delta == 0 {
                continue;
            }
            self.owner_line(e.tgid).pages_dirtied += delta;
            let inode = self.inodes.touch((e.dev, e.ino));
            if e.owner_cgroup_id != 0 {
                inode.owner_cgroup_id = e.owner_cgroup_id;
            }
            match inode.dirtiers.iter_mut().find(|o| o.tgid == e.tgid) {
                Some(o) => o.grow(snap.taken_ns, delta),
                None => {
                    let mut o = Outstanding {
                        tgid: e.tgid,
                        pages: 0,
                        recent: Vec::new(),
                    };
                    o.grow(snap.taken_ns, delta);
                    inode.dirtiers.push(o);
                }
            }
        }
        if snap.whole {
            // Missing from this whole reading and the one before: evicted.
            let previous = self.last_whole;
            self.seen.retain(|_, s| s.last >= previous);
            self.last_whole = generation;
        }
        for d in &snap.dirtyings {
            // One per inode dirtied: the name is copied only when it
            // changed (an fsync storm's writers dirty 10,000 a second).
            let id = self.identities.entry(d.tgid).or_default();
            if id.comm != d.comm {
                id.comm.clone_from(&d.comm);
            }
            id.cgroup_id = d.cgroup_id;
        }
        self.dirtied_unmeasured = snap.tasks_unread.is_some();
        if let Some(why) = &snap.tasks_unread {
            self.unmeasured_why = Some(why.clone());
        }
        let tasks = snap.tasks_read.then_some(snap.tasks.as_slice());
        for (tgid, grown) in self.by_inode.update(&snap.dirtyings, tasks) {
            let line = self.owner_line(tgid);
            line.pages_dirtied += grown.pages;
            *line.write_call_bytes.get_or_insert(0) += grown.wchar;
            *line.cancelled_bytes.get_or_insert(0) += grown.cancelled_bytes;
        }
        if let Some(throttled) = &snap.throttled {
            for (&tgid, &(pauses, ms)) in throttled {
                let (p0, m0) = self.throttle_seen.get(&tgid).copied().unwrap_or((0, 0));
                if pauses > p0 {
                    let line = self.owner_line(tgid);
                    line.throttle_pauses += pauses - p0;
                    line.throttle_pause_ms += ms.saturating_sub(m0);
                }
            }
            self.throttle_seen = throttled.clone();
        }
    }

    fn owner_line(&mut self, tgid: u32) -> &mut OwnerLine {
        self.interval.entry(tgid).or_insert_with(|| OwnerLine {
            pid: tgid,
            ..OwnerLine::default()
        })
    }

    /// Pages outstanding on the call's inode (its device's entries and
    /// the device-less ones of the classic hook).
    fn outstanding(&self, call: &CallRecord) -> u64 {
        [kernel_dev(call), 0]
            .iter()
            .filter_map(|&dev| self.inodes.get(&(dev, call.ino)))
            .flat_map(|i| i.dirtiers.iter().map(|o| o.pages))
            .sum()
    }

    /// Charges a batch of calls in order, after a fresh reading of the
    /// maps (from `read`) when the batch's calls on some inode wrote more
    /// pages together than the inode has outstanding as last read. Every
    /// call of the batch ended before the batch was drained, so the pages
    /// it wrote were dirtied before that reading, and taken before the
    /// first call is charged, every call is split by the same, fresh
    /// proportions. Tested on the batch's sums, not call by call: a batch
    /// of fourteen 512-page flusher calls against 4096 outstanding pages
    /// passed a per-call test and charged the last six to `(unknown)`.
    ///
    /// A reading can miss a CPU's cached pages once: they move from its
    /// slot into the hash between the two reads of a reading
    /// (tracer/dirtiers.rs reads the hash first, so they are never counted
    /// twice). So a batch still short after one reading gets a second;
    /// pages still missing then were dirtied before the trace or by a path
    /// the dirty hook does not see, and go to `(unknown)`.
    pub fn charge_batch(
        &mut self,
        batch: &mut [CallRecord],
        mut read: impl FnMut() -> Option<DirtierSnapshot>,
    ) {
        for _ in 0..2 {
            if !self.short(batch) {
                break;
            }
            match read() {
                Some(snap) => self.update(&snap),
                None => break,
            }
        }
        for call in batch {
            self.charge(call);
        }
    }

    /// Whether the calls of `batch` on some inode wrote more pages
    /// together than the inode has outstanding as last read.
    pub fn short(&self, batch: &[CallRecord]) -> bool {
        if self.mode == AttributionMode::PerInode {
            return batch
                .iter()
                .any(|c| c.pages_written > 0 && !self.by_inode.knows(kernel_dev(c), c.ino));
        }
        let mut written: HashMap<(u32, u64), (u64, &CallRecord)> = HashMap::new();
        for call in batch.iter().filter(|c| c.pages_written > 0) {
            let e = written
                .entry((kernel_dev(call), call.ino))
                .or_insert((0, call));
            e.0 += call.pages_written as u64;
        }
        written
            .values()
            .any(|&(pages, call)| self.outstanding(call) < pages)
    }

    /// Charges the call's pages to its inode's dirtiers (the rule in the
    /// module comment) and fills `call.dirtiers` and
    /// `call.owner_cgroup_id`.
    pub fn charge(&mut self, call: &mut CallRecord) {
        let written = call.pages_written.max(0) as u64;
        let mut pool: Vec<((u32, u64), usize, u64)> = Vec::new();
        let mut owner = None;
        for dev in [kernel_dev(call), 0] {
            if let Some(inode) = self.inodes.get(&(dev, call.ino)) {
                if inode.owner_cgroup_id != 0 && owner.is_none() {
                    owner = Some(inode.owner_cgroup_id);
                }
                for (i, o) in inode.dirtiers.iter().enumerate() {
                    pool.push(((dev, call.ino), i, o.pages));
                }
            }
        }
        // Pages charged per process: a handful at most (the inode's
        // dirtiers), one under an fsync storm: a list, not a map whose
        // node is one more allocation per call.
        let mut charged: smallvec::SmallVec<[(u32, u64); 2]> = smallvec::SmallVec::new();
        let mut charge_to = |tgid: u32, pages: u64| match charged.iter_mut().find(|c| c.0 == tgid) {
            Some(c) => c.1 += pages,
            None => charged.push((tgid, pages)),
        };
        if self.mode == AttributionMode::PerInode
            && written > 0
            && let Some((tgid, owner_cgroup)) = self.by_inode.dirtier(
                kernel_dev(call),
                call.ino,
                if call.start_seen { call.start_ns } else { 0 },
            )
        {
            charge_to(tgid, written);
            if owner_cgroup != 0 {
                owner = Some(owner_cgroup);
            }
        }
        call.owner_cgroup_id = owner;
        let shares = split(written, &pool.iter().map(|p| p.2).collect::<Vec<_>>());
        for (&(inode, i, _), &share) in pool.iter().zip(&shares) {
            if share == 0 {
                continue;
            }
            if let Some(o) = self
                .inodes
                .get_mut(&inode)
                .and_then(|s| s.dirtiers.get_mut(i))
            {
                o.take(share);
                charge_to(o.tgid, share);
            }
        }
        let unknown = written - charged.iter().map(|c| c.1).sum::<u64>();
        let whole_file_sync = call.sync_mode == 1
            && call.start_seen
            && call.ret == 0
            && call.range_start == 0
            && call.range_end == i64::MAX;
        for dev in [kernel_dev(call), 0] {
            if let Some(inode) = self.inodes.get_mut(&(dev, call.ino)) {
                if whole_file_sync {
                    for o in &mut inode.dirtiers {
                        o.keep_read_after(call.start_ns);
                    }
                }
                inode.dirtiers.retain(|o| o.pages > 0);
                if inode.dirtiers.is_empty() {
                    self.inodes.remove(&(dev, call.ino));
                }
            }
        }
        let by_flusher = call.work_reason != 0;
        let mut list = Dirtiers::new();
        for &(tgid, pages) in &charged {
            *self.written_on.entry((tgid, call.dev)).or_default() += pages;
            let line = self.owner_line(tgid);
            line.pages_written += pages;
            if tgid != call.tgid {
                line.pages_written_by_others += pages;
            }
            if by_flusher {
                line.pages_written_by_flusher += pages;
            }
            let (comm, cgroup_id) = self
                .identities
                .get(&tgid)
                .map_or((CompactString::default(), 0), |id| {
                    (id.comm.clone(), id.cgroup_id)
                });
            list.push(Dirtier {
                pid: tgid,
                comm,
                cgroup_id,
                pages,
            });
        }
        list.sort_by(|a, b| b.pages.cmp(&a.pages).then(a.pid.cmp(&b.pid)));
        let mut list = cap(list, MAX_CALL_DIRTIERS);
        if unknown > 0 {
            list.push(Dirtier {
                comm: UNKNOWN.into(),
                pages: unknown,
                ..Dirtier::default()
            });
        }
        call.dirtiers = list;
    }

    /// The interval's pages charged per (process, call's device); resets
    /// them.
    pub fn take_written_on(&mut self) -> BTreeMap<(u32, crate::DevId), u64> {
        std::mem::take(&mut self.written_on)
    }

    /// Why the owners' `pages_dirtied` were not measured, if a reading
    /// said they cannot be.
    pub fn dirtied_unmeasured(&self) -> Option<&str> {
        self.unmeasured_why.as_deref()
    }

    /// The interval's `owners`, largest dirtiers first (then largest
    /// written, then most paused), capped with an `(others)` row; resets
    /// the interval.
    pub fn take_owners(&mut self) -> Vec<OwnerLine> {
        let mut rows: Vec<OwnerLine> = std::mem::take(&mut self.interval)
            .into_values()
            .map(|mut row| {
                if let Some(id) = self.identities.get(&row.pid) {
                    row.comm = id.comm.to_string();
                    row.cgroup_id = id.cgroup_id;
                }
                row.dirtied_unmeasured = self.dirtied_unmeasured;
                if self.mode == AttributionMode::PerInode && !self.dirtied_unmeasured {
                    row.write_call_bytes.get_or_insert(0);
                    row.cancelled_bytes.get_or_insert(0);
                }
                row
            })
            .filter(|r| {
                r.pages_dirtied
                    + r.pages_written
                    + r.throttle_pauses
                    + r.cancelled_bytes.unwrap_or(0)
                    > 0
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.pages_dirtied, b.pages_written, b.throttle_pauses, a.pid).cmp(&(
                a.pages_dirtied,
                a.pages_written,
                a.throttle_pauses,
                b.pid,
            ))
        });
        if rows.len() > MAX_OWNERS {
            let rest = rows.split_off(MAX_OWNERS - 1);
            let mut others = OwnerTotal {
                comm: OTHERS.into(),
                ..OwnerTotal::default()
            };
            for r in &rest {
                others.add(&r.into());
            }
            let mut others: OwnerLine = others.into();
            others.dirtied_unmeasured = self.dirtied_unmeasured;
            rows.push(others);
        }
        rows
    }
}

/// `n` pages split over `weights`: all of each weight when they add up to
/// `n` or less; otherwise in proportion, by largest remainders, so the
/// shares add up to `n` exactly and none exceeds its weight.
fn split(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u64 = weights.iter().sum();
    if total <= n {
        return weights.to_vec();
    }
    let mut shares: Vec<u64> = Vec::with_capacity(weights.len());
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let exact = u128::from(n) * u128::from(w);
        shares.push((exact / u128::from(total)) as u64);
        remainders.push((exact % u128::from(total), i));
    }
    let mut left = n - shares.iter().sum::<u64>();
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in remainders {
        if left == 0 {
            break;
        }
        if shares[i] < weights[i] {
            shares[i] += 1;
            left -= 1;
        }
    }
    shares
}

/// The first `max - 1` entries and one `(others)` entry for the rest,
/// when there are more than `max`.
fn cap(mut list: Dirtiers, max: usize) -> Dirtiers {
    if list.len() <= max {
        return list;
    }
    let rest = list[max - 1..].iter().map(|d| d.pages).sum();
    list.truncate(max - 1);
    list.push(Dirtier {
        comm: OTHERS.into(),
        pages: rest,
        ..Dirtier::default()
    });
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unmeasured_pages_dirtied_is_absent_not_zero() {
        let mut line = OwnerLine {
            pid: 7,
            comm: "dd".into(),
            pages_written: 3,
            dirtied_unmeasured: true,
            ..OwnerLine::default()
        };
        let json = serde_json::to_value(&line).unwrap();
        assert!(json.get("pages_dirtied").is_none(), "{json}");
        assert_eq!(json["pages_written"], 3);
        assert_eq!(serde_json::from_value::<OwnerLine>(json).unwrap(), line);
        line.dirtied_unmeasured = false;
        line.pages_dirtied = 0;
        let json = serde_json::to_value(&line).unwrap();
        assert_eq!(json["pages_dirtied"], 0);
        assert_eq!(serde_json::from_value::<OwnerLine>(json).unwrap(), line);
    }

    #[test]
    fn owners_of_a_run_that_cannot_read_the_counts_say_so() {
        let mut a = Attribution::new(AttributionMode::PerInode);
        let snap = DirtierSnapshot {
            throttled: Some(HashMap::from([(9, (2, 30))])),
            tasks_unread: Some("no task iterator".into()),
            ..DirtierSnapshot::default()
        };
        a.update(&snap);
        let owners = a.take_owners();
        assert_eq!(owners.len(), 1);
        assert!(owners[0].dirtied_unmeasured);
    }
    use crate::DevId;

    const DEV: u32 = (7 << 20) | 3;

    fn reading(ino: u64, tgid: u32, pages: u64) -> DirtierReading {
        DirtierReading {
            dev: DEV,
            ino,
            tgid,
            pages,
            pid: tgid,
            comm: format!("p{tgid}"),
            cgroup_id: 100 + u64::from(tgid),
            owner_cgroup_id: 0,
            born_ns: 1,
        }
    }

    /// A whole reading of these entries.
    fn snap(entries: Vec<DirtierReading>) -> DirtierSnapshot {
        DirtierSnapshot {
            entries,
            whole: true,
            ..DirtierSnapshot::default()
        }
    }

    fn call(ino: u64, tgid: u32, pages: i64) -> CallRecord {
        CallRecord {
            dev: DevId::from_kernel(DEV),
            ino,
            tgid,
            pages_written: pages,
            start_seen: true,
            ..CallRecord::default()
        }
    }

    #[test]
    fn split_is_exact_proportional_and_capped() {
        assert_eq!(split(10, &[3, 4]), vec![3, 4]);
        assert_eq!(split(10, &[10, 10]), vec![5, 5]);
        // 5 over 3:6 → 1.67 / 3.33: the larger remainder gets the page.
        assert_eq!(split(5, &[3, 6]), vec![2, 3]);
        let s = split(1000, &[333, 333, 334, 1]);
        assert_eq!(s.iter().sum::<u64>(), 1000);
        assert!(s.iter().zip([333, 333, 334, 1]).all(|(a, w)| *a <= w));
        assert_eq!(split(0, &[5]), vec![0]);
        assert!(split(3, &[]).is_empty());
    }

    /// The dirtier that left is named for every page; pages no dirtying
    /// accounts for are `(unknown)`; owners count them as written by
    /// others, and by the flusher when the call ran under flusher work.
    #[test]
    fn a_call_is_charged_to_the_inodes_dirtiers() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(5, 10, 300), reading(5, 11, 100)]));
        let mut c = call(5, 99, 200);
        c.work_reason = 1;
        assert!(a.outstanding(&c) >= 200);
        a.charge(&mut c);
        let got: Vec<(u32, &str, u64, u64)> = c
            .dirtiers
            .iter()
            .map(|d| (d.pid, d.comm.as_str(), d.cgroup_id, d.pages))
            .collect();
        assert_eq!(got, vec![(10, "p10", 110, 150), (11, "p11", 111, 50)]);
        // 200 left outstanding; a call of 250 takes them and 50 unknown.
        let mut c2 = call(5, 10, 250);
        assert!(a.outstanding(&c2) < 250);
        a.charge(&mut c2);
        assert_eq!(c2.dirtiers.last().unwrap().comm, UNKNOWN);
        assert_eq!(c2.dirtiers.last().unwrap().pages, 50);
        assert_eq!(c2.dirtiers.iter().map(|d| d.pages).sum::<u64>(), 250);
        let owners = a.take_owners();
        let p10 = owners.iter().find(|o| o.pid == 10).unwrap();
        assert_eq!(p10.pages_dirtied, 300);
        assert_eq!(p10.pages_written, 300);
        // Its own call (tgid 10) wrote 150 of them.
        assert_eq!(p10.pages_written_by_others, 150);
        assert_eq!(p10.pages_written_by_flusher, 150);
        assert!(a.take_owners().is_empty(), "the interval was reset");
    }

    /// A batch whose calls together write more than is outstanding gets a
    /// fresh reading before any call is charged, though each call alone
    /// fits (kernel_dirtiers' flusher test under load: 14 calls of 512
    /// pages against 4096 outstanding).
    #[test]
    fn a_batch_reads_again_when_its_calls_together_exceed_what_is_outstanding() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(5, 10, 4096)]));
        let mut batch: Vec<CallRecord> = (0..14).map(|_| call(5, 99, 512)).collect();
        let mut reads = 0;
        a.charge_batch(&mut batch, || {
            reads += 1;
            Some(snap(vec![reading(5, 10, 14 * 512)]))
        });
        assert_eq!(reads, 1);
        for c in &batch {
            let got: Vec<(u32, u64)> = c.dirtiers.iter().map(|d| (d.pid, d.pages)).collect();
            assert_eq!(got, vec![(10, 512)]);
        }
        // Nothing outstanding is left, and a batch that fits reads nothing.
        a.update(&snap(vec![reading(5, 10, 15 * 512)]));
        let mut one = [call(5, 99, 512)];
        a.charge_batch(&mut one, || panic!("no reading needed"));
        assert_eq!(one[0].dirtiers[0].pid, 10);
        // A failed reading leaves the state: the rest is (unknown).
        let mut short = [call(5, 99, 512)];
        a.charge_batch(&mut short, || None);
        assert_eq!(short[0].dirtiers[0].comm, UNKNOWN);
    }

    /// A reading that missed a CPU's cached pages (moved into the hash
    /// while it read) is followed by a second; pages no reading accounts
    /// for after two go to `(unknown)`, and no third is taken.
    #[test]
    fn a_batch_still_short_after_a_reading_reads_once_more() {
        let mut a = Attribution::default();
        let mut batch = [call(5, 99, 1024)];
        let mut readings = vec![
            snap(vec![reading(5, 10, 1024)]),
            snap(vec![reading(5, 10, 512)]),
        ];
        a.charge_batch(&mut batch, || readings.pop());
        let got: Vec<(u32, u64)> = batch[0].dirtiers.iter().map(|d| (d.pid, d.pages)).collect();
        assert_eq!(got, vec![(10, 1024)]);
        let mut reads = 0;
        let mut old = [call(5, 99, 100)];
        a.charge_batch(&mut old, || {
            reads += 1;
            Some(snap(vec![reading(5, 10, 1024)]))
        });
        assert_eq!(reads, 2);
        assert_eq!(old[0].dirtiers[0].comm, UNKNOWN);
    }

    /// The reading comes before the first call is charged: every call of
    /// the batch is split by the fresh proportions, not the first ones by
    /// a reading taken while the dirtiers were still at work.
    #[test]
    fn a_batch_that_reads_splits_every_call_by_the_fresh_counts() {
        let mut a = Attribution::default();
        // Read mid-dirtying: 10 had 300 pages, 11 had 100.
        a.update(&snap(vec![reading(5, 10, 300), reading(5, 11, 100)]));
        let mut batch = [call(5, 99, 400), call(5, 99, 400)];
        a.charge_batch(&mut batch, || {
            Some(snap(vec![reading(5, 10, 400), reading(5, 11, 400)]))
        });
        for c in &batch {
            let got: Vec<(u32, u64)> = c.dirtiers.iter().map(|d| (d.pid, d.pages)).collect();
            assert_eq!(got, vec![(10, 200), (11, 200)], "{c:?}");
        }
    }

    /// Counts are cumulative: only growth is new; a reading that misses
    /// an entry once (a race with a CPU's slot) loses nothing and counts
    /// nothing twice; two misses in a row are an eviction, after which the
    /// entry counts from 0.
    #[test]
    fn readings_add_growth_once_and_survive_races_and_evictions() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(1, 1, 10)]));
        a.update(&snap(vec![reading(1, 1, 25)]));
        a.update(&snap(vec![]));
        a.update(&snap(vec![reading(1, 1, 30)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 30);
        a.update(&snap(vec![]));
        a.update(&snap(vec![]));
        a.update(&snap(vec![reading(1, 1, 4)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 4);
        // A lower count than seen (a racing read) is no new dirtying.
        a.update(&snap(vec![reading(1, 1, 3)]));
        assert!(a.take_owners().is_empty());
    }

    /// A reading of the changed entries only tells nothing of the others:
    /// an entry absent from it is kept (its growth counts once when it is
    /// read again), and only two whole readings without it forget it.
    #[test]
    fn only_whole_readings_forget_an_entry() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(1, 1, 10), reading(2, 1, 5)]));
        let changed = |entries| DirtierSnapshot {
            whole: false,
            ..snap(entries)
        };
        for _ in 0..5 {
            a.update(&changed(vec![reading(2, 1, 5)]));
        }
        a.update(&changed(vec![reading(1, 1, 12)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 17, "10 + 5, then 2");
        // Absent from one whole reading: a race, kept.
        a.update(&snap(vec![]));
        a.update(&snap(vec![reading(1, 1, 13)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 1);
        // Absent from two: evicted, forgotten; back, from 0.
        a.update(&snap(vec![]));
        a.update(&snap(vec![]));
        a.update(&changed(vec![reading(1, 1, 14)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 14);
    }

    /// An entry evicted and made again between two readings has another
    /// birth time: its count starts from 0, even when it is no larger
    /// than the old one's; pages first read from a CPU's slot (no birth
    /// time yet) are not counted again when their entry is made.
    #[test]
    fn a_new_birth_time_counts_from_zero() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(1, 1, 100)]));
        let born = |pages, born_ns| DirtierReading {
            born_ns,
            ..reading(1, 1, pages)
        };
        a.update(&snap(vec![born(30, 2)]));
        assert_eq!(a.take_owners()[0].pages_dirtied, 130);
        a.update(&snap(vec![born(7, 0), reading(2, 1, 4)]));
        // Slot pages under an entry of pages unread (7 < 30): no growth.
        assert_eq!(a.take_owners()[0].pages_dirtied, 4);
        let mut b = Attribution::default();
        b.update(&snap(vec![born(7, 0)]));
        b.update(&snap(vec![born(9, 5)]));
        assert_eq!(
            b.take_owners()[0].pages_dirtied,
            9,
            "7 from the slot, then 2"
        );
    }

    /// A whole-file WB_SYNC_ALL leaves the inode clean: what it did not
    /// write was cleaned without writeback and is not charged later.
    #[test]
    fn a_whole_file_sync_drops_what_it_did_not_write() {
        let mut a = Attribution::default();
        a.update(&snap(vec![reading(2, 7, 100)]));
        let mut sync = call(2, 8, 60);
        sync.sync_mode = 1;
        sync.range_end = i64::MAX;
        a.charge(&mut sync);
        assert_eq!(sync.dirtiers[0].pages, 60);
        let mut later = call(2, 8, 10);
        a.charge(&mut later);
        assert_eq!(later.dirtiers.len(), 1);
        assert_eq!(later.dirtiers[0].comm, UNKNOWN);
    }

    /// A whole-file sync that started while the process kept dirtying
    /// the file: what was read before its start and not written is
    /// dropped, what was read after stays with the process, and the
    /// flusher calls after it are charged to the process, not to
    /// `(unknown)` (a sync(2) of another test did this to the flusher
    /// test in CI: four 512-page calls went to `(unknown)`).
    #[test]
    fn a_whole_file_sync_keeps_what_was_dirtied_after_it_started() {
        let mut a = Attribution::default();
        let at = |t: u64, pages: u64| DirtierSnapshot {
            taken_ns: t,
            ..snap(vec![reading(2, 7, pages)])
        };
        a.update(&at(100, 1000));
        // 200 of the first reading's pages are written by a flusher call.
        let mut flusher = call(2, 8, 200);
        a.charge(&mut flusher);
        // The sync starts at 150; readings at 200 and 300 find 512 and
        // 300 more pages dirtied; it wrote 700 of the 800 left from the
        // first reading, the other 100 were truncated.
        a.update(&at(200, 1512));
        a.update(&at(300, 1812));
        let mut sync = call(2, 9, 700);
        sync.sync_mode = 1;
        sync.range_end = i64::MAX;
        sync.start_ns = 150;
        a.charge(&mut sync);
        assert_eq!(sync.dirtiers.len(), 1, "{:?}", sync.dirtiers);
        assert_eq!(sync.dirtiers[0].pid, 7);
        // Left: the 812 read after the sync's start, oldest taken first
        // by the sync's own share (its 700 came out of 1612 in all).
        let mut after = call(2, 8, 812);
        a.charge(&mut after);
        assert_eq!(after.dirtiers.len(), 1, "{:?}", after.dirtiers);
        assert_eq!((after.dirtiers[0].pid, after.dirtiers[0].pages), (7, 812));
        let mut more = call(2, 8, 1);
        a.charge(&mut more);
        assert_eq!(more.dirtiers[0].comm, UNKNOWN);
    }

    #[test]
    fn long_lists_are_capped_with_others() {
        let mut a = Attribution::default();
        let many: Vec<_> = (1..=20).map(|t| reading(3, t, u64::from(t))).collect();
        a.update(&snap(many));
        let mut c = call(3, 99, 210);
        a.charge(&mut c);
        assert_eq!(c.dirtiers.len(), MAX_CALL_DIRTIERS);
        assert_eq!(c.dirtiers[0].pid, 20);
        let last = c.dirtiers.last().unwrap();
        assert_eq!((last.pid, last.comm.as_str()), (0, OTHERS));
        assert_eq!(c.dirtiers.iter().map(|d| d.pages).sum::<u64>(), 210);
        let owners = a.take_owners();
        assert_eq!(owners.len(), MAX_OWNERS);
        assert_eq!(owners.last().unwrap().comm, OTHERS);
        assert_eq!(owners.iter().map(|o| o.pages_dirtied).sum::<u64>(), 210);
    }

    /// Throttling is differenced per process like the dirtying, and the
    /// classic hook's device-less entries join calls by inode number.
    #[test]
    fn throttling_and_deviceless_entries() {
        let mut a = Attribution::default();
        let mut s = snap(vec![DirtierReading {
            dev: 0,
            ..reading(4, 9, 8)
        }]);
        s.throttled = Some(HashMap::from([(9, (2, 40))]));
        a.update(&s);
        // A re-read for a batch of calls, without the pauses: the counts
        // seen stay the base of the next reading.
        a.update(&DirtierSnapshot::default());
        s.throttled = Some(HashMap::from([(9, (5, 100))]));
        a.update(&s);
        let mut c = call(4, 1, 8);
        a.charge(&mut c);
        assert_eq!(c.dirtiers[0].pid, 9);
        let o = &a.take_owners()[0];
        assert_eq!((o.throttle_pauses, o.throttle_pause_ms), (5, 100));
    }
}
