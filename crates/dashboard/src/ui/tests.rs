//! Snapshots of the dashboard over ratatui's TestBackend, from an App fed
//! synthetic messages (the same path live data takes).
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent};
use ratatui::{Terminal, backend::TestBackend};
use writeback_common::{WritepagesCall, agg, call_flags, cause};
use writer_core::{SyncKind, stats::LatencyHist};

use super::*;
use crate::app::{App, Msg};
use crate::state::{Model, OwnCpu, WriterSecond, WriterUpdate};
use wbscope_model::kernel::{KernelSnapshot, VmStat};
use wbscope_model::plan::{Concept, ConceptPlan, HookKind, ProbePlan, Rejection};
use wbscope_model::{CallRecord, Log2Histogram};

fn plan() -> ProbePlan {
    let concepts = Concept::ALL
        .iter()
        .map(|&c| {
            let mut p = ConceptPlan::new(c);
            match c {
                Concept::PerPageWrite => p.rejected.push(Rejection {
                    hook: "tracepoint writeback:wbc_writepage".into(),
                    reason: "not present on this kernel".into(),
                }),
                Concept::WritepagesCall => {
                    p.hook = Some("tp_btf ext4_writepages + ext4_writepages_result".into());
                    p.kind = Some(HookKind::TpBtf);
                    p.rejected.push(Rejection {
                        hook: "fentry ext4_writepages".into(),
                        reason: "BPF_PROG_LOAD returned EPERM".into(),
                    });
                }
                _ => {
                    p.hook = Some(format!("tracepoint x:{}", c.name()));
                    p.kind = Some(HookKind::Tracepoint);
                }
            }
            p
        })
        .collect();
    ProbePlan {
        kernel: "6.18.0-test".into(),
        concepts,
    }
}

fn call(dev: u32, ino: u64, pages: i64, why: u32) -> Msg {
    let mut comm = [0u8; 16];
    comm[..6].copy_from_slice(b"kworke");
    Msg::Call(Box::new(CallRecord::from(&WritepagesCall {
        dev,
        ino,
        pages_written: pages,
        nr_to_write: if why == cause::SYNC { i64::MAX } else { 1024 },
        duration_ns: pages as u64 * 900,
        flags: call_flags::START_SEEN | call_flags::SCAN_SEEN,
        scan_bytes: pages as u64 * 4096 + 8192,
        cause: why,
        comm,
        ..Default::default()
    })))
}

fn snapshot(second: u64) -> KernelSnapshot {
    let mut agg = vec![0; agg::COUNT as usize];
    agg[agg::THROTTLE_PAUSES as usize] = second * 2;
    agg[agg::THROTTLE_PAUSE_MS as usize] = second * 40;
    KernelSnapshot {
        agg,
        vmstat: VmStat {
            nr_dirty: 20_000 + second * 1000,
            nr_writeback: 2_000,
            nr_written: second * 50_000,
            nr_dirtied: second * 60_000,
            nr_dirty_threshold: 100_000,
            nr_dirty_background_threshold: 50_000,
        },
        ..Default::default()
    }
}

/// An app after 30 s of synthetic load: flusher and fsync calls on two
/// devices and a buffered writer in 1 MiB chunks.
fn busy_app() -> App {
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('w'))));
    app.handle(Msg::Writer(WriterUpdate::Started {
        run: 1,
        dir: "./.wbscope-test".into(),
        file_size: 1 << 30,
    }));
    for s in 0..=30u64 {
        for i in 0..(s % 5 + 1) {
            app.handle(call((8 << 20) | 1, 12 + i, 1024, cause::BACKGROUND));
            app.handle(call((259 << 20) | 2, 40, 3 + i as i64, cause::PERIODIC));
        }
        if s % 10 == 0 {
            app.handle(call((8 << 20) | 1, 99, 16384, cause::SYNC));
        }
        let mut chunks = Log2Histogram::default();
        let mut fsync = LatencyHist::new();
        for _ in 0..200 {
            chunks.record(256);
        }
        fsync.record(Duration::from_millis(3 + s % 4));
        app.handle(Msg::Writer(WriterUpdate::Second(Box::new(WriterSecond {
            run: 1,
            elapsed_s: s as f64,
            bytes: (s * 200) << 20,
            bytes_last_second: (150 + (s * 37) % 100) << 20,
            chunk_pages: chunks,
            sync: vec![(SyncKind::Fsync, fsync)],
        }))));
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000_000_000,
            snapshot: Box::new(snapshot(s)),
            cpu: OwnCpu {
                tracer: Some(0.004),
                writer: Some(0.352),
            },
            dirtiers: None,
        });
    }
    app
}

fn draw(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| render(app, f)).unwrap();
    terminal
}

#[test]
fn dashboard_80x24() {
    insta::assert_snapshot!(draw(&busy_app(), 80, 24).backend());
}

#[test]
fn dashboard_160x48() {
    insta::assert_snapshot!(draw(&busy_app(), 160, 48).backend());
}

#[test]
fn dashboard_200x60() {
    insta::assert_snapshot!(draw(&busy_app(), 200, 60).backend());
}

#[test]
fn dashboard_80x24_chart_and_top() {
    let mut app = busy_app();
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    let chart = draw(&app, 80, 24);
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    let top = draw(&app, 80, 24);
    insta::assert_snapshot!("chart_80x24", chart.backend());
    insta::assert_snapshot!("top_80x24", top.backend());
}

#[test]
fn empty_state() {
    let app = App::new(Model::with_plan(plan(), "testhost".into()));
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn help_overlay() {
    let mut app = busy_app();
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('?'))));
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn plan_overlay() {
    let mut app = busy_app();
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('P'))));
    insta::assert_snapshot!(draw(&app, 100, 30).backend());
}

#[test]
fn missing_probes_are_explained() {
    let plan = ProbePlan::unavailable(
        "6.18".into(),
        "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON \
         (missing: CAP_BPF)",
    );
    let mut app = App::new(Model::with_plan(plan, "testhost".into()));
    for s in 0..3 {
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000_000_000,
            snapshot: Box::new(snapshot(s)),
            cpu: OwnCpu {
                tracer: Some(0.001),
                writer: None,
            },
            dirtiers: None,
        });
    }
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

/// The header's second line (its figures), `w` columns wide; the first
/// depends on the probe plan, which other tests cover.
fn draw_header(app: &App, w: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(w, header::height(app))).unwrap();
    terminal
        .draw(|f| f.render_widget(header::header(app, w), f.area()))
        .unwrap();
    let lines = terminal.backend().to_string();
    lines.lines().nth(1).unwrap().to_string()
}

/// The header's CPU figures from a process at 77.7 % of a core, 74.6 of
/// them the writer's (the tracer's 3.1 is the rest): before any run the
/// tracer's alone; while a run goes, and once it has ended (at 0 %), the
/// writer's beside it.
#[test]
fn header_tracer_and_writer_cpu_apart() {
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    let sample = |app: &mut App, s: u64, cpu: OwnCpu| {
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000_000_000,
            snapshot: Box::new(snapshot(s)),
            cpu,
            dirtiers: None,
        });
    };
    sample(&mut app, 0, OwnCpu::default());
    sample(&mut app, 1, OwnCpu::split(1.0, 2_000_000, 0));
    let before = draw_header(&app, 80);
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('w'))));
    app.handle(Msg::Writer(WriterUpdate::Started {
        run: 1,
        dir: "./.wbscope-test".into(),
        file_size: 1 << 30,
    }));
    sample(&mut app, 2, OwnCpu::split(1.0, 777_000_000, 746_000_000));
    let running = draw_header(&app, 80);
    app.handle(Msg::Writer(WriterUpdate::Ended {
        run: 1,
        outcome: writer_core::RunOutcome::failed("stopped"),
    }));
    sample(&mut app, 3, OwnCpu::split(1.0, 2_400_000, 0));
    let ended = draw_header(&app, 80);
    assert!(!before.contains("writer CPU"), "{before}");
    assert!(
        running.contains("tracer CPU 3.1%  writer CPU 74.6%"),
        "{running}"
    );
    assert!(
        ended.contains("tracer CPU 0.2%  writer CPU 0.0%"),
        "{ended}"
    );
    insta::assert_snapshot!(format!(
        "before a run:   {before}\nwhile it runs:  {running}\nafter it ended: {ended}"
    ));
}

#[test]
fn tiny_and_empty_areas_do_not_panic() {
    let mut app = busy_app();
    for overlay in ['?', 'P', 'x'] {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Char(overlay))));
        // Every pane of the Tab order, from the histograms round again.
        for focus in 0..9 {
            for (w, h) in [
                (0, 0),
                (1, 1),
                (10, 3),
                (39, 24),
                (40, 12),
                (41, 13),
                (80, 6),
                (80, 14),
                (119, 36),
                (120, 36),
                (200, 7),
                (300, 100),
            ] {
                draw(&app, w, h);
            }
            let _ = focus;
            app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
        }
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Esc)));
    }
    draw(&App::default(), 80, 24);
}

/// An app fed `n` replayed one-second intervals; `throttle_ms` of
/// `balance_dirty_pages` pause per second with dirty over the free-run
/// ceiling (dirty-throttled's evidence, docs/findings.md).
fn intervals_app(n: u64, throttle_ms: u64) -> App {
    use wbscope_model::interval::{CallAggregate, IntervalLine};
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    for s in 1..=n {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        l.dirty.vmstat.nr_dirty_background_threshold = 1000;
        l.dirty.vmstat.nr_dirty_threshold = 2000;
        if throttle_ms > 0 {
            l.throttle.pauses = 10;
            l.throttle.pause_ms_total = throttle_ms;
            l.dirty.vmstat.nr_dirty = 1700;
        }
        app.handle(Msg::Interval {
            line: Box::new(l),
            kernel: Default::default(),
            unix_ns: None,
        });
    }
    app
}

#[test]
fn findings_strip_none() {
    let app = intervals_app(5, 0);
    assert!(app.model.active_findings().is_empty());
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn findings_strip_one_warning() {
    let app = intervals_app(5, 300);
    let active = app.model.active_findings();
    assert_eq!(active.len(), 1);
    assert_eq!(
        active[0].severity,
        wbscope_model::findings::Severity::Warning
    );
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn findings_evidence_overlay() {
    let mut app = intervals_app(5, 300);
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('f'))));
    insta::assert_snapshot!(draw(&app, 100, 44).backend());
}

/// An app whose intervals carried `owners`: a writer dirtying and written
/// back by the flusher, a throttled one, a syncing one, in two cgroups.
fn who_app() -> App {
    use wbscope_model::dirtier::OwnerLine;
    use wbscope_model::interval::{CallAggregate, IntervalLine};
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    let owner = |pid: u32, comm: &str, cg: u64, d: u64, w: u64, o: u64, f: u64, p: u64| OwnerLine {
        pid,
        comm: comm.into(),
        cgroup_id: cg,
        pages_dirtied: d,
        dirtied_unmeasured: false,
        write_call_bytes: None,
        cancelled_bytes: None,
        pages_written: w,
        pages_written_by_others: o,
        pages_written_by_flusher: f,
        throttle_pauses: p,
        throttle_pause_ms: p * 12,
        pages_dirtied_error: None,
    };
    for s in 1..=3u64 {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        l.owners = vec![
            owner(4242, "dd", 7001, 25_600, 20_000, 20_000, 20_000, 9),
            owner(517, "postgres", 7002, 2_560, 2_560, 0, 0, 0),
            owner(9001, "cp", 7001, 1_024, 1_024, 1_024, 0, 0),
        ];
        app.handle(Msg::Interval {
            line: Box::new(l),
            kernel: Default::default(),
            unix_ns: None,
        });
    }
    for _ in 0..3 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    assert_eq!(app.view.focus, crate::app::Pane::Who);
    app
}

#[test]
fn who_pane() {
    let mut app = who_app();
    let per_process = draw(&app, 80, 24);
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('g'))));
    let per_cgroup = draw(&app, 80, 24);
    insta::assert_snapshot!("who_80x24", per_process.backend());
    insta::assert_snapshot!("who_per_cgroup_80x24", per_cgroup.backend());
    // 160x48: it takes the top table's place.
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('g'))));
    insta::assert_snapshot!("who_160x48", draw(&app, 160, 48).backend());
}

#[test]
fn who_pane_empty() {
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    for _ in 0..3 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    let nothing = draw(&app, 80, 16);
    let plan = ProbePlan::unavailable("6.18".into(), "no BTF");
    let mut app = App::new(Model::with_plan(plan, "testhost".into()));
    for _ in 0..3 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    let unhooked = draw(&app, 80, 16);
    insta::assert_snapshot!("who_nothing_dirtied", nothing.backend());
    insta::assert_snapshot!("who_no_hook", unhooked.backend());
}

/// The live path: calls, then the sample with the dirtier maps; the
/// sample's interval carries the owners and the who pane's state adds
/// them up.
#[test]
fn who_live_attribution_from_samples() {
    use wbscope_model::dirtier::{DirtierReading, DirtierSnapshot};
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    let sample = |app: &mut App, s: u64, pages: u64| {
        let snap = DirtierSnapshot {
            entries: vec![DirtierReading {
                dev: 8 << 20,
                ino: 12,
                tgid: 4242,
                pid: 4242,
                pages,
                comm: "dd".into(),
                cgroup_id: 7001,
                ..Default::default()
            }],
            throttled: Some([(4242, (s, s * 10))].into_iter().collect()),
            ..Default::default()
        };
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000_000_000,
            snapshot: Box::new(snapshot(s)),
            cpu: OwnCpu::default(),
            dirtiers: Some(Box::new(snap)),
        });
    };
    sample(&mut app, 0, 0);
    // The flusher writes 300 of dd's pages, dirtied after the last reading.
    let mut flusher = CallRecord::from(&WritepagesCall {
        dev: 8 << 20,
        ino: 12,
        tgid: 77,
        pages_written: 300,
        ..Default::default()
    });
    flusher.work_reason = 1;
    app.handle(Msg::Call(Box::new(flusher)));
    sample(&mut app, 1, 1000);
    let owners = &app.model.last.as_ref().unwrap().owners;
    assert_eq!(owners.len(), 1, "{owners:?}");
    let dd = &app.model.who.rows[&4242];
    assert_eq!((dd.dirtied, dd.written, dd.by_flusher), (1000, 300, 300));
    assert_eq!(
        (crate::who::by_self(dd), crate::who::by_others_sync(dd)),
        (0, 0)
    );
    assert_eq!((dd.throttle_pauses, dd.throttle_ms), (1, 10));
    assert_eq!((dd.comm.as_str(), dd.cgroup_id), ("dd", 7001));
}

/// The replay of a store an hour long after a jump a minute on from
/// 100 s in: the warm-up and five seconds after the moment played, the
/// last ten throttled. The third header line says where the view is
/// (00:02:45, a bar near the start of the hour), the strip shows the
/// finding holding there, the footer the jump keys.
#[test]
fn store_replay_after_a_jump() {
    use crate::{app::Effect, jump::StoreView};
    use wbscope_model::interval::{CallAggregate, IntervalLine};
    const SEC: u64 = 1_000_000_000;
    const T0: u64 = 1_796_169_600 * SEC;
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    app.replay = Some("wb-store".into());
    app.store = Some(StoreView::new(T0, T0 + 3600 * SEC));
    let interval = |app: &mut App, s: u64, throttled: bool| {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        l.dirty.vmstat.nr_dirty_background_threshold = 1000;
        l.dirty.vmstat.nr_dirty_threshold = 2000;
        if throttled {
            l.throttle.pauses = 10;
            l.throttle.pause_ms_total = 300;
            l.dirty.vmstat.nr_dirty = 1700;
        }
        app.handle(call(8 << 20 | 1, 12, 256, cause::SYNC));
        app.handle(Msg::Interval {
            line: Box::new(l),
            kernel: Default::default(),
            unix_ns: Some(T0 + s * SEC),
        });
    };
    for s in 1..=100 {
        interval(&mut app, s, false);
    }
    let jumped = app.handle(Msg::Key(KeyEvent::from(KeyCode::Right)));
    assert_eq!(jumped, vec![Effect::PlayFrom(T0 + 160 * SEC)]);
    for s in 129..=165 {
        interval(&mut app, s, s > 155);
    }
    assert_eq!(app.model.totals.calls, 37, "only the new stretch");
    let screen = draw(&app, 120, 40);
    let text = format!("{}", screen.backend());
    assert!(text.contains("at 00:02:45"), "{text}");
    assert!(
        text.contains("2026-12-02 00:00:00 to 01:00:00 UTC"),
        "{text}"
    );
    insta::assert_snapshot!(screen.backend());
}

/// A concept left off until `--enable` is counted as off, not missing,
/// and a default that waited behind an opt-in has not fallen back.
#[test]
fn off_by_default_is_neither_missing_nor_a_fallback() {
    let reject = |reason: &str| Rejection {
        hook: "tp_btf x".into(),
        reason: reason.into(),
    };
    let with = |c, hook: Option<&str>, rejected: Vec<Rejection>| ConceptPlan {
        hook: hook.map(String::from),
        kind: hook.map(|_| HookKind::TpBtf),
        rejected,
        ..ConceptPlan::new(c)
    };
    let plan = ProbePlan {
        kernel: "6.18".into(),
        concepts: vec![
            with(
                Concept::DeviceIo,
                Some("/proc/diskstats"),
                vec![reject(
                    "off by default: per request; --enable device_io attaches it",
                )],
            ),
            with(
                Concept::Scan,
                Some("tp_btf y"),
                vec![reject("not in the kernel's BTF")],
            ),
            with(
                Concept::Extents,
                None,
                vec![reject(
                    "off by default: per extent; --enable extents attaches it",
                )],
            ),
            with(
                Concept::Throttling,
                None,
                vec![reject("no such tracepoint")],
            ),
        ],
    };
    let app = App::new(Model::with_plan(plan, "testhost".into()));
    assert_eq!(header::plan_counts(app.shown()), (2, 1, 1, 1));
    let screen = format!("{:?}", draw(&app, 120, 30).backend());
    assert!(
        screen.contains("probes 2/3 attached, 1 fallen back, 1 off, 1 missing"),
        "{screen}"
    );
}

fn fsync_line(
    pid: u32,
    comm: &str,
    n: u64,
    p99_ms: u64,
    journal_pct: u64,
    slow: bool,
) -> wbscope_model::durability::FsyncLine {
    use wbscope_model::durability::{Contributor, FsyncLine, SlowFsync};
    let total = n * p99_ms * 500_000;
    let journal = (total * journal_pct / 100).min(total - total / 10);
    FsyncLine {
        pid,
        comm: comm.into(),
        fsyncs: n,
        p50_ns: p99_ms * 500_000,
        p99_ns: p99_ms * 1_000_000,
        max_ns: p99_ms * 1_200_000,
        total_ns: total,
        writeback_ns: total / 20,
        wait_ns: total / 20,
        journal_ns: journal,
        flush_ns: 0,
        other_ns: total - journal - total / 10,
        pages: n as i64,
        entangled: u64::from(slow),
        slowest: slow.then(|| SlowFsync {
            total_ns: 149_800_000,
            journal_ns: 149_600_000,
            pages: 1,
            entangled: true,
            transaction: Some(4711),
            commit_blocks: Some(10),
            contributors: vec![
                Contributor {
                    pid: 812,
                    comm: "dd".into(),
                    handles: 9,
                    blocks: 7,
                    pages: 40_121,
                },
                Contributor {
                    pid,
                    comm: comm.into(),
                    handles: 1,
                    blocks: 1,
                    pages: 1,
                },
            ],
            ..SlowFsync::default()
        }),
    }
}

fn fsync_app() -> App {
    use wbscope_model::interval::{CallAggregate, IntervalLine};
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    for s in 1..=3u64 {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        l.fsyncs = vec![
            fsync_line(517, "etcd", 10, 150, 95, s == 2),
            fsync_line(4242, "postgres", 3, 4, 60, false),
        ];
        app.handle(Msg::Interval {
            line: Box::new(l),
            kernel: Default::default(),
            unix_ns: None,
        });
    }
    for _ in 0..4 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    assert_eq!(app.view.focus, crate::app::Pane::Fsync);
    app
}

/// Per process: count, p50/p99/max and the parts as one bar; the last
/// slow fsync (an entangled one, two intervals ago) with its commit.
#[test]
fn fsync_pane() {
    let app = fsync_app();
    insta::assert_snapshot!("fsync_80x24", draw(&app, 80, 24).backend());
    insta::assert_snapshot!("fsync_160x48", draw(&app, 160, 48).backend());
}

#[test]
fn fsync_pane_without_its_hooks() {
    let plan = ProbePlan::unavailable("6.18".into(), "no BTF");
    let mut app = App::new(Model::with_plan(plan, "testhost".into()));
    for _ in 0..4 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    insta::assert_snapshot!("fsync_no_hook", draw(&app, 80, 16).backend());
}

/// The live path: the fsync's own call, the commit's phases and handles,
/// its span; a sample past the hold joins it into the interval's line.
#[test]
fn fsync_live_join_from_records() {
    use crate::fsync::DurabilityMsg;
    use wbscope_model::durability::{HandleShare, Phase, Span};
    use writeback_common::phase;
    const MS: u64 = 1_000_000;
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    let dev = wbscope_model::DevId { major: 8, minor: 1 };
    let sample = |app: &mut App, s: u64| {
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1000 * MS,
            snapshot: Box::new(snapshot(s)),
            cpu: OwnCpu::default(),
            dirtiers: Some(Box::default()),
        });
    };
    sample(&mut app, 1);
    let mut own = CallRecord::from(&WritepagesCall {
        dev: 8 << 20 | 1,
        ino: 12,
        tgid: 517,
        tid: 517,
        pages_written: 1,
        ..Default::default()
    });
    (own.start_ns, own.duration_ns) = (1010 * MS, MS);
    app.handle(Msg::Call(Box::new(own)));
    for (p, at) in [(phase::START, 1012), (phase::END, 1040)] {
        app.handle(Msg::Durability(DurabilityMsg::Commit(Phase {
            dev,
            transaction: 9,
            phase: p,
            ns: at * MS,
            handles: 0,
            blocks: 0,
            blocks_logged: 0,
        })));
    }
    app.handle(Msg::Durability(DurabilityMsg::Shares(vec![HandleShare {
        dev,
        transaction: 9,
        pid: 812,
        ino: 0,
        handles: 30,
        blocks: 40,
        comm: "dd".into(),
    }])));
    app.handle(Msg::Durability(DurabilityMsg::Sync(Box::new(Span {
        pid: 517,
        tid: 517,
        comm: "etcd".into(),
        cgroup_id: 1,
        dev,
        ino: 12,
        datasync: true,
        ret: 0,
        start_ns: 1010 * MS,
        end_ns: 1041 * MS,
        log_force_ns: 0,
        flags: writeback_common::sync_flags::SYSCALL
            | writeback_common::sync_flags::FILE_SEEN
            | writeback_common::sync_flags::EXT4,
        call: writeback_common::sync_call::FDATASYNC,
        ..Span::default()
    }))));
    sample(&mut app, 2);
    assert!(
        app.model.fsyncs.lines.is_empty(),
        "held for the calls still to end"
    );
    sample(&mut app, 4);
    let [l] = app.model.fsyncs.lines.as_slice() else {
        panic!("{:?}", app.model.fsyncs.lines)
    };
    assert_eq!(
        (l.pid, l.fsyncs, l.writeback_ns, l.wait_ns),
        (517, 1, MS, MS)
    );
    assert_eq!((l.journal_ns, l.flush_ns, l.entangled), (28 * MS, MS, 1));
    let (pid, _, slow, _) = app.model.fsyncs.last_slow.as_ref().unwrap();
    assert_eq!((*pid, slow.contributors[0].comm.as_str()), (517, "dd"));
}

#[test]
fn the_bar_gives_each_part_its_share_and_every_part_a_cell() {
    let l = fsync_line(1, "x", 1, 10, 80, false);
    let bar = super::fsync_pane::stacked(&l, 20);
    assert_eq!(bar.chars().count(), 20, "{bar}");
    assert_eq!(bar.chars().filter(|&c| c == 'J').count(), 16, "{bar}");
    assert!(bar.starts_with("Ww"), "{bar}");
    assert!(super::fsync_pane::stacked(&l, 0).is_empty());
}

/// Two intervals of the journald case's shape, Tab to the ledger pane.
fn ledger_app(with_ledger: bool) -> App {
    use wbscope_model::interval::{CallAggregate, IntervalLine};
    use wbscope_model::ledger::{DeviceLedger, LedgerLine, ProcessLedger, Stages};
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    for s in 1..=2u64 {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        let row = |pid, comm: &str, calls, dirtied, back, journal, metadata| ProcessLedger {
            pid,
            comm: comm.into(),
            cgroup_id: 1,
            stages: Stages {
                write_calls: Some(calls),
                dirtied: Some(dirtied),
                cancelled: Some(0),
                written_back: back,
                journal: Some(journal),
                metadata: Some(metadata),
                ..Stages::default()
            },
        };
        l.ledger = with_ledger.then(|| LedgerLine {
            devices: vec![
                DeviceLedger {
                    dev: wbscope_model::DevId { major: 7, minor: 0 },
                    written: 8_886_272,
                    data: Some(5_402_624),
                    direct: Some(0),
                    journal: Some(3_471_360),
                    metadata: Some(12_288),
                    other: Some(0),
                    charged: 8_886_272,
                    unattributed: 0,
                },
                DeviceLedger {
                    dev: wbscope_model::DevId {
                        major: 254,
                        minor: 0,
                    },
                    written: 1_048_576,
                    unattributed: 1_048_576,
                    ..DeviceLedger::default()
                },
            ],
            processes: vec![
                row(5822, "dd", 188_000, 1_208_320, 1_208_320, 3_446_277, 12_199),
                row(5823, "dd", 4_194_304, 4_194_304, 4_194_304, 25_082, 89),
            ],
            ..LedgerLine::default()
        });
        app.handle(Msg::Interval {
            line: Box::new(l),
            kernel: Default::default(),
            unix_ns: None,
        });
    }
    for _ in 0..5 {
        app.handle(Msg::Key(KeyEvent::from(KeyCode::Tab)));
    }
    assert_eq!(app.view.focus, crate::app::Pane::Ledger);
    app
}

/// Each device's classes beside its counter, each process's flow from
/// write() to the device with its amplification, added since start.
#[test]
fn ledger_pane() {
    let app = ledger_app(true);
    insta::assert_snapshot!("ledger_80x24", draw(&app, 80, 24).backend());
    insta::assert_snapshot!("ledger_160x48", draw(&app, 160, 48).backend());
    insta::assert_snapshot!("ledger_none", draw(&ledger_app(false), 80, 16).backend());
}

/// Three seconds of the live path (`Msg::Writes` then the second's
/// sample), the write pane focused by `W`: dd throttled by its bdi, cp
/// waiting on pages under writeback, a database in reclaim.
fn writes_app() -> App {
    use wbscope_model::writes::Write;
    use writeback_common::{write_call, write_domain};
    const MS: u64 = 1_000_000;
    let mut app = App::new(Model::with_plan(plan(), "testhost".into()));
    let w = |pid: u32, comm: &str, total_us: u64, parts_us: [u64; 4]| {
        let [throttle, stable, reclaim, blocked] = parts_us.map(|p| p * 1000);
        Write {
            pid,
            tid: pid,
            comm: comm.into(),
            call: write_call::WRITE,
            ret: 1 << 20,
            start_ns: 1_000 * MS,
            end_ns: 1_000 * MS + total_us * 1000,
            throttle_ns: throttle,
            stable_ns: stable,
            reclaim_ns: reclaim,
            blocked_ns: blocked,
            pauses: if throttle > 0 { 3 } else { 0 },
            domains: if throttle > 0 { write_domain::BDI } else { 0 },
            ..Write::default()
        }
    };
    for s in 0..=3u64 {
        if s > 0 {
            let mut batch = Vec::new();
            for i in 0..200u64 {
                batch.push(w(812, "dd", 300 + i, [0, 0, 0, 20]));
            }
            // dd's slow one, in the last interval.
            if s == 3 {
                batch.push(w(812, "dd", 212_400, [208_000, 0, 0, 1_200]));
            }
            for _ in 0..40 {
                batch.push(w(4242, "cp", 2_000, [0, 1_500, 0, 100]));
            }
            for _ in 0..12 {
                batch.push(w(517, "postgres", 900, [0, 0, 400, 0]));
            }
            app.handle(Msg::Writes(batch));
        }
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000 * MS,
            snapshot: Box::new(snapshot(s)),
            cpu: OwnCpu::default(),
            dirtiers: None,
        });
    }
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('W'))));
    assert_eq!(app.view.focus, crate::app::Pane::Writes);
    app
}

/// Per process: writes/s, p50/p99/max and the parts as one bar; the last
/// slow write (a throttled one) with what it waited for and who paused it.
#[test]
fn writes_pane() {
    let app = writes_app();
    insta::assert_snapshot!("writes_80x24", draw(&app, 80, 24).backend());
    insta::assert_snapshot!("writes_160x48", draw(&app, 160, 48).backend());
}

#[test]
fn writes_pane_without_its_hooks() {
    let plan = ProbePlan::unavailable("6.18".into(), "no BTF");
    let mut app = App::new(Model::with_plan(plan, "testhost".into()));
    app.handle(Msg::Key(KeyEvent::from(KeyCode::Char('W'))));
    insta::assert_snapshot!("writes_no_hook", draw(&app, 80, 16).backend());
}

/// Each part's cells in its own colour: the snapshots show letters, so
/// the styles are checked here.
#[test]
fn the_write_bar_gives_each_part_its_share_in_its_own_style() {
    use ratatui::style::Color;
    use wbscope_model::writes::{WriteLine, WriteParts};
    let l = WriteLine {
        parts: WriteParts {
            total_ns: 100,
            throttle_ns: 60,
            stable_ns: 20,
            reclaim_ns: 0,
            blocked_ns: 1,
            other_ns: 19,
            ..WriteParts::default()
        },
        ..WriteLine::default()
    };
    let bar = super::writes_pane::stacked(&l, 20);
    let text: String = bar.spans.iter().map(|s| s.content.as_ref()).collect();
    assert_eq!(text, "TTTTTTTTTTTSSSSB....", "{text}");
    let colours: Vec<_> = bar.spans.iter().map(|s| s.style.fg).collect();
    assert_eq!(
        colours,
        [Color::Red, Color::Blue, Color::Cyan, Color::Green].map(Some)
    );
    assert!(
        super::writes_pane::stacked(&WriteLine::default(), 20)
            .spans
            .is_empty()
    );
}
