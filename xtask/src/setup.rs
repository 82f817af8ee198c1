//! Finds, or installs, what building the eBPF programs needs: a Rust
//! toolchain that can build `core` for bpfel-unknown-none, and bpf-linker.
//!
//! Two toolchain routes (../shared/toolchain.md):
//! - a rustup nightly with the rust-src component (the usual aya set-up);
//! - Debian's rustc-web (1.96, LLVM 22) with rust-web-src, linked into
//!   rustup as `bpf-debian` and used with RUSTC_BOOTSTRAP=1. This is the
//!   route installed here when nothing usable is found, because rustup
//!   cannot download components on these machines.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

const DEBIAN_TOOLCHAIN: &str = "bpf-debian";
const DEBIAN_SYSROOT: &str = "/usr";
/// bpf-linker 0.13.0 is the release built against LLVM 22 here; newer
/// releases may need another LLVM than Debian ships.
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const TOOLCHAIN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src"];
const LINKER_BUILD_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
];
/// Tools the kernel integration tests drive: loop devices and setpriv
/// (util-linux), mkfs.ext4 (e2fsprogs), mkfs.xfs, tmux for the TUI, strace
/// (the writer CLI tests count real syscalls) and script (a pseudo-terminal
/// for the progress-bar test).
const TEST_TOOLS: &[(&str, &str)] = &[
    ("losetup", "util-linux"),
    ("setpriv", "util-linux"),
    ("mkfs.ext4", "e2fsprogs"),
    ("mkfs.xfs", "xfsprogs"),
    ("tmux", "tmux"),
    ("strace", "strace"),
    ("script", "bsdutils"),
    // The exporter's end-to-end test runs the server binary itself.
    ("prometheus", "prometheus"),
    // cargo xtask vm-test (xtask/src/vm.rs): qemu boots Debian's 6.1 and
    // 6.12 under TCG, busybox-static is the guest's /init shell, kmod
    // resolves the guest's module order, xz unpacks 6.12's .ko.xz modules.
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("depmod", "kmod"),
    ("xz", "xz-utils"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Build,
    Test,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BpfToolchain {
    Nightly,
    Debian,
}

impl BpfToolchain {
    pub fn rustup_name(&self) -> &'static str {
        match self {
            BpfToolchain::Nightly => "nightly",
            BpfToolchain::Debian => DEBIAN_TOOLCHAIN,
        }
    }
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn host_triple() -> anyhow::Result<String> {
    let vv = output(Command::new("rustc").arg("-vV")).context("running rustc -vV")?;
    vv.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV printed no host")
}

fn has_rust_src(sysroot: &Path) -> bool {
    sysroot
        .join("lib/rustlib/src/rust/library/core/Cargo.toml")
        .is_file()
}

fn detect_toolchain() -> Option<BpfToolchain> {
    if quiet(Command::new("rustup").args(["run", DEBIAN_TOOLCHAIN, "rustc", "--version"]))
        && has_rust_src(Path::new(DEBIAN_SYSROOT))
    {
        return Some(BpfToolchain::Debian);
    }
    let sysroot =
        output(Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]))?;
    has_rust_src(Path::new(&sysroot)).then_some(BpfToolchain::Nightly)
}

fn bpf_linker() -> Option<PathBuf> {
    let on_path = output(Command::new("sh").args(["-c", "command -v bpf-linker"]));
    if let Some(p) = on_path.filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cargo/bin/bpf-linker");
    p.is_file().then_some(p)
}

fn is_debian() -> bool {
    Path::new("/etc/debian_version").is_file() && quiet(Command::new("apt-get").arg("--version"))
}

/// apt-get as root (or through sudo), with `apt-get update` once per run.
struct Apt {
    updated: bool,
}

impl Apt {
    fn install(&mut self, packages: &[&str]) -> anyhow::Result<()> {
        let sudo = !is_root();
        let run = |args: &[&str]| -> anyhow::Result<()> {
            let mut cmd = if sudo {
                let mut c = Command::new("sudo");
                c.arg("apt-get");
                c
            } else {
                Command::new("apt-get")
            };
            cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            let status = cmd.status().context("running apt-get")?;
            if !status.success() {
                bail!("apt-get {} failed ({status})", args.join(" "));
            }
            Ok(())
        };
        if !self.updated {
            eprintln!("xtask: apt-get update");
            run(&["update", "-qq"])?;
            self.updated = true;
        }
        eprintln!("xtask: apt-get install {}", packages.join(" "));
        let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
        args.extend_from_slice(packages);
        run(&args)
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// What `ensure` found or installed.
pub struct Toolchains {
    pub bpf: BpfToolchain,
    pub bpf_linker: PathBuf,
}

/// Makes sure the eBPF toolchain and bpf-linker (and, for tests, the tools
/// the kernel tests drive) are there. Installs what is missing on
/// Debian/Ubuntu; elsewhere says exactly what to install.
pub fn ensure(scope: Scope) -> anyhow::Result<Toolchains> {
    let mut apt = Apt { updated: false };
    let toolchain = match detect_toolchain() {
        Some(t) => {
            eprintln!("xtask: eBPF toolchain: {} (ok)", t.rustup_name());
            t
        }
        None if is_debian() => {
            eprintln!("xtask: no eBPF-capable toolchain; installing Debian's rustc-web");
            apt.install(TOOLCHAIN_PACKAGES)?;
            let status = Command::new("rustup")
                .args(["toolchain", "link", DEBIAN_TOOLCHAIN, DEBIAN_SYSROOT])
                .status()
                .context("running rustup toolchain link")?;
            if !status.success() {
                bail!("rustup toolchain link {DEBIAN_TOOLCHAIN} {DEBIAN_SYSROOT} failed");
            }
            detect_toolchain().context("rustc-web installed and linked, but still not usable")?
        }
        None => bail!(
            "no Rust toolchain that can build eBPF programs. Install one of:\n  \
             rustup toolchain install nightly --component rust-src\n  \
             (Debian/Ubuntu) apt-get install rustc-web cargo-web rust-web-src && \
             rustup toolchain link {DEBIAN_TOOLCHAIN} /usr"
        ),
    };

    let linker = match bpf_linker() {
        Some(p) => {
            eprintln!("xtask: bpf-linker: {} (ok)", p.display());
            p
        }
        None if is_debian() => {
            eprintln!(
                "xtask: bpf-linker missing; building {BPF_LINKER_VERSION} against LLVM 22 (about a minute)"
            );
            apt.install(LINKER_BUILD_PACKAGES)?;
            let path = format!(
                "{LLVM_PREFIX}/bin:{}",
                std::env::var("PATH").unwrap_or_default()
            );
            let status = Command::new("cargo")
                .args([
                    "install",
                    "bpf-linker",
                    "--version",
                    BPF_LINKER_VERSION,
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env("PATH", path)
                .status()
                .context("running cargo install bpf-linker")?;
            if !status.success() {
                bail!("cargo install bpf-linker failed ({status})");
            }
            bpf_linker().context("bpf-linker installed but not found")?
        }
        None => bail!(
            "bpf-linker not found. Install it with:\n  \
             cargo install bpf-linker --version {BPF_LINKER_VERSION}"
        ),
    };

    if scope == Scope::Test {
        let missing: Vec<&str> = TEST_TOOLS
            .iter()
            .filter(|(tool, _)| {
                !quiet(Command::new("sh").args(["-c", &format!("command -v {tool}")]))
            })
            .map(|(_, pkg)| *pkg)
            .collect();
        if missing.is_empty() {
            eprintln!("xtask: test tools: ok");
        } else if is_debian() {
            let mut pkgs = missing.clone();
            pkgs.dedup();
            apt.install(&pkgs)?;
        } else {
            bail!(
                "the kernel tests need these packages: {}",
                missing.join(" ")
            );
        }
    }
    Ok(Toolchains {
        bpf: toolchain,
        bpf_linker: linker,
    })
}
