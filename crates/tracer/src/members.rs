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
