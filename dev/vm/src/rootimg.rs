//! The guests' root: one read-only ext4 image, built once per run and
//! attached to every kernel's guest, holding the wbscope under test and
//! the few host programs the guest scripts need (with the shared
//! libraries `ldd` names), and busybox-static for everything else.
//!
//! An image rather than the host's root over 9p: Debian's cloud kernels
//! have no 9p (`CONFIG_NET_9P` unset in 6.12's `-cloud-amd64`), and a
//! program read from a block device starts faster under TCG than one
//! read over 9p.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

/// busybox-static's binary ([`programs::BUSYBOX`]), run from here to list
/// its applets and copied to the same path in the guest (the dynamic
/// `busybox` package installs the same path, hence the check in
/// `initramfs.rs`).
pub(crate) const BUSYBOX: &str = "/bin/busybox";

/// Where the guest finds wbscope.
pub(crate) const GUEST_WBSCOPE: &str = "/usr/local/bin/wbscope";

/// Host programs copied in, at the same path: dash, which runs checks.sh
/// (busybox-static's ash does its arithmetic in 32 bits: "divide by
/// zero" on a nanosecond clock), coreutils' `timeout` (its 124 on a
/// timeout is what checks.rs reads), `date` (`%N`) and `dd` (busybox's
/// has no `oflag=dsync`), the mkfs programs of the filesystems the
/// guest makes, and util-linux's losetup, mount and umount, which
/// `wbscope scenario` runs (scratchfs: `losetup -f --show`, options
/// busybox's applets lack). Everything else the scripts run is a busybox
/// applet. Each is a program of wbscope-programs' table with the VM
/// scope, which setup installs (or the base system has).
pub(crate) const DASH: &str = "/usr/bin/dash";
const HOST_PROGRAMS: &[&str] = &[
    DASH,
    "/usr/bin/timeout",
    "/usr/bin/date",
    "/usr/bin/dd",
    "/usr/sbin/mkfs.ext4",
    "/usr/sbin/mkfs.xfs",
    "/usr/sbin/losetup",
    "/usr/bin/mount",
    "/usr/bin/umount",
];

/// Host files the programs read (mke2fs's defaults).
const HOST_FILES: &[&str] = &["/etc/mke2fs.conf"];

/// The guest's accounts: wbscope drops its privileges to `nobody` once
/// its programs are attached (its `--user` default), and looks the user
/// up in /etc/passwd (glibc's built-in `files` service).
const ACCOUNTS: &[(&str, &str)] = &[
    (
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("/etc/group", "root:x:0:\nnogroup:x:65534:\n"),
];

/// Builds the image at `dest` from a staging directory beside it.
pub(crate) fn build(wbscope: &Path, dest: &Path) -> anyhow::Result<()> {
    let staging = dest.with_extension("staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("removing {}", staging.display()))?;
    }
    for dir in [
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "usr/local/bin",
        "proc",
        "sys",
        "dev",
        "tmp",
        "var/tmp",
        "etc",
    ] {
        std::fs::create_dir_all(staging.join(dir))?;
    }
    copy_in(Path::new(BUSYBOX), &staging.join("bin/busybox"))?;
    for applet in applets()? {
        let link = staging.join("bin").join(&applet);
        if !link.exists()
            && !HOST_PROGRAMS
                .iter()
                .any(|p| p.ends_with(&format!("/{applet}")))
        {
            std::os::unix::fs::symlink("busybox", &link)
                .with_context(|| format!("linking {}", link.display()))?;
        }
    }
    let mut programs: Vec<(PathBuf, PathBuf)> = HOST_PROGRAMS
        .iter()
        .map(|p| (PathBuf::from(p), PathBuf::from(p)))
        .collect();
    programs.push((wbscope.to_path_buf(), PathBuf::from(GUEST_WBSCOPE)));
    for (host, guest) in &programs {
        copy_in(host, &under(&staging, guest))?;
        if guest == Path::new(GUEST_WBSCOPE) {
            // A debug build carries hundreds of MiB of debug info the
            // guest never reads (the eBPF object inside keeps its BTF:
            // it is data, not a debug section).
            let out = programs::STRIP
                .command()
                .arg("--strip-debug")
                .arg(under(&staging, guest))
                .output()
                .context("running strip (package binutils)")?;
            if !out.status.success() {
                bail!("strip: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
        }
        for lib in libraries(host)? {
            let at = under(&staging, &lib);
            if !at.exists() {
                copy_in(&lib, &at)?;
            }
        }
    }
    for file in HOST_FILES {
        copy_in(Path::new(file), &under(&staging, Path::new(file)))?;
    }
    for (file, text) in ACCOUNTS {
        let at = under(&staging, Path::new(file));
        std::fs::write(&at, text).with_context(|| format!("writing {}", at.display()))?;
    }
    let bytes = du(&staging)?;
    // Room for ext4's metadata (inode tables, journal-less) on top of
    // the files: half again, and 16 MiB.
    let size_mib = ((bytes * 3 / 2) >> 20) + 16;
    let _ = std::fs::remove_file(dest);
    let out = programs::MKFS_EXT4
        .command()
        .args(["-q", "-F", "-O", "^has_journal", "-L", "wbroot", "-d"])
        .arg(&staging)
        .arg(dest)
        .arg(format!("{size_mib}M"))
        .output()
        .context("running mkfs.ext4 (package e2fsprogs)")?;
    std::fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    if !out.status.success() {
        bail!(
            "mkfs.ext4 -d for the guest root: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `path` (absolute) inside `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// Copies the file `from` resolves to (the host's mkfs.ext4 is a link to
/// mke2fs; libraries are links to versioned files).
fn copy_in(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} into the guest root", from.display()))?;
    Ok(())
}

/// busybox's applet names.
fn applets() -> anyhow::Result<Vec<String>> {
    let out = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .with_context(|| format!("running {BUSYBOX} (install busybox-static)"))?;
    if !out.status.success() {
        bail!("{BUSYBOX} --list failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('/'))
        .map(String::from)
        .collect())
}

/// The shared libraries (and the dynamic loader) `program` needs, from
/// `ldd`.
fn libraries(program: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = programs::LDD
        .command()
        .arg(program)
        .output()
        .context("running ldd (package libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() && !text.contains("not a dynamic executable") {
        bail!(
            "ldd {}: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_ldd(&text))
}

/// Absolute paths in `ldd` lines: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6
/// (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)`.
fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Bytes of the regular files under `dir`.
fn du(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.path().symlink_metadata()?;
        if meta.is_dir() {
            total += du(&entry.path())?;
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the guests get from the host is what setup provides for the
    /// VM scope.
    #[test]
    fn host_programs_are_in_the_vm_scope_of_the_table() {
        for path in HOST_PROGRAMS.iter().chain([&BUSYBOX]) {
            let name = Path::new(path).file_name().unwrap().to_str().unwrap();
            let program = programs::ALL.iter().find(|p| p.name == name);
            assert!(
                program.is_some_and(|p| p.needed_by(programs::Scope::Vm)),
                "{path}: not a program of the VM scope in dev/programs"
            );
        }
    }

    #[test]
    fn ldd_lines() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\
                    \tlibmissing.so => not found\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(
            under(Path::new("/s"), Path::new("/usr/bin/x")),
            PathBuf::from("/s/usr/bin/x")
        );
    }
}
