//! The guest's initramfs: busybox-static, the guest scripts and a small
//! environment file (the part every kernel shares, [`base`]), then the
//! kernel's modules in load order ([`with_modules`]), as uncompressed
//! `newc` cpio archives one after the other (the kernel unpacks each in
//! turn, without any decompressor).
use std::{io::Write as _, path::Path};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

use crate::{kernel::KernelTree, rootimg::BUSYBOX};

const INIT: &str = include_str!("../guest/init.sh");
const CHECKS: &str = include_str!("../guest/checks.sh");

pub(crate) struct GuestConfig<'a> {
    /// Path of wbscope inside the guest's root image.
    pub(crate) wbscope: &'a str,
    /// Limits for one `wbscope trace` and one `wbscope probes` run.
    pub(crate) trace_timeout_secs: u64,
    pub(crate) probes_timeout_secs: u64,
    /// The step groups to run (checks.sh `want`), empty for all.
    pub(crate) steps: &'a str,
    /// `scenario` group only (`cargo xtask vm-scenario`): the scenarios
    /// to run, space-separated, and each one's `--repeat`.
    pub(crate) scenarios: &'a str,
    pub(crate) repeat: u32,
    /// Lines a group adds to /vm.env, exports included (the `bighost`
    /// group's load, `cargo xtask vm-test --big-host`); empty for none.
    pub(crate) extra_env: &'a str,
}

/// The archive every kernel's guest starts from.
pub(crate) fn base(config: &GuestConfig) -> anyhow::Result<Vec<u8>> {
    let busybox = std::fs::read(BUSYBOX)
        .with_context(|| format!("reading {BUSYBOX} (install busybox-static)"))?;
    if has_interpreter(&busybox) {
        bail!("{BUSYBOX} is dynamically linked: install busybox-static");
    }
    for text in [config.steps, config.scenarios] {
        if text.contains(['\'', '\n']) {
            bail!("{text:?} cannot be quoted for the guest");
        }
    }
    if config.wbscope.contains(['\'', '\n']) {
        bail!(
            "the wbscope path {:?} cannot be quoted for the guest",
            config.wbscope
        );
    }
    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "proc", "sys", "newroot", "modules"] {
        cpio.dir(dir);
    }
    // The kernel opens /dev/console for /init's stdio before devtmpfs is
    // mounted, so the node must be in the archive.
    cpio.char_dev("dev/console", 5, 1);
    cpio.file("bin/busybox", 0o755, &busybox);
    cpio.symlink("bin/sh", "busybox");
    cpio.file("init", 0o755, INIT.as_bytes());
    cpio.file("checks.sh", 0o755, CHECKS.as_bytes());
    cpio.file(
        "vm.env",
        0o644,
        format!(
            "WBSCOPE='{}'\nTRACE_TIMEOUT={}\nPROBES_TIMEOUT={}\nSTEPS='{}'\n\
             SCENARIOS='{}'\nREPEAT={}\n\
             {}\
             export WBSCOPE TRACE_TIMEOUT PROBES_TIMEOUT STEPS SCENARIOS REPEAT\n",
            config.wbscope,
            config.trace_timeout_secs,
            config.probes_timeout_secs,
            config.steps,
            config.scenarios,
            config.repeat,
            config.extra_env
        )
        .as_bytes(),
    );
    Ok(cpio.finish())
}

/// `base` followed by an archive of `tree`'s modules and their load
/// order, written to `dest`.
pub(crate) fn with_modules(base: &[u8], tree: &KernelTree, dest: &Path) -> anyhow::Result<()> {
    let mut cpio = Cpio::default();
    let mut list = String::new();
    for module in &tree.modules {
        let (name, bytes) = module_bytes(module)?;
        cpio.file(&format!("modules/{name}"), 0o644, &bytes);
        list.push_str(&name);
        list.push('\n');
    }
    cpio.file("modules.list", 0o644, list.as_bytes());
    let mut f =
        std::fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    f.write_all(base)
        .and_then(|()| f.write_all(&cpio.finish()))
        .with_context(|| format!("writing {}", dest.display()))?;
    Ok(())
}

/// A module's file name without compression suffix and its plain ELF
/// bytes. 6.12's modules are `.ko.xz` (docs/toolchain.md); busybox's insmod
/// hands the file to the kernel as is, so they are decompressed here.
fn module_bytes(path: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("module path {}", path.display()))?;
    let (stem, tool) = if let Some(stem) = name.strip_suffix(".xz") {
        (stem, Some(programs::XZ))
    } else if let Some(stem) = name.strip_suffix(".zst") {
        (stem, Some(programs::ZSTD))
    } else {
        (name, None)
    };
    let bytes = match tool {
        None => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        Some(tool) => {
            let out = tool
                .command()
                .arg("-dc")
                .arg(path)
                .output()
                .with_context(|| format!("running {} (to decompress modules)", tool.name))?;
            if !out.status.success() {
                bail!(
                    "{} -dc {}: {}",
                    tool.name,
                    path.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            out.stdout
        }
    };
    Ok((stem.to_string(), bytes))
}

/// Whether an ELF64 little-endian file has a PT_INTERP program header,
/// i.e. needs a dynamic loader (which the initramfs does not have).
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    if !elf.starts_with(b"\x7fELF") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..usize::from(phnum)).any(|i| {
        let at = phoff as usize + i * usize::from(phentsize);
        u32_at(at) == Some(PT_INTERP)
    })
}

/// A `newc` ("070701") cpio writer: just what an initramfs needs.
#[derive(Default)]
struct Cpio {
    data: Vec<u8>,
    next_ino: u32,
}

impl Cpio {
    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, 2, (0, 0), &[]);
    }

    fn file(&mut self, name: &str, perm: u32, bytes: &[u8]) {
        self.entry(name, 0o100_000 | perm, 1, (0, 0), bytes);
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120_777, 1, (0, 0), target.as_bytes());
    }

    fn char_dev(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020_600, 1, (major, minor), &[]);
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), bytes: &[u8]) {
        self.next_ino += 1;
        let fields = [
            self.next_ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so the archive depends only on its inputs
            u32::try_from(bytes.len()).unwrap_or(u32::MAX),
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0, // check
        ];
        self.data.extend_from_slice(b"070701");
        for field in fields {
            self.data
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(bytes);
        self.pad();
    }

    fn pad(&mut self) {
        self.data.resize(self.data.len().next_multiple_of(4), 0);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[]);
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_header_layout() {
        let mut cpio = Cpio::default();
        cpio.file("init", 0o755, b"abc");
        let data = cpio.finish();
        assert_eq!(&data[..6], b"070701");
        // ino 1, mode 0100755, filesize 3, namesize 5.
        let header = std::str::from_utf8(&data[..110]).unwrap();
        assert_eq!(&header[6..14], "00000001");
        assert_eq!(&header[14..22], "000081ed");
        assert_eq!(&header[54..62], "00000003");
        assert_eq!(&header[94..102], "00000005");
        // Name "init\0" padded to 116, then the data padded to 120.
        assert_eq!(&data[110..115], b"init\0");
        assert_eq!(&data[116..119], b"abc");
        assert_eq!(&data[120..126], b"070701");
        assert_eq!(data.len() % 4, 0);
        assert!(data.windows(10).any(|w| w == b"TRAILER!!!"));
    }

    #[test]
    fn static_and_dynamic_binaries() {
        // This test binary is dynamically linked (it needs libc).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(has_interpreter(&me));
        assert!(!has_interpreter(b"#!/bin/sh\n"));
    }
}
