//! `wbscope trace --json`: one JSON object per line. The schema is
//! documented in docs/trace-json.md; every line has a `"type"`.
use serde::Serialize;

use crate::{
    loader::{KernelStats, ProbeStatus},
    model::{CallRecord, DevId, Totals, sync_mode_name},
};

/// `{"type":"call", ...}`: one writepages call.
#[derive(Debug, Serialize)]
pub struct CallLine<'a> {
    pub r#type: &'static str,
    /// CLOCK_MONOTONIC ns at the start of the call (0 if the start was not
    /// seen).
    pub time_ns: u64,
    pub dev: DevId,
    pub ino: u64,
    /// Process (thread group) id.
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub nr_to_write: i64,
    pub pages_written: i64,
    pub pages_skipped: i64,
    pub sync_mode: &'static str,
    pub for_kupdate: bool,
    pub range_cyclic: bool,
    pub range_start: i64,
    pub range_end: i64,
    pub writeback_index_before: u64,
    pub writeback_index_after: u64,
    pub ret: i32,
    pub duration_ns: u64,
    pub start_seen: bool,
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
        }
    }
}

/// `{"type":"summary", ...}`: the last line, whatever stopped the trace.
#[derive(Debug, Serialize)]
pub struct SummaryLine<'a> {
    pub r#type: &'static str,
    pub duration_s: f64,
    pub calls: u64,
    pub pages_written: u64,
    pub lost_records: u64,
    pub unmatched_results: u64,
    /// Records the ring buffer delivered that could not be decoded.
    pub bad_records: u64,
    pub probes: &'a [ProbeStatus],
}

impl<'a> SummaryLine<'a> {
    pub fn new(
        duration_s: f64,
        totals: &Totals,
        kernel: &KernelStats,
        bad_records: u64,
        probes: &'a [ProbeStatus],
    ) -> Self {
        SummaryLine {
            r#type: "summary",
            duration_s,
            calls: totals.calls,
            pages_written: totals.pages_written,
            lost_records: kernel.lost_records,
            unmatched_results: kernel.unmatched_results,
            bad_records,
            probes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::ProbeState;

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
            pages_skipped: 0,
            sync_mode: 1,
            ret: 0,
            range_start: 0,
            range_end: i64::MAX,
            writeback_index_before: 0,
            writeback_index_after: 0,
            for_kupdate: false,
            range_cyclic: false,
            start_seen: true,
        };
        let v: serde_json::Value = serde_json::to_value(CallLine::from(&rec)).unwrap();
        assert_eq!(v["type"], "call");
        assert_eq!(v["dev"], "7:2");
        assert_eq!(v["pid"], 100);
        assert_eq!(v["sync_mode"], "all");
        assert_eq!(v["nr_to_write"], i64::MAX);
        assert_eq!(v["pages_written"], 16384);
        for key in ["ino", "comm", "pages_skipped", "ret", "duration_ns"] {
            assert!(v.get(key).is_some(), "{key} missing");
        }
    }

    #[test]
    fn summary_line_schema() {
        let probes = [ProbeStatus {
            hook: "tracepoint ext4:ext4_writepages".into(),
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
        let line = SummaryLine::new(1.5, &totals, &kernel, 0, &probes);
        let v: serde_json::Value = serde_json::to_value(line).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["calls"], 3);
        assert_eq!(v["pages_written"], 30);
        assert_eq!(v["lost_records"], 1);
        assert_eq!(v["probes"][0]["state"], "unavailable");
        assert_eq!(v["probes"][0]["reason"], "not present");
    }
}
