//! `wbscope trace --json`: one JSON object per line. The schema is
//! documented in docs/trace-json.md; every line has a `"type"`.
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

#[cfg(test)]
mod tests {
    use super::*;
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
