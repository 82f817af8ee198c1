//! Turns `--device/--pid/--cgroup/--inode` into the kernel's [`Filter`],
//! refusing what cannot match with a usage error (exit code 2).
use std::{os::unix::fs::MetadataExt, path::Path};

use writeback_common::Filter;

use crate::{UsageError, cli::FilterArgs, model::DevId};

pub fn resolve(args: &FilterArgs) -> Result<Filter, UsageError> {
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
        if !meta.is_dir() || !path.join("cgroup.procs").exists() {
            return Err(UsageError(format!(
                "--cgroup {}: not a cgroup v2 directory (no cgroup.procs)",
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
        if meta.file_type().is_block_device() {
            DevId::from_user(meta.rdev())
        } else {
            DevId::from_user(meta.dev())
        }
    };
    Ok((dev.major << 20) | dev.minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs() {
        assert_eq!(device("8:16").unwrap(), (8 << 20) | 16);
        assert!(device("8:99999999").is_err());
        let err = device("/no/such/path").unwrap_err();
        assert!(err.0.contains("/no/such/path"), "{err}");
        // A path on a filesystem names that filesystem's device.
        let meta = std::fs::metadata("/").unwrap();
        let root = DevId::from_user(meta.dev());
        assert_eq!(device("/").unwrap(), (root.major << 20) | root.minor);
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
