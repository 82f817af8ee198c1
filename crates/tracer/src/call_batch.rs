//! The ext4 calls each CPU keeps before sending them as one ring record
//! (`writeback_common::CallBatch`, writeback-ebpf writepages.rs): asking
//! the CPUs that keep some for them, and reading a batch record.
use std::{
    mem::size_of,
    os::fd::{AsFd as _, AsRawFd as _},
};

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
    programs::{ProgramFd, RawTracePoint},
};
use aya_obj::generated::{BPF_F_TEST_RUN_ON_CPU, bpf_attr, bpf_cmd};
use writeback_common::{CALL_BATCH, CallBatch, CallBatchState, WritepagesCall, record_kind};

/// The program that sends a CPU's kept calls, run on that CPU.
const FLUSH_PROGRAM: &str = "flush_call_batch";

/// What asks the CPUs for their kept calls.
pub(crate) struct CallFlush {
    state: PerCpuArray<MapData, CallBatchState>,
    program: ProgramFd,
    /// Whether a CPU that went offline keeping calls was said.
    offline_said: bool,
    /// Whether a failed flush was said.
    failure_said: bool,
}

impl CallFlush {
    /// Loads the flush program (never attached) and takes the batches'
    /// state map: at attach, before the privileges are dropped.
    pub(crate) fn load(ebpf: &mut Ebpf) -> anyhow::Result<CallFlush> {
        let program: &mut RawTracePoint = ebpf
            .program_mut(FLUSH_PROGRAM)
            .with_context(|| format!("{FLUSH_PROGRAM} missing from the object"))?
            .try_into()
            .with_context(|| format!("{FLUSH_PROGRAM} is not a raw tracepoint program"))?;
        program
            .load()
            .with_context(|| format!("loading {FLUSH_PROGRAM}"))?;
        let program = program
            .fd()
            .with_context(|| format!("{FLUSH_PROGRAM}'s descriptor"))?
            .try_clone()
            .with_context(|| format!("keeping {FLUSH_PROGRAM}'s descriptor"))?;
        let state = ebpf
            .take_map("BATCH_STATE")
            .context("BATCH_STATE map already taken or missing")?;
        let state = PerCpuArray::try_from(state).context("BATCH_STATE is not a per-CPU array")?;
        Ok(CallFlush {
            state,
            program,
            offline_said: false,
            failure_said: false,
        })
    }

    /// Has every CPU that keeps calls send them to the ring; returns how
    /// many were asked. A CPU gone offline keeps its calls (the run
    /// fails with ENXIO) until it is back, which is said once.
    pub(crate) fn flush(&mut self) -> anyhow::Result<usize> {
        let states = self
            .state
            .get(&0, 0)
            .context("reading the CPUs' call batches")?;
        let mut asked = 0;
        for (cpu, state) in states.iter().enumerate() {
            if state.count == 0 {
                continue;
            }
            asked += 1;
            match self.run_on(cpu as u32) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                    if !self.offline_said {
                        self.offline_said = true;
                        log::warn!(
                            "CPU {cpu} went offline keeping {} writepages call(s): they are \
                             reported once it is back",
                            state.count
                        );
                    }
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("asking CPU {cpu} for its calls"));
                }
            }
        }
        Ok(asked)
    }

    /// [`CallFlush::flush`], its first failure said as a warning: the
    /// calls a CPU keeps then wait for its next full batch, and those
    /// kept when the trace stops are not reported.
    pub(crate) fn flush_or_warn(&mut self) {
        if let Err(e) = self.flush()
            && !self.failure_said
        {
            self.failure_said = true;
            log::warn!(
                "{e:#}: each CPU's last writepages calls (up to {}) reach the output late, \
                 and not at all when the trace stops",
                CALL_BATCH - 1
            );
        }
    }

    /// Runs the flush program on `cpu` (`BPF_PROG_TEST_RUN` with
    /// `BPF_F_TEST_RUN_ON_CPU`: net/bpf/test_run.c runs a raw tracepoint
    /// program there, from an IPI unless it is this CPU).
    fn run_on(&self, cpu: u32) -> std::io::Result<()> {
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
        Ok(())
    }
}

/// The calls of a [`CallBatch`] record: `None` when `bytes` is not one
/// (another kind, or too short); a count past [`CALL_BATCH`] is cut to it.
pub(crate) fn batch_calls(bytes: &[u8]) -> Option<impl Iterator<Item = WritepagesCall> + '_> {
    if bytes.len() < size_of::<CallBatch>() {
        return None;
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if word(0)? != record_kind::CALL_BATCH {
        return None;
    }
    let count = (word(4)? as usize).min(CALL_BATCH);
    let first = std::mem::offset_of!(CallBatch, calls);
    Some((0..count).map(move |i| {
        let at = first + i * size_of::<WritepagesCall>();
        // SAFETY: the length was checked against the whole batch;
        // WritepagesCall is Pod and read_unaligned needs no alignment.
        unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast::<WritepagesCall>()) }
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
        let inos: Vec<u64> = batch_calls(&bytes[1..]).unwrap().map(|c| c.ino).collect();
        assert_eq!(inos, [100, 101, 102]);
        let full: Vec<u64> = batch_calls(&bytes_of(&batch(CALL_BATCH as u32)))
            .unwrap()
            .map(|c| c.ino)
            .collect();
        assert_eq!(full.len(), CALL_BATCH);
        assert_eq!(full[CALL_BATCH - 1], 100 + CALL_BATCH as u64 - 1);
    }

    #[test]
    fn short_other_and_overcounted_batches_are_bounded() {
        let bytes = bytes_of(&batch(2));
        assert!(batch_calls(&bytes[..bytes.len() - 1]).is_none());
        let mut other = batch(2);
        other.kind = record_kind::WRITEPAGES_CALL;
        assert!(batch_calls(&bytes_of(&other)).is_none());
        assert_eq!(
            batch_calls(&bytes_of(&batch(u32::MAX))).unwrap().count(),
            CALL_BATCH
        );
        assert_eq!(batch_calls(&bytes_of(&batch(0))).unwrap().count(), 0);
    }
}
