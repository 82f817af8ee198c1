//! The report on fixed inputs: a small synthetic recording and a compare
//! document of four runs (made by [`fixture_frames`] and
//! [`fixture_compare`], committed under tests/fixtures/report/ for the
//! browser test), golden pages, label boxes that never overlap, and an
//! empty panel that says why.
//!
//! `WBSCOPE_UPDATE_GOLDEN=1 cargo test -p writeback-user report::` rewrites
//! the fixtures and golden files; review the diff.
use std::{collections::HashMap, path::PathBuf};

use writeback_common::{BlockHistKey, DevCounterKey, agg, block_hist, cause, inode_pass as ip};

use super::{
    data::{RecordingFacts, RecordingFeed, ReportData, from_json},
    dists::dist_drawn,
    panels::time_drawn,
    *,
};
use wbscope_model::{
    CallRecord, DevId, ScanFigures,
    interval::{CallAggregate, IntervalLine},
    kernel::{KernelSnapshot, VmStat},
};

/// The committed report fixtures: golden pages and `small.rec`, a small
/// recording the tests of the binary read too.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

/// The fixtures' probe plan; the recording's has the write spans too
/// (compare and scenario trace none).
fn plan(writes: bool) -> serde_json::Value {
    let c = |concept: &str, hook: &str, kind: &str| serde_json::json!({"concept": concept, "hook": hook, "kind": kind, "fields": [], "rejected": []});
    let mut plan = serde_json::json!({
        "kernel": "6.18.0-fixture",
        "concepts": [
            c("writepages_call", "tp_btf ext4_writepages + ext4_writepages_result", "tp_btf"),
            c("scan", "tp_btf ext4_da_write_folios_start + ext4_da_write_folios_end", "tp_btf"),
            c("inode_writeback", "tp_btf writeback_single_inode", "tp_btf"),
            c("dirty_state", "tracepoint writeback:global_dirty_state", "tracepoint"),
            c("throttling", "tracepoint writeback:balance_dirty_pages", "tracepoint"),
            c("device_io", "tp_btf block_rq_issue + block_rq_complete", "tp_btf"),
            c("durability", "tracepoint syscalls:sys_enter_fsync + syscalls:sys_exit_fsync", "tracepoint"),
        ]
    });
    if writes && let Some(concepts) = plan["concepts"].as_array_mut() {
        concepts.push(c(
            "writes",
            "tracepoint syscalls:sys_enter_write + syscalls:sys_exit_write",
            "tracepoint",
        ));
    }
    plan
}

const DEV: u32 = (254 << 20) | 1;
const T0: u64 = 1_000_000_000_000;

/// A snapshot of the kernel's counters `i` ticks in: a writer dirtying
/// pages, the flusher writing them back in growing requests, throttling
/// from the fourth tick on.
fn snapshot(i: u64) -> KernelSnapshot {
    let mut s = KernelSnapshot {
        agg: vec![0; agg::COUNT as usize],
        ..Default::default()
    };
    s.agg[agg::THROTTLE_PAUSES as usize] = i.saturating_sub(3) * 2;
    // From the fifth tick, a quarter of the time paused over three lines:
    // the doctor's dirty-throttled (the recording's findings).
    s.agg[agg::THROTTLE_PAUSE_MS as usize] = i.saturating_sub(3) * 250;
    let mut block = HashMap::new();
    block.insert(
        BlockHistKey {
            dev: DEV,
            kind: block_hist::ISSUE_BYTES,
            bucket: 17 + (i % 4) as u16,
        },
        i * 30,
    );
    block.insert(
        BlockHistKey {
            dev: DEV,
            kind: block_hist::LATENCY_NS,
            bucket: 20 + (i % 3) as u16,
        },
        i * 30,
    );
    s.block = block;
    for (index, v) in [
        (ip::ASKED_HIST + 14, i * 2),
        (ip::WROTE_HIST + 13, i * 2),
        (ip::UNBOUNDED_WROTE_HIST + 9, i),
    ] {
        s.inode_pass.insert(DevCounterKey { dev: DEV, index }, v);
    }
    s.vmstat = VmStat {
        nr_dirty: 20_000 + (i % 5) * 15_000,
        nr_writeback: 2_000 + (i % 3) * 4_000,
        nr_written: i * 25_000,
        nr_dirtied: i * 26_000,
        nr_dirty_threshold: 80_000,
        nr_dirty_background_threshold: 40_000,
    };
    s
}

/// What the recording fixture's header says.
pub fn fixture_header() -> RecordingFacts {
    RecordingFacts {
        wbscope_version: "0.1.0".into(),
        host: "fixture".into(),
        kernel: "6.18.0-fixture".into(),
        start_unix_ns: 1_767_225_600_000_000_000,
        start_monotonic_ns: T0,
        probe_plan: plan(true),
        filter: serde_json::json!({"dev": 0, "tgid": 0, "ino": 0, "cgroup_id": 0}),
    }
}

/// The recording fixture's frames: 3 s, an interval line every 0.5 s
/// after 8 calls each.
pub fn fixture_frames() -> Vec<(Vec<CallRecord>, IntervalLine)> {
    let causes = [cause::PERIODIC, cause::BACKGROUND, cause::SYNC];
    (1..=6u64)
        .map(|tick| {
            let calls = (0..8u64)
                .map(|k| {
                    let n = (tick - 1) * 8 + k;
                    let pages = 1i64 << (n % 12);
                    CallRecord {
                        dev: DevId::from_kernel(DEV),
                        ino: 12,
                        comm: "kworker/u8:1".into(),
                        start_ns: T0 + (tick - 1) * 500_000_000 + k * 60_000_000,
                        duration_ns: 2_000_000,
                        nr_to_write: 1024,
                        pages_written: pages,
                        start_seen: true,
                        cause: causes[(n % 3) as usize],
                        scan: Some(ScanFigures {
                            iterations: 1,
                            bytes: pages as u64 * 4096 * 3 / 2,
                            first_pos: 0,
                            last_pos: 0,
                        }),
                        ..CallRecord::default()
                    }
                })
                .collect();
            let mut line = IntervalLine::new(
                tick as f64 * 0.5,
                0.5,
                &CallAggregate::default(),
                &snapshot(tick - 1),
                &snapshot(tick),
            );
            line.owners = fixture_owners(tick);
            line.fsyncs = fixture_fsyncs(tick);
            line.writes = fixture_writes(tick);
            line.ledger = Some(fixture_ledger(&line.owners, tick));
            (calls, line)
        })
        .collect()
}

/// Where the recording fixture's bytes went, interval `tick`: one disk
/// writing 20 MB an interval, 2 MB of it journal, through the model's own
/// arithmetic from two snapshots.
fn fixture_ledger(
    owners: &[wbscope_model::dirtier::OwnerLine],
    tick: u64,
) -> wbscope_model::ledger::LedgerLine {
    use std::collections::{BTreeMap, HashMap};
    use wbscope_model::ledger::{LedgerInputs, LedgerLine};
    let dev = wbscope_model::DevId { major: 8, minor: 0 };
    let snap = |t: u64| KernelSnapshot {
        disks: vec![wbscope_model::kernel::DiskCounters {
            dev,
            sectors_written: t * 40_000,
            ..Default::default()
        }],
        ledger: HashMap::from([(
            dev,
            [
                t * 2_000_000,
                t * 100_000,
                t * 50_000,
                t * 18_330_000,
                0,
                0,
                0,
            ],
        )]),
        ..KernelSnapshot::default()
    };
    LedgerLine::new(
        &LedgerInputs {
            prev: &snap(tick - 1),
            cur: &snap(tick),
            owners,
            handles: None,
            written_on: &BTreeMap::new(),
            page_size: 4096,
            interval_s: 1.0,
            device_io_shed: false,
        },
        &mut Default::default(),
    )
}

/// The recording fixture's fsyncs, interval `tick`: one process syncing
/// ten times a second, slower as it goes, its journal part under half
/// (no finding of its own: the fixture's findings are the throttling's).
fn fixture_fsyncs(tick: u64) -> Vec<wbscope_model::durability::FsyncLine> {
    let ms = 1_000_000;
    vec![wbscope_model::durability::FsyncLine {
        pid: 517,
        comm: "etcd".into(),
        fsyncs: 5,
        p50_ns: 2 * ms * tick,
        p99_ns: 4 * ms * tick,
        max_ns: 4 * ms * tick,
        total_ns: 12 * ms * tick,
        writeback_ns: ms,
        journal_ns: 5 * ms * tick,
        other_ns: 7 * ms * tick - ms,
        pages: 5,
        ..Default::default()
    }]
}

/// The recording fixture's write calls, interval `tick` (0.5 s): dd's
/// hundred 1-MiB writes, paused by its device's limit more each interval
/// from the fourth on (as the kernel's throttling is), and postgres's
/// small ones. Every p99 stays under 10 ms, so that the doctor's
/// write-stalled keeps out of the fixture's findings.
fn fixture_writes(tick: u64) -> Vec<wbscope_model::writes::WriteLine> {
    use wbscope_model::writes::{WriteLine, WriteParts};
    let ms = 1_000_000;
    let throttled = tick.saturating_sub(3);
    let dd = WriteParts {
        throttle_ns: throttled * 80 * ms,
        stable_ns: (2 + throttled) * ms,
        reclaim_ns: if tick >= 5 { 2 * ms } else { 0 },
        blocked_ns: (8 + throttled) * ms,
        other_ns: 30 * ms,
        total_ns: 0,
        ..WriteParts::default()
    };
    let dd = WriteParts {
        total_ns: dd.values().iter().sum(),
        ..dd
    };
    let pg = WriteParts {
        other_ns: 4 * ms,
        blocked_ns: ms,
        total_ns: 5 * ms,
        ..WriteParts::default()
    };
    vec![
        WriteLine {
            pid: 4242,
            comm: "dd".into(),
            writes: 100,
            bytes: 100 << 20,
            p50_ns: ms / 4 + throttled * ms,
            p99_ns: ms + 2 * throttled * ms,
            max_ns: ms * 3 / 2 + 3 * throttled * ms,
            percentiles_of: 100,
            parts: dd,
            pauses: throttled * 20,
            throttled_by: if throttled > 0 {
                vec!["bdi".into()]
            } else {
                Vec::new()
            },
            ..WriteLine::default()
        },
        WriteLine {
            pid: 5151,
            comm: "postgres".into(),
            writes: 50,
            bytes: 50 * 8192,
            p50_ns: ms / 20,
            p99_ns: ms / 4,
            max_ns: ms / 2,
            percentiles_of: 50,
            parts: pg,
            ..WriteLine::default()
        },
    ]
}

/// Who dirtied the recording fixture's pages, interval `tick`: a writer
/// whose pages the flusher writes, one that syncs its own, and the
/// `(others)` row past the cap.
fn fixture_owners(tick: u64) -> Vec<wbscope_model::dirtier::OwnerLine> {
    use wbscope_model::dirtier::{OTHERS, OwnerLine};
    vec![
        OwnerLine {
            pid: 4242,
            comm: "dd".into(),
            cgroup_id: 7001,
            pages_dirtied: 3000 * tick,
            dirtied_unmeasured: false,
            write_call_bytes: None,
            cancelled_bytes: None,
            pages_written: 2000 * tick,
            pages_written_by_others: 1500 * tick,
            pages_written_by_flusher: 1200 * tick,
            throttle_pauses: tick.saturating_sub(4),
            throttle_pause_ms: tick.saturating_sub(4) * 120,
            pages_dirtied_error: None,
        },
        OwnerLine {
            pid: 5151,
            comm: "postgres".into(),
            cgroup_id: 7002,
            pages_dirtied: 500,
            dirtied_unmeasured: false,
            write_call_bytes: None,
            cancelled_bytes: None,
            pages_written: 500,
            ..OwnerLine::default()
        },
        OwnerLine {
            comm: OTHERS.into(),
            pages_dirtied: 10,
            dirtied_unmeasured: false,
            write_call_bytes: None,
            cancelled_bytes: None,
            pages_written: 4,
            ..OwnerLine::default()
        },
    ]
}

/// A finding as a compare document carries it.
fn fixture_finding(name: &str, severity: &str, at: f64) -> serde_json::Value {
    serde_json::json!({
        "name": name, "severity": severity,
        "first_seen_s": at, "last_seen_s": at, "intervals": 1, "episodes": 1,
        "evidence": {"window_s": at, "limit": "global"},
        "advice": format!("what to try for {name}"),
    })
}

/// The compare fixture: four runs under a second, as `compare --json`
/// writes them (the fields the report reads).
pub(crate) fn fixture_compare() -> String {
    use wbscope_model::timeline::{TimeBin, Timeline, WriterChunks};
    let mut runs = Vec::new();
    for (r, (strategy, secs, direct)) in [
        ("buffered", 0.24, false),
        ("fsync-end", 0.42, false),
        ("srf-pipelined", 0.77, false),
        ("direct", 0.19, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut t = Timeline::default();
        let bins = (secs / 0.1_f64).ceil() as usize;
        for i in 0..bins {
            let mut line = IntervalLine::new(
                0.1,
                0.1,
                &CallAggregate::default(),
                &snapshot(i as u64),
                &snapshot(i as u64 + 1),
            );
            line.dirty.vmstat.nr_dirty /= (r + 1) as u64;
            let b: &mut TimeBin = t.at(i as f64 * 0.1 + 0.05);
            b.add_interval(&line, |_| true);
            b.writer_bytes = vec![(30 + 10 * (i as u64 % 3)) << 20];
            if !direct {
                b.add_call(["background", "sync", "periodic"][i % 3], 2048 >> (i % 4));
            }
            // The two strategies that sync: one fsync a bin, slower late.
            if matches!(strategy, "fsync-end" | "srf-pipelined") {
                let ms = 1_000_000 * (2 + i as u64);
                b.add_fsync(ms, ms * 3 / 4);
            }
        }
        t.span_s = secs;
        let calls = if direct { 0 } else { bins as u64 };
        let chunk = wbscope_model::interval::Bucket {
            lo: 8 << 20,
            hi: (16 << 20) - 1,
            count: 16,
        };
        let findings = match strategy {
            "buffered" => vec![fixture_finding("dirty-throttled", "critical", secs)],
            "fsync-end" => vec![fixture_finding("fsync-storm", "warning", secs)],
            _ => vec![],
        };
        runs.push(serde_json::json!({
            "strategy": strategy,
            "repeat": 0,
            "writer": {"o_direct": direct, "elapsed_s": secs},
            "kernel": {
                "window_s": secs,
                "calls": calls,
                "pages_per_call_hist": if direct { serde_json::json!([]) } else {
                    serde_json::json!([{"lo": 256, "hi": 511, "count": 3}, {"lo": 2048, "hi": 4095, "count": calls}])
                },
                "pages_scanned_per_page_written": if direct { None } else { Some(1.0 + r as f64 * 0.5) },
                "inode_pass": {
                    "pages_per_pass": [{"lo": 1024, "hi": 2047, "count": 4}],
                    "pages_asked_per_pass": [{"lo": 8192, "hi": 16383, "count": 4}],
                    "pages_per_unbounded_pass": []
                },
                "findings": findings,
                "timeline": t,
                "writer_chunks": WriterChunks {
                    write_bytes: vec![chunk.clone()],
                    sync_bytes: if strategy == "srf-pipelined" { vec![chunk] } else { vec![] },
                    whole_file_syncs: 1,
                },
            }
        }));
    }
    serde_json::json!({
        "runs": runs,
        "context": {
            "host": "fixture", "kernel": "6.18.0-fixture",
            "command": "wbscope compare --dir /mnt/data --size 128M --report cmp.html",
            "wbscope_version": "0.1.0", "started_unix_s": 1_767_225_600u64,
            "probes": plan(false),
        }
    })
    .to_string()
}

fn update() -> bool {
    std::env::var_os("WBSCOPE_UPDATE_GOLDEN").is_some()
}

/// `bytes` equal the committed file `name` (written when updating).
fn check_file(name: &str, bytes: &[u8]) {
    let path = fixtures().join(name);
    if update() {
        std::fs::create_dir_all(fixtures()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        return;
    }
    let committed = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (WBSCOPE_UPDATE_GOLDEN=1 makes it)", path.display()));
    if committed != bytes {
        let got = path.with_extension("new");
        std::fs::write(&got, bytes).unwrap();
        panic!(
            "{} differs from what the code makes now (written to {}); review and rename",
            path.display(),
            got.display()
        );
    }
}

/// The recording fixture through the feed, as `commands::report` feeds
/// it from the file (its test checks that the file gives this page).
fn recording_data() -> ReportData {
    let mut feed = RecordingFeed::new(fixture_header(), Some(0.5));
    for (calls, line) in fixture_frames() {
        for c in &calls {
            feed.call(c);
        }
        feed.interval(serde_json::to_value(&line).unwrap());
    }
    feed.summary(&serde_json::json!({"duration_s": 3.0}));
    feed.finish("small.rec", Vec::new())
}

fn compare_data() -> ReportData {
    from_json(&fixture_compare(), "compare.json").unwrap()
}

#[test]
fn fixtures_are_what_the_generators_make() {
    // small.rec: commands::report's test (the recording format is not
    // export's to write).
    check_file("compare.json", fixture_compare().as_bytes());
}

#[test]
fn golden_pages_and_figure() {
    check_file("recording.html", html(&recording_data()).as_bytes());
    check_file("compare.html", html(&compare_data()).as_bytes());
    check_file("compare.svg", figure_svg(&compare_data()).as_bytes());
}

#[test]
fn no_label_overlaps_another() {
    for (d, least) in [
        (recording_data(), 15),
        (compare_data(), 15),
        (ReportData::default(), 4),
    ] {
        let time = time_drawn(&d).into_iter().map(|p| (p, least));
        for (p, least) in time.chain(dist_drawn(&d).into_iter().map(|p| (p, 4))) {
            // The canvas refuses a label that would overlap; this checks
            // it did, and that the labels that matter were still drawn:
            // title, unit, ticks, names.
            let b = &p.canvas.boxes;
            assert!(b.len() >= least, "{}: {} labels", p.id, b.len());
            for (i, x) in b.iter().enumerate() {
                assert!(x.x0 >= 0.0 && x.x1 <= p.canvas.width, "{}: {x:?}", p.id);
                assert!(x.y0 >= 0.0 && x.y1 <= p.canvas.height, "{}: {x:?}", p.id);
                for y in &b[i + 1..] {
                    assert!(!x.overlaps(y), "{}: {x:?} overlaps {y:?}", p.id);
                }
            }
        }
    }
    // Every run's name fits above its part of the time axis, and the
    // histogram's bucket labels are there (every one, or every other).
    let c = html_of_compare();
    for name in ["buffered", "fsync-end", "srf-pipelined", "direct"] {
        assert!(c.contains(&format!(">{name}</text>")), "{name}");
    }
    for label in ["256-511", "2K-4K"] {
        assert!(c.contains(&format!(">{label}</text>")), "{label}");
    }
}

#[test]
fn every_time_panel_has_data_in_both_fixtures() {
    for d in [recording_data(), compare_data()] {
        for p in time_drawn(&d) {
            assert!(p.points > 0 && p.empty.is_none(), "{}: {:?}", p.id, p.empty);
        }
    }
    // The recording's bins are its interval lines' (0.5 s), 3 s long.
    let r = recording_data();
    let t = &r.segments[0].timeline;
    assert_eq!((t.bin_s, t.bins.len()), (0.5, 6));
    assert_eq!(t.bins.iter().map(|b| b.calls).sum::<u64>(), 48);
    // The compare runs: 100 ms bins, every run its own segment.
    let c = compare_data();
    assert_eq!(c.segments.len(), 4);
    assert!(c.segments.iter().all(|s| s.timeline.bin_s == 0.1));
}

#[test]
fn an_empty_panel_says_why() {
    let html = html(&ReportData::default());
    let empties = html.matches("data-empty=\"empty: ").count();
    assert_eq!(empties, 1 + 7 + 3, "every panel empty, each with a reason");
    // The O_DIRECT run: no writepages calls, and the page says why.
    let c = html_of_compare();
    assert!(c.contains("direct: no writepages calls: O_DIRECT writes bypass the page cache"));
    // A plan without the throttling hook: the panel names it.
    let mut d = compare_data();
    if let Some(p) = &mut d.plan {
        p.concepts
            .retain(|c| c.concept != wbscope_model::plan::Concept::Throttling);
        p.concepts.push(wbscope_model::plan::ConceptPlan::new(
            wbscope_model::plan::Concept::Throttling,
        ));
    }
    let h = super::html(&d);
    assert!(h.contains("no hook for throttling was attached"), "{h}");
}

fn html_of_compare() -> String {
    html(&compare_data())
}

#[test]
fn the_page_is_self_contained_and_escapes_what_it_shows() {
    let mut d = compare_data();
    d.facts
        .push(("command".into(), "<script>alert(1)</script>".into()));
    d.segments[0].name = "<b>&".into();
    let h = html(&d);
    assert!(!h.contains("<script"), "markup from the input is escaped");
    assert!(h.contains("&lt;b&gt;&amp;"));
    for fetch in ["http://", "https://", "src=", "@import", "url("] {
        let outside_xmlns = h.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(!outside_xmlns.contains(fetch), "{fetch} in the page");
    }
    // Findings and who-dirtied have their places.
    assert!(h.contains("id=\"findings\"") && h.contains("id=\"who-dirtied\""));
}

#[test]
fn findings_are_listed_and_banded_where_they_held() {
    // The recording: its lines judged as `doctor --from` judges them.
    let r = recording_data();
    let f = &r.segments[0].findings;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].name.as_str(), f[0].severity.as_str()),
        ("dirty-throttled", "warning")
    );
    // Held in the last three 0.5 s lines, from 1.5 s to 3.0 s: info in
    // the first (0.05 s/s or more of pause), warning in the last two.
    assert_eq!((f[0].start_s, f[0].last_seen_s), (1.5, 3.0));
    let strip = &time_drawn(&r)[0];
    assert_eq!((strip.id, strip.points), ("findings", 1));
    let h = html(&r);
    assert!(
        h.contains(
            "<td>F1</td><td>dirty-throttled</td><td class=\"sev-warning\">warning</td><td>1.5 to 3 s"
        ),
        "{h}"
    );
    // The band spans 1.5..3.0 s of the 3 s axis.
    let layout = super::layout::x_layout(
        &r.segments,
        super::layout::LEFT,
        super::layout::WIDTH - super::layout::RIGHT,
    );
    let (x0, x1) = layout.spans[0];
    let a = x0 + (x1 - x0) * 1.5 / 3.0;
    assert!(
        h.contains(&format!("<rect x=\"{}\" y=\"65\"", super::svg::n(a))),
        "band at {a}"
    );
    // The compare document: each run's own, its start a line (1 s)
    // before, clamped to the run's start; every run named.
    let c = compare_data();
    assert_eq!(c.segments[1].findings[0].name, "fsync-storm");
    assert_eq!(c.segments[1].findings[0].start_s, 0.0);
    assert!(c.segments.iter().all(|s| s.findings_known));
    let h = html(&c);
    assert!(h.contains("<td>fsync-end</td>") && h.contains("what to try for fsync-storm"));
    assert!(
        h.contains("limit = global; window_s = 0.42"),
        "evidence listed"
    );
    // A document from before doctor says so.
    let mut old = c.clone();
    for s in &mut old.segments {
        s.findings.clear();
        s.findings_known = false;
    }
    assert!(html(&old).contains("written by a wbscope without doctor"));
}

#[test]
fn who_dirtied_lists_the_top_processes_with_who_wrote_their_pages() {
    let h = html(&recording_data());
    // dd over 6 intervals: 3000 × 21 dirtied, 2000 × 21 written, of which
    // 1500 × 21 by others, 1200 × 21 of them by the flusher.
    let dd = "<tr><td>4242</td><td>dd</td><td>7001</td><td>63000</td><td>42000</td><td>10500</td><td>25200</td><td>6300</td><td>3</td><td>360</td></tr>";
    assert!(h.contains(dd), "{h}");
    let pg = "<tr><td>5151</td><td>postgres</td><td>7002</td><td>3000</td><td>3000</td><td>3000</td><td>0</td><td>0</td>";
    assert!(h.contains(pg));
    assert!(h.find(dd) < h.find(pg), "most dirtied first");
    assert!(h.contains("<tr><td>-</td><td>(others)</td><td>-</td><td>60</td><td>24</td>"));
    // More processes than the table holds: the rest summed.
    let mut o = super::who::Owners::default();
    let rows: Vec<_> = (1..=30u32)
        .map(|pid| wbscope_model::dirtier::OwnerLine {
            pid,
            comm: format!("w{pid}"),
            pages_dirtied: u64::from(pid),
            dirtied_unmeasured: false,
            write_call_bytes: None,
            cancelled_bytes: None,
            ..Default::default()
        })
        .collect();
    o.add(&rows);
    let (top, rest) = o.table();
    assert_eq!(top.len(), super::who::TABLE_ROWS);
    assert_eq!(top[0].pid, 30);
    assert_eq!(rest.map(|r| r.dirtied), Some((1..=10).sum()));
    // A compare document has none, and says why.
    assert!(html_of_compare().contains("not in a compare/scenario document"));
}

#[test]
fn greyscale_every_series_in_a_panel_has_its_own_dash_and_marker() {
    use super::svg::STYLES;
    for (i, a) in STYLES.iter().enumerate() {
        for b in &STYLES[i + 1..] {
            assert!(a.dash != b.dash && a.marker != b.marker);
        }
    }
}

/// The write spans' panels (`--enable writes`).
const WRITE_PANELS: [&str; 2] = ["writes", "write-latency"];

#[test]
fn write_calls_are_stacked_by_part_where_the_input_traced_them() {
    // The recording: both write panels, with data, every note drawn.
    let r = recording_data();
    let drawn = time_drawn(&r);
    for id in WRITE_PANELS {
        let p = drawn.iter().find(|p| p.id == id).expect(id);
        assert!(p.points > 0 && p.empty.is_none(), "{id}: {:?}", p.empty);
    }
    let h = html(&r);
    assert!(!h.contains("id=\"writes-missing\""), "shown, not missing");
    for note in [
        "each line tops its part: the highest is all the write time",
        "throttle: balance_dirty_pages pauses;",
        "log scale; p99: the largest of the processes",
    ] {
        assert!(h.contains(note), "{note}");
    }
    // The last 0.5 s bin: dd's 288 ms (240 of them throttled) and
    // postgres's 5 ms; the p99 is dd's 7 ms, the largest of the two.
    let w = &r.segments[0].writes;
    assert_eq!(w.len(), r.segments[0].timeline.bins.len());
    let ms = 1_000_000;
    let last = w.last().expect("a bin");
    assert_eq!(last.writes, 150);
    assert_eq!(last.parts.total_ns, 293 * ms);
    assert_eq!(last.parts.throttle_ns, 240 * ms);
    assert_eq!(last.p99_ns, 7 * ms);
    assert_eq!(w[0].parts.throttle_ns, 0);

    // A compare document traces none: no panels, a sentence instead.
    let c = compare_data();
    assert!(time_drawn(&c).iter().all(|p| !WRITE_PANELS.contains(&p.id)));
    assert!(html(&c).contains(
        "<p class=\"muted\" id=\"writes-missing\">Write calls: compare and scenario trace none."
    ));

    // A recording without them: the same, with how to record them.
    let mut quiet = r.clone();
    quiet.segments[0].writes.clear();
    if let Some(p) = &mut quiet.plan {
        p.concepts
            .retain(|c| c.concept != wbscope_model::plan::Concept::Writes);
    }
    assert!(
        time_drawn(&quiet)
            .iter()
            .all(|p| !WRITE_PANELS.contains(&p.id))
    );
    assert!(html(&quiet).contains("`wbscope record --enable writes` splits each buffered write"));

    // Traced, and no write in it: the panels say so.
    let mut idle = r.clone();
    idle.segments[0].writes.clear();
    let empties: Vec<Option<String>> = time_drawn(&idle)
        .into_iter()
        .filter(|p| WRITE_PANELS.contains(&p.id))
        .map(|p| p.empty)
        .collect();
    assert_eq!(
        empties,
        vec![Some("empty: no buffered write call to a file in this input".to_string()); 2]
    );
}

#[test]
fn stacked_series_add_up_where_both_have_values() {
    let mut values = vec![
        vec![vec![Some((1.0, 2.0)), Some((2.0, 3.0)), None]],
        vec![vec![Some((1.0, 1.0)), None, Some((3.0, 4.0))]],
        vec![vec![Some((1.0, 5.0)), Some((2.0, 1.0)), Some((3.0, 1.0))]],
    ];
    super::panels::stack(&mut values);
    assert_eq!(
        values[2][0],
        vec![Some((1.0, 8.0)), Some((2.0, 1.0)), Some((3.0, 5.0))]
    );
}
