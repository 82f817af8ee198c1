//! Turns `--device/--pid/--cgroup/--inode` into the kernel's [`Filter`],
//! refusing what can never match with a usage error (exit code 2): a
//! device number nothing has, a filesystem that never writes back (proc,
//! sysfs, tmpfs, tracefs, ...), a character device, a cgroup v1 directory.
use std::{
    ffi::CString,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt},
    path::Path,
};

use writeback_common::Filter;

use crate::cli::FilterArgs;
use wbscope_model::DevId;
use wbscope_sys::UsageError;

pub(crate) fn resolve(args: &FilterArgs) -> Result<Filter, UsageError> {
    let mut filter = Filter::default();
    if let Some(dev) = &args.device {
        filter.dev = device(dev)?;
    }
    if let Some(pid) = args.pid {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(UsageError(format!("--pid {pid}: no such process")));
        }
        filter.tgid = pid;
    }
    if let Some(path) = &args.cgroup {
        let meta = std::fs::metadata(path)
            .map_err(|e| UsageError(format!("--cgroup {}: {e}", path.display())))?;
        if !meta.is_dir() || !path.join("cgroup.procs").exists() || !is_cgroup2(path) {
            return Err(UsageError(format!(
                "--cgroup {}: not a cgroup v2 directory (the id the programs compare \
                 is a cgroup v2 one; v1 hierarchies such as /sys/fs/cgroup/memory never match)",
                path.display()
            )));
        }
        // A cgroup v2 id is the inode number of its directory in cgroupfs
        // (kernfs_node id; what bpf_get_current_cgroup_id returns).
        filter.cgroup_id = meta.ino();
    }
    if let Some(ino) = args.inode {
        if ino == 0 {
            return Err(UsageError("--inode 0: inode numbers start at 1".into()));
        }
        filter.ino = ino;
    }
    Ok(filter)
}

/// `MAJ:MIN`, a block device node, or any path (its filesystem's device),
/// in the kernel's internal `dev_t` encoding (major << 20 | minor).
fn device(spec: &str) -> Result<u32, UsageError> {
    let dev = if let Some((maj, min)) = spec.split_once(':')
        && let (Ok(major), Ok(minor)) = (maj.parse::<u32>(), min.parse::<u32>())
    {
        if major >= 1 << 12 || minor >= 1 << 20 {
            return Err(UsageError(format!("--device {spec}: out of range")));
        }
        DevId { major, minor }
    } else {
        let meta =
            std::fs::metadata(spec).map_err(|e| UsageError(format!("--device {spec}: {e}")))?;
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if kind.is_block_device() {
            DevId::from_user(meta.rdev())
        } else if kind.is_char_device() || kind.is_fifo() || kind.is_socket() {
            return Err(UsageError(format!(
                "--device {spec}: not a block device or a path on a filesystem"
            )));
        } else {
            // The superblock's device, which the records carry (on btrfs
            // not the subvolume's that stat(2) gives).
            wbscope_tracer::mounts::devices_of(Path::new(spec))
                .ok()
                .and_then(|d| d.first().copied())
                .unwrap_or_else(|| DevId::from_user(meta.dev()))
        }
    };
    check_writes_back(spec, dev, &mountinfo())?;
    Ok((dev.major << 20) | dev.minor)
}

/// Filesystems without a backing device: their pages are never written
/// back (proc, sysfs and the like have no page cache of their own; tmpfs
/// and ramfs pages go to swap through reclaim, not writeback).
const NO_WRITEBACK: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "efivarfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "proc",
    "pstore",
    "ramfs",
    "securityfs",
    "sysfs",
    "tmpfs",
    "tracefs",
];

/// `(device, filesystem type)` of every mount.
fn mountinfo() -> Vec<(DevId, String)> {
    wbscope_tracer::mounts::mounts()
        .into_iter()
        .map(|m| (m.dev, m.fstype))
        .collect()
}

/// A device can match when it is a block device, or a mounted filesystem
/// that writes back (btrfs and other filesystems name an anonymous device
/// number, 0:N, that is only in mountinfo).
fn check_writes_back(spec: &str, dev: DevId, mounts: &[(DevId, String)]) -> Result<(), UsageError> {
    let types: Vec<&str> = mounts
        .iter()
        .filter(|(d, _)| *d == dev)
        .map(|(_, t)| t.as_str())
        .collect();
    if let Some(fs) = types.iter().find(|t| NO_WRITEBACK.contains(t))
        && !types.iter().any(|t| !NO_WRITEBACK.contains(t))
    {
        return Err(UsageError(format!(
            "--device {spec}: {dev} is a {fs} filesystem, which never writes pages back"
        )));
    }
    if types.is_empty() && !Path::new(&format!("/sys/dev/block/{dev}")).exists() {
        return Err(UsageError(format!(
            "--device {spec}: no block device or mounted filesystem is {dev}"
        )));
    }
    Ok(())
}

/// True when `path` is on the cgroup v2 filesystem (statfs(2) f_type
/// CGROUP2_SUPER_MAGIC, include/uapi/linux/magic.h).
fn is_cgroup2(path: &Path) -> bool {
    const CGROUP2_SUPER_MAGIC: libc::c_long = 0x6367_7270;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed statfs is a valid out-parameter; `c` is a valid C
    // string for the duration of the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as libc::c_long == CGROUP2_SUPER_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs() {
        assert!(device("8:99999999").unwrap_err().0.contains("out of range"));
        let err = device("/no/such/path").unwrap_err();
        assert!(err.0.contains("/no/such/path"), "{err}");
        // A path on a filesystem names that filesystem's device.
        let meta = std::fs::metadata("/").unwrap();
        let root = DevId::from_user(meta.dev());
        assert_eq!(device("/").unwrap(), (root.major << 20) | root.minor);
        // And MAJ:MIN of a mounted filesystem names the same device.
        assert_eq!(
            device(&root.to_string()).unwrap(),
            (root.major << 20) | root.minor
        );
    }

    /// Targets that can never see writeback are refused with the reason
    /// (`--device 999:999`, `/dev/null`, `/proc`, tracefs and a cgroup v1
    /// directory were once accepted and matched nothing).
    #[test]
    fn targets_that_never_write_back_are_refused() {
        let err = |spec: &str| device(spec).unwrap_err().0;
        assert!(err("999:999").contains("no block device or mounted filesystem"));
        assert!(err("/dev/null").contains("not a block device"));
        assert!(err("/proc").contains("proc filesystem"), "{}", err("/proc"));
        assert!(err("/sys").contains("sysfs filesystem"));
        // The decision itself, on a made-up mount table: a tracefs-only
        // device is refused, an ext4 one (or one shared with ext4) is not.
        let d = |minor| DevId { major: 0, minor };
        let mounts = vec![
            (d(12), "tracefs".to_string()),
            (d(40), "ext4".to_string()),
            (d(41), "tmpfs".to_string()),
            (d(41), "ext4".to_string()),
        ];
        assert!(
            check_writes_back("t", d(12), &mounts)
                .unwrap_err()
                .0
                .contains("tracefs")
        );
        assert!(check_writes_back("e", d(40), &mounts).is_ok());
        assert!(check_writes_back("m", d(41), &mounts).is_ok());
        assert!(check_writes_back("n", d(99), &mounts).is_err());
    }

    #[test]
    fn cgroup_v1_directories_are_refused() {
        assert!(!is_cgroup2(Path::new("/proc")));
        // This host mounts v1 hierarchies beside a controller-less v2 one
        // at /sys/fs/cgroup/unified; whichever exists is checked.
        for v1 in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"] {
            if Path::new(v1).join("cgroup.procs").exists() {
                let e = resolve(&FilterArgs {
                    cgroup: Some(v1.into()),
                    ..Default::default()
                })
                .unwrap_err();
                assert!(e.0.contains("not a cgroup v2 directory"), "{e}");
            }
        }
        for v2 in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
            if is_cgroup2(Path::new(v2)) {
                let f = resolve(&FilterArgs {
                    cgroup: Some(v2.into()),
                    ..Default::default()
                })
                .unwrap();
                assert_ne!(f.cgroup_id, 0);
            }
        }
    }

    #[test]
    fn pid_cgroup_inode() {
        let me = std::process::id();
        let f = resolve(&FilterArgs {
            pid: Some(me),
            inode: Some(12),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((f.tgid, f.ino), (me, 12));
        assert!(
            resolve(&FilterArgs {
                pid: Some(u32::MAX - 1),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            resolve(&FilterArgs {
                cgroup: Some("/no/such/cgroup".into()),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            resolve(&FilterArgs {
                inode: Some(0),
                ..Default::default()
            })
            .is_err()
        );
    }
}
