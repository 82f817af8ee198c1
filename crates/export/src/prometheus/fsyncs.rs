//! Each fsync's parts as histograms (`--enable durability`):
//! `wbscope_fsync_seconds{dev, part}`, one observation per fsync and part
//! (`total`, `writeback`, `wait`, `journal`, `flush`, `other`; docs/
//! trace-json.md `sync`), and `wbscope_fsyncs_entangled_total{dev}`.
//! Devices are the label values: a host's filesystems, a bounded set.
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::{Registry, Unit},
};

use super::log2::{HistFamily, request_latency};
use wbscope_model::durability::SyncRecord;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartLabels {
    pub(crate) dev: String,
    pub(crate) part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DevLabels {
    pub(crate) dev: String,
}

#[derive(Clone)]
pub(crate) struct FsyncMetrics {
    seconds: HistFamily<PartLabels>,
    entangled: Family<DevLabels, Counter>,
}

impl FsyncMetrics {
    pub(crate) fn new() -> FsyncMetrics {
        FsyncMetrics {
            // The request latency's buckets: about 1 µs to 17 s.
            seconds: Family::new_with_constructor(request_latency),
            entangled: Family::default(),
        }
    }

    pub(crate) fn register(&self, r: &mut Registry) {
        r.register_with_unit(
            "fsync",
            "ext4 fsyncs (--enable durability), whole (part=\"total\") and by part: writeback, wait, journal, flush, other",
            Unit::Seconds,
            self.seconds.clone(),
        );
        r.register(
            "fsyncs_entangled",
            "Small fsyncs that waited mostly on a journal commit carrying another process's data",
            self.entangled.clone(),
        );
    }

    pub(crate) fn observe(&self, s: &SyncRecord) {
        let dev = s.dev.to_string();
        let parts = [
            ("total", Some(s.total_ns)),
            ("writeback", Some(s.writeback_ns)),
            ("wait", Some(s.wait_ns)),
            ("journal", Some(s.journal_ns)),
            ("flush", s.flush_ns),
            ("other", Some(s.other_ns)),
        ];
        for (part, ns) in parts {
            if let Some(ns) = ns {
                self.seconds
                    .get_or_create(&PartLabels {
                        dev: dev.clone(),
                        part,
                    })
                    .observe(ns);
            }
        }
        let counter = self.entangled.get_or_create(&DevLabels { dev });
        if s.entangled_with().is_some() {
            counter.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::{
        DevId,
        durability::{CommitRecord, Contributor},
    };

    fn fsync(journal_ns: u64, flush_ns: Option<u64>, other_pages: u64) -> SyncRecord {
        SyncRecord {
            pid: 5,
            tid: 5,
            comm: "etcd".into(),
            cgroup_id: 1,
            dev: DevId { major: 7, minor: 0 },
            ino: 12,
            fs: "ext4".into(),
            kind: "fsync",
            ret: 0,
            start_ns: 0,
            total_ns: journal_ns + 1000,
            writeback_ns: 1000,
            wait_ns: 0,
            journal_ns,
            flush_ns,
            other_ns: 0,
            measured: Vec::new(),
            pages: 1,
            calls: 1,
            call_times_ns: Vec::new(),
            commit: Some(CommitRecord {
                transaction: 9,
                start_ns: 0,
                end_ns: 0,
                locked_ns: None,
                flushing_ns: None,
                logging_ns: None,
                handles: None,
                blocks: None,
                blocks_logged: None,
                contributors: vec![Contributor {
                    pid: 812,
                    comm: "dd".into(),
                    handles: 1,
                    blocks: 1,
                    pages: other_pages,
                }],
            }),
        }
    }

    #[test]
    fn each_part_is_observed_and_entangled_fsyncs_counted() {
        let m = FsyncMetrics::new();
        let mut r = Registry::with_prefix("wbscope");
        m.register(&mut r);
        m.observe(&fsync(40_000_000, Some(0), 9000));
        m.observe(&fsync(40_000_000, None, 0));
        let text = super::super::web::encode(&r).unwrap();
        for (part, n) in [("total", 2), ("journal", 2), ("writeback", 2), ("flush", 1)] {
            let line = format!(r#"wbscope_fsync_seconds_count{{dev="7:0",part="{part}"}} {n}"#);
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(
            text.contains(r#"wbscope_fsyncs_entangled_total{dev="7:0"} 1"#),
            "{text}"
        );
    }
}
