//! The default attribution: who made each inode dirty, seen
//! once per clean → dirty transition of the inode
//! (`writeback_dirty_inode_enqueue`), and what each of those processes
//! dirtied in all, as the kernel counts it per task at dirty time
//! (`folio_account_dirtied()` → `task_io_account_write()`, the
//! `write_bytes` of /proc/PID/io). No program runs per dirtied folio.
//!
//! The rule. A call on an inode writes pages dirtied since the inode last
//! went from clean to dirty before the call started (an inode stays dirty
//! while it has dirty pages: `__mark_inode_dirty()` in fs/fs-writeback.c
//! enqueues only when `was_dirty` is 0), so all of them are charged to the
//! process that made it dirty then. Exact when one process dirties a file
//! at a time; when several do, the first is charged for all until the
//! kernel marks the inode clean again (the flusher's pass over it, or
//! `writeback_single_inode()`; an fsync alone on a journaled ext4 leaves it
//! marked dirty). Docs: docs/trace-json.md, "dirtiers".
use super::FastMap;
use super::aged::{Aged, AgedTable};

/// Changes of dirtier remembered per inode, newest last: a call is
/// charged to the newest that came before its start. Dirtyings by the
/// process that made it dirty last extend its run instead of taking a
/// place: a writer under a small dirty limit makes its inode dirty again
/// after each flusher pass, dozens of times a second, and four separate
/// places once left a flusher call that started before all four with no
/// dirtier (CI: `flusher_writeback_and_throttling_are_charged_to_the_dirtier`).
const HISTORY: usize = 8;
/// Processes whose dirtied pages are followed at most.
const MAX_TASKS: usize = 1 << 14;

/// One `InodeDirtying` record (writeback-common): a process made an inode
/// dirty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeDirtyingReading {
    pub dev: u32,
    pub ino: u64,
    /// CLOCK_MONOTONIC ns, the clock of a call's `start_ns`.
    pub at_ns: u64,
    pub tgid: u32,
    /// Inline: one reading per inode dirtied.
    pub comm: compact_str::CompactString,
    pub cgroup_id: u64,
    pub owner_cgroup_id: u64,
}

/// A workqueue worker: the kernel names every one `kworker/…`
/// (`create_worker()` in kernel/workqueue.c; rescuers `kworker/R-…`).
/// A process that renames itself so is taken for one: its dirtyings of
/// an inode someone else dirtied are not charged to it.
fn is_workqueue_worker(comm: &str) -> bool {
    comm.starts_with("kworker/")
}

/// What the kernel counted for one process that made an inode dirty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskReading {
    pub tgid: u32,
    /// Pages it dirtied since it started (`write_bytes` / page size).
    pub pages: u64,
    /// Bytes it passed to write-family system calls since it started
    /// (`wchar`), and dirty bytes it truncated away before writeback
    /// (`cancelled_write_bytes`).
    pub wchar: u64,
    pub cancelled_bytes: u64,
    /// It started after the previous reading, so all of `pages` is new;
    /// otherwise its first reading is only the base the next ones count
    /// from.
    pub new: bool,
}

/// A process's counts, or what they grew by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) pages: u64,
    pub(super) wchar: u64,
    pub(super) cancelled_bytes: u64,
}

impl Counts {
    /// The growth since `before`, each count on its own (a count never
    /// goes back but under another process with the pid).
    fn since(&self, before: &Counts) -> Counts {
        Counts {
            pages: self.pages.saturating_sub(before.pages),
            wchar: self.wchar.saturating_sub(before.wchar),
            cancelled_bytes: self.cancelled_bytes.saturating_sub(before.cancelled_bytes),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct History {
    /// `(at_ns, tgid)` of each run of dirtyings by one process (its
    /// first), oldest first. Most inodes have one dirtier all their life
    /// (an fsync storm's files: a new inode per call), so the first is
    /// kept in place, without an allocation per inode.
    dirtyings: smallvec::SmallVec<[(u64, u32); 1]>,
    owner_cgroup_id: u64,
    touched: u64,
}

impl Aged for History {
    fn touched(&self) -> u64 {
        self.touched
    }
    fn set_touched(&mut self, at: u64) {
        self.touched = at;
    }
}

/// The per-inode attribution state.
#[derive(Clone, Debug, Default)]
pub(super) struct ByInode {
    /// Inodes past the bound are forgotten, those dirtied the longest ago
    /// first (their writeback then goes to `(unknown)`).
    inodes: AgedTable<(u32, u64), History>,
    /// Last counts per process.
    tasks: FastMap<u32, Counts>,
}

impl ByInode {
    /// Takes a reading's dirtyings and task counts (`None`: not read this
    /// time, the bases stay); returns what each process's counts grew by
    /// since the last reading of them.
    pub(super) fn update(
        &mut self,
        dirtyings: &[InodeDirtyingReading],
        tasks: Option<&[TaskReading]>,
    ) -> Vec<(u32, Counts)> {
        for d in dirtyings {
            let h = self.inodes.touch((d.dev, d.ino));
            if is_workqueue_worker(&d.comm) && !h.dirtyings.is_empty() {
                // The filesystem's own bookkeeping of a writeback, not a
                // writer: ext4 converts the unwritten extents a writeback
                // wrote when its I/O ends, in a workqueue worker
                // (`ext4_end_io_rsv_work()` → `ext4_mark_inode_dirty()`,
                // fs/ext4/page-io.c), which makes a just-cleaned inode
                // dirty (metadata only); the writer's next pages then
                // fire no event of their own (`was_dirty`). Such a
                // dirtying names no one while the inode has a dirtier
                // known (CI: `sync_by_another_process_is_charged_to_the_
                // departed_dirtier`, 3072 of dd's pages went to a
                // kworker); alone, it is the best there is.
                continue;
            }
            // Records from several CPUs' ring positions can come out of
            // time order: keep the history sorted, then one entry per run
            // of one process (its earliest).
            let at = h.dirtyings.partition_point(|&(t, _)| t <= d.at_ns);
            h.dirtyings.insert(at, (d.at_ns, d.tgid));
            h.dirtyings.dedup_by(|later, earlier| later.1 == earlier.1);
            if h.dirtyings.len() > HISTORY {
                h.dirtyings.remove(0);
            }
            if d.owner_cgroup_id != 0 {
                h.owner_cgroup_id = d.owner_cgroup_id;
            }
        }
        let Some(tasks) = tasks else {
            return Vec::new();
        };
        let mut grown = Vec::new();
        let mut seen: FastMap<u32, Counts> =
            FastMap::with_capacity_and_hasher(tasks.len(), Default::default());
        for t in tasks {
            let now = Counts {
                pages: t.pages,
                wchar: t.wchar,
                cancelled_bytes: t.cancelled_bytes,
            };
            // A process that started after the previous reading counts
            // from zero, even under a pid read before (reused); a count
            // that went back is another process under the same pid, whose
            // first reading is its base.
            let delta = match self.tasks.get(&t.tgid) {
                _ if t.new => now,
                Some(before) => now.since(before),
                None => Counts::default(),
            };
            if delta != Counts::default() {
                grown.push((t.tgid, delta));
            }
            if seen.len() < MAX_TASKS {
                seen.insert(t.tgid, now);
            }
        }
        // A process not read this time has exited (or its count is no
        // longer readable): forgotten.
        self.tasks = seen;
        grown
    }

    /// Whether any dirtying of the inode is known.
    pub(super) fn knows(&self, dev: u32, ino: u64) -> bool {
        self.inodes.contains_key(&(dev, ino))
    }

    /// The process that made the inode dirty last before `start_ns` (any
    /// time when the call's start was not seen: `start_ns` 0), and the
    /// inode's writeback cgroup.
    pub(super) fn dirtier(&self, dev: u32, ino: u64, start_ns: u64) -> Option<(u32, u64)> {
        let h = self.inodes.get(&(dev, ino))?;
        let tgid = if start_ns == 0 {
            h.dirtyings.last()?.1
        } else {
            h.dirtyings.iter().rev().find(|&&(at, _)| at <= start_ns)?.1
        };
        Some((tgid, h.owner_cgroup_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirtying(ino: u64, at_ns: u64, tgid: u32) -> InodeDirtyingReading {
        InodeDirtyingReading {
            dev: 7,
            ino,
            at_ns,
            tgid,
            comm: format!("p{tgid}").into(),
            ..InodeDirtyingReading::default()
        }
    }

    #[test]
    fn a_call_goes_to_the_last_dirtying_before_it_started() {
        let mut b = ByInode::default();
        b.update(&[dirtying(1, 100, 10), dirtying(1, 300, 20)], Some(&[]));
        assert_eq!(b.dirtier(7, 1, 250), Some((10, 0)));
        assert_eq!(b.dirtier(7, 1, 300), Some((20, 0)));
        assert_eq!(b.dirtier(7, 1, 0), Some((20, 0)));
        // Dirtied only after the call started: not known to have
        // dirtied what it wrote.
        assert_eq!(b.dirtier(7, 1, 50), None);
        assert_eq!(b.dirtier(7, 2, 500), None);
        assert!(b.knows(7, 1) && !b.knows(7, 2) && !b.knows(8, 1));
    }

    #[test]
    fn out_of_order_records_and_a_bounded_history() {
        let mut b = ByInode::default();
        b.update(&[dirtying(1, 300, 20), dirtying(1, 100, 10)], Some(&[]));
        assert_eq!(b.dirtier(7, 1, 200), Some((10, 0)));
        for t in 0..20u32 {
            b.update(&[dirtying(1, 1000 + u64::from(t), t)], Some(&[]));
        }
        assert_eq!(b.inodes[&(7, 1)].dirtyings.len(), HISTORY);
        assert_eq!(b.dirtier(7, 1, 2000), Some((19, 0)));
    }

    /// One writer making its inode dirty again and again keeps one entry:
    /// a call that started after its first dirtying is its own, however
    /// many came since.
    #[test]
    fn a_run_of_one_process_takes_one_place() {
        let mut b = ByInode::default();
        b.update(&[dirtying(1, 50, 7)], Some(&[]));
        let many: Vec<_> = (0..100).map(|i| dirtying(1, 100 + i, 10)).collect();
        b.update(&many, Some(&[]));
        assert_eq!(b.inodes[&(7, 1)].dirtyings.as_slice(), [(50, 7), (100, 10)]);
        assert_eq!(b.dirtier(7, 1, 101), Some((10, 0)));
        assert_eq!(b.dirtier(7, 1, 99), Some((7, 0)));
    }

    /// A workqueue worker that makes an inode dirty (ext4's conversion of
    /// unwritten extents at I/O end) does not take the pages of the
    /// writer that dirtied it before; on an inode only workers dirty, it
    /// is named.
    #[test]
    fn a_kworker_does_not_take_a_writers_inode() {
        let mut b = ByInode::default();
        let mut worker = dirtying(1, 200, 99);
        worker.comm = "kworker/u8:5".into();
        b.update(&[dirtying(1, 100, 10), worker.clone()], Some(&[]));
        assert_eq!(b.dirtier(7, 1, 300), Some((10, 0)));
        worker.ino = 2;
        b.update(&[worker], Some(&[]));
        assert_eq!(b.dirtier(7, 2, 300), Some((99, 0)));
        b.update(&[dirtying(2, 400, 11)], Some(&[]));
        assert_eq!(b.dirtier(7, 2, 500), Some((11, 0)));
        assert!(!is_workqueue_worker("kworker") && is_workqueue_worker("kworker/R-ext4"));
    }

    /// An entry takes a bucket of 64 bytes (the bound's size in aged.rs).
    #[test]
    fn an_inode_takes_64_bytes() {
        assert_eq!(std::mem::size_of::<((u32, u64), History)>(), 64);
    }

    /// A process's count counts from its first reading, unless it started
    /// after the previous one (then from zero, as the kernel's count
    /// does); one that is no longer read is forgotten.
    #[test]
    fn task_counts_are_differenced_from_a_base() {
        let pages = |g: Vec<(u32, Counts)>| -> Vec<(u32, u64)> {
            g.into_iter().map(|(t, c)| (t, c.pages)).collect()
        };
        let mut b = ByInode::default();
        let t = |tgid, pages, new| TaskReading {
            tgid,
            pages,
            new,
            ..TaskReading::default()
        };
        assert_eq!(
            pages(b.update(&[], Some(&[t(1, 500, false), t(2, 64, true)]))),
            vec![(2, 64)]
        );
        assert_eq!(
            pages(b.update(&[], Some(&[t(1, 800, false), t(2, 64, false)]))),
            vec![(1, 300)]
        );
        // A count that went back (a pid reused by an older process)
        // counts nothing and is the new base.
        assert_eq!(pages(b.update(&[], Some(&[t(1, 10, false)]))), vec![]);
        assert_eq!(
            pages(b.update(&[], Some(&[t(1, 30, false)]))),
            vec![(1, 20)]
        );
        // Reused by a process that started since: all of its count.
        assert_eq!(pages(b.update(&[], Some(&[t(1, 5, true)]))), vec![(1, 5)]);
        // Not read (a batch's re-read): the bases stay.
        assert_eq!(pages(b.update(&[], None)), vec![]);
        assert_eq!(b.tasks.get(&1).map(|c| c.pages), Some(5));
        assert_eq!(pages(b.update(&[], Some(&[t(1, 9, false)]))), vec![(1, 4)]);
        assert_eq!(pages(b.update(&[], Some(&[]))), vec![]);
        assert!(b.tasks.is_empty());
    }

    /// The bytes written by calls and cancelled grow on their own, even
    /// in a reading where no page was dirtied.
    #[test]
    fn write_call_and_cancelled_bytes_are_differenced_too() {
        let mut b = ByInode::default();
        let t = |pages, wchar, cancelled_bytes, new| TaskReading {
            tgid: 3,
            pages,
            wchar,
            cancelled_bytes,
            new,
        };
        let first = b.update(&[], Some(&[t(10, 40960, 0, true)]));
        assert_eq!(first[0].1.wchar, 40960);
        let later = b.update(&[], Some(&[t(10, 45056, 8192, false)]));
        assert_eq!(
            later,
            vec![(
                3,
                Counts {
                    pages: 0,
                    wchar: 4096,
                    cancelled_bytes: 8192
                }
            )]
        );
    }
}
