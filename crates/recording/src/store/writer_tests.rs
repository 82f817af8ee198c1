//! The store's bounds without the kernel: a fake clock and a fake
//! filesystem size (the files are real, in a temporary directory).
use std::{cell::Cell, rc::Rc};

use super::*;
use crate::{
    reader::{Damage, Frame},
    store::{info, reader::StoreReader},
};
use wbscope_model::{DevId, when::TimeWindow};

pub const SEC: u64 = 1_000_000_000;
/// 2026-12-02T00:00:00Z.
pub const T0: u64 = 1_796_169_600 * SEC;

/// A clock the test moves, and a filesystem of `capacity` bytes holding
/// the store's files and nothing else.
#[derive(Clone)]
pub struct Fake {
    pub(crate) now: Rc<Cell<u64>>,
    capacity: Rc<Cell<u64>>,
    /// Bytes others hold on the filesystem.
    others: Rc<Cell<u64>>,
    pub dir: PathBuf,
}

impl Fake {
    fn used(&self) -> u64 {
        fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| allocated(e.unwrap().metadata().unwrap().len()))
            .sum()
    }
}

impl Env for Fake {
    fn now(&self) -> (u64, u64) {
        let t = self.now.get();
        (t, t - T0 + 1000)
    }

    fn space(&self, _dir: BorrowedFd<'_>) -> io::Result<Space> {
        let cap = self.capacity.get();
        Ok(Space {
            avail: cap.saturating_sub(self.used() + self.others.get()),
            total: cap,
        })
    }

    fn sync(&self, _file: &File) -> io::Result<()> {
        Ok(())
    }
}

pub(crate) fn header() -> Header {
    Header {
        format_version: 1,
        wbscope_version: "test".into(),
        host: "h".into(),
        kernel: "6.18".into(),
        start_unix_ns: T0,
        start_monotonic_ns: 1000,
        probe_plan: serde_json::json!({"kernel": "6.18", "concepts": []}),
        field_offsets: serde_json::json!({}),
        filter: serde_json::json!({}),
        segment: None,
    }
}

/// A call ending at fake time `t`, with fields that compress about as
/// well as real calls' (a pseudo-random inode and size).
pub(crate) fn call_at(t: u64, i: u64) -> CallRecord {
    let r = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    CallRecord {
        dev: DevId::from_kernel((8 << 20) | 1),
        ino: 10_000 + r % 5000,
        tgid: 1 + (r % 7) as u32,
        comm: "pg".into(),
        start_ns: t - T0 + 1000 - 50,
        duration_ns: 50,
        nr_to_write: (r % 4096) as i64,
        pages_written: (r % 1024) as i64,
        ..CallRecord::default()
    }
}

pub(crate) fn fake(capacity: u64) -> (tempfile::TempDir, Fake) {
    let dir = tempfile::tempdir().unwrap();
    let f = Fake {
        now: Rc::new(Cell::new(T0)),
        capacity: Rc::new(Cell::new(capacity)),
        others: Rc::new(Cell::new(0)),
        dir: dir.path().join("store"),
    };
    fs::create_dir(&f.dir).unwrap();
    (dir, f)
}

/// `secs` seconds of `rate` calls a second, one interval a second;
/// `check` after every interval.
fn run(
    w: &mut StoreWriter<Fake>,
    f: &Fake,
    secs: u64,
    rate: u64,
    mut check: impl FnMut(&StoreWriter<Fake>),
) {
    for _ in 0..secs {
        let start = f.now.get();
        for i in 0..rate {
            f.now.set(start + (i + 1) * SEC / (rate + 1));
            w.call(&call_at(f.now.get(), start / 1000 + i)).unwrap();
        }
        f.now.set(start + SEC);
        w.interval(&serde_json::json!({"type": "interval", "calls": rate}))
            .unwrap();
        check(w);
    }
}

pub(crate) fn bounds(max_size: u64) -> Bounds {
    Bounds {
        keep: None,
        max_size,
        min_free_percent: 0.0,
    }
}

#[test]
fn the_store_never_exceeds_max_size_and_keeps_the_newest() {
    let (_t, f) = fake(u64::MAX / 4);
    let max = 512 << 10;
    let mut w = StoreWriter::open(&f.dir, bounds(max), header(), f.clone()).unwrap();
    let mut most = 0;
    run(&mut w, &f, 300, 500, |w| {
        let used = f.used();
        // With the directory's own block, as `du` counts it.
        assert!(used + ALLOC_UNIT <= max, "{used} > {max}");
        assert!(w.size() <= max);
        most = most.max(used);
    });
    assert!(w.stats.segments_deleted > 0, "{:?}", w.stats);
    assert!(most > max / 2, "the store filled up to {most}");
    assert_eq!(w.stats.calls_not_kept, 0);
    // No one segment is a large share of the store.
    for s in list(&f.dir).unwrap() {
        assert!(s.bytes <= max / SEGMENTS_PER_STORE.min(8), "{s:?}");
    }
    // What is left is the newest stretch, whole: the last call is there,
    // and the calls are in order with no gap.
    let last = f.now.get();
    let calls: Vec<u64> = StoreReader::store(&f.dir, TimeWindow::default())
        .unwrap()
        .filter_map(|fr| match fr {
            Frame::Call(c) => Some(c.start_ns + c.duration_ns),
            _ => None,
        })
        .collect();
    assert!(calls.len() > 1000);
    assert!(calls.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        *calls.last().unwrap(),
        last - SEC + 500 * SEC / 501 - T0 + 1000
    );
}

#[test]
fn since_gives_that_stretch_and_nothing_older() {
    let (_t, f) = fake(u64::MAX / 4);
    let mut w = StoreWriter::open(&f.dir, bounds(4 << 20), header(), f.clone()).unwrap();
    run(&mut w, &f, 120, 200, |_| {});
    let since = f.now.get() - 60 * SEC;
    let window = TimeWindow {
        since_ns: Some(since),
        until_ns: Some(f.now.get() - 30 * SEC),
    };
    let r = StoreReader::store(&f.dir, window).unwrap();
    let (mut calls, mut intervals) = (0, 0);
    for fr in r {
        match fr {
            Frame::Call(c) => {
                let wall = c.start_ns + c.duration_ns - 1000 + T0;
                assert!(wall >= since && wall < since + 30 * SEC, "{wall}");
                calls += 1;
            }
            Frame::Interval(_) => intervals += 1,
            Frame::Summary(_) => panic!("a window has no summary"),
        }
    }
    assert_eq!(calls, 30 * 200);
    assert_eq!(intervals, 30);
}

#[test]
fn keep_drops_segments_by_age() {
    let (_t, f) = fake(u64::MAX / 4);
    let b = Bounds {
        keep: Some(Duration::from_secs(2 * 3600)),
        ..bounds(1 << 30)
    };
    let mut w = StoreWriter::open(&f.dir, b, header(), f.clone()).unwrap();
    // Ten hours of one interval a minute: segments close by the hour.
    for _ in 0..600 {
        f.now.set(f.now.get() + 60 * SEC);
        w.call(&call_at(f.now.get(), f.now.get())).unwrap();
        w.interval(&serde_json::json!({"type": "interval"}))
            .unwrap();
    }
    let segs = list(&f.dir).unwrap();
    let now = f.now.get();
    assert!(segs.len() <= 4, "{segs:?}");
    // The oldest kept segment ends (where the next starts) within --keep.
    assert!(segs[1].start_unix_ns >= now - 2 * 3600 * SEC);
    assert!(segs[0].start_unix_ns >= now - 4 * 3600 * SEC);
}

#[test]
fn min_free_is_kept_then_frames_are_not_kept_then_resume_with_the_gap_named() {
    // A 1.5 MiB filesystem, 25 % to stay free, a store allowed 2 MiB:
    // the free-space bound is the one that bites.
    let cap = 3 << 19;
    let (_t, f) = fake(cap);
    let b = Bounds {
        min_free_percent: 25.0,
        ..bounds(2 << 20)
    };
    let mut w = StoreWriter::open(&f.dir, b, header(), f.clone()).unwrap();
    run(&mut w, &f, 200, 500, |_| {
        assert!(cap - f.used() >= cap / 4, "free {}", cap - f.used());
    });
    assert!(w.stats.segments_deleted > 0);
    assert_eq!(w.stats.calls_not_kept, 0);
    // Someone else fills the filesystem: the closed segments are
    // deleted, then nothing is written.
    f.others.set(cap);
    let stop = f.now.get();
    run(&mut w, &f, 10, 500, |_| {});
    assert_eq!(w.stats.calls_not_kept, 10 * 500, "{:?}", w.stats);
    assert_eq!(w.stats.intervals_not_kept, 10);
    // The closed segments are gone; the active one may have been closed
    // for its size and gone too.
    assert!(list(&f.dir).unwrap().len() <= 1);
    // Space returns: writing resumes, and the next block names the gap.
    f.others.set(0);
    run(&mut w, &f, 5, 500, |_| {});
    assert_eq!(w.stats.calls_not_kept, 10 * 500);
    let info = info::summarize(&f.dir).unwrap();
    let gap = info
        .gaps
        .iter()
        .find(|g| g.kind == "not kept")
        .expect("the gap is reported");
    assert_eq!(gap.calls_not_kept, 5000);
    assert_eq!(gap.from_unix_ns, stop);
    assert_eq!(gap.to_unix_ns, stop + 10 * SEC);
}

#[test]
fn a_block_cut_by_a_crash_is_read_to_the_last_whole_block() {
    let (_t, f) = fake(u64::MAX / 4);
    let mut w = StoreWriter::open(&f.dir, bounds(64 << 20), header(), f.clone()).unwrap();
    run(&mut w, &f, 10, 100, |_| {});
    drop(w);
    let seg = list(&f.dir).unwrap().pop().unwrap();
    let whole = fs::read(&seg.path).unwrap();
    // Cut 7 bytes into the last block (as kill -9 during its write(2)).
    let ends = block_ends(&whole);
    let cut = ends[ends.len() - 2] + 7;
    fs::write(&seg.path, &whole[..cut]).unwrap();
    let mut r = StoreReader::store(&f.dir, TimeWindow::default()).unwrap();
    let calls = r.by_ref().filter(|fr| matches!(fr, Frame::Call(_))).count();
    assert_eq!(calls, 9 * 100);
    assert_eq!(r.damage.len(), 1);
    assert_eq!(
        r.damage[0].damage,
        Damage::Truncated {
            offset: ends[ends.len() - 2]
        }
    );
    assert!(r.damage[0].to_string().starts_with(&seg.name()));
}

/// Where each block of a segment ends (from the frames' lengths).
pub(crate) fn block_ends(bytes: &[u8]) -> Vec<usize> {
    let mut at = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize + 4;
    let mut ends = vec![at];
    while at < bytes.len() {
        at += FRAME_HEADER_LEN
            + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        ends.push(at);
    }
    ends
}

#[test]
fn a_restarted_recorder_appends_and_the_downtime_is_a_gap() {
    let (_t, f) = fake(u64::MAX / 4);
    let mut w = StoreWriter::open(&f.dir, bounds(64 << 20), header(), f.clone()).unwrap();
    run(&mut w, &f, 5, 10, |_| {});
    drop(w);
    let down = f.now.get();
    f.now.set(down + 600 * SEC);
    let mut w = StoreWriter::open(&f.dir, bounds(64 << 20), header(), f.clone()).unwrap();
    run(&mut w, &f, 5, 10, |_| {});
    drop(w);
    let info = info::summarize(&f.dir).unwrap();
    assert_eq!(info.segments.len(), 2);
    assert_eq!(
        info.gaps,
        vec![info::Gap {
            kind: "recorder down",
            from_unix_ns: down,
            to_unix_ns: down + 600 * SEC,
            calls_not_kept: 0
        }]
    );
    assert_eq!(info.calls, 100);
    assert!(info.ratio.unwrap() > 1.0);
}

/// `give_to` hands the directory, its lock and its segments to the user
/// the run becomes, and nothing else: not another file in it, not what a
/// link named like a segment points to (the tests run as root).
#[test]
fn give_to_hands_over_the_store_and_nothing_else() {
    use std::os::unix::fs::MetadataExt as _;
    let (t, f) = fake(u64::MAX / 4);
    let mut w = StoreWriter::open(&f.dir, bounds(64 << 20), header(), f.clone()).unwrap();
    run(&mut w, &f, 2, 10, |_| {});
    drop(w);
    let outside = t.path().join("outside");
    fs::write(&outside, b"not the store's").unwrap();
    let other = f.dir.join("notes.txt");
    fs::write(&other, b"left alone").unwrap();
    let link = f.dir.join(segment_name(T0 - 3600 * SEC));
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let w = StoreWriter::open(&f.dir, bounds(64 << 20), header(), f.clone()).unwrap();
    let (uid, gid) = (65534, 65534);
    w.give_to(uid, gid).unwrap();
    let owner = |p: &Path| {
        let m = fs::symlink_metadata(p).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner(&f.dir), (uid, gid));
    assert_eq!(owner(&f.dir.join(super::super::LOCK_FILE)), (uid, gid));
    let segs = list(&f.dir).unwrap();
    assert_eq!(segs.len(), 1, "{segs:?}");
    assert_eq!(owner(&segs[0].path), (uid, gid));
    for untouched in [&outside, &other, &link] {
        assert_eq!(owner(untouched), (0, 0), "{}", untouched.display());
    }
    // Again: nothing left to change.
    w.give_to(uid, gid).unwrap();
}
