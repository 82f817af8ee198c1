//! Dirty and Writeback page-cache levels from /proc/meminfo (proc(5)).
use std::fs;

/// The two lines we watch, in KiB as /proc/meminfo prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirtyLevels {
    /// `Dirty:` memory waiting to be written back.
    pub dirty_kib: u64,
    /// `Writeback:` memory being written back right now.
    pub writeback_kib: u64,
}

/// Parses /proc/meminfo text. Missing lines read as 0.
pub fn parse_meminfo(text: &str) -> DirtyLevels {
    let mut out = DirtyLevels::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let value = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match key {
            "Dirty" => out.dirty_kib = value,
            "Writeback" => out.writeback_kib = value,
            _ => {}
        }
    }
    out
}

/// `MemAvailable:` of /proc/meminfo text, in KiB: the kernel's estimate of
/// the memory available for new allocations without swapping (proc(5),
/// Linux 3.14+). `None` when the line is missing or unreadable.
pub(crate) fn mem_available_kib(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Reads /proc/meminfo; `None` if it cannot be read (not Linux, no /proc).
pub fn sample() -> Option<DirtyLevels> {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .map(|t| parse_meminfo(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_two_lines_not_their_lookalikes() {
        let text = "MemTotal:       24684336 kB\n\
                    Dirty:             12345 kB\n\
                    Writeback:           678 kB\n\
                    WritebackTmp:        999 kB\n\
                    NFS_Unstable:          0 kB\n";
        assert_eq!(
            parse_meminfo(text),
            DirtyLevels {
                dirty_kib: 12345,
                writeback_kib: 678
            }
        );
        assert_eq!(parse_meminfo("garbage"), DirtyLevels::default());
    }

    #[test]
    fn mem_available_is_its_own_line() {
        let text = "MemFree:        1000 kB\nMemAvailable:   23502 kB\n";
        assert_eq!(mem_available_kib(text), Some(23502));
        assert_eq!(mem_available_kib("MemFree: 1000 kB\n"), None);
        assert_eq!(mem_available_kib("MemAvailable: lots\n"), None);
    }

    #[test]
    fn the_real_file_parses() {
        assert!(sample().is_some());
    }
}
