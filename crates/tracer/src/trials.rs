//! Function hooks tried before they are used: an empty fentry, kprobe or
//! tp_btf program is loaded against the target so the probe plan can say
//! what this kernel allows ("BPF_PROG_LOAD returned EPERM"), and our own
//! BTF-typed programs are loaded and attached with the same reasons.
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, FEntry, KProbe, ProbeKind, Program, ProgramError},
};

use super::{btf::Btf as KernelBtf, plan::BtfAttach, retprobe::RetProbe};
use wbscope_model::plan::HookKind;

/// Where the kernel lists its perf event sources; no `kprobe` there means
/// a kernel built without CONFIG_KPROBES.
pub(super) const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// Trial loads of the empty fentry/kprobe/tp_btf programs, and the
/// kretprobes made through tracefs (`retprobe.rs`) for the attached
/// programs.
pub(super) struct Trials {
    btf: Option<Result<Btf, String>>,
    tracefs: PathBuf,
    retprobes: Vec<(&'static str, RetProbe)>,
}

impl Trials {
    pub(super) fn new(tracefs: &Path) -> Trials {
        Trials {
            btf: None,
            tracefs: tracefs.to_path_buf(),
            retprobes: Vec::new(),
        }
    }

    /// The kretprobes attached through tracefs, to keep while tracing,
    /// each with its program's name.
    pub(super) fn into_retprobes(self) -> Vec<(&'static str, RetProbe)> {
        self.retprobes
    }

    /// Attaches the loaded kretprobe `p` of `program` to `target` with
    /// room for every call in flight (retprobe.rs); where tracefs does not
    /// take it, through the kprobe PMU with the kernel's default.
    fn attach_return(
        &mut self,
        program: &'static str,
        p: &mut KProbe,
        target: &str,
    ) -> Result<(), ProgramError> {
        let made = p
            .fd()
            .map_err(|e| anyhow::anyhow!("{e}"))
            .and_then(|fd| RetProbe::attach(&self.tracefs, target, fd));
        match made {
            Ok(r) => {
                self.retprobes.push((program, r));
                Ok(())
            }
            Err(e) => {
                log::warn!(
                    "kretprobe on {target}: {e:#}; attached through the kprobe PMU with the \
                     kernel's default number of calls in flight (returns beyond it are missed)"
                );
                p.attach(target, 0).map(drop)
            }
        }
    }

    fn btf(&mut self) -> Result<&Btf, String> {
        self.btf
            .get_or_insert_with(|| {
                Btf::from_sys_fs()
                    .map_err(|e| format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Tries one function hook; returns why it is not used.
    pub(super) fn try_hook(&mut self, ebpf: &mut Ebpf, kind: HookKind, target: &str) -> String {
        match self.trial(ebpf, kind, target) {
            Ok(()) => format!(
                "{kind} works on this kernel, but wbscope has no {kind} program for this \
                 concept yet"
            ),
            Err(reason) => reason,
        }
    }

    /// Loads and attaches wbscope's own BTF-typed programs; on any failure
    /// the ones already attached are unloaded again.
    pub(super) fn attach_btf(
        &mut self,
        ebpf: &mut Ebpf,
        kind: HookKind,
        attaches: &[BtfAttach],
    ) -> Result<(), String> {
        if kind == HookKind::Kprobe && !Path::new(KPROBE_PMU).exists() {
            return Err(format!("kernel built without kprobes (no {KPROBE_PMU})"));
        }
        let btf = self.btf()?.clone();
        let mut done: Vec<&str> = Vec::new();
        let mut result = Ok(());
        for a in attaches {
            let Some(program) = ebpf.program_mut(a.program) else {
                result = Err(format!("program {} missing from the object", a.program));
                break;
            };
            let d = |e: ProgramError| describe(&e, a.target);
            let step = match program {
                Program::BtfTracePoint(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                Program::FEntry(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                Program::FExit(p) => p
                    .load(a.target, &btf)
                    .map_err(d)
                    .and_then(|()| p.attach().map(drop).map_err(d)),
                // Attached by the event's name, which finds a module's
                // events too (`bpf_get_raw_tracepoint_module()`).
                Program::RawTracePoint(p) => p
                    .load()
                    .map_err(d)
                    .and_then(|()| p.attach(a.target).map(drop).map_err(d)),
                Program::KProbe(p) => p.load().map_err(d).and_then(|()| {
                    if matches!(p.kind(), ProbeKind::Return) {
                        self.attach_return(a.program, p, a.target).map_err(d)
                    } else {
                        p.attach(a.target, 0).map(drop).map_err(d)
                    }
                }),
                _ => Err(format!("{} is not a {kind} program", a.program)),
            };
            match step {
                Ok(()) => done.push(a.program),
                Err(e) => {
                    result = Err(format!("{} ({}): {e}", a.target, a.program));
                    break;
                }
            }
        }
        if result.is_err() {
            // Unloading detaches: nothing of a half-attached pair stays.
            self.retprobes.retain(|(name, _)| !done.contains(name));
            for name in done {
                let _ = match ebpf.program_mut(name) {
                    Some(Program::BtfTracePoint(p)) => p.unload(),
                    Some(Program::FEntry(p)) => p.unload(),
                    Some(Program::FExit(p)) => p.unload(),
                    Some(Program::KProbe(p)) => p.unload(),
                    Some(Program::RawTracePoint(p)) => p.unload(),
                    _ => Ok(()),
                };
            }
        }
        result
    }

    fn trial(&mut self, ebpf: &mut Ebpf, kind: HookKind, target: &str) -> Result<(), String> {
        match kind {
            HookKind::Fentry => {
                let btf = self.btf()?.clone();
                let program: &mut FEntry = program_as(ebpf, "trial_fentry")?;
                program
                    .load(target, &btf)
                    .map_err(|e| describe(&e, target))?;
                program.unload().map_err(|e| e.to_string())
            }
            HookKind::TpBtf => {
                let btf = self.btf()?.clone();
                let program: &mut BtfTracePoint = program_as(ebpf, "trial_tp_btf")?;
                program
                    .load(target, &btf)
                    .map_err(|e| describe(&e, target))?;
                program.unload().map_err(|e| e.to_string())
            }
            HookKind::Kprobe => {
                if !Path::new(KPROBE_PMU).exists() {
                    return Err(format!(
                        "kernel built without kprobes (no {})",
                        PathBuf::from(KPROBE_PMU).display()
                    ));
                }
                let program: &mut KProbe = program_as(ebpf, "trial_kprobe")?;
                if !is_loaded(program) {
                    program.load().map_err(|e| describe(&e, target))?;
                }
                let link = program
                    .attach(target, 0)
                    .map_err(|e| describe(&e, target))?;
                program.detach(link).map_err(|e| e.to_string())
            }
            HookKind::RawTp | HookKind::Tracepoint => Err("not a function hook".into()),
        }
    }
}

fn is_loaded(program: &KProbe) -> bool {
    program.fd().is_ok()
}

fn program_as<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("trial program {name} missing from the object"))?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())
}

/// A short reason for a failed trial: the syscall and errno when that is
/// what happened ("BPF_PROG_LOAD returned EPERM").
pub(super) fn describe(e: &ProgramError, target: &str) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            // The verifier's reasons, for --log: the one-line reason below
            // says only that it refused.
            log::info!("{target}: BPF_PROG_LOAD failed; verifier log:\n{verifier_log}");
            match missing_helper(&verifier_log.to_string()) {
                Some(helper) => format!(
                    "BPF_PROG_LOAD returned {}: the kernel lacks {helper}",
                    errno_text(io_error)
                ),
                None => format!("BPF_PROG_LOAD returned {}", errno_text(io_error)),
            }
        }
        // Only a function ext4's own BTF has is "in the module"; others
        // (writeback_iter on 6.1) are simply absent.
        ProgramError::Btf(_) if in_ext4_module_btf(target) => format!(
            "{target} is not in vmlinux's BTF (ext4 is a module here: its BTF is split, in \
             /sys/kernel/btf/ext4, which aya 0.14 cannot load programs against)"
        ),
        ProgramError::Btf(_) => format!("{target} is not in the kernel's BTF"),
        ProgramError::SyscallError(s) => {
            format!("{} returned {}", s.call, errno_text(&s.io_error))
        }
        other => other.to_string(),
    }
}

/// BPF helpers the programs call that older kernels lack, by number
/// (`enum bpf_func_id`, include/uapi/linux/bpf.h) and the release that
/// added each.
const LATER_HELPERS: &[(u32, &str)] = &[(158, "bpf_get_current_task_btf (Linux 5.11)")];

/// The helper a verifier log refuses as unknown ("invalid func
/// unknown#158" on 5.10), named when it is one of [`LATER_HELPERS`].
fn missing_helper(log: &str) -> Option<String> {
    let rest = &log[log.find("invalid func unknown#")? + "invalid func unknown#".len()..];
    let id: u32 = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(LATER_HELPERS.iter().find(|(n, _)| *n == id).map_or_else(
        || format!("BPF helper #{id}"),
        |(_, name)| (*name).to_string(),
    ))
}

/// Whether `function` is in the ext4 module's split BTF (errors: no).
/// The module's function names are read once per process: every refused
/// fentry candidate asks, and each read parses vmlinux's BTF too.
fn in_ext4_module_btf(function: &str) -> bool {
    static EXT4_FUNCTIONS: OnceLock<HashSet<String>> = OnceLock::new();
    EXT4_FUNCTIONS
        .get_or_init(|| {
            if !KernelBtf::kernel_has_module_btf("ext4") {
                return HashSet::new();
            }
            let base = KernelBtf::from_kernel(None).map(|b| b.type_count());
            let full = KernelBtf::from_kernel(Some("ext4"));
            match (base, full) {
                (Ok(base), Ok(full)) => full
                    .function_names_after(base)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                _ => HashSet::new(),
            }
        })
        .contains(function)
}

fn errno_text(e: &std::io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ESRCH) => "ESRCH",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(524) => "ENOTSUPP",
        Some(libc::E2BIG) => "E2BIG",
        _ => return e.to_string(),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helper_the_kernel_lacks_is_named() {
        let log = "678: (bf) r1 = r0\n679: (85) call unknown#158\ninvalid func unknown#158\n\
                   verification time 545047 usec\n";
        assert_eq!(
            missing_helper(log).as_deref(),
            Some("bpf_get_current_task_btf (Linux 5.11)")
        );
        assert_eq!(
            missing_helper("invalid func unknown#999\n").as_deref(),
            Some("BPF helper #999")
        );
        assert_eq!(missing_helper("R1 invalid mem access 'inv'"), None);
    }
}
