//! Each ext4 fsync split into the parts a user can act on:
//! its own writeback, waiting for that I/O, the journal commit it waited
//! on, and what came after the commit (the cache flush ext4 issues when
//! the commit sent none), with the processes whose journal handles went
//! into that commit. Plain data: the tracer's records in, one
//! [`SyncRecord`] per fsync out (docs/trace-json.md, `sync` lines).
//!
//! What is exact and what is inferred, on tracepoints alone:
//! - the span (`ext4_sync_file_enter/exit` on the thread) and the
//!   writeback part (the thread's own writepages calls inside it, each a
//!   call record) are exact;
//! - the commit is the last one of the device's journal to end inside the
//!   span: `ext4_sync_file()` waits for one transaction,
//!   `jbd2_complete_transaction()` (fs/ext4/fsync.c), and the journal
//!   thread commits one at a time (fs/jbd2/journal.c `kjournald2`), so
//!   the transaction it waited for is the last to end before it returned;
//!   its phases' times are exact (ktime at each jbd2 tracepoint);
//! - `wait_ns` (from the last writeback call's end to the commit's start,
//!   or to the span's end without a commit) is where
//!   `file_write_and_wait_range()` waits for the pages' I/O, inferred
//!   from the order of fs/ext4/fsync.c, not measured by a hook of its own;
//! - `flush_ns` (from the commit's end to the span's end) is where ext4
//!   issues `blkdev_issue_flush()` when the commit did not send the
//!   barrier itself, inferred the same way; `None` without a commit;
//! - with function hooks (`sync_waits`, `journal_wait`: fentry or kprobe,
//!   where the kernel allows them), the wait, the journal wait with its
//!   transaction, and the flush are measured on the thread instead
//!   (`DurabilityJoin::measured`), and the record says which;
//! - the contributors are the kernel's own handle counts per process
//!   (`jbd2_handle_stats`); a handle opened inside a writepages call
//!   (block allocation for that call's data, usually by a flusher thread)
//!   is charged to the dirtiers of the call's inode, in proportion to
//!   their pages.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;
use writeback_common::{CommitPhase, SyncSpan, phase, sync_call, sync_flags};

use crate::{CallRecord, DevId, dirtier::Dirtier, record::comm};

/// One ext4 fsync as the kernel sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    pub dev: DevId,
    pub ino: u64,
    pub datasync: bool,
    pub ret: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// When xfs's log force began inside it; 0 without one.
    pub log_force_ns: u64,
    /// writeback_common [`sync_flags`].
    pub flags: u32,
    /// writeback_common [`sync_call`].
    pub call: u32,
    /// The waits function hooks measured inside, each valid with its bit
    /// of `flags` (writeback_common [`SyncSpan`]): (entered, left).
    pub wait: (u64, u64),
    pub journal: (u64, u64),
    pub flush: (u64, u64),
    /// The transaction `jbd2_log_wait_commit()` waited for.
    pub journal_tid: u32,
}

impl From<&SyncSpan> for Span {
    fn from(s: &SyncSpan) -> Span {
        Span {
            pid: s.pid,
            tid: s.tid,
            comm: comm(&s.comm),
            cgroup_id: s.cgroup_id,
            dev: DevId::from_kernel(s.dev),
            ino: s.ino,
            datasync: s.datasync != 0,
            ret: s.ret,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            log_force_ns: s.log_force_ns,
            flags: s.flags,
            call: s.call,
            wait: (s.wait_start_ns, s.wait_end_ns),
            journal: (s.journal_start_ns, s.journal_end_ns),
            flush: (s.flush_start_ns, s.flush_end_ns),
            journal_tid: s.journal_tid,
        }
    }
}

/// One phase of a journal commit as the kernel sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    pub dev: DevId,
    pub transaction: u32,
    /// writeback_common [`phase`].
    pub phase: u32,
    pub ns: u64,
    pub handles: u32,
    pub blocks: u32,
    pub blocks_logged: u32,
}

impl From<&CommitPhase> for Phase {
    fn from(p: &CommitPhase) -> Phase {
        Phase {
            dev: DevId::from_kernel(p.dev),
            transaction: p.transaction,
            phase: p.phase,
            ns: p.ns,
            handles: p.handles,
            blocks: p.blocks,
            blocks_logged: p.blocks_logged,
        }
    }
}

/// A process's journal handles in one transaction (the kernel's `HANDLES`
/// map).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleShare {
    pub dev: DevId,
    pub transaction: u32,
    pub pid: u32,
    /// The inode of the writepages call the handles were opened in; 0
    /// outside one.
    pub ino: u64,
    pub handles: u64,
    pub blocks: u64,
    /// The process's name at its first handle in the transaction.
    pub comm: String,
}

/// One fsync, split (docs/trace-json.md, `sync`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SyncRecord {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    pub dev: DevId,
    pub ino: u64,
    /// The filesystem of `dev` (mountinfo, as the call lines name it).
    pub fs: String,
    /// `fsync`, `fdatasync`, `msync` (MS_SYNC), `sync_file_range` (with a
    /// wait flag), `syncfs`, or `o_sync` / `o_dsync` (an O_SYNC / O_DSYNC
    /// write's sync, ext4 only).
    pub kind: &'static str,
    pub ret: i32,
    pub start_ns: u64,
    pub total_ns: u64,
    pub writeback_ns: u64,
    pub wait_ns: u64,
    pub journal_ns: u64,
    pub flush_ns: Option<u64>,
    pub other_ns: u64,
    /// The parts a function hook measured (`wait`, `journal`, `flush`);
    /// the others are inferred from the order of the events.
    pub measured: Vec<&'static str>,
    /// Pages and writepages calls of its own writeback.
    pub pages: i64,
    pub calls: u32,
    /// Those calls' `time_ns`, oldest first: with `tid`, they name its
    /// `call` lines.
    pub call_times_ns: Vec<u64>,
    pub commit: Option<CommitRecord>,
}

/// The commit an fsync waited on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommitRecord {
    pub transaction: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Phases' times (`None` where the phase's event was not seen):
    /// waiting for the transaction's open handles, writing and waiting for
    /// its ordered data, writing the journal.
    pub locked_ns: Option<u64>,
    pub flushing_ns: Option<u64>,
    pub logging_ns: Option<u64>,
    /// `jbd2_run_stats`: handles, blocks, and blocks written to the log.
    pub handles: Option<u32>,
    pub blocks: Option<u32>,
    pub blocks_logged: Option<u32>,
    /// Largest first.
    pub contributors: Vec<Contributor>,
}

/// A process in a commit: its journal handles and their blocks (exact:
/// the kernel's counts), and the pages of its data written back in the
/// transaction's life and its commit (from the call records: under
/// data=ordered without unwritten extents the commit writes and waits for
/// them; otherwise they share the device with the journal's own writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Contributor {
    pub pid: u32,
    pub comm: String,
    pub handles: u64,
    pub blocks: u64,
    pub pages: u64,
}

/// A commit as its phases arrive.
#[derive(Clone, Debug, Default)]
struct Commit {
    at: [Option<u64>; 5],
    handles: Option<u32>,
    blocks: Option<u32>,
    blocks_logged: Option<u32>,
    shares: Vec<HandleShare>,
    /// Its handles were asked for (once: they are final when it ends).
    asked: bool,
}

impl Commit {
    fn end(&self) -> Option<u64> {
        self.at[phase::END as usize]
    }
    fn start(&self) -> Option<u64> {
        self.at[phase::START as usize]
    }
    fn between(&self, from: u32, to: u32) -> Option<u64> {
        Some(self.at[to as usize]?.saturating_sub(self.at[from as usize]?))
    }
}

/// A writepages call, as far as the join needs it.
#[derive(Clone, Debug)]
struct Brief {
    tid: u32,
    dev: DevId,
    start_ns: u64,
    end_ns: u64,
    pages: i64,
    /// Its pages per dirtier (the calling process's when none is known).
    owners: Vec<(u32, u64)>,
}

/// How long an fsync waits before it is joined: the calls that overlap
/// its commit send their records when they end, and a flusher's chunk of
/// one inode is sized to about half a second of the device's bandwidth
/// (`writeback_chunk_size()`, fs/fs-writeback.c), so two seconds sees
/// all but the longest integrity calls' ends.
pub const HOLD_NS: u64 = 2_000_000_000;
/// The longest an fsync is held: when the calls kept have run longer
/// than [`HOLD_NS`] (a device slower than the flusher's bandwidth
/// estimate stretches its chunks: each call then lasts seconds), spans
/// wait as long as the longest of them, up to this.
pub const MAX_HOLD_NS: u64 = 10_000_000_000;

/// How long calls and commits are kept for spans still to come: an fsync
/// longer than this loses its oldest calls (and says fewer).
const KEEP_NS: u64 = 120_000_000_000;
/// Bounds of what is kept, whatever the rate.
const MAX_CALLS: usize = 1 << 16;
const MAX_COMMITS: usize = 4096;
const MAX_FLUSHES: usize = 1 << 14;
const MAX_NAMES: usize = 1 << 14;
/// fsyncs held for their hold at most: past it the oldest are joined at
/// once (a rate of 32,768 a second for the two seconds of the hold).
const MAX_HELD: usize = 1 << 16;
const MAX_INODES: usize = 1 << 14;

/// The `kind` of a span's call.
fn kind_name(call: u32, datasync: bool) -> &'static str {
    match call {
        sync_call::FDATASYNC => "fdatasync",
        sync_call::MSYNC => "msync",
        sync_call::SYNC_FILE_RANGE => "sync_file_range",
        sync_call::SYNCFS => "syncfs",
        sync_call::WRITE_SYNC if datasync => "o_dsync",
        sync_call::WRITE_SYNC => "o_sync",
        _ => "fsync",
    }
}

/// Each commit's contributors, made once for all its fsyncs.
type Contributors = HashMap<(DevId, u32), Vec<Contributor>>;

/// The join: calls, commits and handles in, [`SyncRecord`]s out.
#[derive(Clone, Debug, Default)]
pub struct DurabilityJoin {
    /// Sorted by `end_ns` (records come in about that order; a late one
    /// is put in its place), so that a span's calls are found by time.
    calls: VecDeque<Brief>,
    /// The longest call kept: a call overlapping a window ends at most
    /// this long after it.
    longest_ns: u64,
    commits: BTreeMap<(DevId, u32), Commit>,
    /// The ended commits by (device, end): the transaction.
    ended: BTreeMap<(DevId, u64), u32>,
    spans: Vec<Span>,
    /// Who dirtied each inode, from its last call with dirtiers.
    dirtiers: HashMap<(DevId, u64), Vec<Dirtier>>,
    /// Each device's filesystem, as its calls name it.
    fs: HashMap<DevId, String>,
    names: HashMap<u32, String>,
    /// The fsyncs joined since the last [`DurabilityJoin::take_line`],
    /// per process.
    lines: FsyncLines,
    /// The devices' cache-flush requests, by completion (`--enable
    /// device_io`).
    flushes: VecDeque<DeviceFlush>,
    /// Journal blocks per device and pid, of the handles read since the
    /// last [`DurabilityJoin::take_handle_blocks`] (the ledger's shares).
    handle_blocks: crate::ledger::HandleBlocks,
}

impl DurabilityJoin {
    pub fn call(&mut self, c: &CallRecord) {
        self.name(c.tgid, &c.comm);
        if !c.fs.is_empty() && !self.fs.contains_key(&c.dev) && self.fs.len() < MAX_INODES {
            self.fs.insert(c.dev, c.fs.to_string());
        }
        for d in &c.dirtiers {
            if d.pid != 0 {
                self.name(d.pid, &d.comm);
            }
        }
        if !c.dirtiers.is_empty()
            && (self.dirtiers.len() < MAX_INODES || self.dirtiers.contains_key(&(c.dev, c.ino)))
        {
            self.dirtiers.insert((c.dev, c.ino), c.dirtiers.to_vec());
        }
        if self.calls.len() >= MAX_CALLS {
            self.calls.pop_front();
        }
        let mut owners: Vec<(u32, u64)> = c
            .dirtiers
            .iter()
            .filter(|d| d.pid != 0 && d.pages > 0)
            .map(|d| (d.pid, d.pages))
            .collect();
        if owners.is_empty() && c.pages_written > 0 {
            owners.push((c.tgid, c.pages_written as u64));
        }
        let brief = Brief {
            tid: c.tid,
            dev: c.dev,
            start_ns: c.start_ns,
            end_ns: c.start_ns + c.duration_ns,
            pages: c.pages_written,
            owners,
        };
        self.longest_ns = self.longest_ns.max(c.duration_ns);
        let at = self.calls.partition_point(|b| b.end_ns <= brief.end_ns);
        self.calls.insert(at, brief);
    }

    /// A device's cache flush completed.
    pub fn flush(&mut self, f: DeviceFlush) {
        if self.flushes.len() >= MAX_FLUSHES {
            self.flushes.pop_front();
        }
        let at = self
            .flushes
            .partition_point(|g| g.complete_ns <= f.complete_ns);
        self.flushes.insert(at, f);
    }

    pub fn span(&mut self, s: Span) {
        self.name(s.pid, &s.comm);
        self.spans.push(s);
    }

    pub fn phase(&mut self, p: &Phase) {
        if self.commits.len() >= MAX_COMMITS
            && !self.commits.contains_key(&(p.dev, p.transaction))
            && let Some(oldest) = self.commits.keys().next().copied()
        {
            self.commits.remove(&oldest);
        }
        let c = self.commits.entry((p.dev, p.transaction)).or_default();
        if p.phase == phase::STATS {
            c.handles = Some(p.handles);
            c.blocks = Some(p.blocks);
            c.blocks_logged = Some(p.blocks_logged);
        } else if let Some(at) = c.at.get_mut(p.phase as usize) {
            *at = Some(p.ns);
            if p.phase == phase::END {
                self.ended.insert((p.dev, p.ns), p.transaction);
            }
        }
    }

    /// The transactions that have ended since the last time this was
    /// asked: the tracer reads their handle counts from the kernel's map
    /// (and removes them) once, since a transaction's handles have all
    /// stopped before its commit ends (fs/jbd2/commit.c waits for them).
    pub fn take_ended(&mut self) -> Vec<(DevId, u32)> {
        self.commits
            .iter_mut()
            .filter(|(_, c)| c.end().is_some() && !c.asked)
            .map(|(k, c)| {
                c.asked = true;
                *k
            })
            .collect()
    }

    pub fn shares(&mut self, shares: Vec<HandleShare>) {
        for s in shares {
            // Bounded as the handles are: one entry per (device, pid)
            // with handles in an interval.
            *self.handle_blocks.blocks.entry((s.dev, s.pid)).or_default() += s.blocks;
            if !s.comm.is_empty() {
                self.handle_blocks
                    .names
                    .entry(s.pid)
                    .or_insert_with(|| s.comm.clone());
            }
            if !s.comm.is_empty() {
                self.name(s.pid, &s.comm);
            }
            if let Some(c) = self.commits.get_mut(&(s.dev, s.transaction)) {
                c.shares.push(s);
            }
        }
    }

    /// The fsyncs joined since the last call, per process: an interval
    /// line's `fsyncs`.
    pub fn take_line(&mut self) -> Vec<FsyncLine> {
        self.lines.take()
    }

    /// The journal blocks per device and pid since the last call.
    pub fn take_handle_blocks(&mut self) -> crate::ledger::HandleBlocks {
        std::mem::take(&mut self.handle_blocks)
    }

    /// How long a span waits before it is joined: [`HOLD_NS`], or the
    /// longest call kept when that is longer (a call overlapping a span
    /// ends at most that long after it), at most [`MAX_HOLD_NS`].
    fn hold_ns(&self) -> u64 {
        self.longest_ns.clamp(HOLD_NS, MAX_HOLD_NS)
    }

    /// Joins the spans that ended [`Self::hold_ns`] before `now_ns` (all
    /// of them with `u64::MAX`, at the end of a run), adds them to the
    /// interval's lines, and forgets what no span to come can need (older
    /// than [`KEEP_NS`] before `now_ns`).
    pub fn take(&mut self, now_ns: u64) -> Vec<SyncRecord> {
        let hold = self.hold_ns();
        let (mut ready, mut wait): (Vec<Span>, Vec<Span>) = std::mem::take(&mut self.spans)
            .into_iter()
            .partition(|s| s.end_ns.saturating_add(hold) <= now_ns);
        if wait.len() > MAX_HELD {
            wait.sort_by_key(|s| s.end_ns);
            ready.extend(wait.drain(..wait.len() - MAX_HELD));
        }
        self.spans = wait;
        // The fsyncs of one commit share its contributors: made once.
        let mut cache = HashMap::new();
        let out: Vec<SyncRecord> = ready
            .iter()
            .filter_map(|s| self.join(s, &mut cache))
            .collect();
        for r in &out {
            self.lines.add(r);
        }
        // What the oldest span still held needs stays.
        let oldest = self
            .spans
            .iter()
            .map(|s| s.start_ns)
            .min()
            .unwrap_or(u64::MAX);
        let horizon = now_ns.saturating_sub(KEEP_NS).min(oldest);
        while self.calls.front().is_some_and(|c| c.end_ns < horizon) {
            self.calls.pop_front();
        }
        while self
            .flushes
            .front()
            .is_some_and(|f| f.complete_ns < horizon)
        {
            self.flushes.pop_front();
        }
        self.longest_ns = self
            .calls
            .iter()
            .map(|c| c.end_ns - c.start_ns)
            .max()
            .unwrap_or(0);
        self.commits.retain(|_, c| {
            c.end().is_none_or(|e| e >= horizon) && c.start().is_none_or(|s| s >= horizon)
        });
        self.ended
            .retain(|&(dev, end), t| end >= horizon && self.commits.contains_key(&(dev, *t)));
        if self.names.len() > MAX_NAMES {
            self.names.clear();
        }
        out
    }

    /// The calls ending in `[from, to]`.
    fn ending(&self, from: u64, to: u64) -> impl Iterator<Item = &Brief> {
        let first = self.calls.partition_point(|b| b.end_ns < from);
        self.calls
            .range(first..)
            .take_while(move |b| b.end_ns <= to)
    }

    fn name(&mut self, pid: u32, comm: &str) {
        if self.names.len() < MAX_NAMES || self.names.contains_key(&pid) {
            self.names.insert(pid, comm.to_string());
        }
    }

    /// One span split; `None` for an fsync no filesystem named and that
    /// wrote nothing (tmpfs, a pipe): there is nothing to place it on.
    fn join(&self, span: &Span, cache: &mut Contributors) -> Option<SyncRecord> {
        let named = span.flags & sync_flags::FILE_SEEN != 0;
        let mine = |c: &&Brief| {
            c.tid == span.tid
                && (!named || c.dev == span.dev)
                && c.start_ns >= span.start_ns
                && c.end_ns <= span.end_ns
        };
        let own: Vec<&Brief> = self
            .ending(span.start_ns, span.end_ns)
            .filter(mine)
            .collect();
        // A span only the system call saw (btrfs, ...) is placed on the
        // device its own writeback went to.
        let dev = if named { span.dev } else { own.first()?.dev };
        let s = &Span {
            dev,
            ..span.clone()
        };
        let total = s.end_ns.saturating_sub(s.start_ns);
        let writeback_ns: u64 = own.iter().map(|c| c.end_ns - c.start_ns).sum();
        let wb_end = own.iter().map(|c| c.end_ns).max().unwrap_or(s.start_ns);
        // The last commit of the device to end inside the span, after its
        // writeback (one that ended before the writeback did is not one it
        // waited on after it), found by its end.
        let waited = self
            .ended
            .range((s.dev, wb_end)..=(s.dev, s.end_ns))
            .next_back()
            .and_then(|(&(_, end), &t)| Some((t, self.commits.get(&(s.dev, t))?, end)));
        let xfs_force = (s.log_force_ns != 0).then_some(s.log_force_ns.clamp(wb_end, s.end_ns));
        // Inferred windows: the order of fs/ext4/fsync.c and
        // fs/xfs/xfs_file.c between the events seen.
        let (inferred, commit) = match (waited, xfs_force) {
            (Some((transaction, c, end)), _) => {
                let from = c.start().unwrap_or(wb_end).max(wb_end).min(end);
                (
                    [(wb_end, from), (from, end), (end, s.end_ns)],
                    Some(self.commit(s, transaction, c, end, cache)),
                )
            }
            // xfs: the log force to the end (its cache flush, when it
            // issues one, comes after the force: inside this part).
            (None, Some(force)) => ([(wb_end, force), (force, s.end_ns), EMPTY], None),
            (None, None) => ([(wb_end, s.end_ns), EMPTY, EMPTY], None),
        };
        let inferred = self.device_flush(s, inferred);
        let has_flush = inferred[2] != EMPTY;
        let measured = self.measured(s, &own, inferred, cache);
        let (windows, commit, hooked) = match measured {
            Some((windows, journal_commit, hooked)) => {
                let journal_hooked = hooked.contains(&"journal");
                (
                    windows,
                    if journal_hooked {
                        journal_commit
                    } else {
                        commit
                    },
                    hooked,
                )
            }
            None => (inferred, commit, Vec::new()),
        };
        let len = |(from, to): Window| to.saturating_sub(from);
        let (wait_ns, journal_ns) = (len(windows[0]), len(windows[1]));
        let flush_ns = (has_flush || windows[2] != EMPTY).then(|| len(windows[2]));
        // What is left is before the first call and between calls: the
        // parts after `wb_end` tile it to the span's end.
        let other_ns =
            total.saturating_sub(writeback_ns + wait_ns + journal_ns + flush_ns.unwrap_or(0));
        Some(SyncRecord {
            pid: s.pid,
            tid: s.tid,
            comm: s.comm.clone(),
            cgroup_id: s.cgroup_id,
            dev: s.dev,
            ino: s.ino,
            fs: self.fs_of(s),
            kind: kind_name(s.call, s.datasync),
            ret: s.ret,
            start_ns: s.start_ns,
            total_ns: total,
            writeback_ns,
            wait_ns,
            journal_ns,
            flush_ns,
            other_ns,
            measured: hooked,
            pages: own.iter().map(|c| c.pages).sum(),
            calls: own.len() as u32,
            call_times_ns: {
                let mut t: Vec<u64> = own.iter().map(|c| c.start_ns).collect();
                t.sort_unstable();
                t
            },
            commit,
        })
    }

    /// A span with no journal or flush part of its own (btrfs, which
    /// flushes through its own bios; an ext4 fdatasync that needed no
    /// commit and issued its own flush) takes the device's cache flushes
    /// issued after its writeback and completed before it returned, when
    /// the block programs sent them (`--enable device_io`): **inferred**,
    /// as a flush another process asked for at that moment would be
    /// counted too. Not for xfs, whose flush is in its log force part.
    fn device_flush(&self, s: &Span, inferred: [Window; 3]) -> [Window; 3] {
        let [(wb_end, end), journal, flush] = inferred;
        if journal != EMPTY || flush != EMPTY || s.flags & sync_flags::XFS != 0 {
            return inferred;
        }
        // By completion: the issue stamp can be the plug's cached clock
        // (block/blk-mq.c `blk_time_get_ns()`), from before the writeback's
        // end; a flush is counted from the later of the two.
        let first = self.flushes.partition_point(|f| f.complete_ns <= wb_end);
        let inside = self
            .flushes
            .range(first..)
            .take_while(|f| f.complete_ns <= end)
            .filter(|f| f.dev == s.dev || f.devices.contains(&s.dev));
        let (from, to) = inside.fold((u64::MAX, 0), |(a, b), f| {
            (a.min(f.issue_ns.max(wb_end)), b.max(f.complete_ns))
        });
        if from > to {
            return inferred;
        }
        [(wb_end, from), EMPTY, (from, to)]
    }

    /// [`measured::windows`], with the commit of the transaction the
    /// journal wait named.
    fn measured(
        &self,
        s: &Span,
        own: &[&Brief],
        inferred: [Window; 3],
        cache: &mut Contributors,
    ) -> Option<([Window; 3], Option<CommitRecord>, Vec<&'static str>)> {
        let (windows, hooked) = measured::windows(s, own.iter().map(|c| c.end_ns), inferred)?;
        let commit = if hooked.contains(&"journal") {
            self.commits.get(&(s.dev, s.journal_tid)).and_then(|c| {
                let end = c.end()?;
                Some(self.commit(s, s.journal_tid, c, end, cache))
            })
        } else {
            None
        };
        Some((windows, commit, hooked))
    }

    /// The span's filesystem: the one whose tracepoint named its file,
    /// else the one its device's calls named.
    fn fs_of(&self, s: &Span) -> String {
        if s.flags & sync_flags::EXT4 != 0 {
            "ext4".into()
        } else if s.flags & sync_flags::XFS != 0 {
            "xfs".into()
        } else {
            self.fs.get(&s.dev).cloned().unwrap_or_default()
        }
    }

    fn commit(
        &self,
        s: &Span,
        transaction: u32,
        c: &Commit,
        end: u64,
        cache: &mut Contributors,
    ) -> CommitRecord {
        // The transaction's life: it opened when the one before it began
        // to commit (fs/jbd2/commit.c takes the running transaction, and
        // the next handle starts a new one, fs/jbd2/transaction.c
        // `start_this_handle()`), so the writeback calls from then to its
        // end allocated their blocks in it or shared the device with its
        // commit. The flusher's calls only submit their I/O (a few hundred
        // µs for thousands of pages): the commit's own window alone rarely
        // holds one, though their data is what the commit queues behind.
        let born = self
            .commits
            .get(&(s.dev, transaction.wrapping_sub(1)))
            .and_then(Commit::start)
            .or(c.start())
            .unwrap_or(end);
        let contributors = cache
            .entry((s.dev, transaction))
            .or_insert_with(|| self.contributors(s.dev, &c.shares, (born, end)))
            .clone();
        CommitRecord {
            transaction,
            start_ns: c.start().unwrap_or(s.start_ns),
            end_ns: end,
            locked_ns: c.between(phase::LOCKING, phase::FLUSHING),
            flushing_ns: c.between(phase::FLUSHING, phase::LOGGING),
            logging_ns: c.between(phase::LOGGING, phase::END),
            handles: c.handles,
            blocks: c.blocks,
            blocks_logged: c.blocks_logged,
            contributors,
        }
    }

    /// Per process: its journal handles in the transaction (those opened
    /// inside a writepages call charged to the call's inode's dirtiers by
    /// their pages) and the pages of its data written back in `window`
    /// (the transaction's life and commit: each call's pages in
    /// proportion to its time inside it); largest first.
    fn contributors(
        &self,
        dev: DevId,
        shares: &[HandleShare],
        window: (u64, u64),
    ) -> Vec<Contributor> {
        let mut per: BTreeMap<u32, (f64, f64, f64)> = BTreeMap::new();
        let (from, to) = window;
        // Calls overlapping the window end in it or at most the longest
        // call's time after it.
        let late = to.saturating_add(self.longest_ns);
        for c in self.ending(from, late).filter(|c| c.dev == dev) {
            let overlap = c.end_ns.min(to).saturating_sub(c.start_ns.max(from));
            let share = match c.end_ns - c.start_ns {
                0 => f64::from(u8::from((from..=to).contains(&c.start_ns))),
                len => overlap as f64 / len as f64,
            };
            if share <= 0.0 {
                continue;
            }
            for &(pid, pages) in &c.owners {
                per.entry(pid).or_default().2 += pages as f64 * share;
            }
        }
        for sh in shares {
            let dirtiers = (sh.ino != 0)
                .then(|| self.dirtiers.get(&(dev, sh.ino)))
                .flatten()
                .filter(|d| d.iter().any(|d| d.pid != 0 && d.pages > 0));
            match dirtiers {
                Some(ds) => {
                    let all: u64 = ds.iter().filter(|d| d.pid != 0).map(|d| d.pages).sum();
                    for d in ds.iter().filter(|d| d.pid != 0) {
                        let f = d.pages as f64 / all as f64;
                        let e = per.entry(d.pid).or_default();
                        e.0 += sh.handles as f64 * f;
                        e.1 += sh.blocks as f64 * f;
                    }
                }
                None => {
                    let e = per.entry(sh.pid).or_default();
                    e.0 += sh.handles as f64;
                    e.1 += sh.blocks as f64;
                }
            }
        }
        let mut out: Vec<Contributor> = per
            .into_iter()
            .map(|(pid, (handles, blocks, pages))| Contributor {
                pid,
                comm: self.names.get(&pid).cloned().unwrap_or_default(),
                handles: handles.round() as u64,
                blocks: blocks.round() as u64,
                pages: pages.round() as u64,
            })
            .filter(|c| c.handles + c.pages > 0)
            .collect();
        out.sort_by(|a, b| {
            (b.blocks + b.pages)
                .cmp(&(a.blocks + a.pages))
                .then(b.handles.cmp(&a.handles))
        });
        out
    }
}

mod line;
mod measured;
pub use measured::DeviceFlush;
use measured::{EMPTY, Window};

pub use line::{
    FsyncFigures, FsyncLine, FsyncLines, MOSTLY, PROCESSES_KEPT, SMALL_PAGES, SlowFsync,
};
pub(crate) use line::{keep_top, nearest_rank};

#[cfg(test)]
mod tests;
