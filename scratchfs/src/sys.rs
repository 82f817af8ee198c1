//! What /proc and /sys say about processes, mounts and loop devices.
use std::{
    ffi::CString,
    fs,
    os::unix::{ffi::OsStrExt as _, fs::FileTypeExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

/// Who a process is, as far as a later process can check.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) boot_id: Option<String>,
    pub(crate) pidns: Option<String>,
}

impl Identity {
    pub(crate) fn current() -> anyhow::Result<Identity> {
        let pid = std::process::id();
        Ok(Identity {
            pid,
            start: start_time(pid).context("reading this process's start time")?,
            boot_id: boot_id(),
            pidns: pidns(),
        })
    }
}

/// starttime (field 22) of /proc/PID/stat, proc(5); None when there is no
/// such process. The fields are counted after the last `)`: the command
/// name before it may hold spaces and parentheses.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so starttime is the 20th.
    after.split_whitespace().nth(19)?.parse().ok()
}

pub(crate) fn boot_id() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

pub(crate) fn pidns() -> Option<String> {
    fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.display().to_string())
}

/// `statfs(2)`'s f_type.
pub(crate) fn statfs_type(path: &Path) -> anyhow::Result<i64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", path.display()))?;
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid out pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", path.display()));
    }
    Ok(st.f_type as i64)
}

/// One line of /proc/self/mountinfo (proc(5)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The filesystem's device number (major, minor).
    pub dev: (u32, u32),
    pub mountpoint: PathBuf,
    pub fstype: String,
    /// What was mounted: a device path, or a name (`proc`, `tmpfs`).
    pub source: String,
}

impl MountEntry {
    /// Whether the filesystem sits on a block device: its device number
    /// names one (/sys/dev/block/MAJ:MIN), or (btrfs: an anonymous device
    /// number) what was mounted is a block device.
    pub fn on_block_device(&self) -> bool {
        let (major, minor) = self.dev;
        (major != 0 && Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists())
            || fs::metadata(&self.source).is_ok_and(|m| m.file_type().is_block_device())
    }
}

/// Mount points in mountinfo escape space, tab, newline and backslash as
/// octal (`\040`).
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let (major, minor) = f.get(2)?.split_once(':')?;
            let mut r = right.split(' ');
            Some(MountEntry {
                dev: (major.parse().ok()?, minor.parse().ok()?),
                mountpoint: unescape(f.get(4)?),
                fstype: r.next()?.to_string(),
                source: unescape(r.next()?).display().to_string(),
            })
        })
        .collect()
}

pub(crate) fn mountinfo() -> Vec<MountEntry> {
    fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// Mount points at or under `dir`, deepest (and last mounted) first.
pub(crate) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = mountinfo()
        .into_iter()
        .map(|m| m.mountpoint)
        .filter(|p| p.starts_with(dir))
        .collect();
    v.reverse();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v
}

/// The mount `path` is on: the last-mounted entry whose mount point is
/// the longest prefix of its canonical path.
pub fn mount_of(path: &Path) -> anyhow::Result<MountEntry> {
    let canon = fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let mut best: Option<MountEntry> = None;
    for m in mountinfo() {
        let longer = best
            .as_ref()
            .is_none_or(|b| m.mountpoint.components().count() >= b.mountpoint.components().count());
        if canon.starts_with(&m.mountpoint) && longer {
            best = Some(m);
        }
    }
    match best {
        Some(m) => Ok(m),
        None => bail!("no mount in /proc/self/mountinfo holds {}", canon.display()),
    }
}

/// Bound loop devices: (`/dev/loopN`, backing file). The kernel appends
/// ` (deleted)` to a backing file that was unlinked (d_path).
pub(crate) fn loops() -> Vec<(PathBuf, PathBuf)> {
    let Ok(rd) = fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut v: Vec<(PathBuf, PathBuf)> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            if !name.as_bytes().starts_with(b"loop") {
                return None;
            }
            let backing = fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            let backing = backing.trim_end_matches('\n');
            let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
            Some((Path::new("/dev").join(name), PathBuf::from(backing)))
        })
        .collect();
    v.sort();
    v
}

/// Whether loop `device` is bound to `image` and has a size (sectors in
/// /sys/block/loopN/size).
pub(crate) fn bound_to(device: &Path, image: &Path) -> bool {
    let Some(name) = device.file_name() else {
        return false;
    };
    let sectors = fs::read_to_string(Path::new("/sys/block").join(name).join("size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    sectors > 0 && loops_backed_by(image).iter().any(|d| d == device)
}

/// Loop devices bound to `image`.
pub(crate) fn loops_backed_by(image: &Path) -> Vec<PathBuf> {
    loops()
        .into_iter()
        .filter(|(_, b)| b == image)
        .map(|(d, _)| d)
        .collect()
}

/// Whether the loop device `/dev/loopN` is bound at all.
pub(crate) fn loop_bound(dev: (u32, u32)) -> bool {
    Path::new(&format!("/sys/dev/block/{}:{}/loop", dev.0, dev.1)).exists()
}

/// btrfs registers its own bdi (`btrfs-N`), found from the filesystem's
/// sysfs directory: /sys/fs/btrfs/FSID/devices/loopN and .../FSID/bdi.
pub(crate) fn btrfs_bdi(device: &Path) -> anyhow::Result<PathBuf> {
    let name = device.file_name().context("device without a name")?;
    for e in fs::read_dir("/sys/fs/btrfs").context("reading /sys/fs/btrfs")? {
        let dir = e.context("reading /sys/fs/btrfs")?.path();
        if dir.join("devices").join(name).exists() {
            let target = fs::read_link(dir.join("bdi"))
                .with_context(|| format!("reading {}/bdi", dir.display()))?;
            let bdi = target.file_name().context("bdi link without a name")?;
            return Ok(Path::new("/sys/class/bdi").join(bdi));
        }
    }
    bail!("no btrfs in /sys/fs/btrfs on {}", device.display())
}

/// Bytes the files under `dir` take on disk (sparse images: what was
/// written, not their size).
pub(crate) fn allocated(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => allocated(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_escapes_and_optional_fields() {
        let text = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
90 27 7:3 / /var/tmp/wbscope-scratch-1-2-x/my\\040mnt rw - xfs /dev/loop3 rw
bad line
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].fstype, "proc");
        assert_eq!(m[0].source, "proc");
        assert_eq!(m[1].dev, (254, 0));
        assert_eq!(m[1].mountpoint, Path::new("/"));
        assert_eq!(
            m[2].mountpoint,
            Path::new("/var/tmp/wbscope-scratch-1-2-x/my mnt")
        );
        assert_eq!((m[2].dev, m[2].source.as_str()), ((7, 3), "/dev/loop3"));
    }

    #[test]
    fn start_time_is_this_process_and_none_for_no_process() {
        let me = start_time(std::process::id()).expect("own stat");
        assert!(me > 0);
        assert_eq!(start_time(std::process::id()), Some(me));
        // pid_max is at most 2^22 (include/linux/threads.h, PID_MAX_LIMIT).
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn proc_is_not_on_a_block_device_and_root_is_found() {
        let proc_ = mount_of(Path::new("/proc/self")).unwrap();
        assert_eq!(proc_.fstype, "proc");
        assert!(!proc_.on_block_device());
        let sys = mount_of(Path::new("/sys/class")).unwrap();
        assert!(!sys.on_block_device(), "{sys:?}");
    }
}
