//! Finds, or installs, what building the eBPF programs needs: a Rust
//! toolchain that can build `core` for bpfel-unknown-none, and bpf-linker.
//!
//! Two toolchain routes (docs/toolchain.md):
//! - a rustup nightly with the rust-src component (the usual aya set-up);
//! - Debian's rustc-web (1.96, LLVM 22) with rust-web-src, linked into
//!   rustup as `bpf-debian` and used with RUSTC_BOOTSTRAP=1. This is the
//!   route installed here when nothing usable is found, because rustup
//!   cannot download components on these machines.
//!
//! And the programs a task spawns: those of its scope in
//! wbscope-programs' table that setup provides, their packages installed
//! through apt-get when missing.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use wbscope_programs::{self as programs, Program, Provider};

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
/// Where a program is looked for besides `PATH`: a non-root user's `PATH`
/// on Debian lacks the sbin directories (mkfs.xfs, losetup, depmod live
/// there), while the tests that run them run as root, whose `PATH` has them.
const SBIN_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// What a task needs besides the eBPF toolchain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Building only: the toolchain and bpf-linker, no other programs.
    Build,
    /// `cargo xtask test`: the programs of the test scope and, as it runs
    /// the VM checks too, of the VM scope.
    Test,
    /// `cargo xtask vm-test`.
    Vm,
    /// `cargo xtask bench [writer]`.
    Bench,
    /// `cargo xtask setup`: everything any task runs.
    All,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Build => "build",
            Scope::Test => "test",
            Scope::Vm => "vm-test",
            Scope::Bench => "bench",
            Scope::All => "setup",
        }
    }
}

/// The programs `scope` makes sure of: those setup installs
/// ([`Provider::Setup`]) that a task of the scope spawns, in the table's
/// order.
pub(crate) fn scope_tools(scope: Scope) -> Vec<Program> {
    let scopes: &[programs::Scope] = match scope {
        Scope::Build => &[programs::Scope::Build],
        Scope::Test => &[programs::Scope::Test, programs::Scope::Vm],
        Scope::Vm => &[programs::Scope::Vm],
        Scope::Bench => &[programs::Scope::Bench],
        Scope::All => &[
            programs::Scope::Build,
            programs::Scope::Test,
            programs::Scope::Vm,
            programs::Scope::Bench,
        ],
    };
    programs::ALL
        .iter()
        .filter(|p| p.provider == Provider::Setup)
        .filter(|p| scopes.iter().any(|s| p.needed_by(*s)))
        .copied()
        .collect()
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
    let vv = output(programs::RUSTC.command().arg("-vV")).context("running rustc -vV")?;
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
    if quiet(
        programs::RUSTUP
            .command()
            .args(["run", DEBIAN_TOOLCHAIN, "rustc", "--version"]),
    ) && has_rust_src(Path::new(DEBIAN_SYSROOT))
    {
        return Some(BpfToolchain::Debian);
    }
    let sysroot = output(
        programs::RUSTUP
            .command()
            .args(["run", "nightly", "rustc", "--print", "sysroot"]),
    )?;
    has_rust_src(Path::new(&sysroot)).then_some(BpfToolchain::Nightly)
}

fn bpf_linker() -> Option<PathBuf> {
    let on_path = output(programs::SH.command().args(["-c", "command -v bpf-linker"]));
    if let Some(p) = on_path.filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cargo/bin/bpf-linker");
    p.is_file().then_some(p)
}

fn is_debian() -> bool {
    Path::new("/etc/debian_version").is_file()
        && quiet(programs::APT_GET.command().arg("--version"))
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
                let mut c = programs::SUDO.command();
                c.arg(programs::APT_GET.name);
                c
            } else {
                programs::APT_GET.command()
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

/// Makes sure the eBPF toolchain and bpf-linker, and the programs `scope`
/// runs, are there. Installs what is missing on
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
            let status = programs::RUSTUP
                .command()
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
            let status = programs::CARGO
                .command()
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

    install_tools(&mut apt, scope)?;
    Ok(Toolchains {
        bpf: toolchain,
        bpf_linker: linker,
    })
}

/// Makes sure the programs `scope` runs are there, without the toolchain
/// (for tasks that build through [`ensure`] later or not at all).
pub fn ensure_tools(scope: Scope) -> anyhow::Result<()> {
    install_tools(&mut Apt { updated: false }, scope)
}

/// Installs the packages of the programs of `scope` that are missing, then
/// checks that each program is now there.
fn install_tools(apt: &mut Apt, scope: Scope) -> anyhow::Result<()> {
    let tools = scope_tools(scope);
    if tools.is_empty() {
        return Ok(());
    }
    let dirs = tool_dirs(std::env::var_os("PATH"));
    let missing: Vec<Program> = tools
        .into_iter()
        .filter(|p| find_tool(p.name, &dirs).is_none())
        .collect();
    if missing.is_empty() {
        eprintln!("xtask: {} tools: ok", scope.name());
        return Ok(());
    }
    let packages = packages_of(&missing);
    if !is_debian() {
        bail!(
            "the {} tasks need these programs: {} (Debian packages: {})",
            scope.name(),
            missing.iter().map(|p| p.name).collect::<Vec<_>>().join(" "),
            packages.join(" ")
        );
    }
    apt.install(&packages)?;
    verify_installed(&missing, |tool| find_tool(tool, &dirs).is_some())
}

/// The packages of `tools`, each once, in order.
fn packages_of(tools: &[Program]) -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = Vec::new();
    for p in tools {
        if !packages.contains(&p.package) {
            packages.push(p.package);
        }
    }
    packages
}

/// After `apt-get install`: one line naming each program still not found
/// and its package (a package that no longer ships the program under that
/// name, or a `PATH` without the directory it went to).
fn verify_installed(installed: &[Program], found: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    let still = not_found(installed, found);
    if !still.is_empty() {
        bail!(
            "apt-get installed the packages, but these programs are still not on PATH \
             (nor in {}): {}",
            SBIN_DIRS.join(", "),
            still.join(", ")
        );
    }
    Ok(())
}

/// `NAME (package PACKAGE)` of each of `wanted` that `found` does not
/// find.
fn not_found(wanted: &[Program], found: impl Fn(&str) -> bool) -> Vec<String> {
    wanted
        .iter()
        .filter(|p| !found(p.name))
        .map(|p| format!("{} (package {})", p.name, p.package))
        .collect()
}

/// The directories a program is looked for in: `PATH`'s, then [`SBIN_DIRS`].
fn tool_dirs(path: Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(SBIN_DIRS.iter().map(PathBuf::from));
    dirs
}

/// The first executable file named `tool` in `dirs`.
fn find_tool(tool: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    dirs.iter().map(|d| d.join(tool)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// Every program the tests, the VM harness and the benches spawn is
    /// found (on `PATH` or in the sbin directories), the base system's
    /// included: `cargo xtask test` runs setup before the tests, so on its
    /// runs this proves setup installs each program of those scopes.
    #[test]
    fn every_program_of_the_test_vm_and_bench_scopes_is_installed() {
        let scopes = [
            programs::Scope::Test,
            programs::Scope::Vm,
            programs::Scope::Bench,
        ];
        let wanted: Vec<Program> = programs::ALL
            .iter()
            .filter(|p| p.provider != Provider::NotRoot)
            .filter(|p| scopes.iter().any(|s| p.needed_by(*s)))
            .copied()
            .collect();
        assert!(wanted.contains(&programs::QEMU) && wanted.contains(&programs::FIO));
        let dirs = tool_dirs(std::env::var_os("PATH"));
        let missing = not_found(&wanted, |name| find_tool(name, &dirs).is_some());
        assert!(
            missing.is_empty(),
            "not found after `cargo xtask setup`: {}",
            missing.join(", ")
        );
    }

    fn program(name: &'static str, package: &'static str) -> Program {
        Program {
            name,
            package,
            scopes: &[programs::Scope::Test],
            provider: Provider::Setup,
        }
    }

    /// A program apt did not bring: one line naming it and its package,
    /// nothing about the ones that came.
    #[test]
    fn a_program_still_missing_after_install_is_named_with_its_package() {
        let tools = [
            program("bpftool", "bpftool"),
            program("mkfs.xfs", "xfsprogs"),
        ];
        let err = verify_installed(&tools, |t| t == "mkfs.xfs").unwrap_err();
        let text = format!("{err:#}");
        assert!(!text.contains('\n'), "{text}");
        assert!(text.ends_with(": bpftool (package bpftool)"), "{text}");
        assert!(verify_installed(&tools, |_| true).is_ok());
    }

    /// A user's PATH without sbin still finds what lives there; only
    /// executable files count.
    #[test]
    fn tools_are_found_in_sbin_and_must_be_executable() {
        let dir = std::env::temp_dir().join(format!("xtask-tools-{}", std::process::id()));
        let (bin, sbin) = (dir.join("bin"), dir.join("sbin"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&sbin).unwrap();
        let tool = sbin.join("fake-mkfs");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("not-executable"), "").unwrap();
        let dirs = [bin.clone(), sbin.clone()];
        let found = find_tool("fake-mkfs", &dirs);
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let found_after = find_tool("fake-mkfs", &dirs);
        let plain = find_tool("not-executable", &dirs);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, None);
        assert_eq!(found_after, Some(tool));
        assert_eq!(plain, None);
        let user_path = tool_dirs(Some("/usr/local/bin:/usr/bin:/bin".into()));
        for sbin in SBIN_DIRS {
            assert!(user_path.contains(&PathBuf::from(sbin)), "{sbin}");
        }
        assert_eq!(user_path[0], PathBuf::from("/usr/local/bin"));
    }

    #[test]
    fn each_package_is_installed_once() {
        assert_eq!(
            packages_of(&[
                program("losetup", "util-linux"),
                program("x", "p"),
                program("setpriv", "util-linux")
            ]),
            vec!["util-linux", "p"]
        );
    }

    /// `cargo xtask setup` installs what every other task would, and
    /// only what setup may install.
    #[test]
    fn setup_covers_every_scope() {
        let all = scope_tools(Scope::All);
        for scope in [Scope::Build, Scope::Test, Scope::Vm, Scope::Bench] {
            for tool in scope_tools(scope) {
                assert!(all.contains(&tool), "{tool:?} of {scope:?}");
            }
        }
        assert!(all.iter().all(|p| p.provider == Provider::Setup));
        assert!(scope_tools(Scope::Build).is_empty());
        // `cargo xtask test` runs the VM checks too.
        assert!(scope_tools(Scope::Test).contains(&programs::QEMU));
    }
}
