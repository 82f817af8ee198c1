//! The dirty-time maps (writeback-ebpf/src/dirtier.rs): the members the
//! BTF program reads, resolved from the kernel's BTF, and reading
//! `DIRTIERS` and `THROTTLED` into a [`DirtierSnapshot`].
use std::collections::{BTreeSet, HashMap};

use anyhow::Context as _;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, RingBuf};
use writeback_common::{
    DIRTIER_CHANGED_KIND, DirtierChanged, DirtierEntry, DirtierKey, DirtierMembers, DirtierSlot,
    DirtyingBatch, INODE_DIRTYING_KIND, InodeDirtying, TASK_IO_EXIT_KIND, TaskIo, dirtier_members,
    sampling, stat,
};

use super::{
    Tracer,
    btf::Btf as KernelBtf,
    cpu_batch::{BatchFlush, batch_items},
    members::member_spec,
    taskio::{Counts, TaskCounts},
};
use wbscope_model::dirtier::{
    AttributionMode, DirtierReading, DirtierSnapshot, InodeDirtyingReading, TaskReading,
};
use wbscope_model::record::{comm, compact_comm};

/// Processes followed at most for their dirtied-page counts; past it a
/// new one is not followed (its `pages_dirtied` stay 0; its writeback is
/// still charged to it).
const MAX_TASKS: usize = 1 << 14;

/// Readings of the per-folio counts between two readings of the whole
/// `DIRTIERS` map: the others look up only the pairs announced as
/// changed. A whole reading forgets evicted pairs and catches a change a
/// race left unannounced (see [`Tracer::per_folio`]), so a minute at the
/// default interval bounds both; it costs about 30 ms of a core with
/// 60,000 pairs (docs/bench-log/recorder.md, "The per-folio map's reading
/// cost").
const WHOLE_EVERY: u32 = 60;

/// The reader of `DIRTYINGS` (writeback-ebpf dirtier.rs): in the default
/// mode the inode dirtyings, and the processes they name, whose page
/// counts are read at each reading (the task iterator and their exit
/// records, taskio.rs; /proc/TGID/io where those do not load); in the per-folio
/// mode the `DIRTIERS` pairs that changed, and when the whole map is due.
pub(crate) struct Dirtyings {
    ring: RingBuf<MapData>,
    tasks: BTreeSet<u32>,
    /// CLOCK_BOOTTIME of the previous reading, in clock ticks: a process
    /// that started after it counts from zero.
    last_reading_ticks: u64,
    /// The task iterator and exit program (taskio.rs), or why they are
    /// not attached: then the counts come from /proc while privileges
    /// are kept, and are not read after the drop.
    counts: Result<TaskCounts, String>,
    /// The last counts of followed processes that exited since the last
    /// reading of the counts.
    exits: HashMap<u32, Counts>,
    /// CLOCK_BOOTTIME ns of the previous reading of the counts.
    last_reading_ns: u64,
    /// Whether a process that found `FOLLOWED` full was warned of.
    unfollowed_said: bool,
    /// The per-folio reading's generation (`sampling::READING`).
    generation: u32,
    /// Per-folio readings since the last whole one (`None`: none yet).
    since_whole: Option<u32>,
    /// `stat::LOST_CHANGED` at the last reading.
    lost_changed: u64,
    /// `DIRTIERS` pairs the map evicted to make room, as of the last whole
    /// reading: those made (`stat::DIRTIERS_NEW`) less those found (the
    /// map's entries are never removed).
    pub(crate) evicted: u64,
    /// `stat::DIRTIERS_NEW` and the pairs found at the last whole reading:
    /// once more pairs may have been made since than the map has room
    /// for, it may be evicting, and the next reading is whole.
    made_at_whole: u64,
    found_at_whole: u64,
    /// The pairs announced to the reading before: looked up again, for a
    /// pair announced before that reading's lookup and grown after it
    /// within the same generation is not announced twice.
    last_changed: Vec<DirtierKey>,
    /// Dirtyings the last drain took.
    last_drained: usize,
    /// Asks the CPUs for the dirtyings they keep (cpu_batch.rs); `None`
    /// where no inode-dirtying program is attached (the per-folio mode),
    /// so that no reading reads the batches' states to find none.
    flush: Option<BatchFlush>,
    /// Exits that came before their process's last dirtyings.
    early_exits: EarlyExits,
}

impl Dirtyings {
    pub(super) fn new(
        ring: RingBuf<MapData>,
        flush: Option<BatchFlush>,
        counts: Result<TaskCounts, String>,
    ) -> Dirtyings {
        Dirtyings {
            ring,
            tasks: BTreeSet::new(),
            last_reading_ticks: boot_ticks(),
            counts,
            exits: HashMap::new(),
            last_reading_ns: wbscope_sys::boottime_ns(),
            unfollowed_said: false,
            generation: 0,
            since_whole: None,
            lost_changed: 0,
            evicted: 0,
            made_at_whole: 0,
            found_at_whole: 0,
            last_changed: Vec::new(),
            last_drained: 0,
            flush,
            early_exits: EarlyExits::default(),
        }
    }

    /// Drains the ring, after asking the CPUs for the dirtyings they keep:
    /// inode dirtyings into `snap.dirtyings` (in time order), changed
    /// pairs into `changed`.
    fn drain(&mut self, snap: &mut DirtierSnapshot, changed: &mut Vec<DirtierKey>) {
        if let Some(flush) = &mut self.flush {
            flush.flush_or_warn();
        }
        // Room for as many as the last drain took: an fsync storm's
        // thousands a drain, grown from nothing each time, were copied
        // over and over.
        snap.dirtyings.reserve(self.last_drained);
        let before = snap.dirtyings.len();
        let mut arrived = Vec::new();
        while let Some(item) = self.ring.next() {
            if let Some(batch) = batch_items::<DirtyingBatch>(&item) {
                for d in batch.filter(|d| d.kind == INODE_DIRTYING_KIND) {
                    if self.tasks.len() < MAX_TASKS
                        && self.tasks.insert(d.tgid)
                        && let Ok(counts) = &mut self.counts
                        && !counts.follow(d.tgid)
                    {
                        self.tasks.remove(&d.tgid);
                        if !self.unfollowed_said {
                            self.unfollowed_said = true;
                            log::warn!(
                                "more processes dirtying files at once than FOLLOWED holds: \
                                 those past it have no pages_dirtied (their writeback is still \
                                 charged to them)"
                            );
                        }
                    }
                    snap.dirtyings.push(reading_of(&d));
                }
                continue;
            }
            match decode(&item) {
                Some(Decoded::Changed(key)) => changed.push(key),
                Some(Decoded::Exit(tgid, counts)) => arrived.push((tgid, counts)),
                None => {}
            }
        }
        self.early_exits
            .arrive(arrived, &self.tasks, &mut self.exits);
        // Each CPU's batch comes whole: records of several CPUs
        // interleave by batch, not by time. The model keeps each inode's
        // history in time order and reads the first dirtier of a run.
        snap.dirtyings[before..].sort_by_key(|d| d.at_ns);
        self.last_drained = snap.dirtyings.len() - before;
    }

    /// Drains the ring into `snap.dirtyings`, then, with `tasks`, reads
    /// the page counts of every process it has seen into `snap.tasks`
    /// (the task iterator, else /proc); a process whose count cannot be
    /// read any more (it exited) is dropped.
    fn read(&mut self, snap: &mut DirtierSnapshot, tasks: bool) {
        self.drain(snap, &mut Vec::new());
        if let Ok(counts) = &mut self.counts {
            if tasks {
                Self::read_counts(
                    counts,
                    &mut self.tasks,
                    &mut self.exits,
                    &mut self.last_reading_ns,
                    snap,
                );
            }
            return;
        }
        // After the drop no file may be opened (the seccomp filter kills
        // on `openat`), and another user's /proc/PID/io is refused at every
        // read anyway (`ptrace_may_access()`): the per-process counts are
        // read only by a run that kept its privileges (docs/production.md).
        if super::privileges::dropped() {
            self.tasks.clear();
            if let Err(why) = &self.counts {
                snap.tasks_unread = Some(format!(
                    "the task iterator is not attached ({why}) and /proc/PID/io of other \
                     users is closed after the privilege drop (--no-drop reads it)"
                ));
            }
            return;
        }
        if !tasks {
            return;
        }
        snap.tasks_read = true;
        let page = wbscope_model::units::page_size();
        let since = self.last_reading_ticks;
        self.last_reading_ticks = boot_ticks();
        self.tasks.retain(|&tgid| {
            let Ok(p) = procfs::process::Process::new(tgid as i32) else {
                return false;
            };
            let (Ok(io), Ok(stat)) = (p.io(), p.stat()) else {
                return false;
            };
            snap.tasks.push(TaskReading {
                tgid,
                pages: io.write_bytes / page,
                wchar: io.wchar,
                cancelled_bytes: io.cancelled_write_bytes,
                new: stat.starttime > since,
            });
            true
        });
    }
}

impl Dirtyings {
    /// The counts of every followed process from the task iterator, and
    /// of those that exited since the last reading from their exit
    /// records; a process neither alive nor caught at exit (its record
    /// was lost to a full ring) is forgotten. A failed iterator read
    /// leaves the counts unread this time (their bases stay).
    fn read_counts(
        counts: &mut TaskCounts,
        tasks: &mut BTreeSet<u32>,
        exits: &mut HashMap<u32, Counts>,
        last_reading_ns: &mut u64,
        snap: &mut DirtierSnapshot,
    ) {
        let now = wbscope_sys::boottime_ns();
        // The iterator visits every thread of the host (about 0.2 µs
        // each here): not run while no process is followed.
        let read = if tasks.is_empty() {
            Ok(HashMap::new())
        } else {
            counts.read()
        };
        let live = match read {
            Ok(live) => live,
            Err(e) => {
                log::warn!("per-process counts not read this interval: {e:#}");
                return;
            }
        };
        snap.tasks_read = true;
        let page = wbscope_model::units::page_size();
        let since = std::mem::replace(last_reading_ns, now);
        tasks.retain(|&tgid| {
            let (c, alive) = match live.get(&tgid) {
                Some(c) => (*c, true),
                None => match exits.get(&tgid) {
                    Some(c) => (*c, false),
                    None => {
                        counts.forget(tgid);
                        return false;
                    }
                },
            };
            snap.tasks.push(TaskReading {
                tgid,
                pages: c.write_bytes / page,
                wchar: c.wchar,
                cancelled_bytes: c.cancelled_write_bytes,
                new: c.start_boottime > since,
            });
            if !alive {
                counts.forget(tgid);
            }
            alive
        });
        exits.clear();
    }
}

/// CLOCK_BOOTTIME in clock ticks, the unit of /proc/PID/stat's
/// `starttime`.
fn boot_ticks() -> u64 {
    wbscope_sys::boottime_ns() / (1_000_000_000 / procfs::ticks_per_second().max(1))
}

/// `DIRTYINGS`' descriptor in tokio's poll set ([`Tracer::dirtyings_wake`]):
/// the programs wake it once a quarter of the ring waits, and the loop
/// holding this then reads the dirtiers ([`Tracer::dirtiers`] without
/// the tasks). It borrows the tracer, whose ring owns the descriptor.
pub struct DirtyingsWake<'t> {
    polled: Option<tokio::io::unix::AsyncFd<std::os::fd::RawFd>>,
    _tracer: std::marker::PhantomData<&'t Tracer>,
}

impl<'t> DirtyingsWake<'t> {
    /// One that never wakes: no tracer, or no dirtier hook.
    pub fn none() -> DirtyingsWake<'static> {
        DirtyingsWake {
            polled: None,
            _tracer: std::marker::PhantomData,
        }
    }

    /// The tracer's ring in tokio's poll set; one that never wakes where
    /// the tracer has no such ring (the per-folio attribution) or polling
    /// it fails (said once: the dirtyings are still read every interval,
    /// and a burst past the ring is counted as `lost_dirtyings`).
    pub fn register(tracer: &'t Tracer) -> DirtyingsWake<'t> {
        let polled = tracer.dirtyings_wake().and_then(|fd| {
            // SAFETY: the descriptor is the tracer's ring's, open for as
            // long as the tracer, which this borrows; the registration is
            // removed when this is dropped.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    tokio::io::Interest::READABLE,
                )
            }
            .map_err(|e| {
                log::warn!("polling the dirtyings ring: {e}; it is read once an interval");
            })
            .ok()
        });
        DirtyingsWake {
            polled,
            _tracer: std::marker::PhantomData,
        }
    }

    /// Returns once the ring woke us (never without a descriptor, nor
    /// after polling it failed: that is said once, and the interval's
    /// reading goes on); the caller reads it before the next wait.
    pub async fn woken(&mut self) {
        let Some(fd) = self.polled.as_ref() else {
            return std::future::pending().await;
        };
        match fd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(e) => {
                log::warn!("polling the dirtyings ring: {e}; it is read once an interval");
                self.polled = None;
                std::future::pending().await
            }
        }
    }
}

/// A record of `DIRTYINGS` other than a batch of dirtyings.
enum Decoded {
    Changed(DirtierKey),
    /// A followed process's last counts, at its exit.
    Exit(u32, Counts),
}

/// One record of `DIRTYINGS` other than a batch, read with a kind and
/// size check.
fn decode(bytes: &[u8]) -> Option<Decoded> {
    let kind = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
    if kind == DIRTIER_CHANGED_KIND && bytes.len() >= size_of::<DirtierChanged>() {
        // SAFETY: length checked; DirtierChanged is Pod and
        // read_unaligned needs no alignment.
        let c: DirtierChanged = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        return Some(Decoded::Changed(c.key));
    }
    if kind == TASK_IO_EXIT_KIND && bytes.len() >= size_of::<TaskIo>() {
        // SAFETY: length checked; TaskIo is Pod and read_unaligned needs
        // no alignment.
        let t: TaskIo = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        return Some(Decoded::Exit(t.tgid, Counts::of(&t)));
    }
    None
}

/// The model's reading of a kernel dirtying.
fn reading_of(d: &InodeDirtying) -> InodeDirtyingReading {
    InodeDirtyingReading {
        dev: d.dev,
        ino: d.ino,
        at_ns: d.at_ns,
        tgid: d.tgid,
        comm: compact_comm(&d.comm),
        cgroup_id: d.cgroup_id,
        owner_cgroup_id: d.owner_cgroup_id,
    }
}

/// Exit records of processes not followed when they arrived. A process's
/// last dirtyings may still sit in a CPU's batch when its exit record,
/// sent at once, reaches the ring: the flush before the next drain sends
/// them, and the process is followed then. So such an exit waits one
/// drain for its process; then it is dropped (the process dirtied
/// nothing, or its dirtyings were lost).
#[derive(Default)]
struct EarlyExits {
    /// Exits that arrived at the last drain, unmatched.
    waiting: HashMap<u32, Counts>,
}

impl EarlyExits {
    /// Takes this drain's `arrived` exits: those of `tasks`, and those
    /// that waited since the drain before and are of `tasks` now, go to
    /// `exits`; the rest of this drain's wait for the next.
    fn arrive(
        &mut self,
        arrived: Vec<(u32, Counts)>,
        tasks: &BTreeSet<u32>,
        exits: &mut HashMap<u32, Counts>,
    ) {
        for (tgid, counts) in self.waiting.drain() {
            if tasks.contains(&tgid) {
                exits.entry(tgid).or_insert(counts);
            }
        }
        for (tgid, counts) in arrived {
            if tasks.contains(&tgid) {
                exits.insert(tgid, counts);
            } else if self.waiting.len() < MAX_TASKS {
                self.waiting.insert(tgid, counts);
            }
        }
    }
}

/// `DirtierMembers` from the kernel's BTF: each slot's first member path
/// that exists; a required one missing refuses the hook (the reason is
/// returned), an optional one reads as absent (no large-folio count: one
/// page per folio; no cgroup writeback: owner 0).
///
/// The folio's members are looked up but not required here: the
/// once-per-inode program reads none (and 5.10 has no `struct folio`);
/// [`has_folio`] refuses the per-folio one without them.
pub(super) fn resolve_members(btf: &KernelBtf) -> Result<DirtierMembers, String> {
    let mut table = DirtierMembers::EMPTY;
    for (slot, (strukt, names, required)) in dirtier_members::PATHS.iter().enumerate() {
        let required = *required && *strukt != "folio" && *strukt != "address_space";
        let found = names
            .iter()
            .find_map(|name| member_spec(btf, strukt, name, false).ok());
        match found {
            Some(spec) => table.members[slot] = spec,
            None if required => {
                return Err(format!(
                    "struct {strukt} has none of {} in the kernel's BTF",
                    names.join(", ")
                ));
            }
            None => {}
        }
    }
    // Without PG_head the large-folio count cannot be told valid: one
    // page per folio.
    match btf
        .enum_value("PG_head")
        .ok()
        .and_then(|b| u32::try_from(b).ok())
    {
        Some(bit) if bit < 64 => table.pg_head_bit = bit,
        _ => table.members[dirtier_members::FOLIO_NR_PAGES] = Default::default(),
    }
    Ok(table)
}

/// Whether the per-folio program's members resolved (`struct folio`'s
/// flags and the mapping's host), or why not.
pub(super) fn has_folio(table: &DirtierMembers) -> Result<(), String> {
    let missing = [dirtier_members::FOLIO_FLAGS, dirtier_members::MAPPING_HOST]
        .iter()
        .find(|&&slot| table.members[slot].present == 0);
    match missing {
        None => Ok(()),
        Some(&slot) => {
            let (strukt, names, _) = dirtier_members::PATHS[slot];
            Err(format!(
                "struct {strukt} has none of {} in the kernel's BTF",
                names.join(", ")
            ))
        }
    }
}

impl Tracer {
    /// The descriptor that turns readable when a quarter of `DIRTYINGS`
    /// waits to be read (a burst of files made dirty, writeback-ebpf
    /// dirtier.rs), for a loop to read the dirtiers then
    /// ([`Tracer::dirtiers`] without the tasks) rather than lose the
    /// burst's dirtyings to a full ring before its next reading; `None`
    /// where the per-folio attribution reads the ring instead.
    pub fn dirtyings_wake(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (AttributionMode::of(&self.plan) == Some(AttributionMode::PerInode)).then(|| {
            // SAFETY: the ring in `self.dirtyings` owns the descriptor
            // and keeps it open as long as `self`, and the borrow cannot
            // outlive `self`.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(self.dirtyings_fd) }
        })
    }

    /// Every entry of `DIRTIERS`, read now; in the per-inode mode the
    /// dirtyings since the last reading; and with `tasks` (an interval's
    /// reading: a re-read for a batch of calls needs only the dirtyings)
    /// each dirtier's page count from /proc and `THROTTLED`.
    pub fn dirtiers(&self, tasks: bool) -> anyhow::Result<DirtierSnapshot> {
        let mut snap = DirtierSnapshot::default();
        if AttributionMode::of(&self.plan) == Some(AttributionMode::PerInode) {
            self.dirtyings
                .lock()
                .map_err(|_| anyhow::anyhow!("the dirtyings reader was poisoned"))?
                .read(&mut snap, tasks);
        } else {
            self.per_folio(&mut snap)?;
        }
        // The per-process pauses the findings read too (maps.rs), one
        // map for both; only with the counts, at an interval's reading:
        // they feed its `owners` alone, and a batch's re-read (dozens a
        // second under an fsync storm) need not read the map.
        if tasks {
            snap.throttled = Some(
                self.throttled_entries()?
                    .into_iter()
                    .map(|(tgid, by)| (tgid, (by.pauses, by.pause_ms)))
                    .collect(),
            );
        }
        // After the slots: every page counted was dirtied before this.
        snap.taken_ns = wbscope_sys::monotonic_ns();
        Ok(snap)
    }

    /// Counts one dirtied folio in 2^`shift` (as 2^`shift` folios) from
    /// now on; 0 counts every one (`SAMPLING`, the CPU budget's first
    /// step). Nothing to do unless the per-folio program is attached.
    pub fn set_dirty_folio_sampling(&self, shift: u32) -> anyhow::Result<()> {
        if AttributionMode::of(&self.plan) != Some(AttributionMode::PerFolio) {
            return Ok(());
        }
        self.set_sampling(sampling::DIRTY_FOLIO, shift)
    }

    /// Draws one ext4 writepages call in 2^`shift` into the sample from
    /// now on (the others are counted in the kernel, with their pages,
    /// and leave no record); 0 keeps every call.
    pub fn set_call_sampling(&self, shift: u32) -> anyhow::Result<()> {
        self.set_sampling(sampling::CALLS, shift)
    }

    /// Stops (`true`) or restarts the block programs' work from now on:
    /// shed, they return at once, and the devices' lines come from
    /// /proc/diskstats alone. Nothing to do unless `device_io` is
    /// attached.
    pub fn set_device_io_shed(&self, shed: bool) -> anyhow::Result<()> {
        if self.plan.devices_from_diskstats() {
            return Ok(());
        }
        self.set_sampling(sampling::DEVICE_IO, u32::from(shed))
    }

    fn set_sampling(&self, slot: u32, shift: u32) -> anyhow::Result<()> {
        let mut map = self.sampling.lock().unwrap_or_else(|e| e.into_inner());
        map.set(slot, shift, 0)
            .with_context(|| format!("writing SAMPLING[{slot}]"))
    }

    /// `DIRTIERS` and the CPUs' slots, the per-folio mode's counts: the
    /// pairs announced as changed since the reading before (and those
    /// announced to it), or every pair when a whole reading is due
    /// ([`WHOLE_EVERY`], the first, or a record the ring had no room for).
    ///
    /// The order: the new generation is written first, so that a pair
    /// that grows from then on is announced again; then the ring is
    /// drained and the pairs looked up. A pair announced in the old
    /// generation and grown after the lookup is read at the next reading
    /// (it is in `last_changed`); what a race leaves unannounced beyond
    /// that, the next whole reading reads.
    fn per_folio(&self, snap: &mut DirtierSnapshot) -> anyhow::Result<()> {
        let mut reader = self
            .dirtyings
            .lock()
            .map_err(|_| anyhow::anyhow!("the dirtyings reader was poisoned"))?;
        let generation = reader.generation.wrapping_add(1);
        self.set_sampling(sampling::READING, generation)?;
        reader.generation = generation;
        let mut changed = Vec::new();
        reader.drain(snap, &mut changed);
        let lost = self.stat(stat::LOST_CHANGED)?;
        let made = self.stat(stat::DIRTIERS_NEW)?;
        let room = self
            .memory
            .maps
            .iter()
            .find(|m| m.def.name == "DIRTIERS")
            .map_or(u64::MAX, |m| u64::from(m.def.max_entries));
        let may_evict = made - reader.made_at_whole.min(made) + reader.found_at_whole > room;
        let whole = match reader.since_whole {
            Some(n) => n + 1 >= WHOLE_EVERY || lost != reader.lost_changed || may_evict,
            None => true,
        };
        reader.lost_changed = lost;
        reader.since_whole = Some(if whole {
            0
        } else {
            reader.since_whole.unwrap_or(0) + 1
        });
        let dirtiers = self.ebpf.map("DIRTIERS").context("DIRTIERS map missing")?;
        let slots: Array<_, DirtierSlot> = Array::try_from(
            self.ebpf
                .map("DIRTY_SLOT")
                .context("DIRTY_SLOT map missing")?,
        )?;
        let read_slots = || {
            slots
                .iter()
                .collect::<Result<Vec<_>, _>>()
                .context("reading DIRTY_SLOT")
        };
        if whole {
            snap.whole = true;
            // A batch at a time where the kernel can (batch.rs: 60,000
            // pairs cost a tenth of a core a second read one by one).
            let entries =
                super::batch::read_hash::<DirtierKey, DirtierEntry>(dirtiers, "DIRTIERS")?;
            let found = entries.len() as u64;
            reader.evicted = reader.evicted.max(made.saturating_sub(found));
            reader.made_at_whole = made;
            reader.found_at_whole = found;
            snap.entries
                .extend(entries.iter().map(|(k, v)| reading(k, v)));
        } else {
            // The pairs in the CPUs' slots too: a slot's pages are added
            // to its pair's count below, which must then be read.
            let mut keys: Vec<DirtierKey> = changed.clone();
            keys.extend_from_slice(&reader.last_changed);
            keys.extend(
                read_slots()?
                    .iter()
                    .filter(|s| s.entry.pages != 0)
                    .map(|s| s.key),
            );
            keys.sort_unstable();
            keys.dedup();
            let map: BpfHashMap<_, DirtierKey, DirtierEntry> = BpfHashMap::try_from(dirtiers)?;
            for key in keys {
                match map.get(&key, 0) {
                    Ok(v) => snap.entries.push(reading(&key, &v)),
                    // Evicted since.
                    Err(aya::maps::MapError::KeyNotFound) => {}
                    Err(e) => return Err(e).context("reading DIRTIERS"),
                }
            }
        }
        reader.last_changed = changed;
        // The CPUs' slots after the hash: a slot flushed between the two
        // reads is then missed once (and counted at the next read), never
        // counted twice.
        for slot in read_slots()?.iter().filter(|s| s.entry.pages != 0) {
            let k = slot.key;
            match snap
                .entries
                .iter_mut()
                .find(|e| (e.dev, e.ino, e.tgid) == (k.dev, k.ino, k.tgid))
            {
                Some(e) => e.pages += slot.entry.pages,
                None => snap.entries.push(reading(&k, &slot.entry)),
            }
        }
        Ok(())
    }
}

fn reading(k: &DirtierKey, v: &DirtierEntry) -> DirtierReading {
    DirtierReading {
        dev: k.dev,
        ino: k.ino,
        tgid: k.tgid,
        pages: v.pages,
        pid: v.pid,
        comm: comm(&v.comm),
        cgroup_id: v.cgroup_id,
        owner_cgroup_id: v.owner_cgroup_id,
        born_ns: v.born_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(write_bytes: u64) -> Counts {
        Counts {
            write_bytes,
            ..Counts::default()
        }
    }

    #[test]
    fn an_exit_before_its_dirtyings_waits_one_drain_for_them() {
        let mut early = EarlyExits::default();
        let mut exits = HashMap::new();
        let mut tasks = BTreeSet::from([1]);
        // Drain 1: process 1's exit, followed; process 2's, whose
        // dirtyings are still in a CPU's batch; process 3's, who dirtied
        // nothing.
        early.arrive(
            vec![(1, counts(10)), (2, counts(20)), (3, counts(30))],
            &tasks,
            &mut exits,
        );
        assert_eq!(exits, HashMap::from([(1, counts(10))]));
        // Drain 2: process 2's dirtyings came.
        tasks.insert(2);
        exits.clear();
        early.arrive(Vec::new(), &tasks, &mut exits);
        assert_eq!(exits, HashMap::from([(2, counts(20))]));
        // Drain 3: process 3 is followed only now; its exit waited one
        // drain and is gone.
        tasks.insert(3);
        exits.clear();
        early.arrive(Vec::new(), &tasks, &mut exits);
        assert!(exits.is_empty());
        assert!(early.waiting.is_empty());
    }

    #[test]
    fn waiting_exits_are_bounded() {
        let mut early = EarlyExits::default();
        let arrived = (0..MAX_TASKS as u32 + 10).map(|t| (t, counts(1))).collect();
        early.arrive(arrived, &BTreeSet::new(), &mut HashMap::new());
        assert_eq!(early.waiting.len(), MAX_TASKS);
    }
}
