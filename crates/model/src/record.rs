//! One writepages call as userspace sees it ([`CallRecord`], decoded
//! from the kernel's `WritepagesCall`), the device numbers it names, and
//! running totals over calls.
use std::fmt;

use compact_str::CompactString;
use serde::Serialize;
use writeback_common::{
    FOLIO_HIST_BUCKETS, GenericCall, WritepagesCall, boundary, call_flags, cause,
    generic_flags as gf,
};

/// A block device number as userspace writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevId {
    pub major: u32,
    pub minor: u32,
}

impl DevId {
    /// Decodes the kernel-internal `dev_t` the tracepoints record
    /// (`MAJOR(dev) = dev >> 20`, `MINOR(dev) = dev & ((1 << 20) - 1)`,
    /// include/linux/kdev_t.h), which differs from the userspace encoding
    /// that `stat(2)` returns.
    pub const fn from_kernel(dev: u32) -> DevId {
        DevId {
            major: dev >> 20,
            minor: dev & ((1 << 20) - 1),
        }
    }

    /// From `st_dev` as `stat(2)` returns it (glibc encoding).
    pub fn from_user(dev: u64) -> DevId {
        DevId {
            major: libc::major(dev),
            minor: libc::minor(dev),
        }
    }
}

impl fmt::Display for DevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl Serialize for DevId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for DevId {
    type Err = String;

    /// `major:minor`.
    fn from_str(s: &str) -> Result<DevId, String> {
        let (major, minor) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}` is not major:minor"))?;
        let parse = |v: &str| v.parse::<u32>().map_err(|e| format!("`{s}`: {e}"));
        Ok(DevId {
            major: parse(major)?,
            minor: parse(minor)?,
        })
    }
}

impl<'de> serde::Deserialize<'de> for DevId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DevId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `enum writeback_sync_modes` (include/linux/writeback.h).
pub fn sync_mode_name(mode: u32) -> &'static str {
    match mode {
        0 => "none",
        1 => "all",
        _ => "unknown",
    }
}

/// `writeback_common::cause` in words.
pub fn cause_name(c: u32) -> &'static str {
    match c {
        cause::SYNC => "sync",
        cause::PERIODIC => "periodic",
        cause::BACKGROUND => "background",
        cause::FLUSHER_OTHER => "flusher_other",
        cause::DIRECT => "direct",
        cause::UNCACHED => "uncached",
        _ => "unknown",
    }
}

/// Gives the calls an RWF_DONTCACHE writer's writes kicked their own cause.
///
/// Such a write ends in generic_write_sync() (include/linux/fs.h, 6.14+),
/// which calls filemap_fdatawrite_range_kick() on the bytes just written:
/// WB_SYNC_NONE, `nr_to_write` LONG_MAX, a bounded range, not for_kupdate,
/// not for_background, outside flusher work, in the writing thread (or, for
/// io_uring writes punted to a worker, in an `iou-wrk-*` thread of the same
/// process). The kernel's programs give that cause `direct`, as they give
/// sync_file_range(WRITE) and fadvise(DONTNEED), whose writeback_control is
/// the same. What tells them apart is who made the call: when `tgid` is a
/// process known to write only with RWF_DONTCACHE and no sync_file_range
/// or fadvise (wbscope's own writer running `uncached` or `uring-buffered
/// --uncached`), its `direct` calls are `uncached`.
pub fn mark_uncached(calls: &mut [CallRecord], tgid: u32) {
    for c in calls
        .iter_mut()
        .filter(|c| c.cause == cause::DIRECT && c.tgid == tgid)
    {
        c.cause = cause::UNCACHED;
    }
}

/// `enum wb_reason` (include/linux/backing-dev-defs.h, 6.18 order) in
/// words; records carry it plus one, 0 meaning "no flusher work".
pub fn wb_reason_name(reason_plus_one: u32) -> Option<&'static str> {
    const NAMES: [&str; 8] = [
        "background",
        "vmscan",
        "sync",
        "periodic",
        "laptop_timer",
        "fs_free_space",
        "forker_thread",
        "foreign_flush",
    ];
    let r = reason_plus_one.checked_sub(1)? as usize;
    Some(NAMES.get(r).copied().unwrap_or("other"))
}

/// One writepages call, decoded. Serialised as is into recordings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CallRecord {
    pub dev: DevId,
    pub ino: u64,
    pub tgid: u32,
    pub tid: u32,
    /// Inline: no allocation per call for a name of up to 24 bytes (every
    /// kernel `comm` of ASCII: TASK_COMM_LEN is 16).
    pub comm: CompactString,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub nr_to_write: i64,
    pub pages_written: i64,
    /// Pages skipped during this call (end minus start of the counter).
    pub pages_skipped: i64,
    pub sync_mode: u32,
    pub ret: i32,
    pub range_start: i64,
    pub range_end: i64,
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    pub for_kupdate: bool,
    pub range_cyclic: bool,
    /// False when the start tracepoint was not seen: start-side fields and
    /// the duration are then unknown (zero).
    pub start_seen: bool,
    pub for_background: bool,
    pub cgroup_id: u64,
    /// [`cause_name`] code.
    pub cause: u32,
    /// `enum wb_reason` + 1, 0 when not under flusher work.
    pub work_reason: u32,
    /// On-CPU time inside the call, from the calling thread's scheduler
    /// run time at its start and end (null where the hook cannot read it).
    pub on_cpu_ns: Option<u64>,
    /// Scan figures, when the scan hooks fired during the call.
    pub scan: Option<ScanFigures>,
    pub extents: u32,
    pub extent_blocks: u64,
    pub folios_written: u32,
    pub bios: u32,
    pub bio_bytes: u64,
    /// Whose pages the call wrote, largest first (model/dirtier.rs);
    /// filled in userspace, not by the kernel record. Recordings carry it
    /// in a frame of its own (recording/mod.rs), so the postcard call
    /// frame keeps its layout and old recordings still decode.
    #[serde(skip)]
    pub dirtiers: crate::dirtier::Dirtiers,
    /// The cgroup the kernel charges the inode's writeback to, when
    /// cgroup writeback is on.
    #[serde(skip)]
    pub owner_cgroup_id: Option<u64>,
    /// Filesystem type (`ext4`, `xfs`, `btrfs`...), from the device's
    /// entry in /proc/self/mountinfo (`tracer::mounts`); empty when the
    /// device was not mounted when the record was read.
    ///
    /// This and the next two are skipped by serde so the postcard call
    /// frame keeps its layout; recordings carry them after it
    /// (`recording::CallExt`).
    #[serde(skip)]
    pub fs: CompactString,
    /// [`boundary_name`] code: how the call's end was found. Non-zero
    /// for the tracepoint-derived calls of other filesystems.
    #[serde(skip)]
    pub boundary: u32,
    /// Folios written by log2 of their pages (`writeback_common::log2_bucket`),
    /// where the hooks see each folio's size; empty otherwise.
    #[serde(skip)]
    pub folio_hist: Vec<u32>,
    /// The kernel drew this call into its call sample (the CPU budget's,
    /// `call_flags::SAMPLED`): it stands for 2^k calls, the others only
    /// counted. Not kept in recordings: the interval lines say the rate.
    #[serde(skip)]
    pub sampled: bool,
}

/// `writeback_common::boundary` in words.
pub fn boundary_name(b: u32) -> &'static str {
    match b {
        boundary::HOOK => "hook",
        boundary::PASS_END => "pass_end",
        boundary::NEXT_CALL => "next_call",
        boundary::IDLE => "idle",
        boundary::DRAIN => "drain",
        _ => "unknown",
    }
}

impl CallRecord {
    /// A call of any filesystem, from the function hooks on
    /// `do_writepages` (writeback-ebpf hook.rs: start to end of the call)
    /// or tracepoint-derived (generic.rs), closed by `how`
    /// (`writeback_common::boundary`). Without the start of the real
    /// call, a derived call's duration runs from the first folio to the
    /// pass end, or to the last folio when no pass end closed it.
    pub fn from_generic(g: &GenericCall, how: u32) -> CallRecord {
        let end = if g.end_ns != 0 { g.end_ns } else { g.last_ns };
        let wbc_seen = g.flags & gf::WBC_SEEN != 0;
        let hist_len = g
            .folio_hist
            .iter()
            .rposition(|&n| n != 0)
            .map_or(0, |i| i + 1)
            .min(FOLIO_HIST_BUCKETS);
        CallRecord {
            dev: DevId::from_kernel(g.dev),
            ino: g.ino,
            tgid: g.tgid,
            tid: g.tid,
            comm: compact_comm(&g.comm),
            start_ns: g.start_ns,
            duration_ns: end.saturating_sub(g.start_ns),
            nr_to_write: g.nr_to_write,
            pages_written: i64::try_from(g.pages).unwrap_or(i64::MAX),
            pages_skipped: 0,
            sync_mode: g.sync_mode,
            ret: g.ret,
            range_start: g.range_start,
            range_end: g.range_end,
            writeback_index_before: g.writeback_index_before,
            writeback_index_after: g.writeback_index_after,
            for_kupdate: g.flags & gf::FOR_KUPDATE != 0,
            range_cyclic: g.flags & gf::RANGE_CYCLIC != 0,
            start_seen: wbc_seen,
            for_background: g.flags & gf::FOR_BACKGROUND != 0,
            cgroup_id: g.cgroup_id,
            cause: g.cause,
            work_reason: g.work_reason,
            // Measured where the call closed on its own thread at a known
            // end (function exit, inode pass end): the end is `end_ns`.
            on_cpu_ns: (g.flags & gf::OFF_CPU != 0 && g.end_ns != 0).then(|| {
                g.end_ns
                    .saturating_sub(g.start_ns)
                    .saturating_sub(g.offcpu_ns)
            }),
            scan: None,
            extents: 0,
            extent_blocks: 0,
            folios_written: g.folios,
            bios: 0,
            bio_bytes: 0,
            fs: CompactString::default(),
            boundary: how,
            folio_hist: g.folio_hist[..hist_len].to_vec(),
            dirtiers: Default::default(),
            owner_cgroup_id: None,
            sampled: false,
        }
    }
}

/// What the map-and-submit loop of `ext4_do_writepages()` looked at
/// (ext4_da_write_folios_start/end; see docs/probes.md for what the
/// positions mean).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanFigures {
    pub iterations: u32,
    /// Sum over iterations of `next_pos` at the end minus `start_pos` at
    /// the start: the file range from the writeback cursor to the end of
    /// the last folio locked.
    pub bytes: u64,
    pub first_pos: i64,
    pub last_pos: i64,
}

/// A task's `comm` as the kernel hands it (`bpf_get_current_comm()`:
/// NUL-padded, at most 16 bytes), as text.
pub fn comm(raw: &[u8]) -> String {
    compact_comm(raw).into_string()
}

/// [`comm`] without an allocation (a call record's, one per call).
pub fn compact_comm(raw: &[u8]) -> CompactString {
    let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    // Valid UTF-8 (every name of ASCII) is copied as it is; the lossy
    // conversion, byte by byte, only for the rest.
    match std::str::from_utf8(&raw[..len]) {
        Ok(name) => CompactString::from(name),
        Err(_) => CompactString::from_utf8_lossy(&raw[..len]),
    }
}

impl From<&WritepagesCall> for CallRecord {
    fn from(c: &WritepagesCall) -> Self {
        let start_seen = c.flags & call_flags::START_SEEN != 0;
        CallRecord {
            dev: DevId::from_kernel(c.dev),
            ino: c.ino,
            tgid: c.tgid,
            tid: c.tid,
            comm: compact_comm(&c.comm),
            start_ns: c.start_ns,
            duration_ns: c.duration_ns,
            nr_to_write: c.nr_to_write,
            pages_written: c.pages_written,
            pages_skipped: if start_seen {
                c.pages_skipped_end - c.pages_skipped_start
            } else {
                c.pages_skipped_end
            },
            sync_mode: c.sync_mode,
            ret: c.ret,
            range_start: c.range_start,
            range_end: c.range_end,
            writeback_index_before: c.writeback_index_before,
            writeback_index_after: c.writeback_index_after,
            for_kupdate: c.flags & call_flags::FOR_KUPDATE != 0,
            range_cyclic: c.flags & call_flags::RANGE_CYCLIC != 0,
            start_seen,
            for_background: c.flags & call_flags::FOR_BACKGROUND != 0,
            cgroup_id: c.cgroup_id,
            cause: c.cause,
            work_reason: c.work_reason,
            on_cpu_ns: (start_seen && c.flags & call_flags::CPU_TRACKED != 0)
                .then(|| c.duration_ns.saturating_sub(c.offcpu_ns)),
            scan: (c.flags & call_flags::SCAN_SEEN != 0).then_some(ScanFigures {
                iterations: c.scan_iterations,
                bytes: c.scan_bytes,
                first_pos: c.scan_first_pos,
                last_pos: c.scan_last_pos,
            }),
            extents: c.extents,
            extent_blocks: c.extent_blocks,
            folios_written: c.folios_written,
            bios: c.bios,
            bio_bytes: c.bio_bytes,
            fs: CompactString::default(),
            boundary: boundary::HOOK,
            folio_hist: Vec::new(),
            dirtiers: Default::default(),
            owner_cgroup_id: None,
            sampled: c.flags & call_flags::SAMPLED != 0,
        }
    }
}

/// Running totals of the writepages calls seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub calls: u64,
    pub pages_written: u64,
    pub nr_to_write: u64,
}

impl Totals {
    pub fn add(&mut self, call: &CallRecord) {
        self.calls += 1;
        self.pages_written += call.pages_written.max(0) as u64;
        self.nr_to_write = self
            .nr_to_write
            .saturating_add(call.nr_to_write.max(0) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is the bytes before the first NUL, as UTF-8 with invalid
    /// bytes replaced, whatever the bytes.
    #[test]
    fn compact_names_are_the_names() {
        for raw in [
            &b"python3\0\0\0\0\0\0\0\0\0"[..],
            b"kworker/u8:2+flush-7:0",
            b"caf\xc3\xa9\0x",
            b"bad\xff\xfe name\0",
            b"",
        ] {
            let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            let lossy = String::from_utf8_lossy(&raw[..len]);
            assert_eq!(compact_comm(raw).as_str(), lossy, "{raw:?}");
            assert_eq!(comm(raw), lossy, "{raw:?}");
        }
        assert_eq!(compact_comm(b"bad\xffname"), "bad\u{fffd}name");
    }

    #[test]
    fn only_the_uncached_writers_direct_calls_become_uncached() {
        let call = |tgid, cause| CallRecord {
            tgid,
            cause,
            ..CallRecord::default()
        };
        let mut calls = vec![
            call(10, cause::DIRECT),
            call(10, cause::SYNC),
            call(10, cause::BACKGROUND),
            call(11, cause::DIRECT),
        ];
        mark_uncached(&mut calls, 10);
        let names: Vec<&str> = calls.iter().map(|c| cause_name(c.cause)).collect();
        assert_eq!(names, ["uncached", "sync", "background", "direct"]);
    }

    #[test]
    fn kernel_dev_t_decoding() {
        // 7:3 (loop3) as the kernel stores it: (7 << 20) | 3.
        assert_eq!(DevId::from_kernel((7 << 20) | 3).to_string(), "7:3");
        assert_eq!(DevId::from_kernel((253 << 20) | 0xfffff).minor, 0xfffff);
        assert_eq!(DevId::from_user(libc::makedev(259, 1)).to_string(), "259:1");
    }

    #[test]
    fn a_call_record_decodes_its_raw_fields() {
        let mut comm = [0u8; 16];
        comm[..2].copy_from_slice(b"dd");
        let rec = CallRecord::from(&WritepagesCall {
            dev: (8 << 20) | 1,
            ino: 12,
            nr_to_write: 1024,
            pages_written: 100,
            pages_skipped_start: 3,
            pages_skipped_end: 5,
            flags: call_flags::START_SEEN | call_flags::FOR_KUPDATE,
            comm,
            ..WritepagesCall::default()
        });
        assert_eq!(rec.comm, "dd");
        assert_eq!(rec.dev.to_string(), "8:1");
        assert_eq!(rec.pages_skipped, 2);
        assert!(rec.for_kupdate && !rec.range_cyclic && rec.start_seen);
        let mut totals = Totals::default();
        totals.add(&rec);
        assert_eq!(
            (totals.calls, totals.pages_written, totals.nr_to_write),
            (1, 100, 1024)
        );
    }
}
