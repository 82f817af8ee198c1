//! Hash maps read a batch at a time (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6+).
//!
//! Iterating a BPF hash map from userspace takes two system calls per
//! entry (`BPF_MAP_GET_NEXT_KEY`, then a lookup), and each next-key call
//! scans the buckets after the last key for a non-empty one: a per-folio
//! trace whose `DIRTIERS` held 60,000 (inode, process) pairs spent 10.7% of
//! a core reading them each second while the host was idle (0.6% with the
//! map empty). The batch command copies up to a buffer's worth of entries,
//! bucket by bucket, in one call (kernel/bpf/hashtab.c,
//! `__htab_map_lookup_and_delete_batch()`).
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
};

use anyhow::Context as _;
use aya::maps::{Map, MapData};
use aya_obj::generated::{bpf_attr, bpf_cmd};

/// Entries asked per call: the kernel holds up to this many keys and
/// values in a kernel buffer while it copies them out.
const BATCH: u32 = 4096;

/// Every entry of the hash map behind `fd` (plain or LRU, not per-CPU:
/// the values are read as one `V` each), or `None` when the kernel does
/// not know the command for this map (before 5.6, or a seccomp filter
/// without it): the caller then iterates. `K` and `V` must be the map's
/// key and value types, byte for byte.
pub(crate) fn hash_entries<K: aya::Pod, V: aya::Pod>(
    fd: BorrowedFd<'_>,
) -> Option<io::Result<Vec<(K, V)>>> {
    let mut out = Vec::new();
    let mut count = BATCH;
    // The position to go on from: for a hash map, a bucket index
    // (`u32 batch` in hashtab.c); 8 bytes leave room for any map's.
    let mut position = [0u8; 8];
    let mut next = [0u8; 8];
    let mut first = true;
    // One pair of buffers for every batch, grown only on ENOSPC.
    let mut keys: Vec<K> = Vec::with_capacity(count as usize);
    let mut values: Vec<V> = Vec::with_capacity(count as usize);
    loop {
        // SAFETY: a plain C union; all-zero is valid.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // The union's `batch` member, the one this command reads.
        attr.batch.in_batch = if first { 0 } else { position.as_ptr() as u64 };
        attr.batch.out_batch = next.as_mut_ptr() as u64;
        attr.batch.keys = keys.as_mut_ptr() as u64;
        attr.batch.values = values.as_mut_ptr() as u64;
        attr.batch.count = count;
        attr.batch.map_fd = fd.as_raw_fd() as u32;
        // SAFETY: the kernel writes at most `count` keys and values into
        // buffers of that capacity, the position into `next` (at most 8
        // bytes), and the number it wrote back into `attr`; all outlive
        // the call.
        let ret = unsafe { sys_bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let err = (ret != 0).then(io::Error::last_os_error);
        match err.as_ref().and_then(io::Error::raw_os_error) {
            None | Some(libc::ENOENT) => {}
            // One bucket holds more entries than the buffer: a larger one.
            Some(libc::ENOSPC) => {
                count = count.saturating_mul(2);
                keys.reserve(count as usize);
                values.reserve(count as usize);
                continue;
            }
            Some(e) if first && unknown_command(e) => return None,
            Some(_) => return err.map(Err),
        }
        // The number the kernel wrote back, on success and at the end
        // (ENOENT) only: other errors leave `count` as it was passed.
        // SAFETY: the member set above, updated by the kernel.
        let got = unsafe { attr.batch.count }.min(count) as usize;
        // SAFETY: both empty before the call (drained below), with room
        // for `count`; the kernel filled the first `got` of each (`count`
        // as it returned it), both Pod.
        unsafe {
            keys.set_len(got);
            values.set_len(got);
        }
        out.extend(keys.drain(..).zip(values.drain(..)));
        // ENOENT: the last buckets were in this batch.
        if ret != 0 {
            return Some(Ok(out));
        }
        position = next;
        first = false;
    }
}

/// Each entry of the per-CPU array behind `fd` (`entries` u64 values per
/// CPU, `cpus` possible CPUs), summed over CPUs, in one call: the
/// per-index lookups it replaces were a system call each, every interval
/// (`AGG` has 76), each copying a value per possible CPU. `None` where
/// the kernel lacks the command for arrays (before 5.6): the caller
/// then reads index by index.
pub(crate) fn percpu_array_sums(
    fd: BorrowedFd<'_>,
    entries: u32,
    cpus: usize,
) -> Option<io::Result<Vec<u64>>> {
    let n = entries as usize;
    let mut keys: Vec<u32> = vec![0; n];
    // A per-CPU value is copied as `round_up(value_size, 8)` bytes per
    // possible CPU (`bpf_percpu_array_copy()`, kernel/bpf/arraymap.c).
    let mut values: Vec<u64> = vec![0; n * cpus];
    let mut next = [0u8; 8];
    // SAFETY: a plain C union; all-zero is valid.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // The union's `batch` member; no `in_batch`: from the first index.
    attr.batch.out_batch = next.as_mut_ptr() as u64;
    attr.batch.keys = keys.as_mut_ptr() as u64;
    attr.batch.values = values.as_mut_ptr() as u64;
    attr.batch.count = entries;
    attr.batch.map_fd = fd.as_raw_fd() as u32;
    // SAFETY: the buffers hold `entries` keys and `entries` values of
    // `cpus` u64s, as the kernel writes them; all outlive the call.
    let ret = unsafe { sys_bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) };
    if ret != 0 {
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // Every entry in this one batch, and the end reached.
            Some(libc::ENOENT) => {}
            Some(e) if unknown_command(e) => return None,
            _ => return Some(Err(err)),
        }
    }
    // SAFETY: the member set above, updated by the kernel.
    let got = unsafe { attr.batch.count } as usize;
    if got != n {
        return Some(Err(io::Error::other(format!(
            "a batch read of {n} entries returned {got}"
        ))));
    }
    Some(Ok(values
        .chunks(cpus.max(1))
        .map(|per_cpu| per_cpu.iter().fold(0u64, |a, v| a.wrapping_add(*v)))
        .collect()))
}

/// Every entry of the hash map `map` (plain or LRU, not per-CPU), named
/// `name` in errors: a batch at a time where the kernel can, else one by
/// one (an entry removed between listing and lookup is skipped).
pub(crate) fn read_hash<K: aya::Pod, V: aya::Pod>(
    map: &Map,
    name: &str,
) -> anyhow::Result<Vec<(K, V)>> {
    let fd = match map {
        Map::LruHashMap(data) | Map::HashMap(data) => data.fd().as_fd(),
        _ => anyhow::bail!("{name} is not a hash map"),
    };
    if let Some(entries) = hash_entries::<K, V>(fd) {
        return entries.with_context(|| format!("reading {name}"));
    }
    let map = aya::maps::HashMap::<&MapData, K, V>::try_from(map)
        .with_context(|| format!("opening {name}"))?;
    Ok(map.iter().filter_map(Result::ok).collect())
}

/// `bpf(2)` with `cmd` and `attr`: the raw calls the tracer makes beside
/// aya's (here, and `recursion_misses` in maps.rs).
///
/// # Safety
/// `attr` must be set up for `cmd`, every pointer in it valid for what
/// the kernel reads and writes there until the call returns.
pub(crate) unsafe fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> i64 {
    // SAFETY: the caller's promise.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            std::ptr::from_mut(attr),
            std::mem::size_of::<bpf_attr>() as u32,
        )
    }
}

/// The errors of a kernel or filter that lacks the command: EINVAL (an
/// unknown command), ENOTSUPP (524, the map type has no batch operations),
/// EPERM and ENOSYS (refused by a seccomp filter).
fn unknown_command(errno: i32) -> bool {
    matches!(errno, libc::EINVAL | 524 | libc::EPERM | libc::ENOSYS)
}

/// Maps made from raw system calls for the tests (here and seccomp.rs).
#[cfg(test)]
pub(crate) mod test_maps {
    use std::{
        io,
        os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    };

    use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_map_type};

    use super::sys_bpf;

    /// A new map of `kind` (a test needs root to make one).
    pub(crate) fn create(kind: bpf_map_type, key_size: u32, value_size: u32) -> OwnedFd {
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // The union member this command reads.
        attr.__bindgen_anon_1.map_type = kind as u32;
        attr.__bindgen_anon_1.key_size = key_size;
        attr.__bindgen_anon_1.value_size = value_size;
        attr.__bindgen_anon_1.max_entries = 65536;
        // SAFETY: attr set up for the command, no pointers in it.
        let fd = unsafe { sys_bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr) };
        assert!(
            fd >= 0,
            "creating a BPF map of {kind:?} (the test needs root): {}",
            io::Error::last_os_error()
        );
        // SAFETY: a descriptor the kernel just gave us.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    }

    /// A map of `kind` with u64 keys and [u64; 3] values, filled with
    /// `n` entries (key k → [k, 2k, 3k]).
    pub(crate) fn filled(kind: bpf_map_type, n: u64) -> OwnedFd {
        let fd = create(kind, 8, 24);
        for k in 0..n {
            let value = [k, 2 * k, 3 * k];
            // SAFETY: as above.
            let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
            // The union member this command reads.
            attr.__bindgen_anon_2.map_fd = fd.as_raw_fd() as u32;
            attr.__bindgen_anon_2.key = std::ptr::from_ref(&k) as u64;
            attr.__bindgen_anon_2.__bindgen_anon_1.value = value.as_ptr() as u64;
            // SAFETY: key and value live until the call returns.
            assert_eq!(
                unsafe { sys_bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr) },
                0
            );
        }
        fd
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use aya_obj::generated::bpf_map_type;

    use super::{test_maps::*, *};

    #[test]
    fn reads_every_entry_across_batches_of_hash_and_lru_maps() {
        for kind in [
            bpf_map_type::BPF_MAP_TYPE_HASH,
            bpf_map_type::BPF_MAP_TYPE_LRU_HASH,
        ] {
            // None, fewer than a batch, and several batches (4096 each).
            for n in [0, 10, 3 * u64::from(BATCH) + 7] {
                let fd = filled(kind, n);
                let mut got: Vec<(u64, [u64; 3])> = hash_entries(fd.as_fd())
                    .expect("this kernel has batch lookups")
                    .expect("reading the map");
                got.sort_unstable();
                let want: Vec<(u64, [u64; 3])> = (0..n).map(|k| (k, [k, 2 * k, 3 * k])).collect();
                assert_eq!(got.len(), want.len(), "{kind:?} with {n}");
                assert_eq!(got, want, "{kind:?} with {n}");
            }
        }
    }

    #[test]
    fn a_map_without_batch_lookups_is_left_to_the_caller() {
        // A ring buffer has no batch operations: ENOTSUPP, which is
        // "iterate instead", not an error.
        let fd = create(bpf_map_type::BPF_MAP_TYPE_RINGBUF, 0, 0);
        let r = hash_entries::<u64, u64>(fd.as_fd());
        assert!(r.is_none(), "{r:?}");
    }

    /// Each index's values on every possible CPU, summed, in one read:
    /// index i holds i + 1000 * cpu on each CPU.
    #[test]
    fn per_cpu_arrays_are_read_whole_and_summed() {
        let cpus = crate::memory::HostShape::this_host().unwrap().possible_cpus as usize;
        let entries = 76u32;
        let fd = crate::memory::create_map(bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, entries)
            .expect("creating a per-CPU array (the test needs root)");
        for i in 0..entries {
            let value: Vec<u64> = (0..cpus as u64).map(|c| u64::from(i) + 1000 * c).collect();
            // SAFETY: as in `filled`.
            let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
            attr.__bindgen_anon_2.map_fd = fd.as_raw_fd() as u32;
            attr.__bindgen_anon_2.key = std::ptr::from_ref(&i) as u64;
            attr.__bindgen_anon_2.__bindgen_anon_1.value = value.as_ptr() as u64;
            // SAFETY: key and value live until the call returns.
            assert_eq!(
                unsafe { sys_bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr) },
                0
            );
        }
        let sums = percpu_array_sums(fd.as_fd(), entries, cpus)
            .expect("this kernel has batch lookups")
            .expect("reading the array");
        let c = cpus as u64;
        let want: Vec<u64> = (0..u64::from(entries))
            .map(|i| i * c + 1000 * c * (c - 1) / 2)
            .collect();
        assert_eq!(sums, want);
    }
}
