//! Reading the programs' maps into plain figures ([`KernelSnapshot`]):
//! per-CPU counters summed, block histograms from their shared slots and
//! overflow hash, the programs' run times, and `/proc/vmstat` beside them.

use std::{
    collections::HashMap,
    fs::File,
    io::{Read as _, Seek as _},
};

use anyhow::Context as _;
use aya::maps::{Array, IterableMap as _, MapData, PerCpuArray};
use std::os::fd::AsFd as _;
use writeback_common::{
    BlockHistKey, BlockSlots, TracepointLayout, dirty, fields::global_dirty, global_thresh, stat,
};

use super::Tracer;
use wbscope_model::kernel::{KernelSnapshot, KernelStats, ProgramRunTime, VmStat};

impl Tracer {
    /// Everything the interval figures need, read now.
    pub fn snapshot(&self) -> anyhow::Result<KernelSnapshot> {
        let vmstat = self.vmstat.read()?;
        self.set_global_thresholds(&vmstat)?;
        let disks = self.disks.read()?;
        // A poisoned lock still holds a whole table.
        let mut fs_names = self.fs_names.lock().unwrap_or_else(|e| e.into_inner());
        // The counters before the maps they are set against (evictions).
        let mut stats = self.stats()?;
        let throttled = self.throttled_entries()?;
        stats.lru_evicted = self.lru_evicted(&stats, throttled.len() as u64);
        Ok(KernelSnapshot {
            agg: self.aggregates()?,
            block: self.block_histograms()?,
            inode_pass: self.inode_pass_counters()?,
            dirty: self.dirty_levels()?,
            stats,
            run_times: self.run_times(),
            vmstat,
            disks,
            ledger: match &self.ledger {
                Ok(maps) => super::ledger::read(&maps.classes, |d| fs_names.whole_disk(d))?,
                Err(_) => Default::default(),
            },
            direct: match &self.ledger {
                Ok(maps) => super::ledger::read_direct(&maps.direct, |d| fs_names.whole_disk(d))?,
                Err(_) => Default::default(),
            },
            ledger_unmeasured: self.ledger.as_ref().err().cloned(),
            ledger_pages: self.ledger.as_ref().is_ok_and(|m| m.pages),
            fs_disks: fs_names.disks(),
            throttled: throttled
                .into_iter()
                .map(|(tgid, by)| (tgid, (by.pause_ms, wbscope_model::record::comm(&by.comm))))
                .collect(),
        })
    }

    /// Hands the global dirty thresholds to the throttle classifier
    /// (`writeback_common::global_thresh`).
    pub(crate) fn set_global_thresholds(&self, vmstat: &VmStat) -> anyhow::Result<()> {
        let mut map = self.global_thresh.lock().unwrap_or_else(|e| e.into_inner());
        map.set(global_thresh::DIRTY, vmstat.nr_dirty_threshold, 0)
            .context("writing GLOBAL_THRESH")?;
        map.set(
            global_thresh::BACKGROUND,
            vmstat.nr_dirty_background_threshold,
            0,
        )
        .context("writing GLOBAL_THRESH")?;
        Ok(())
    }

    /// Entries the LRU maps evicted to make room, as their readers last
    /// counted them: `THROTTLED`'s from `stats` (read before) and the
    /// `live` entries found now (userspace never removes one), `DIRTIERS`'
    /// at its last whole reading, `HANDLES`' at its last.
    fn lru_evicted(&self, stats: &KernelStats, live: u64) -> u64 {
        let throttled = stats.throttled_new.saturating_sub(live);
        let dirtiers = self.dirtyings.lock().map_or(0, |d| d.evicted);
        let handles = self
            .journal
            .lock()
            .ok()
            .and_then(|j| j.as_ref().map(|j| j.evicted))
            .unwrap_or(0);
        throttled + dirtiers + handles
    }

    /// Every entry of `THROTTLED`.
    pub(crate) fn throttled_entries(
        &self,
    ) -> anyhow::Result<Vec<(u32, writeback_common::PausedBy)>> {
        let map = self
            .ebpf
            .map("THROTTLED")
            .context("THROTTLED map missing")?;
        super::batch::read_hash(map, "THROTTLED")
    }

    pub fn stats(&self) -> anyhow::Result<KernelStats> {
        let all = self.percpu_sums(self.stats.map(), "STATS", stat::COUNT, |i| self.stat(i))?;
        let sum = |index: u32| all.get(index as usize).copied().unwrap_or(0);
        Ok(KernelStats {
            lost_records: sum(stat::LOST_RECORDS),
            unmatched_results: sum(stat::UNMATCHED_RESULTS),
            inflight_full: sum(stat::INFLIGHT_FULL),
            filtered: sum(stat::FILTERED),
            lost_dirtyings: sum(stat::LOST_DIRTYINGS),
            map_full: sum(stat::MAP_FULL),
            throttled_new: sum(stat::THROTTLED_NEW),
            lru_evicted: 0,
            slot_busy: sum(stat::SLOT_BUSY),
        })
    }

    /// One `STATS` counter, summed over CPUs.
    pub(super) fn stat(&self, index: u32) -> anyhow::Result<u64> {
        let values = self
            .stats
            .get(&index, 0)
            .with_context(|| format!("reading STATS[{index}]"))?;
        Ok(sum_counters(values.iter()))
    }

    /// Per-CPU interval counters (`AGG`), summed over CPUs, by index.
    pub(crate) fn aggregates(&self) -> anyhow::Result<Vec<u64>> {
        let agg: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.ebpf.map("AGG").context("AGG map missing")?)?;
        self.percpu_sums(agg.map(), "AGG", writeback_common::agg::COUNT, |i| {
            agg.get(&i, 0)
                .map(|v| sum_counters(v.iter()))
                .with_context(|| format!("reading AGG[{i}]"))
        })
    }

    /// The `entries` counters of the per-CPU array `map` (`name` in
    /// errors), each summed over CPUs: one batch read where the kernel
    /// has it, else `one` per index.
    fn percpu_sums(
        &self,
        map: &MapData,
        name: &str,
        entries: u32,
        one: impl Fn(u32) -> anyhow::Result<u64>,
    ) -> anyhow::Result<Vec<u64>> {
        let cpus = self.memory.possible_cpus as usize;
        match super::batch::percpu_array_sums(map.fd().as_fd(), entries, cpus) {
            Some(sums) => sums.with_context(|| format!("reading {name}")),
            None => (0..entries).map(one).collect(),
        }
    }

    /// Latest dirty levels, by `writeback_common::dirty` index: the words
    /// `DIRTY` holds, decoded with the tracepoint's layout.
    pub(crate) fn dirty_levels(&self) -> anyhow::Result<Vec<u64>> {
        let map: Array<_, u64> =
            Array::try_from(self.ebpf.map("DIRTY").context("DIRTY map missing")?)?;
        let words = (0..dirty::COUNT)
            .map(|i| {
                map.get(&i, 0)
                    .with_context(|| format!("reading DIRTY[{i}]"))
            })
            .collect::<anyhow::Result<Vec<u64>>>()?;
        Ok(decode_dirty(&words, &self.global_dirty_layout))
    }

    /// Per-device block histograms: the shared slots (`BLOCK_SLOTS`) and
    /// the overflow hash (`BLOCK_HIST`), together.
    pub(crate) fn block_histograms(&self) -> anyhow::Result<HashMap<BlockHistKey, u64>> {
        let mut out: HashMap<BlockHistKey, u64> = self.counters("BLOCK_HIST")?;
        let slots: Array<_, BlockSlots> = Array::try_from(
            self.ebpf
                .map("BLOCK_SLOTS")
                .context("BLOCK_SLOTS map missing")?,
        )?;
        let slots = slots.get(&0, 0).context("reading BLOCK_SLOTS")?;
        add_slot_counts(&mut out, &slots);
        Ok(out)
    }

    /// Per-device inode-pass counters (`INODE_PASS`).
    pub(crate) fn inode_pass_counters(
        &self,
    ) -> anyhow::Result<HashMap<writeback_common::DevCounterKey, u64>> {
        self.counters("INODE_PASS")
    }

    /// Every entry of the counter hash `name` (`BLOCK_HIST`, `INODE_PASS`:
    /// one value shared by all CPUs).
    fn counters<K: aya::Pod + Eq + std::hash::Hash>(
        &self,
        name: &str,
    ) -> anyhow::Result<HashMap<K, u64>> {
        let map = self
            .ebpf
            .map(name)
            .with_context(|| format!("{name} map missing"))?;
        Ok(super::batch::read_hash::<K, u64>(map, name)?
            .into_iter()
            .collect())
    }

    /// Run count and time of each attached program, when the kernel keeps
    /// BPF statistics, and the runs it missed: skipped for recursion, and
    /// for a kretprobe of our own the returns its event missed for want
    /// of a free instance (`kprobe_profile`, retprobe.rs: those calls
    /// have no end).
    pub fn run_times(&self) -> Vec<ProgramRunTime> {
        let mut retprobes = self.retprobes.lock().unwrap_or_else(|e| e.into_inner());
        self.attached_programs
            .iter()
            .filter_map(|&name| {
                let program = self.ebpf.program(name)?;
                let stats = prog_stats(std::os::fd::AsFd::as_fd(program.fd().ok()?))?;
                let recursion_misses = stats.recursion_misses.unwrap_or(0)
                    + retprobes
                        .iter_mut()
                        .filter(|(program, _)| *program == name)
                        .filter_map(|(_, r)| r.misses())
                        .sum::<u64>();
                Some(ProgramRunTime {
                    program: name.to_string(),
                    run_count: stats.run_count,
                    run_time_ns: stats.run_time_ns,
                    recursion_misses,
                })
            })
            .collect()
    }
}

/// What the kernel counts of a loaded program's runs (`struct
/// bpf_prog_info`): their number and time (Linux 5.1+, while BPF
/// statistics are on), read with one query per interval and program.
struct ProgStats {
    run_count: u64,
    run_time_ns: u64,
    /// [`prog_stats`] says what these are; `None` before Linux 5.12.
    recursion_misses: Option<u64>,
}

/// A loaded program's [`ProgStats`]. Its `recursion_misses` (Linux
/// 5.12+): runs the kernel skipped because the program was already
/// running on that CPU (`bpf_prog_inc_misses_counter()`: the recursion
/// guards of the fentry/fexit trampolines, kernel/bpf/trampoline.c, and
/// of raw tracepoints, kernel/trace/bpf_trace.c; newer kernels count the
/// kprobe path's too). On PREEMPT_RT a program preempted by another task that
/// fires the same hook on that CPU loses the second run this way, so it
/// is counted, not inferred. None when the kernel refuses the
/// query; a field the kernel predates is `None` or absent (the kernel
/// fills only what it knows and reports the length it wrote).
fn prog_stats(fd: std::os::fd::BorrowedFd<'_>) -> Option<ProgStats> {
    use std::os::fd::AsRawFd as _;

    use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
    // SAFETY: both are plain C structs; all-zero is valid for each.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    let len = std::mem::size_of::<bpf_prog_info>() as u32;
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = len;
    attr.info.info = std::ptr::from_mut(&mut info) as u64;
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD writes at most `info_len` bytes to
    // `info`, which lives until the call returns, and the length it
    // filled back into `attr` (kernel/bpf/syscall.c,
    // `bpf_prog_get_info_by_fd()`); both outlive the call.
    let ret = unsafe { super::batch::sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) };
    // SAFETY: the union's `info` member is the one set above and read back.
    let written = unsafe { attr.info.info_len } as usize;
    let end = |at: usize| at + std::mem::size_of::<u64>();
    if ret != 0 || written < end(std::mem::offset_of!(bpf_prog_info, run_cnt)) {
        return None;
    }
    let misses_end = end(std::mem::offset_of!(bpf_prog_info, recursion_misses));
    Some(ProgStats {
        run_count: info.run_cnt,
        run_time_ns: info.run_time_ns,
        recursion_misses: (written >= misses_end).then_some(info.recursion_misses),
    })
}

/// The `/proc/vmstat` figures wbscope compares against, read now.
pub fn read_vmstat() -> anyhow::Result<VmStat> {
    VmStatFile::open()?.read()
}

/// `/proc/vmstat` held open: a seq_file, whose every read from offset 0
/// is a fresh rendering of the counters (fs/seq_file.c), so one open
/// serves a whole run, after the privileges are dropped too (the seccomp
/// filter allows no open). The file is world-readable either way.
pub struct VmStatFile(File);

impl VmStatFile {
    const PATH: &str = "/proc/vmstat";

    pub(crate) fn open() -> anyhow::Result<VmStatFile> {
        File::open(Self::PATH)
            .map(VmStatFile)
            .with_context(|| format!("opening {}", Self::PATH))
    }

    /// The figures now.
    pub(crate) fn read(&self) -> anyhow::Result<VmStat> {
        let mut file = &self.0;
        file.rewind()
            .with_context(|| format!("rewinding {}", Self::PATH))?;
        // About 5 KiB of text on 6.x.
        let mut text = String::with_capacity(8 << 10);
        file.read_to_string(&mut text)
            .with_context(|| format!("reading {}", Self::PATH))?;
        Ok(vmstat_figures(&text))
    }
}

/// The six figures wbscope uses, from /proc/vmstat's `name value` lines
/// (mm/vmstat.c, `vmstat_show()`); a name missing reads 0. Only these are
/// parsed: procfs' parse of all ~190 lines into a map of owned names was
/// a seventh of an idle trace's CPU.
fn vmstat_figures(text: &str) -> VmStat {
    let mut v = VmStat::default();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let figure = match name {
            "nr_dirty" => &mut v.nr_dirty,
            "nr_writeback" => &mut v.nr_writeback,
            "nr_written" => &mut v.nr_written,
            "nr_dirtied" => &mut v.nr_dirtied,
            "nr_dirty_threshold" => &mut v.nr_dirty_threshold,
            "nr_dirty_background_threshold" => &mut v.nr_dirty_background_threshold,
            _ => continue,
        };
        // Counters summed over CPUs can read below zero for a moment
        // (mm/vmstat.c folds per-CPU differences lazily): 0 then.
        *figure = value.trim().parse::<i64>().map_or(0, |n| n.max(0) as u64);
    }
    v
}

/// Adds the non-zero buckets of the held `BLOCK_SLOTS` slots to `out` (a
/// free slot, device 0, holds nothing).
fn add_slot_counts(out: &mut HashMap<BlockHistKey, u64>, slots: &BlockSlots) {
    let held = slots
        .devs
        .iter()
        .zip(&slots.buckets)
        .filter(|(dev, _)| **dev != 0);
    for (&dev, hists) in held {
        for (kind, counts) in hists.iter().enumerate() {
            for (bucket, &count) in counts.iter().enumerate().filter(|(_, c)| **c != 0) {
                let key = BlockHistKey {
                    dev,
                    kind: kind as u16,
                    bucket: bucket as u16,
                };
                *out.entry(key).or_default() += count;
            }
        }
    }
}

/// Sums per-CPU counters the way the kernel adds to them: modulo 2^64
/// (interval figures are differences, taken with wrapping_sub).
fn sum_counters<'a>(values: impl Iterator<Item = &'a u64>) -> u64 {
    values.fold(0, |acc, v| acc.wrapping_add(*v))
}

/// The levels in `writeback_common::dirty` order from the words the
/// program copied (`words[dirty::UPDATED_NS]` is its update time): a level
/// whose field is not among the copied words reads 0, as an absent field
/// does everywhere.
fn decode_dirty(words: &[u64], layout: &TracepointLayout) -> Vec<u64> {
    let mut levels: Vec<u64> = (0..global_dirty::NAMES.len())
        .map(|i| {
            dirty::record_word(&layout.fields[i])
                .and_then(|w| words.get(w).copied())
                .unwrap_or(0)
        })
        .collect();
    levels.push(words.get(dirty::UPDATED_NS as usize).copied().unwrap_or(0));
    levels
}

#[cfg(test)]
mod tests {
    use writeback_common::{FieldSpec, block_hist};

    use super::*;

    #[test]
    fn vmstat_figures_are_read_by_name_and_a_negative_one_is_zero() {
        let text = "nr_free_pages 1000\nnr_dirty 12\nnr_writeback -3\nnr_dirtied 99\n\
                    nr_written 98\nnr_dirty_threshold 4000\nnr_dirty_background_threshold \
                    2000\nnr_dirty_extra 7\nbroken\n";
        assert_eq!(
            vmstat_figures(text),
            VmStat {
                nr_dirty: 12,
                nr_writeback: 0,
                nr_written: 98,
                nr_dirtied: 99,
                nr_dirty_threshold: 4000,
                nr_dirty_background_threshold: 2000,
            }
        );
        assert_eq!(
            vmstat_figures("nr_dirty 5"),
            VmStat {
                nr_dirty: 5,
                ..VmStat::default()
            }
        );
    }

    /// This kernel's file, against procfs' parse of the same text.
    #[test]
    fn vmstat_figures_equal_procfs_on_this_kernel() {
        let text = std::fs::read_to_string("/proc/vmstat").expect("reading /proc/vmstat");
        let procfs::VmStat(all) =
            procfs::FromBufRead::from_buf_read(text.as_bytes()).expect("procfs parses it");
        let get = |k: &str| all[k].max(0) as u64;
        let ours = vmstat_figures(&text);
        assert_eq!(ours.nr_dirty, get("nr_dirty"));
        assert_eq!(ours.nr_writeback, get("nr_writeback"));
        assert_eq!(ours.nr_written, get("nr_written"));
        assert_eq!(ours.nr_dirtied, get("nr_dirtied"));
        assert_eq!(ours.nr_dirty_threshold, get("nr_dirty_threshold"));
        assert_eq!(
            ours.nr_dirty_background_threshold,
            get("nr_dirty_background_threshold")
        );
        assert!(
            ours.nr_dirty_threshold > 0 && ours.nr_dirtied > 0,
            "{ours:?}"
        );
    }

    /// Root: the embedded object's classic tracepoint program for inodes
    /// made dirty, loaded (not attached), answers the query with no run
    /// and no miss on this kernel (6.18: `recursion_misses` exists since
    /// 5.12).
    #[test]
    fn the_statistics_of_a_loaded_program_are_read() {
        use std::os::fd::AsFd as _;
        let mut ebpf = super::super::object::load(&mut aya::EbpfLoader::new())
            .expect("load the embedded object");
        let program: &mut aya::programs::TracePoint = ebpf
            .program_mut("dirty_inode")
            .expect("dirty_inode")
            .try_into()
            .expect("a tracepoint program");
        program.load().expect("verifier");
        let fd = program.fd().expect("loaded");
        let stats = prog_stats(fd.as_fd()).expect("the kernel answers");
        assert_eq!(
            (stats.run_count, stats.run_time_ns, stats.recursion_misses),
            (0, 0, Some(0))
        );
    }

    /// Slots add up with the overflow hash; free slots and empty buckets
    /// add nothing.
    #[test]
    fn block_slot_counts_merge_with_the_hash() {
        let key = |dev, kind, bucket| BlockHistKey { dev, kind, bucket };
        let mut out = HashMap::from([(key(7 << 20, block_hist::LATENCY_NS, 12), 5)]);
        let mut slots = BlockSlots::default();
        slots.devs[3] = 7 << 20;
        slots.buckets[3][block_hist::ISSUE_BYTES as usize][20] = 6;
        slots.buckets[3][block_hist::LATENCY_NS as usize][12] = 4;
        slots.buckets[3][block_hist::LATENCY_NS as usize][63] = 1;
        slots.devs[9] = 8 << 20;
        slots.buckets[9][block_hist::LATENCY_NS as usize][0] = 2;
        // Counts in a free slot are nobody's.
        slots.buckets[5][0][1] = 9;
        add_slot_counts(&mut out, &slots);
        assert_eq!(
            out,
            HashMap::from([
                (key(7 << 20, block_hist::ISSUE_BYTES, 20), 6),
                (key(7 << 20, block_hist::LATENCY_NS, 12), 9),
                (key(7 << 20, block_hist::LATENCY_NS, 63), 1),
                (key(8 << 20, block_hist::LATENCY_NS, 0), 2),
            ])
        );
    }

    /// A host's usual devices (loop, virtio, sd, nvme, device-mapper),
    /// claiming slots first come first served as the programs do, all get
    /// one within their probes: none of them pays for the hash.
    #[test]
    fn usual_devices_get_their_own_slots() {
        let mkdev = |major: u32, minor: u32| major << 20 | minor;
        let mut devices: Vec<u32> = (0..8).map(|minor| mkdev(7, minor)).collect();
        devices.extend([mkdev(254, 0), mkdev(8, 0), mkdev(8, 16), mkdev(259, 0)]);
        let mut taken = [0u32; block_hist::SLOTS as usize];
        for &dev in &devices {
            let slot = (0..block_hist::PROBES)
                .map(|probe| block_hist::slot_of(dev, probe) as usize)
                .find(|&slot| taken[slot] == 0)
                .unwrap_or_else(|| panic!("{dev:#x}: no free slot in {taken:x?}"));
            taken[slot] = dev;
        }
    }

    fn layout(offsets: &[u16]) -> TracepointLayout {
        let mut layout = TracepointLayout::EMPTY;
        for (slot, &offset) in offsets.iter().enumerate() {
            layout.fields[slot] = FieldSpec {
                offset,
                size: 8,
                signed: 0,
            };
        }
        layout
    }

    /// The words as 6.18 writes them (seven `unsigned long`s from offset
    /// 8, in NAMES order) decode to the levels in order; a 5.7 layout
    /// (`nr_unstable` at 24 moving the rest one word on) finds each level
    /// in its word and leaves `nr_written`, past the copied words, at 0.
    #[test]
    fn dirty_levels_from_the_copied_words() {
        let words = [10, 11, 12, 13, 14, 15, 16, 999];
        let now = layout(&[8, 16, 24, 32, 40, 48, 56]);
        assert_eq!(
            decode_dirty(&words, &now),
            [10, 11, 12, 13, 14, 15, 16, 999]
        );
        let old = layout(&[8, 16, 32, 40, 48, 56, 64]);
        assert_eq!(decode_dirty(&words, &old), [10, 11, 13, 14, 15, 16, 0, 999]);
        // A field that is not a whole aligned word is never guessed at.
        let mut odd = now;
        odd.fields[1].size = 4;
        odd.fields[2].offset = 20;
        assert_eq!(decode_dirty(&words, &odd), [10, 0, 0, 13, 14, 15, 16, 999]);
        assert_eq!(
            decode_dirty(&words, &TracepointLayout::EMPTY),
            [0, 0, 0, 0, 0, 0, 0, 999]
        );
    }
}
