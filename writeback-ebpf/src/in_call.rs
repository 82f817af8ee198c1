//! Which threads are inside a writepages call: one byte per thread in
//! [`IN_CALL`], set by the thread itself (writepages.rs at an ext4 call's
//! start and end, hook.rs around `do_writepages()`) and read by the hooks
//! that fire inside a call (per bio, per folio, per context switch).
use aya_ebpf::{macros::map, maps::Array};

/// One byte per thread id, non-zero while the thread is inside a
/// writepages call (has an entry in CURRENT); eight threads to an array
/// entry. Array lookups are inlined by the verifier, a hash lookup is a
/// helper call (about 90 ns here, `wbscope probes --cost`), and
/// the per-bio and per-folio hooks ask on every event whether a thread
/// is in a call, often to hear no. Bytes, not bits: each thread
/// writes only its own byte, so no atomics are needed (the BPF target has
/// no atomic OR). Userspace sizes it to the kernel's pid_max at load; the
/// default here covers PID_MAX_LIMIT on 64-bit (include/linux/threads.h).
#[map]
static IN_CALL: Array<u64> = Array::with_max_entries((4 << 20) / 8, 0);

/// `tid`'s IN_CALL byte: [`IN_EXT4_CALL`] while the thread is inside an
/// ext4 writepages call, [`EXT4_CALL_ENDED`] once one ended (until the
/// thread's next `do_writepages()` hook clears it), 0 otherwise.
pub(crate) const IN_EXT4_CALL: u8 = 1;
pub(crate) const EXT4_CALL_ENDED: u8 = 2;
/// Inside an ext4 call the CPU budget's sample left out: no CURRENT or
/// INFLIGHT entry, and not "in a call" for the hooks inside one
/// ([`in_call`] tests [`IN_EXT4_CALL`] only).
pub(crate) const SAMPLED_OUT_CALL: u8 = 4;

#[inline(always)]
pub(crate) fn call_byte(tid: u32) -> u8 {
    IN_CALL
        .get(tid >> 3)
        .map_or(0, |word| (*word >> ((tid & 7) * 8)) as u8)
}

/// Whether thread `tid` is inside a writepages call drawn into the sample
/// (IN_CALL), with its CURRENT and INFLIGHT entries.
#[inline(always)]
pub(crate) fn in_call(tid: u32) -> bool {
    call_byte(tid) & IN_EXT4_CALL != 0
}

/// Whether thread `tid` is inside an ext4 writepages call, drawn into the
/// sample or not: its folios are that call's, never a generic call's.
#[inline(always)]
pub(crate) fn in_ext4_call(tid: u32) -> bool {
    call_byte(tid) & (IN_EXT4_CALL | SAMPLED_OUT_CALL) != 0
}

/// Sets `tid`'s byte of IN_CALL; called only by `tid` itself.
#[inline(always)]
pub(crate) fn set_call_byte(tid: u32, value: u8) {
    if let Some(word) = IN_CALL.get_ptr_mut(tid >> 3) {
        // SAFETY: a byte inside the 8-byte array value, owned by `tid`.
        unsafe { *word.cast::<u8>().add((tid & 7) as usize) = value };
    }
}
