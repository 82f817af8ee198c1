//! wbscope's qemu harness: `cargo xtask vm-test`, `cargo xtask
//! vm-scenario` and the VM share of `cargo xtask test` (`test-suite`),
//! which xtask hands to this binary (`cargo run -p wbscope-vm -- …`).
//!
//! `matrix.rs` boots each kernel of the matrix (`kernel.rs`, `apt.rs`)
//! with the shared root image and initramfs (`rootimg.rs`,
//! `initramfs.rs`, the guest scripts in `dev/vm/guest/`) under qemu
//! (`qemu.rs`), and judges what each guest wrote (`checks.rs`,
//! `privileges.rs`, `durability.rs`, `cgroups.rs`, `rt.rs`; the
//! big-host guests of `vm-test --big-host`: `bighost.rs`);
//! `scenario.rs` runs `wbscope scenario` in the guests and lays out
//! `wbscope diff`'s answers as one table. Facts behind each choice are in
//! docs/toolchain.md, "Other kernels under qemu".
mod apt;
mod bighost;
mod cgroups;
mod checks;
mod durability;
mod initramfs;
mod kernel;
mod kernel_counts;
mod lanes;
mod matrix;
mod privileges;
mod qemu;
mod rootimg;
mod rt;
mod scenario;
mod storm;

use std::{process::ExitCode, time::Instant};

use anyhow::Context as _;

use clap::{Parser, Subcommand};

/// What `cargo xtask test` does about the VM checks: they run whenever
/// qemu is installed (`cargo xtask setup` installs it), unless this is
/// `0` (e.g. on a laptop without network for the kernel packages).
const ENABLE_VAR: &str = "WBSCOPE_VM_TESTS";

#[derive(Parser)]
#[command(
    name = "xtask",
    bin_name = "xtask",
    about = "wbscope's qemu harness (cargo xtask vm-test, vm-scenario, test)"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Boot Debian's kernels in qemu (TCG), WBSCOPE_VM_JOBS at a time
    /// (default: the CPUs, at most 2), and check the
    /// fentry, kprobe and tracepoint paths inside: 5.10, 6.1, 6.12, 6.12's
    /// PREEMPT_RT and cloud builds and the newest the archive offers (and
    /// its PREEMPT_RT build), each
    /// the newest build of its series (docs/toolchain.md).
    ///
    /// Example: cargo xtask vm-test --kernel 6.12-rt
    VmTest {
        /// 5.10, 6.1, 6.12, 6.12-rt, 6.12-cloud, newest, newest-rt; `suite` for the
        /// kernels `cargo xtask test` runs; `all` (the default) for every
        /// one; with --big-host the default is 6.12.
        #[arg(long)]
        kernel: Option<String>,
        /// Instead of the checks: the big-host guests, by default two per
        /// kernel, one online vCPU of 64 and of 128 possible CPUs (per-CPU maps
        /// are sized for every possible CPU) and 2 GiB each: the maps'
        /// memory as stated and as the kernel reports it, then
        /// 1,000 memory cgroups writing 100,000 one-page files and 10
        /// throttled cgroups, all under `wbscope trace --events`, each
        /// page counted once and each balance_dirty_pages pause as
        /// tracefs counts it, and wbscope's RSS and CPU idle and busy
        /// (dev/vm/src/bighost.rs). About 25 minutes for 6.12's two
        /// guests side by side on a 2-core host.
        #[arg(long)]
        big_host: bool,
        /// With --big-host: the guests' possible CPUs, of 2, 16, 64 and
        /// 128 (2 and 16 to read the others against: under TCG a guest's
        /// figures are compared with the other guests' of the same run).
        ///
        /// Example: cargo xtask vm-test --big-host --cpus 2,16,64,128
        #[arg(long, value_delimiter = ',', requires = "big_host")]
        cpus: Vec<u32>,
    },
    /// Run classic scenarios in qemu guests of several kernels (same
    /// virtual disk, memory and CPU) and print Fengguang Wu's table: a
    /// row per case and figure, a column per kernel with the change
    /// against the first and `wbscope diff`'s significance marks, TOTAL
    /// rows. Minutes per kernel under TCG. Table and documents in
    /// target/vm/scenario/ (docs/diff.md, "Across kernels").
    ///
    /// Example: cargo xtask vm-scenario --kernels 6.12,newest --scenarios single-stream,package-unpack --repeat 3
    VmScenario {
        /// Kernel labels of the VM matrix (as vm-test's --kernel), the
        /// first the base; 6.2 or newer (the tiny scale caps each
        /// filesystem's dirty pages with the bdi's max_bytes and
        /// strict_limit, which came in 6.2: 5.10 and 6.1 cannot run it).
        #[arg(long, value_delimiter = ',', default_value = "6.12,newest")]
        kernels: Vec<String>,
        /// `wbscope scenario` names, run at tiny scale (all but
        /// sync-after-write, which has no --repeat).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "single-stream,package-unpack"
        )]
        scenarios: Vec<String>,
        /// Runs per variant and kernel (at least 2; 3 or more for the
        /// significance rules to mean much).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
    /// What `cargo xtask test` runs after `cargo test`: the `suite`
    /// kernels with the debug wbscope `cargo test` has just built, and a
    /// vm-scenario of 6.12 against 6.12-rt, their six guests in one pool
    /// of WBSCOPE_VM_JOBS lanes. Skipped, with a line saying why, when
    /// WBSCOPE_VM_TESTS=0 or qemu is not installed.
    TestSuite {
        /// The wbscope binary `cargo test` built and tested (xtask passes
        /// it); without it, WBSCOPE_VM_BINARY or a debug build.
        #[arg(long, value_name = "PATH")]
        binary: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let _lock = lock_vm_dir()?;
    match cli.task {
        Task::VmTest {
            kernel,
            big_host,
            cpus,
        } => vm_test(kernel.as_deref(), big_host, &cpus),
        Task::VmScenario {
            kernels,
            scenarios,
            repeat,
        } => scenario::vm_scenario(&scenario::ScenarioOptions {
            kernels,
            scenarios,
            repeat,
        }),
        Task::TestSuite { binary } => test_suite(binary),
    }
}

/// Holds vm/ in the target directory for this run: two runs at once
/// would build the guests' shared root image in the same staging
/// directory and fail midway, each removing what the other made. The
/// lock (flock(2)) goes with the process, however it ends.
fn lock_vm_dir() -> anyhow::Result<std::fs::File> {
    lock_dir(&matrix::vm_dir()?)
}

/// Takes `dir`'s `.lock`, or says which process holds it.
fn lock_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    match wbscope_sys::lock::lock_exclusive(&dir.join(".lock"))? {
        Ok(file) => Ok(file),
        Err(pid) => anyhow::bail!(
            "another vm task is running in {} (pid {pid}); wait for it or stop it",
            dir.display()
        ),
    }
}

/// `cargo xtask vm-test [--kernel K] [--big-host [--cpus N,...]]`.
fn vm_test(kernel: Option<&str>, big_host: bool, cpus: &[u32]) -> anyhow::Result<()> {
    if big_host {
        let kernels = matrix::select(Some(kernel.unwrap_or(bighost::DEFAULT_KERNEL)))?;
        let plans = bighost::plans(if cpus.is_empty() {
            &bighost::DEFAULT_CPUS
        } else {
            cpus
        })?;
        xtask::setup::ensure_tools(xtask::setup::Scope::Vm)?;
        return matrix::run_big_host(&kernels, &plans, &matrix::wbscope_binary()?);
    }
    let kernels = matrix::select(kernel)?;
    xtask::setup::ensure_tools(xtask::setup::Scope::Vm)?;
    matrix::run(&kernels, &matrix::wbscope_binary()?)
}

/// Run by `cargo xtask test` after `cargo test`, with the debug wbscope
/// `cargo test` has just built and tested (`--binary`): a release build
/// would add minutes of compiling to every run for a few seconds of guest
/// start-up, and even a plain debug `cargo build` compiles the tracer and
/// everything above it again (the tests' build has the tracer's
/// `test-hooks` feature, which acts only when its variable is set).
fn test_suite(binary: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    if std::env::var(ENABLE_VAR).as_deref() == Ok("0") {
        println!("vm: skipped: {ENABLE_VAR}=0");
        return Ok(());
    }
    if !matrix::qemu_available() {
        println!(
            "vm: skipped: qemu not installed ({}; `cargo xtask setup` installs it)",
            wbscope_programs::QEMU.name
        );
        return Ok(());
    }
    let wbscope = match (binary, std::env::var_os(matrix::BINARY_VAR)) {
        (Some(path), _) => {
            eprintln!("xtask: vm: testing {}", path.display());
            path
        }
        (None, Some(_)) => matrix::wbscope_binary()?,
        (None, None) => xtask::build(false)?,
    };
    let kernels = matrix::select(Some("suite"))?;
    let steps = matrix::steps_from_env()?;
    let opts = scenario::smoke_options();
    scenario::validate(&opts)?;
    scenario::check_names(&opts, &wbscope)?;
    let lanes = matrix::lanes()?;
    let started = Instant::now();
    let base = matrix::Base::new(&wbscope)?;
    let checks = matrix::Checks::new(&base, &kernels, &steps)?;
    let smoke = scenario::Scenario::new(&opts, &base)?;
    let mut tally = matrix::Tally::default();
    let mut scenario_guests: Vec<Option<anyhow::Result<String>>> =
        opts.kernels.iter().map(|_| None).collect();
    let guests = kernels.len() + opts.kernels.len();
    let checked = if lanes == 1 {
        // One lane: the checks, their summary, then the scenario's
        // guests, in the order the suite ran before it had lanes.
        lanes::run(1, checks.jobs(), |i, r| tally.report(checks.kernel(i), r));
        let checked = checks.finish(tally);
        lanes::run(1, smoke.jobs(), |i, r| scenario_guests[i] = Some(r));
        checked
    } else {
        // One pool, the scenario's guests first: they are the longest
        // (two runs of each scenario and variant: 150-165 s against
        // 115-140 s for a kernel's checks in CI), so started first the
        // checks' guests fill the lanes around them and the lanes end
        // closer together (longest first, Graham's LPT rule).
        let mut jobs: Vec<lanes::Job<'_, Done>> = Vec::new();
        let mut whose: Vec<(bool, usize)> = Vec::new();
        for (n, job) in smoke.jobs().into_iter().enumerate() {
            jobs.push(Box::new(move || Ok(Done::Scenario(job()))));
            whose.push((false, n));
        }
        for (n, job) in checks.jobs().into_iter().enumerate() {
            jobs.push(Box::new(move || Ok(Done::Kernel(job()))));
            whose.push((true, n));
        }
        lanes::run(lanes, jobs, |i, done| {
            let (kernel, n) = whose[i];
            // A job that panicked gave no `Done`: its place says whose it
            // was.
            let done = done.unwrap_or_else(|e| {
                if kernel {
                    Done::Kernel(Err(e))
                } else {
                    Done::Scenario(Err(e))
                }
            });
            match done {
                Done::Kernel(run) => tally.report(checks.kernel(n), run),
                Done::Scenario(release) => scenario_guests[n] = Some(release),
            }
        });
        checks.finish(tally)
    };
    let smoked = smoke
        .finish(scenario_guests)
        .and_then(|text| scenario::smoke_verdict(&opts, &text));
    println!(
        "vm: test-suite: {guests} guests in {} lane(s) ({}), {:.1}s in all",
        lanes.min(guests),
        matrix::JOBS_VAR,
        started.elapsed().as_secs_f64()
    );
    match (checked, smoked) {
        (Err(checks), Err(scenario)) => {
            eprintln!("xtask: error: {scenario:#}");
            Err(checks)
        }
        (checked, smoked) => checked.and(smoked),
    }
}

/// What one guest of `test-suite`'s pool gave.
enum Done {
    Kernel(anyhow::Result<matrix::KernelRun>),
    /// The scenario guest's kernel release.
    Scenario(anyhow::Result<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second run finds the directory held and names the holder; once
    /// the first lets go, the next takes it.
    #[test]
    fn a_second_run_is_told_who_holds_the_vm_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = lock_dir(dir.path()).expect("the first lock");
        let e = lock_dir(dir.path()).expect_err("a second lock while held");
        let said = format!("{e:#}");
        assert!(
            said.contains("another vm task is running")
                && said.contains(&format!("pid {}", std::process::id())),
            "{said}"
        );
        drop(first);
        lock_dir(dir.path()).expect("the lock once let go");
    }
}
