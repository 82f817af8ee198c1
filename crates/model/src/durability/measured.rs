//! The waits function hooks measured inside an fsync (writeback-ebpf
//! syncwait.rs) in place of the windows inferred from the order of the
//! events, and the devices' cache flushes an fsync with no flush part of
//! its own falls around.
use writeback_common::{FlushRequest, sync_flags};

use super::Span;
use crate::DevId;

/// A completed block request that carried a cache flush, as the block
/// programs sent it (writeback_common [`FlushRequest`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFlush {
    /// The whole disk.
    pub dev: DevId,
    /// The filesystems' devices that wait on this disk's flushes: the
    /// disk, its partitions, and btrfs's anonymous devices mounted from
    /// them (the tracer's, from sysfs and mountinfo).
    pub devices: Vec<DevId>,
    /// writeback_common `flush_class`.
    pub class: u32,
    pub issue_ns: u64,
    pub complete_ns: u64,
}

impl From<&FlushRequest> for DeviceFlush {
    fn from(f: &FlushRequest) -> DeviceFlush {
        DeviceFlush {
            dev: DevId::from_kernel(f.dev),
            devices: Vec::new(),
            class: f.class,
            issue_ns: f.issue_ns,
            complete_ns: f.complete_ns,
        }
    }
}

/// A stretch of an fsync's time, `(from, to)` in ns.
pub(super) type Window = (u64, u64);
/// No such part.
pub(super) const EMPTY: Window = (0, 0);

/// The windows of wait, journal and flush with the function hooks'
/// measurements in place of the inferred ones, and which parts were
/// measured; `None` when no hook saw the span. An inferred window is cut where a measured one beside it begins or
/// ends (the functions run in this order: pages, journal, flush), and
/// a measurement that would not tile the span is not used.
pub(super) fn windows(
    s: &Span,
    own_ends: impl Iterator<Item = u64> + Clone,
    inferred: [Window; 3],
) -> Option<([Window; 3], Vec<&'static str>)> {
    let bits = [
        sync_flags::WAIT_HOOKED,
        sync_flags::JOURNAL_HOOKED,
        sync_flags::FLUSH_HOOKED,
    ];
    if bits.iter().all(|&b| s.flags & b == 0) {
        return None;
    }
    let within = |(from, to): Window| {
        let from = from.clamp(s.start_ns, s.end_ns);
        (from, to.clamp(from, s.end_ns))
    };
    let mut windows = inferred;
    let mut hooked = [false; 3];
    for (i, (&bit, name)) in bits.iter().zip(["wait", "journal", "flush"]).enumerate() {
        if s.flags & bit == 0 {
            continue;
        }
        let (from, to) = within([s.wait, s.journal, s.flush][i]);
        // The page wait begins after the span's own writeback inside
        // `file_write_and_wait_range()`.
        let from = if name == "wait" {
            own_ends.clone().filter(|&e| e <= to).fold(from, u64::max)
        } else {
            from
        };
        windows[i] = (from, to);
        hooked[i] = true;
    }
    // The flush hook is attached with the page waits' (one
    // candidate): on ext4 and xfs, whose fsync flushes the cache
    // through `blkdev_issue_flush()` when its journal did not, a
    // measured wait without a flush is a flush of 0 (the commit's own
    // REQ_PREFLUSH/FUA carried it, inside the journal part). btrfs
    // flushes through its own bios: not said.
    let fs_flushes = s.flags & (sync_flags::EXT4 | sync_flags::XFS) != 0;
    if hooked[0] && !hooked[2] && fs_flushes {
        windows[2] = (s.end_ns, s.end_ns);
        hooked[2] = true;
    }
    // Cut each inferred window to the measured ones around it; a
    // window measured to be absent leaves its time to `other_ns`.
    for i in 0..3 {
        if hooked[i] {
            continue;
        }
        let (mut from, mut to) = windows[i];
        for j in (0..i).filter(|&j| hooked[j]) {
            from = from.max(windows[j].1);
        }
        for j in (i + 1..3).filter(|&j| hooked[j]) {
            to = to.min(windows[j].0);
        }
        windows[i] = if windows[i] == EMPTY {
            EMPTY
        } else {
            (from, to.max(from))
        };
    }
    // ext4 issues its own flush after the commit: with the journal
    // measured and the flush not, what follows the journal wait.
    if hooked[1] && !hooked[2] && windows[2] != EMPTY {
        windows[2] = (windows[1].1, s.end_ns.max(windows[1].1));
    }
    let mut sorted: Vec<Window> = windows.iter().copied().filter(|w| *w != EMPTY).collect();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0].1 > w[1].0) {
        return None;
    }
    let names = ["wait", "journal", "flush"];
    let measured = (0..3).filter(|&i| hooked[i]).map(|i| names[i]).collect();
    Some((windows, measured))
}
