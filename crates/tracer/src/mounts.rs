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

use wbscope_model::DevId;

/// How old the table may get: a device number is reused as soon as its
/// filesystem is unmounted (a loop device for the next test's
/// filesystem), so a name is trusted this long. Records wait in the ring
/// about as long (`ring::DRAIN_EVERY`; up to half a second for a trace's
/// first records after a quiet spell): a filesystem unmounted and another
/// mounted on the same device within that time can lend its name to the
/// last records of the first.
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
    /// Each whole disk's partitions, read at open (sysfs is not opened
    /// after the privileges are dropped): the block programs name a
    /// request's disk, a filesystem its partition.
    partitions: HashMap<DevId, Vec<DevId>>,
    /// Block devices by name (`sda1`, `loop2`), read at open.
    block_devs: HashMap<String, DevId>,
    /// A filesystem's `s_dev` → the block device it is mounted from, where
    /// the two differ (btrfs's anonymous devices), from the latest read.
    backing: HashMap<DevId, DevId>,
}

impl FsNames {
    /// Opens mountinfo now, for reads later.
    pub(crate) fn open() -> FsNames {
        FsNames {
            file: std::fs::File::open("/proc/self/mountinfo").ok(),
            partitions: partitions_by_disk(std::path::Path::new("/sys/class/block")),
            block_devs: block_devs(std::path::Path::new("/sys/class/block")),
            ..FsNames::default()
        }
    }

    /// The devices whose filesystems wait on whole disk `disk`'s cache
    /// flushes: the disk, its partitions (known at open), and the
    /// devices of the filesystems mounted from them (btrfs names its
    /// files by an anonymous device, not its disk's).
    pub(crate) fn devices_on(&mut self, disk: DevId) -> Vec<DevId> {
        // Only when stale: a whole disk whose partitions are mounted is
        // no mount of its own, and must not re-read the table per flush.
        if self.stale() {
            self.refresh_if_changed();
        }
        let mut out = vec![disk];
        out.extend(self.partitions.get(&disk).into_iter().flatten());
        let mounted: Vec<DevId> = self
            .backing
            .iter()
            .filter(|(_, b)| out.contains(b))
            .map(|(&fs, _)| fs)
            .collect();
        out.extend(mounted);
        out
    }

    /// Each mounted filesystem's `s_dev` → the whole disk it is on (its
    /// block device, or that partition's disk), read afresh when stale:
    /// the disk the ledger's device rows name.
    pub(crate) fn disks(&mut self) -> HashMap<DevId, DevId> {
        if self.stale() {
            self.refresh_if_changed();
        }
        self.known
            .keys()
            .map(|&fs| {
                let block = self.backing.get(&fs).copied().unwrap_or(fs);
                (fs, self.whole_disk(block))
            })
            .collect()
    }

    /// The whole disk of block device `dev`: its own number unless it is
    /// a partition known at open. No I/O: called after the privileges are
    /// dropped, when sysfs may not be opened.
    pub(crate) fn whole_disk(&self, dev: DevId) -> DevId {
        self.partitions
            .iter()
            .find(|(_, parts)| parts.contains(&dev))
            .map_or(dev, |(&disk, _)| disk)
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
        self.name_at(dev, Instant::now())
    }

    /// [`FsNames::name`] as of `now`: a drain of the ring reads the clock
    /// once for all its records, not once per call.
    pub(crate) fn name_at(&mut self, dev: DevId, now: Instant) -> &str {
        let age = self.read_at.map(|t| now.saturating_duration_since(t));
        let retry = !self.known.contains_key(&dev) && age.is_none_or(|a| a > RETRY);
        if age.is_none_or(|a| a > FRESH) || retry {
            self.refresh_if_changed();
        }
        self.known.get(&dev).map_or("", String::as_str)
    }

    /// Whether the table was read more than [`FRESH`] ago, or never.
    fn stale(&self) -> bool {
        self.read_at.is_none_or(|t| t.elapsed() > FRESH)
    }

    /// Reads the table again if it changed since the last read, else
    /// only marks it fresh: rendering the table is the costly part (an
    /// fsync storm's call records asked for a name 10,000 times a second,
    /// and its re-reads every [`FRESH`] were a seventh of the process's
    /// time), and mountinfo says when it changed.
    fn refresh_if_changed(&mut self) {
        if self.read_at.is_none() || self.changed() {
            self.refresh();
        } else {
            self.read_at = Some(Instant::now());
        }
    }

    /// Whether the mount table changed since the held file last read or
    /// polled it: a mount or unmount in the namespace makes the file
    /// poll as a priority event, once (`mounts_poll()` in
    /// fs/proc_namespace.c, proc(5)). True when that cannot be asked.
    fn changed(&self) -> bool {
        use std::os::fd::AsRawFd as _;
        let Some(file) = &self.file else {
            return true;
        };
        let mut fds = [libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        }];
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: one pollfd of a descriptor this struct holds open, a
        // valid timeout and no signal mask.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 1, &zero, std::ptr::null()) };
        n != 0
    }

    /// Reads the mount table again: each device's type, and the block
    /// device a filesystem with a device of its own is mounted from.
    fn refresh(&mut self) {
        self.read_at = Some(Instant::now());
        self.known.clear();
        self.backing.clear();
        if let Some(text) = self.read() {
            for m in parse_mounts(&text) {
                let from = m
                    .source
                    .strip_prefix("/dev/")
                    .and_then(|n| self.block_devs.get(n));
                if let Some(&b) = from.filter(|&&b| b != m.dev) {
                    self.backing.insert(m.dev, b);
                }
                self.known.insert(m.dev, m.fstype);
            }
        }
    }
}

/// `(device, fstype)` of each line of a mountinfo file.
#[cfg(test)]
fn parse_mountinfo(text: &str) -> Vec<(DevId, String)> {
    parse_mounts(text)
        .into_iter()
        .map(|m| (m.dev, m.fstype))
        .collect()
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    /// Field 3, `major:minor`: the superblock's `s_dev`, which the
    /// records carry.
    pub dev: DevId,
    /// Field 5, the mount point (octal escapes undone).
    pub(crate) point: PathBuf,
    /// The type and the source, after the ` - ` separator.
    pub fstype: String,
    pub(crate) source: String,
}

/// Every mount of this process's namespace, in mount order (empty if
/// mountinfo cannot be read).
pub fn mounts() -> Vec<Mount> {
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
pub fn devices_of(path: &Path) -> std::io::Result<Vec<DevId>> {
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

/// Under `root` (/sys/class/block): each block device's `dev`, by name.
fn block_devs(root: &std::path::Path) -> HashMap<String, DevId> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let dev = std::fs::read_to_string(e.path().join("dev")).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                dev.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// Under `root` (/sys/class/block): each entry with a `partition`
/// attribute is a partition of the disk its device directory sits in
/// (`/sys/devices/.../sda/sda1`), each `dev` file `MAJ:MIN`.
fn partitions_by_disk(root: &std::path::Path) -> HashMap<DevId, Vec<DevId>> {
    let dev_of = |dir: &std::path::Path| -> Option<DevId> {
        std::fs::read_to_string(dir.join("dev"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut out: HashMap<DevId, Vec<DevId>> = HashMap::new();
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let path = entry.path();
        if !path.join("partition").exists() {
            continue;
        }
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        if let (Some(part), Some(disk)) = (dev_of(&real), real.parent().and_then(dev_of)) {
            out.entry(disk).or_default().push(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sysfs's shape: /sys/class/block/NAME links into the device tree,
    /// where a partition's directory is inside its disk's.
    #[test]
    fn partitions_are_found_under_their_disks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let devices = dir.path().join("devices");
        let class = dir.path().join("class");
        std::fs::create_dir_all(devices.join("sda/sda1")).unwrap();
        std::fs::create_dir_all(devices.join("sda/sda2")).unwrap();
        std::fs::create_dir_all(devices.join("loop0")).unwrap();
        std::fs::create_dir_all(&class).unwrap();
        for (path, dev, part) in [
            ("sda", "8:0", false),
            ("sda/sda1", "8:1", true),
            ("sda/sda2", "8:2", true),
            ("loop0", "7:0", false),
        ] {
            std::fs::write(devices.join(path).join("dev"), format!("{dev}\n")).unwrap();
            if part {
                std::fs::write(devices.join(path).join("partition"), "1\n").unwrap();
            }
            let name = path.rsplit('/').next().unwrap();
            std::os::unix::fs::symlink(devices.join(path), class.join(name)).unwrap();
        }
        let got = partitions_by_disk(&class);
        let d = |s: &str| s.parse::<DevId>().unwrap();
        let mut sda = got[&d("8:0")].clone();
        sda.sort();
        assert_eq!(sda, vec![d("8:1"), d("8:2")]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(partitions_by_disk(&dir.path().join("absent")).is_empty());
    }

    /// A disk's flushes are waited on by its partitions' filesystems and
    /// by btrfs's anonymous device mounted from one of them.
    #[test]
    fn the_devices_on_a_disk_include_its_filesystems() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = dir.path().join("mountinfo");
        std::fs::write(
            &info,
            "36 35 8:1 / / rw - ext4 /dev/sda1 rw\n\
             40 36 0:52 / /mnt/b rw - btrfs /dev/sda2 rw\n\
             41 36 0:53 / /mnt/c rw - btrfs /dev/loop3 rw\n",
        )
        .unwrap();
        let d = |s: &str| s.parse::<DevId>().unwrap();
        let mut names = FsNames {
            file: std::fs::File::open(&info).ok(),
            partitions: HashMap::from([(d("8:0"), vec![d("8:1"), d("8:2")])]),
            block_devs: HashMap::from([
                ("sda1".to_string(), d("8:1")),
                ("sda2".to_string(), d("8:2")),
                ("loop3".to_string(), d("7:3")),
            ]),
            ..FsNames::default()
        };
        let mut on = names.devices_on(d("8:0"));
        on.sort();
        assert_eq!(on, vec![d("0:52"), d("8:0"), d("8:1"), d("8:2")]);
        assert_eq!(names.devices_on(d("7:3")), vec![d("7:3"), d("0:53")]);
        assert_eq!(names.name(d("0:52")), "btrfs");
        // The ledger's map: each filesystem onto its whole disk, a
        // partition's and btrfs's anonymous device alike; no I/O for a
        // block device's disk.
        let disks = names.disks();
        assert_eq!(disks.get(&d("8:1")), Some(&d("8:0")));
        assert_eq!(disks.get(&d("0:52")), Some(&d("8:0")));
        assert_eq!(disks.get(&d("0:53")), Some(&d("7:3")));
        assert_eq!(names.whole_disk(d("8:2")), d("8:0"));
        assert_eq!(names.whole_disk(d("7:3")), d("7:3"));
    }

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
        // The unmount is seen too, once the name is no longer fresh: the
        // table is read again only when it changed.
        std::thread::sleep(FRESH * 2);
        assert_eq!(names.name(dev), "", "an unmounted filesystem still named");
        assert!(!names.name(root).is_empty());
    }
}
