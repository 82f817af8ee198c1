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
}

impl FsNames {
    /// The type of the filesystem on `dev`, or "" when nothing mounted
    /// has it (unmounted before the record was read).
    pub(crate) fn name(&mut self, dev: DevId) -> &str {
        let age = self.read_at.map(|t| t.elapsed());
        let stale = age.is_none_or(|a| a > FRESH);
        let retry = !self.known.contains_key(&dev) && age.is_none_or(|a| a > RETRY);
        if stale || retry {
            self.read_at = Some(Instant::now());
            self.known.clear();
            if let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") {
                self.known.extend(parse_mountinfo(&text));
            }
        }
        self.known.get(&dev).map_or("", String::as_str)
    }
}

/// `(device, fstype)` of each line of a mountinfo file (proc(5): field 3
/// is `major:minor`, the type follows the ` - ` separator).
fn parse_mountinfo(text: &str) -> Vec<(DevId, String)> {
    text.lines()
        .filter_map(|line| {
            let dev = line.split(' ').nth(2)?.parse::<DevId>().ok()?;
            let (_, tail) = line.split_once(" - ")?;
            let fs = tail.split(' ').next()?;
            Some((dev, fs.to_string()))
        })
        .collect()
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

    /// The root filesystem of this machine is found under its `st_dev`.
    #[test]
    fn the_root_filesystem_is_named() {
        use std::os::unix::fs::MetadataExt;
        let dev = DevId::from_user(std::fs::metadata("/").unwrap().dev());
        assert!(!FsNames::default().name(dev).is_empty());
    }
}
