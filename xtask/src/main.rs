//! Project tasks: `cargo xtask setup|build|run|test|dist`, and the
//! hand-over of `vm-test`, `vm-scenario` and `bench` to the qemu harness
//! (`dev/vm`, package wbscope-vm) and the benches (`dev/bench`, package
//! wbscope-bench), so that `cargo xtask run` builds xtask and wbscope and
//! nothing else.
//!
//! Everything a fresh Debian machine needs to build and test wbscope is
//! installed from here, so README's two commands are all the set-up there
//! is (see docs/toolchain.md for why each piece is what it is).
mod dist;
// Test-only: the crates' dependencies against the layers.
#[cfg(test)]
mod crate_graph;
// Test-only: no import circle among a crate's modules.
#[cfg(test)]
mod module_graph;
mod suite;

use std::{os::unix::process::CommandExt as _, process::ExitCode};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use wbscope_programs as programs;
use xtask::setup;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "wbscope project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Detect or install the eBPF toolchain, bpf-linker and every program
    /// the tests, vm-test and the benchmarks run (idempotent).
    Setup,
    /// Build wbscope with its eBPF object embedded.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Build the release `wbscope` for hosts without Rust: one binary with
    /// the eBPF object embedded, stripped, with its sha256, under
    /// target/dist/.
    Dist,
    /// Build (release) and run wbscope as root (through sudo when not root).
    ///
    /// Example: cargo xtask run -- trace --json --duration 5
    Run {
        /// Run the debug build instead: quicker to build, but the dashboard
        /// then costs more CPU than the 2%-of-a-core budget when idle.
        #[arg(long)]
        debug: bool,
        /// Arguments for wbscope (after `--`); none opens the dashboard.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Measure the tracer's overhead (root; writes SIZE MiB per run), or
    /// with `writer`, `wbscope write` against dd and fio.
    ///
    /// Also `small-writer` (4 KiB writers, untraced against traced),
    /// `fsync-storm` (small files each fdatasync'ed, untraced against
    /// traced) and `recorder` (the flight recorder under a budget); `cargo
    /// xtask bench --help` lists the flags of each.
    ///
    /// Example: cargo xtask bench --size-mib 2048 --pairs 5
    ///
    /// Example: cargo xtask bench writer --size-mib 1024 --rounds 3
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its flags, handed to wbscope-bench.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Boot Debian's kernels in qemu (TCG), two guests at a time
    /// (WBSCOPE_VM_JOBS), and check the fentry, kprobe and tracepoint
    /// paths inside: 5.10, 6.1, 6.12, 6.12's PREEMPT_RT and cloud builds
    /// and the newest the archive offers (and its PREEMPT_RT build), each
    /// the newest build of its series (docs/toolchain.md).
    ///
    /// `--kernel K` picks one (`suite`: those `cargo xtask test` runs;
    /// `all`, the default: every one); `cargo xtask vm-test --help` says
    /// more.
    ///
    /// Example: cargo xtask vm-test --kernel 6.12-rt
    #[command(disable_help_flag = true)]
    VmTest {
        /// vm-test's flags, handed to wbscope-vm.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run classic scenarios in qemu guests of several kernels (same
    /// virtual disk, memory and CPU) and print Fengguang Wu's table: a
    /// row per case and figure, a column per kernel with the change
    /// against the first and `wbscope diff`'s significance marks, TOTAL
    /// rows. Minutes per kernel under TCG. Table and documents in
    /// target/vm/scenario/ (docs/diff.md, "Across kernels").
    ///
    /// Flags `--kernels`, `--scenarios`, `--repeat`; `cargo xtask
    /// vm-scenario --help` says more.
    ///
    /// Example: cargo xtask vm-scenario --kernels 6.12,newest --scenarios single-stream,package-unpack --repeat 3
    #[command(disable_help_flag = true)]
    VmScenario {
        /// vm-scenario's flags, handed to wbscope-vm.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// fmt check, clippy -D warnings, cargo doc (broken links denied), unit
    /// and kernel integration tests, then the qemu kernel matrix's `suite`
    /// kernels (5.10, 6.1, 6.12, 6.12-rt) and a vm-scenario of 6.12 against
    /// 6.12-rt, when qemu is installed and no test name is given
    /// (WBSCOPE_VM_TESTS=0 skips it; `vm-test --kernel all` runs the rest).
    Test {
        /// Extra arguments for `cargo test` (after `--`), e.g. a test name.
        #[arg(last = true)]
        args: Vec<String>,
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
    match cli.task {
        Task::Setup => {
            setup::ensure(setup::Scope::All)?;
            Ok(())
        }
        Task::Build { release } => xtask::build(release).map(|_| ()),
        Task::Run { debug, args } => {
            let binary = xtask::build(!debug)?;
            let mut cmd = if setup::is_root() {
                std::process::Command::new(&binary)
            } else {
                eprintln!("xtask: not root: running wbscope through sudo");
                let mut c = programs::SUDO.command();
                c.arg(&binary);
                c
            };
            cmd.args(&args);
            let status = cmd
                .status()
                .with_context(|| format!("running {}", binary.display()))?;
            if !status.success() {
                bail!("wbscope exited with {status}");
            }
            Ok(())
        }
        Task::Test { args } => suite::test(&args),
        Task::Dist => dist::dist(&xtask::build(true)?, &xtask::target_dir()?),
        Task::VmTest { args } => hand_over(VM, "vm-test", &args),
        Task::VmScenario { args } => hand_over(VM, "vm-scenario", &args),
        Task::Bench { args } => hand_over(BENCH, "", &args),
    }
}

/// The qemu harness' package (`dev/vm`).
const VM: &str = "wbscope-vm";
/// The benches' package (`dev/bench`).
const BENCH: &str = "wbscope-bench";

/// Replaces this process with `cargo run --quiet -p PACKAGE -- [TASK]
/// ARGS`, which builds the package and replaces itself with its binary
/// (cargo execs what it runs): the harness gets the terminal's signals,
/// and its exit status and output are the task's.
///
/// The debug profile, as xtask's own: the harnesses spend their time
/// waiting on qemu, on the kernel's writeback and on wbscope (which they
/// build in release where it matters), not on their own code, while a
/// release build of them and their dependencies would add minutes on a
/// two-core machine; in debug they share the dependencies xtask was just
/// built with.
///
/// Returns only when it could not do so.
fn hand_over(package: &str, task: &str, args: &[String]) -> anyhow::Result<()> {
    let mut cmd = xtask::plain_cargo();
    cmd.args(["run", "--quiet", "--package", package, "--"]);
    if !task.is_empty() {
        cmd.arg(task);
    }
    cmd.args(args);
    // What this process printed goes first (exec drops unflushed output).
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {cmd:?}"))
}
