//! What the target's block device requires of O_DIRECT I/O.
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Major and minor numbers of a `dev_t` (glibc's encoding, sysmacros.h).
pub fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff);
    (major, minor)
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Logical block size of block device `major:minor` as sysfs reports it
/// (`<sysfs>/dev/block/M:m/queue/logical_block_size`). A partition has no
/// `queue/` of its own: its sysfs directory sits inside its disk's, so we fall
/// back to the parent's. `None` when there is no such block device (tmpfs,
/// btrfs and overlayfs report anonymous device numbers).
pub fn logical_block_size_in(sysfs: &Path, major: u64, minor: u64) -> Option<u64> {
    let dev = sysfs.join(format!("dev/block/{major}:{minor}"));
    if let Some(v) = read_u64(&dev.join("queue/logical_block_size")) {
        return Some(v);
    }
    let real = fs::canonicalize(&dev).ok()?;
    read_u64(&real.parent()?.join("queue/logical_block_size"))
}

/// Logical block size of the device holding `path`, `Ok(None)` if unknown.
pub fn logical_block_size(path: &Path) -> io::Result<Option<u64>> {
    let meta = fs::metadata(path)?;
    let (major, minor) = major_minor(meta.dev());
    Ok(logical_block_size_in(Path::new("/sys"), major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_decoding_matches_glibc() {
        // makedev(8, 1) = 0x801; makedev(259, 65536) uses the high bits.
        assert_eq!(major_minor(0x801), (8, 1));
        let makedev = |maj: u64, min: u64| {
            ((maj & 0xfff) << 8) | ((maj & !0xfff) << 32) | (min & 0xff) | ((min & !0xff) << 12)
        };
        let dev = makedev(259, 65536);
        assert_eq!(major_minor(dev), (259, 65536));
    }

    #[test]
    fn partition_falls_back_to_its_disk() {
        let root = tempfile::tempdir().unwrap();
        let disk = root.path().join("devices/virtual/vdx");
        let part = disk.join("vdx1");
        fs::create_dir_all(disk.join("queue")).unwrap();
        fs::create_dir_all(&part).unwrap();
        fs::write(disk.join("queue/logical_block_size"), "4096\n").unwrap();
        fs::create_dir_all(root.path().join("dev/block")).unwrap();
        std::os::unix::fs::symlink(&disk, root.path().join("dev/block/254:0")).unwrap();
        std::os::unix::fs::symlink(&part, root.path().join("dev/block/254:1")).unwrap();
        assert_eq!(logical_block_size_in(root.path(), 254, 0), Some(4096));
        assert_eq!(logical_block_size_in(root.path(), 254, 1), Some(4096));
        assert_eq!(logical_block_size_in(root.path(), 0, 42), None);
    }

    #[test]
    fn the_root_filesystem_has_an_answer_or_none() {
        // On these machines / is ext4 on virtio: 512. Anywhere else it must
        // at least be a power of two if known.
        if let Some(lbs) = logical_block_size(Path::new("/")).unwrap() {
            assert!(lbs.is_power_of_two() && lbs >= 512, "{lbs}");
        }
    }
}
