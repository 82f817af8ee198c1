//! The records each CPU keeps before sending several as one ring record
//! (writeback-ebpf batch.rs): ext4's calls (`writeback_common::CallBatch`,
//! to `EVENTS`) and the inode dirtyings (`DirtyingBatch`, to
//! `DIRTYINGS`). Asking the CPUs that keep some for them, before each
//! drain, and reading a batch record.
use std::{
    mem::size_of,
    os::fd::{AsFd as _, AsRawFd as _},
};

use anyhow::Context as _;
use aya::{
    Ebpf, Pod,
    maps::{MapData, PerCpuArray},
    programs::{ProgramFd, RawTracePoint},
};
use aya_obj::generated::{BPF_F_TEST_RUN_ON_CPU, bpf_attr, bpf_cmd};
use writeback_common::{
    BatchState, CALL_BATCH, CallBatch, DIRTYING_BATCH, DIRTYING_BATCH_KIND, DirtyingBatch,
    InodeDirtying, WritepagesCall, record_kind,
};

/// A batch record's layout: its kind word, how many records it holds,
/// where they start, and its flush program and state map.
pub(crate) trait Batched: Sized {
    type Item: Pod;
    /// The record's first word.
    const KIND: u32;
    /// Records the batch holds.
    const N: usize;
    /// Byte offset of the first record.
    const ITEMS_AT: usize;
    /// The never-attached program that sends a CPU's batch.
    const FLUSH_PROGRAM: &'static str;
    /// The per-CPU `BatchState` map beside the batches.
    const STATE_MAP: &'static str;
    /// What the records are, for the warnings.
    const WHAT: &'static str;
}

impl Batched for CallBatch {
    type Item = WritepagesCall;
    const KIND: u32 = record_kind::CALL_BATCH;
    const N: usize = CALL_BATCH;
    const ITEMS_AT: usize = std::mem::offset_of!(CallBatch, calls);
    const FLUSH_PROGRAM: &'static str = "flush_call_batch";
    const STATE_MAP: &'static str = "BATCH_STATE";
    const WHAT: &'static str = "writepages call(s)";
}

impl Batched for DirtyingBatch {
    type Item = InodeDirtying;
    const KIND: u32 = DIRTYING_BATCH_KIND;
    const N: usize = DIRTYING_BATCH;
    const ITEMS_AT: usize = std::mem::offset_of!(DirtyingBatch, dirtyings);
    const FLUSH_PROGRAM: &'static str = "flush_dirtying_batch";
    const STATE_MAP: &'static str = "DIRTYING_STATE";
    const WHAT: &'static str = "inode dirtying(s)";
}

/// What the flush program returns when a program it interrupted was
/// writing the batch (writeback-ebpf batch.rs, `BUSY`).
const BUSY: u32 = 1;

/// Runs on one CPU while its batch stays busy: the program writing it
/// is a few hundred ns from done, and each run is an IPI of a few µs.
const BUSY_TRIES: usize = 4;

/// What asks the CPUs for the records of one kind of batch they keep.
pub(crate) struct BatchFlush {
    state: PerCpuArray<MapData, BatchState>,
    program: ProgramFd,
    /// [`Batched::WHAT`] and [`Batched::N`], for the warnings.
    what: &'static str,
    n: usize,
    /// Whether a CPU that went offline keeping records was said.
    offline_said: bool,
    /// Whether a failed flush was said.
    failure_said: bool,
}

impl BatchFlush {
    /// Loads `B`'s flush program (never attached) and takes its state
    /// map: at attach, before the privileges are dropped.
    pub(crate) fn load<B: Batched>(ebpf: &mut Ebpf) -> anyhow::Result<BatchFlush> {
        let name = B::FLUSH_PROGRAM;
        let program: &mut RawTracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("{name} missing from the object"))?
            .try_into()
            .with_context(|| format!("{name} is not a raw tracepoint program"))?;
        program.load().with_context(|| format!("loading {name}"))?;
        let program = program
            .fd()
            .with_context(|| format!("{name}'s descriptor"))?
            .try_clone()
            .with_context(|| format!("keeping {name}'s descriptor"))?;
        let state = ebpf
            .take_map(B::STATE_MAP)
            .with_context(|| format!("{} map already taken or missing", B::STATE_MAP))?;
        let state = PerCpuArray::try_from(state)
            .with_context(|| format!("{} is not a per-CPU array", B::STATE_MAP))?;
        Ok(BatchFlush {
            state,
            program,
            what: B::WHAT,
            n: B::N,
            offline_said: false,
            failure_said: false,
        })
    }

    /// Has every CPU that keeps records send them to the ring. A CPU
    /// whose batch a program was writing when asked is asked again, up to
    /// [`BUSY_TRIES`] times. A CPU gone offline keeps its records (the run
    /// fails with ENXIO) until it is back, which is said once.
    pub(crate) fn flush(&mut self) -> anyhow::Result<()> {
        let states = self
            .state
            .get(&0, 0)
            .with_context(|| format!("reading the CPUs' batches of {}", self.what))?;
        for (cpu, state) in states.iter().enumerate() {
            if state.count == 0 {
                continue;
            }
            let mut tries = 0;
            loop {
                tries += 1;
                match self.run_on(cpu as u32) {
                    Ok(BUSY) if tries < BUSY_TRIES => continue,
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                        if !self.offline_said {
                            self.offline_said = true;
                            log::warn!(
                                "CPU {cpu} went offline keeping {} {}: they are reported once \
                                 it is back",
                                state.count,
                                self.what
                            );
                        }
                        break;
                    }
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("asking CPU {cpu} for its {}", self.what));
                    }
                }
            }
        }
        Ok(())
    }

    /// [`BatchFlush::flush`], its first failure said as a warning: the
    /// records a CPU keeps then wait for its next full batch, and those
    /// kept when the trace stops are not reported.
    pub(crate) fn flush_or_warn(&mut self) {
        if let Err(e) = self.flush()
            && !self.failure_said
        {
            self.failure_said = true;
            log::warn!(
                "{e:#}: each CPU's last {} (up to {}) reach the output late, and not at all when \
                 the trace stops",
                self.what,
                self.n - 1
            );
        }
    }

    /// Runs the flush program on `cpu` (`BPF_PROG_TEST_RUN` with
    /// `BPF_F_TEST_RUN_ON_CPU`: net/bpf/test_run.c runs a raw tracepoint
    /// program there, from an IPI unless it is this CPU); returns what
    /// the program returned.
    fn run_on(&self, cpu: u32) -> std::io::Result<u32> {
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // The command's member of the union; no pointers given.
        attr.test.prog_fd = self.program.as_fd().as_raw_fd() as u32;
        attr.test.flags = BPF_F_TEST_RUN_ON_CPU;
        attr.test.cpu = cpu;
        // SAFETY: `attr` is set up for the command and holds no pointers.
        let ret = unsafe { super::batch::sys_bpf(bpf_cmd::BPF_PROG_TEST_RUN, &mut attr) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel wrote the command's member back.
        Ok(unsafe { attr.test.retval })
    }
}

/// The records of a `B` batch record: `None` when `bytes` is not one
/// (another kind, or too short); a count past [`Batched::N`] is cut to it.
pub(crate) fn batch_items<B: Batched>(bytes: &[u8]) -> Option<impl Iterator<Item = B::Item> + '_> {
    if bytes.len() < size_of::<B>() {
        return None;
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0)? != B::KIND {
        return None;
    }
    let count = (word(4)? as usize).min(B::N);
    Some((0..count).map(move |i| {
        let at = B::ITEMS_AT + i * size_of::<B::Item>();
        // SAFETY: the length was checked against the whole batch; the
        // item is Pod and read_unaligned needs no alignment.
        unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast::<B::Item>()) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::tests::bytes_of;

    fn batch(count: u32) -> CallBatch {
        let mut calls = [WritepagesCall::default(); CALL_BATCH];
        for (i, c) in calls.iter_mut().enumerate() {
            c.kind = record_kind::WRITEPAGES_CALL;
            c.ino = 100 + i as u64;
        }
        CallBatch {
            kind: record_kind::CALL_BATCH,
            count,
            calls,
        }
    }

    #[test]
    fn a_batch_gives_its_first_count_calls_even_unaligned() {
        let mut bytes = vec![0u8];
        bytes.extend(bytes_of(&batch(3)));
        let inos: Vec<u64> = batch_items::<CallBatch>(&bytes[1..])
            .unwrap()
            .map(|c| c.ino)
            .collect();
        assert_eq!(inos, [100, 101, 102]);
        let full: Vec<u64> = batch_items::<CallBatch>(&bytes_of(&batch(CALL_BATCH as u32)))
            .unwrap()
            .map(|c| c.ino)
            .collect();
        assert_eq!(full.len(), CALL_BATCH);
        assert_eq!(full[CALL_BATCH - 1], 100 + CALL_BATCH as u64 - 1);
    }

    #[test]
    fn short_other_and_overcounted_batches_are_bounded() {
        let bytes = bytes_of(&batch(2));
        assert!(batch_items::<CallBatch>(&bytes[..bytes.len() - 1]).is_none());
        let mut other = batch(2);
        other.kind = record_kind::WRITEPAGES_CALL;
        assert!(batch_items::<CallBatch>(&bytes_of(&other)).is_none());
        assert_eq!(
            batch_items::<CallBatch>(&bytes_of(&batch(u32::MAX)))
                .unwrap()
                .count(),
            CALL_BATCH
        );
        assert_eq!(
            batch_items::<CallBatch>(&bytes_of(&batch(0)))
                .unwrap()
                .count(),
            0
        );
    }
}

#[cfg(test)]
mod dirtying_tests {
    use super::*;
    use crate::ring::tests::bytes_of;

    #[test]
    fn a_dirtying_batch_gives_its_dirtyings_and_refuses_a_call_batch() {
        let mut dirtyings = [InodeDirtying::default(); DIRTYING_BATCH];
        for (i, d) in dirtyings.iter_mut().enumerate() {
            d.ino = 7 + i as u64;
        }
        let batch = DirtyingBatch {
            kind: DIRTYING_BATCH_KIND,
            count: 2,
            dirtyings,
        };
        let inos: Vec<u64> = batch_items::<DirtyingBatch>(&bytes_of(&batch))
            .unwrap()
            .map(|d| d.ino)
            .collect();
        assert_eq!(inos, [7, 8]);
        let mut other = batch;
        other.kind = record_kind::CALL_BATCH;
        assert!(batch_items::<DirtyingBatch>(&bytes_of(&other)).is_none());
    }
}
