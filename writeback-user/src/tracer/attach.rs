//! Loads the embedded eBPF object and carries out the probe plan
//! (`plan.rs`): reads tracepoint layouts from tracefs, tries the function
//! hooks this kernel may allow, attaches the best hook per concept, and
//! records why every other candidate was refused. The tracer keeps running
//! with whatever could be attached.
use std::{
    collections::{HashMap, HashSet},
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use anyhow::Context as _;
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, FEntry, KProbe, Program, ProgramError, TracePoint},
};
use log::{info, warn};
use writeback_common::{
    BlockHistKey, BlockMembers, DevBlockHist, Filter, KernelMembers, MemberSpec, ScanMembers,
    TracepointLayout, block_hist, block_members, members, stat,
};

use super::{
    btf::Btf as KernelBtf,
    object::EBPF_OBJECT,
    plan::{
        BLOCK_RQ_ISSUE, BtfAttach, Candidate, EXT4_SCAN_FUNCTION, TracepointAttach, candidates,
    },
    privileges, tracefs,
};
use crate::model::plan::{Concept, ConceptPlan, HookKind, ProbePlan};

/// Where the kernel lists its perf event sources; no `kprobe` there means
/// a kernel built without CONFIG_KPROBES.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// Counters kept by the programs (`STATS`), summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelStats {
    pub lost_records: u64,
    pub unmatched_results: u64,
    pub inflight_full: u64,
    pub filtered: u64,
}

/// What the caller wants from the tracer.
#[derive(Clone, Debug, Default)]
pub struct TracerOptions {
    pub filter: Filter,
    /// Hook kinds never to use (`--disable`).
    pub disabled: Vec<HookKind>,
}

/// Run time of one attached program (BPF_ENABLE_STATS).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProgramRunTime {
    pub program: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// Loaded and attached programs. Dropping it detaches everything.
pub struct Tracer {
    ebpf: Ebpf,
    stats: PerCpuArray<MapData, u64>,
    pub plan: ProbePlan,
    /// The field offsets and struct members the programs were loaded with,
    /// for recordings: `{"ext4:ext4_writepages": {"dev": [8, 4, 0], ...},
    /// "btf": {"inode.i_ino": [64, 8, 0, 0], ...}}`.
    pub field_offsets: serde_json::Value,
    /// Attached program names, for run-time statistics.
    attached_programs: Vec<&'static str>,
    /// Keeps BPF run-time statistics on while the tracer lives.
    _stats_fd: Option<OwnedFd>,
    /// Kept alive: dropping it closes the log map (toolchain.md).
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
}

/// The tracepoint candidate of one concept whose layouts were loaded.
struct Prepared {
    concept: Concept,
    label: String,
    attaches: &'static [TracepointAttach],
    layouts: Vec<Option<TracepointLayout>>,
    fields: Vec<String>,
}

/// The running kernel's BTF, parsed on first use into `cache` and kept
/// there for the other member tables (one parse of vmlinux's BTF per
/// attach, not one per table). Errors are the rejection reason.
fn vmlinux_btf(cache: &mut Option<Result<KernelBtf, String>>) -> Result<&KernelBtf, String> {
    cache
        .get_or_insert_with(|| KernelBtf::from_kernel(None).map_err(|e| format!("kernel BTF: {e}")))
        .as_ref()
        .map_err(Clone::clone)
}

/// Offsets of the struct members the BTF-typed programs read, from the
/// running kernel's BTF. Errors are the rejection reason.
fn resolve_members(btf: &KernelBtf) -> Result<KernelMembers, String> {
    let mut table = KernelMembers::default();
    for (slot, (strukt, name, signed)) in members::PATHS.iter().enumerate() {
        table.members[slot] = member_spec(btf, strukt, name, *signed)?;
    }
    Ok(table)
}

/// What the BTF block programs read (`BlockMembers`). Without
/// `QUEUE_FLAG_STATS` in BTF (a `#define` before the queue flags became an
/// enum) the issue program stamps every request itself.
fn resolve_block_members(btf: &KernelBtf) -> Result<BlockMembers, String> {
    let mut table = BlockMembers::EMPTY;
    for (slot, (strukt, name, signed)) in block_members::PATHS.iter().enumerate() {
        table.members[slot] = member_spec(btf, strukt, name, *signed)?;
    }
    if let Ok(bit) = btf.enum_value("QUEUE_FLAG_STATS")
        && let Ok(bit) = u32::try_from(bit)
        && bit < BlockMembers::NO_STATS_BIT
    {
        table.stats_bit = bit;
    }
    Ok(table)
}

/// One member's [`MemberSpec`]; errors are the rejection reason.
fn member_spec(
    btf: &KernelBtf,
    strukt: &str,
    name: &str,
    signed: bool,
) -> Result<MemberSpec, String> {
    let m = btf.member(strukt, name).map_err(|e| e.to_string())?;
    let offset = u16::try_from(m.byte_offset)
        .map_err(|_| format!("{strukt}.{name} at offset {} is too far", m.byte_offset))?;
    let size = u8::try_from(m.size)
        .ok()
        .filter(|s| matches!(s, 1 | 2 | 4 | 8))
        .ok_or_else(|| format!("{strukt}.{name} is {} bytes, not an integer", m.size))?;
    if m.bit_size != 0 && u32::from(m.bit_offset) + u32::from(m.bit_size) > 64 {
        return Err(format!("{strukt}.{name}: bitfield past 64 bits"));
    }
    Ok(MemberSpec::new(
        offset,
        size,
        m.bit_offset,
        m.bit_size,
        signed && m.bit_size == 0,
    ))
}

/// The `struct mpage_da_data` cursors the scan function hooks read. The
/// struct is private to fs/ext4/inode.c: it is in the ext4 module's split
/// BTF when ext4 is a module, in vmlinux's otherwise.
fn resolve_scan_members() -> Result<ScanMembers, String> {
    let module = KernelBtf::kernel_has_module_btf("ext4").then_some("ext4");
    let btf = KernelBtf::from_kernel(module).map_err(|e| format!("kernel BTF: {e}"))?;
    scan_members_from(&btf, crate::sys::page_shift())
}

fn scan_members_from(btf: &KernelBtf, page_shift: u32) -> Result<ScanMembers, String> {
    const STRUCT: &str = "mpage_da_data";
    for (start, next, in_pages) in ScanMembers::LAYOUTS {
        // Page indices are pgoff_t (unsigned long), positions loff_t.
        let signed = !in_pages;
        if let (Ok(start), Ok(next)) = (
            member_spec(btf, STRUCT, start, signed),
            member_spec(btf, STRUCT, next, signed),
        ) {
            return Ok(ScanMembers {
                start,
                next,
                pos_shift: if in_pages { page_shift } else { 0 },
                _pad: 0,
            });
        }
    }
    let names: Vec<String> = ScanMembers::LAYOUTS
        .iter()
        .map(|(s, n, _)| format!("{s}/{n}"))
        .collect();
    Err(format!(
        "struct {STRUCT} has none of {} in the kernel's BTF",
        names.join(", ")
    ))
}

/// Entries of the IN_CALL map (one byte per thread id, eight to an
/// entry) for this kernel's pid_max; `None` keeps the object's default,
/// which covers PID_MAX_LIMIT.
fn in_call_entries() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok()?;
    let pid_max: u32 = text.trim().parse().ok()?;
    Some(pid_max.div_ceil(8).max(1))
}

/// Adds the non-zero buckets of one `BLOCK_SLOTS` slot, as each CPU holds
/// it, to `out` (a free slot, device 0, holds nothing).
fn add_slot_counts<'a>(
    out: &mut HashMap<BlockHistKey, u64>,
    per_cpu: impl Iterator<Item = &'a DevBlockHist>,
) {
    for slot in per_cpu.filter(|s| s.dev != 0) {
        for (kind, counts) in slot.buckets.iter().enumerate() {
            for (bucket, &count) in counts.iter().enumerate().filter(|(_, c)| **c != 0) {
                let key = BlockHistKey {
                    dev: slot.dev,
                    kind: kind as u16,
                    bucket: bucket as u16,
                };
                *out.entry(key).or_default() += count;
            }
        }
    }
}

impl Tracer {
    /// Checks privileges, builds and carries out the probe plan.
    pub fn attach(options: &TracerOptions) -> anyhow::Result<Tracer> {
        Self::attach_with(options, candidates)
    }

    /// [`Tracer::attach`] with another candidate table (tests point a
    /// candidate at an event this kernel lacks to exercise the fallback).
    pub fn attach_with(
        options: &TracerOptions,
        candidates_of: impl Fn(Concept) -> Vec<Candidate>,
    ) -> anyhow::Result<Tracer> {
        privileges::check()?;
        let tracefs_root = tracefs::ensure_mounted()?;

        // Phase 1, before load (globals are fixed at load): tracepoint
        // layouts from tracefs, struct members from BTF. Per concept, the
        // first classic tracepoint candidate that can work is prepared;
        // every candidate refused here keeps its reason.
        let mut members: Option<Result<KernelMembers, String>> = None;
        let mut scan_members: Option<Result<ScanMembers, String>> = None;
        let mut block_members: Option<Result<BlockMembers, String>> = None;
        let mut vmlinux: Option<Result<KernelBtf, String>> = None;
        let mut refused: HashMap<(Concept, String), String> = HashMap::new();
        let mut prepared: Vec<Prepared> = Vec::new();
        for &concept in &Concept::ALL {
            let mut have_tracepoint = false;
            for candidate in candidates_of(concept) {
                if options.disabled.contains(&candidate.kind()) {
                    continue;
                }
                match &candidate {
                    Candidate::Tracepoints(attaches) if !have_tracepoint => {
                        match read_layouts(&tracefs_root, attaches) {
                            Ok((layouts, fields)) => {
                                have_tracepoint = true;
                                prepared.push(Prepared {
                                    concept,
                                    label: candidate.label(),
                                    attaches,
                                    layouts,
                                    fields,
                                });
                            }
                            Err(reason) => {
                                refused.insert((concept, candidate.label()), reason);
                            }
                        }
                    }
                    // The scan function hooks read only ext4's mpd; the
                    // others the vmlinux structs.
                    Candidate::BtfPrograms { attaches, .. }
                        if attaches.iter().any(|a| a.target == EXT4_SCAN_FUNCTION) =>
                    {
                        if let Err(reason) = scan_members.get_or_insert_with(resolve_scan_members) {
                            refused.insert((concept, candidate.label()), reason.clone());
                        }
                    }
                    // The block programs read requests, queues and bios.
                    Candidate::BtfPrograms { attaches, .. }
                        if attaches.iter().any(|a| a.target == BLOCK_RQ_ISSUE) =>
                    {
                        if let Err(reason) = block_members.get_or_insert_with(|| {
                            vmlinux_btf(&mut vmlinux).and_then(resolve_block_members)
                        }) {
                            refused.insert((concept, candidate.label()), reason.clone());
                        }
                    }
                    Candidate::BtfPrograms { .. } => {
                        if let Err(reason) = members.get_or_insert_with(|| {
                            vmlinux_btf(&mut vmlinux).and_then(resolve_members)
                        }) {
                            refused.insert((concept, candidate.label()), reason.clone());
                        }
                    }
                    _ => {}
                }
            }
        }

        // Several MiB parsed; the tables are resolved.
        drop(vmlinux);
        let mut loader = EbpfLoader::new();
        let layout_values: Vec<(&'static str, TracepointLayout)> = prepared
            .iter()
            .flat_map(|c| {
                c.attaches
                    .iter()
                    .zip(&c.layouts)
                    .filter_map(|(a, l)| Some((a.layout_global?, (*l)?)))
            })
            .collect();
        for (global, layout) in &layout_values {
            loader.override_global(global, layout, true);
        }
        let field_offsets = offsets_json(&prepared, members.as_ref().and_then(|m| m.as_ref().ok()));
        let kernel_members = members.and_then(Result::ok).unwrap_or_default();
        loader.override_global("KERNEL_MEMBERS", &kernel_members, true);
        let scan_members = scan_members.and_then(Result::ok).unwrap_or_default();
        loader.override_global("SCAN_MEMBERS", &scan_members, true);
        let block_members = block_members
            .and_then(Result::ok)
            .unwrap_or(BlockMembers::EMPTY);
        loader.override_global("BLOCK_MEMBERS", &block_members, true);
        loader.override_global("FILTER", &options.filter, true);
        if let Some(entries) = in_call_entries() {
            loader.map_max_entries("IN_CALL", entries);
        }
        let mut ebpf = loader
            .load(EBPF_OBJECT)
            .context("loading the embedded eBPF object")?;
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => Some(logger),
            Err(e) => {
                warn!("eBPF logging unavailable: {e}");
                None
            }
        };

        // Phase 2: per concept, candidates in order of preference until one
        // attaches. Function hooks without a program of ours are tried with
        // an empty program so the plan says what this kernel allows.
        let mut trials = Trials::new();
        let mut attached_programs = Vec::new();
        let mut concept_plans = Vec::new();
        for &concept in &Concept::ALL {
            let mut plan = ConceptPlan::new(concept);
            for candidate in candidates_of(concept) {
                let label = candidate.label();
                if options.disabled.contains(&candidate.kind()) {
                    plan.reject(
                        candidate.label(),
                        format!("disabled with --disable {}", candidate.kind()),
                    );
                    continue;
                }
                if let Some(reason) = refused.remove(&(concept, label.clone())) {
                    plan.reject(candidate.label(), reason);
                    continue;
                }
                let outcome = match &candidate {
                    Candidate::Function { kind, target } => {
                        Err(trials.try_hook(&mut ebpf, *kind, target))
                    }
                    Candidate::BtfPrograms {
                        kind,
                        attaches,
                        fields,
                    } => trials.attach_btf(&mut ebpf, *kind, attaches).map(|()| {
                        attached_programs.extend(attaches.iter().map(|a| a.program));
                        fields.iter().map(|f| f.to_string()).collect()
                    }),
                    Candidate::Tracepoints(attaches) => {
                        match prepared
                            .iter()
                            .find(|p| p.concept == concept && p.label == label)
                        {
                            Some(p) => attach_all(&mut ebpf, attaches)
                                .map(|()| {
                                    attached_programs.extend(attaches.iter().map(|a| a.program));
                                    p.fields.clone()
                                })
                                .map_err(|e| format!("{e:#}")),
                            None => Err("not tried: an earlier tracepoint candidate's layout \
                                 was loaded and failed to attach"
                                .to_string()),
                        }
                    }
                };
                match outcome {
                    Ok(fields) => {
                        plan.hook = Some(label);
                        plan.kind = Some(candidate.kind());
                        plan.fields = fields;
                        break;
                    }
                    Err(reason) => plan.reject(candidate.label(), reason),
                }
            }
            concept_plans.push(plan);
        }
        let plan = ProbePlan {
            kernel: crate::sys::kernel_release(),
            concepts: concept_plans,
        };
        for c in &plan.concepts {
            match &c.hook {
                Some(hook) => info!("{}: {hook}", c.concept.name()),
                None => info!("{}: unavailable", c.concept.name()),
            }
        }
        // How hard the verifier worked per program: the figure to watch on
        // older kernels, whose verifiers prune less (E2BIG past 1M).
        for name in &attached_programs {
            if let Some(info) = ebpf.program(name).and_then(|p| p.info().ok()) {
                info!(
                    "program {name}: {} instructions verified",
                    info.verified_instruction_count().unwrap_or(0)
                );
            }
        }

        if plan.attached(Concept::CpuTime) {
            let mut config: Array<_, u32> =
                Array::try_from(ebpf.map_mut("CONFIG").context("CONFIG map missing")?)?;
            config.set(0, 1, 0).context("enabling on-CPU accounting")?;
        }
        let stats_fd = match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(fd) => Some(fd),
            Err(e) => {
                warn!(
                    "BPF run-time statistics unavailable (BPF_ENABLE_STATS needs \
                     CAP_SYS_ADMIN; the kernel.bpf_stats_enabled sysctl is the alternative): {e}"
                );
                None
            }
        };
        let stats = PerCpuArray::try_from(ebpf.take_map("STATS").context("STATS map missing")?)
            .context("STATS map")?;
        Ok(Tracer {
            ebpf,
            stats,
            plan,
            field_offsets,
            attached_programs,
            _stats_fd: stats_fd,
            logger,
        })
    }

    /// True when the writepages-call concept is attached (the core of the
    /// trace).
    pub fn any_attached(&self) -> bool {
        self.plan.concepts.iter().any(ConceptPlan::is_attached)
    }

    /// The per-call record ring buffer; can be taken once.
    pub fn take_events(&mut self) -> anyhow::Result<RingBuf<MapData>> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .context("EVENTS ring buffer already taken or missing")?;
        RingBuf::try_from(map).context("EVENTS is not a ring buffer")
    }

    /// The eBPF log ring buffer, to be polled by the caller; can be taken
    /// once.
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<&'static dyn log::Log>> {
        self.logger.take()
    }

    pub fn stats(&self) -> anyhow::Result<KernelStats> {
        let sum = |index: u32| -> anyhow::Result<u64> {
            let values = self
                .stats
                .get(&index, 0)
                .with_context(|| format!("reading STATS[{index}]"))?;
            Ok(sum_counters(values.iter()))
        };
        Ok(KernelStats {
            lost_records: sum(stat::LOST_RECORDS)?,
            unmatched_results: sum(stat::UNMATCHED_RESULTS)?,
            inflight_full: sum(stat::INFLIGHT_FULL)?,
            filtered: sum(stat::FILTERED)?,
        })
    }

    /// Per-CPU interval counters (`AGG`), summed over CPUs, by index.
    pub fn aggregates(&self) -> anyhow::Result<Vec<u64>> {
        let agg: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.ebpf.map("AGG").context("AGG map missing")?)?;
        (0..writeback_common::agg::COUNT)
            .map(|i| {
                agg.get(&i, 0)
                    .map(|v| sum_counters(v.iter()))
                    .with_context(|| format!("reading AGG[{i}]"))
            })
            .collect()
    }

    /// Latest dirty levels (`DIRTY`), by `writeback_common::dirty` index.
    pub fn dirty_levels(&self) -> anyhow::Result<Vec<u64>> {
        let dirty: Array<_, u64> =
            Array::try_from(self.ebpf.map("DIRTY").context("DIRTY map missing")?)?;
        (0..writeback_common::dirty::COUNT)
            .map(|i| {
                dirty
                    .get(&i, 0)
                    .with_context(|| format!("reading DIRTY[{i}]"))
            })
            .collect()
    }

    /// Per-device block histograms, summed over CPUs: the per-CPU slots
    /// (`BLOCK_SLOTS`) and the overflow hash (`BLOCK_HIST`) together.
    pub fn block_histograms(&self) -> anyhow::Result<HashMap<BlockHistKey, u64>> {
        let mut out: HashMap<BlockHistKey, u64> = self.per_cpu_sums("BLOCK_HIST")?;
        let slots: PerCpuArray<_, DevBlockHist> = PerCpuArray::try_from(
            self.ebpf
                .map("BLOCK_SLOTS")
                .context("BLOCK_SLOTS map missing")?,
        )?;
        for index in 0..block_hist::SLOTS {
            let per_cpu = slots
                .get(&index, 0)
                .with_context(|| format!("reading BLOCK_SLOTS[{index}]"))?;
            add_slot_counts(&mut out, per_cpu.iter());
        }
        Ok(out)
    }

    /// Per-device inode-pass counters (`INODE_PASS`), summed over CPUs.
    pub fn inode_pass_counters(
        &self,
    ) -> anyhow::Result<HashMap<writeback_common::DevCounterKey, u64>> {
        self.per_cpu_sums("INODE_PASS")
    }

    /// Every entry of the per-CPU hash `name`, its values summed over CPUs.
    fn per_cpu_sums<K: aya::Pod + Eq + std::hash::Hash>(
        &self,
        name: &str,
    ) -> anyhow::Result<HashMap<K, u64>> {
        let map: PerCpuHashMap<_, K, u64> = PerCpuHashMap::try_from(
            self.ebpf
                .map(name)
                .with_context(|| format!("{name} map missing"))?,
        )?;
        let mut out = HashMap::new();
        for entry in map.iter() {
            let (key, values) = entry.with_context(|| format!("reading {name}"))?;
            out.insert(key, sum_counters(values.iter()));
        }
        Ok(out)
    }

    /// Run count and time of each attached program, when the kernel keeps
    /// BPF statistics.
    pub fn run_times(&self) -> Vec<ProgramRunTime> {
        self.attached_programs
            .iter()
            .filter_map(|&name| {
                let info = self.ebpf.program(name)?.info().ok()?;
                Some(ProgramRunTime {
                    program: name.to_string(),
                    run_count: info.run_count(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                })
            })
            .collect()
    }
}

/// What the programs were loaded with, as JSON for recording headers.
fn offsets_json(prepared: &[Prepared], members: Option<&KernelMembers>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for p in prepared {
        for (a, layout) in p.attaches.iter().zip(&p.layouts) {
            let Some(layout) = layout else { continue };
            let fields: serde_json::Map<String, serde_json::Value> = a
                .fields
                .iter()
                .zip(layout.fields.iter())
                .filter(|(_, f)| f.is_present())
                .map(|(name, f)| {
                    (
                        (*name).to_string(),
                        serde_json::json!([f.offset, f.size, f.signed]),
                    )
                })
                .collect();
            out.insert(format!("{}:{}", a.system, a.event), fields.into());
        }
    }
    if let Some(m) = members {
        let btf: serde_json::Map<String, serde_json::Value> = members::PATHS
            .iter()
            .zip(m.members.iter())
            .map(|((s, n, _), spec)| {
                (
                    format!("{s}.{n}"),
                    serde_json::json!([
                        spec.offset,
                        spec.left_shift,
                        spec.right_shift,
                        spec.signed
                    ]),
                )
            })
            .collect();
        out.insert("btf".into(), btf.into());
    }
    out.into()
}

/// Sums per-CPU counters the way the kernel adds to them: modulo 2^64
/// (interval figures are differences, taken with wrapping_sub).
fn sum_counters<'a>(values: impl Iterator<Item = &'a u64>) -> u64 {
    values.fold(0, |acc, v| acc.wrapping_add(*v))
}

/// Reads the formats of every attach of a candidate. Errors are the
/// rejection reason.
fn read_layouts(
    root: &Path,
    attaches: &[TracepointAttach],
) -> Result<(Vec<Option<TracepointLayout>>, Vec<String>), String> {
    let mut layouts = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    for a in attaches {
        let format = tracefs::read_format(root, a.system, a.event).map_err(|e| e.to_string())?;
        let (layout, missing) = format
            .layout(a.fields)
            .map_err(|e| format!("{}:{}: {e:#}", a.system, a.event))?;
        if let Some(req) = a.required.iter().find(|r| missing.iter().any(|m| m == *r)) {
            return Err(format!(
                "tracepoint {}:{} has no field `{req}` on this kernel",
                a.system, a.event
            ));
        }
        if !missing.is_empty() {
            warn!(
                "tracepoint {}:{}: no field(s) {missing:?} on this kernel; they read as 0",
                a.system, a.event
            );
        }
        for f in a.fields {
            if !missing.iter().any(|m| m == f) && !fields.iter().any(|x| x == f) {
                fields.push((*f).to_string());
            }
        }
        layouts.push(a.layout_global.map(|_| layout));
    }
    Ok((layouts, fields))
}

fn attach_all(ebpf: &mut Ebpf, attaches: &[TracepointAttach]) -> anyhow::Result<()> {
    for a in attaches {
        let program: &mut TracePoint = ebpf
            .program_mut(a.program)
            .with_context(|| format!("program {} not in the object", a.program))?
            .try_into()
            .context("not a tracepoint program")?;
        program.load().map_err(|e| {
            anyhow::anyhow!(
                "tracepoint {}:{}: {}",
                a.system,
                a.event,
                describe(&e, a.event)
            )
        })?;
        program
            .attach(a.system, a.event)
            .with_context(|| format!("attaching tracepoint {}:{}", a.system, a.event))?;
    }
    Ok(())
}

/// Trial loads of the empty fentry/kprobe/tp_btf programs.
struct Trials {
    btf: Option<Result<Btf, String>>,
}

impl Trials {
    fn new() -> Trials {
        Trials { btf: None }
    }

    fn btf(&mut self) -> Result<&Btf, String> {
        self.btf
            .get_or_insert_with(|| {
                Btf::from_sys_fs()
                    .map_err(|e| format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Tries one function hook; returns why it is not used.
    fn try_hook(&mut self, ebpf: &mut Ebpf, kind: HookKind, target: &str) -> String {
        match self.trial(ebpf, kind, target) {
            Ok(()) => format!(
                "{kind} works on this kernel, but wbscope has no {kind} program for this \
                 concept yet"
            ),
            Err(reason) => reason,
        }
    }

    /// Loads and attaches wbscope's own BTF-typed programs; on any failure
    /// the ones already attached are unloaded again.
    fn attach_btf(
        &mut self,
        ebpf: &mut Ebpf,
        kind: HookKind,
        attaches: &[BtfAttach],
    ) -> Result<(), String> {
        if kind == HookKind::Kprobe && !Path::new(KPROBE_PMU).exists() {
            return Err(format!("kernel built without kprobes (no {KPROBE_PMU})"));
        }
        let btf = self.btf()?.clone();
        let mut done: Vec<&str> = Vec::new();
        let mut result = Ok(());
        for a in attaches {
            let Some(program) = ebpf.program_mut(a.program) else {
                result = Err(format!("program {} missing from the object", a.program));
                break;
            };
            let d = |e: ProgramError| describe(&e, a.target);
            let step = match program {
                Program::BtfTracePoint(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                Program::FEntry(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                Program::FExit(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                Program::KProbe(p) => p
                    .load()
                    .map_err(d)
                    .and_then(|()| p.attach(a.target, 0).map(drop).map_err(d)),
                _ => Err(format!("{} is not a {kind} program", a.program)),
            };
            match step {
                Ok(()) => done.push(a.program),
                Err(e) => {
                    result = Err(format!("{} ({}): {e}", a.target, a.program));
                    break;
                }
            }
        }
        if result.is_err() {
            // Unloading detaches: nothing of a half-attached pair stays.
            for name in done {
                let _ = match ebpf.program_mut(name) {
                    Some(Program::BtfTracePoint(p)) => p.unload(),
                    Some(Program::FEntry(p)) => p.unload(),
                    Some(Program::FExit(p)) => p.unload(),
                    Some(Program::KProbe(p)) => p.unload(),
                    _ => Ok(()),
                };
            }
        }
        result
    }

    fn trial(&mut self, ebpf: &mut Ebpf, kind: HookKind, target: &str) -> Result<(), String> {
        match kind {
            HookKind::Fentry => {
                let btf = self.btf()?.clone();
                let program: &mut FEntry = program_as(ebpf, "trial_fentry")?;
                program
                    .load(target, &btf)
                    .map_err(|e| describe(&e, target))?;
                program.unload().map_err(|e| e.to_string())
            }
            HookKind::TpBtf => {
                let btf = self.btf()?.clone();
                let program: &mut BtfTracePoint = program_as(ebpf, "trial_tp_btf")?;
                program
                    .load(target, &btf)
                    .map_err(|e| describe(&e, target))?;
                program.unload().map_err(|e| e.to_string())
            }
            HookKind::Kprobe => {
                if !Path::new(KPROBE_PMU).exists() {
                    return Err(format!(
                        "kernel built without kprobes (no {})",
                        PathBuf::from(KPROBE_PMU).display()
                    ));
                }
                let program: &mut KProbe = program_as(ebpf, "trial_kprobe")?;
                if !is_loaded(program) {
                    program.load().map_err(|e| describe(&e, target))?;
                }
                let link = program
                    .attach(target, 0)
                    .map_err(|e| describe(&e, target))?;
                program.detach(link).map_err(|e| e.to_string())
            }
            HookKind::Tracepoint => Err("not a function hook".into()),
        }
    }
}

fn is_loaded(program: &KProbe) -> bool {
    program.fd().is_ok()
}

fn program_as<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("trial program {name} missing from the object"))?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())
}

/// A short reason for a failed trial: the syscall and errno when that is
/// what happened ("BPF_PROG_LOAD returned EPERM").
fn describe(e: &ProgramError, target: &str) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            // The verifier's reasons, for --log: the one-line reason below
            // says only that it refused.
            log::info!("{target}: BPF_PROG_LOAD failed; verifier log:\n{verifier_log}");
            format!("BPF_PROG_LOAD returned {}", errno_text(io_error))
        }
        // Only a function ext4's own BTF has is "in the module"; others
        // (writeback_iter on 6.1) are simply absent.
        ProgramError::Btf(_) if in_ext4_module_btf(target) => format!(
            "{target} is not in vmlinux's BTF (ext4 is a module here: its BTF is split, in \
             /sys/kernel/btf/ext4, which aya 0.14 cannot load programs against)"
        ),
        ProgramError::Btf(_) => format!("{target} is not in the kernel's BTF"),
        ProgramError::SyscallError(s) => {
            format!("{} returned {}", s.call, errno_text(&s.io_error))
        }
        other => other.to_string(),
    }
}

/// Whether `function` is in the ext4 module's split BTF (errors: no).
/// The module's function names are read once per process: every refused
/// fentry candidate asks, and each read parses vmlinux's BTF too.
fn in_ext4_module_btf(function: &str) -> bool {
    static EXT4_FUNCTIONS: OnceLock<HashSet<String>> = OnceLock::new();
    EXT4_FUNCTIONS
        .get_or_init(|| {
            if !KernelBtf::kernel_has_module_btf("ext4") {
                return HashSet::new();
            }
            let base = KernelBtf::from_kernel(None).map(|b| b.type_count());
            let full = KernelBtf::from_kernel(Some("ext4"));
            match (base, full) {
                (Ok(base), Ok(full)) => full
                    .function_names_after(base)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                _ => HashSet::new(),
            }
        })
        .contains(function)
}

fn errno_text(e: &std::io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ESRCH) => "ESRCH",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(524) => "ENOTSUPP",
        Some(libc::E2BIG) => "E2BIG",
        _ => return e.to_string(),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-CPU slots of the same device add up with the overflow hash;
    /// free slots and empty buckets add nothing.
    #[test]
    fn block_slot_counts_merge_across_cpus_and_with_the_hash() {
        let key = |dev, kind, bucket| BlockHistKey { dev, kind, bucket };
        let mut out = HashMap::from([(key(7 << 20, block_hist::LATENCY_NS, 12), 5)]);
        let mut cpu0 = DevBlockHist {
            dev: 7 << 20,
            ..DevBlockHist::default()
        };
        cpu0.buckets[block_hist::ISSUE_BYTES as usize][20] = 3;
        cpu0.buckets[block_hist::LATENCY_NS as usize][12] = 2;
        let mut cpu1 = cpu0;
        cpu1.buckets[block_hist::LATENCY_NS as usize][63] = 1;
        let mut free = DevBlockHist::default();
        free.buckets[0][1] = 9;
        add_slot_counts(&mut out, [cpu0, cpu1, free].iter());
        assert_eq!(
            out,
            HashMap::from([
                (key(7 << 20, block_hist::ISSUE_BYTES, 20), 6),
                (key(7 << 20, block_hist::LATENCY_NS, 12), 9),
                (key(7 << 20, block_hist::LATENCY_NS, 63), 1),
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

    /// The running kernel's `struct mpage_da_data` resolves to one of the
    /// known layouts, with the unit that layout uses: byte positions need
    /// no shift, page indices the page shift.
    #[test]
    fn scan_members_follow_the_running_kernels_layout() {
        let module = KernelBtf::kernel_has_module_btf("ext4").then_some("ext4");
        let btf = KernelBtf::from_kernel(module).expect("kernel BTF");
        let scan = scan_members_from(&btf, 12).expect("mpage_da_data cursors");
        assert_eq!((scan.start.present, scan.next.present), (1, 1));
        let positions = btf.member("mpage_da_data", "start_pos").is_ok();
        let (start, next, shift) = if positions {
            ("start_pos", "next_pos", 0)
        } else {
            ("first_page", "next_page", 12)
        };
        assert_eq!(scan.pos_shift, shift);
        let offset = |name| btf.member("mpage_da_data", name).unwrap().byte_offset;
        assert_eq!(u64::from(scan.start.offset), offset(start) as u64);
        assert_eq!(u64::from(scan.next.offset), offset(next) as u64);
        // Both are 8-byte integers: no bits dropped by the shifts.
        assert_eq!((scan.start.left_shift, scan.start.right_shift), (0, 0));
    }
}
