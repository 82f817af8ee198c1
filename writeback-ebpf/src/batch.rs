//! Records a CPU keeps and sends several to one ring record: a ring
//! record's reserve and submit, whose lock and positions every CPU
//! shares, cost about 290 ns here, more than the rest of a cheap program
//! (docs/bench-log/fsync-storm.md, step 8). Two batches use it: ext4's
//! call records (writepages.rs) and the inode dirtyings (dirtier.rs).
//!
//! Each batch is a per-CPU array value with a [`BatchState`] beside it.
//! A CPU that goes quiet would keep its last records, so userspace reads
//! the states before it drains the ring and runs the batch's flush
//! program on each CPU that keeps some (`BPF_PROG_TEST_RUN` with
//! `BPF_F_TEST_RUN_ON_CPU`, crates/tracer/src/cpu_batch.rs). That run may
//! interrupt a program writing the batch on that CPU: the state's busy
//! flag keeps it off, and it says so, so that userspace asks again.
use writeback_common::BatchState;

/// A batch of [`Batch::N`] records, and how it is sent.
pub(crate) trait Batch {
    /// Records the batch holds.
    const N: usize;
    /// Sends the batch's first `count` records as one ring record.
    fn send(&mut self, count: u32);
}

/// Opens `state`'s batch for one record: marks it busy and returns the
/// record's place, below [`Batch::N`]. [`commit`] closes it. (Two calls
/// around the caller's store rather than a closure: one the compiler
/// did not inline put the end program past the BPF stack's 512 bytes.)
#[inline(always)]
pub(crate) fn begin<B: Batch>(state: &mut BatchState) -> usize {
    // SAFETY: this CPU's state. Volatile: the flag's stores stay around
    // the batch's writes, where a flush that interrupts this program
    // (`flush`) looks for them.
    unsafe { core::ptr::write_volatile(&mut state.busy, 1) };
    // SAFETY: as above.
    let kept = unsafe { core::ptr::read_volatile(&state.count) } as usize;
    // A full batch is sent before the count reaches N; a count out of
    // range (never written so) starts the batch over.
    if kept < B::N { kept } else { 0 }
}

/// Counts the record written at `at` (from [`begin`]), sends the batch
/// once it holds [`Batch::N`], and clears the busy flag.
#[inline(always)]
pub(crate) fn commit<B: Batch>(batch: &mut B, state: &mut BatchState, at: usize) {
    let kept = at as u32 + 1;
    if kept as usize >= B::N {
        batch.send(kept);
        // SAFETY: this CPU's state, as in `begin`.
        unsafe { core::ptr::write_volatile(&mut state.count, 0) };
    } else {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(&mut state.count, kept) };
    }
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut state.busy, 0) };
}

/// What a flush program returns: the batch was sent, or was empty.
pub(crate) const FLUSHED: i32 = 0;
/// What a flush program returns: a program it interrupted was writing
/// the batch, which stays on the CPU; userspace asks again.
pub(crate) const BUSY: i32 = 1;

/// Sends the records `state` counts in `batch`, unless a program is
/// writing it (the flush then interrupted that program on this CPU).
#[inline(always)]
pub(crate) fn flush<B: Batch>(batch: &mut B, state: &mut BatchState) -> i32 {
    // SAFETY: this CPU's state; nothing else runs on it meanwhile but
    // what this run interrupted, which the busy flag names.
    let (busy, count) = unsafe {
        (
            core::ptr::read_volatile(&state.busy),
            core::ptr::read_volatile(&state.count),
        )
    };
    if count == 0 {
        return FLUSHED;
    }
    if busy != 0 {
        return BUSY;
    }
    batch.send(count);
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut state.count, 0) };
    FLUSHED
}
