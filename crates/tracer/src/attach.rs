//! Loads the embedded eBPF object and carries out the probe plan
//! (`plan.rs`): reads tracepoint layouts from tracefs, tries the function
//! hooks this kernel may allow, attaches the best hook per concept, and
//! records why every other candidate was refused. The tracer keeps running
//! with whatever could be attached.
use std::{collections::HashMap, path::Path};

use anyhow::Context as _;
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use log::{info, warn};
use writeback_common::{
    BlockMembers, DirtierMembers, ExtentMembers, FieldSpec, FileMembers, Filter, FolioMembers,
    KernelMembers, MemberSpec, ScanMembers, TaskIoMembers, TaskMembers, TracepointLayout,
    block_members, cpu_time, members,
};

use super::{
    Tracer,
    btf::Btf as KernelBtf,
    cpu_batch::BatchFlush,
    members::member_spec,
    plan::{
        BLOCK_RQ_ISSUE, Candidate, DIRTY_FOLIO, DIRTY_INODE, EXT4_EXTENT_EVENT, EXT4_SCAN_FUNCTION,
        TASK_RUNTIME_STEAL_FIELD, TracepointAttach, candidates, is_generic,
    },
    preempt::{FENTRY_ON_RT, KPROBE_ON_RT, defer_kprobes, preempt_rt},
    privileges, tracefs,
    trials::{Trials, describe},
};
use wbscope_model::dirtier::AttributionMode;
use wbscope_model::map_memory::Report;
use wbscope_model::plan::{
    Concept, ConceptPlan, HookChoice, HookKind, OFF_BY_DEFAULT, OptIn, ProbePlan,
};

/// What the caller wants from the tracer.
#[derive(Clone, Debug, Default)]
pub struct TracerOptions {
    pub filter: Filter,
    /// Hook kinds never to use and optional hooks to attach
    /// (`--disable`, `--enable`).
    pub hooks: HookChoice,
}

/// The tracepoint candidate of one concept whose layouts were loaded.
struct Prepared {
    concept: Concept,
    label: String,
    attaches: &'static [TracepointAttach],
    layouts: Vec<Option<TracepointLayout>>,
    /// Per attach: whether its event is on this kernel (an optional one
    /// may not be).
    present: Vec<bool>,
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

/// The table in `slot`, resolved from the kernel's BTF at its first use:
/// `Ok` once it is, else why not (the candidate's rejection reason).
fn resolved<T>(
    slot: &mut Option<Result<T, String>>,
    vmlinux: &mut Option<Result<KernelBtf, String>>,
    resolve: fn(&KernelBtf) -> Result<T, String>,
) -> Result<(), String> {
    slot.get_or_insert_with(|| vmlinux_btf(vmlinux).and_then(resolve))
        .as_ref()
        .map(|_| ())
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
    for (slot, (strukt, name, signed)) in block_members::PATHS
        .iter()
        .enumerate()
        .take(block_members::LEDGER)
    {
        table.members[slot] = member_spec(btf, strukt, name, *signed)?;
    }
    // The device ledger's members, all or none: a kernel without one
    // (`bio.bi_bdev` is from 5.12) keeps the other block figures.
    let ledger: Result<Vec<MemberSpec>, String> = block_members::PATHS[block_members::LEDGER..]
        .iter()
        .map(|(strukt, name, signed)| member_spec(btf, strukt, name, *signed))
        .collect();
    if let Ok(specs) = ledger {
        table.members[block_members::LEDGER..].copy_from_slice(&specs);
        table.ledger = 1;
    }
    if let Ok(bit) = btf.enum_value("QUEUE_FLAG_STATS")
        && let Ok(bit) = u32::try_from(bit)
        && bit < BlockMembers::NO_STATS_BIT
    {
        table.stats_bit = bit;
    }
    // The cache-flush class of each completed request (`flush_class`).
    let bit = |name| {
        btf.enum_value(name)
            .ok()
            .and_then(|b| u32::try_from(b).ok())
            .filter(|&b| b < 32)
            .unwrap_or(BlockMembers::NO_STATS_BIT)
    };
    table.preflush_bit = bit("__REQ_PREFLUSH");
    table.fua_bit = bit("__REQ_FUA");
    table.meta_bit = bit("__REQ_META");
    Ok(table)
}

/// What the writepages programs read of the calling thread for on-CPU
/// time (`TaskMembers`): the run time, required, and the run queue's
/// clocks, all four or none (a kernel without CONFIG_FAIR_GROUP_SCHED has
/// no `cfs_rq.rq`; its figures then keep the stolen time in).
fn resolve_task_members(btf: &KernelBtf) -> Result<TaskMembers, String> {
    let [(s1, runtime), (s2, exec_start)] = TaskMembers::PATHS;
    let mut table = TaskMembers {
        sum_exec_runtime: member_spec(btf, s1, runtime, false)?,
        exec_start: member_spec(btf, s2, exec_start, false)?,
        ..TaskMembers::EMPTY
    };
    let uncounted: Result<Vec<MemberSpec>, String> = TaskMembers::UNCOUNTED_PATHS
        .iter()
        .map(|(strukt, name)| member_spec(btf, strukt, name, false))
        .collect();
    if let Ok([cfs_rq, rq, clock, clock_task]) = uncounted.as_deref() {
        table.cfs_rq = *cfs_rq;
        table.rq = *rq;
        table.rq_clock = *clock;
        table.rq_clock_task = *clock_task;
    }
    Ok(table)
}

/// What the write spans read to find a descriptor's file
/// (`FileMembers`): every member, or the spans cannot tell a regular
/// file from a socket.
fn resolve_file_members(btf: &KernelBtf) -> Result<FileMembers, String> {
    let specs: Vec<MemberSpec> = FileMembers::PATHS
        .iter()
        .map(|(strukt, name)| member_spec(btf, strukt, name, false))
        .collect::<Result<_, _>>()?;
    let [
        task_files,
        files_fdt,
        fdt_max_fds,
        fdt_fd,
        file_inode,
        file_flags,
        inode_mode,
        inode_ino,
        inode_sb,
        sb_dev,
    ] = specs[..]
    else {
        return Err("the file members did not resolve".to_string());
    };
    Ok(FileMembers {
        task_files,
        files_fdt,
        fdt_max_fds,
        fdt_fd,
        file_inode,
        file_flags,
        inode_mode,
        inode_ino,
        inode_sb,
        sb_dev,
        o_direct: libc::O_DIRECT as u64,
    })
}

/// What the BTF extent program reads of `struct ext4_map_blocks`.
fn resolve_extent_members(btf: &KernelBtf) -> Result<ExtentMembers, String> {
    let (strukt, name) = ExtentMembers::PATH;
    Ok(ExtentMembers {
        len: member_spec(btf, strukt, name, false)?,
    })
}

/// What the generic-call programs read of `struct folio`. Each member is
/// optional: without the head bit or `_nr_pages` every folio counts as
/// one page, which the folio-size histogram then shows.
fn resolve_folio_members(btf: &KernelBtf) -> FolioMembers {
    let mut table = FolioMembers::EMPTY;
    // memdesc_flags_t wraps the flags word since 6.18.
    table.flags = member_spec(btf, "folio", "flags.f", false)
        .or_else(|_| member_spec(btf, "folio", "flags", false))
        .unwrap_or(MemberSpec::ABSENT);
    table.nr_pages = member_spec(btf, "folio", "_nr_pages", false).unwrap_or(MemberSpec::ABSENT);
    table.index = member_spec(btf, "folio", "index", false).unwrap_or(MemberSpec::ABSENT);
    if let Ok(bit) = btf.enum_value("PG_head")
        && let Ok(bit) = u32::try_from(bit)
        && bit < 64
    {
        table.head_bit = bit;
    }
    table.page_shift = wbscope_model::units::page_shift();
    table
}

/// The `struct mpage_da_data` cursors the scan function hooks read. The
/// struct is private to fs/ext4/inode.c: it is in the ext4 module's split
/// BTF when ext4 is a module, in vmlinux's otherwise.
fn resolve_scan_members() -> Result<ScanMembers, String> {
    let module = KernelBtf::kernel_has_module_btf("ext4").then_some("ext4");
    let btf = KernelBtf::from_kernel(module).map_err(|e| format!("kernel BTF: {e}"))?;
    scan_members_from(&btf, wbscope_model::units::page_shift())
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

/// Entries of the DIRTY_SLOT map, a slot per CPU indexed by CPU number:
/// the highest possible CPU's number plus one; `None` keeps the object's
/// one entry (then only CPU 0 has a slot, and other CPUs' folios go
/// uncounted: the loader says so).
pub(super) fn cpu_slot_entries() -> Option<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").ok()?;
    highest_cpu(&text).map(|top| top + 1)
}

/// The highest CPU number of a kernel CPU list ("0-3,8-11\n": 11), which
/// lists its ranges in ascending order (`bitmap_print_to_pagebuf()`).
fn highest_cpu(list: &str) -> Option<u32> {
    list.trim().rsplit([',', '-']).next()?.parse().ok()
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
        // The kernel's BTF, parsed once at its first use: by the memory
        // statement (6.4+) or by phase 1's member tables.
        let mut vmlinux: Option<Result<KernelBtf, String>> = None;
        // The maps' sizes for this host and these options, and what they
        // will take, said before anything is made or parsed (memory.rs).
        let mut memory = super::memory::plan_with_btf(options, None, || {
            vmlinux_btf(&mut vmlinux)
                .ok()
                .and_then(super::memory::local_storage_size)
        })?;
        if !memory.within_bound() {
            warn!(
                "the tracer's maps take {:.1} MiB here, over the {} MiB they keep to by default \
                 (wbscope probes lists them)",
                memory.total_bytes as f64 / f64::from(1 << 20),
                memory.bound_bytes >> 20
            );
        }
        if memory.report != Report::Charged
            && let Some((cgroup, room)) = super::memory::cgroup_room()
            && memory.total_bytes > room
        {
            anyhow::bail!(
                "the tracer's maps need {} bytes of kernel memory, which the kernel charges to \
                 this process's memory cgroup ({cgroup}), and it has {room} left under its \
                 limit: raise the limit (MemoryMax= in a systemd unit) by at least {} bytes; \
                 nothing was loaded (`wbscope probes --cpus N` states the maps' memory without \
                 loading them)",
                memory.total_bytes,
                memory.total_bytes - room
            );
        }

        // Phase 1, before load (globals are fixed at load): tracepoint
        // layouts from tracefs, struct members from BTF. Per concept, the
        // first classic tracepoint candidate that can work is prepared;
        // every candidate refused here keeps its reason.
        let mut members: Option<Result<KernelMembers, String>> = None;
        let mut scan_members: Option<Result<ScanMembers, String>> = None;
        let mut block_members: Option<Result<BlockMembers, String>> = None;
        let mut task_members: Option<Result<TaskMembers, String>> = None;
        let mut file_members: Option<Result<FileMembers, String>> = None;
        let mut extent_members: Option<Result<ExtentMembers, String>> = None;
        let mut folio_members: Option<FolioMembers> = None;
        let mut dirtier_members: Option<Result<DirtierMembers, String>> = None;
        let mut refused: HashMap<(Concept, String), String> = HashMap::new();
        let mut prepared: Vec<Prepared> = Vec::new();
        for &concept in &Concept::ALL {
            let mut have_tracepoint = false;
            for candidate in candidates_of(concept) {
                if candidate
                    .kind()
                    .is_some_and(|k| options.hooks.disabled.contains(&k))
                {
                    continue;
                }
                if let Some((opt_in, why)) = candidate.opt_in()
                    && !options.hooks.enabled.contains(&opt_in)
                {
                    refused.insert(
                        (concept, candidate.label()),
                        format!("{OFF_BY_DEFAULT}: {why}; --enable {opt_in} attaches it"),
                    );
                    continue;
                }
                // The write spans read the descriptor's file and the
                // thread's run clock (writeback-ebpf writes.rs).
                if concept == Concept::Writes {
                    let files = resolved(&mut file_members, &mut vmlinux, resolve_file_members);
                    let clock = resolved(&mut task_members, &mut vmlinux, resolve_task_members);
                    if let Err(reason) = files.and(clock) {
                        refused.insert((concept, candidate.label()), reason);
                        continue;
                    }
                }
                match &candidate {
                    Candidate::Tracepoints(attaches) if !have_tracepoint => {
                        match read_layouts(&tracefs_root, attaches) {
                            Ok((layouts, present, fields)) => {
                                have_tracepoint = true;
                                prepared.push(Prepared {
                                    concept,
                                    label: candidate.label(),
                                    attaches,
                                    layouts,
                                    present,
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
                        if let Err(reason) =
                            resolved(&mut block_members, &mut vmlinux, resolve_block_members)
                        {
                            refused.insert((concept, candidate.label()), reason);
                        }
                    }
                    // The extent program reads the inode (KernelMembers)
                    // and ext4's map.
                    Candidate::BtfPrograms { attaches, .. }
                        if attaches.iter().any(|a| a.target == EXT4_EXTENT_EVENT) =>
                    {
                        let inode = resolved(&mut members, &mut vmlinux, resolve_members);
                        let map =
                            resolved(&mut extent_members, &mut vmlinux, resolve_extent_members);
                        if let Err(reason) = inode.and(map) {
                            refused.insert((concept, candidate.label()), reason);
                        }
                    }
                    // The generic-call programs read folios too.
                    Candidate::BtfPrograms { attaches, .. } if is_generic(attaches) => {
                        if let Err(reason) = resolved(&mut members, &mut vmlinux, resolve_members) {
                            refused.insert((concept, candidate.label()), reason);
                        } else if folio_members.is_none()
                            && let Ok(btf) = vmlinux_btf(&mut vmlinux)
                        {
                            folio_members = Some(resolve_folio_members(btf));
                        }
                    }
                    // The dirty-time programs read the inode and its
                    // writeback cgroup; the per-folio one folios and
                    // mappings too (`struct folio` is 5.16+).
                    Candidate::BtfPrograms { attaches, .. }
                        if attaches
                            .iter()
                            .any(|a| a.target == DIRTY_FOLIO || a.target == DIRTY_INODE) =>
                    {
                        let per_folio = attaches.iter().any(|a| a.target == DIRTY_FOLIO);
                        match dirtier_members.get_or_insert_with(|| {
                            vmlinux_btf(&mut vmlinux).and_then(super::dirtiers::resolve_members)
                        }) {
                            Err(reason) => {
                                refused.insert((concept, candidate.label()), reason.clone());
                            }
                            Ok(table) if per_folio => {
                                if let Err(reason) = super::dirtiers::has_folio(table) {
                                    refused.insert((concept, candidate.label()), reason);
                                }
                            }
                            Ok(_) => {}
                        }
                    }
                    Candidate::BtfPrograms { .. } => {
                        if let Err(reason) = resolved(&mut members, &mut vmlinux, resolve_members) {
                            refused.insert((concept, candidate.label()), reason);
                        }
                    }
                    Candidate::WithCall { .. } => {
                        if let Err(reason) =
                            resolved(&mut task_members, &mut vmlinux, resolve_task_members)
                        {
                            refused.insert((concept, candidate.label()), reason);
                        }
                    }
                    _ => {}
                }
            }
        }

        // The per-process counts' members (taskio.rs), for the default
        // attribution only: the per-folio one counts pages itself.
        let task_io_members = if options.hooks.enabled.contains(&OptIn::DirtyFolio) {
            Err("the per-folio attribution (--enable dirty_folio) counts its own pages".to_string())
        } else {
            vmlinux_btf(&mut vmlinux).and_then(super::taskio::resolve_members)
        };
        // The BTF-typed programs read the thread's name and cgroup id
        // from the task where BTF gives their place and the kernel hands
        // them the task (`bpf_get_current_task_btf()`, 5.11), the
        // helpers otherwise: on 5.10 a tp_btf program reaching that call
        // is refused.
        let task_btf = super::object::current_task_btf_usable();
        let task_comm = task_btf
            .then(|| {
                vmlinux_btf(&mut vmlinux)
                    .and_then(super::members::comm_spec)
                    .ok()
            })
            .flatten()
            .unwrap_or(MemberSpec::ABSENT);
        let task_cgroup = task_btf
            .then(|| {
                vmlinux_btf(&mut vmlinux)
                    .and_then(super::members::cgroup_specs)
                    .ok()
            })
            .flatten()
            .unwrap_or([MemberSpec::ABSENT; 4]);
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
        // The dirty levels are copied as words, decoded in userspace.
        let global_dirty_layout = prepared
            .iter()
            .flat_map(|c| c.attaches.iter().zip(&c.layouts))
            .find_map(|(a, layout)| a.copies_words.then_some(*layout).flatten())
            .unwrap_or(TracepointLayout::EMPTY);
        let field_offsets = offsets_json(&prepared, members.as_ref().and_then(|m| m.as_ref().ok()));
        let kernel_members = members.and_then(Result::ok).unwrap_or_default();
        loader.override_global("KERNEL_MEMBERS", &kernel_members, true);
        loader.override_global("TASK_COMM", &task_comm, true);
        loader.override_global("TASK_CGROUP", &task_cgroup, true);
        let scan_members = scan_members.and_then(Result::ok).unwrap_or_default();
        loader.override_global("SCAN_MEMBERS", &scan_members, true);
        let block_members = block_members
            .and_then(Result::ok)
            .unwrap_or(BlockMembers::EMPTY);
        loader.override_global("BLOCK_MEMBERS", &block_members, true);
        let task_members = task_members
            .and_then(Result::ok)
            .unwrap_or(TaskMembers::EMPTY);
        loader.override_global("TASK_MEMBERS", &task_members, true);
        let file_members = file_members
            .and_then(Result::ok)
            .unwrap_or(FileMembers::EMPTY);
        loader.override_global("FILE_MEMBERS", &file_members, true);
        let steal_taken_out = task_members.cfs_rq.present != 0;
        let extent_members = extent_members
            .and_then(Result::ok)
            .unwrap_or(ExtentMembers::EMPTY);
        loader.override_global("EXTENT_MEMBERS", &extent_members, true);
        let folio_members = folio_members.unwrap_or(FolioMembers::EMPTY);
        loader.override_global("FOLIO_MEMBERS", &folio_members, true);
        let dirtier_members = dirtier_members
            .and_then(Result::ok)
            .unwrap_or(DirtierMembers::EMPTY);
        loader.override_global("DIRTIER_MEMBERS", &dirtier_members, true);
        loader.override_global(
            "TASK_IO_MEMBERS",
            task_io_members.as_ref().unwrap_or(&TaskIoMembers::EMPTY),
            true,
        );
        loader.override_global("FILTER", &options.filter, true);
        for m in memory.maps.iter().filter(|m| m.sized.is_some()) {
            loader.map_max_entries(&m.def.name, m.def.max_entries);
        }
        let mut ebpf = super::object::load(&mut loader)?;
        let measured = super::memory::measured(&ebpf);
        memory.set_measured(|name| measured.get(name).copied());
        // After the maps' memory is read: these take the batches' state
        // maps.
        let call_flush = BatchFlush::load::<writeback_common::CallBatch>(&mut ebpf)?;
        let dirtying_flush = BatchFlush::load::<writeback_common::DirtyingBatch>(&mut ebpf)?;
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
        let mut trials = Trials::new(&tracefs_root);
        let mut attached_programs = Vec::new();
        let mut concept_plans: Vec<ConceptPlan> = Vec::new();
        let mut cpu_method = cpu_time::OFF;
        let rt = preempt_rt();
        let fentry_skips = rt.then_some(FENTRY_ON_RT);
        for &concept in &Concept::ALL {
            let mut plan = ConceptPlan::new(concept);
            let mut candidates = candidates_of(concept);
            let kprobes_deferred = rt && defer_kprobes(concept, &mut candidates);
            for (i, candidate) in candidates.iter().enumerate() {
                let label = candidate.label();
                if let Some(kind) = candidate.kind()
                    && options.hooks.disabled.contains(&kind)
                {
                    plan.reject(candidate.label(), format!("disabled with --disable {kind}"));
                    continue;
                }
                if candidate.kind() == Some(HookKind::Fentry)
                    && let Some(why) = fentry_skips
                {
                    plan.reject(candidate.label(), why.to_string());
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
                    Candidate::WithCall { fields, .. } => {
                        match concept_plans
                            .iter()
                            .find(|p| p.concept == Concept::WritepagesCall)
                            .and_then(|p| p.kind)
                        {
                            Some(_) => Ok(fields
                                .iter()
                                .map(|f| f.to_string())
                                .chain(
                                    steal_taken_out.then(|| TASK_RUNTIME_STEAL_FIELD.to_string()),
                                )
                                .collect()),
                            None => Err("the writepages call has no hook".to_string()),
                        }
                    }
                    Candidate::Procfs { fields, .. } => {
                        Ok(fields.iter().map(|f| f.to_string()).collect())
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
                            Some(p) => attach_all(&mut ebpf, attaches, &p.present)
                                .map(|()| {
                                    attached_programs.extend(
                                        attaches
                                            .iter()
                                            .zip(&p.present)
                                            .filter(|(_, here)| **here)
                                            .map(|(a, _)| a.program),
                                    );
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
                        if kprobes_deferred && candidate.kind() == Some(HookKind::TpBtf) {
                            for later in candidates[i + 1..]
                                .iter()
                                .filter(|c| c.kind() == Some(HookKind::Kprobe))
                            {
                                plan.reject(later.label(), KPROBE_ON_RT.to_string());
                            }
                        }
                        plan.hook = Some(label);
                        plan.kind = match candidate {
                            Candidate::WithCall { .. } => concept_plans
                                .iter()
                                .find(|p| p.concept == Concept::WritepagesCall)
                                .and_then(|p| p.kind),
                            _ => candidate.kind(),
                        };
                        plan.fields = fields;
                        plan.fires = Some(candidate.fires().to_string());
                        if concept == Concept::CpuTime {
                            cpu_method = match candidate {
                                Candidate::WithCall { .. } => cpu_time::TASK_RUNTIME,
                                _ => cpu_time::SCHED_SWITCH,
                            };
                        }
                        break;
                    }
                    Err(reason) => plan.reject(candidate.label(), reason),
                }
            }
            concept_plans.push(plan);
        }
        let retprobes = trials.into_retprobes();
        let plan = ProbePlan {
            kernel: wbscope_sys::kernel_release(),
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

        if cpu_method != cpu_time::OFF {
            let mut config: Array<_, u32> =
                Array::try_from(ebpf.map_mut("CONFIG").context("CONFIG map missing")?)?;
            config
                .set(0, cpu_method, 0)
                .context("enabling on-CPU accounting")?;
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
        let global_thresh = Array::try_from(
            ebpf.take_map("GLOBAL_THRESH")
                .context("GLOBAL_THRESH map missing")?,
        )
        .context("GLOBAL_THRESH map")?;
        let task_counts = match task_io_members {
            Ok(_) if AttributionMode::of(&plan) == Some(AttributionMode::PerInode) => {
                super::taskio::TaskCounts::attach(&mut ebpf)
            }
            Ok(_) => Err("the dirtier hook is not the per-inode one".to_string()),
            Err(e) => Err(e),
        };
        match &task_counts {
            Ok(_) => {
                info!("per-process counts: task iterator and sched:sched_process_exit");
                attached_programs.extend(["task_io_iter", "task_io_exit"]);
            }
            Err(why) => info!("per-process counts: /proc/PID/io while privileged ({why})"),
        }
        let dirtyings = RingBuf::try_from(
            ebpf.take_map("DIRTYINGS")
                .context("DIRTYINGS ring buffer missing")?,
        )
        .context("DIRTYINGS is not a ring buffer")?;
        let dirtyings_fd = std::os::fd::AsRawFd::as_raw_fd(&dirtyings);
        let sampling = Array::try_from(ebpf.take_map("SAMPLING").context("SAMPLING map missing")?)
            .context("SAMPLING map")?;
        let disks = super::diskstats::DiskStatsFile::open()?;
        let ledger = ledger_map(&mut ebpf, &plan, block_members.ledger == 1);
        if let Err(why) = &ledger {
            info!("device ledger: bytes by class unmeasured ({why})");
        }
        let journal = plan
            .attached(Concept::Durability)
            .then(|| super::journal::JournalHandles::take(&mut ebpf))
            .transpose()?;
        // Only the per-inode mode's programs (tp_btf_dirty_inode, the
        // classic dirty_inode) keep dirtyings in a CPU's batch.
        let keeps_dirtyings = AttributionMode::of(&plan) == Some(AttributionMode::PerInode);
        let tracer = Tracer {
            journal: std::sync::Mutex::new(journal),
            dirtyings: std::sync::Mutex::new(super::dirtiers::Dirtyings::new(
                dirtyings,
                keeps_dirtyings.then_some(dirtying_flush),
                task_counts,
            )),
            dirtyings_fd,
            sampling: std::sync::Mutex::new(sampling),
            ebpf,
            stats,
            global_thresh: std::sync::Mutex::new(global_thresh),
            plan,
            memory,
            field_offsets,
            global_dirty_layout,
            attached_programs,
            vmstat: super::VmStatFile::open()?,
            disks,
            fs_names: std::sync::Mutex::new(super::mounts::FsNames::open()),
            ledger,
            _stats_fd: stats_fd,
            call_flush: Some(call_flush),
            retprobes: std::sync::Mutex::new(retprobes),
            logger,
        };
        // Before the first pause, not an interval later.
        tracer.set_global_thresholds(&tracer.vmstat.read()?)?;
        Ok(tracer)
    }
}

/// `DEVICE_LEDGER`, with the journals put in, where the block programs
/// count it; else why not.
fn ledger_map(
    ebpf: &mut Ebpf,
    plan: &ProbePlan,
    btf_members: bool,
) -> Result<super::ledger::LedgerMaps, String> {
    let kind = plan
        .concept(Concept::DeviceIo)
        .filter(|c| c.is_attached())
        .and_then(|c| c.kind);
    match kind {
        _ if plan.devices_from_diskstats() => {
            Err("the devices come from /proc/diskstats: --enable device_io".to_string())
        }
        Some(HookKind::TpBtf) if !btf_members => Err(
            "the kernel's BTF lacks a member the bio program reads (bio.bi_bdev is from Linux 5.12)"
                .to_string(),
        ),
        Some(HookKind::TpBtf | HookKind::Tracepoint) => {
            let mut map = ebpf
                .take_map("DEVICE_LEDGER")
                .ok_or_else(|| "DEVICE_LEDGER map missing".to_string())?;
            let found = super::ledger::put_journals(&mut map).map_err(|e| format!("{e:#}"))?;
            info!("device ledger: {found} journal(s) placed");
            let direct = ebpf
                .take_map("DIRECT_BYTES")
                .ok_or_else(|| "DIRECT_BYTES map missing".to_string())?;
            Ok(super::ledger::LedgerMaps {
                classes: map,
                direct,
                pages: kind == Some(HookKind::TpBtf),
            })
        }
        _ => Err("no block hook attached".to_string()),
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

/// The layouts of a candidate's attaches, whether each event is here,
/// and the fields they give.
type Layouts = (Vec<Option<TracepointLayout>>, Vec<bool>, Vec<String>);

/// Reads the formats of every attach of a candidate. Errors are the
/// rejection reason; an optional event the kernel lacks is left out.
fn read_layouts(root: &Path, attaches: &[TracepointAttach]) -> Result<Layouts, String> {
    let mut layouts = Vec::new();
    let mut present = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    for a in attaches {
        let format = match tracefs::read_format(root, a.system, a.event) {
            Ok(f) => f,
            Err(e) if a.optional => {
                warn!("tracepoint {}:{} left out: {e}", a.system, a.event);
                layouts.push(None);
                present.push(false);
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let (mut layout, mut missing) = format
            .layout(a.fields)
            .map_err(|e| format!("{}:{}: {e:#}", a.system, a.event))?;
        if a.copies_words {
            // The program copies words and cannot read past them.
            for (name, spec) in a.fields.iter().zip(layout.fields.iter_mut()) {
                if spec.is_present() && writeback_common::dirty::record_word(spec).is_none() {
                    *spec = FieldSpec::ABSENT;
                    missing.push((*name).to_string());
                }
            }
        }
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
        present.push(true);
    }
    Ok((layouts, present, fields))
}

fn attach_all(
    ebpf: &mut Ebpf,
    attaches: &[TracepointAttach],
    present: &[bool],
) -> anyhow::Result<()> {
    for (a, _) in attaches.iter().zip(present).filter(|(_, here)| **here) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An optional event the kernel lacks is left out of the candidate; a
    /// required one refuses it.
    #[test]
    fn an_absent_optional_event_is_left_out() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("events/syscalls/sys_exit_fsync");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("format"),
            "name: sys_exit_fsync\nID: 1\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n",
        )
        .unwrap();
        let here = crate::plan::TracepointAttach {
            program: "sys_exit_fsync",
            system: "syscalls",
            event: "sys_exit_fsync",
            layout_global: Some("SYS_EXIT_FSYNC_LAYOUT"),
            fields: &["ret"],
            required: &["ret"],
            copies_words: false,
            optional: false,
        };
        let absent = crate::plan::TracepointAttach {
            program: "xfs_fsync",
            system: "xfs",
            event: "xfs_file_fsync",
            optional: true,
            ..here
        };
        let (layouts, present, fields) = read_layouts(root.path(), &[here, absent]).unwrap();
        assert_eq!(present, vec![true, false]);
        assert!(layouts[0].is_some() && layouts[1].is_none());
        assert_eq!(fields, vec!["ret".to_string()]);
        let required = crate::plan::TracepointAttach {
            optional: false,
            ..absent
        };
        assert!(read_layouts(root.path(), &[here, required]).is_err());
    }

    #[test]
    fn highest_cpu_of_kernel_cpu_lists() {
        assert_eq!(highest_cpu("0\n"), Some(0));
        assert_eq!(highest_cpu("0-1\n"), Some(1));
        assert_eq!(highest_cpu("0-3,8-11\n"), Some(11));
        assert_eq!(highest_cpu("0,2,4"), Some(4));
        assert_eq!(highest_cpu(""), None);
        assert_eq!(highest_cpu("x-y"), None);
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
