//! Debian kernel packages: downloaded with apt, unpacked with dpkg, module
//! dependencies resolved with kmod, all cached under target/vm/.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// One kernel of the matrix.
pub struct KernelSpec {
    /// What `--kernel` takes and the reports print.
    pub label: &'static str,
    /// Debian's unsigned image package (docs/toolchain.md: these two come with
    /// `apt-get download` from bookworm-security; the unsigned ones have
    /// vmlinuz, config and modules in one package).
    pub package: &'static str,
    /// `uname -r` of that kernel (its /lib/modules directory).
    pub release: &'static str,
}

/// The kernels of the matrix: 6.1 has `write_cache_pages` and no
/// `writeback_iter`, 6.12 both (docs/toolchain.md), so between them they cover
/// both scan functions wbscope can hook.
pub const KERNELS: &[KernelSpec] = &[
    KernelSpec {
        label: "6.1",
        package: "linux-image-6.1.0-57-amd64-unsigned",
        release: "6.1.0-57-amd64",
    },
    KernelSpec {
        label: "6.12",
        package: "linux-image-6.12.117+deb12-amd64-unsigned",
        release: "6.12.117+deb12-amd64",
    },
];

/// Modules the guest loads, in this order with their dependencies first:
/// virtio's PCI transport (a module on 6.1, built in on 6.12), the 9p
/// transport and filesystem for the host root, virtio-blk for the test
/// disk, ext4 (a module on both, with jbd2, mbcache, crc16, crc32c), and
/// xfs (a module on both) for the `do_writepages` hooks on a filesystem
/// whose calls ext4's records do not have.
const MODULES: &[&str] = &[
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "virtio_blk",
    "ext4",
    "xfs",
];

/// An unpacked kernel.
pub struct KernelTree {
    pub vmlinuz: PathBuf,
    /// Module files in load order.
    pub modules: Vec<PathBuf>,
}

/// Downloads and unpacks `spec` unless target/vm/<label>/ already holds it.
pub fn ensure(spec: &KernelSpec, root: &Path) -> anyhow::Result<KernelTree> {
    let dir = root.join(spec.label);
    let stamp = dir.join(".unpacked");
    if !stamp.exists() {
        let deb = download(spec, &root.join("pkgs"))?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing partial {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        run(Command::new("dpkg").arg("-x").arg(&deb).arg(&dir))
            .with_context(|| format!("unpacking {}", deb.display()))?;
        // The package ships no modules.dep (its postinst makes it).
        run(Command::new(kmod_tool("depmod"))
            .arg("-b")
            .arg(&dir)
            .arg(spec.release))
        .context("depmod (package kmod)")?;
        std::fs::write(&stamp, spec.package)?;
    }
    let vmlinuz = dir.join("boot").join(format!("vmlinuz-{}", spec.release));
    if !vmlinuz.exists() {
        bail!(
            "{} has no {}: remove {} and retry",
            spec.package,
            vmlinuz.display(),
            dir.display()
        );
    }
    Ok(KernelTree {
        vmlinuz,
        modules: load_order(&dir, spec.release)?,
    })
}

/// `apt-get download` into `pkgs`, once; `apt-get update` first if apt
/// does not know the package (a fresh machine has no lists).
fn download(spec: &KernelSpec, pkgs: &Path) -> anyhow::Result<PathBuf> {
    download_with("apt-get", spec, pkgs)
}

/// [`download`] with another `apt-get` (the tests' stand-in).
fn download_with(apt: &str, spec: &KernelSpec, pkgs: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(pkgs)?;
    if let Some(deb) = cached_deb(spec, pkgs)? {
        return Ok(deb);
    }
    eprintln!("xtask: vm: downloading {}", spec.package);
    let mut last_error = match apt_download(apt, spec, pkgs) {
        Ok(()) => String::new(),
        Err(e) => e,
    };
    if cached_deb(spec, pkgs)?.is_none() && crate::setup::is_root() {
        eprintln!("xtask: vm: apt-get update, then retrying");
        let _ = Command::new(apt).args(["update", "-qq"]).status();
        last_error = match apt_download(apt, spec, pkgs) {
            Ok(()) => String::new(),
            Err(e) => e,
        };
    }
    match cached_deb(spec, pkgs)? {
        Some(deb) => Ok(deb),
        None => bail!("cannot download {}: {last_error}", spec.package),
    }
}

fn apt_download(apt: &str, spec: &KernelSpec, pkgs: &Path) -> Result<(), String> {
    let out = Command::new(apt)
        .args(["download", "-q", spec.package])
        .current_dir(pkgs)
        .output()
        .map_err(|e| format!("apt-get: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("E:"))
        .or_else(|| stderr.lines().last())
        .unwrap_or("apt-get download failed")
        .trim()
        .to_string())
}

/// The package's .deb in `pkgs` (apt names it `NAME_VERSION_ARCH.deb`).
fn cached_deb(spec: &KernelSpec, pkgs: &Path) -> anyhow::Result<Option<PathBuf>> {
    let prefix = format!("{}_", spec.package);
    for entry in std::fs::read_dir(pkgs)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(&prefix) && name.ends_with(".deb") {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Module files for [`MODULES`], dependencies first, each once, from
/// `modprobe --show-depends` over the unpacked tree.
fn load_order(dir: &Path, release: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut order: Vec<PathBuf> = Vec::new();
    for module in MODULES {
        let out = Command::new(kmod_tool("modprobe"))
            .arg("-d")
            .arg(dir)
            .args(["-S", release, "--show-depends", module])
            .output()
            .context("modprobe (package kmod)")?;
        if !out.status.success() {
            bail!(
                "modprobe --show-depends {module} for {release}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        for path in parse_show_depends(&String::from_utf8_lossy(&out.stdout)) {
            if !order.contains(&path) {
                order.push(path);
            }
        }
    }
    Ok(order)
}

/// `insmod /path/mod.ko[.xz] [params]` lines → paths; `builtin NAME` lines
/// (virtio_pci on 6.12) need nothing.
fn parse_show_depends(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.strip_prefix("insmod "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(PathBuf::from)
        .collect()
}

/// kmod's tools live in /usr/sbin, which a non-root PATH may lack.
fn kmod_tool(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from(name)
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// A package apt cannot find: one line naming it and apt's reason, and
    /// nothing left in the package cache.
    #[test]
    fn a_package_that_cannot_be_downloaded_is_one_line() {
        let dir = std::env::temp_dir().join(format!("xtask-apt-{}", std::process::id()));
        let pkgs = dir.join("pkgs");
        std::fs::create_dir_all(&pkgs).unwrap();
        let apt = dir.join("apt-get");
        std::fs::write(
            &apt,
            "#!/bin/sh\n[ \"$1\" = update ] && exit 0\n\
             echo 'Reading package lists...' >&2\n\
             echo \"E: Unable to locate package $3\" >&2\nexit 100\n",
        )
        .unwrap();
        std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = KernelSpec {
            label: "none",
            package: "linux-image-0.0-none",
            release: "0.0-none",
        };
        let err = download_with(apt.to_str().unwrap(), &spec, &pkgs).unwrap_err();
        let text = format!("{err:#}");
        let left = std::fs::read_dir(&pkgs).unwrap().count();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(left, 0);
        assert_eq!(
            text,
            "cannot download linux-image-0.0-none: E: Unable to locate package \
             linux-image-0.0-none"
        );
    }

    #[test]
    fn show_depends_lines() {
        let text = "insmod /k/lib/modules/v/kernel/fs/jbd2/jbd2.ko.xz \n\
                    builtin virtio_pci\n\
                    insmod /k/ext4.ko opt=1\n";
        assert_eq!(
            parse_show_depends(text),
            vec![
                PathBuf::from("/k/lib/modules/v/kernel/fs/jbd2/jbd2.ko.xz"),
                PathBuf::from("/k/ext4.ko")
            ]
        );
    }

    #[test]
    fn release_matches_package() {
        for k in KERNELS {
            assert_eq!(
                k.package,
                format!("linux-image-{}-unsigned", k.release),
                "{}",
                k.label
            );
        }
    }
}
