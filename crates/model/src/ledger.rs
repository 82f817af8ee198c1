//! Where the bytes go: from the write-family calls to the device, per
//! device and per process and cgroup (docs/ledger.md).
//!
//! A device row splits what the device counted as written (its sectors
//! written in /proc/diskstats, ×512) into data, journal, metadata and
//! other, from the write bios the block program classed
//! (`writeback_common::ledger_class`); the classes come with `--enable
//! device_io`. A process row carries the kernel's per-task counts
//! (`wchar`, `write_bytes`, `cancelled_write_bytes`), the pages of its
//! written back (charged to the dirtier), and its share of each device's
//! journal and metadata in proportion to the journal blocks its handles
//! dirtied on that device (`--enable durability`); what no row is
//! charged is `unattributed`.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use writeback_common::ledger_class as class;

use crate::{
    DevId,
    dirtier::{OwnerLine, add_known},
    kernel::KernelSnapshot,
};

/// Process and cgroup rows kept per line; the rest are summed into one
/// row named `other`.
pub const ROWS_KEPT: usize = 10;

/// The `ledger` object of interval lines and the summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerLine {
    pub devices: Vec<DeviceLedger>,
    pub processes: Vec<ProcessLedger>,
    pub cgroups: Vec<CgroupLedger>,
    /// The devices' `unattributed`, added.
    pub unattributed: u64,
    /// Why the devices' classes are absent, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes_unmeasured: Option<String>,
    /// Why the rows' journal and metadata shares are absent, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares_unmeasured: Option<String>,
}

/// One device's bytes written in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLedger {
    pub dev: DevId,
    /// Growth of the device's own sectors-written counter, in bytes.
    pub written: u64,
    /// Page-cache data written back and direct I/O (`direct` is the part
    /// from pages no file owns: O_DIRECT from user memory, swap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<u64>,
    /// Inside the filesystem's journal or log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<u64>,
    /// Flagged metadata, and the block device's own page cache (ext4's
    /// inode tables, bitmaps and directory blocks written back after
    /// their commit, checkpoints, writes to the device node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<u64>,
    /// Writes that carry no data of their own (write-zeroes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<u64>,
    /// Of the device's bytes, those charged to processes: their pages
    /// written back on this device, and their shares of its journal and
    /// metadata (a share can come an interval after its bytes: the
    /// commit's handles are read once it has ended).
    #[serde(default)]
    pub charged: u64,
    /// The device's bytes (its classes, or `written` without them) less
    /// `charged`.
    #[serde(default)]
    pub unattributed: u64,
}

impl DeviceLedger {
    /// The four classes together, when measured.
    pub fn classed(&self) -> Option<u64> {
        Some(self.data? + self.journal? + self.metadata? + self.other?)
    }
}

/// The stages of a process's (or a cgroup's) bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Bytes passed to write-family system calls (`wchar`: files, pipes
    /// and sockets alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_calls: Option<u64>,
    /// Bytes taken from clean to dirty in the page cache: the task's
    /// `write_bytes`, less its `direct` where that is measured (the kernel
    /// counts a direct write's bytes there too, at submission:
    /// `iomap_dio_bio_iter()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirtied: Option<u64>,
    /// Dirty bytes truncated or deleted before writeback
    /// (`cancelled_write_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<u64>,
    /// `write_calls` less `dirtied`: bytes written into pages that were
    /// dirty already (rewritten in the cache before their writeback), and
    /// bytes written to pipes and sockets, which `wchar` counts too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absorbed: Option<u64>,
    /// Its pages written back, by anyone.
    pub written_back: u64,
    /// Its direct-I/O bytes (O_DIRECT from user memory) that reached the
    /// devices; with the BTF bio program only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<u64>,
    /// Its share of the devices' journal and metadata bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<u64>,
    /// Device bytes charged to it over `dirtied`, and over `write_calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplification: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplification_of_write_calls: Option<f64>,
}

impl Stages {
    /// Device bytes charged.
    pub fn charged(&self) -> u64 {
        self.written_back
            + self.direct.unwrap_or(0)
            + self.journal.unwrap_or(0)
            + self.metadata.unwrap_or(0)
    }

    pub(crate) fn add(&mut self, o: &Stages) {
        let add = add_known;
        self.write_calls = add(self.write_calls, o.write_calls);
        self.dirtied = add(self.dirtied, o.dirtied);
        self.cancelled = add(self.cancelled, o.cancelled);
        self.written_back += o.written_back;
        self.direct = add(self.direct, o.direct);
        self.journal = add(self.journal, o.journal);
        self.metadata = add(self.metadata, o.metadata);
    }

    fn amplify(&mut self) {
        let charged = self.charged();
        let over = |d: Option<u64>| d.filter(|&d| d > 0).map(|d| charged as f64 / d as f64);
        self.amplification = over(self.dirtied);
        self.amplification_of_write_calls = over(self.write_calls);
        self.absorbed = self
            .write_calls
            .zip(self.dirtied)
            .map(|(w, d)| w.saturating_sub(d));
    }

    /// What sorts rows: the largest of what it wrote, dirtied and was
    /// charged.
    fn weight(&self) -> u64 {
        self.write_calls
            .unwrap_or(0)
            .max(self.dirtied.unwrap_or(0))
            .max(self.charged())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessLedger {
    /// 0 for the `other` row.
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    #[serde(flatten)]
    pub stages: Stages,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupLedger {
    /// 0 for the `other` row.
    pub cgroup_id: u64,
    #[serde(flatten)]
    pub stages: Stages,
}

/// The journal blocks each process's handles dirtied, per device and pid,
/// in the commits that ended in the interval (`durability::HandleShare`),
/// and the processes' names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandleBlocks {
    pub blocks: BTreeMap<(DevId, u32), u64>,
    pub names: BTreeMap<u32, String>,
}

/// How long a disk's journal and metadata bytes wait for the handles that
/// made them before they are left unattributed. A jbd2 commit's handles
/// are read when the commit ends (`jbd2_end_commit`), after its journal
/// blocks are written; a commit under heavy writeback takes seconds, and
/// the kernel wakes the commit every `j_commit_interval` (5 s by default,
/// `JBD2_DEFAULT_MAX_COMMIT_AGE` in include/linux/jbd2.h), so 30 s holds
/// several late commits and no longer than a user would wait for a row.
pub(crate) const SHARE_WAIT_S: f64 = 30.0;

/// Journal and metadata bytes of each disk not yet shared: those written
/// before the handles of their commits were read. They are shared at the
/// next interval with handles on that disk, or left unattributed once
/// they have waited [`SHARE_WAIT_S`].
#[derive(Clone, Debug, Default)]
pub struct ShareCarry {
    pending: HashMap<DevId, VecDeque<Held>>,
}

/// One interval's unshared bytes of a disk and how long they have waited.
#[derive(Clone, Copy, Debug)]
struct Held {
    journal: u64,
    metadata: u64,
    waited_s: f64,
}

impl ShareCarry {
    /// Another interval of `interval_s` has passed: what every disk
    /// holds has waited that much longer, and what has waited past
    /// [`SHARE_WAIT_S`] is dropped.
    fn age(&mut self, interval_s: f64) {
        for held in self.pending.values_mut() {
            for h in held.iter_mut() {
                h.waited_s += interval_s;
            }
            held.retain(|h| h.waited_s <= SHARE_WAIT_S);
        }
        self.pending.retain(|_, held| !held.is_empty());
    }

    /// Holds a disk's bytes that no handle claimed yet.
    fn hold(&mut self, dev: DevId, journal: u64, metadata: u64) {
        if journal + metadata > 0 {
            self.pending.entry(dev).or_default().push_back(Held {
                journal,
                metadata,
                waited_s: 0.0,
            });
        }
    }

    /// Everything a disk holds, taken.
    fn take(&mut self, dev: DevId) -> (u64, u64) {
        self.pending
            .remove(&dev)
            .unwrap_or_default()
            .iter()
            .fold((0, 0), |(j, m), h| (j + h.journal, m + h.metadata))
    }
}

/// What the ledger of an interval is made from.
pub struct LedgerInputs<'a> {
    pub prev: &'a KernelSnapshot,
    pub cur: &'a KernelSnapshot,
    pub owners: &'a [OwnerLine],
    /// `None` without the journal handles (`--enable durability`).
    pub handles: Option<&'a HandleBlocks>,
    /// Pages charged per (process, filesystem device) in the interval
    /// (`Attribution::take_written_on`).
    pub written_on: &'a BTreeMap<(u32, DevId), u64>,
    pub page_size: u64,
    /// The interval's length: how much longer held bytes have waited.
    pub interval_s: f64,
    /// The CPU budget shed the block programs in the interval
    /// (`BudgetLine::device_io_shed`): the classes did not count it.
    pub device_io_shed: bool,
}

/// Why the classes of an interval the budget shed `device_io` in are
/// absent.
pub(crate) const SHED: &str =
    "the CPU budget shed device_io in this interval (budget.device_io_shed)";

impl LedgerLine {
    /// The interval's ledger, where `cur` is a tracer's snapshot (which
    /// has every disk's counters); `None` for one without (a window's, a
    /// test's).
    pub fn of(i: &LedgerInputs<'_>, carry: &mut ShareCarry) -> Option<LedgerLine> {
        (!i.cur.disks.is_empty()).then(|| LedgerLine::new(i, carry))
    }

    pub fn new(i: &LedgerInputs<'_>, carry: &mut ShareCarry) -> LedgerLine {
        let classes_unmeasured = match i.cur.ledger_unmeasured.clone() {
            None if i.device_io_shed => Some(SHED.to_string()),
            why => why,
        };
        let devices = device_rows(i.prev, i.cur, classes_unmeasured.is_none());
        let processes: Vec<ProcessLedger> = i
            .owners
            .iter()
            .map(|o| ProcessLedger {
                pid: o.pid,
                comm: o.comm.clone(),
                cgroup_id: o.cgroup_id,
                stages: Stages {
                    write_calls: o.write_call_bytes,
                    dirtied: (!o.dirtied_unmeasured).then(|| o.pages_dirtied * i.page_size),
                    cancelled: o.cancelled_bytes,
                    written_back: o.pages_written * i.page_size,
                    ..Stages::default()
                },
            })
            .collect();
        let disk_of = |dev: DevId| i.cur.fs_disks.get(&dev).copied().unwrap_or(dev);
        let mut line = LedgerLine {
            devices,
            processes,
            cgroups: Vec::new(),
            unattributed: 0,
            classes_unmeasured,
            shares_unmeasured: None,
        };
        // A process that only made journal handles (a rename, a chmod)
        // dirtied no page: it gets a row for its share all the same.
        if let Some(h) = i.handles {
            for &(_, pid) in h.blocks.keys() {
                if !line.processes.iter().any(|p| p.pid == pid) {
                    line.processes.push(ProcessLedger {
                        pid,
                        comm: h.names.get(&pid).cloned().unwrap_or_default(),
                        ..ProcessLedger::default()
                    });
                }
            }
        }
        line.charge_data(i.written_on, &disk_of, i.page_size);
        if i.cur.ledger_pages && line.classes_unmeasured.is_none() {
            line.charge_direct(i.prev, i.cur);
        }
        match (i.handles, line.classes_unmeasured.is_none()) {
            (Some(h), true) => line.share(h, &disk_of, carry, i.interval_s, i.cur.ledger_pages),
            (None, _) => {
                line.shares_unmeasured =
                    Some("the journal handles come with --enable durability".to_string())
            }
            (Some(_), false) => {
                line.shares_unmeasured = Some("the devices' classes are unmeasured".to_string())
            }
        }
        line.finish();
        line
    }

    /// Each process's share of each device's journal and metadata, by the
    /// journal blocks its handles dirtied there (a handle's device is the
    /// filesystem's, `disk_of` names its disk), with what `carry` held
    /// from the intervals before (aged by `interval_s`); what no handle
    /// claims now is held for the next. `pages`: whether the bio program
    /// sees pages (a row made here then has a measured `direct`).
    fn share(
        &mut self,
        handles: &HandleBlocks,
        disk_of: &impl Fn(DevId) -> DevId,
        carry: &mut ShareCarry,
        interval_s: f64,
        pages: bool,
    ) {
        let mut blocks: HashMap<(DevId, u32), u64> = HashMap::new();
        let mut totals: HashMap<DevId, u64> = HashMap::new();
        for (&(dev, pid), &b) in &handles.blocks {
            let disk = disk_of(dev);
            *blocks.entry((disk, pid)).or_default() += b;
            *totals.entry(disk).or_default() += b;
        }
        carry.age(interval_s);
        // A disk that wrote nothing this interval but held bytes whose
        // handles came now gets a row to charge them on.
        for &dev in totals.keys() {
            if carry.pending.contains_key(&dev) && !self.devices.iter().any(|d| d.dev == dev) {
                self.devices.push(DeviceLedger {
                    dev,
                    data: Some(0),
                    direct: pages.then_some(0),
                    journal: Some(0),
                    metadata: Some(0),
                    other: Some(0),
                    ..DeviceLedger::default()
                });
            }
        }
        self.devices.sort_by_key(|d| d.dev);
        for d in &mut self.devices {
            let (now_j, now_m) = (d.journal.unwrap_or(0), d.metadata.unwrap_or(0));
            let Some(&all) = totals.get(&d.dev) else {
                carry.hold(d.dev, now_j, now_m);
                continue;
            };
            let (j0, m0) = carry.take(d.dev);
            let (journal, metadata) = (now_j + j0, now_m + m0);
            let (mut given_j, mut given_m) = (0, 0);
            for p in &mut self.processes {
                let Some(&mine) = blocks.get(&(d.dev, p.pid)) else {
                    continue;
                };
                let part = |bytes: u64| {
                    (u128::from(bytes) * u128::from(mine) / u128::from(all.max(1))) as u64
                };
                let (j, m) = (part(journal), part(metadata));
                *p.stages.journal.get_or_insert(0) += j;
                *p.stages.metadata.get_or_insert(0) += m;
                given_j += j;
                given_m += m;
            }
            d.charged += given_j + given_m;
            // The rounding's few bytes, shared next time.
            carry.hold(d.dev, journal - given_j, metadata - given_m);
        }
        for p in &mut self.processes {
            p.stages.journal.get_or_insert(0);
            p.stages.metadata.get_or_insert(0);
        }
    }

    /// Each process's direct bytes in the interval, charged to it and its
    /// disks, and taken off its `dirtied` (which the kernel's
    /// `write_bytes` counted them in). A process with direct bytes and no
    /// row (a reader-writer that dirtied no page) gets one.
    fn charge_direct(&mut self, prev: &KernelSnapshot, cur: &KernelSnapshot) {
        for p in &mut self.processes {
            p.stages.direct = Some(0);
        }
        for (&(tgid, disk), &now) in &cur.direct {
            // An entry the LRU evicted and made again counts from 0.
            let before = prev.direct.get(&(tgid, disk)).copied().unwrap_or(0);
            let bytes = if now >= before { now - before } else { now };
            if bytes == 0 {
                continue;
            }
            if let Some(d) = self.devices.iter_mut().find(|d| d.dev == disk) {
                d.charged += bytes;
            }
            let row = match self.processes.iter().position(|p| p.pid == tgid) {
                Some(i) => &mut self.processes[i],
                None => {
                    self.processes.push(ProcessLedger {
                        pid: tgid,
                        stages: Stages {
                            direct: Some(0),
                            ..Stages::default()
                        },
                        ..ProcessLedger::default()
                    });
                    let last = self.processes.len() - 1;
                    &mut self.processes[last]
                }
            };
            *row.stages.direct.get_or_insert(0) += bytes;
            row.stages.dirtied = row.stages.dirtied.map(|d| d.saturating_sub(bytes));
        }
    }

    /// Charges each process's written-back pages to their disks.
    fn charge_data(
        &mut self,
        written_on: &BTreeMap<(u32, DevId), u64>,
        disk_of: &impl Fn(DevId) -> DevId,
        page: u64,
    ) {
        for (&(_, dev), &pages) in written_on {
            let disk = disk_of(dev);
            if let Some(d) = self.devices.iter_mut().find(|d| d.dev == disk) {
                d.charged += pages * page;
            }
        }
    }

    /// Cgroup rows, amplification, the bound on rows, `unattributed`.
    fn finish(&mut self) {
        let mut cgroups: BTreeMap<u64, Stages> = BTreeMap::new();
        for p in &self.processes {
            cgroups.entry(p.cgroup_id).or_default().add(&p.stages);
        }
        self.cgroups = cgroups
            .into_iter()
            .map(|(cgroup_id, stages)| CgroupLedger { cgroup_id, stages })
            .collect();
        for d in &mut self.devices {
            d.unattributed = d.classed().unwrap_or(d.written).saturating_sub(d.charged);
        }
        self.unattributed = self.devices.iter().map(|d| d.unattributed).sum();
        bound(
            &mut self.processes,
            |p| &p.stages,
            |p| p.pid == 0,
            |rest| ProcessLedger {
                comm: "other".to_string(),
                stages: rest,
                ..ProcessLedger::default()
            },
        );
        bound(
            &mut self.cgroups,
            |c| &c.stages,
            |c| c.cgroup_id == 0,
            |rest| CgroupLedger {
                cgroup_id: 0,
                stages: rest,
            },
        );
        for p in &mut self.processes {
            p.stages.amplify();
        }
        for c in &mut self.cgroups {
            c.stages.amplify();
        }
    }

    /// Adds an interval's ledger into a run's (the summary's).
    pub fn add(&mut self, o: &LedgerLine) {
        for d in &o.devices {
            match self.devices.iter_mut().find(|m| m.dev == d.dev) {
                Some(m) => {
                    let add = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
                    m.written += d.written;
                    m.data = add(m.data, d.data);
                    m.direct = add(m.direct, d.direct);
                    m.journal = add(m.journal, d.journal);
                    m.metadata = add(m.metadata, d.metadata);
                    m.other = add(m.other, d.other);
                    m.charged += d.charged;
                }
                None => self.devices.push(d.clone()),
            }
        }
        self.devices.sort_by_key(|d| d.dev);
        for p in &o.processes {
            match self
                .processes
                .iter_mut()
                .find(|m| m.pid == p.pid && m.comm == p.comm)
            {
                Some(m) => m.stages.add(&p.stages),
                None => self.processes.push(p.clone()),
            }
        }
        if self.classes_unmeasured.is_none() {
            self.classes_unmeasured = o.classes_unmeasured.clone();
        }
        if self.shares_unmeasured.is_none() {
            self.shares_unmeasured = o.shares_unmeasured.clone();
        }
        self.finish();
    }
}

/// Keeps the [`ROWS_KEPT`] heaviest rows and sums the rest, and any
/// `other` row already there (`is_other`), into one `other` row.
fn bound<T>(
    rows: &mut Vec<T>,
    stages: impl Fn(&T) -> &Stages,
    is_other: impl Fn(&T) -> bool,
    other: impl Fn(Stages) -> T,
) {
    let mut rest = Stages::default();
    let mut any = false;
    rows.retain(|r| {
        let keep = !is_other(r);
        if !keep {
            rest.add(stages(r));
            any = true;
        }
        keep
    });
    rows.sort_by_key(|r| std::cmp::Reverse(stages(r).weight()));
    if rows.len() > ROWS_KEPT {
        for r in rows.drain(ROWS_KEPT..) {
            rest.add(stages(&r));
        }
        any = true;
    }
    if any {
        rows.push(other(rest));
    }
}

/// The devices that wrote in the interval, by whole disk.
fn device_rows(prev: &KernelSnapshot, cur: &KernelSnapshot, classed: bool) -> Vec<DeviceLedger> {
    let mut out: Vec<DeviceLedger> = cur
        .disks
        .iter()
        .filter_map(|disk| {
            let (dev, sectors) = (disk.dev, disk.sectors_written);
            let before = prev
                .disks
                .iter()
                .find(|p| p.dev == dev)
                .map_or(sectors, |p| p.sectors_written);
            let written = sectors.saturating_sub(before) * 512;
            let zero = [0u64; class::COUNT];
            let now = cur.ledger.get(&dev).unwrap_or(&zero);
            let then = prev.ledger.get(&dev).unwrap_or(&zero);
            let d = |c: usize| now[c].wrapping_sub(then[c]);
            let row = if classed {
                let pages = cur.ledger_pages;
                DeviceLedger {
                    dev,
                    written,
                    data: Some(d(class::FILE) + d(class::UNOWNED) + d(class::PLAIN)),
                    direct: pages.then(|| d(class::UNOWNED)),
                    journal: Some(d(class::JOURNAL)),
                    metadata: Some(d(class::META) + d(class::BDEV)),
                    other: Some(d(class::NO_DATA)),
                    charged: 0,
                    unattributed: 0,
                }
            } else {
                DeviceLedger {
                    dev,
                    written,
                    ..DeviceLedger::default()
                }
            };
            (row.written > 0 || row.classed().unwrap_or(0) > 0).then_some(row)
        })
        .collect();
    out.sort_by_key(|d| d.dev);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::DiskCounters;

    fn dev() -> DevId {
        DevId { major: 7, minor: 0 }
    }

    fn snapshot(sectors: u64, bytes: [u64; class::COUNT]) -> KernelSnapshot {
        KernelSnapshot {
            disks: vec![DiskCounters {
                dev: dev(),
                sectors_written: sectors,
                ..DiskCounters::default()
            }],
            ledger: HashMap::from([(dev(), bytes)]),
            ledger_pages: true,
            ..KernelSnapshot::default()
        }
    }

    fn owner(pid: u32, cgroup_id: u64, dirtied: u64, written: u64) -> OwnerLine {
        OwnerLine {
            pid,
            comm: format!("p{pid}"),
            cgroup_id,
            pages_dirtied: dirtied,
            pages_written: written,
            write_call_bytes: Some(dirtied * 4096 + 100),
            cancelled_bytes: Some(0),
            ..OwnerLine::default()
        }
    }

    #[test]
    fn a_device_row_splits_what_the_device_counted() {
        let prev = snapshot(1_000, [0; class::COUNT]);
        // 100 KiB journal, 8 KiB flagged metadata, 4 KiB bdev cache,
        // 40 KiB file data, 4 KiB direct: 156 KiB = 312 sectors.
        let cur = snapshot(1_312, [102_400, 8_192, 4_096, 40_960, 4_096, 0, 0]);
        let handles = HandleBlocks {
            blocks: BTreeMap::from([((dev(), 1), 3), ((dev(), 2), 1), ((dev(), 3), 4)]),
            names: BTreeMap::from([(3, "mv".to_string())]),
        };
        let owners = [owner(1, 10, 10, 10), owner(2, 10, 0, 0)];
        let line = LedgerLine::new(
            &LedgerInputs {
                prev: &prev,
                cur: &cur,
                owners: &owners,
                handles: Some(&handles),
                written_on: &BTreeMap::from([((1, dev()), 10)]),
                page_size: 4096,
                interval_s: 1.0,
                device_io_shed: false,
            },
            &mut ShareCarry::default(),
        );
        let d = &line.devices[0];
        assert_eq!(d.written, 312 * 512);
        assert_eq!(d.classed(), Some(d.written));
        assert_eq!((d.data, d.direct), (Some(45_056), Some(4_096)));
        assert_eq!(
            (d.journal, d.metadata, d.other),
            (Some(102_400), Some(12_288), Some(0))
        );
        // Pid 1 dirtied 3 of the 8 journal blocks: 3/8 of journal and
        // metadata, and its own 40 KiB written back.
        let p1 = &line.processes[0];
        assert_eq!(p1.pid, 1);
        assert_eq!(p1.stages.journal, Some(38_400));
        assert_eq!(p1.stages.metadata, Some(4_608));
        let charged = 40_960 + 38_400 + 4_608;
        assert_eq!(p1.stages.amplification, Some(charged as f64 / 40_960.0));
        // Pid 3 only made handles (a rename): a row of its own, named,
        // with half of them; its cgroup unknown, so `other`'s.
        let mv = &line.processes[1];
        assert_eq!((mv.pid, mv.comm.as_str()), (3, "mv"));
        assert_eq!(
            (mv.stages.journal, mv.stages.metadata),
            (Some(51_200), Some(6_144))
        );
        // Pid 2 dirtied nothing: no amplification, not a division by 0.
        assert_eq!(line.processes[2].stages.amplification, None);
        // What nobody was charged: the direct 4 KiB (the shares divide
        // evenly here).
        assert_eq!(line.devices[0].unattributed, 4_096);
        assert_eq!(line.unattributed, 4_096);
        assert_eq!(line.cgroups.len(), 2);
        assert_eq!(line.cgroups[0].stages.written_back, 40_960);
        assert_eq!(line.cgroups[1].cgroup_id, 0);
        // As JSON: the stages beside the pid, absent figures absent.
        let json = serde_json::to_value(&line).expect("json");
        assert_eq!(json["processes"][0]["written_back"], 40_960);
        assert!(json.get("classes_unmeasured").is_none());
        let back: LedgerLine = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.devices, line.devices);
    }

    #[test]
    fn unmeasured_classes_and_shares_are_absent_with_their_reasons() {
        let prev = snapshot(0, [0; class::COUNT]);
        let mut cur = snapshot(8, [0; class::COUNT]);
        cur.ledger_unmeasured = Some("--enable device_io".to_string());
        let line = LedgerLine::new(
            &LedgerInputs {
                prev: &prev,
                cur: &cur,
                owners: &[],
                handles: None,
                written_on: &BTreeMap::new(),
                page_size: 4096,
                interval_s: 1.0,
                device_io_shed: false,
            },
            &mut ShareCarry::default(),
        );
        let d = &line.devices[0];
        assert_eq!((d.written, d.data, d.journal), (4096, None, None));
        // Without classes the device's own counter is what nobody was
        // charged.
        assert_eq!(line.unattributed, 4096);
        let json = serde_json::to_value(&line).expect("json");
        assert!(json["devices"][0].get("data").is_none());
        assert_eq!(json["classes_unmeasured"], "--enable device_io");
        assert!(json["shares_unmeasured"].is_string());
    }

    #[test]
    fn rows_past_the_bound_become_one_other_row_and_runs_add_up() {
        let prev = snapshot(0, [0; class::COUNT]);
        let cur = snapshot(0, [0; class::COUNT]);
        let owners: Vec<OwnerLine> = (1..=15)
            .map(|p| owner(p, u64::from(p), u64::from(p), 0))
            .collect();
        let line = LedgerLine::new(
            &LedgerInputs {
                prev: &prev,
                cur: &cur,
                owners: &owners,
                handles: None,
                written_on: &BTreeMap::new(),
                page_size: 4096,
                interval_s: 1.0,
                device_io_shed: false,
            },
            &mut ShareCarry::default(),
        );
        assert_eq!(line.processes.len(), ROWS_KEPT + 1);
        assert_eq!(line.processes[0].pid, 15);
        let other = line.processes.last().expect("other");
        assert_eq!((other.pid, other.comm.as_str()), (0, "other"));
        assert_eq!(other.stages.dirtied, Some((1..=5).sum::<u64>() * 4096));
        assert_eq!(line.cgroups.len(), ROWS_KEPT + 1);
        // Two intervals make a run: the figures add.
        let mut run = LedgerLine::default();
        run.add(&line);
        run.add(&line);
        let top = &run.processes[0];
        assert_eq!((top.pid, top.stages.dirtied), (15, Some(2 * 15 * 4096)));
        let total: u64 = run.processes.iter().filter_map(|p| p.stages.dirtied).sum();
        assert_eq!(total, 2 * (1..=15).sum::<u64>() * 4096);
    }

    #[test]
    fn journal_bytes_before_their_handles_wait_for_them() {
        let mut carry = ShareCarry::default();
        let owners = [owner(1, 10, 1, 1)];
        let none = HandleBlocks::default();
        let handles = HandleBlocks {
            blocks: BTreeMap::from([((dev(), 1), 2)]),
            names: BTreeMap::new(),
        };
        let mut journal = 0;
        let mut interval =
            |sectors: u64, handles: &HandleBlocks, secs: f64, carry: &mut ShareCarry| {
                let prev = snapshot(journal / 512, [journal, 0, 0, 0, 0, 0, 0]);
                journal += sectors * 512;
                let cur = snapshot(journal / 512, [journal, 0, 0, 0, 0, 0, 0]);
                LedgerLine::new(
                    &LedgerInputs {
                        prev: &prev,
                        cur: &cur,
                        owners: &owners,
                        handles: Some(handles),
                        written_on: &BTreeMap::new(),
                        page_size: 4096,
                        interval_s: secs,
                        device_io_shed: false,
                    },
                    carry,
                )
            };
        // A commit's 64 KiB go out in one interval; a slow commit's
        // handles are read three intervals later (with 8 KiB of the next
        // commit).
        let mut run = LedgerLine::default();
        let first = interval(128, &none, 1.0, &mut carry);
        assert_eq!(first.devices[0].unattributed, 65_536);
        run.add(&first);
        for _ in 0..2 {
            run.add(&interval(0, &none, 1.0, &mut carry));
        }
        let fourth = interval(16, &handles, 1.0, &mut carry);
        assert_eq!(fourth.processes[0].stages.journal, Some(65_536 + 8_192));
        // Over the run, all of it charged: the summary nets the intervals.
        run.add(&fourth);
        assert_eq!(run.devices[0].unattributed, 0);
        assert_eq!(run.devices[0].charged, 73_728);
        // Bytes no handle claims for longer than SHARE_WAIT_S are left
        // unattributed; those written since still wait.
        run.add(&interval(8, &none, 10.0, &mut carry));
        run.add(&interval(0, &none, 10.0, &mut carry));
        run.add(&interval(2, &none, 10.0, &mut carry));
        let last = interval(0, &handles, 10.1, &mut carry);
        assert_eq!(last.processes[0].stages.journal, Some(1_024));
        run.add(&last);
        assert_eq!(run.devices[0].unattributed, 4_096);
    }

    #[test]
    fn held_bytes_are_bounded_by_age_not_count() {
        // One disk that never gets handles (an xfs log) for an hour of
        // 100 ms intervals holds at most SHARE_WAIT_S of them.
        let mut carry = ShareCarry::default();
        for _ in 0..36_000 {
            carry.age(0.1);
            carry.hold(dev(), 4_096, 0);
        }
        let held = carry.pending.get(&dev()).map_or(0, VecDeque::len);
        assert!((300..=302).contains(&held), "{held}");
    }

    #[test]
    fn direct_bytes_are_charged_and_taken_off_what_the_kernel_called_dirtied() {
        // A 64 KiB O_DIRECT write: the kernel's write_bytes counted it
        // (16 "dirtied" pages), the bio program saw it unowned.
        let prev = snapshot(0, [0; class::COUNT]);
        let mut cur = snapshot(128, [0, 0, 0, 0, 65_536, 0, 0]);
        cur.direct = HashMap::from([((9, dev()), 65_536), ((8, dev()), 0)]);
        let owners = [owner(9, 10, 16, 0)];
        let line = LedgerLine::new(
            &LedgerInputs {
                prev: &prev,
                cur: &cur,
                owners: &owners,
                handles: None,
                written_on: &BTreeMap::new(),
                page_size: 4096,
                interval_s: 1.0,
                device_io_shed: false,
            },
            &mut ShareCarry::default(),
        );
        let p = &line.processes[0];
        assert_eq!((p.stages.direct, p.stages.dirtied), (Some(65_536), Some(0)));
        assert_eq!(line.devices[0].direct, Some(65_536));
        assert_eq!(line.devices[0].unattributed, 0);
        // Without the pages (the classic bio program), no direct at all.
        cur.ledger_pages = false;
        let line = LedgerLine::new(
            &LedgerInputs {
                prev: &prev,
                cur: &cur,
                owners: &owners,
                handles: None,
                written_on: &BTreeMap::new(),
                page_size: 4096,
                interval_s: 1.0,
                device_io_shed: false,
            },
            &mut ShareCarry::default(),
        );
        assert_eq!(line.processes[0].stages.direct, None);
        assert_eq!(line.devices[0].direct, None);
    }
}
