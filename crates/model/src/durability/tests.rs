use super::*;
use writeback_common::sync_flags;

const DEV: DevId = DevId { major: 7, minor: 0 };
const MS: u64 = 1_000_000;

fn span(tid: u32, start: u64, end: u64) -> Span {
    Span {
        pid: tid,
        tid,
        comm: "b".into(),
        cgroup_id: 1,
        dev: DEV,
        ino: 12,
        datasync: false,
        ret: 0,
        start_ns: start,
        end_ns: end,
        log_force_ns: 0,
        flags: sync_flags::SYSCALL | sync_flags::FILE_SEEN | sync_flags::EXT4,
        call: 0,
        ..Span::default()
    }
}

fn call(
    tid: u32,
    ino: u64,
    start: u64,
    end: u64,
    pages: i64,
    dirtiers: &[(u32, &str, u64)],
) -> CallRecord {
    CallRecord {
        dev: DEV,
        ino,
        tgid: tid,
        tid,
        comm: "kworker/u8:1".into(),
        start_ns: start,
        duration_ns: end - start,
        pages_written: pages,
        dirtiers: dirtiers
            .iter()
            .map(|&(pid, comm, pages)| Dirtier {
                pid,
                comm: comm.into(),
                cgroup_id: 1,
                pages,
            })
            .collect(),
        ..CallRecord::default()
    }
}

fn phase(transaction: u32, which: u32, ns: u64) -> Phase {
    Phase {
        dev: DEV,
        transaction,
        phase: which,
        ns,
        handles: 0,
        blocks: 0,
        blocks_logged: 0,
    }
}

/// The parts tile the span: writeback exact from the thread's calls, the
/// wait up to the commit's start, the journal to its end, the rest after
/// it; nothing negative, nothing over the total.
#[test]
fn the_parts_tile_the_span() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS + 100, 12 * MS, 1, &[]));
    j.call(&call(6, 99, 11 * MS, 13 * MS, 8, &[])); // another thread's
    for (p, at) in [
        (phase::START, 15),
        (phase::LOCKING, 15),
        (phase::FLUSHING, 16),
        (phase::LOGGING, 30),
        (phase::END, 38),
    ] {
        j.phase(&phase(4711, p, at * MS));
    }
    j.span(span(5, 10 * MS, 40 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.total_ns, 30 * MS);
    assert_eq!(r.writeback_ns, 2 * MS - 100);
    assert_eq!((r.calls, r.pages), (1, 1));
    assert_eq!(r.wait_ns, 3 * MS);
    assert_eq!(r.journal_ns, 23 * MS);
    assert_eq!(r.flush_ns, Some(2 * MS));
    assert_eq!(r.other_ns, 100);
    assert_eq!(
        r.writeback_ns + r.wait_ns + r.journal_ns + r.flush_ns.unwrap() + r.other_ns,
        r.total_ns
    );
    let c = r.commit.unwrap();
    assert_eq!(c.transaction, 4711);
    assert_eq!(c.flushing_ns, Some(14 * MS));
    assert_eq!(c.logging_ns, Some(8 * MS));
    assert_eq!(c.locked_ns, Some(MS));
}

/// Without a commit in the span (its transaction had committed), the
/// time after the writeback is the wait, and there is no flush part.
#[test]
fn without_a_commit_the_rest_is_the_wait() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS, 11 * MS, 1, &[]));
    // A commit that ended during the writeback is not the one it waited on.
    j.phase(&phase(7, phase::START, 9 * MS));
    j.phase(&phase(7, phase::END, 10 * MS + 500));
    j.span(span(5, 10 * MS, 14 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!((r.writeback_ns, r.wait_ns, r.journal_ns), (MS, 3 * MS, 0));
    assert_eq!(r.flush_ns, None);
    assert!(r.commit.is_none());
}

/// A commit already running when the writeback ended counts from the
/// writeback's end; the last commit to end is the one waited on.
#[test]
fn the_last_commit_to_end_is_the_one_waited_on() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS, 12 * MS, 1, &[]));
    j.phase(&phase(8, phase::START, 5 * MS));
    j.phase(&phase(8, phase::END, 14 * MS));
    j.phase(&phase(9, phase::START, 14 * MS));
    j.phase(&phase(9, phase::END, 20 * MS));
    j.span(span(5, 10 * MS, 21 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.commit.as_ref().map(|c| c.transaction), Some(9));
    assert_eq!((r.wait_ns, r.journal_ns), (2 * MS, 6 * MS));
    // The earlier commit started before the writeback ended: from its end.
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS, 12 * MS, 1, &[]));
    j.phase(&phase(8, phase::START, 5 * MS));
    j.phase(&phase(8, phase::END, 14 * MS));
    j.span(span(5, 10 * MS, 15 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!((r.wait_ns, r.journal_ns, r.flush_ns), (0, 2 * MS, Some(MS)));
}

/// Handles opened inside a writepages call go to the call's inode's
/// dirtiers by their pages; others to the process that held them.
#[test]
fn contributors_are_the_dirtiers_of_the_allocating_calls() {
    let mut j = DurabilityJoin::default();
    // A flusher call on tar's file (ino 50), which tar and cp dirtied.
    j.call(&call(
        90,
        50,
        MS,
        2 * MS,
        100,
        &[(812, "tar", 75), (813, "cp", 25)],
    ));
    j.phase(&phase(4711, phase::START, 3 * MS));
    j.phase(&phase(4711, phase::END, 9 * MS));
    assert_eq!(j.take_ended(), vec![(DEV, 4711)]);
    j.shares(vec![
        HandleShare {
            dev: DEV,
            transaction: 4711,
            pid: 90,
            ino: 50,
            handles: 40,
            blocks: 400,
            comm: String::new(),
        },
        HandleShare {
            dev: DEV,
            transaction: 4711,
            pid: 5,
            ino: 0,
            handles: 2,
            blocks: 3,
            comm: String::new(),
        },
        HandleShare {
            dev: DEV,
            transaction: 4711,
            pid: 812,
            ino: 0,
            handles: 10,
            blocks: 10,
            comm: String::new(),
        },
        // Another transaction's: not this commit's.
        HandleShare {
            dev: DEV,
            transaction: 4712,
            pid: 5,
            ino: 0,
            handles: 9,
            blocks: 9,
            comm: String::new(),
        },
    ]);
    // Asked once: a commit without handles is not asked again.
    assert!(j.take_ended().is_empty());
    j.span(span(5, 2 * MS, 10 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    let c = r.commit.unwrap().contributors;
    let got: Vec<(u32, &str, u64, u64, u64)> = c
        .iter()
        .map(|c| (c.pid, c.comm.as_str(), c.handles, c.blocks, c.pages))
        .collect();
    assert_eq!(
        got,
        vec![
            (812, "tar", 40, 310, 0),
            (813, "cp", 10, 100, 0),
            (5, "b", 2, 3, 0)
        ]
    );
}

/// The data written back in the transaction's life (here, with no
/// transaction before it seen, the commit itself) is charged to its
/// dirtiers, each call in proportion to its time inside it.
#[test]
fn data_written_during_the_commit_is_charged_to_its_dirtiers() {
    let mut j = DurabilityJoin::default();
    // Half inside the commit [10, 20] ms: 50 of its 100 pages.
    j.call(&call(90, 50, 5 * MS, 15 * MS, 100, &[(812, "tar", 100)]));
    // All inside, nobody known: the caller's.
    j.call(&call(91, 51, 12 * MS, 14 * MS, 30, &[]));
    // Outside.
    j.call(&call(90, 50, 21 * MS, 22 * MS, 500, &[(812, "tar", 500)]));
    j.phase(&phase(3, phase::START, 10 * MS));
    j.phase(&phase(3, phase::END, 20 * MS));
    j.span(span(5, 9 * MS, 23 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    let c = r.commit.unwrap().contributors;
    let got: Vec<(u32, u64)> = c.iter().map(|c| (c.pid, c.pages)).collect();
    assert_eq!(got, vec![(812, 50), (91, 30)]);
}

/// Memory stays bounded whatever arrives, and old calls and commits go.
#[test]
fn what_is_kept_is_bounded() {
    let mut j = DurabilityJoin::default();
    for i in 0..(MAX_CALLS as u64 + 10) {
        j.call(&call(5, 12, i, i + 1, 1, &[]));
    }
    assert_eq!(j.calls.len(), MAX_CALLS);
    for t in 0..(MAX_COMMITS as u32 + 10) {
        j.phase(&phase(t, phase::START, 1));
    }
    assert_eq!(j.commits.len(), MAX_COMMITS);
    for i in 0..(MAX_HELD as u64 + 3) {
        j.span(span(5, i, i + 1));
    }
    // Held past the bound: the oldest three are joined at once.
    assert_eq!(j.take(10).len(), 3);
    assert_eq!(j.spans.len(), MAX_HELD);
    assert_eq!(j.take(KEEP_NS + 10 * MS).len(), MAX_HELD);
    assert!(j.calls.is_empty());
    assert!(j.commits.is_empty());
}

/// A span waits until the calls that overlap its commit can have ended.
#[test]
fn a_span_is_held_for_the_calls_that_end_after_it() {
    let mut j = DurabilityJoin::default();
    j.phase(&phase(3, phase::START, 10 * MS));
    j.phase(&phase(3, phase::END, 20 * MS));
    j.span(span(5, 9 * MS, 21 * MS));
    assert!(j.take(21 * MS + HOLD_NS - 1).is_empty());
    // The flusher's long call across the commit ends after the fsync.
    j.call(&call(90, 50, 0, 40 * MS, 400, &[(812, "tar", 400)]));
    let [r] = j.take(21 * MS + HOLD_NS).try_into().unwrap();
    let c = r.commit.unwrap().contributors;
    assert_eq!((c[0].pid, c[0].pages), (812, 100));

    // Once calls of 3 s are kept (a device slower than the flusher's
    // estimate), spans wait 3 s: the next long call across a commit is
    // in its join.
    let s = 10_000 * MS;
    j.call(&call(90, 50, s, s + 3_000 * MS, 300, &[(812, "tar", 300)]));
    j.phase(&phase(4, phase::START, s + 3_100 * MS));
    j.phase(&phase(4, phase::END, s + 3_200 * MS));
    j.span(span(5, s + 3_050 * MS, s + 3_250 * MS));
    assert!(j.take(s + 3_250 * MS + HOLD_NS).is_empty());
    j.call(&call(
        90,
        50,
        s + 3_010 * MS,
        s + 5_900 * MS,
        290,
        &[(812, "tar", 290)],
    ));
    let [r] = j.take(s + 6_250 * MS).try_into().unwrap();
    assert_eq!(r.commit.unwrap().contributors[0].pid, 812);
    // At most MAX_HOLD_NS, whatever the calls.
    j.call(&call(90, 50, s, s + 60_000 * MS, 1, &[]));
    j.span(span(5, s + 60_000 * MS, s + 60_001 * MS));
    assert_eq!(j.take(s + 60_001 * MS + MAX_HOLD_NS).len(), 1);
}

fn record(
    pid: u32,
    total_ms: u64,
    journal_ms: u64,
    pages: i64,
    top: Option<(u32, u64)>,
) -> SyncRecord {
    SyncRecord {
        pid,
        tid: pid,
        comm: format!("p{pid}"),
        cgroup_id: 1,
        dev: DEV,
        ino: 12,
        fs: "ext4".into(),
        kind: "fsync",
        ret: 0,
        start_ns: 0,
        total_ns: total_ms * MS,
        writeback_ns: 0,
        wait_ns: 0,
        journal_ns: journal_ms * MS,
        flush_ns: Some(0),
        other_ns: (total_ms - journal_ms) * MS,
        measured: Vec::new(),
        pages,
        calls: 1,
        call_times_ns: Vec::new(),
        commit: top.map(|(other, pages)| CommitRecord {
            transaction: 9,
            start_ns: 0,
            end_ns: 0,
            locked_ns: None,
            flushing_ns: None,
            logging_ns: None,
            handles: None,
            blocks: Some(3),
            blocks_logged: None,
            contributors: vec![
                Contributor {
                    pid: other,
                    comm: "dd".into(),
                    handles: 1,
                    blocks: 2,
                    pages,
                },
                Contributor {
                    pid,
                    comm: "b".into(),
                    handles: 1,
                    blocks: 1,
                    pages: 2,
                },
            ],
        }),
    }
}

/// Entangled: small, mostly waiting on the journal, for a commit mostly
/// another process's.
#[test]
fn an_fsync_is_entangled_only_when_small_journal_bound_and_mostly_anothers() {
    assert_eq!(
        record(5, 40, 38, 1, Some((812, 9000)))
            .entangled_with()
            .map(|c| c.pid),
        Some(812)
    );
    // Its own commit (it is the largest).
    assert!(
        record(5, 40, 38, 1, Some((5, 9000)))
            .entangled_with()
            .is_none()
    );
    // Not small.
    assert!(
        record(5, 40, 38, SMALL_PAGES + 1, Some((812, 9000)))
            .entangled_with()
            .is_none()
    );
    // The journal not most of its time.
    assert!(
        record(5, 40, 19, 1, Some((812, 9000)))
            .entangled_with()
            .is_none()
    );
    // The other not most of the commit: 2 + 0 of 2 + 0 + 1 + 2.
    assert!(
        record(5, 40, 38, 1, Some((812, 0)))
            .entangled_with()
            .is_none()
    );
    // No commit.
    assert!(record(5, 40, 38, 1, None).entangled_with().is_none());
    // Mostly another's, but no more than a small fsync's worth: 2 + 14.
    assert!(
        record(5, 40, 38, 1, Some((812, 14)))
            .entangled_with()
            .is_none()
    );
    assert!(
        record(5, 40, 38, 1, Some((812, 15)))
            .entangled_with()
            .is_some()
    );
}

/// Per process: count, exact percentiles, sums, and the slowest entangled
/// one shown before a slower plain one.
#[test]
fn the_interval_line_has_each_process_percentiles_and_its_entangled_fsync() {
    let mut lines = FsyncLines::default();
    for ms in 1..=100 {
        lines.add(&record(5, ms, 0, 1, None));
    }
    lines.add(&record(5, 50, 45, 1, Some((812, 9000))));
    lines.add(&record(6, 7, 0, 1, None));
    let got = lines.take();
    assert_eq!(got.len(), 2);
    let b = &got[0];
    assert_eq!((b.pid, b.fsyncs, b.entangled), (5, 101, 1));
    assert_eq!((b.p50_ns, b.p99_ns, b.max_ns), (50 * MS, 99 * MS, 100 * MS));
    assert_eq!(b.total_ns, (5050 + 50) * MS);
    assert_eq!(b.journal_ns, 45 * MS);
    let s = b.slowest.as_ref().unwrap();
    assert!(s.entangled);
    assert_eq!((s.total_ns, s.contributors[0].pid), (50 * MS, 812));
    assert!(lines.take().is_empty(), "a fresh start");
}

/// Past PROCESSES_KEPT processes, the smallest are added into one line.
#[test]
fn many_processes_fold_into_others() {
    let mut lines = FsyncLines::default();
    for pid in 1..=40u32 {
        lines.add(&record(pid, u64::from(pid), 0, 1, None));
    }
    let got = lines.take();
    assert_eq!(got.len(), PROCESSES_KEPT);
    let others = got.last().unwrap();
    assert_eq!((others.pid, others.comm.as_str()), (0, "(others)"));
    assert_eq!(got.iter().map(|l| l.fsyncs).sum::<u64>(), 40);
    assert_eq!(others.max_ns, (40 - PROCESSES_KEPT as u64 + 1) * MS);
}

/// Calls are kept in order of their end, a late record put in its place,
/// so that a span finds its own calls by time whatever order they came in.
#[test]
fn a_late_call_is_found_in_its_place() {
    let mut j = DurabilityJoin::default();
    j.call(&call(9, 40, 30 * MS, 31 * MS, 5, &[]));
    j.call(&call(5, 12, 10 * MS, 11 * MS, 1, &[]));
    j.call(&call(5, 12, 12 * MS, 13 * MS, 2, &[]));
    let ends: Vec<u64> = j.calls.iter().map(|c| c.end_ns).collect();
    assert_eq!(ends, vec![11 * MS, 13 * MS, 31 * MS]);
    j.span(span(5, 10 * MS, 20 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!((r.calls, r.pages, r.writeback_ns), (2, 3, 2 * MS));
}

/// xfs: no commit; the log force to the end is its journal part.
#[test]
fn an_xfs_fsync_is_journal_from_its_log_force() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS, 12 * MS, 4, &[]));
    j.span(Span {
        log_force_ns: 15 * MS,
        flags: sync_flags::SYSCALL | sync_flags::FILE_SEEN | sync_flags::XFS,
        ..span(5, 10 * MS, 30 * MS)
    });
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.fs, "xfs");
    assert_eq!(
        (r.writeback_ns, r.wait_ns, r.journal_ns),
        (2 * MS, 3 * MS, 15 * MS)
    );
    assert_eq!((r.flush_ns, r.other_ns), (None, 0));
}

/// A span no filesystem named goes on the device of its own calls; one
/// that wrote nothing either (tmpfs) is dropped.
#[test]
fn an_unnamed_fsync_is_placed_by_its_calls_or_dropped() {
    let mut j = DurabilityJoin::default();
    let mut btrfs = call(5, 12, 10 * MS, 12 * MS, 4, &[]);
    btrfs.dev = DevId {
        major: 0,
        minor: 45,
    };
    btrfs.fs = "btrfs".into();
    j.call(&btrfs);
    let unnamed = |start, end| Span {
        dev: DevId::default(),
        ino: 0,
        flags: sync_flags::SYSCALL,
        ..span(5, start, end)
    };
    j.span(unnamed(10 * MS, 13 * MS));
    j.span(unnamed(20 * MS, 21 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(
        (r.dev, r.fs.as_str()),
        (
            DevId {
                major: 0,
                minor: 45
            },
            "btrfs"
        )
    );
    assert_eq!((r.writeback_ns, r.wait_ns, r.pages), (2 * MS, MS, 4));
}

/// A run's fsyncs: exact percentiles, the parts' means, the entangled.
#[test]
fn a_runs_fsync_figures() {
    assert!(FsyncFigures::of([]).is_none());
    let records: Vec<SyncRecord> = (1..=100)
        .map(|ms| record(5, ms, ms / 2, 1, (ms == 100).then_some((812, 9000))))
        .collect();
    let f = FsyncFigures::of(&records).unwrap();
    assert_eq!(
        (f.count, f.p50_ms, f.p99_ms, f.max_ms),
        (100, 50.0, 99.0, 100.0)
    );
    assert_eq!(
        f.journal_ms_mean,
        records
            .iter()
            .map(|r| r.journal_ns as f64 / 1e6)
            .sum::<f64>()
            / 100.0
    );
    assert_eq!(f.entangled, 1);
}

/// The function hooks' windows replace the inferred ones: the wait from
/// the last own call's end to `file_write_and_wait_range()`'s return, the
/// journal from `jbd2_log_wait_commit()`'s entry to its return with the
/// transaction it named (not the last commit to end, which the inferred
/// rule would take), the flush as `blkdev_issue_flush()` took it.
#[test]
fn measured_waits_replace_the_inferred_ones() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 11 * MS, 12 * MS, 1, &[]));
    for (t, p, at) in [
        (40, phase::START, 14),
        (40, phase::END, 30),
        // Another transaction ends later inside the span: the inferred
        // rule would take it.
        (41, phase::START, 31),
        (41, phase::END, 35),
    ] {
        j.phase(&phase(t, p, at * MS));
    }
    let hooked = sync_flags::WAIT_HOOKED | sync_flags::JOURNAL_HOOKED | sync_flags::FLUSH_HOOKED;
    let s = Span {
        flags: span(5, 0, 0).flags | hooked,
        wait: (10 * MS + 500, 13 * MS),
        journal: (13 * MS + 200, 31 * MS),
        flush: (32 * MS, 34 * MS),
        journal_tid: 40,
        ..span(5, 10 * MS, 40 * MS)
    };
    j.span(s.clone());
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.measured, ["wait", "journal", "flush"]);
    assert_eq!(r.writeback_ns, MS);
    assert_eq!(r.wait_ns, MS, "from the call's end (12 ms) to 13 ms");
    assert_eq!(r.journal_ns, 18 * MS - 200);
    assert_eq!(r.flush_ns, Some(2 * MS));
    assert_eq!(
        r.writeback_ns + r.wait_ns + r.journal_ns + r.flush_ns.unwrap() + r.other_ns,
        r.total_ns
    );
    assert_eq!(r.commit.map(|c| c.transaction), Some(40));

    // Without the flush hook, the flush is what follows the journal wait;
    // without the journal's, the inferred journal is cut at the measured
    // wait's end.
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 11 * MS, 12 * MS, 1, &[]));
    j.phase(&phase(40, phase::START, 12 * MS + 500));
    j.phase(&phase(40, phase::END, 30 * MS));
    j.span(Span {
        flags: s.flags & !sync_flags::FLUSH_HOOKED & !sync_flags::JOURNAL_HOOKED,
        ..s.clone()
    });
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.measured, ["wait", "flush"]);
    assert_eq!(r.wait_ns, MS);
    assert_eq!(r.journal_ns, 17 * MS, "13 ms (the wait's end) to 30 ms");
    assert_eq!(r.flush_ns, Some(0), "ext4 issued no flush of its own");
    assert_eq!(r.other_ns, 11 * MS, "before the call and after the commit");
    // On a filesystem that flushes through its own bios (btrfs, named by
    // no tracepoint), no flush is said.
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 11 * MS, 12 * MS, 1, &[]));
    j.phase(&phase(40, phase::START, 12 * MS + 500));
    j.phase(&phase(40, phase::END, 30 * MS));
    j.span(Span {
        flags: sync_flags::SYSCALL | sync_flags::WAIT_HOOKED,
        ..s.clone()
    });
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.measured, ["wait"]);
    assert_eq!(r.flush_ns, Some(10 * MS), "inferred after the commit");
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 11 * MS, 12 * MS, 1, &[]));
    j.span(Span {
        flags: s.flags & !sync_flags::FLUSH_HOOKED,
        ..s.clone()
    });
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.flush_ns, Some(0), "none issued");
    assert_eq!(r.journal_ns, 18 * MS - 200);
    assert!(r.commit.is_none(), "transaction 40 was not seen");

    // Measurements that overlap cannot tile the span: the inferred split.
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 11 * MS, 12 * MS, 1, &[]));
    j.span(Span {
        journal: (12 * MS + 500, 31 * MS),
        ..s
    });
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert!(r.measured.is_empty(), "{:?}", r.measured);
    assert_eq!(r.wait_ns, 28 * MS);
}

/// The flusher's calls only submit their I/O: a short call of thousands
/// of pages between the transaction's birth (the previous commit's start)
/// and its commit is its data, though no call overlaps the commit itself.
#[test]
fn a_transactions_data_is_what_was_written_back_in_its_life() {
    let mut j = DurabilityJoin::default();
    j.phase(&phase(40, phase::START, 100 * MS));
    j.phase(&phase(40, phase::END, 108 * MS));
    j.call(&call(
        90,
        50,
        150 * MS,
        150 * MS + 400_000,
        3072,
        &[(812, "dd", 3072)],
    ));
    // Before transaction 41 was born: 40's.
    j.call(&call(
        90,
        50,
        90 * MS,
        90 * MS + 400_000,
        1000,
        &[(812, "dd", 1000)],
    ));
    j.phase(&phase(41, phase::START, 200 * MS));
    j.phase(&phase(41, phase::END, 208 * MS));
    j.span(span(5, 199 * MS, 209 * MS));
    let [r] = j.take(u64::MAX).try_into().unwrap();
    let c = r.commit.unwrap().contributors;
    assert_eq!((c[0].pid, c[0].pages), (812, 3072), "{c:?}");
}

/// A span with no journal or flush part of its own takes the device's
/// flushes completed after its writeback (btrfs: its own bios), counted
/// from the later of their issue and the writeback's end.
#[test]
fn a_span_without_a_flush_of_its_own_takes_the_devices() {
    let mut j = DurabilityJoin::default();
    j.call(&call(5, 12, 10 * MS, 11 * MS, 1, &[]));
    let flush = |dev: DevId, issue, complete| DeviceFlush {
        dev,
        devices: vec![dev],
        class: 0,
        issue_ns: issue * MS,
        complete_ns: complete * MS,
    };
    let other = DevId { major: 8, minor: 0 };
    j.flush(flush(DEV, 9, 10)); // before its writeback ended
    j.flush(flush(other, 12, 13)); // another disk's
    j.flush(flush(DEV, 10, 14)); // issued (by the plug's clock) before
    j.flush(flush(DEV, 15, 16));
    j.flush(flush(DEV, 17, 30)); // after it returned
    let btrfs = Span {
        flags: sync_flags::SYSCALL,
        dev: DevId::default(),
        ..span(5, 10 * MS, 20 * MS)
    };
    j.span(btrfs);
    let [r] = j.take(u64::MAX).try_into().unwrap();
    assert_eq!(r.dev, DEV, "placed by its call");
    assert_eq!((r.writeback_ns, r.wait_ns), (MS, 0));
    assert_eq!(r.flush_ns, Some(5 * MS), "11 to 16 ms");
    assert_eq!(r.other_ns, 4 * MS);
    assert!(r.measured.is_empty());
}
