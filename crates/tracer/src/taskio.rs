//! Each followed process's I/O counts read through a BPF task iterator
//! and caught at its exit (writeback-ebpf/src/taskio.rs), in place of
//! /proc/PID/io: true after the privilege drop, which leaves the tracer
//! no /proc file of another user (`ptrace_may_access()` refuses them) and
//! no `open` at all (seccomp), and at a process's exit, after which its
//! /proc file is gone.
use std::{
    collections::HashMap,
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::Context as _;
use aya::{
    Btf, Ebpf,
    maps::{HashMap as BpfHashMap, MapData},
    programs::{Iter, TracePoint},
};
use writeback_common::{TASK_IO_LIVE_KIND, TaskIo};

use crate::{btf::Btf as KernelBtf, members::member_spec};

/// `enum bpf_cmd` and `enum bpf_attach_type` of include/uapi/linux/bpf.h.
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// `bpf(cmd, attr)` with `attr` the leading words of `union bpf_attr`
/// the command reads (the kernel takes a shorter attr as zero-filled:
/// `bpf_check_uarg_tail_zero()`); the descriptor it returns.
fn bpf(cmd: libc::c_long, attr: &[u32]) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is valid for its length, which is passed; the
    // kernel copies it in and reads nothing else.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel just returned, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A process's counts (bytes), as /proc/PID/io would print them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// The thread group leader's CLOCK_BOOTTIME start, ns.
    pub(crate) start_boottime: u64,
    pub(crate) wchar: u64,
    pub(crate) write_bytes: u64,
    pub(crate) cancelled_write_bytes: u64,
}

impl Counts {
    pub(crate) fn of(record: &TaskIo) -> Counts {
        Counts {
            start_boottime: record.start_boottime,
            wchar: record.wchar,
            write_bytes: record.write_bytes,
            cancelled_write_bytes: record.cancelled_write_bytes,
        }
    }
}

/// The members the task programs read, all required.
pub(crate) fn resolve_members(btf: &KernelBtf) -> Result<writeback_common::TaskIoMembers, String> {
    let mut table = writeback_common::TaskIoMembers::EMPTY;
    for (slot, (strukt, name)) in writeback_common::task_io_members::PATHS.iter().enumerate() {
        table.members[slot] = member_spec(btf, strukt, name, false)?;
    }
    Ok(table)
}

/// The attached iterator and exit program, and the map of the processes
/// they report.
pub(crate) struct TaskCounts {
    /// The iterator's BPF link: closing it detaches the program.
    link: OwnedFd,
    followed: BpfHashMap<MapData, u32, u32>,
}

impl TaskCounts {
    /// Loads and attaches both programs (their members are in the object
    /// already); the reason when this kernel refuses either.
    pub(crate) fn attach(ebpf: &mut Ebpf) -> Result<TaskCounts, String> {
        // Test-only (the `test-hooks` feature, never in a release build):
        // a kernel where the programs do not load, so that a test sees
        // what a dropped run then says.
        #[cfg(feature = "test-hooks")]
        if std::env::var_os("WBSCOPE_TEST_NO_TASK_ITERATOR").is_some() {
            return Err("refused for a test (WBSCOPE_TEST_NO_TASK_ITERATOR)".into());
        }
        let btf = Btf::from_sys_fs().map_err(|e| format!("the kernel's BTF: {e}"))?;
        let iter: &mut Iter = ebpf
            .program_mut("task_io_iter")
            .ok_or("program task_io_iter not in the object")?
            .try_into()
            .map_err(|e| format!("task_io_iter: {e}"))?;
        iter.load("task", &btf)
            .map_err(|e| format!("loading the task iterator: {e}"))?;
        // The link made here, not by aya: aya's `IterLink` hands its
        // descriptor out only once (`into_file`), and an iterator is made
        // from the link at every reading.
        let prog_fd = iter.fd().map_err(|e| format!("the task iterator: {e}"))?;
        let link = bpf(
            BPF_LINK_CREATE,
            &[prog_fd.as_fd().as_raw_fd() as u32, 0, BPF_TRACE_ITER, 0],
        )
        .map_err(|e| format!("attaching the task iterator: {e}"))?;
        let exit: &mut TracePoint = ebpf
            .program_mut("task_io_exit")
            .ok_or("program task_io_exit not in the object")?
            .try_into()
            .map_err(|e| format!("task_io_exit: {e}"))?;
        exit.load()
            .map_err(|e| format!("loading the exit program: {e}"))?;
        exit.attach("sched", "sched_process_exit")
            .map_err(|e| format!("attaching sched:sched_process_exit: {e}"))?;
        let followed = ebpf
            .take_map("FOLLOWED")
            .ok_or("map FOLLOWED not in the object")?;
        let followed = BpfHashMap::try_from(followed).map_err(|e| format!("map FOLLOWED: {e}"))?;
        Ok(TaskCounts { link, followed })
    }

    /// Reports `tgid`'s counts from the next reading on; false when the
    /// map is full.
    pub(crate) fn follow(&mut self, tgid: u32) -> bool {
        self.followed.insert(tgid, 0, 0).is_ok()
    }

    pub(crate) fn forget(&mut self, tgid: u32) {
        // A process never followed (the map was full) is not there.
        let _ = self.followed.remove(&tgid);
    }

    /// The counts of every followed process alive now, its threads'
    /// summed (/proc/PID/io's `whole` reading, fs/proc/base.c
    /// `do_io_accounting()`).
    pub(crate) fn read(&self) -> anyhow::Result<HashMap<u32, Counts>> {
        // BPF_ITER_CREATE's attr: `iter_create { link_fd; flags; }`.
        let fd = bpf(BPF_ITER_CREATE, &[self.link.as_raw_fd() as u32, 0])
            .context("making a task iterator")?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut bytes)
            .context("reading the task iterator")?;
        Ok(sum(&bytes))
    }
}

/// The iterator's records summed per process.
fn sum(bytes: &[u8]) -> HashMap<u32, Counts> {
    let mut out: HashMap<u32, Counts> = HashMap::new();
    for chunk in bytes.chunks_exact(size_of::<TaskIo>()) {
        // SAFETY: a whole record; TaskIo is Pod and read_unaligned needs
        // no alignment.
        let r: TaskIo = unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast()) };
        if r.kind != TASK_IO_LIVE_KIND {
            continue;
        }
        let c = out.entry(r.tgid).or_default();
        c.start_boottime = r.start_boottime;
        c.wchar += r.wchar;
        c.write_bytes += r.write_bytes;
        c.cancelled_write_bytes += r.cancelled_write_bytes;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tgid: u32, write_bytes: u64) -> TaskIo {
        TaskIo {
            kind: TASK_IO_LIVE_KIND,
            tgid,
            start_boottime: 7,
            wchar: write_bytes + 1,
            write_bytes,
            cancelled_write_bytes: 0,
        }
    }

    fn bytes(records: &[TaskIo]) -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| {
                // SAFETY: TaskIo is repr(C) plain integers.
                unsafe {
                    std::slice::from_raw_parts(
                        (r as *const TaskIo).cast::<u8>(),
                        size_of::<TaskIo>(),
                    )
                }
                .to_vec()
            })
            .collect()
    }

    #[test]
    fn threads_are_summed_per_process() {
        let got = sum(&bytes(&[record(10, 4096), record(11, 1), record(10, 8192)]));
        assert_eq!(got[&10].write_bytes, 12288);
        assert_eq!(got[&10].wchar, 12290);
        assert_eq!(got[&11].write_bytes, 1);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_torn_tail_and_other_kinds_are_left_out() {
        let mut other = record(12, 5);
        other.kind = 0;
        let mut b = bytes(&[record(10, 4096), other]);
        b.extend_from_slice(&[1, 2, 3]);
        let got = sum(&b);
        assert_eq!(got.len(), 1);
        assert_eq!(got[&10].write_bytes, 4096);
    }
}
