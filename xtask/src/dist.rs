//! `cargo xtask dist`: the single binary to copy to hosts without Rust.
//!
//! The eBPF object is already inside (crates/tracer/build.rs embeds it);
//! this strips the debug info of the userspace code, checks that the
//! binary needs nothing beyond the C library, and writes a checksum.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

/// Shared libraries a glibc Linux host always has; anything else would
/// have to be installed next to wbscope.
const BASE_LIBRARIES: &[&str] = &[
    "linux-vdso.so",
    "libc.so",
    "libm.so",
    "libgcc_s.so",
    "ld-linux-x86-64.so",
    "ld-linux-aarch64.so",
];

/// Writes into `target`/dist (`target`: cargo's target directory).
pub(crate) fn dist(release_binary: &Path, target: &Path) -> anyhow::Result<()> {
    let dir = target.join("dist");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let version = run(Command::new(release_binary).arg("--version"))?;
    let first = version.lines().next().unwrap_or("wbscope");
    let name = format!(
        "{}-{}-linux",
        first.replace(' ', "-"),
        std::env::consts::ARCH
    );
    let out: PathBuf = dir.join(&name);
    fs::copy(release_binary, &out)
        .with_context(|| format!("copying {} to {}", release_binary.display(), out.display()))?;
    // Userspace debug info only; the embedded eBPF object is data and
    // keeps its BTF, which the kernel needs.
    run(programs::STRIP.command().arg("--strip-debug").arg(&out))?;

    let deps = run(programs::LDD.command().arg(&out))?;
    let extra: Vec<&str> = deps
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !BASE_LIBRARIES.iter().any(|b| l.contains(b)))
        .collect();
    if !extra.is_empty() {
        bail!("{} needs libraries beyond libc: {extra:?}", out.display());
    }
    // It must run with no Rust, no cargo and no environment at all.
    let check = run(programs::ENV.command().arg("-i").arg(&out).arg("--version"))?;
    if check != version {
        bail!("{} --version differs from the build's", out.display());
    }
    // The recorder's systemd unit beside the binary (README, "Always on").
    let unit = "wbscope-recorder.service";
    let source = xtask::workspace_root()
        .join("writeback-user/dist")
        .join(unit);
    fs::copy(&source, dir.join(unit))
        .with_context(|| format!("copying {unit} to {}", dir.display()))?;
    let sum = run(programs::SHA256SUM.command().arg(&name).current_dir(&dir))?;
    fs::write(dir.join(format!("{name}.sha256")), format!("{sum}\n"))?;
    let size = fs::metadata(&out)?.len();
    println!("{version}");
    println!("{} ({} bytes), {}", out.display(), size, sum);
    Ok(())
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
