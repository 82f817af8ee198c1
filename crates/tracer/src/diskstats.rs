//! `/proc/diskstats`, the devices' default source (`plan::DISKSTATS`):
//! request counts and means per whole disk at no BPF cost.

use std::{
    collections::HashSet,
    fs::File,
    io::{BufReader, Seek as _},
    path::Path,
};

use anyhow::Context as _;

use wbscope_model::{DevId, kernel::DiskCounters};

/// `/proc/diskstats` held open, like `/proc/vmstat` (`maps::VmStatFile`):
/// a seq_file rendered afresh at every read from offset 0, so the reads
/// go on after the privileges are dropped, with no open(2).
pub(crate) struct DiskStatsFile {
    file: File,
    /// Partitions at open: their requests are their disk's too, and the
    /// block tracepoints name the disk (`disk_devt(rq->q->disk)`).
    /// A partition made later counts as a disk of its own.
    partitions: HashSet<String>,
}

impl DiskStatsFile {
    const PATH: &str = "/proc/diskstats";

    pub(crate) fn open() -> anyhow::Result<DiskStatsFile> {
        let file = File::open(Self::PATH).with_context(|| format!("opening {}", Self::PATH))?;
        Ok(DiskStatsFile {
            file,
            partitions: partitions(Path::new("/sys/class/block")),
        })
    }

    /// Every whole disk's counters now.
    pub(crate) fn read(&self) -> anyhow::Result<Vec<DiskCounters>> {
        let mut file = &self.file;
        file.rewind()
            .with_context(|| format!("rewinding {}", Self::PATH))?;
        let procfs::DiskStats(disks) = procfs::FromBufRead::from_buf_read(BufReader::new(file))
            .with_context(|| format!("reading {}", Self::PATH))?;
        Ok(disks
            .into_iter()
            .filter(|d| !self.partitions.contains(&d.name))
            .map(|d| counters(&d))
            .collect())
    }
}

fn counters(d: &procfs::DiskStat) -> DiskCounters {
    DiskCounters {
        dev: DevId {
            major: d.major.max(0) as u32,
            minor: d.minor.max(0) as u32,
        },
        requests: d.reads + d.writes + d.discards.unwrap_or(0) + d.flushes.unwrap_or(0),
        sectors: d.sectors_read + d.sectors_written + d.sectors_discarded.unwrap_or(0),
        ticks_ms: d.time_reading
            + d.time_writing
            + d.time_discarding.unwrap_or(0)
            + d.time_flushing.unwrap_or(0),
        weighted_ms: d.weighted_time_in_progress,
        sectors_written: d.sectors_written,
        flushes: d.flushes.unwrap_or(0),
        flush_ms: d.time_flushing.unwrap_or(0),
    }
}

/// Names of the block devices under `class` (`/sys/class/block`) that
/// are partitions (they have a `partition` attribute, block/partitions/
/// core.c); empty where sysfs is unreadable, and every device then
/// counts as a disk.
fn partitions(class: &Path) -> HashSet<String> {
    let Ok(entries) = std::fs::read_dir(class) else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().join("partition").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_diskstats_becomes_the_disks_counters() {
        // Kernel 5.5+ layout: 20 fields (iostats.rst).
        let line = "   8       0 sda 100 5 800 40 200 7 1600 90 0 120 150 3 0 24 6 2 1";
        let d = procfs::DiskStat::from_line(line).expect("parses");
        let c = counters(&d);
        assert_eq!(c.dev.to_string(), "8:0");
        assert_eq!(c.requests, 100 + 200 + 3 + 2);
        assert_eq!(c.sectors, 800 + 1600 + 24);
        assert_eq!(c.ticks_ms, 40 + 90 + 6 + 1);
        assert_eq!(c.weighted_ms, 150);
        assert_eq!((c.flushes, c.flush_ms), (2, 1));
    }

    #[test]
    fn partitions_are_those_with_a_partition_attribute() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, part) in [("sda", false), ("sda1", true), ("loop0", false)] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
            if part {
                std::fs::write(dir.path().join(name).join("partition"), "1\n").expect("write");
            }
        }
        let p = partitions(dir.path());
        assert_eq!(p, HashSet::from(["sda1".to_string()]));
        assert!(partitions(&dir.path().join("absent")).is_empty());
    }

    #[test]
    fn this_hosts_diskstats_read_and_list_no_partition() {
        let f = DiskStatsFile::open().expect("open");
        let disks = f.read().expect("read");
        let again = f.read().expect("read again from the held file");
        assert_eq!(disks.len(), again.len());
        for d in &disks {
            let name = format!("/sys/dev/block/{}/partition", d.dev);
            assert!(!Path::new(&name).exists(), "{name}");
        }
    }
}
