//! The eBPF object built by build.rs, embedded in the binary, and the
//! object as the running kernel loads it.
use anyhow::Context as _;

/// Bytes of the compiled `writeback-ebpf` object (ELF, with BTF).
pub(crate) static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/writeback"));

/// Whether this kernel lets tracing programs keep values in task-local
/// storage: Linux 5.12 ("bpf: Enable task local storage for tracing
/// programs"; 5.11 had the map type for LSM programs only). Where it
/// does not, [`object_for`] rewrites the task-storage map into an LRU
/// hash keyed by thread id and [`prepare`] tells the programs so.
pub(crate) fn task_storage_usable() -> bool {
    wbscope_sys::kernel_version().is_some_and(|v| v >= (5, 12))
}

/// Whether tracing programs may call `bpf_get_current_task_btf()`
/// (Linux 5.11, the helper trials.rs names when a load is refused
/// without it).
pub(crate) fn current_task_btf_usable() -> bool {
    wbscope_sys::kernel_version().is_some_and(|v| v >= (5, 11))
}

/// The object's task-storage map (writeback-ebpf main.rs, task_local.rs).
pub(crate) const TASK_STORAGE_MAP: &str = "CURRENT";

/// Threads the LRU hash that stands in for [`TASK_STORAGE_MAP`] holds.
pub(crate) const FALLBACK_THREADS: u32 = 8192;

/// `BPF_MAP_TYPE_LRU_HASH` (include/uapi/linux/bpf.h).
const LRU_HASH: u32 = 9;

/// The object's bytes as this kernel loads them.
pub(crate) enum ObjectBytes {
    /// As built.
    Embedded,
    /// A rewritten copy, starting at the offset where it is aligned as
    /// the ELF reader needs (`include_bytes_aligned!`'s 32).
    Patched(Vec<u8>, usize),
}

impl ObjectBytes {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            ObjectBytes::Embedded => EBPF_OBJECT,
            ObjectBytes::Patched(copy, at) => &copy[*at..*at + EBPF_OBJECT.len()],
        }
    }
}

/// The object for a kernel with or without task storage for tracing
/// programs: without, [`TASK_STORAGE_MAP`]'s BTF definition says LRU
/// hash (its `type` array 9 elements long instead of 29) without
/// `BPF_F_NO_PREALLOC` (LRU maps are preallocated), two words of the
/// `.BTF` section rewritten in a copy. The copy is parsed back and must
/// differ from the object in that map's type and flags alone.
pub(crate) fn object_for(task_storage: bool) -> anyhow::Result<ObjectBytes> {
    use object::{Object as _, ObjectSection as _};
    if task_storage {
        return Ok(ObjectBytes::Embedded);
    }
    let elf = object::File::parse(EBPF_OBJECT).context("parsing the embedded eBPF object")?;
    let section = elf
        .section_by_name(".BTF")
        .context("the eBPF object has no .BTF section")?;
    let (start, len) = section
        .file_range()
        .context("the eBPF object's .BTF section has no data")?;
    let (start, len) = (usize::try_from(start)?, usize::try_from(len)?);
    let blob = EBPF_OBJECT
        .get(start..start + len)
        .context(".BTF section past the object's end")?;
    let btf = crate::btf::Btf::parse(blob).context("parsing the eBPF object's BTF")?;
    let word = |member: &str| {
        btf.map_def_word(TASK_STORAGE_MAP, member)
            .with_context(|| format!("finding {TASK_STORAGE_MAP}.{member} in the object's BTF"))
    };
    let (type_word, flags_word) = (word("type")?, word("map_flags")?);
    // The type section's place in the blob (`struct btf_header`:
    // hdr_len at 4, type_off at 8, include/uapi/linux/btf.h).
    let header = |at: usize| {
        blob.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .context("truncated BTF header")
    };
    let types = start + usize::try_from(header(4)?)? + usize::try_from(header(8)?)?;
    let mut copy = vec![0u8; EBPF_OBJECT.len() + 32];
    let at = (32 - copy.as_ptr() as usize % 32) % 32;
    copy[at..at + EBPF_OBJECT.len()].copy_from_slice(EBPF_OBJECT);
    for (word, value) in [(type_word, LRU_HASH), (flags_word, 0)] {
        let byte = at + types + 4 * word;
        copy[byte..byte + 4].copy_from_slice(&value.to_le_bytes());
    }
    for (start, len) in code_ranges(&elf)? {
        let code = copy
            .get_mut(at + start..at + start + len)
            .context("code section past the object's end")?;
        without_cmpxchg(code);
    }
    let patched = ObjectBytes::Patched(copy, at);
    check_patch(patched.bytes())?;
    Ok(patched)
}

/// Where in the file the object's program instructions lie: (offset,
/// length) of each section flagged executable.
fn code_ranges(elf: &object::File<'_>) -> anyhow::Result<Vec<(usize, usize)>> {
    use object::{Object as _, ObjectSection as _};
    let mut ranges = Vec::new();
    for section in elf.sections() {
        let code = matches!(section.flags(), object::SectionFlags::Elf { sh_flags }
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
        if let (true, Some((start, len))) = (code, section.file_range()) {
            ranges.push((usize::try_from(start)?, usize::try_from(len)?));
        }
    }
    Ok(ranges)
}

/// `BPF_STX | BPF_ATOMIC | BPF_DW`, and `BPF_CMPXCHG` in the immediate
/// (include/uapi/linux/bpf.h).
const ATOMIC_DW: u8 = 0xdb;
const BPF_CMPXCHG: i32 = 0xf1;

/// Rewrites each 64-bit compare-and-exchange in `code` into `r0 = 0`.
/// Before Linux 5.12 the verifier refuses a program that holds one
/// anywhere, reached or not ("BPF_STX uses reserved fields",
/// resolve_pseudo_ldimm64() in kernel/bpf/verifier.c, 5.10), and the
/// programs reach theirs only where [`task_storage_usable`] (writeback-ebpf
/// writepages.rs, `own_slot`). A wide load's second half has opcode 0, so
/// scanning every 8 bytes meets no false match. Returns how many.
fn without_cmpxchg(code: &mut [u8]) -> usize {
    let mut rewritten = 0;
    for insn in code.chunks_exact_mut(8) {
        let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        if insn[0] == ATOMIC_DW && imm == BPF_CMPXCHG {
            // `BPF_ALU64 | BPF_MOV | BPF_K`, r0, offset 0, immediate 0.
            insn.copy_from_slice(&[0xb7, 0, 0, 0, 0, 0, 0, 0]);
            rewritten += 1;
        }
    }
    rewritten
}

/// The rewritten object's maps are the embedded one's but for
/// [`TASK_STORAGE_MAP`], now an LRU hash without flags.
fn check_patch(patched: &[u8]) -> anyhow::Result<()> {
    let shape = |bytes: &[u8]| -> anyhow::Result<Vec<(String, [u32; 5])>> {
        let object = aya_obj::Object::parse(bytes).context("parsing the eBPF object")?;
        let mut maps: Vec<(String, [u32; 5])> = object
            .maps
            .iter()
            .map(|(name, m)| {
                (
                    name.clone(),
                    [
                        m.map_type(),
                        m.key_size(),
                        m.value_size(),
                        m.max_entries(),
                        m.map_flags(),
                    ],
                )
            })
            .collect();
        maps.sort();
        Ok(maps)
    };
    let (before, after) = (shape(EBPF_OBJECT)?, shape(patched)?);
    let expected: Vec<(String, [u32; 5])> = before
        .into_iter()
        .map(|(name, [t, k, v, e, f])| {
            if name == TASK_STORAGE_MAP {
                (name, [LRU_HASH, k, v, e, 0])
            } else {
                (name, [t, k, v, e, f])
            }
        })
        .collect();
    anyhow::ensure!(
        after == expected,
        "rewriting {TASK_STORAGE_MAP} into an LRU hash gave other maps than expected: {after:?}"
    );
    Ok(())
}

/// Sets what the programs and the loader must know of the object
/// [`object_for`] gives: the task-storage flag (`TASK_STORAGE`, .rodata)
/// and, without it, the LRU hash's entries. aya 0.14 has no map type
/// for task storage: it makes the map, and leaves it to us.
fn prepare(loader: &mut aya::EbpfLoader<'_>, task_storage: bool) {
    static ON: u8 = 1;
    static OFF: u8 = 0;
    loader.allow_unsupported_maps();
    loader.override_global("TASK_STORAGE", if task_storage { &ON } else { &OFF }, true);
    if !task_storage {
        loader.map_max_entries(TASK_STORAGE_MAP, FALLBACK_THREADS);
    }
}

/// Loads the object as the running kernel takes it, with what `loader`
/// was told (globals, map sizes).
pub(crate) fn load(loader: &mut aya::EbpfLoader<'_>) -> anyhow::Result<aya::Ebpf> {
    let task_storage = task_storage_usable();
    let object = object_for(task_storage)?;
    prepare(loader, task_storage);
    loader
        .load(object.bytes())
        .context("loading the embedded eBPF object")
}

/// `wbscope --version`: what was built, from which revision, with which
/// kernel programs (the hash identifies the embedded object whatever the
/// build host).
pub fn version_text() -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(EBPF_OBJECT);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "wbscope {}\ngit revision: {}\neBPF object: sha256:{hex} ({} bytes)\n",
        env!("CARGO_PKG_VERSION"),
        env!("WBSCOPE_GIT_REVISION"),
        EBPF_OBJECT.len()
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use object::{Object, ObjectSymbol};

    use super::*;
    use crate::plan::{Candidate, candidates};
    use wbscope_model::plan::Concept;

    /// The object holds compare-and-exchanges (the call slots), and the
    /// copy for kernels before 5.12 none: their verifier would refuse
    /// every program that holds one.
    #[test]
    fn the_object_for_kernels_before_5_12_has_no_cmpxchg() {
        let count = |bytes: &[u8]| {
            let elf = object::File::parse(bytes).expect("an ELF object");
            let mut copy = bytes.to_vec();
            code_ranges(&elf)
                .expect("code ranges")
                .into_iter()
                .map(|(start, len)| without_cmpxchg(&mut copy[start..start + len]))
                .sum::<usize>()
        };
        assert!(
            count(EBPF_OBJECT) > 0,
            "the object has no cmpxchg to rewrite"
        );
        let patched = object_for(false).expect("the object for 5.10");
        assert_eq!(count(patched.bytes()), 0);
        let mut insn = [ATOMIC_DW, 0x21, 0, 0, 0xf1, 0, 0, 0];
        assert_eq!(without_cmpxchg(&mut insn), 1);
        assert_eq!(insn, [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        // An atomic add (immediate 0) stays.
        let mut add = [ATOMIC_DW, 0x21, 0, 0, 0, 0, 0, 0];
        assert_eq!(without_cmpxchg(&mut add), 0);
    }

    /// Every program and load-time global the loader names is in the
    /// embedded object. A stale object (build.rs's nested eBPF build is
    /// fingerprinted by file times) would otherwise only show at attach
    /// time, as a refused candidate or a load error.
    #[test]
    fn the_object_has_every_program_and_global_the_loader_names() {
        let elf = object::File::parse(EBPF_OBJECT).expect("embedded object is ELF");
        let symbols: HashSet<&str> = elf.symbols().filter_map(|s| s.name().ok()).collect();
        let mut wanted: Vec<&str> = vec![
            "KERNEL_MEMBERS",
            "SCAN_MEMBERS",
            "BLOCK_MEMBERS",
            "TASK_MEMBERS",
            "TASK_COMM",
            "TASK_CGROUP",
            "FILE_MEMBERS",
            "EXTENT_MEMBERS",
            "FILTER",
            "trial_fentry",
            "trial_kprobe",
            "trial_tp_btf",
        ];
        wanted.extend(
            crate::cost::FLOOR_PROGRAMS
                .iter()
                .map(|(program, _)| *program),
        );
        let others = crate::plan::sched_switch_candidates();
        for concept in Concept::ALL {
            for candidate in candidates(concept).into_iter().chain(others.clone()) {
                match candidate {
                    Candidate::BtfPrograms { attaches, .. } => {
                        wanted.extend(attaches.iter().map(|a| a.program));
                    }
                    Candidate::Tracepoints(attaches) => {
                        wanted.extend(attaches.iter().map(|a| a.program));
                        wanted.extend(attaches.iter().filter_map(|a| a.layout_global));
                    }
                    Candidate::Function { .. }
                    | Candidate::WithCall { .. }
                    | Candidate::Procfs { .. } => {}
                }
            }
        }
        let missing: Vec<&str> = wanted
            .into_iter()
            .filter(|name| !symbols.contains(name))
            .collect();
        assert!(
            missing.is_empty(),
            "missing from the eBPF object: {missing:?}"
        );
    }
}
