//! Test helpers: temp dirs on a real block-backed filesystem, loop mounts
//! that clean up after themselves.
#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use scratchfs::ScratchFs;
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

/// A filesystem on a loop device (`scratchfs`), mounted under /var/tmp;
/// unmounted, detached and deleted on drop, also when the test failed.
/// `sector` sets the loop device's logical block size; `mount_opts` e.g.
/// `["-o", "ro"]`.
pub fn loop_fs(fstype: &str, mb: u64, sector: Option<u32>, mount_opts: &[&str]) -> ScratchFs {
    let mut b = ScratchFs::builder(fstype.parse().expect("fstype"), mb).mount_args(mount_opts);
    if let Some(s) = sector {
        b = b.sector_size(s);
    }
    b.create()
        .unwrap_or_else(|e| panic!("scratch {fstype}: {e:#}"))
}
