//! A candidate whose tracepoint this kernel lacks is refused with its
//! reason, the next candidate takes over, and with no candidate left the
//! tracer keeps running with the other concepts; a candidate that waits
//! for `--enable` gives way to the next until asked for (root, real
//! kernel).

use std::{fs::File, io::Write, os::unix::fs::MetadataExt, time::Duration};

use crate::support::{LoopFs, Tracing};
use serde_json::Value;
use wbscope_model::plan::{Concept, HookKind};
use wbscope_model::{CallRecord, DevId};
use wbscope_tracer::plan::{Candidate, TracepointAttach, WRITEPAGES_TP, candidates};
use wbscope_tracer::ring::RingCollector;
use wbscope_tracer::{Tracer, TracerOptions};

/// The writepages candidate with its start event renamed to one no
/// kernel has.
fn broken_writepages() -> Candidate {
    let mut tps: Vec<TracepointAttach> = WRITEPAGES_TP.to_vec();
    tps[0].event = "ext4_writepages_not_on_this_kernel";
    Candidate::Tracepoints(Box::leak(tps.into_boxed_slice()))
}

fn write_and_fsync(fs: &LoopFs, mib: usize) -> (DevId, u64) {
    let mut f = File::create_new(fs.path("data")).unwrap();
    f.write_all(&vec![7u8; mib << 20]).unwrap();
    f.sync_all().unwrap();
    let meta = f.metadata().unwrap();
    (DevId::from_user(meta.dev()), meta.ino())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_tracepoint_falls_back_to_the_next_candidate() {
    let _file = crate::support::file_group(module_path!());
    let mut tracer = Tracer::attach_with(&TracerOptions::default(), |c| match c {
        Concept::WritepagesCall => vec![broken_writepages(), Candidate::Tracepoints(WRITEPAGES_TP)],
        other => candidates(other),
    })
    .expect("attach");
    let plan = tracer
        .plan
        .concept(Concept::WritepagesCall)
        .unwrap()
        .clone();
    assert_eq!(plan.kind, Some(HookKind::Tracepoint));
    assert_eq!(
        plan.hook,
        Some(Candidate::Tracepoints(WRITEPAGES_TP).label())
    );
    assert_eq!(plan.rejected.len(), 1, "{plan:?}");
    assert!(
        plan.rejected[0]
            .reason
            .contains("ext4_writepages_not_on_this_kernel")
            && plan.rejected[0].reason.contains("not present"),
        "{plan:?}"
    );

    // And the fallback measures: 4 MiB fsynced is 1024 pages.
    let mut collector = RingCollector::new(&mut tracer).unwrap();
    let fs = LoopFs::new("ext4", 128);
    let (dev, ino) = tokio::task::spawn_blocking(move || {
        let r = write_and_fsync(&fs, 4);
        (r, fs)
    })
    .await
    .map(|(r, _fs)| r)
    .unwrap();
    let mut mine: Vec<CallRecord> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while mine.iter().map(|c| c.pages_written).sum::<i64>() < 1024 {
        let drained = tokio::time::timeout_at(
            deadline,
            collector.wait_and_drain(|r| {
                let Some(c) = r.into_call() else { return };
                if c.dev == dev && c.ino == ino {
                    mine.push(c);
                }
            }),
        )
        .await;
        assert!(drained.is_ok(), "timed out; calls so far: {mine:?}");
    }
    assert_eq!(mine.iter().map(|c| c.pages_written).sum::<i64>(), 1024);
}

#[test]
fn no_candidate_left_keeps_the_other_concepts() {
    let _file = crate::support::file_group(module_path!());
    let tracer = Tracer::attach_with(&TracerOptions::default(), |c| match c {
        Concept::WritepagesCall => vec![broken_writepages()],
        other => candidates(other),
    })
    .expect("attach");
    let plan = tracer.plan.concept(Concept::WritepagesCall).unwrap();
    assert_eq!(plan.hook, None);
    assert!(plan.rejected[0].reason.contains("not present"), "{plan:?}");
    assert!(tracer.plan.attached(Concept::Scan));
    assert!(tracer.plan.attached(Concept::DeviceIo));
    assert!(tracer.any_attached());
    let status = tracer
        .plan
        .statuses()
        .into_iter()
        .find(|s| s.concept == "writepages_call")
        .unwrap();
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["state"], "unavailable");
    // The tracer still reads its maps.
    assert_eq!(tracer.stats().unwrap().lost_records, 0);
}

/// `global_dirty_state` waits for `--enable`. By default the
/// dirty state is /proc/vmstat's, no program of wbscope runs on the event
/// (which every read of /proc/vmstat fires: the tracer's own, at each
/// interval) and the lines' `tracepoint` levels are null. Enabled, its
/// program runs at least once per interval, and the thresholds it kept
/// are those of the tracer's own read of /proc/vmstat in the same line
/// (one `global_dirty_limits()` call computes both; another process's
/// read or a dirtier's check between the two may move them a little).
#[test]
fn global_dirty_state_waits_for_enable() {
    let _file = crate::support::file_group(module_path!());
    for enabled in [false, true] {
        let mut args = vec!["--json", "--interval", "0.2"];
        if enabled {
            args.extend(["--enable", "global_dirty_state"]);
        }
        let trace = Tracing::start(&args);
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let lines = trace.stop(libc::SIGINT);
        let summary = lines
            .iter()
            .find(|l| l["type"] == "summary")
            .expect("summary line");
        let probe = summary["probes"]
            .as_array()
            .expect("probes")
            .iter()
            .find(|p| p["concept"] == "dirty_state")
            .expect("dirty_state probe")
            .clone();
        let intervals: Vec<&Value> = lines.iter().filter(|l| l["type"] == "interval").collect();
        assert!(intervals.len() >= 3, "{lines:?}");
        let runs: u64 = intervals
            .iter()
            .flat_map(|l| l["run_time"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["program"] == "global_dirty")
            .map(|r| r["run_count"].as_u64().unwrap_or(0))
            .sum();
        if !enabled {
            assert_eq!(probe["hook"], "/proc/vmstat", "{probe}");
            assert_eq!(runs, 0, "{lines:?}");
            assert!(
                intervals.iter().all(|l| l["dirty"]["tracepoint"].is_null()),
                "{intervals:?}"
            );
            continue;
        }
        assert_eq!(
            probe["hook"], "tracepoint writeback:global_dirty_state",
            "{probe}"
        );
        assert!(runs >= intervals.len() as u64, "{runs} runs: {intervals:?}");
        for l in &intervals {
            let (tp, vm) = (&l["dirty"]["tracepoint"], &l["dirty"]["vmstat"]);
            for (a, b) in [
                ("dirty_thresh", "nr_dirty_threshold"),
                ("background_thresh", "nr_dirty_background_threshold"),
            ] {
                let (a, b) = (tp[a].as_u64().unwrap(), vm[b].as_u64().unwrap());
                assert!(b > 0 && a.abs_diff(b) <= b / 100, "{tp} vs {vm}");
            }
        }
    }
}
