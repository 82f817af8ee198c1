//! The kernel matrix: the probe paths this machine cannot exercise
//! (fentry, kprobe, older kernels, PREEMPT_RT, cloud builds), proven in
//! qemu on the Debian kernels of [`KERNELS`], whose guests also run
//! `cargo xtask vm-scenario`'s scenarios (`scenario.rs`).
//!
//! Once per run: one build of wbscope, one root image holding it
//! (`rootimg.rs`) and one base initramfs (busybox and the guest scripts,
//! `initramfs.rs`, `dev/vm/guest/`), shared by every kernel. Per kernel:
//! resolve the newest build of its series in Debian's archive, download
//! and unpack it once (`kernel.rs`, `apt.rs`, cached under target/vm/),
//! append its modules to the base initramfs, boot it under TCG
//! (`qemu.rs`), one guest at a time, and judge what the guest wrote
//! (`checks.rs`, `cgroups.rs`, `rt.rs`). Facts behind each choice are in
//! docs/toolchain.md, "Other kernels under qemu".
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

use crate::{
    cgroups, checks, durability, initramfs,
    kernel::{self, KERNELS},
    privileges, qemu, rootimg, rt,
};

/// Seconds one `wbscope trace` run may take inside the guest (its own
/// `timeout`), start-up and workload together. A working wbscope starts in
/// 1-2 s under TCG on 6.12 on an idle host; on 6.1, where the verifier
/// refuses programs only after long walks (E2BIG), start took 35-90 s;
/// on 6.12-rt with the host's two cores shared by four compiles (load 10)
/// it took 80-90 s with function hooks, 24 s with tracepoints only.
const GUEST_TRACE_SECS: u64 = 240;

/// The same for `wbscope probes`: its output (the reasons for each
/// refusal) is the diagnosis when the traces fail.
const GUEST_PROBES_SECS: u64 = 240;

/// One guest step on the host's clock: a backstop behind the guest's own
/// timeouts, so that normally the guest says which command was stopped.
const HOST_STEP_SECS: u64 = GUEST_PROBES_SECS + 30;

/// Kernels selected by `--kernel`: a label from [`KERNELS`] or `all`.
pub(crate) fn select(kernel: Option<&str>) -> anyhow::Result<Vec<&'static kernel::KernelSpec>> {
    match kernel.unwrap_or("all") {
        "all" => Ok(KERNELS.iter().collect()),
        // `cargo xtask test`'s share of CI's time (docs/toolchain.md).
        "suite" => Ok(KERNELS.iter().filter(|k| k.in_test_suite).collect()),
        label => match KERNELS.iter().find(|k| k.label == label) {
            Some(k) => Ok(vec![k]),
            None => bail!(
                "unknown kernel {label:?}: choose {}, suite or all",
                KERNELS
                    .iter()
                    .map(|k| k.label)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    }
}

/// Whether qemu can be run here at all.
pub(crate) fn qemu_available() -> bool {
    programs::SH
        .command()
        .args(["-c", &format!("command -v {}", programs::QEMU.name)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Environment variable naming a wbscope binary to test instead of building
/// one (e.g. a binary from CI, or while the tree does not build).
pub(crate) const BINARY_VAR: &str = "WBSCOPE_VM_BINARY";

/// Environment variable naming the step groups to run and judge (of
/// [`STEP_GROUPS`], space-separated), e.g. `rt` to run only the PREEMPT_RT
/// interleaving check; all when unset. For working on one check: the
/// guests take minutes each under TCG.
pub(crate) const STEPS_VAR: &str = "WBSCOPE_VM_STEPS";

/// checks.sh's groups (its `want`).
const STEP_GROUPS: &[&str] = &["traces", "cgroups", "rt", "xfs"];

/// The groups [`STEPS_VAR`] names, or an error naming the valid ones.
fn steps_from_env() -> anyhow::Result<Vec<String>> {
    let text = std::env::var(STEPS_VAR).unwrap_or_default();
    let steps: Vec<String> = text.split_whitespace().map(String::from).collect();
    if let Some(bad) = steps.iter().find(|s| !STEP_GROUPS.contains(&s.as_str())) {
        bail!(
            "{STEPS_VAR}: unknown step group {bad:?}: choose from {}",
            STEP_GROUPS.join(", ")
        );
    }
    Ok(steps)
}

/// The binary the guests run: [`BINARY_VAR`], else a release build. Release
/// because under TCG a debug wbscope's start-up costs seconds more per run,
/// with three runs per kernel.
pub(crate) fn wbscope_binary() -> anyhow::Result<PathBuf> {
    match std::env::var_os(BINARY_VAR) {
        Some(path) => {
            let path = PathBuf::from(path);
            eprintln!("xtask: vm: testing {} ({BINARY_VAR})", path.display());
            Ok(path)
        }
        None => xtask::build(true),
    }
}

/// Runs the checks on each kernel, prints one line per check per kernel,
/// and fails if any check failed or any guest could not be run.
pub(crate) fn run(kernels: &[&kernel::KernelSpec], wbscope: &Path) -> anyhow::Result<()> {
    if !qemu_available() {
        bail!(
            "{} not found: install {} (cargo xtask setup does for tests)",
            programs::QEMU.name,
            programs::QEMU.package
        );
    }
    let wbscope = wbscope
        .canonicalize()
        .with_context(|| format!("wbscope binary {}", wbscope.display()))?;
    let root = vm_dir()?;
    let started = Instant::now();
    let steps = steps_from_env()?;
    let shared = prepare_shared(&root, &wbscope, &steps.join(" "), &GuestScenarios::NONE)?;
    println!(
        "vm: shared root image and initramfs built in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let mut failed = 0usize;
    let mut broken = Vec::new();
    for spec in kernels {
        let t0 = Instant::now();
        match run_one(spec, &root, &shared) {
            Ok(outcome) => {
                let mut failed_here = 0usize;
                for check in &outcome.checks {
                    println!("vm {} {check}", spec.label);
                    if !check.pass {
                        failed_here += 1;
                    }
                }
                failed += failed_here;
                let steps: Vec<String> = outcome
                    .run
                    .steps
                    .iter()
                    .map(|(name, d)| format!("{name} {:.1}s", d.as_secs_f64()))
                    .collect();
                println!(
                    "vm {} kernel {}: {:.1}s in all (prepare {:.1}s; {})",
                    spec.label,
                    outcome.release,
                    t0.elapsed().as_secs_f64(),
                    outcome.prepare.as_secs_f64(),
                    steps.join(", ")
                );
                if failed_here > 0 {
                    println!(
                        "vm {} serial log: {}",
                        spec.label,
                        outcome.run.log.display()
                    );
                }
            }
            Err(e) => {
                println!("vm {} error: {e:#}", spec.label);
                broken.push(spec.label);
            }
        }
    }
    // The time limits themselves, once: a guest that cannot boot in time
    // is a one-line failure naming its serial log, and no qemu is left.
    if let Some(spec) = kernels.iter().find(|k| !broken.contains(&k.label)) {
        let check = boot_limit_check(spec, &root, &shared);
        println!("vm {} {check}", spec.label);
        if !check.pass {
            failed += 1;
        }
    }
    println!(
        "vm: {} check(s) failed, {} kernel(s) could not be tested, {:.1}s",
        failed,
        broken.len(),
        started.elapsed().as_secs_f64()
    );
    if failed > 0 || !broken.is_empty() {
        bail!("vm-test failed");
    }
    Ok(())
}

struct Outcome {
    release: String,
    prepare: Duration,
    run: qemu::GuestRun,
    checks: Vec<checks::Check>,
}

/// What every kernel's guest shares: the root image and the base
/// initramfs.
pub(crate) struct Shared {
    root_image: PathBuf,
    base_initramfs: Vec<u8>,
    /// [`STEPS_VAR`]'s groups; empty for all.
    steps: Vec<String>,
}

/// What the `scenario` group runs (`cargo xtask vm-scenario`).
pub(crate) struct GuestScenarios<'a> {
    pub(crate) names: &'a str,
    pub(crate) repeat: u32,
}

impl GuestScenarios<'_> {
    const NONE: GuestScenarios<'static> = GuestScenarios {
        names: "",
        repeat: 1,
    };
}

pub(crate) fn prepare_shared(
    root: &Path,
    wbscope: &Path,
    steps: &str,
    scenarios: &GuestScenarios,
) -> anyhow::Result<Shared> {
    let run_dir = root.join("run");
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let root_image = run_dir.join("root.img");
    rootimg::build(wbscope, &root_image)?;
    let base_initramfs = initramfs::base(&initramfs::GuestConfig {
        wbscope: rootimg::GUEST_WBSCOPE,
        trace_timeout_secs: GUEST_TRACE_SECS,
        probes_timeout_secs: GUEST_PROBES_SECS,
        steps,
        scenarios: scenarios.names,
        repeat: scenarios.repeat,
    })?;
    Ok(Shared {
        root_image,
        base_initramfs,
        steps: steps.split_whitespace().map(String::from).collect(),
    })
}

/// Size of the image the guest writes its results to (a tar archive of
/// text files; the traces' JSON lines are the largest, a few MiB).
const OUT_IMAGE_BYTES: u64 = 128 << 20;

/// The test disk's size and the host's limit on one guest step.
pub(crate) struct GuestPlan {
    pub(crate) disk_bytes: u64,
    pub(crate) step_limit: Duration,
}

/// The checks' guests: 512 MiB sparse, room for one file at a time (the
/// cgroup doctor step's 320 MiB the largest) plus the journal, and above
/// mkfs.xfs's 300 MB minimum for the xfs runs.
const CHECKS_PLAN: GuestPlan = GuestPlan {
    disk_bytes: 512 << 20,
    step_limit: Duration::from_secs(HOST_STEP_SECS),
};

fn run_one(spec: &kernel::KernelSpec, root: &Path, shared: &Shared) -> anyhow::Result<Outcome> {
    let booted = boot(spec, root, shared, &CHECKS_PLAN)?;
    let out = &booted.out;
    let wanted = |group: &str| shared.steps.is_empty() || shared.steps.iter().any(|s| s == group);
    let mut checks = Vec::new();
    if wanted("traces") || wanted("xfs") {
        checks.extend(checks::judge(out, wanted("xfs")));
    }
    if wanted("traces") {
        checks.extend(privileges::judge(out));
        checks.extend(durability::judge(out));
    }
    if wanted("cgroups") {
        checks.extend(cgroups::judge(out));
    }
    if wanted("rt") {
        checks.extend(rt::judge(out, spec.meta == "linux-image-rt-amd64"));
    }
    Ok(Outcome {
        release: booted.release,
        prepare: booted.prepare,
        run: booted.run,
        checks,
    })
}

/// A guest that ran: what it wrote is unpacked in `out`.
pub(crate) struct Booted {
    pub(crate) release: String,
    pub(crate) prepare: Duration,
    pub(crate) run: qemu::GuestRun,
    pub(crate) out: PathBuf,
}

/// Boots `spec`'s guest with the shared image and initramfs and unpacks
/// what it saved.
pub(crate) fn boot(
    spec: &kernel::KernelSpec,
    root: &Path,
    shared: &Shared,
    plan: &GuestPlan,
) -> anyhow::Result<Booted> {
    let t0 = Instant::now();
    let tree = kernel::ensure(spec, root)?;
    let work = root.join("run").join(spec.label);
    // Fresh per run: stale outputs must never be judged.
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    let out = work.join("out");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let initrd = work.join("initramfs.cpio");
    initramfs::with_modules(&shared.base_initramfs, &tree, &initrd)?;
    let disk = work.join("disk.img");
    sparse_file(&disk, plan.disk_bytes)?;
    let out_image = work.join("out.img");
    sparse_file(&out_image, OUT_IMAGE_BYTES)?;
    let prepare = t0.elapsed();

    let log = root.join("logs").join(format!("{}-serial.log", spec.label));
    let run = qemu::run_guest(&qemu::GuestSpec {
        kernel: &tree.vmlinuz,
        initrd: &initrd,
        disk: &disk,
        root: &shared.root_image,
        out: &out_image,
        log: &log,
        boot_limit: Duration::from_secs(120),
        step_limit: plan.step_limit,
    });
    // What the guest saved is judged even when it failed part-way.
    let unpacked = unpack_results(&out_image, &out);
    // The disks are large and rebuilt next run.
    let _ = std::fs::remove_file(&disk);
    let _ = std::fs::remove_file(&out_image);
    let run = run?;
    unpacked?;
    Ok(Booted {
        release: tree.release,
        prepare,
        run,
        out,
    })
}

fn sparse_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(bytes))
        .with_context(|| format!("creating {}", path.display()))
}

/// Unpacks the tar archive the guest wrote at the start of `image` into
/// `out` (an image the guest never wrote is all zeros: an empty archive).
fn unpack_results(image: &Path, out: &Path) -> anyhow::Result<()> {
    let status = programs::TAR
        .command()
        .arg("-xf")
        .arg(image)
        .arg("-C")
        .arg(out)
        .stderr(std::process::Stdio::null())
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar -xf {}: {status}", image.display());
    }
    Ok(())
}

/// Boots `spec`'s guest of the run just made with a 1 s boot limit, which
/// no TCG boot meets (5-10 s here).
fn boot_limit_check(spec: &kernel::KernelSpec, root: &Path, shared: &Shared) -> checks::Check {
    const NAME: &str = "boot-limit-enforced";
    let work = root.join("run").join(spec.label);
    let tree = match kernel::ensure(spec, root) {
        Ok(tree) => tree,
        Err(e) => return checks::Check::new(NAME, false, format!("{e:#}")),
    };
    let out = work.join("out-boot-limit.img");
    let log = root
        .join("logs")
        .join(format!("{}-boot-limit-serial.log", spec.label));
    let disk = work.join("disk.img");
    if let Err(e) = sparse_file(&out, 1 << 20).and_then(|()| sparse_file(&disk, 1 << 20)) {
        return checks::Check::new(NAME, false, format!("{e:#}"));
    }
    let outcome = qemu::run_guest(&qemu::GuestSpec {
        kernel: &tree.vmlinuz,
        initrd: &work.join("initramfs.cpio"),
        disk: &disk,
        root: &shared.root_image,
        out: &out,
        log: &log,
        boot_limit: Duration::from_secs(1),
        step_limit: Duration::from_secs(1),
    });
    let left = qemu_processes_using(&disk);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&disk);
    match outcome {
        Ok(_) => checks::Check::new(NAME, false, "the guest booted within 1 s".into()),
        Err(e) => {
            let reason = format!("{e:#}");
            let one_line = !reason.contains('\n');
            let names_log = reason.contains(&log.display().to_string());
            checks::Check::new(
                NAME,
                one_line && names_log && left == 0,
                format!("{reason}; qemu processes left: {left}"),
            )
        }
    }
}

/// How many processes have `path` in their command line (qemu names its
/// disk image there).
fn qemu_processes_using(path: &Path) -> usize {
    let needle = path.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .count()
}

/// vm/ in cargo's target directory (the only place this task writes to,
/// apart from the temporary files of apt and dpkg).
pub(crate) fn vm_dir() -> anyhow::Result<PathBuf> {
    Ok(xtask::target_dir()?.join("vm"))
}
