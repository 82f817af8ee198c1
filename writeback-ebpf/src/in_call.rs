//! Which threads are inside a writepages call: one byte per thread in
//! [`IN_CALL`], set by the thread itself (writepages.rs at an ext4 call's
//! start and end, hook.rs around `do_writepages()`) and read by the hooks
//! that fire inside a call (per bio, per folio, per context switch).
use aya_ebpf::{macros::map, maps::Array};

/// One byte per thread id, non-zero while the thread is inside a
/// writepages call (its entry in CURRENT holds the call); eight threads to an array
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
/// Inside an ext4 call the CPU budget's sample left out: its thread's
/// CURRENT entry still holds the call before, and it is not "in a call"
/// for the hooks inside one
/// ([`in_call`] tests [`IN_EXT4_CALL`] only).
pub(crate) const SAMPLED_OUT_CALL: u8 = 4;
/// A bit beside the call state: the thread runs flusher work
/// (`writeback_start` seen, `writeback_written` not yet), so it has a
/// `WORK` entry. A call's start asks this byte, an inlined array load,
/// before the hash lookup, which most calls (fsync, sync_file_range,
/// any call outside the flushers) would make only to miss: about 200 ns
/// of a 2.3 µs start program under an fsync storm (the ablation in
/// docs/bench-log/fsync-storm.md).
const IN_FLUSHER_WORK: u8 = 8;

/// The whole byte, the flusher-work bit included.
#[inline(always)]
fn whole_byte(tid: u32) -> u8 {
    IN_CALL
        .get(tid >> 3)
        .map_or(0, |word| (*word >> ((tid & 7) * 8)) as u8)
}

/// `tid`'s call state: [`IN_EXT4_CALL`], [`EXT4_CALL_ENDED`],
/// [`SAMPLED_OUT_CALL`] or 0.
#[inline(always)]
pub(crate) fn call_byte(tid: u32) -> u8 {
    whole_byte(tid) & !IN_FLUSHER_WORK
}

/// Whether `tid` runs flusher work (see [`IN_FLUSHER_WORK`]).
#[inline(always)]
pub(crate) fn in_flusher_work(tid: u32) -> bool {
    whole_byte(tid) & IN_FLUSHER_WORK != 0
}

/// Marks `tid` as running flusher work or not; called only by `tid`.
#[inline(always)]
pub(crate) fn set_flusher_work(tid: u32, on: bool) {
    let state = call_byte(tid);
    write_byte(tid, if on { state | IN_FLUSHER_WORK } else { state });
}

/// Whether thread `tid` is inside a writepages call drawn into the sample
/// (IN_CALL), its CURRENT entry holding that call.
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

/// Sets `tid`'s call state, keeping its flusher-work bit; called only by
/// `tid` itself, so the read and the write of its byte cannot interleave
/// with another writer's.
#[inline(always)]
pub(crate) fn set_call_byte(tid: u32, value: u8) {
    write_byte(tid, (whole_byte(tid) & IN_FLUSHER_WORK) | value);
}

#[inline(always)]
fn write_byte(tid: u32, value: u8) {
    if let Some(word) = IN_CALL.get_ptr_mut(tid >> 3) {
        // SAFETY: a byte inside the 8-byte array value, owned by `tid`.
        unsafe { *word.cast::<u8>().add((tid & 7) as usize) = value };
    }
}
