//! The privilege drop in a guest (trace and record drop to `--user` after
//! attaching): `/proc/PID/status` of the
//! default trace run once it is tracing (dev/vm/guest/checks.sh,
//! `save_status`), beside the line it printed about the drop. On kernels
//! before 5.19 with `kernel.unprivileged_bpf_disabled` set (Debian 11 and
//! 12) the kernel refuses map reads without CAP_BPF, so that one
//! capability may stay (crates/tracer/src/privileges.rs,
//! `map_access`); everything else is checked the same on every kernel.
use std::{collections::HashMap, path::Path};

use crate::checks::Check;

/// CAP_BPF's bit (include/uapi/linux/capability.h: `#define CAP_BPF 39`).
const CAP_BPF: u64 = 1 << 39;

/// The check of the default run, from the files in `out`.
pub(crate) fn judge(out: &Path) -> Vec<Check> {
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    vec![dropped(&read("default.status"), &read("default.err"))]
}

/// The fields of a `/proc/PID/status`.
fn fields(status: &str) -> HashMap<&str, &str> {
    status
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

fn dropped(status: &str, stderr: &str) -> Check {
    let name = "privileges-dropped";
    let Some(line) = stderr.lines().find(|l| l.contains("privileges ")) else {
        return Check::new(name, false, "the trace printed no privileges line".into());
    };
    let f = fields(status);
    let mut wrong = Vec::new();
    for ids in ["Uid", "Gid"] {
        match f.get(ids) {
            Some(v) if v.split_whitespace().all(|id| id != "0") => {}
            v => wrong.push(format!("{ids} {v:?}")),
        }
    }
    let expect = |key: &str, want: &str, wrong: &mut Vec<String>| {
        if f.get(key) != Some(&want) {
            wrong.push(format!("{key} {:?}, not {want}", f.get(key)));
        }
    };
    expect("NoNewPrivs", "1", &mut wrong);
    expect("Seccomp", "2", &mut wrong);
    for set in ["CapInh", "CapBnd", "CapAmb"] {
        expect(set, "0000000000000000", &mut wrong);
    }
    // CAP_BPF alone, and only when the run said why.
    let kept_bpf = line.contains("no capabilities but CAP_BPF");
    let allowed = if kept_bpf { CAP_BPF } else { 0 };
    for set in ["CapPrm", "CapEff"] {
        match f.get(set).map(|v| u64::from_str_radix(v, 16)) {
            Some(Ok(bits)) if bits == allowed => {}
            v => wrong.push(format!("{set} {v:?}, not {allowed:#x}")),
        }
    }
    let pass = wrong.is_empty() && line.contains("privileges dropped");
    let detail = if pass {
        let uid = f.get("Uid").copied().unwrap_or_default();
        format!("uid {uid}; {}", line.trim_start_matches("wbscope: "))
    } else {
        format!("{}; {}", wrong.join(", "), line)
    };
    Check::new(name, pass, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(uid: &str, prm: &str, eff: &str, seccomp: &str) -> String {
        format!(
            "Name:\twbscope\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t65534\t65534\t65534\t65534\n\
             CapInh:\t0000000000000000\nCapPrm:\t{prm}\nCapEff:\t{eff}\n\
             CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n\
             Seccomp:\t{seccomp}\n"
        )
    }

    const NONE: &str = "0000000000000000";
    const BPF: &str = "0000008000000000";
    const DROPPED: &str = "wbscope: privileges dropped: user nobody (uid 65534, gid 65534), \
                           no capabilities, no_new_privs, seccomp filter of 40 system calls";
    const KEPT_BPF: &str = "wbscope: privileges dropped: user nobody (uid 65534, gid 65534), \
                            no capabilities but CAP_BPF (kernel 5.10 ...), no_new_privs";

    #[test]
    fn a_full_drop_passes_and_anything_left_fails() {
        assert!(dropped(&status("65534", NONE, NONE, "2"), DROPPED).pass);
        assert!(!dropped(&status("0", NONE, NONE, "2"), DROPPED).pass);
        assert!(!dropped(&status("65534", NONE, NONE, "0"), DROPPED).pass);
        // CAP_BPF without the line that says why is a capability left.
        let c = dropped(&status("65534", BPF, BPF, "2"), DROPPED);
        assert!(!c.pass);
        assert!(c.detail.contains("CapPrm"), "{}", c.detail);
        assert!(
            !dropped(
                &status("65534", NONE, NONE, "2"),
                "wbscope: privileges kept: x"
            )
            .pass
        );
        assert!(!dropped("no wbscope child of 12", DROPPED).pass);
        assert!(!dropped(&status("65534", NONE, NONE, "2"), "").pass);
    }

    #[test]
    fn cap_bpf_alone_passes_where_the_run_kept_it() {
        assert!(dropped(&status("65534", BPF, BPF, "2"), KEPT_BPF).pass);
        let more = "000000c000000000"; // CAP_BPF and CAP_PERFMON
        assert!(!dropped(&status("65534", more, BPF, "2"), KEPT_BPF).pass);
        assert!(!dropped(&status("65534", BPF, more, "2"), KEPT_BPF).pass);
    }
}
