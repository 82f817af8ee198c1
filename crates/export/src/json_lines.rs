//! `wbscope trace --json`: one JSON object per line. The schema is
//! documented in docs/trace-json.md; every line has a `"type"`.
use std::io;

use serde::Serialize;

use wbscope_model::{
    CallRecord, DevId, ScanFigures, boundary_name, cause_name, sync_mode_name, wb_reason_name,
};

/// `{"type":"sync", ...}`: one fsync, split (`--enable durability`).
#[derive(Debug, Serialize)]
pub struct SyncLine<'a> {
    pub(crate) r#type: &'static str,
    #[serde(flatten)]
    pub(crate) sync: &'a wbscope_model::durability::SyncRecord,
}

impl<'a> From<&'a wbscope_model::durability::SyncRecord> for SyncLine<'a> {
    fn from(sync: &'a wbscope_model::durability::SyncRecord) -> SyncLine<'a> {
        SyncLine {
            r#type: "sync",
            sync,
        }
    }
}

/// `{"type":"write", ...}`: one slow write system call, split
/// (`--enable writes`).
#[derive(Debug, Serialize)]
pub struct WriteLine<'a> {
    pub(crate) r#type: &'static str,
    #[serde(flatten)]
    pub(crate) write: &'a wbscope_model::writes::SlowWrite,
}

impl<'a> From<&'a wbscope_model::writes::SlowWrite> for WriteLine<'a> {
    fn from(write: &'a wbscope_model::writes::SlowWrite) -> WriteLine<'a> {
        WriteLine {
            r#type: "write",
            write,
        }
    }
}

/// `{"type":"call", ...}`: one writepages call.
#[derive(Debug, Serialize)]
pub struct CallLine<'a> {
    pub(crate) r#type: &'static str,
    /// CLOCK_MONOTONIC ns at the start of the call (0 if the start was not
    /// seen).
    pub(crate) time_ns: u64,
    pub(crate) dev: DevId,
    pub(crate) ino: u64,
    /// Process (thread group) id.
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) comm: &'a str,
    pub(crate) nr_to_write: i64,
    pub(crate) pages_written: i64,
    pub(crate) pages_skipped: i64,
    pub(crate) sync_mode: &'static str,
    pub(crate) for_kupdate: bool,
    pub(crate) range_cyclic: bool,
    pub(crate) range_start: i64,
    pub(crate) range_end: i64,
    pub(crate) writeback_index_before: u64,
    pub(crate) writeback_index_after: u64,
    pub(crate) ret: i32,
    pub(crate) duration_ns: u64,
    pub(crate) start_seen: bool,
    /// Time on CPU inside the call (null when not tracked).
    pub(crate) on_cpu_ns: Option<u64>,
    pub(crate) cgroup_id: u64,
    /// sync, periodic, background, flusher_other, direct, unknown.
    pub(crate) cause: &'static str,
    /// `enum wb_reason` of the flusher work the call ran under, if any.
    pub(crate) work_reason: Option<&'static str>,
    /// Scan figures (null when the scan hooks did not fire).
    pub(crate) scan: Option<ScanFigures>,
    /// Pages examined per page written, from `scan.bytes`.
    pub(crate) pages_scanned_per_page_written: Option<f64>,
    pub(crate) extents: u32,
    pub(crate) extent_blocks: u64,
    pub(crate) folios_written: u32,
    pub(crate) bios: u32,
    pub(crate) bio_bytes: u64,
    /// Filesystem type (`ext4`, `xfs`, `btrfs`...; "" when unknown).
    pub(crate) fs: &'a str,
    /// How the end of the call was found: `hook` (the call's own end
    /// hook) or a derived boundary (docs/probes.md).
    pub(crate) boundary: &'static str,
    /// Folios by size in pages (`{"1": 2040, "16": 3}`), where the hooks
    /// see each folio's size; null otherwise.
    pub(crate) folio_pages: Option<std::collections::BTreeMap<u64, u32>>,
    /// Whose pages the call wrote, largest first, capped with one
    /// `(others)` entry; `(unknown)` for pages no seen dirtying accounts
    /// for (model/dirtier.rs). Empty without the dirtier hook.
    pub(crate) dirtiers: &'a [wbscope_model::dirtier::Dirtier],
    /// The cgroup the kernel charges the inode's writeback to (null
    /// without cgroup writeback).
    pub(crate) owner_cgroup_id: Option<u64>,
}

impl<'a> From<&'a CallRecord> for CallLine<'a> {
    fn from(c: &'a CallRecord) -> Self {
        CallLine {
            r#type: "call",
            time_ns: c.start_ns,
            dev: c.dev,
            ino: c.ino,
            pid: c.tgid,
            tid: c.tid,
            comm: &c.comm,
            nr_to_write: c.nr_to_write,
            pages_written: c.pages_written,
            pages_skipped: c.pages_skipped,
            sync_mode: sync_mode_name(c.sync_mode),
            for_kupdate: c.for_kupdate,
            range_cyclic: c.range_cyclic,
            range_start: c.range_start,
            range_end: c.range_end,
            writeback_index_before: c.writeback_index_before,
            writeback_index_after: c.writeback_index_after,
            ret: c.ret,
            duration_ns: c.duration_ns,
            start_seen: c.start_seen,
            on_cpu_ns: c.on_cpu_ns,
            cgroup_id: c.cgroup_id,
            cause: cause_name(c.cause),
            work_reason: wb_reason_name(c.work_reason),
            scan: c.scan,
            pages_scanned_per_page_written: c.scan.and_then(|s| {
                (c.pages_written > 0).then(|| {
                    s.bytes as f64
                        / wbscope_model::units::page_size() as f64
                        / c.pages_written as f64
                })
            }),
            extents: c.extents,
            extent_blocks: c.extent_blocks,
            folios_written: c.folios_written,
            bios: c.bios,
            bio_bytes: c.bio_bytes,
            fs: &c.fs,
            boundary: boundary_name(c.boundary),
            folio_pages: (!c.folio_hist.is_empty()).then(|| {
                c.folio_hist
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n != 0)
                    .map(|(k, n)| (writeback_common::log2_bucket_bounds(k as u32).0, *n))
                    .collect()
            }),
            dirtiers: &c.dirtiers,
            owner_cgroup_id: c.owner_cgroup_id,
        }
    }
}

/// A member's key as the bytes that go before its value: `,"name":`
/// (the first member's without the comma: [`Members::first`]).
macro_rules! key {
    ($name:ident) => {
        concat!(",\"", stringify!($name), "\":")
    };
}

/// The members of one JSON object, written straight into a line's
/// buffer: each key and the punctuation around it as one constant (keys
/// are field names, which need no escape), integers by itoa, strings and
/// nested values through serde_json with the terminal-safe escapes
/// ([`wbscope_sys::escape::write_json_value`]).
struct Members<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> Members<'o> {
    /// Opens an object whose first member is `first` (`key!(name)`).
    #[inline(always)]
    fn first(out: &'o mut Vec<u8>, first: &'static str) -> Members<'o> {
        out.push(b'{');
        out.extend_from_slice(&first.as_bytes()[1..]);
        Members { out }
    }

    #[inline(always)]
    fn key(&mut self, key: &'static str) {
        self.out.extend_from_slice(key.as_bytes());
    }

    #[inline(always)]
    fn int<I: itoa::Integer>(&mut self, key: &'static str, v: I) {
        self.key(key);
        self.raw_int(v);
    }

    #[inline(always)]
    fn raw_int<I: itoa::Integer>(&mut self, v: I) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    #[inline(always)]
    fn opt_int<I: itoa::Integer>(&mut self, key: &'static str, v: Option<I>) {
        self.key(key);
        match v {
            Some(v) => self.raw_int(v),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    #[inline(always)]
    fn bool(&mut self, key: &'static str, v: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
    }

    /// A string: as it is when every byte is printable ASCII other than
    /// `"` and `\` (a process name, a filesystem type, the names of
    /// modes and causes: what JSON and the terminal escapes would leave
    /// alone), else through serde_json.
    #[inline(always)]
    fn str(&mut self, key: &'static str, v: &str) -> io::Result<()> {
        self.key(key);
        self.raw_str(v)
    }

    #[inline(always)]
    fn raw_str(&mut self, v: &str) -> io::Result<()> {
        if v.bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            self.out.push(b'"');
            self.out.extend_from_slice(v.as_bytes());
            self.out.push(b'"');
            Ok(())
        } else {
            wbscope_sys::escape::write_json_value(self.out, v)
        }
    }

    #[inline(always)]
    fn opt_str(&mut self, key: &'static str, v: Option<&str>) -> io::Result<()> {
        self.key(key);
        match v {
            Some(v) => self.raw_str(v),
            None => {
                self.out.extend_from_slice(b"null");
                Ok(())
            }
        }
    }

    #[inline(always)]
    fn value<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> io::Result<()> {
        self.key(key);
        wbscope_sys::escape::write_json_value(self.out, v)
    }

    #[inline(always)]
    fn close(self) {
        self.out.push(b'}');
    }
}

impl CallLine<'_> {
    /// Appends the line, and its end, to `out`: the bytes
    /// [`wbscope_sys::escape::write_json_line`] writes from the derived
    /// `Serialize` (`hand_written_call_lines_are_serde_s`), at a fraction
    /// of the cost. Under an fsync storm `trace --json --events` writes
    /// one per writepages call, 10,000 a second, and serde's path (two
    /// scans and four writes per key, 36 keys) was half of the process's
    /// time per call (docs/bench-log/fsync-storm.md).
    pub fn write_line(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let mut m = Members::first(out, key!(type));
        m.raw_str(self.r#type)?;
        m.int(key!(time_ns), self.time_ns);
        m.key(key!(dev));
        m.out.push(b'"');
        m.raw_int(self.dev.major);
        m.out.push(b':');
        m.raw_int(self.dev.minor);
        m.out.push(b'"');
        m.int(key!(ino), self.ino);
        m.int(key!(pid), self.pid);
        m.int(key!(tid), self.tid);
        m.str(key!(comm), self.comm)?;
        m.int(key!(nr_to_write), self.nr_to_write);
        m.int(key!(pages_written), self.pages_written);
        m.int(key!(pages_skipped), self.pages_skipped);
        m.str(key!(sync_mode), self.sync_mode)?;
        m.bool(key!(for_kupdate), self.for_kupdate);
        m.bool(key!(range_cyclic), self.range_cyclic);
        m.int(key!(range_start), self.range_start);
        m.int(key!(range_end), self.range_end);
        m.int(key!(writeback_index_before), self.writeback_index_before);
        m.int(key!(writeback_index_after), self.writeback_index_after);
        m.int(key!(ret), self.ret);
        m.int(key!(duration_ns), self.duration_ns);
        m.bool(key!(start_seen), self.start_seen);
        m.opt_int(key!(on_cpu_ns), self.on_cpu_ns);
        m.int(key!(cgroup_id), self.cgroup_id);
        m.str(key!(cause), self.cause)?;
        m.opt_str(key!(work_reason), self.work_reason)?;
        match &self.scan {
            Some(s) => {
                m.key(key!(scan));
                let mut scan = Members::first(m.out, key!(iterations));
                scan.raw_int(s.iterations);
                scan.int(key!(bytes), s.bytes);
                scan.int(key!(first_pos), s.first_pos);
                scan.int(key!(last_pos), s.last_pos);
                scan.close();
            }
            None => m.value(key!(scan), &None::<()>)?,
        }
        m.value(
            key!(pages_scanned_per_page_written),
            &self.pages_scanned_per_page_written,
        )?;
        m.int(key!(extents), self.extents);
        m.int(key!(extent_blocks), self.extent_blocks);
        m.int(key!(folios_written), self.folios_written);
        m.int(key!(bios), self.bios);
        m.int(key!(bio_bytes), self.bio_bytes);
        m.str(key!(fs), self.fs)?;
        m.str(key!(boundary), self.boundary)?;
        m.value(key!(folio_pages), &self.folio_pages)?;
        m.key(key!(dirtiers));
        m.out.push(b'[');
        for (i, d) in self.dirtiers.iter().enumerate() {
            if i > 0 {
                m.out.push(b',');
            }
            let mut one = Members::first(m.out, key!(pid));
            one.raw_int(d.pid);
            one.str(key!(comm), &d.comm)?;
            one.int(key!(cgroup_id), d.cgroup_id);
            one.int(key!(pages), d.pages);
            one.close();
        }
        m.out.push(b']');
        m.opt_int(key!(owner_cgroup_id), self.owner_cgroup_id);
        m.close();
        out.push(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::ScanFigures;
    use wbscope_model::plan::ProbeState;
    use wbscope_model::{
        Totals,
        kernel::{KernelStats, ProgramRunTime},
        plan::ProbeStatus,
        summary::SummaryLine,
    };

    #[test]
    fn call_line_schema() {
        let rec = CallRecord {
            dev: DevId::from_kernel((7 << 20) | 2),
            ino: 12,
            tgid: 100,
            tid: 101,
            comm: "dd".into(),
            start_ns: 5,
            duration_ns: 9,
            nr_to_write: i64::MAX,
            pages_written: 16384,
            sync_mode: 1,
            range_end: i64::MAX,
            start_seen: true,
            cgroup_id: 1,
            cause: writeback_common::cause::SYNC,
            on_cpu_ns: Some(5),
            bios: 3,
            bio_bytes: 1 << 20,
            ..CallRecord::default()
        };
        let v: serde_json::Value = serde_json::to_value(CallLine::from(&rec)).unwrap();
        assert_eq!(v["type"], "call");
        assert_eq!(v["dev"], "7:2");
        assert_eq!(v["pid"], 100);
        assert_eq!(v["sync_mode"], "all");
        assert_eq!(v["nr_to_write"], i64::MAX);
        assert_eq!(v["pages_written"], 16384);
        assert_eq!(v["cause"], "sync");
        assert_eq!(v["work_reason"], serde_json::Value::Null);
        assert_eq!(v["scan"], serde_json::Value::Null);
        assert_eq!(v["bios"], 3);
        for key in [
            "ino",
            "comm",
            "pages_skipped",
            "ret",
            "duration_ns",
            "on_cpu_ns",
        ] {
            assert!(v.get(key).is_some(), "{key} missing");
        }
        assert_eq!(v["fs"], "");
        assert_eq!(v["boundary"], "hook");
        assert_eq!(v["folio_pages"], serde_json::Value::Null);
    }

    /// A call of another filesystem: its type, how its end was found, and
    /// its folios by size in pages.
    #[test]
    fn generic_call_line_names_fs_boundary_and_folio_sizes() {
        let rec = CallRecord {
            fs: "xfs".into(),
            boundary: writeback_common::boundary::NEXT_CALL,
            // 3 folios of 1 page, 4 of 512 pages (bucket 10).
            folio_hist: vec![0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 4],
            ..CallRecord::default()
        };
        let v: serde_json::Value = serde_json::to_value(CallLine::from(&rec)).unwrap();
        assert_eq!(v["fs"], "xfs");
        assert_eq!(v["boundary"], "next_call");
        assert_eq!(v["folio_pages"], serde_json::json!({"1": 3, "512": 4}));
    }

    /// The hand-written call line is serde's, byte for byte, whatever
    /// the record holds: every optional member both ways, extremes, and
    /// names a process chose (quotes, controls, C1, bidi marks).
    #[test]
    fn hand_written_call_lines_are_serde_s() {
        let odd = "a\"b\\c\n\u{1b}[2J\u{7f}\u{9b}31m\u{202e}é\u{1F600}";
        let full = CallRecord {
            dev: DevId::from_kernel((259 << 20) | 1_048_575),
            ino: u64::MAX,
            tgid: u32::MAX,
            tid: 7,
            comm: odd.into(),
            start_ns: 123_456_789,
            duration_ns: 42,
            nr_to_write: i64::MIN,
            pages_written: -3,
            pages_skipped: 9,
            sync_mode: 0,
            ret: -5,
            range_start: -1,
            range_end: i64::MAX,
            writeback_index_before: 1,
            writeback_index_after: u64::MAX,
            for_kupdate: true,
            range_cyclic: true,
            start_seen: false,
            cgroup_id: 99,
            cause: writeback_common::cause::BACKGROUND,
            work_reason: 2,
            on_cpu_ns: None,
            scan: Some(ScanFigures {
                iterations: 3,
                bytes: 12_288,
                first_pos: -4096,
                last_pos: 8192,
            }),
            extents: 2,
            extent_blocks: 17,
            folios_written: 5,
            bios: 1,
            bio_bytes: 4096,
            fs: "xfs\u{1b}".into(),
            folio_hist: vec![0, 3, 0, 1],
            dirtiers: vec![
                wbscope_model::dirtier::Dirtier {
                    pid: 1,
                    comm: odd.into(),
                    cgroup_id: 2,
                    pages: 3,
                },
                wbscope_model::dirtier::Dirtier {
                    pid: 0,
                    comm: "(others)".into(),
                    cgroup_id: 0,
                    pages: u64::MAX,
                },
            ]
            .into(),
            owner_cgroup_id: Some(5),
            ..CallRecord::default()
        };
        let mut records = vec![CallRecord::default(), full.clone()];
        for pages_written in [1, 3, 7] {
            // 3 pages scanned per page written, then 1, then 3/7.
            records.push(CallRecord {
                pages_written,
                scan: Some(ScanFigures {
                    bytes: 3 * 4096,
                    ..full.scan.unwrap()
                }),
                on_cpu_ns: Some(pages_written as u64),
                comm: "python3".into(),
                ..CallRecord::default()
            });
        }
        for rec in &records {
            let line = CallLine::from(rec);
            let mut serde = Vec::new();
            wbscope_sys::escape::write_json_line(&mut serde, &line).unwrap();
            let mut hand = b"kept ".to_vec();
            line.write_line(&mut hand).unwrap();
            assert_eq!(
                String::from_utf8(hand).unwrap(),
                format!("kept {}", String::from_utf8(serde).unwrap())
            );
        }
    }

    #[test]
    fn summary_line_schema() {
        let probes = [ProbeStatus {
            concept: "writepages_call",
            hook: None,
            state: ProbeState::Unavailable("not present".into()),
        }];
        let totals = Totals {
            calls: 3,
            pages_written: 30,
            nr_to_write: 90,
        };
        let kernel = KernelStats {
            lost_records: 1,
            ..Default::default()
        };
        let runs = [
            ProgramRunTime {
                program: "writepages_end".into(),
                run_count: 4,
                run_time_ns: 1000,
                recursion_misses: 0,
            },
            ProgramRunTime {
                program: "tp_btf_folios_start".into(),
                run_count: 9,
                run_time_ns: 900,
                recursion_misses: 2,
            },
        ];
        let line = SummaryLine::new(1.5, &totals, &kernel, 0, &probes, &runs);
        let v: serde_json::Value = serde_json::to_value(line).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["calls"], 3);
        assert_eq!(v["pages_written"], 30);
        assert_eq!(v["lost_records"], 1);
        assert_eq!(v["probes"][0]["state"], "unavailable");
        assert_eq!(v["probes"][0]["reason"], "not present");
        assert_eq!(v["probes"][0]["concept"], "writepages_call");
        assert_eq!(v["run_time"][0]["avg_ns"], 250.0);
        // Skipped runs only where there were some.
        assert!(v["run_time"][0].get("recursion_misses").is_none(), "{v}");
        assert_eq!(v["run_time"][1]["recursion_misses"], 2);
    }

    /// Every field a summary line prints is in docs/trace-json.md's
    /// summary table (`calls_not_written` was once printed but not
    /// documented).
    #[test]
    fn every_summary_field_is_documented() {
        let doc = include_str!("../../../docs/trace-json.md");
        let section = doc
            .split("## `{\"type\":\"summary\"}`")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("a summary section in docs/trace-json.md");
        let line = SummaryLine::new(
            1.0,
            &Totals::default(),
            &KernelStats::default(),
            0,
            &[],
            &[],
        );
        let v = serde_json::to_value(line).unwrap();
        for key in v.as_object().unwrap().keys().filter(|k| *k != "type") {
            assert!(
                section.contains(&format!("`{key}`")),
                "summary field `{key}` is not documented in docs/trace-json.md"
            );
        }
    }
}
