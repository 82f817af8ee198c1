//! wbscope's qemu harness: `cargo xtask vm-test`, `cargo xtask
//! vm-scenario` and the VM share of `cargo xtask test` (`test-suite`),
//! which xtask hands to this binary (`cargo run -p wbscope-vm -- …`).
//!
//! `matrix.rs` boots each kernel of the matrix (`kernel.rs`, `apt.rs`)
//! with the shared root image and initramfs (`rootimg.rs`,
//! `initramfs.rs`, the guest scripts in `dev/vm/guest/`) under qemu
//! (`qemu.rs`), and judges what each guest wrote (`checks.rs`,
//! `privileges.rs`, `durability.rs`, `cgroups.rs`, `rt.rs`);
//! `scenario.rs` runs `wbscope scenario` in the guests and lays out
//! `wbscope diff`'s answers as one table. Facts behind each choice are in
//! docs/toolchain.md, "Other kernels under qemu".
mod apt;
mod cgroups;
mod checks;
mod durability;
mod initramfs;
mod kernel;
mod kernel_counts;
mod matrix;
mod privileges;
mod qemu;
mod rootimg;
mod rt;
mod scenario;

use std::process::ExitCode;

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
    /// Boot Debian's kernels in qemu (TCG), one at a time, and check the
    /// fentry, kprobe and tracepoint paths inside: 5.10, 6.1, 6.12, 6.12's
    /// PREEMPT_RT and cloud builds and the newest the archive offers (and
    /// its PREEMPT_RT build), each
    /// the newest build of its series (docs/toolchain.md).
    ///
    /// Example: cargo xtask vm-test --kernel 6.12-rt
    VmTest {
        /// 5.10, 6.1, 6.12, 6.12-rt, 6.12-cloud, newest, newest-rt; `suite` for the
        /// kernels `cargo xtask test` runs; `all` (the default) for every
        /// one.
        #[arg(long)]
        kernel: Option<String>,
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
    /// kernels with the debug wbscope `cargo test` has just built, then a
    /// vm-scenario of 6.12 against 6.12-rt. Skipped, with a line saying
    /// why, when WBSCOPE_VM_TESTS=0 or qemu is not installed.
    TestSuite,
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
    match cli.task {
        Task::VmTest { kernel } => vm_test(kernel.as_deref()),
        Task::VmScenario {
            kernels,
            scenarios,
            repeat,
        } => scenario::vm_scenario(&scenario::ScenarioOptions {
            kernels,
            scenarios,
            repeat,
        }),
        Task::TestSuite => test_suite(),
    }
}

/// `cargo xtask vm-test [--kernel K]`.
fn vm_test(kernel: Option<&str>) -> anyhow::Result<()> {
    let kernels = matrix::select(kernel)?;
    xtask::setup::ensure_tools(xtask::setup::Scope::Vm)?;
    matrix::run(&kernels, &matrix::wbscope_binary()?)
}

/// Run by `cargo xtask test` after `cargo test`, with the debug wbscope
/// `cargo test` has just built: a release build would add minutes of
/// compiling to every run for a few seconds of guest start-up.
fn test_suite() -> anyhow::Result<()> {
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
    let wbscope = match std::env::var_os(matrix::BINARY_VAR) {
        Some(_) => matrix::wbscope_binary()?,
        None => xtask::build(false)?,
    };
    matrix::run(&matrix::select(Some("suite"))?, &wbscope)?;
    scenario::smoke(&wbscope)
}
