//! Debian kernel packages: resolved by series and downloaded with apt's
//! private configuration (`apt.rs`), unpacked with dpkg, module
//! dependencies resolved with kmod, all cached under target/vm/.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{Mutex, PoisonError},
};

use anyhow::{Context as _, bail};
use wbscope_programs::{self as programs, Program};

use crate::apt::Apt;

/// One kernel of the matrix, named by series: whichever build of it is
/// newest in the archive when the matrix runs.
pub(crate) struct KernelSpec {
    /// What `--kernel` takes and the reports print.
    pub(crate) label: &'static str,
    /// Debian's meta package whose dependency is the image.
    pub(crate) meta: &'static str,
    /// Version prefix of the meta package (`6.1.`), `None` for the newest
    /// kernel the archive offers in any suite.
    pub(crate) series: Option<&'static str>,
    /// Run by `cargo xtask test` (CI's budget, docs/toolchain.md); the
    /// others only by `cargo xtask vm-test --kernel all`.
    pub(crate) in_test_suite: bool,
}

/// The matrix: Debian 11's 5.10, 12's 6.1, 13's 6.12, its
/// PREEMPT_RT and cloud builds, and the newest kernel any suite has
/// (backports, unstable or experimental). 6.1 has `write_cache_pages`
/// and no `writeback_iter`, 6.12 both (docs/toolchain.md).
pub(crate) const KERNELS: &[KernelSpec] = &[
    KernelSpec {
        label: "5.10",
        meta: "linux-image-amd64",
        series: Some("5.10."),
        in_test_suite: true,
    },
    KernelSpec {
        label: "6.1",
        meta: "linux-image-amd64",
        series: Some("6.1."),
        in_test_suite: true,
    },
    KernelSpec {
        label: "6.12",
        meta: "linux-image-amd64",
        series: Some("6.12."),
        in_test_suite: true,
    },
    KernelSpec {
        label: "6.12-rt",
        meta: "linux-image-rt-amd64",
        series: Some("6.12."),
        in_test_suite: true,
    },
    KernelSpec {
        label: "6.12-cloud",
        meta: "linux-image-cloud-amd64",
        series: Some("6.12."),
        in_test_suite: false,
    },
    KernelSpec {
        label: "newest",
        meta: "linux-image-amd64",
        series: None,
        in_test_suite: false,
    },
    // The newest PREEMPT_RT build: from 6.14 on, RT kernels run tracepoint
    // probes under SRCU with migration, not preemption, disabled
    // (`tracepoint_guard()`, include/linux/tracepoint.h), so tp_btf and
    // tracepoint programs can be preempted there as fentry ones are on
    // 6.12-rt (docs/toolchain.md, "PREEMPT_RT").
    KernelSpec {
        label: "newest-rt",
        meta: "linux-image-rt-amd64",
        series: None,
        in_test_suite: false,
    },
];

/// Modules the guest loads, in this order with their dependencies first:
/// virtio's PCI transport (a module on 5.10 and 6.1, built in later),
/// virtio-blk for the disks, ext4 (a module on most builds, with jbd2,
/// mbcache, crc16, crc32c) for the root image and the test disk, xfs
/// for the `do_writepages` hooks on a filesystem whose calls ext4's
/// records do not have, and loop for the scenarios' own filesystems
/// (`cargo xtask vm-scenario`). A module the build has built in is
/// skipped (`modprobe --show-depends` says `builtin`).
const MODULES: &[&str] = &["virtio_pci", "virtio_blk", "ext4", "xfs", "loop"];

/// An unpacked kernel.
pub(crate) struct KernelTree {
    /// `uname -r`.
    pub(crate) release: String,
    pub(crate) vmlinuz: PathBuf,
    /// Module files in load order.
    pub(crate) modules: Vec<PathBuf>,
}

/// What a spec resolved to in the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    release: String,
    version: String,
    suite: String,
    /// Packages that together hold vmlinuz and the modules.
    packages: Vec<String>,
}

/// Held by [`ensure`] throughout: apt's lists and archives under
/// `target/vm/apt`, the downloaded packages, the unpacked trees and the
/// `.resolved` records are not for concurrent use (a resolve once failed
/// with "No packages found" while two vm-tests shared `target/vm/apt`,
/// docs/toolchain.md), so the guests' lanes take turns here.
static ENSURING: Mutex<()> = Mutex::new(());

/// Resolves `spec` to the newest build in the archive (or, when the
/// archive cannot be asked, the build resolved last time), then downloads
/// and unpacks it unless `target/vm/kernels/<release>/` already holds it.
/// One call at a time in this process ([`ENSURING`]).
pub(crate) fn ensure(spec: &KernelSpec, root: &Path) -> anyhow::Result<KernelTree> {
    let _turn = ENSURING.lock().unwrap_or_else(PoisonError::into_inner);
    ensure_alone(spec, root)
}

fn ensure_alone(spec: &KernelSpec, root: &Path) -> anyhow::Result<KernelTree> {
    let record = root
        .join("kernels")
        .join(format!("{}.resolved", spec.label));
    let apt = Apt::new(&root.join("apt"));
    let resolved = match apt.update_if_stale().and_then(|()| resolve(&apt, spec)) {
        Ok(r) => r,
        Err(e) => match read_record(&record) {
            Some(r)
                if root
                    .join("kernels")
                    .join(&r.release)
                    .join(".unpacked")
                    .exists() =>
            {
                eprintln!(
                    "xtask: vm: {}: cannot ask the archive ({e:#}); using {} resolved before",
                    spec.label, r.release
                );
                r
            }
            _ => return Err(e).with_context(|| format!("resolving kernel {}", spec.label)),
        },
    };
    let dir = root.join("kernels").join(&resolved.release);
    let stamp = dir.join(".unpacked");
    if !stamp.exists() {
        let pkgs = root.join("pkgs");
        let debs = download(&apt, &resolved, &pkgs)?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing partial {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        for deb in &debs {
            run(programs::DPKG.command().arg("-x").arg(deb).arg(&dir))
                .with_context(|| format!("unpacking {}", deb.display()))?;
        }
        // Debian 13's packages install under /usr/lib/modules (merged
        // /usr); kmod's `-b DIR` looks in DIR/lib/modules.
        if !dir.join("lib").exists() && dir.join("usr/lib/modules").exists() {
            std::os::unix::fs::symlink("usr/lib", dir.join("lib"))
                .context("linking lib to usr/lib in the unpacked kernel")?;
        }
        // The packages ship no modules.dep (their postinst makes it).
        run(Command::new(kmod_tool(programs::DEPMOD))
            .arg("-b")
            .arg(&dir)
            .arg(&resolved.release))
        .context("depmod (package kmod)")?;
        std::fs::write(&stamp, resolved.packages.join("\n"))?;
    }
    std::fs::write(
        &record,
        format!(
            "{}\n{}\n{}\n{}\n",
            resolved.release,
            resolved.version,
            resolved.suite,
            resolved.packages.join(" ")
        ),
    )
    .with_context(|| format!("writing {}", record.display()))?;
    let vmlinuz = [
        dir.join("boot")
            .join(format!("vmlinuz-{}", resolved.release)),
        dir.join("usr/lib/modules")
            .join(&resolved.release)
            .join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .with_context(|| {
        format!(
            "{} has no vmlinuz: remove {} and retry",
            resolved.packages.join(" "),
            dir.display()
        )
    })?;
    Ok(KernelTree {
        modules: load_order(&dir, &resolved.release)?,
        release: resolved.release,
        vmlinuz,
    })
}

/// The image package the newest `spec.meta` of the series depends on, and
/// the packages that hold its files: the image itself and, where Debian
/// splits them (7.x: `linux-binary-R` has vmlinuz, `linux-modules-R` the
/// modules), every dependency named for the same release.
fn resolve(apt: &Apt, spec: &KernelSpec) -> anyhow::Result<Resolved> {
    let (version, suite) = apt.newest(spec.meta, spec.series)?;
    let depends = apt.depends(spec.meta, &version)?;
    let image = depends
        .iter()
        .find(|d| d.starts_with("linux-image-") && *d != spec.meta)
        .with_context(|| format!("{} {version} depends on no linux-image-*", spec.meta))?
        .clone();
    let release = image["linux-image-".len()..].to_string();
    let mut packages = vec![image.clone()];
    for dep in apt.depends(&image, &version)? {
        if dep.ends_with(&format!("-{release}")) && dep != image && !packages.contains(&dep) {
            packages.push(dep);
        }
    }
    Ok(Resolved {
        release,
        version,
        suite,
        packages,
    })
}

fn read_record(path: &Path) -> Option<Resolved> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    Some(Resolved {
        release: lines.next()?.to_string(),
        version: lines.next()?.to_string(),
        suite: lines.next()?.to_string(),
        packages: lines.next()?.split_whitespace().map(String::from).collect(),
    })
}

/// The resolved packages' .debs in `pkgs`, downloading those missing.
fn download(apt: &Apt, r: &Resolved, pkgs: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(pkgs)?;
    let missing: Vec<(String, String)> = r
        .packages
        .iter()
        .filter(|p| cached_deb(p, &r.version, pkgs).is_none())
        .map(|p| (p.clone(), r.version.clone()))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "xtask: vm: downloading {} {} from {}",
            r.packages.join(" "),
            r.version,
            r.suite
        );
        apt.download(&missing, pkgs)
            .with_context(|| format!("cannot download {}", r.packages.join(" ")))?;
    }
    r.packages
        .iter()
        .map(|p| {
            cached_deb(p, &r.version, pkgs)
                .with_context(|| format!("apt-get download left no {p} in {}", pkgs.display()))
        })
        .collect()
}

/// `NAME_VERSION_amd64.deb` in `pkgs` (apt writes an epoch's colon as
/// `%3a`; kernel versions have none).
fn cached_deb(package: &str, version: &str, pkgs: &Path) -> Option<PathBuf> {
    let path = pkgs.join(format!("{package}_{version}_amd64.deb"));
    path.exists().then_some(path)
}

/// Module files for [`MODULES`], dependencies first, each once, from
/// `modprobe --show-depends` over the unpacked tree.
fn load_order(dir: &Path, release: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut order: Vec<PathBuf> = Vec::new();
    for module in MODULES {
        let out = Command::new(kmod_tool(programs::MODPROBE))
            .arg("-d")
            .arg(dir)
            .args(["-S", release, "--show-depends", module])
            .output()
            .context("modprobe (package kmod)")?;
        if !out.status.success() {
            // Not in this build at all (a cloud build leaves drivers
            // out): the guest step that needs it says what failed.
            eprintln!(
                "xtask: vm: {release} has no module {module}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            continue;
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
fn kmod_tool(tool: Program) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(tool.name);
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from(tool.name)
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
    use super::*;

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
    fn labels_are_unique_and_the_test_suite_runs_some() {
        let mut labels: Vec<&str> = KERNELS.iter().map(|k| k.label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), KERNELS.len());
        assert!(KERNELS.iter().any(|k| k.in_test_suite));
        // The archive's newest, whatever its series: one plain build, one
        // PREEMPT_RT.
        let newest: Vec<&str> = KERNELS
            .iter()
            .filter(|k| k.series.is_none())
            .map(|k| k.meta)
            .collect();
        assert_eq!(newest, ["linux-image-amd64", "linux-image-rt-amd64"]);
    }

    /// A record written by one run is read back by the next.
    #[test]
    fn resolved_record_round_trip() {
        let dir = std::env::temp_dir().join(format!("xtask-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.resolved");
        std::fs::write(&path, "7.3.4+deb13-amd64\n7.3.4-1~bpo13+1\ntrixie-backports\nlinux-image-7.3.4+deb13-amd64 linux-binary-7.3.4+deb13-amd64\n").unwrap();
        let r = read_record(&path);
        std::fs::write(&path, "half\n").unwrap();
        let half = read_record(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        let r = r.unwrap();
        assert_eq!(r.release, "7.3.4+deb13-amd64");
        assert_eq!(r.packages.len(), 2);
        assert_eq!(half, None);
    }
}
