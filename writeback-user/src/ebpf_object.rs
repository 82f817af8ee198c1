//! The eBPF object built by build.rs, embedded in the binary.

/// Bytes of the compiled `writeback-ebpf` object (ELF, with BTF).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/writeback"));
