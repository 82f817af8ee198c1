//! Test helpers: temp dirs on a real block-backed filesystem, loop mounts
//! that clean up after themselves.
#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A temp dir under /var/tmp: /tmp may be tmpfs, where O_DIRECT and
/// writeback behave differently.
pub fn var_tmp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("wbscope-test-")
        .tempdir_in("/var/tmp")
        .expect("temp dir in /var/tmp")
}

/// Regular files directly in `dir`, sorted.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Inverts one byte of a file in place.
pub fn flip_byte(path: &Path, off: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8];
    f.read_exact_at(&mut b, off).expect("read");
    f.write_all_at(&[!b[0]], off).expect("write");
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A filesystem image on a loop device, mounted in a temp dir. Dropping it
/// unmounts, detaches and deletes everything, also when the test failed.
pub struct LoopFs {
    dir: TempDir,
    mnt: PathBuf,
    dev: Option<String>,
    mounted: bool,
}

impl LoopFs {
    /// `mkfs.<fstype>` on a sparse image of `mb` MiB; `sector` sets the loop
    /// device's logical block size; `mount_opts` e.g. `["-o", "ro"]`.
    pub fn new(fstype: &str, mb: u64, sector: Option<u32>, mount_opts: &[&str]) -> LoopFs {
        let dir = var_tmp_dir();
        let mnt = dir.path().join("mnt");
        let mut me = LoopFs {
            dir,
            mnt,
            dev: None,
            mounted: false,
        };
        let img = me.dir.path().join("img");
        let f = fs::File::create(&img).expect("image");
        f.set_len(mb << 20).expect("truncate");
        drop(f);
        let img_s = img.to_string_lossy().to_string();
        let mut args = vec!["-f", "--show"];
        let sector_s = sector.map(|s| s.to_string());
        if let Some(s) = &sector_s {
            args.extend(["--sector-size", s]);
        }
        args.push(&img_s);
        me.dev = Some(sh("losetup", &args));
        let dev = me.dev.clone().unwrap_or_default();
        match fstype {
            // Default mkfs.ext4 has a journal (has_journal): unlike / here.
            "ext4" => sh("mkfs.ext4", &["-q", "-F", &dev]),
            "xfs" => sh("mkfs.xfs", &["-q", "-f", &dev]),
            other => panic!("no mkfs for {other}"),
        };
        fs::create_dir(me.mnt()).expect("mount point");
        let mnt = me.mnt().to_string_lossy().to_string();
        let mut margs: Vec<&str> = mount_opts.to_vec();
        margs.extend([dev.as_str(), mnt.as_str()]);
        sh("mount", &margs);
        me.mounted = true;
        me
    }

    pub fn mnt(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let mnt = &self.mnt;
            let ok = Command::new("umount")
                .arg(mnt)
                .status()
                .map(|s| s.success());
            if !matches!(ok, Ok(true)) {
                let _ = Command::new("umount").arg("-l").arg(mnt).status();
            }
        }
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}
