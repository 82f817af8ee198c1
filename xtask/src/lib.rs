//! What every developer tool of the workspace needs: the eBPF toolchain
//! and the programs a task runs (`setup`), a build of wbscope (`build`),
//! cargo's target directory, cargo with the toolchain's environment, and
//! the benches' report files.
//!
//! The `xtask` binary (`cargo xtask …`) is built on it, and so are the
//! qemu harness (`dev/vm`) and the benches (`dev/bench`), which the binary
//! hands its `vm-test`, `vm-scenario` and `bench` subcommands to.
pub mod setup;
// Test-only: no program is spawned by a string literal (programs come
// from wbscope-programs' table, which setup installs).
#[cfg(test)]
mod spawns;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use anyhow::{Context as _, bail};

/// The workspace's root directory (this crate's parent).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory for this workspace, as cargo itself reports it
/// (`cargo metadata`'s `target_directory`): `CARGO_TARGET_DIR`,
/// `build.target-dir` in a config file, or `target/` in the workspace.
/// Every path the tasks build under the target directory comes from here.
pub fn target_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.clone());
    }
    let out = cargo_metadata()
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    let dir = target_directory_of(&out.stdout)?;
    Ok(DIR.get_or_init(|| dir).clone())
}

/// The cargo that runs this task (`CARGO`, which cargo sets for what it
/// runs), else `cargo` from `PATH`, in the workspace's root.
pub fn plain_cargo() -> Command {
    let program = std::env::var("CARGO").unwrap_or_else(|_| wbscope_programs::CARGO.name.into());
    let mut cmd = Command::new(program);
    cmd.current_dir(workspace_root());
    cmd
}

/// `cargo metadata` of this workspace, without its dependencies or the
/// network.
pub fn cargo_metadata() -> Command {
    let mut cmd = plain_cargo();
    cmd.args([
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]);
    cmd
}

/// `cargo metadata` of this workspace, parsed.
pub fn workspace_metadata() -> anyhow::Result<serde_json::Value> {
    let out = cargo_metadata()
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("cargo metadata printed no JSON")
}

/// The `.rs` files under `dir`, in the directories `descend` accepts
/// (each directory below `dir` is asked, `dir` itself is not).
pub fn rust_files(dir: &Path, descend: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for path in entries.flatten().map(|e| e.path()) {
        if path.is_dir() {
            if descend(&path) {
                out.extend(rust_files(&path, descend));
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `target_directory` of `cargo metadata`'s JSON.
fn target_directory_of(json: &[u8]) -> anyhow::Result<PathBuf> {
    let meta: serde_json::Value =
        serde_json::from_slice(json).context("cargo metadata printed no JSON")?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// `cargo` with the detected eBPF toolchain exported to build.rs and
/// bpf-linker's directory on PATH (aya-build's nested cargo links with it).
pub fn cargo(toolchain: &setup::Toolchains) -> Command {
    let mut cmd = plain_cargo();
    cmd.env("WBSCOPE_BPF_TOOLCHAIN", toolchain.bpf.rustup_name());
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

/// Runs `cmd`, saying `what` first; fails when it does.
pub fn step(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: {what}");
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Builds wbscope (package writeback-user, bin `wbscope`) with its eBPF
/// object embedded; returns the binary's path.
pub fn build(release: bool) -> anyhow::Result<PathBuf> {
    let toolchain = setup::ensure(setup::Scope::Build)?;
    let mut cmd = cargo(&toolchain);
    cmd.args(["build", "--package", "writeback-user", "--bin", "wbscope"]);
    if release {
        cmd.arg("--release");
    }
    step("building wbscope", &mut cmd)?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir()?.join(profile).join("wbscope"))
}

/// Writes a benchmark report to target/bench/NAME and prints it.
pub fn write_report(name: &str, report: &str) -> anyhow::Result<()> {
    let dir = target_dir()?.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    eprintln!("xtask: written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directory cargo reports is the one `CARGO_TARGET_DIR` names,
    /// not `target/` under the checkout (the VM harness looks for the
    /// binary it built there).
    #[test]
    fn target_dir_is_cargos() {
        let elsewhere = std::env::temp_dir().join(format!("xtask-target-{}", std::process::id()));
        let out = cargo_metadata()
            .env("CARGO_TARGET_DIR", &elsewhere)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(target_directory_of(&out.stdout).unwrap(), elsewhere);
        assert!(!elsewhere.exists(), "cargo metadata creates nothing");
        assert!(target_directory_of(b"{}").is_err());
        assert!(target_directory_of(b"not json").is_err());
    }
}
