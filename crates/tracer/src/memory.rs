//! The maps' kernel memory, stated before anything is loaded: the
//! object's map definitions with the entries this host gives them
//! ([`map_sizes`]), priced by the model's formulas
//! (`wbscope_model::map_memory`) at this host's possible CPUs or another
//! count; and what the kernel says each loaded map holds (`memlock:` in
//! its fdinfo), to hold the statement to.
use std::{
    collections::HashMap,
    io,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::Context as _;
use aya::Ebpf;
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_map_type};
use wbscope_model::{
    map_memory::{MapDef, MapKind, MemoryPlan, Report, StructSizes},
    plan::{HookKind, OptIn},
};

use super::{TracerOptions, batch::sys_bpf};

/// What of this host decides the maps' sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostShape {
    /// CPUs the kernel allocates per-CPU memory for
    /// (`num_possible_cpus()`: /sys/devices/system/cpu/possible).
    pub possible_cpus: u32,
    /// The highest possible CPU's number plus one: `DIRTY_SLOT` has a
    /// slot per CPU number.
    pub cpu_slots: u32,
    /// /proc/sys/kernel/pid_max: `IN_CALL` has a byte per thread id.
    pub pid_max: u32,
    /// Whether the kernel has kprobes (their argument map is made
    /// only then).
    pub kprobes: bool,
    /// Whether tracing programs may use task storage (else its map is
    /// an LRU hash, `object::task_storage_usable`).
    pub task_storage: bool,
}

/// Where the kernel lists its possible CPUs.
const POSSIBLE: &str = "/sys/devices/system/cpu/possible";
/// The most `pid_max` can be on 64-bit (`PID_MAX_LIMIT`,
/// include/linux/threads.h), which systemd sets: assumed when
/// /proc/sys/kernel/pid_max cannot be read.
const PID_MAX_LIMIT: u32 = 4 << 20;

impl HostShape {
    /// This host, read now.
    pub fn this_host() -> anyhow::Result<HostShape> {
        let list =
            std::fs::read_to_string(POSSIBLE).with_context(|| format!("reading {POSSIBLE}"))?;
        let (possible_cpus, cpu_slots) = cpu_list(&list)
            .with_context(|| format!("{POSSIBLE} is not a CPU list: {:?}", list.trim()))?;
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(PID_MAX_LIMIT);
        Ok(HostShape {
            possible_cpus,
            cpu_slots,
            pid_max,
            kprobes: std::path::Path::new(super::trials::KPROBE_PMU).exists(),
            task_storage: super::object::task_storage_usable(),
        })
    }

    /// This host with `cpus` possible CPUs instead (numbered from 0).
    pub fn with_cpus(self, cpus: u32) -> HostShape {
        HostShape {
            possible_cpus: cpus,
            cpu_slots: cpus,
            ..self
        }
    }
}

/// The number of CPUs in a kernel CPU list ("0-3,8-11\n": 8) and the
/// highest one's number plus one (12).
fn cpu_list(list: &str) -> Option<(u32, u32)> {
    let mut count = 0u32;
    let mut top = 0u32;
    for range in list.trim().split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => {
                let n = range.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if hi < lo {
            return None;
        }
        count = count.checked_add(hi - lo + 1)?;
        top = top.max(hi.checked_add(1)?);
    }
    Some((count, top))
}

/// The entries of each map whose object size is not what this host and
/// these options need, with why. Maps serving only hooks that will not
/// attach get one entry: the kernel makes every map of the object at
/// load, used or not.
pub(crate) fn map_sizes(
    options: &TracerOptions,
    host: &HostShape,
) -> Vec<(&'static str, u32, String)> {
    let enabled = |o: OptIn| options.hooks.enabled.contains(&o);
    let mut out = vec![
        (
            "DIRTY_SLOT",
            host.cpu_slots.max(1),
            "a slot per CPU number".to_string(),
        ),
        (
            "IN_CALL",
            host.pid_max.div_ceil(8).max(1),
            format!("a byte per thread id up to pid_max {}", host.pid_max),
        ),
    ];
    if !enabled(OptIn::DirtyFolio) {
        out.push(("DIRTIERS", 1, "unused without --enable dirty_folio".into()));
    }
    if enabled(OptIn::DirtyFolio) {
        out.push(("FOLLOWED", 1, "unused with --enable dirty_folio".into()));
    }
    if !enabled(OptIn::DeviceIo) {
        out.push(("RQ_START", 1, "unused without --enable device_io".into()));
        out.push((
            "DEVICE_LEDGER",
            1,
            "unused without --enable device_io".into(),
        ));
        out.push((
            "DIRECT_BYTES",
            1,
            "unused without --enable device_io".into(),
        ));
    }
    if !enabled(OptIn::Writes) {
        out.push(("WRITING", 1, "unused without --enable writes".into()));
    }
    if options.filter.tgid == 0 && options.filter.cgroup_id == 0 {
        out.push((
            "FILTER_DIRTIED",
            1,
            "unused without --pid or --cgroup".into(),
        ));
    }
    if !host.task_storage {
        out.push((
            super::object::TASK_STORAGE_MAP,
            super::object::FALLBACK_THREADS,
            "an LRU hash of threads: tracing programs have no task storage before Linux 5.12"
                .into(),
        ));
    }
    if !host.kprobes || options.hooks.disabled.contains(&HookKind::Kprobe) {
        out.push(("KPROBE_ARGS", 1, "unused without kprobes".into()));
    }
    out
}

/// The object's maps as they will be made, each with why its size is not
/// the object's.
fn map_defs(
    options: &TracerOptions,
    host: &HostShape,
) -> anyhow::Result<Vec<(MapDef, Option<String>)>> {
    let bytes = super::object::object_for(host.task_storage)?;
    let object =
        aya_obj::Object::parse(bytes.bytes()).context("parsing the embedded eBPF object")?;
    let sizes = map_sizes(options, host);
    let mut out: Vec<(MapDef, Option<String>)> = object
        .maps
        .iter()
        .map(|(name, map)| {
            let sized = sizes.iter().find(|(n, _, _)| n == name);
            (
                MapDef {
                    name: name.clone(),
                    kind: MapKind::from_type(map.map_type()),
                    key_size: map.key_size(),
                    value_size: map.value_size(),
                    max_entries: sized.map_or(map.max_entries(), |&(_, n, _)| n),
                },
                sized.map(|(_, _, why)| why.clone()),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// The maps keyed by thread that hold a thread only while it is inside a
/// call (a writeback call, an fsync, a scan pass, off CPU in a call):
/// what [`fit`] shrinks when the maps would pass their bound. A thread
/// they cannot hold is counted (`inflight_full`, `map_full`).
const IN_FLIGHT: &[&str] = &[
    "GENERIC",
    "SYNCING",
    "WRITING",
    "OFFCPU_SINCE",
    "SCAN_ARGS",
    "SAMPLED_NR",
    "KPROBE_ARGS",
];

/// The fewest threads in a call at once [`fit`] leaves room for.
const IN_FLIGHT_FLOOR: u32 = 4096;

/// The plan for `defs`, with the in-flight maps halved (down to
/// [`IN_FLIGHT_FLOOR`] entries) while the whole is over its bound, each
/// saying so.
fn fit(
    mut defs: Vec<(MapDef, Option<String>)>,
    cpus: u32,
    report: Report,
    structs: StructSizes,
) -> MemoryPlan {
    loop {
        let plan = MemoryPlan::new(defs.clone(), cpus, report, structs);
        if plan.within_bound() {
            return plan;
        }
        let mut shrunk = false;
        for (def, sized) in defs.iter_mut() {
            if IN_FLIGHT.contains(&def.name.as_str()) && def.max_entries > IN_FLIGHT_FLOOR {
                def.max_entries = (def.max_entries / 2).max(IN_FLIGHT_FLOOR);
                *sized = Some(format!(
                    "shrunk to keep the maps within {} MiB: {} threads in a call at once",
                    plan.bound_bytes >> 20,
                    def.max_entries
                ));
                shrunk = true;
            }
        }
        if !shrunk {
            return plan;
        }
    }
}

/// The statement for this host, or for `cpus` possible CPUs: with the
/// running kernel's report and struct sizes where it can make maps (root),
/// else 6.4+'s report with [`StructSizes::DEFAULT`]. Its maps' entries are
/// the ones to load them with.
pub fn memory_plan(options: &TracerOptions, cpus: Option<u32>) -> anyhow::Result<MemoryPlan> {
    plan_with_btf(options, cpus, || {
        crate::btf::Btf::from_kernel(None)
            .ok()
            .and_then(|btf| local_storage_size(&btf))
    })
}

/// [`memory_plan`], asking `local_storage` for [`local_storage_size`]
/// only if the kernel's report needs it: the tracer's attach answers from
/// the BTF it parses for its programs anyway (a parse is about 12 ms
/// here).
pub(crate) fn plan_with_btf(
    options: &TracerOptions,
    cpus: Option<u32>,
    local_storage: impl FnOnce() -> Option<u64>,
) -> anyhow::Result<MemoryPlan> {
    let host = HostShape::this_host()?;
    let host = cpus.map_or(host, |c| host.with_cpus(c));
    let version = wbscope_sys::kernel_version();
    let report = version.map_or(Report::MemUsage, |(a, b)| Report::of_kernel(a, b));
    let locks = version.map_or(StructSizes::DEFAULT.hash_locks_per_cpu, |(a, b)| {
        StructSizes::hash_locks_of_kernel(a, b)
    });
    let structs = match measure_structs(report, locks, local_storage) {
        Ok(s) => s,
        Err(e) => {
            log::warn!(
                "cannot measure this kernel's map structs ({e:#}): the maps' memory is stated \
                 with {}",
                StructSizes::DEFAULT.source
            );
            StructSizes::DEFAULT
        }
    };
    Ok(fit(
        map_defs(options, &host)?,
        host.possible_cpus,
        report,
        structs,
    ))
}

/// Room left in this process's memory cgroup, which since 5.11 is charged
/// for the maps too (`__GFP_ACCOUNT`, "bpf: memcg-based memory accounting
/// for bpf maps"): the least, over the cgroup and its ancestors, of the
/// limit less what is charged and not page cache (which the kernel
/// reclaims to make room); cgroup v2's `memory.max`, `memory.current` and
/// `memory.stat`'s `file`, or v1's `memory.limit_in_bytes`,
/// `memory.usage_in_bytes` and `cache`. `None` without a limit. With the
/// limiting cgroup's directory.
pub fn cgroup_room() -> Option<(String, u64)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    let mount_of = |v2: bool| {
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ok = if v2 {
                f.get(2) == Some(&"cgroup2")
            } else {
                f.get(2) == Some(&"cgroup")
                    && f.get(3)
                        .is_some_and(|o| o.split(',').any(|o| o == "memory"))
            };
            ok.then(|| f[1].to_string())
        })
    };
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let v2 = id == "0" && controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "memory") {
            continue;
        }
        let Some(root) = mount_of(v2) else { continue };
        let (max, current, file) = if v2 {
            ("memory.max", "memory.current", "file ")
        } else {
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "cache ")
        };
        let mut best: Option<(String, u64)> = None;
        let mut dir = std::path::PathBuf::from(format!("{root}{path}"));
        loop {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            let limit = read(max).and_then(|t| t.trim().parse::<u64>().ok());
            // v2 says "max"; v1 a page-rounded i64::MAX.
            if let Some(limit) = limit.filter(|&l| l < 1 << 62) {
                let used = read(current)
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let cache = read("memory.stat")
                    .and_then(|t| {
                        t.lines()
                            .find_map(|l| l.strip_prefix(file))
                            .and_then(|v| v.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                let room = limit.saturating_sub(used.saturating_sub(cache));
                if best.as_ref().is_none_or(|b| room < b.1) {
                    best = Some((dir.display().to_string(), room));
                }
            }
            if dir == std::path::Path::new(&root) || !dir.pop() {
                break;
            }
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

/// `memlock:` of every map of `ebpf`, by name, read from the fdinfo of
/// its descriptor.
pub(crate) fn measured(ebpf: &Ebpf) -> HashMap<String, u64> {
    ebpf.maps()
        .filter_map(|(name, map)| {
            let fd = match map {
                aya::maps::Map::Array(d)
                | aya::maps::Map::PerCpuArray(d)
                | aya::maps::Map::HashMap(d)
                | aya::maps::Map::LruHashMap(d)
                | aya::maps::Map::PerCpuHashMap(d)
                | aya::maps::Map::PerCpuLruHashMap(d)
                | aya::maps::Map::RingBuf(d)
                // Task storage: a type aya 0.14 has no wrapper for.
                | aya::maps::Map::Unsupported(d) => d.fd().as_fd().as_raw_fd(),
                _ => return None,
            };
            Some((name.to_string(), memlock(fd).ok()?))
        })
        .collect()
}

/// The `memlock:` line of descriptor `fd`'s fdinfo.
fn memlock(fd: i32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("memlock:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no memlock line"))
}

/// A new map of `kind` (`map_flags` 0, as the object's).
pub(crate) fn create_map(
    kind: bpf_map_type,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: all-zero is a valid bpf_attr.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // The union member this command reads.
    attr.__bindgen_anon_1.map_type = kind as u32;
    attr.__bindgen_anon_1.key_size = key_size;
    attr.__bindgen_anon_1.value_size = value_size;
    attr.__bindgen_anon_1.max_entries = max_entries;
    // SAFETY: attr set up for the command, no pointers in it.
    let fd = unsafe { sys_bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `sizeof(struct bpf_local_storage_map)` (task storage) from the
/// kernel's BTF: making such a map to measure it, as the others are,
/// needs a BTF blob for its key and value.
pub(crate) fn local_storage_size(vmlinux: &crate::btf::Btf) -> Option<u64> {
    vmlinux.struct_size("bpf_local_storage_map").ok()
}

/// The running kernel's struct sizes behind a map, from three maps of
/// one entry each: their `memlock:` less what the formula adds for the
/// entry (`wbscope_model::map_memory`), on 6.4+; 5.11-6.3's report uses
/// none, and 5.10's one fixed size.
fn measure_structs(
    report: Report,
    hash_locks_per_cpu: u64,
    local_storage: impl FnOnce() -> Option<u64>,
) -> anyhow::Result<StructSizes> {
    match report {
        Report::Footprint => {
            return Ok(StructSizes {
                source: "unused by this kernel's report",
                ..StructSizes::DEFAULT
            });
        }
        // Rounded to pages, 5.10's report hides them; the one it counts
        // is fixed.
        Report::Charged => return Ok(StructSizes::LINUX_5_10),
        Report::MemUsage => {}
    }
    let host = HostShape::this_host()?;
    let local_storage = local_storage().unwrap_or(StructSizes::DEFAULT.local_storage);
    let zero = StructSizes {
        htab: 0,
        array: 0,
        ringbuf: 0,
        local_storage,
        hash_locks_per_cpu,
        source: "measured",
    };
    let mut sizes = zero;
    for (kind, model_kind, key, value, entries) in [
        (bpf_map_type::BPF_MAP_TYPE_HASH, MapKind::Hash, 4, 8, 1),
        (bpf_map_type::BPF_MAP_TYPE_ARRAY, MapKind::Array, 4, 8, 1),
        (
            bpf_map_type::BPF_MAP_TYPE_RINGBUF,
            MapKind::Ringbuf,
            0,
            0,
            4096,
        ),
    ] {
        let fd = create_map(kind, key, value, entries).context("creating a one-entry map")?;
        let kernel = memlock(fd.as_raw_fd()).context("reading its fdinfo")?;
        let def = MapDef {
            name: String::new(),
            kind: model_kind,
            key_size: key,
            value_size: value,
            max_entries: entries,
        };
        let rest = wbscope_model::map_memory::map_bytes(&def, host.possible_cpus, report, &zero);
        let own = kernel.checked_sub(rest).with_context(|| {
            format!("the kernel says {kernel} bytes for a one-entry {model_kind:?} map, under the formula's {rest}")
        })?;
        match model_kind {
            MapKind::Hash => sizes.htab = own,
            MapKind::Array => sizes.array = own,
            _ => sizes.ringbuf = own,
        }
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every opt-in's maps at full size, the in-flight maps give way,
    /// and say so, down to their floor; past it the plan stays over.
    #[test]
    fn over_the_bound_the_in_flight_maps_shrink_and_say_so() {
        let plan_with = |pid_max, enabled: &[OptIn]| {
            let mut options = TracerOptions::default();
            options.hooks.enabled = enabled.to_vec();
            options.filter.tgid = 1;
            let host = HostShape {
                possible_cpus: 2,
                cpu_slots: 2,
                pid_max,
                kprobes: true,
                task_storage: true,
            };
            let defs = map_defs(&options, &host).expect("object parses");
            fit(defs, 2, Report::MemUsage, StructSizes::DEFAULT)
        };
        let plan_at = |pid_max| plan_with(pid_max, &[OptIn::DirtyFolio, OptIn::DeviceIo]);
        let entries = |plan: &MemoryPlan, name: &str| {
            let m = plan.maps.iter().find(|m| m.def.name == name).unwrap();
            (m.def.max_entries, m.sized.clone().unwrap_or_default())
        };
        let plan = plan_at(32768);
        assert!(plan.within_bound(), "{}", plan.table());
        let (generic, why) = entries(&plan, "GENERIC");
        assert!((IN_FLIGHT_FLOOR..16384).contains(&generic), "{generic}");
        assert!(why.starts_with("shrunk"), "{why}");
        assert_eq!(entries(&plan, "DIRTIERS").0, 65536);
        // systemd's pid_max: a byte per thread id more, every in-flight
        // map at its floor, and the plan says it is over.
        // With the write spans too, the fullest plan.
        let plan = plan_with(
            4 << 20,
            &[OptIn::DirtyFolio, OptIn::DeviceIo, OptIn::Writes],
        );
        assert!(!plan.within_bound(), "{}", plan.table());
        for name in IN_FLIGHT {
            assert_eq!(entries(&plan, name).0, IN_FLIGHT_FLOOR, "{name}");
        }
    }

    #[test]
    fn cpu_lists_count_and_top() {
        assert_eq!(cpu_list("0-1\n"), Some((2, 2)));
        assert_eq!(cpu_list("0"), Some((1, 1)));
        assert_eq!(cpu_list("0-3,8-11\n"), Some((8, 12)));
        assert_eq!(cpu_list("0-127"), Some((128, 128)));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
        assert_eq!(cpu_list(""), None);
    }

    #[test]
    fn unused_maps_get_one_entry_and_say_why() {
        let host = HostShape {
            possible_cpus: 128,
            cpu_slots: 128,
            pid_max: 4_194_304,
            kprobes: false,
            task_storage: true,
        };
        let sizes = map_sizes(&TracerOptions::default(), &host);
        let get = |n: &str| sizes.iter().find(|s| s.0 == n).map(|s| s.1);
        assert_eq!(get("DIRTY_SLOT"), Some(128));
        assert_eq!(get("IN_CALL"), Some(524_288));
        assert_eq!(get("DIRTIERS"), Some(1));
        assert_eq!(get("RQ_START"), Some(1));
        assert_eq!(get("FILTER_DIRTIED"), Some(1));
        assert_eq!(get("KPROBE_ARGS"), Some(1));
        assert_eq!(get("WRITING"), Some(1));
        assert_eq!(get("FOLLOWED"), None, "the default attribution's");
        let mut options = TracerOptions::default();
        options.hooks.enabled = vec![OptIn::DirtyFolio, OptIn::DeviceIo, OptIn::Writes];
        options.filter.tgid = 1;
        let sizes = map_sizes(
            &options,
            &HostShape {
                kprobes: true,
                task_storage: true,
                ..host
            },
        );
        assert!(
            sizes.iter().all(|s| s.1 != 1 || s.0 == "FOLLOWED"),
            "{sizes:?}"
        );
    }

    /// The plan from the object itself: every map there, within the
    /// bound at 128 and 256 possible CPUs with systemd's pid_max.
    #[test]
    fn the_default_plan_holds_its_bound_at_128_and_256_cpus() {
        let host = HostShape {
            possible_cpus: 2,
            cpu_slots: 2,
            pid_max: 4_194_304,
            kprobes: true,
            task_storage: true,
        };
        for cpus in [2, 16, 64, 128, 256] {
            let host = host.with_cpus(cpus);
            let defs = map_defs(&TracerOptions::default(), &host).expect("object parses");
            assert!(defs.iter().any(|(d, _)| d.name == "EVENTS"));
            let plan = fit(defs, cpus, Report::MemUsage, StructSizes::DEFAULT);
            assert!(plan.within_bound(), "{}", plan.table());
            // The default plan fits as the object sizes it.
            assert!(
                plan.maps
                    .iter()
                    .all(|m| !m.sized.as_deref().unwrap_or("").starts_with("shrunk")),
                "{}",
                plan.table()
            );
        }
    }

    /// Where tracing programs have no task storage (before 5.12), the
    /// per-thread call map is stated as the LRU hash the loader makes of
    /// it, with its entries and why.
    #[test]
    fn without_task_storage_the_call_map_is_stated_as_an_lru_hash() {
        let host = HostShape {
            possible_cpus: 2,
            cpu_slots: 2,
            pid_max: 32_768,
            kprobes: false,
            task_storage: false,
        };
        let current = |host: &HostShape| {
            map_defs(&TracerOptions::default(), host)
                .expect("object parses")
                .into_iter()
                .find(|(d, _)| d.name == "CURRENT")
                .expect("CURRENT")
        };
        let (without, why) = current(&host);
        assert_eq!(without.kind, MapKind::LruHash);
        assert_eq!(without.max_entries, 8192);
        assert!(why.as_deref().unwrap_or("").contains("5.12"), "{why:?}");
        let (current, _) = current(&HostShape {
            task_storage: true,
            ..host
        });
        assert_eq!(current.kind, MapKind::TaskStorage);
        assert_eq!(current.max_entries, 0);
    }
}
