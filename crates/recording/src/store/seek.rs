//! Moving in a store (the dashboard's jumps, through the glue in
//! `commands/replay.rs`): how far the store reaches, and where the next or
//! previous finding starts. A jump to a moment is
//! [`StoreReader::store`] with `since` set: the segment that holds it is
//! found from the segments' names, and only that segment is read from its
//! start (blocks before the moment are checked, not decompressed).
use std::{fs::File, io, path::Path};

use super::{SegmentFile, list, reader::StoreReader};
use crate::{
    block::BlockMeta,
    reader::{Frame, OpenError, RecordingReader},
};
use wbscope_model::{
    findings::{Engine, WARM_UP_NS},
    interval::IntervalLine,
    when::TimeWindow,
};

/// The first and last moments of the store in `dir`: the oldest block's
/// start (the segment's opening when it has none), and the newest
/// block's close (the newest segment's opening while it has no whole
/// block yet).
///
/// Cost: the oldest and newest segments are read for their blocks'
/// metadata, none decompressed; a segment is at most a sixteenth of
/// `--max-size` (`writer::SEGMENTS_PER_STORE`). An older segment is read
/// only when the newest has no readable block.
pub fn span(dir: &Path) -> Result<(u64, u64), OpenError> {
    let all = list(dir).map_err(|e| OpenError::Io(e.to_string()))?;
    let (Some(oldest), Some(newest)) = (all.first(), all.last()) else {
        return Err(OpenError::Io(
            "no segments (a store written by `wbscope record --store`)".into(),
        ));
    };
    let first = metas(oldest).first().map_or(oldest.start_unix_ns, |m| {
        m.first_unix_ns.min(oldest.start_unix_ns)
    });
    let last = all
        .iter()
        .rev()
        .find_map(|seg| metas(seg).last().map(|m| m.last_unix_ns))
        .map_or(newest.start_unix_ns, |l| l.max(newest.start_unix_ns));
    Ok((first, last))
}

/// The blocks' metadata of a segment, as far as it reads (none when it
/// does not open).
fn metas(seg: &SegmentFile) -> Vec<BlockMeta> {
    let Ok(file) = File::open(&seg.path) else {
        return Vec::new();
    };
    let Ok(reader) = RecordingReader::open(io::BufReader::new(file)) else {
        return Vec::new();
    };
    let mut reader = reader.collect_metas(false);
    for _ in reader.by_ref() {}
    reader.metas.unwrap_or_default()
}

/// A finding starting: the close of the interval it opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindingStart {
    pub unix_ns: u64,
    pub name: &'static str,
}

/// First stretch the search for an earlier finding looks back over; it
/// doubles until the start of the store (or of `within`).
const BACK_STEP_NS: u64 = 600 * 1_000_000_000;

/// Where the next finding starts after `from_ns` (`forward`), or the last
/// one before it, within `within` (the replay's `--since`/`--until`).
/// `wanted` is asked at every interval line: when it says no (a later
/// jump overtook the search), the search stops and finds nothing.
///
/// Findings are not stored (the recorder writes interval lines, not the
/// doctor's verdicts), so they are judged again here, the way the
/// dashboard judges them: the rules (`model::findings`) run over the
/// interval lines from [`WARM_UP_NS`] before the stretch searched, so a
/// finding that already holds there does not count as starting in it.
///
/// Cost: every block of the stretch is decompressed, only its interval
/// lines are decoded (call frames are skipped) and judged: forward, from
/// `from_ns` to the finding (to the end of the store when there is none);
/// backward, over stretches of 10 minutes, 20, 40 … back from `from_ns`,
/// so at most about twice the distance to the finding. Measured by the
/// `search_cost` test (debug build, on the project's 2-core VM): an hour
/// of one-second intervals with 100 calls each, 7.6 MB of store, searched
/// end to end in 1.7 s, where reading its every frame took 3.9 s.
pub fn find_finding(
    dir: &Path,
    from_ns: u64,
    forward: bool,
    within: TimeWindow,
    wanted: &dyn Fn() -> bool,
) -> Result<Option<FindingStart>, OpenError> {
    let floor = match within.since_ns {
        Some(s) => s,
        None => list(dir)
            .map_err(|e| OpenError::Io(e.to_string()))?
            .first()
            .map_or(0, |s| s.start_unix_ns),
    };
    let warm = |t: u64| t.saturating_sub(WARM_UP_NS).max(floor);
    if forward {
        let mut found = None;
        starts(dir, warm(from_ns), within.until_ns, wanted, |at| {
            if at.unix_ns > from_ns {
                found = Some(at);
            }
            found.is_none()
        })?;
        return Ok(found);
    }
    let mut step = BACK_STEP_NS;
    loop {
        let lo = from_ns.saturating_sub(step).max(floor);
        let mut found = None;
        starts(dir, warm(lo), Some(from_ns), wanted, |at| {
            if at.unix_ns >= lo && at.unix_ns < from_ns {
                found = Some(at);
            }
            true
        })?;
        if found.is_some() || lo <= floor || !wanted() {
            return Ok(found);
        }
        step = step.saturating_mul(2);
    }
}

/// Judges the interval lines of the store from `since` to `until` and
/// calls `each` with every finding that opens, until it returns false or
/// the search is no longer `wanted`.
fn starts(
    dir: &Path,
    since: u64,
    until: Option<u64>,
    wanted: &dyn Fn() -> bool,
    mut each: impl FnMut(FindingStart) -> bool,
) -> Result<(), OpenError> {
    let window = TimeWindow {
        since_ns: Some(since),
        until_ns: until,
    };
    let mut reader = StoreReader::store(dir, window)?.intervals_only();
    let mut engine = Engine::new();
    while let Some(frame) = reader.next() {
        let (Frame::Interval(value), Some(unix_ns)) = (frame, reader.last_wall_ns()) else {
            continue;
        };
        if !wanted() {
            return Ok(());
        }
        // A line this version cannot read is skipped, as the replay's
        // feed skips it.
        let Ok(line) = serde_json::from_value::<IntervalLine>(value) else {
            continue;
        };
        for event in engine.interval(&line) {
            if event.is_open()
                && !each(FindingStart {
                    unix_ns,
                    name: event.finding.name,
                })
            {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Test fixtures, also for the tests of crates above (feature
/// `test-support`): a store of known segments.
#[cfg(any(test, feature = "test-support"))]
// Built without cfg(test) for the tests of the crates above, which use
// only some of these fixtures.
#[cfg_attr(not(test), allow(dead_code, unused_imports))]
pub mod tests {
    use std::{fs, ops::Range};

    use super::*;
    use crate::store::writer::{
        StoreWriter,
        tests::{Fake, SEC, T0, block_ends, bounds, call_at, fake, header},
    };
    use wbscope_model::{interval::CallAggregate, kernel::KernelSnapshot};

    /// An interval line of one second ending `s` seconds after T0;
    /// throttled (300 ms of pauses, dirty over the free-run ceiling: the
    /// dirty-throttled finding, model/findings/dirty.rs) or quiet.
    fn line(s: u64, throttled: bool) -> IntervalLine {
        let snap = KernelSnapshot::default();
        let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
        if throttled {
            l.dirty.vmstat.nr_dirty_threshold = 2000;
            l.dirty.vmstat.nr_dirty_background_threshold = 1000;
            l.dirty.vmstat.nr_dirty = 1700;
            l.throttle.pauses = 10;
            l.throttle.pause_ms_total = 300;
        }
        l
    }

    /// A store of `secs` one-second intervals with a call each, throttled
    /// in the `episodes` (seconds after T0), in segments of at most 64 KiB
    /// (a 1 MiB store).
    pub fn store(secs: u64, episodes: &[Range<u64>]) -> (tempfile::TempDir, Fake) {
        let (t, f) = fake(u64::MAX / 4);
        let mut w = StoreWriter::open(&f.dir, bounds(1 << 20), header(), f.clone()).unwrap();
        for s in 1..=secs {
            f.now.set(T0 + s * SEC - SEC / 2);
            w.call(&call_at(f.now.get(), s)).unwrap();
            f.now.set(T0 + s * SEC);
            let throttled = episodes.iter().any(|e| e.contains(&s));
            w.interval(&line(s, throttled)).unwrap();
        }
        drop(w);
        (t, f)
    }

    /// Every frame's wall clock, in order.
    fn walls(r: &mut StoreReader) -> Vec<u64> {
        let mut out = Vec::new();
        while r.next().is_some() {
            out.push(r.last_wall_ns().unwrap());
        }
        out
    }

    fn since(t: u64) -> TimeWindow {
        TimeWindow {
            since_ns: Some(t),
            until_ns: None,
        }
    }

    #[test]
    fn a_seek_gives_the_first_frame_at_or_after_the_moment() {
        let (_t, f) = store(1200, &[]);
        let segs = list(&f.dir).unwrap();
        assert!(segs.len() >= 3, "several segments to choose from: {segs:?}");
        let all = walls(&mut StoreReader::store(&f.dir, TimeWindow::default()).unwrap());
        assert_eq!(all.len(), 2 * 1200);
        // A moment between frames, one on a frame, one in a later segment.
        for at in [
            T0 + 300 * SEC + SEC / 4,
            T0 + 700 * SEC,
            segs[2].start_unix_ns + 1,
        ] {
            let mut r = StoreReader::store(&f.dir, since(at)).unwrap();
            let got = walls(&mut r);
            let first = all.iter().position(|&w| w >= at).unwrap();
            assert_eq!(got, all[first..], "from {at}");
            assert!(first > 0 && all[first - 1] < at);
        }
        // The seek opens no segment before the one holding the moment:
        // the first header read is that segment's.
        let r = StoreReader::store(&f.dir, since(segs[2].start_unix_ns + 1)).unwrap();
        let opened = r.header.segment.as_ref().map(|s| s.opened_unix_ns);
        assert_eq!(opened, Some(segs[2].start_unix_ns));
        // Before the start: everything; past the end: nothing, no error.
        let before = walls(&mut StoreReader::store(&f.dir, since(T0 - 3600 * SEC)).unwrap());
        assert_eq!(before, all);
        let past = walls(&mut StoreReader::store(&f.dir, since(T0 + 7200 * SEC)).unwrap());
        assert!(past.is_empty());
        assert_eq!(span(&f.dir).unwrap(), (T0, T0 + 1200 * SEC));
    }

    #[test]
    fn a_seek_into_a_torn_last_segment_reads_its_whole_blocks() {
        let (_t, f) = store(600, &[]);
        let seg = list(&f.dir).unwrap().pop().unwrap();
        let whole = fs::read(&seg.path).unwrap();
        let ends = block_ends(&whole);
        // Cut 7 bytes into the last block, as kill -9 during its write.
        fs::write(&seg.path, &whole[..ends[ends.len() - 2] + 7]).unwrap();
        // The last whole block closed a second before the end.
        assert_eq!(span(&f.dir).unwrap().1, T0 + 599 * SEC);
        let mut r = StoreReader::store(&f.dir, since(T0 + 590 * SEC)).unwrap();
        let got = walls(&mut r);
        assert_eq!(*got.last().unwrap(), T0 + 599 * SEC);
        assert!(got.iter().all(|&w| w >= T0 + 590 * SEC));
        assert_eq!(got.len(), 2 * 10 - 1, "calls and intervals of 590.5..=599");
        assert_eq!(r.damage.len(), 1, "{:?}", r.damage);
        // Past the cut: nothing, the damage still named.
        let mut r = StoreReader::store(&f.dir, since(T0 + 600 * SEC)).unwrap();
        assert!(walls(&mut r).is_empty());
        assert_eq!(r.damage.len(), 1);
    }

    /// What a search costs when there is nothing to find: an hour of
    /// one-second intervals with 100 calls each, searched to its end.
    /// Prints the figures; `cargo test --release … search_cost --
    /// --ignored --nocapture` for the optimised ones.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn search_cost() {
        let (_t, f) = fake(u64::MAX / 4);
        let mut w = StoreWriter::open(&f.dir, bounds(1 << 30), header(), f.clone()).unwrap();
        for s in 1..=3600 {
            for i in 0..100 {
                f.now.set(T0 + (s - 1) * SEC + (i + 1) * SEC / 101);
                w.call(&call_at(f.now.get(), s * 100 + i)).unwrap();
            }
            f.now.set(T0 + s * SEC);
            w.interval(&line(s, false)).unwrap();
        }
        drop(w);
        let bytes: u64 = list(&f.dir).unwrap().iter().map(|s| s.bytes).sum();
        let t = std::time::Instant::now();
        assert_eq!(
            find_finding(&f.dir, T0, true, TimeWindow::default(), &|| true).unwrap(),
            None
        );
        let search = t.elapsed();
        let t = std::time::Instant::now();
        let frames = StoreReader::store(&f.dir, TimeWindow::default())
            .unwrap()
            .count();
        let read = t.elapsed();
        println!(
            "an hour, {bytes} bytes of store, 360000 calls: search {search:?}, \
             reading every frame {read:?} ({frames} frames)"
        );
    }

    #[test]
    fn the_next_and_previous_finding_starts() {
        let (_t, f) = store(1200, &[300..320, 900..915]);
        let all = TimeWindow::default();
        let next = |from| find_finding(&f.dir, from, true, all, &|| true).unwrap();
        let prev = |from| find_finding(&f.dir, from, false, all, &|| true).unwrap();
        let first = next(T0 + 10 * SEC).expect("the first episode");
        assert_eq!(first.name, wbscope_model::findings::RULES[0].name);
        assert!(
            (T0 + 300 * SEC..T0 + 303 * SEC).contains(&first.unix_ns),
            "{first:?}"
        );
        // From inside the first episode, the next start is the second's.
        let second = next(first.unix_ns).expect("the second episode");
        assert!(
            (T0 + 900 * SEC..T0 + 903 * SEC).contains(&second.unix_ns),
            "{second:?}"
        );
        assert_eq!(next(second.unix_ns), None, "none after the last");
        // Backward: more than 10 minutes back, so the search widens.
        assert_eq!(prev(second.unix_ns), Some(first.clone()));
        assert_eq!(prev(T0 + 1200 * SEC), Some(second));
        assert_eq!(prev(first.unix_ns), None, "none before the first");
        // Within a window: nothing after its end.
        let early = TimeWindow {
            since_ns: None,
            until_ns: Some(T0 + 600 * SEC),
        };
        assert_eq!(
            find_finding(&f.dir, first.unix_ns, true, early, &|| true).unwrap(),
            None
        );
    }

    #[test]
    fn a_search_no_longer_wanted_stops_finding_nothing() {
        let (_t, f) = store(1200, &[300..320, 900..915]);
        let asked = std::cell::Cell::new(0);
        let wanted = || {
            asked.set(asked.get() + 1);
            asked.get() <= 10
        };
        let all = TimeWindow::default();
        assert_eq!(find_finding(&f.dir, T0, true, all, &wanted).unwrap(), None);
        assert_eq!(asked.get(), 11, "it stopped when told");
        assert!(
            find_finding(&f.dir, T0, true, all, &|| true)
                .unwrap()
                .is_some()
        );
    }
}
