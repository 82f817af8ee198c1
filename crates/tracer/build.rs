//! Builds `writeback-ebpf` for the BPF target with aya-build and leaves the
//! object in OUT_DIR, where `src/object.rs` embeds it with
//! `include_bytes_aligned!`. See ARCHITECTURE.md ("Why a build script").
//!
//! Toolchain: `WBSCOPE_BPF_TOOLCHAIN` when set; otherwise the Debian
//! `bpf-debian` toolchain when rustup knows it (rustc-web linked by
//! `cargo xtask setup`), else `nightly` (which must have rust-src).
use std::process::Stdio;

use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

const TOOLCHAIN_ENV: &str = "WBSCOPE_BPF_TOOLCHAIN";
const DEBIAN_TOOLCHAIN: &str = "bpf-debian";

fn rustup_has(toolchain: &str) -> bool {
    wbscope_programs::RUSTUP
        .command()
        .args(["run", toolchain, "rustc", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `git describe`-like revision for `--version`: short hash plus
/// `-dirty` when the tree has changes; `unknown` outside a git checkout.
fn git_revision() -> String {
    let git = |args: &[&str]| {
        wbscope_programs::GIT
            .command()
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(rev) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{rev}-dirty") } else { rev }
}

fn main() -> anyhow::Result<()> {
    println!("cargo:rustc-env=WBSCOPE_GIT_REVISION={}", git_revision());
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
    println!("cargo:rerun-if-env-changed={TOOLCHAIN_ENV}");
    // aya-build reruns us when writeback-ebpf changes; the shared types it
    // compiles in live in writeback-common.
    println!("cargo:rerun-if-changed=../../writeback-common");
    let chosen = match std::env::var(TOOLCHAIN_ENV) {
        Ok(name) if !name.is_empty() => name,
        _ if rustup_has(DEBIAN_TOOLCHAIN) => DEBIAN_TOOLCHAIN.to_string(),
        _ => "nightly".to_string(),
    };
    if chosen != "nightly" {
        // A stable-channel rustc (Debian's rustc-web) accepts -Z build-std
        // only with RUSTC_BOOTSTRAP; aya-build reads it from our environment
        // and passes it to the nested cargo. The build script is single
        // threaded here, so set_var is sound.
        unsafe { std::env::set_var("RUSTC_BOOTSTRAP", "1") };
    }

    let cargo_metadata::Metadata {
        packages,
        target_directory,
        ..
    } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "writeback-ebpf")
        .ok_or_else(|| anyhow!("writeback-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: root_dir.as_str(),
        ..Default::default()
    };
    let toolchain = if chosen == "nightly" {
        Toolchain::Nightly
    } else {
        Toolchain::Custom(&chosen)
    };
    // aya-build builds in OUT_DIR/aya-build/target, and OUT_DIR is new for
    // every profile and for `cargo check`/`clippy`: `cargo xtask test`
    // (clippy, then the tests) and `cargo xtask run` (release) compiled the
    // same eBPF object three times, about a minute each on 2 cores. One
    // directory under the target directory is shared instead (the object
    // is always built `--release` for the BPF target, whatever the host's
    // profile), so every build after the first is a no-op for the nested
    // cargo, and the object is copied into this build's OUT_DIR.
    let out_dir = std::env::var_os("OUT_DIR").context("OUT_DIR not set")?;
    let shared = target_directory.as_std_path().join("bpf");
    std::fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;
    // SAFETY: the build script is single threaded.
    unsafe { std::env::set_var("OUT_DIR", &shared) };
    let built = aya_build::build_ebpf([package], toolchain).with_context(|| {
        format!("building the eBPF programs with toolchain `{chosen}` (run `cargo xtask setup`)")
    });
    // SAFETY: as above.
    unsafe { std::env::set_var("OUT_DIR", &out_dir) };
    built?;
    // The bin target's name in writeback-ebpf/Cargo.toml; src/object.rs
    // embeds it from OUT_DIR.
    const OBJECT: &str = "writeback";
    let to = std::path::Path::new(&out_dir).join(OBJECT);
    std::fs::copy(shared.join(OBJECT), &to)
        .with_context(|| format!("copying the eBPF object to {}", to.display()))?;
    Ok(())
}
