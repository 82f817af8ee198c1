//! One kernel struct member, found in the kernel's BTF, as the
//! [`MemberSpec`] the eBPF programs read it by: the programs are built
//! without CO-RE, so every member table they are handed (the attach's and
//! the dirtier hook's) is made of these.
use writeback_common::MemberSpec;

use super::btf::Btf as KernelBtf;

/// One member's [`MemberSpec`]; errors are the rejection reason.
pub(crate) fn member_spec(
    btf: &KernelBtf,
    strukt: &str,
    name: &str,
    signed: bool,
) -> Result<MemberSpec, String> {
    let m = btf.member(strukt, name).map_err(|e| e.to_string())?;
    let offset = u16::try_from(m.byte_offset)
        .map_err(|_| format!("{strukt}.{name} at offset {} is too far", m.byte_offset))?;
    let size = u8::try_from(m.size)
        .ok()
        .filter(|s| matches!(s, 1 | 2 | 4 | 8))
        .ok_or_else(|| format!("{strukt}.{name} is {} bytes, not an integer", m.size))?;
    if m.bit_size != 0 && u32::from(m.bit_offset) + u32::from(m.bit_size) > 64 {
        return Err(format!("{strukt}.{name}: bitfield past 64 bits"));
    }
    Ok(MemberSpec::new(
        offset,
        size,
        m.bit_offset,
        m.bit_size,
        signed && m.bit_size == 0,
    ))
}

/// `task_struct.comm` as the BTF-typed programs read it (writeback-ebpf
/// read.rs, `TASK_COMM`): the spec of its first 8-byte word, the second
/// read 8 bytes on. Only the 16 bytes of `TASK_COMM_LEN`
/// (include/linux/sched.h) qualify; without it the programs call
/// `bpf_get_current_comm()`.
pub(crate) fn comm_spec(btf: &KernelBtf) -> Result<MemberSpec, String> {
    let m = btf
        .member("task_struct", "comm")
        .map_err(|e| e.to_string())?;
    if m.size != 16 || m.bit_size != 0 {
        return Err(format!("task_struct.comm is {} bytes, not 16", m.size));
    }
    let offset = u16::try_from(m.byte_offset)
        .map_err(|_| format!("task_struct.comm at offset {} is too far", m.byte_offset))?;
    Ok(MemberSpec::new(offset, 8, 0, 0, false))
}

/// What the BTF-typed programs read for the current thread's cgroup id
/// (writeback-ebpf read.rs, `TASK_CGROUP`): `task->cgroups->dfl_cgrp->
/// kn->id`, the path of `bpf_get_current_cgroup_id()` (kernel/bpf/
/// helpers.c). All or none: without one the programs call the helper.
pub(crate) fn cgroup_specs(btf: &KernelBtf) -> Result<[MemberSpec; 4], String> {
    Ok([
        member_spec(btf, "task_struct", "cgroups", false)?,
        member_spec(btf, "css_set", "dfl_cgrp", false)?,
        member_spec(btf, "cgroup", "kn", false)?,
        member_spec(btf, "kernfs_node", "id", false)?,
    ])
}
