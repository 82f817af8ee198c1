//! Checks that the process may load and attach BPF programs, so that a
//! missing privilege is reported as one line naming it instead of an EPERM
//! deep inside a loader.
use caps::{CapSet, Capability};

/// What is missing, in the words printed to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON (missing: {})",
    .missing.join(", ")
)]
pub(crate) struct MissingPrivileges {
    pub(crate) missing: Vec<&'static str>,
}

/// Effective capabilities needed to load tracing programs: CAP_BPF for
/// BPF_PROG_LOAD/BPF_MAP_CREATE and CAP_PERFMON for tracing program types
/// (both split out of CAP_SYS_ADMIN in 5.8). CAP_SYS_ADMIN alone covers both.
pub(crate) fn check() -> Result<(), MissingPrivileges> {
    let has = |cap| caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false);
    if has(Capability::CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&'static str> = [
        (Capability::CAP_BPF, "CAP_BPF"),
        (Capability::CAP_PERFMON, "CAP_PERFMON"),
    ]
    .into_iter()
    .filter(|(cap, _)| !has(*cap))
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(MissingPrivileges { missing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_each_missing_capability() {
        let err = MissingPrivileges {
            missing: vec!["CAP_BPF", "CAP_PERFMON"],
        };
        assert_eq!(
            err.to_string(),
            "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON \
             (missing: CAP_BPF, CAP_PERFMON)"
        );
    }
}
