//! The eBPF object built by build.rs, embedded in the binary.

/// Bytes of the compiled `writeback-ebpf` object (ELF, with BTF).
pub(crate) static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/writeback"));

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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use object::{Object, ObjectSymbol};

    use super::*;
    use crate::plan::{Candidate, candidates};
    use wbscope_model::plan::Concept;

    /// Every program and load-time global the loader names is in the
    /// embedded object. A stale object (build.rs's nested eBPF build is
    /// fingerprinted by file times) would otherwise only show at attach
    /// time, as a refused candidate or a load error.
    #[test]
    fn the_object_has_every_program_and_global_the_loader_names() {
        let elf = object::File::parse(EBPF_OBJECT).expect("embedded object is ELF");
        let symbols: HashSet<&str> = elf.symbols().filter_map(|s| s.name().ok()).collect();
        let mut wanted: Vec<&str> = vec![
            "KERNEL_MEMBERS",
            "SCAN_MEMBERS",
            "BLOCK_MEMBERS",
            "TASK_MEMBERS",
            "FILE_MEMBERS",
            "EXTENT_MEMBERS",
            "FILTER",
            "trial_fentry",
            "trial_kprobe",
            "trial_tp_btf",
        ];
        wanted.extend(
            crate::cost::FLOOR_PROGRAMS
                .iter()
                .map(|(program, _)| *program),
        );
        let others = crate::plan::sched_switch_candidates();
        for concept in Concept::ALL {
            for candidate in candidates(concept).into_iter().chain(others.clone()) {
                match candidate {
                    Candidate::BtfPrograms { attaches, .. } => {
                        wanted.extend(attaches.iter().map(|a| a.program));
                    }
                    Candidate::Tracepoints(attaches) => {
                        wanted.extend(attaches.iter().map(|a| a.program));
                        wanted.extend(attaches.iter().filter_map(|a| a.layout_global));
                    }
                    Candidate::Function { .. }
                    | Candidate::WithCall { .. }
                    | Candidate::Procfs { .. } => {}
                }
            }
        }
        let missing: Vec<&str> = wanted
            .into_iter()
            .filter(|name| !symbols.contains(name))
            .collect();
        assert!(
            missing.is_empty(),
            "missing from the eBPF object: {missing:?}"
        );
    }
}
