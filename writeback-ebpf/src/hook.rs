//! The writepages call of any filesystem, seen by function hooks on
//! `do_writepages(mapping, wbc)` (mm/page-writeback.c): fentry/fexit where
//! the kernel allows them, kprobe/kretprobe otherwise. Every writepages
//! call goes through it — fsync, sync_file_range, a flusher inode pass,
//! sync — so each gives one record with its real start and end
//! (`boundary::HOOK`), unlike the per-folio grouping of generic.rs that
//! kernels without function hooks fall back to (docs/probes.md, "generic
//! calls").
//!
//! Pages written are the budget consumed, `wbc->nr_to_write` at entry
//! minus at exit: `do_writepages()` hands the `wbc` to the filesystem's
//! `->writepages` (retrying on -ENOMEM for WB_SYNC_ALL), and the
//! writepages loop takes each folio's `folio_nr_pages()` off
//! `wbc->nr_to_write` as it writes it (`writeback_iter()` since 6.10,
//! `write_cache_pages()` before; ext4's `mpage_submit_folio()`, iomap's
//! callers through the same loop). It is what `ext4_writepages_result`
//! reports as pages_written for ext4, and what `__writeback_single_inode()`
//! charges the flusher's budget with. btrfs raises a finite budget
//! mid-call (`writepage_delalloc()`), so for its flusher calls the figure
//! is the budget's net change, not the pages (docs/probes.md).
//!
//! ext4's calls have their own, richer records (writepages.rs): a
//! `do_writepages()` inside which an ext4 call started and ended emits
//! nothing (the IN_CALL byte the ext4 end leaves, cleared here at entry).
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{Array, LruHashMap},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use writeback_common::{GenericCall, boundary, generic_flags as gf, members as m, stat};

use crate::{
    bump,
    generic::{close_clock, emit, open, read_wbc},
    in_call::{EXT4_CALL_ENDED, SAMPLED_OUT_CALL, call_byte, in_ext4_call, set_call_byte},
    members::KERNEL_MEMBERS,
    read::{Access, Probed, Typed, current_tid, member, member_ptr, now_ns, raw_arg},
    thread_entry,
    writepages::{filtered_out, inode_key},
};

/// A `do_writepages()` call in flight on a thread: the record so far and
/// the mapping, which the kretprobe does not see again.
#[repr(C)]
#[derive(Clone, Copy)]
struct HookCall {
    mapping: u64,
    call: GenericCall,
}

/// Each thread's `do_writepages()` in flight, or its last one: made at
/// the thread's first call and written in place by each call after, its
/// `mapping` 0 once the call ended. A lookup at each end instead of an
/// insert and a remove, which cost several times more under an fsync
/// storm (docs/bench-log/fsync-storm.md, the same change to ext4's
/// `CURRENT`); LRU, so that the entries of threads long gone make room.
/// 8,192 threads that made writepages calls recently.
#[map]
static HOOKED: LruHashMap<u32, HookCall> = LruHashMap::with_max_entries(8192, 0);

/// Zeros, never written: the value a thread's first `HOOKED` entry is
/// inserted with (its fields are written after), off the 512-byte stack.
#[map]
static HOOK_ZEROS: Array<HookCall> = Array::with_max_entries(1, 0);

#[inline(always)]
fn begin<A: Access>(mapping: *const u8, wbc_ptr: *const u8) -> u32 {
    let tid = current_tid();
    // An ext4 call that ended on this thread before this one is not ours,
    // nor one left out of the sample whose end was never seen.
    let byte = call_byte(tid);
    if byte == EXT4_CALL_ENDED || byte == SAMPLED_OUT_CALL {
        set_call_byte(tid, 0);
    }
    let k = &KERNEL_MEMBERS;
    let inode = member_ptr::<A>(mapping, k, m::MAPPING_HOST);
    let key = inode_key::<A>(inode);
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if filtered_out(key.dev, key.ino, (pid_tgid >> 32) as u32, cgroup_id) {
        bump(stat::FILTERED);
        return 0;
    }
    let Some(h) = thread_entry(&HOOKED, &HOOK_ZEROS, tid) else {
        bump(stat::INFLIGHT_FULL);
        return 0;
    };
    // Not open while its fields are written (a nested call's end, or a
    // kretprobe, finds no call).
    h.mapping = 0;
    let w = read_wbc::<A>(wbc_ptr, tid);
    open::<A>(
        &mut h.call,
        &key,
        &w,
        w.flags | gf::WBC_SEEN | gf::FUNCTION_HOOK,
        now_ns(),
        pid_tgid,
        cgroup_id,
        member::<A>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64,
    );
    h.call.boundary = boundary::HOOK;
    // Last: the call is open once its mapping is set.
    h.mapping = mapping as u64;
    0
}

/// fentry on `do_writepages(struct address_space *mapping, struct
/// writeback_control *wbc)`: both typed by BTF, members loaded directly.
#[fentry(function = "do_writepages")]
pub fn generic_fentry_writepages(ctx: FEntryContext) -> u32 {
    begin::<Typed>(raw_arg(&ctx, 0) as *const u8, raw_arg(&ctx, 1) as *const u8)
}

/// fexit sees the arguments again and then the return value.
#[fexit(function = "do_writepages")]
pub fn generic_fexit_writepages(ctx: FExitContext) -> u32 {
    let ret = raw_arg(&ctx, 2) as i32;
    end_typed(
        raw_arg(&ctx, 0) as *const u8,
        raw_arg(&ctx, 1) as *const u8,
        ret,
    )
}

/// fexit: the members are loaded through the arguments, typed by BTF
/// (the copies kept at entry are plain numbers to the verifier).
#[inline(always)]
fn end_typed(mapping: *const u8, wbc: *const u8, ret: i32) -> u32 {
    let tid = current_tid();
    // SAFETY: this thread's own entry, fields copied out at once.
    let Some((m0, w0)) = HOOKED
        .get_ptr(&tid)
        .map(|h| unsafe { ((*h).mapping, (*h).call.wbc) })
        .filter(|&(m0, _)| m0 != 0)
    else {
        unstarted(mapping);
        return 0;
    };
    // Only the call whose entry this is closes it (a nested call's entry
    // replaced the outer one's).
    if m0 != mapping as u64 || w0 != wbc as u64 {
        return 0;
    }
    end_with::<Typed>(mapping, wbc, ret)
}

/// A call that ends with no start seen: in flight when wbscope attached,
/// or its fentry run skipped by the kernel. On PREEMPT_RT a BPF program
/// runs with migration, not preemption, disabled, and the per-program
/// recursion guard (`__bpf_prog_enter_recur()` in
/// kernel/bpf/trampoline.c) skips a run while another run of the same
/// program is preempted on that CPU: a 6.12-rt guest lost one
/// `do_writepages()` call of 42 so. Counted with the other ends without a
/// start (`unmatched_results`) unless the filters drop it, so that no call
/// goes missing unsaid.
#[inline(always)]
fn unstarted(mapping: *const u8) {
    // An ext4 call inside it has its own record (writepages.rs): nothing
    // lost (the 6.12-rt guest skipped 33 of 368 such entries).
    let tid = current_tid();
    if call_byte(tid) == EXT4_CALL_ENDED {
        set_call_byte(tid, 0);
        return;
    }
    let inode = member_ptr::<Typed>(mapping, &KERNEL_MEMBERS, m::MAPPING_HOST);
    let key = inode_key::<Typed>(inode);
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if !filtered_out(key.dev, key.ino, tgid, cgroup_id) {
        bump(stat::UNMATCHED_RESULTS);
    }
}

#[inline(always)]
fn end_with<A: Access>(mapping: *const u8, wbc: *const u8, ret: i32) -> u32 {
    let tid = current_tid();
    let Some(h) = HOOKED.get_ptr_mut(&tid) else {
        return 0;
    };
    let byte = call_byte(tid);
    // SAFETY: this thread's own entry; only this thread writes it.
    let h = unsafe { &mut *h };
    if byte == EXT4_CALL_ENDED {
        // ext4's record has this call.
        set_call_byte(tid, 0);
    } else if !in_ext4_call(tid) {
        let k = &KERNEL_MEMBERS;
        let left = member::<A>(wbc, k, m::WBC_NR_TO_WRITE);
        let c = &mut h.call;
        let now = now_ns();
        c.end_ns = now;
        c.last_ns = now;
        c.nr_left = left;
        c.flags |= gf::FINAL_BUDGET;
        // Clamped: a budget raised mid-call (btrfs) can end above where
        // it started.
        c.pages = c.nr_to_write.saturating_sub(left).max(0) as u64;
        c.writeback_index_after = member::<A>(mapping, k, m::MAPPING_WRITEBACK_INDEX) as u64;
        c.ret = ret;
        close_clock::<A>(c);
        emit(c, boundary::HOOK);
    }
    // Ended: the entry stays for the thread's next call.
    h.mapping = 0;
    0
}

#[kprobe]
pub fn generic_kprobe_writepages(ctx: ProbeContext) -> u32 {
    let (Some(mapping), Some(wbc)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1)) else {
        return 0;
    };
    begin::<Probed>(mapping as *const u8, wbc as *const u8)
}

/// The kretprobe sees no arguments: the mapping and `wbc` kept at entry
/// are read through bpf_probe_read_kernel, which takes plain numbers.
#[kretprobe]
pub fn generic_kretprobe_writepages(ctx: RetProbeContext) -> u32 {
    let ret: i64 = ctx.ret();
    let Some(h) = HOOKED.get_ptr(&current_tid()) else {
        return 0;
    };
    // SAFETY: this thread's own entry, fields copied out at once.
    let (mapping, wbc) = unsafe { ((*h).mapping, (*h).call.wbc) };
    if mapping == 0 {
        return 0;
    }
    end_with::<Probed>(mapping as *const u8, wbc as *const u8, ret as i32)
}
