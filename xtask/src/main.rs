//! Project tasks: `cargo xtask setup|build|run|test`.
//!
//! Everything a fresh Debian machine needs to build and test wbscope is
//! installed from here, so README's two commands are all the set-up there
//! is (see ../shared/toolchain.md for why each piece is what it is).
mod setup;

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "wbscope project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Detect or install the eBPF toolchain and bpf-linker (idempotent).
    Setup,
    /// Build wbscope with its eBPF object embedded.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Build and run wbscope as root (through sudo when not root).
    ///
    /// Example: cargo xtask run -- trace --json --duration 5
    Run {
        #[arg(long)]
        release: bool,
        /// Arguments for wbscope (after `--`); none opens the dashboard.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// fmt check, clippy -D warnings, unit and kernel integration tests.
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
            setup::ensure(setup::Scope::Build)?;
            Ok(())
        }
        Task::Build { release } => build(release).map(|_| ()),
        Task::Run { release, args } => {
            let binary = build(release)?;
            let mut cmd = if setup::is_root() {
                Command::new(&binary)
            } else {
                eprintln!("xtask: not root: running wbscope through sudo");
                let mut c = Command::new("sudo");
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
        Task::Test { args } => test(&args),
    }
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `cargo` with the detected eBPF toolchain exported to build.rs and
/// bpf-linker's directory on PATH (aya-build's nested cargo links with it).
fn cargo(toolchain: &setup::Toolchains) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root())
        .env("WBSCOPE_BPF_TOOLCHAIN", toolchain.bpf.rustup_name());
    if let Some(dir) = toolchain.bpf_linker.parent() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            cmd.env("PATH", joined);
        }
    }
    cmd
}

fn step(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: {what}");
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn build(release: bool) -> anyhow::Result<PathBuf> {
    let toolchain = setup::ensure(setup::Scope::Build)?;
    let mut cmd = cargo(&toolchain);
    cmd.args(["build", "--package", "writeback-user", "--bin", "wbscope"]);
    if release {
        cmd.arg("--release");
    }
    step("building wbscope", &mut cmd)?;
    let profile = if release { "release" } else { "debug" };
    Ok(workspace_root()
        .join("target")
        .join(profile)
        .join("wbscope"))
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    let toolchain = setup::ensure(setup::Scope::Test)?;
    step(
        "cargo fmt --check",
        cargo(&toolchain).args(["fmt", "--all", "--check"]),
    )?;
    step(
        "cargo clippy --all-targets -- -D warnings",
        cargo(&toolchain).args(["clippy", "--all-targets", "--", "-D", "warnings"]),
    )?;
    let mut cmd = cargo(&toolchain);
    cmd.arg("test");
    if !setup::is_root() {
        // Kernel integration tests attach BPF programs and mount loop
        // filesystems: run the test binaries (not cargo) as root.
        eprintln!("xtask: not root: test binaries run through `sudo -E`");
        cmd.env(
            format!(
                "CARGO_TARGET_{}_RUNNER",
                setup::host_triple()?.to_uppercase().replace('-', "_")
            ),
            "sudo -E",
        );
    }
    if !extra.is_empty() {
        cmd.arg("--").args(extra);
    }
    step("cargo test (unit and kernel integration tests)", &mut cmd)
}
