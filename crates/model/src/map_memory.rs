//! The kernel memory of the tracer's BPF maps, stated before they are
//! made: per map, from its type, key and value sizes, entries and the
//! number of *possible* CPUs (per-CPU values and a few per-CPU counters
//! are allocated for every possible CPU, online or not), by the formula
//! the kernel itself reports in each map's fdinfo (`memlock:`,
//! `bpf_map_show_fdinfo()` in kernel/bpf/syscall.c).
//!
//! That report changed twice, so the statement follows the kernel:
//! - 6.4 and later: `map->ops->map_mem_usage()`, what the map's
//!   allocations really hold (`htab_map_mem_usage()` in
//!   kernel/bpf/hashtab.c, `array_map_mem_usage()` in arraymap.c,
//!   `ringbuf_map_mem_usage()` in ringbuf.c);
//! - 5.11 to 6.3: `bpf_map_memory_footprint()`, an estimate from the key
//!   and value sizes alone, rounded to pages (0 for a ring buffer, which
//!   has neither);
//! - 5.10: the pages each map type charged to RLIMIT_MEMLOCK at creation
//!   (`bpf_map_charge_init()`, called by each map's alloc function).
//!
//! The sizes of the kernel's own structs (`struct bpf_htab`, `bpf_array`,
//! `bpf_ringbuf_map`) depend on its version and configuration: the
//! tracer measures them on the running kernel from three one-entry maps
//! ([`StructSizes`]); a plan for another host uses the defaults below.
use serde::Serialize;

/// 4 KiB pages (x86_64 and arm64's default).
const PAGE: u64 = 4096;

/// The map types the tracer's object uses (`enum bpf_map_type`,
/// include/uapi/linux/bpf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapKind {
    Hash,
    Array,
    PercpuHash,
    PercpuArray,
    LruHash,
    LruPercpuHash,
    Ringbuf,
    /// Task-local storage: the map itself; each task's value is
    /// allocated when the task first asks for it and is not in the
    /// kernel's report.
    TaskStorage,
    /// Any other type: stated as 0, and said.
    Other(u32),
}

impl MapKind {
    /// From the kernel's `bpf_map_type` number.
    pub fn from_type(t: u32) -> MapKind {
        match t {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            5 => MapKind::PercpuHash,
            6 => MapKind::PercpuArray,
            9 => MapKind::LruHash,
            10 => MapKind::LruPercpuHash,
            27 => MapKind::Ringbuf,
            29 => MapKind::TaskStorage,
            t => MapKind::Other(t),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash",
            MapKind::Array => "array",
            MapKind::PercpuHash => "percpu_hash",
            MapKind::PercpuArray => "percpu_array",
            MapKind::LruHash => "lru_hash",
            MapKind::LruPercpuHash => "lru_percpu_hash",
            MapKind::Ringbuf => "ringbuf",
            MapKind::TaskStorage => "task_storage",
            MapKind::Other(_) => "other",
        }
    }

    fn is_hash(self) -> bool {
        matches!(
            self,
            MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash
        )
    }

    fn is_percpu(self) -> bool {
        matches!(
            self,
            MapKind::PercpuHash | MapKind::PercpuArray | MapKind::LruPercpuHash
        )
    }

    fn is_lru(self) -> bool {
        matches!(self, MapKind::LruHash | MapKind::LruPercpuHash)
    }
}

/// One map as it will be created: all maps of the tracer's object are
/// made at load, whether their programs attach or not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapDef {
    pub name: String,
    pub kind: MapKind,
    pub key_size: u32,
    pub value_size: u32,
    /// Entries; a ring buffer's bytes.
    pub max_entries: u32,
}

/// Which of the kernel's reports `memlock:` is (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    /// 6.4 and later: what the allocations hold.
    MemUsage,
    /// 5.11 to 6.3: key and value bytes per entry, rounded to pages.
    Footprint,
    /// 5.10: the pages charged at creation.
    Charged,
}

impl Report {
    /// The report of kernel `major.minor`.
    pub fn of_kernel(major: u32, minor: u32) -> Report {
        match (major, minor) {
            (m, _) if m > 6 => Report::MemUsage,
            (6, n) if n >= 4 => Report::MemUsage,
            (6, _) => Report::Footprint,
            (5, n) if n >= 11 => Report::Footprint,
            _ => Report::Charged,
        }
    }
}

/// Sizes of the kernel's own structs behind each map (x86_64). They vary
/// with version and configuration (lockdep, for one, grows every lock):
/// measured on the running kernel where the tracer can make maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StructSizes {
    /// `sizeof(struct bpf_htab)`.
    pub htab: u64,
    /// `sizeof(struct bpf_array)`.
    pub array: u64,
    /// `sizeof(struct bpf_ringbuf_map)`.
    pub ringbuf: u64,
    /// `sizeof(struct bpf_local_storage_map)` (task storage).
    pub local_storage: u64,
    /// What `htab_map_mem_usage()` adds per possible CPU for each hash
    /// map's `HASHTAB_MAP_LOCK_COUNT` (8) `int` lock counters: 32 up to
    /// 6.18 (which still counts them, though it no longer has them), 0
    /// on 7.3 (measured); kernels between are taken as 7.3.
    pub hash_locks_per_cpu: u64,
    /// Where they came from: "measured" or the kernel they were read on.
    pub source: &'static str,
}

impl StructSizes {
    /// As measured on Linux 6.18 (x86_64, Firecracker's config).
    pub const DEFAULT: StructSizes = StructSizes {
        htab: 832,
        array: 312,
        ringbuf: 304,
        local_storage: 480,
        hash_locks_per_cpu: 32,
        source: "Linux 6.18's (x86_64)",
    };

    /// 5.10's: no map's struct is charged but an array's, `struct
    /// bpf_array` at 320 bytes (its bpf_map, 256-byte aligned, and a
    /// `struct bpf_map_memory`).
    pub const LINUX_5_10: StructSizes = StructSizes {
        htab: 0,
        array: 320,
        ringbuf: 0,
        local_storage: 0,
        hash_locks_per_cpu: 0,
        source: "Linux 5.10's (x86_64)",
    };

    /// The per-CPU lock counters of kernel `major.minor`'s hash maps
    /// (`hash_locks_per_cpu`).
    pub fn hash_locks_of_kernel(major: u32, minor: u32) -> u64 {
        if (major, minor) >= (7, 0) {
            0
        } else {
            4 * MAP_LOCK_COUNT
        }
    }
}

/// `sizeof(struct htab_elem)` on 64-bit kernels: an hlist_nulls_node (16)
/// beside the free-list/LRU node union (16 for `bpf_lru_node`, with its
/// cpu and flags), the hash (4, padded) and a pointer: 48 from 5.10 to
/// 6.18 (kernel/bpf/hashtab.c).
const HTAB_ELEM: u64 = 48;
/// `sizeof(struct bucket)`: an hlist_nulls_head and a raw spinlock,
/// without lockdep.
const BUCKET: u64 = 16;
/// `HASHTAB_MAP_LOCK_COUNT`: per-CPU `int`s of each hash map (5.13+).
const MAP_LOCK_COUNT: u64 = 8;

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// The bytes `memlock:` will show for `def` on a kernel whose report is
/// `report`, with `cpus` possible CPUs and that kernel's `structs`.
pub fn map_bytes(def: &MapDef, cpus: u32, report: Report, structs: &StructSizes) -> u64 {
    let cpus = u64::from(cpus.max(1));
    let entries = u64::from(def.max_entries);
    let key = round_up(u64::from(def.key_size), 8);
    let value = round_up(u64::from(def.value_size), 8);
    match report {
        Report::Footprint => {
            let value = if def.kind.is_percpu() {
                value * cpus
            } else {
                u64::from(def.value_size)
            };
            round_up(entries * round_up(u64::from(def.key_size) + value, 8), PAGE)
        }
        Report::MemUsage => mem_usage(def, cpus, key, value, structs),
        Report::Charged => round_up(charged(def, cpus, key, value, structs), PAGE),
    }
}

fn elem_size(kind: MapKind, key: u64, value: u64) -> u64 {
    // A per-CPU map's element holds a pointer to its values.
    HTAB_ELEM + key + if kind.is_percpu() { 8 } else { value }
}

fn mem_usage(def: &MapDef, cpus: u64, key: u64, value: u64, s: &StructSizes) -> u64 {
    let entries = u64::from(def.max_entries);
    match def.kind {
        kind if kind.is_hash() => {
            // Preallocated (no BPF_F_NO_PREALLOC): every element made at
            // creation; plain hashes keep one spare per CPU for the
            // update that replaces an element (`htab_has_extra_elems()`).
            let buckets = u64::from(def.max_entries.max(1).next_power_of_two());
            let mut usage = s.htab + BUCKET * buckets + s.hash_locks_per_cpu * cpus;
            let extra = !kind.is_percpu() && !kind.is_lru();
            let n = entries + if extra { cpus } else { 0 };
            usage += elem_size(kind, key, value) * n;
            if kind.is_percpu() {
                usage += value * cpus * n;
            } else if !kind.is_lru() {
                // The per-CPU pointers to those spares.
                usage += 8 * cpus;
            }
            usage
        }
        MapKind::Array => s.array + entries * value,
        MapKind::PercpuArray => s.array + entries * 8 + entries * value * cpus,
        MapKind::Ringbuf => {
            // The header page, two pages of consumer and producer
            // positions (`RINGBUF_NR_META_PAGES`), the data pages, and a
            // page pointer per page with the data pages mapped twice
            // (`bpf_ringbuf_area_alloc()`).
            let data = entries / PAGE;
            let meta = 3;
            s.ringbuf + (meta + data) * PAGE + (meta + 2 * data) * 8
        }
        MapKind::TaskStorage => {
            // The map and its buckets, a power of two at least the
            // possible CPUs and at least 2
            // (`bpf_local_storage_map_alloc()`,
            // `bpf_local_storage_map_mem_usage()` in
            // kernel/bpf/bpf_local_storage.c); the values hung on tasks
            // are not counted there.
            let buckets = cpus.next_power_of_two().max(2);
            s.local_storage + BUCKET * buckets
        }
        _ => 0,
    }
}

/// What 5.10's alloc functions passed to `bpf_map_charge_init()`, before
/// the rounding to pages.
fn charged(def: &MapDef, cpus: u64, key: u64, value: u64, s: &StructSizes) -> u64 {
    let entries = u64::from(def.max_entries);
    match def.kind {
        kind if kind.is_hash() => {
            let buckets = u64::from(def.max_entries.max(1).next_power_of_two());
            let elem = elem_size(kind, key, value);
            let mut cost = BUCKET * buckets + elem * entries;
            if kind.is_percpu() {
                cost += value * cpus * entries;
            } else {
                cost += elem * cpus;
            }
            cost
        }
        MapKind::Array => s.array + entries * value,
        MapKind::PercpuArray => s.array + entries * 8 + entries * value * cpus,
        // `sizeof(struct bpf_ringbuf_map)` (320) and `struct bpf_ringbuf`
        // (three pages before its data), rounded to pages: four pages.
        MapKind::Ringbuf => 4 * PAGE + entries,
        _ => 0,
    }
}

/// One map's line of the statement.
#[derive(Clone, Debug, Serialize)]
pub struct MapMemory {
    #[serde(flatten)]
    pub def: MapDef,
    /// Stated before load.
    pub bytes: u64,
    /// What the kernel reported for the loaded map (`memlock:`), where
    /// the maps were made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<u64>,
    /// Why its size is not the object's: "no --enable dirty_folio", ….
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sized: Option<String>,
}

/// The whole statement for one CPU count.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryPlan {
    pub possible_cpus: u32,
    pub report: Report,
    pub structs: StructSizes,
    pub maps: Vec<MapMemory>,
    pub total_bytes: u64,
    /// The bound the maps are held to at this CPU count ([`bound`]).
    pub bound_bytes: u64,
}

/// The most the tracer's maps may take together with `cpus` possible
/// CPUs: 32 MiB up to 128 CPUs, 64 MiB beyond.
pub fn bound(cpus: u32) -> u64 {
    if cpus <= 128 { 32 << 20 } else { 64 << 20 }
}

impl MemoryPlan {
    pub fn new(
        defs: Vec<(MapDef, Option<String>)>,
        cpus: u32,
        report: Report,
        structs: StructSizes,
    ) -> MemoryPlan {
        let mut maps: Vec<MapMemory> = defs
            .into_iter()
            .map(|(def, sized)| MapMemory {
                bytes: map_bytes(&def, cpus, report, &structs),
                def,
                measured: None,
                sized,
            })
            .collect();
        maps.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.def.name.cmp(&b.def.name)));
        let total_bytes = maps.iter().map(|m| m.bytes).sum();
        MemoryPlan {
            possible_cpus: cpus,
            report,
            structs,
            maps,
            total_bytes,
            bound_bytes: bound(cpus),
        }
    }

    /// The kernel's own figure for each map, by name.
    pub fn set_measured(&mut self, measured: impl Fn(&str) -> Option<u64>) {
        for m in &mut self.maps {
            m.measured = measured(&m.def.name);
        }
    }

    /// Sum of the kernel's figures, when every map has one.
    pub fn measured_total(&self) -> Option<u64> {
        self.maps.iter().map(|m| m.measured).sum()
    }

    /// Whether the maps stay within their bound.
    pub fn within_bound(&self) -> bool {
        self.total_bytes <= self.bound_bytes
    }

    /// The statement as a table: a map a line, largest first.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let measured = self.maps.iter().any(|m| m.measured.is_some());
        let _ = writeln!(
            out,
            "MAP MEMORY at {} possible CPUs ({}; struct sizes {})",
            self.possible_cpus,
            match self.report {
                Report::MemUsage => "what the kernel's maps hold, as 6.4+ reports it",
                Report::Footprint => "the kernel's 5.11-6.3 estimate from key and value sizes",
                Report::Charged => "the pages 5.10 charges at creation",
            },
            self.structs.source
        );
        let _ = write!(
            out,
            "{:<16} {:<16} {:>9} {:>5} {:>6} {:>12}",
            "MAP", "TYPE", "ENTRIES", "KEY", "VALUE", "BYTES"
        );
        if measured {
            let _ = write!(out, " {:>12}", "KERNEL SAYS");
        }
        out.push('\n');
        for m in &self.maps {
            let _ = write!(
                out,
                "{:<16} {:<16} {:>9} {:>5} {:>6} {:>12}",
                m.def.name,
                m.def.kind.name(),
                m.def.max_entries,
                m.def.key_size,
                m.def.value_size,
                m.bytes
            );
            if measured {
                match m.measured {
                    Some(b) => {
                        let _ = write!(out, " {b:>12}");
                    }
                    None => {
                        let _ = write!(out, " {:>12}", "-");
                    }
                }
            }
            if let Some(why) = &m.sized {
                let _ = write!(out, "  ({why})");
            }
            out.push('\n');
        }
        let _ = write!(
            out,
            "total {} ({:.1} MiB; bound {} MiB at this CPU count)",
            self.total_bytes,
            self.total_bytes as f64 / f64::from(1 << 20),
            self.bound_bytes >> 20
        );
        if let Some(t) = self.measured_total().filter(|_| measured) {
            let _ = write!(out, "; the kernel says {t}");
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(kind: MapKind, key: u32, value: u32, entries: u32) -> MapDef {
        MapDef {
            name: "M".into(),
            kind,
            key_size: key,
            value_size: value,
            max_entries: entries,
        }
    }

    /// Figures Linux 6.18 printed in fdinfo for the tracer's maps with 2
    /// possible CPUs (bpftool map show), one per map type.
    #[test]
    fn mem_usage_equals_what_6_18_reported() {
        let s = StructSizes::DEFAULT;
        let cases = [
            (def(MapKind::Hash, 4, 16, 16384), 1_442_848),
            (def(MapKind::Hash, 4, 8, 16384), 1_311_760),
            (def(MapKind::LruHash, 16, 1, 16384), 1_442_688),
            (def(MapKind::LruHash, 4, 176, 8192), 2_032_512),
            (def(MapKind::PercpuHash, 8, 8, 8192), 787_328),
            (def(MapKind::LruPercpuHash, 4, 32, 1024), 148_352),
            (def(MapKind::Array, 4, 8, 4096), 33_080),
            (def(MapKind::Array, 4, 2788, 1), 3_104),
            (def(MapKind::PercpuArray, 4, 8, 76), 2_136),
            (def(MapKind::Ringbuf, 0, 0, 4 << 20), 4_223_304),
            (def(MapKind::Ringbuf, 0, 0, 128 << 10), 144_200),
            (def(MapKind::TaskStorage, 4, 168, 0), 512),
        ];
        for (d, want) in cases {
            assert_eq!(map_bytes(&d, 2, Report::MemUsage, &s), want, "{d:?}");
        }
    }

    /// Figures Linux 7.3 (Debian's 7.3.4) printed in a guest of 64
    /// possible CPUs, with its struct sizes: no lock counters per CPU.
    #[test]
    fn mem_usage_equals_what_7_3_reported() {
        let s = StructSizes {
            htab: 896,
            array: 312,
            ringbuf: 288,
            local_storage: 480,
            hash_locks_per_cpu: StructSizes::hash_locks_of_kernel(7, 3),
            source: "test",
        };
        let cases = [
            (def(MapKind::Hash, 4, 272, 16384), 5_658_496),
            (def(MapKind::LruHash, 4, 280, 8192), 2_884_480),
            (def(MapKind::Ringbuf, 0, 0, 4 << 20), 4_223_288),
        ];
        for (d, want) in cases {
            assert_eq!(map_bytes(&d, 64, Report::MemUsage, &s), want, "{d:?}");
        }
    }

    /// Task storage: the map's buckets follow the possible CPUs (a power
    /// of two, at least 2); the values hung on tasks are not reported.
    #[test]
    fn task_storage_is_its_map_and_a_bucket_per_cpu() {
        let s = StructSizes::DEFAULT;
        let d = def(MapKind::TaskStorage, 4, 168, 0);
        let at = |c| map_bytes(&d, c, Report::MemUsage, &s);
        assert_eq!(at(1), 480 + 2 * 16);
        assert_eq!(at(100), 480 + 128 * 16);
        assert_eq!(map_bytes(&d, 64, Report::Footprint, &s), 0);
    }

    #[test]
    fn per_cpu_values_grow_with_the_possible_cpus() {
        let s = StructSizes::DEFAULT;
        let d = def(MapKind::PercpuHash, 8, 8, 8192);
        let at = |c| map_bytes(&d, c, Report::MemUsage, &s);
        // 8 bytes a CPU per entry, and a lock counter per CPU.
        assert_eq!(at(128) - at(2), 126 * (8192 * 8 + 4 * 8));
        let shared = def(MapKind::Hash, 8, 8, 8192);
        let at = |c| map_bytes(&shared, c, Report::MemUsage, &s);
        // One spare element (64 bytes), its pointer and the lock counters.
        assert_eq!(at(128) - at(2), 126 * (64 + 8 + 32));
    }

    #[test]
    fn footprint_is_key_and_value_rounded_to_pages() {
        let s = StructSizes::DEFAULT;
        assert_eq!(
            map_bytes(&def(MapKind::Hash, 4, 8, 16384), 2, Report::Footprint, &s),
            16384 * 16
        );
        assert_eq!(
            map_bytes(
                &def(MapKind::PercpuArray, 4, 8, 1),
                128,
                Report::Footprint,
                &s
            ),
            4096
        );
        assert_eq!(
            map_bytes(
                &def(MapKind::Ringbuf, 0, 0, 1 << 20),
                2,
                Report::Footprint,
                &s
            ),
            0
        );
    }

    #[test]
    fn kernels_pick_their_report() {
        assert_eq!(Report::of_kernel(5, 10), Report::Charged);
        assert_eq!(Report::of_kernel(5, 15), Report::Footprint);
        assert_eq!(Report::of_kernel(6, 1), Report::Footprint);
        assert_eq!(Report::of_kernel(6, 4), Report::MemUsage);
        assert_eq!(Report::of_kernel(6, 18), Report::MemUsage);
        assert_eq!(Report::of_kernel(7, 0), Report::MemUsage);
    }

    #[test]
    fn the_plan_adds_up_and_says_its_bound() {
        let plan = MemoryPlan::new(
            vec![
                (def(MapKind::Hash, 4, 8, 16384), None),
                (
                    def(MapKind::LruHash, 16, 56, 1),
                    Some("no --enable dirty_folio".into()),
                ),
            ],
            128,
            Report::MemUsage,
            StructSizes::DEFAULT,
        );
        assert_eq!(plan.total_bytes, plan.maps[0].bytes + plan.maps[1].bytes);
        assert_eq!(plan.bound_bytes, 32 << 20);
        assert!(plan.within_bound());
        let t = plan.table();
        assert!(t.contains("no --enable dirty_folio"), "{t}");
        assert!(t.starts_with("MAP MEMORY at 128 possible CPUs"), "{t}");
        assert_eq!(bound(256), 64 << 20);
    }
}
