//! The kernel struct members the BTF-typed programs of several concepts
//! read (`writeback_common::members`: the writeback control, inode,
//! superblock, mapping and task members read by writepages.rs, flusher.rs,
//! generic.rs, hook.rs and sched.rs). The programs are built without
//! CO-RE: userspace fills the table from the kernel's BTF before loading
//! (tracer/src/attach.rs).
use writeback_common::KernelMembers;

/// Struct members read by the BTF-typed programs, from the kernel's BTF.
#[unsafe(no_mangle)]
pub(crate) static KERNEL_MEMBERS: KernelMembers = KernelMembers {
    members: [writeback_common::MemberSpec::ABSENT; 16],
};
