//! The eBPF object built by build.rs, embedded in the binary.

/// Bytes of the compiled `writeback-ebpf` object (ELF, with BTF).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/writeback"));

/// `wbscope --version`: what was built, from which revision, with which
/// kernel programs (the hash identifies the embedded object whatever the
/// build host).
pub fn version_text() -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(EBPF_OBJECT);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "wbscope {}\ngit revision: {}\neBPF object: sha256:{hex} ({} bytes)\n",
        env!("CARGO_PKG_VERSION"),
        env!("WBSCOPE_GIT_REVISION"),
        EBPF_OBJECT.len()
    )
}
