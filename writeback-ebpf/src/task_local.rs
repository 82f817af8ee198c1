//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`,
//! kernel/bpf/bpf_task_storage.c): a value hung on the `task_struct`
//! itself, found through the task's own storage cache without hashing,
//! a bucket lock or an LRU list. Tracing programs may use it since Linux
//! 5.12 ("bpf: Enable task local storage for tracing programs").
//!
//! aya-ebpf 0.2.1 defines no map type for it: this is the BTF map
//! definition libbpf and aya both read (`.maps` section: the type, key,
//! value, entries and flags as pointers to arrays whose lengths carry the
//! numbers). Before 5.12 the loader rewrites the definition into an LRU
//! hash keyed by thread id (crates/tracer, object.rs) and clears
//! [`TASK_STORAGE`]; the programs then take the hash path, and the
//! verifier, reading the flag as a constant (a frozen .rodata value),
//! never walks the task-storage helpers that kernel lacks.
use core::ptr;

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE},
    helpers::generated::{
        bpf_get_current_task_btf, bpf_map_lookup_elem, bpf_map_update_elem, bpf_task_storage_get,
    },
};

/// `BPF_MAP_TYPE_TASK_STORAGE` (include/uapi/linux/bpf.h).
const MAP_TYPE: usize = 29;

/// 1 when the maps defined by [`TaskStorage`] are task storage; 0 when
/// the loader made them LRU hashes keyed by thread id (a load-time
/// global in .rodata).
#[unsafe(no_mangle)]
static TASK_STORAGE: u8 = 1;

#[inline(always)]
pub(crate) fn task_storage() -> bool {
    // SAFETY: .rodata global, see read::field.
    unsafe { ptr::read_volatile(&TASK_STORAGE) != 0 }
}

#[repr(C)]
pub(crate) struct TaskStorage<T> {
    r#type: *const [i32; MAP_TYPE],
    key: *const i32,
    value: *const T,
    /// Local storage maps take no size: `max_entries` must be 0
    /// (`bpf_local_storage_map_alloc_check()`); the LRU fallback gets
    /// its entries from the loader.
    max_entries: *const [i32; 0],
    /// Required of local storage: values are allocated as tasks first
    /// ask for them.
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholders the loader reads as BTF; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub(crate) const fn new() -> Self {
        TaskStorage {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    #[inline(always)]
    fn as_map(&self) -> *mut core::ffi::c_void {
        ptr::from_ref(self).cast_mut().cast()
    }

    /// The current thread's value (`tid` is its id); with `create`, made
    /// on its first use, zeroed. `None` when it has none, when the kernel
    /// refused the lookup because another task-storage operation was
    /// under way on this CPU (the tracing programs' variant of the
    /// helper, `bpf_task_storage_get_recur`, takes a per-CPU busy
    /// counter), or when the LRU fallback found no room.
    #[inline(always)]
    pub(crate) fn current(
        &self,
        tid: u32,
        create: bool,
        zeros: impl FnOnce() -> Option<*const T>,
    ) -> Option<*mut T> {
        let value = if task_storage() {
            let flags = if create {
                BPF_LOCAL_STORAGE_GET_F_CREATE as u64
            } else {
                0
            };
            // SAFETY: helper calls; the map pointer is relocated by the
            // loader, the task is the current one (a trusted BTF pointer).
            unsafe {
                bpf_task_storage_get(
                    self.as_map(),
                    bpf_get_current_task_btf(),
                    ptr::null_mut(),
                    flags,
                )
            }
        } else {
            let key = ptr::from_ref(&tid).cast();
            // SAFETY: helper calls on the map; `zeros` gives a live map
            // value of the right size.
            unsafe {
                let found = bpf_map_lookup_elem(self.as_map(), key);
                match (found.is_null() && create).then(zeros).flatten() {
                    Some(template) => {
                        bpf_map_update_elem(self.as_map(), key, template.cast(), 0);
                        bpf_map_lookup_elem(self.as_map(), key)
                    }
                    None => found,
                }
            }
        };
        (!value.is_null()).then_some(value.cast())
    }
}
