//! The kernel matrix: the probe paths this machine cannot exercise
//! (fentry, kprobe, older kernels, PREEMPT_RT, cloud builds), proven in
//! qemu on the Debian kernels of [`KERNELS`], whose guests also run
//! `cargo xtask vm-scenario`'s scenarios (`scenario.rs`).
//!
//! Once per run, before any guest boots: one build of wbscope, one root
//! image holding it (`rootimg.rs`) and one base initramfs (busybox and
//! the guest scripts, `initramfs.rs`, `dev/vm/guest/`), shared by every
//! kernel. Per kernel: resolve the newest build of its series in Debian's
//! archive, download and unpack it once (`kernel.rs`, `apt.rs`, cached
//! under target/vm/, one kernel at a time), append its modules to the
//! base initramfs, boot it under TCG (`qemu.rs`) in one of [`lanes`]
//! guests at a time (`lanes.rs`), each in its own work dir, and judge
//! what the guest wrote (`checks.rs`, `cgroups.rs`, `rt.rs`). Facts
//! behind each choice are in docs/toolchain.md, "Other kernels under
//! qemu". `vm-test --big-host` boots guests of many possible CPUs instead
//! ([`run_big_host`], `bighost.rs`).
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

use crate::{
    bighost, cgroups, checks, durability, initramfs,
    kernel::{self, KERNELS},
    privileges,
    qemu::{self, GuestPlan},
    rootimg, rt, storm,
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

/// checks.sh's groups (its `want`; `bighost` only when named, and only in
/// the guests of `vm-test --big-host`, [`run_big_host`]).
const STEP_GROUPS: &[&str] = &[
    "traces",
    "cgroups",
    "rt",
    "xfs",
    JOURNAL_GROUP,
    BIG_HOST_GROUP,
];

/// The write spans' caused journal wait (checks.sh), only when named: a
/// minute of a syncing writer per guest, which `cargo xtask test` does
/// not spend.
pub(crate) const JOURNAL_GROUP: &str = "journal";

/// The group of the big-host guests (bighost.rs), which no other guest
/// runs: its load needs their memory and disk.
pub(crate) const BIG_HOST_GROUP: &str = "bighost";

/// The groups [`STEPS_VAR`] names, or an error naming the valid ones.
pub(crate) fn steps_from_env() -> anyhow::Result<Vec<String>> {
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

/// Environment variable: how many guests run at once (the lanes), a
/// whole number from 1; `1` boots them one after the other as the
/// harness always did. Unset: the CPUs this process may use, at most two
/// ([`lanes`]).
pub(crate) const JOBS_VAR: &str = "WBSCOPE_VM_JOBS";

/// The lanes [`JOBS_VAR`] asks for, else `min(available CPUs, 2)`. A
/// guest is one TCG vCPU, one qemu thread that keeps a host core busy:
/// more guests than cores only slow each one down, and a guest slowed
/// enough runs into its own time limits ([`GUEST_TRACE_SECS`], the boot
/// limit), which were set on 2-core hosts with at most two guests at
/// once. More lanes on a larger host are for [`JOBS_VAR`] to ask.
pub(crate) fn lanes() -> anyhow::Result<usize> {
    lanes_of(
        std::env::var(JOBS_VAR).ok().as_deref(),
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
    )
}

/// [`lanes`] for [`JOBS_VAR`]'s text (if set) and `cpus`.
fn lanes_of(var: Option<&str>, cpus: usize) -> anyhow::Result<usize> {
    match var {
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => bail!("{JOBS_VAR}={text:?}: give the number of guests to run at once, 1 or more"),
        },
        None => Ok(cpus.clamp(1, 2)),
    }
}

/// Runs the checks on each kernel in [`lanes`], prints each kernel's
/// lines when its guest has been judged, and fails if any check failed or
/// any guest could not be run.
pub(crate) fn run(kernels: &[&'static kernel::KernelSpec], wbscope: &Path) -> anyhow::Result<()> {
    let steps = steps_from_env()?;
    let lanes = lanes()?;
    let base = Base::new(wbscope)?;
    let checks = Checks::new(&base, kernels, &steps)?;
    let mut tally = Tally::default();
    crate::lanes::run(lanes, checks.jobs(), |i, r| {
        tally.report(checks.kernel(i), r);
    });
    checks.finish(tally)
}

/// `vm-test --big-host`: for each kernel, a guest per plan of
/// `plans` (one online CPU of some possible CPUs, [`bighost::PLANS`]), each
/// running only the `bighost` group, judged by bighost.rs and printed as
/// the checks' guests are; fails if a check failed or a guest could not
/// be run. [`STEPS_VAR`] is not consulted: these guests run their group
/// and nothing else.
pub(crate) fn run_big_host(
    kernels: &[&'static kernel::KernelSpec],
    plans: &[&'static GuestPlan],
    wbscope: &Path,
) -> anyhow::Result<()> {
    if std::env::var_os(STEPS_VAR).is_some() {
        eprintln!("xtask: vm: --big-host runs only its own group; {STEPS_VAR} is not consulted");
    }
    let lanes = lanes()?;
    let base = Base::new(wbscope)?;
    let load = bighost::LOAD.env();
    let shared = base.shared_with(&GuestEnv {
        steps: BIG_HOST_GROUP,
        scenarios: &GuestScenarios::NONE,
        trace_secs: bighost::GUEST_TRACE_SECS,
        extra_env: &load,
    })?;
    println!(
        "vm: shared root image and initramfs built in {:.1}s",
        base.started.elapsed().as_secs_f64()
    );
    let guests: Vec<(&'static kernel::KernelSpec, &'static GuestPlan)> = kernels
        .iter()
        .flat_map(|spec| plans.iter().map(move |plan| (*spec, *plan)))
        .collect();
    let jobs: Vec<crate::lanes::Job<'_, KernelRun>> = guests
        .iter()
        .map(|&(spec, plan)| {
            let root = &base.root;
            let shared = &shared;
            Box::new(move || {
                let t0 = Instant::now();
                let booted = boot(spec, root, shared, plan)?;
                let checks = bighost::judge(&booted.out, plan.max_cpus);
                Ok(KernelRun {
                    outcome: Outcome {
                        release: booted.release,
                        prepare: booted.prepare,
                        run: booted.run,
                        checks,
                    },
                    elapsed: t0.elapsed(),
                })
            }) as crate::lanes::Job<'_, KernelRun>
        })
        .collect();
    let mut tally = Tally::default();
    crate::lanes::run(lanes, jobs, |i, r| {
        let (spec, plan) = guests[i];
        tally.report_as(&guest_name(spec.label, plan.kind), r);
    });
    println!(
        "vm: big host: {} check(s) failed{}, {} guest(s) could not be run, {:.1}s",
        tally.failed.len(),
        tally.failed_names(),
        tally.broken.len(),
        base.started.elapsed().as_secs_f64()
    );
    if !tally.failed.is_empty() || !tally.broken.is_empty() {
        bail!("vm-test --big-host failed");
    }
    Ok(())
}

/// What every guest of a run shares on the host, made before any guest
/// boots: the wbscope under test and the read-only root image holding it
/// (`run/root.img`, rebuilt each run).
pub(crate) struct Base {
    /// target/vm.
    root: PathBuf,
    /// Canonical path of the wbscope under test.
    wbscope: PathBuf,
    image: PathBuf,
    started: Instant,
}

impl Base {
    pub(crate) fn new(wbscope: &Path) -> anyhow::Result<Base> {
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
        let run_dir = root.join("run");
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("creating {}", run_dir.display()))?;
        let image = run_dir.join("root.img");
        rootimg::build(&wbscope, &image)?;
        Ok(Base {
            root,
            wbscope,
            image,
            started,
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn wbscope(&self) -> &Path {
        &self.wbscope
    }

    /// The root image with the base initramfs of `steps` (checks.sh
    /// groups, space-separated; empty for all) and `scenarios`.
    pub(crate) fn shared(&self, steps: &str, scenarios: &GuestScenarios) -> anyhow::Result<Shared> {
        self.shared_with(&GuestEnv {
            steps,
            scenarios,
            trace_secs: GUEST_TRACE_SECS,
            extra_env: "",
        })
    }

    /// The root image with the base initramfs of `config`.
    fn shared_with(&self, config: &GuestEnv) -> anyhow::Result<Shared> {
        let base_initramfs = initramfs::base(&initramfs::GuestConfig {
            wbscope: rootimg::GUEST_WBSCOPE,
            trace_timeout_secs: config.trace_secs,
            probes_timeout_secs: GUEST_PROBES_SECS,
            steps: config.steps,
            scenarios: config.scenarios.names,
            repeat: config.scenarios.repeat,
            extra_env: config.extra_env,
        })?;
        Ok(Shared {
            root_image: self.image.clone(),
            base_initramfs,
            steps: config.steps.split_whitespace().map(String::from).collect(),
        })
    }
}

/// What a kind of guest is told in its environment file ([`Base::shared`]).
struct GuestEnv<'a> {
    /// checks.sh groups, space-separated; empty for all.
    steps: &'a str,
    scenarios: &'a GuestScenarios<'a>,
    /// Limit of one `wbscope trace` run in the guest.
    trace_secs: u64,
    /// The `bighost` group's load as /vm.env lines; empty for others.
    extra_env: &'a str,
}

/// The checks of one run, ready to boot: a job per kernel.
pub(crate) struct Checks<'a> {
    base: &'a Base,
    kernels: &'a [&'static kernel::KernelSpec],
    shared: Shared,
}

/// One kernel's checks, run and judged on a lane.
pub(crate) struct KernelRun {
    outcome: Outcome,
    /// The job's wall time, from its start on the lane.
    elapsed: Duration,
}

impl<'a> Checks<'a> {
    /// The checks' initramfs beside `base`'s root image; `steps` from
    /// [`steps_from_env`].
    pub(crate) fn new(
        base: &'a Base,
        kernels: &'a [&'static kernel::KernelSpec],
        steps: &[String],
    ) -> anyhow::Result<Checks<'a>> {
        if steps.iter().any(|s| s == BIG_HOST_GROUP) {
            bail!(
                "{STEPS_VAR}: the {BIG_HOST_GROUP} group runs only in its own guests: \
                 cargo xtask vm-test --big-host"
            );
        }
        let shared = base.shared(&steps.join(" "), &GuestScenarios::NONE)?;
        println!(
            "vm: shared root image and initramfs built in {:.1}s",
            base.started.elapsed().as_secs_f64()
        );
        Ok(Checks {
            base,
            kernels,
            shared,
        })
    }

    pub(crate) fn kernel(&self, i: usize) -> &'static kernel::KernelSpec {
        self.kernels[i]
    }

    /// A job per kernel, in the matrix's order: boot, then judge what the
    /// guest wrote.
    pub(crate) fn jobs(&self) -> Vec<crate::lanes::Job<'_, KernelRun>> {
        self.kernels
            .iter()
            .map(|spec| {
                Box::new(move || {
                    let t0 = Instant::now();
                    let outcome = run_one(spec, &self.base.root, &self.shared)?;
                    Ok(KernelRun {
                        outcome,
                        elapsed: t0.elapsed(),
                    })
                }) as crate::lanes::Job<'_, KernelRun>
            })
            .collect()
    }

    /// After every job: the boot-limit check, the summary line, and the
    /// verdict.
    pub(crate) fn finish(&self, mut tally: Tally) -> anyhow::Result<()> {
        // The time limits themselves, once: a guest that cannot boot in
        // time is a one-line failure naming its serial log, and no qemu is
        // left. Its guest reuses the first kernel's work dir that has a
        // guest's initramfs, after that guest.
        if let Some(spec) = self
            .kernels
            .iter()
            .find(|k| !tally.broken.iter().any(|b| b == k.label))
        {
            let check = boot_limit_check(spec, &self.base.root, &self.shared);
            println!("vm {} {check}", spec.label);
            if !check.pass {
                tally.failed.push(format!("{} {}", spec.label, check.name));
            }
        }
        println!(
            "vm: {} check(s) failed{}, {} kernel(s) could not be tested, {:.1}s",
            tally.failed.len(),
            tally.failed_names(),
            tally.broken.len(),
            self.base.started.elapsed().as_secs_f64()
        );
        if !tally.failed.is_empty() || !tally.broken.is_empty() {
            bail!("vm-test failed");
        }
        Ok(())
    }
}

/// The checks' verdicts so far.
#[derive(Default)]
pub(crate) struct Tally {
    /// The failed checks, as "guest check": named again in the summary
    /// line, the one line a truncated CI log is sure to keep.
    failed: Vec<String>,
    /// The guests that could not be judged, by name.
    broken: Vec<String>,
}

impl Tally {
    /// ` (guest check, …)` when checks failed, else nothing.
    fn failed_names(&self) -> String {
        if self.failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.failed.join(", "))
        }
    }

    /// Prints one kernel's lines, all at once: a line per check, then the
    /// kernel's times (and its serial log when a check failed), or the
    /// error that kept its guest from being judged.
    pub(crate) fn report(&mut self, spec: &kernel::KernelSpec, run: anyhow::Result<KernelRun>) {
        self.report_as(spec.label, run);
    }

    /// [`Self::report`] for the guest named `name` (its kernel's label,
    /// or [`guest_name`] for a guest of another kind).
    fn report_as(&mut self, name: &str, run: anyhow::Result<KernelRun>) {
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                println!("vm {name} error: {e:#}");
                self.broken.push(name.to_string());
                return;
            }
        };
        let outcome = &run.outcome;
        let mut failed_here = 0usize;
        for check in &outcome.checks {
            println!("vm {name} {check}");
            if !check.pass {
                failed_here += 1;
                self.failed.push(format!("{name} {}", check.name));
            }
        }
        let steps: Vec<String> = outcome
            .run
            .steps
            .iter()
            .map(|(name, d)| format!("{name} {:.1}s", d.as_secs_f64()))
            .collect();
        println!(
            "vm {} kernel {}: {:.1}s in all (prepare {:.1}s; {})",
            name,
            outcome.release,
            run.elapsed.as_secs_f64(),
            outcome.prepare.as_secs_f64(),
            steps.join(", ")
        );
        if failed_here > 0 {
            println!("vm {name} serial log: {}", outcome.run.log.display());
        }
    }
}

struct Outcome {
    release: String,
    prepare: Duration,
    run: qemu::GuestRun,
    checks: Vec<checks::Check>,
}

/// What every kernel's guest of one kind shares: the root image and the
/// base initramfs.
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

/// Size of the image the guest writes its results to (a tar archive of
/// text files; the traces' JSON lines are the largest, a few MiB).
const OUT_IMAGE_BYTES: u64 = 128 << 20;

/// Memory of the guests of the checks and scenarios, MiB.
pub(crate) const GUEST_MEMORY_MIB: u32 = 1024;

/// The name of `label`'s guest of `kind` ([`GuestPlan::kind`]): its work
/// dir is `run/<name>`, its serial log `logs/<name>-serial.log`. Unique
/// per kernel and kind, so that guests of one kernel for the checks and
/// for the scenarios can run at the same time in different lanes.
pub(crate) fn guest_name(label: &str, kind: &str) -> String {
    if kind.is_empty() {
        label.to_string()
    } else {
        format!("{label}-{kind}")
    }
}

/// The checks' guests: 512 MiB sparse, room for one file at a time (the
/// cgroup doctor step's 320 MiB the largest) plus the journal, and above
/// mkfs.xfs's 300 MB minimum for the xfs runs.
const CHECKS_PLAN: GuestPlan = GuestPlan {
    kind: "",
    disk_bytes: 512 << 20,
    step_limit: Duration::from_secs(HOST_STEP_SECS),
    max_cpus: 1,
    memory_mib: GUEST_MEMORY_MIB,
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
        checks.extend(storm::judge(out));
    }
    if wanted("cgroups") {
        checks.extend(cgroups::judge(out));
    }
    if wanted("rt") {
        checks.extend(rt::judge(out, spec.meta == "linux-image-rt-amd64"));
    }
    if shared.steps.iter().any(|s| s == JOURNAL_GROUP) {
        checks.extend(durability::judge_journal(out));
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
    let name = guest_name(spec.label, plan.kind);
    let work = root.join("run").join(&name);
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

    let log = root.join("logs").join(format!("{name}-serial.log"));
    let run = qemu::run_guest(&qemu::GuestSpec {
        kernel: &tree.vmlinuz,
        initrd: &initrd,
        disk: &disk,
        root: &shared.root_image,
        out: &out_image,
        log: &log,
        boot_limit: Duration::from_secs(120),
        step_limit: plan.step_limit,
        max_cpus: plan.max_cpus,
        memory_mib: plan.memory_mib,
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

/// [`boot_limit_check`]'s guest, in [`guest_name`]'s terms.
const BOOT_LIMIT_KIND: &str = "boot-limit";

/// Boots `spec`'s guest of the run just made with a 1 s boot limit, which
/// no TCG boot meets (5-10 s here).
fn boot_limit_check(spec: &kernel::KernelSpec, root: &Path, shared: &Shared) -> checks::Check {
    const NAME: &str = "boot-limit-enforced";
    let work = root
        .join("run")
        .join(guest_name(spec.label, CHECKS_PLAN.kind));
    let tree = match kernel::ensure(spec, root) {
        Ok(tree) => tree,
        Err(e) => return checks::Check::new(NAME, false, format!("{e:#}")),
    };
    let out = work.join("out-boot-limit.img");
    let log = root.join("logs").join(format!(
        "{}-serial.log",
        guest_name(spec.label, BOOT_LIMIT_KIND)
    ));
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
        max_cpus: CHECKS_PLAN.max_cpus,
        memory_mib: CHECKS_PLAN.memory_mib,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_default_to_the_cpus_up_to_two() {
        assert_eq!(lanes_of(None, 1).unwrap(), 1);
        assert_eq!(lanes_of(None, 2).unwrap(), 2);
        assert_eq!(lanes_of(None, 16).unwrap(), 2);
        assert_eq!(lanes_of(Some("1"), 16).unwrap(), 1);
        assert_eq!(lanes_of(Some(" 4 "), 2).unwrap(), 4);
        for bad in ["0", "", "two", "-1"] {
            let e = lanes_of(Some(bad), 2).unwrap_err().to_string();
            assert!(e.contains(JOBS_VAR), "{e}");
        }
    }

    /// No two guests that may run at once share a work dir or a serial
    /// log: every kernel's checks, scenario, boot-limit and big-host
    /// guests.
    #[test]
    fn guest_names_are_unique_per_kernel_and_kind() {
        let mut kinds = vec![
            CHECKS_PLAN.kind,
            crate::scenario::GUEST_KIND,
            BOOT_LIMIT_KIND,
        ];
        kinds.extend(bighost::PLANS.iter().map(|p| p.kind));
        let mut names: Vec<String> = KERNELS
            .iter()
            .flat_map(|k| kinds.iter().map(|kind| guest_name(k.label, kind)))
            .collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "{names:?}");
        // The root image sits beside the work dirs.
        assert!(!names.iter().any(|n| n == "root.img"));
    }
}
