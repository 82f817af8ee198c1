//! Filesystem type names for the devices in call records, from
//! /proc/self/mountinfo.
//!
//! Why userspace and not the kernel: every hook gives the device
//! (`inode->i_sb->s_dev`), but only the BTF-typed ones could follow
//! `i_sb->s_type->name`, and a string read costs a helper call in the
//! kernel; the classic ext4 tracepoints carry the device only. One table
//! here serves every hook kind, and recordings keep the name it found.
//! mountinfo's third field is the superblock's `s_dev`
//! (show_mountinfo() in fs/proc_namespace.c), the same number the
//! records carry, btrfs' anonymous device included.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::model::DevId;

/// How old the table may get: a device number is reused as soon as its
/// filesystem is unmounted (a loop device for the next test's
/// filesystem), so a name is trusted this long. Records wait in the ring
/// about as long (`ring::DRAIN_EVERY`): a filesystem unmounted and
/// another mounted on the same device within that time can lend its name
/// to the last records of the first.
const FRESH: Duration = Duration::from_millis(100);
/// An unknown device re-reads the table at most this often.
const RETRY: Duration = Duration::from_millis(10);

/// Device → filesystem type, from the latest read of mountinfo.
#[derive(Debug, Default)]
pub(crate) struct FsNames {
    known: HashMap<DevId, String>,
    read_at: Option<Instant>,
    /// /proc/self/mountinfo, opened once (before the privileges are
    /// dropped: the seccomp filter allows no open) and read again from
    /// offset 0, which renders the mount table afresh (a seq_file,
    /// fs/seq_file.c). `None`: could not be opened; names stay empty.
    file: Option<std::fs::File>,
}

impl FsNames {
    /// Opens mountinfo now, for reads later.
    pub(crate) fn open() -> FsNames {
        FsNames {
            file: std::fs::File::open("/proc/self/mountinfo").ok(),
            ..FsNames::default()
        }
    }

    /// The whole mount table, read now from the held file.
    fn read(&self) -> Option<String> {
        use std::io::{Read as _, Seek as _};
        let mut file = self.file.as_ref()?;
        file.rewind().ok()?;
        let mut text = String::new();
        file.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The type of the filesystem on `dev`, or "" when nothing mounted
    /// has it (unmounted before the record was read).
    pub(crate) fn name(&mut self, dev: DevId) -> &str {
        let age = self.read_at.map(|t| t.elapsed());
        let stale = age.is_none_or(|a| a > FRESH);
        let retry = !self.known.contains_key(&dev) && age.is_none_or(|a| a > RETRY);
        if stale || retry {
            self.read_at = Some(Instant::now());
            self.known.clear();
            if let Some(text) = self.read() {
                self.known.extend(parse_mountinfo(&text));
            }
        }
        self.known.get(&dev).map_or("", String::as_str)
    }
}

/// `(device, fstype)` of each line of a mountinfo file.
fn parse_mountinfo(text: &str) -> Vec<(DevId, String)> {
    parse_mounts(text)
        .into_iter()
        .map(|m| (m.dev, m.fstype))
        .collect()
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Field 3, `major:minor`: the superblock's `s_dev`, which the
    /// records carry.
    pub(crate) dev: DevId,
    /// Field 5, the mount point (octal escapes undone).
    pub(crate) point: PathBuf,
    /// The type and the source, after the ` - ` separator.
    pub(crate) fstype: String,
    pub(crate) source: String,
}

/// Every mount of this process's namespace, in mount order (empty if
/// mountinfo cannot be read).
pub(crate) fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default()
}

/// The lines of a mountinfo file (proc(5)); a line that does not parse is
/// skipped.
fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let dev = fields.nth(2)?.parse::<DevId>().ok()?;
            let point = PathBuf::from(unescape(fields.nth(1)?));
            let (_, tail) = line.split_once(" - ")?;
            let mut tail = tail.split(' ');
            Some(Mount {
                dev,
                point,
                fstype: tail.next()?.to_string(),
                source: unescape(tail.next().unwrap_or("")),
            })
        })
        .collect()
}

/// mountinfo's `\ooo` escapes (space, tab, newline, backslash:
/// show_mountinfo() → seq_path_root(…, " \t\n\\")).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The devices the writeback of files under `path` is seen on: the
/// superblock's (calls and inode passes carry `inode->i_sb->s_dev`) and,
/// where the filesystem's source is a block device with another number,
/// that block device's (block requests carry the disk's). They differ on
/// btrfs, whose superblock has an anonymous device (0:N) — and whose
/// subvolumes have anonymous devices of their own, which is what stat(2)
/// gives (`btrfs_getattr()`), so `st_dev` names neither.
pub(crate) fn devices_of(path: &Path) -> std::io::Result<Vec<DevId>> {
    let path = path.canonicalize()?;
    let all = mounts();
    // The visible mount: the deepest mount point above `path`, the last
    // mounted where several share it.
    let best = all
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count());
    let Some(m) = best else {
        use std::os::unix::fs::MetadataExt;
        return Ok(vec![DevId::from_user(std::fs::metadata(&path)?.dev())]);
    };
    let mut devs = vec![m.dev];
    if let Ok(meta) = std::fs::metadata(&m.source) {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let block = DevId::from_user(meta.rdev());
        if meta.file_type().is_block_device() && block != m.dev {
            devs.push(block);
        }
    }
    Ok(devs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_device_and_type() {
        let text = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    40 36 0:52 / /mnt/b rw,relatime shared:3 - btrfs /dev/loop3 rw,space_cache=v2\n\
                    garbage\n";
        let got = parse_mountinfo(text);
        assert_eq!(
            got,
            vec![
                (
                    DevId {
                        major: 98,
                        minor: 0
                    },
                    "ext3".to_string()
                ),
                (
                    DevId {
                        major: 0,
                        minor: 52
                    },
                    "btrfs".to_string()
                ),
            ]
        );
    }

    #[test]
    fn mount_points_and_sources_are_unescaped() {
        let text = "40 36 0:52 / /mnt/a\\040b rw - btrfs /dev/loop3 rw\n\
                    41 36 7:1 / /mnt/c rw - xfs /dev/loop1 rw\n";
        let got = parse_mounts(text);
        assert_eq!(got[0].point, PathBuf::from("/mnt/a b"));
        assert_eq!(got[0].source, "/dev/loop3");
        assert_eq!(got[1].dev, DevId { major: 7, minor: 1 });
        assert_eq!(unescape("a\\134b\\9"), "a\\b\\9");
    }

    /// The root filesystem's devices start with its superblock's.
    #[test]
    fn the_root_filesystem_has_its_device() {
        use std::os::unix::fs::MetadataExt;
        let dev = DevId::from_user(std::fs::metadata("/").unwrap().dev());
        assert_eq!(devices_of(Path::new("/")).unwrap()[0], dev);
    }

    /// The root filesystem of this machine is found under its `st_dev`.
    #[test]
    fn the_root_filesystem_is_named() {
        use std::os::unix::fs::MetadataExt;
        let dev = DevId::from_user(std::fs::metadata("/").unwrap().dev());
        assert!(!FsNames::open().name(dev).is_empty());
    }

    /// mountinfo held open since before a mount is read afresh: the new
    /// filesystem is named (what the tracing loop relies on once it can
    /// open nothing).
    #[test]
    fn a_held_mountinfo_sees_later_mounts() {
        use std::os::unix::fs::MetadataExt;
        let mut names = FsNames::open();
        let root = DevId::from_user(std::fs::metadata("/").unwrap().dev());
        assert!(!names.name(root).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C strings; a tmpfs of the test's own, unmounted below.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        let dev = DevId::from_user(std::fs::metadata(dir.path()).unwrap().dev());
        std::thread::sleep(RETRY * 2);
        let name = names.name(dev).to_string();
        // SAFETY: unmounts what the test mounted.
        let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(rc, 0);
        assert_eq!(name, "tmpfs");
    }
}
