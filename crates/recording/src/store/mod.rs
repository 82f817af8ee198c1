//! A store: `wbscope record --store DIR`, a directory of segment files
//! that a recorder can run in for ever within bounds (`writer`), read back
//! for any window of time (`reader`) and summed up (`info`).
//!
//! A segment is a recording of format version 2 (`super::block`): the
//! header, with `segment` set, then one compressed block per interval.
//! Its name is the UTC wall-clock time it was opened,
//! `YYYYMMDDTHHMMSS.nnnnnnnnnZ.wbseg`, so that names sort by time and a
//! moment is found from the directory listing alone: the segment that
//! holds time `t` is the last one opened at or before it. `.lock` in the
//! directory is held with flock(2) by the recorder writing the store, and
//! holds its pid.
pub mod info;
pub mod reader;
pub mod seek;
pub mod writer;

use std::{
    fs::{self, File},
    io,
    path::{Path, PathBuf},
};

pub(crate) const SUFFIX: &str = ".wbseg";
pub(crate) const LOCK_FILE: &str = ".lock";

/// A segment's file name for a segment opened at `unix_ns`.
pub(crate) fn segment_name(unix_ns: u64) -> String {
    let secs = (unix_ns / 1_000_000_000) as i64;
    let nanos = unix_ns % 1_000_000_000;
    match jiff::Timestamp::from_second(secs) {
        Ok(ts) => {
            let dt = ts.to_zoned_datetime(jiff::tz::TimeZone::UTC).datetime();
            format!(
                "{:04}{:02}{:02}T{:02}{:02}{:02}.{nanos:09}Z{SUFFIX}",
                dt.year(),
                dt.month(),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second()
            )
        }
        // Beyond jiff's range (year 9999): still unique and sorted.
        Err(_) => format!("{unix_ns:020}{SUFFIX}"),
    }
}

/// When the segment of this file name was opened, or `None` for a file
/// that is not a segment.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(SUFFIX)?;
    if let Some(ns) = stem.strip_suffix('Z').and_then(|s| {
        let (date, frac) = s.split_once('.')?;
        let nanos: u64 = (frac.len() == 9 && frac.bytes().all(|b| b.is_ascii_digit()))
            .then(|| frac.parse().ok())??;
        let dt = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%S", date).ok()?;
        let ts = dt
            .to_zoned_datetime(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp();
        u64::try_from(ts.as_second())
            .ok()?
            .checked_mul(1_000_000_000)?
            .checked_add(nanos)
    }) {
        return Some(ns);
    }
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// A segment file of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    pub(crate) path: PathBuf,
    /// When it was opened (from its name), ns since the epoch.
    pub(crate) start_unix_ns: u64,
    /// Its length in bytes.
    pub(crate) bytes: u64,
}

impl SegmentFile {
    pub(crate) fn name(&self) -> String {
        self.file_name().to_string_lossy().into_owned()
    }

    /// Its name in the store's directory, as the bytes the *at calls take.
    pub(crate) fn file_name(&self) -> &std::ffi::OsStr {
        self.path.file_name().unwrap_or_default()
    }
}

/// The segments in `dir`, oldest first; other files are left alone.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(start) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        let meta = entry.metadata()?;
        if !meta.is_file() {
            continue;
        }
        out.push(SegmentFile {
            path: entry.path(),
            start_unix_ns: start,
            bytes: meta.len(),
        });
    }
    out.sort_by_key(|s| s.start_unix_ns);
    Ok(out)
}

/// The store's lock, held while the recorder runs (released by the kernel
/// when the process ends, however it ends).
#[derive(Debug)]
pub(crate) struct StoreLock {
    file: File,
}

impl StoreLock {
    /// Takes the lock of the store in `dir`, or says who holds it.
    pub(crate) fn acquire(dir: &Path) -> anyhow::Result<StoreLock> {
        match wbscope_sys::lock::lock_exclusive(&dir.join(LOCK_FILE))? {
            Ok(file) => Ok(StoreLock { file }),
            Err(pid) => anyhow::bail!(
                "{}: another wbscope record is writing this store (pid {pid})",
                dir.display()
            ),
        }
    }

    /// The lock file, open (for giving it to the drop user).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_time_and_parse_back() {
        let a = 1_764_640_200_123_456_789u64;
        let name = segment_name(a);
        assert_eq!(name, "20251202T015000.123456789Z.wbseg");
        assert_eq!(parse_segment_name(&name), Some(a));
        assert!(segment_name(a) < segment_name(a + 1));
        assert!(segment_name(a + 1_000_000_000) > segment_name(a + 999_999_999));
        for bad in [
            "x.wbseg",
            "20251202T015000.123Z.wbseg",
            "20251202T015000.123456789Z",
            ".lock",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = StoreLock::acquire(dir.path()).unwrap();
        let err = StoreLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("another wbscope record is writing this store")
                && err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        StoreLock::acquire(dir.path()).unwrap();
    }
}
