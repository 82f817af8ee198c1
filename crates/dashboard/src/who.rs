//! Who dirtied it, in the dashboard: the attribution of model/dirtier.rs
//! run over the live calls and the once-a-second reading of the dirtier
//! maps ([`LiveWho`], owned by the `App`), and the per-process totals the
//! who pane draws ([`WhoModel`], part of the `Model`), fed by each
//! interval's `owners` whether the interval was built live or read back
//! from a recording.
use std::collections::BTreeMap;

use wbscope_model::{
    CallRecord,
    dirtier::{Attribution, AttributionMode, DirtierSnapshot, OwnerLine, OwnerTotal},
};

/// Calls held for charging at most; past it a call is charged at once,
/// against the maps as last read (its pages dirtied since then go to
/// `(unknown)`). At the kernel's rates (a few thousand writepages calls a
/// second on a busy host) a second of calls stays well under it.
const MAX_PENDING: usize = 1 << 16;

/// Processes the who pane keeps at most; past it the one that dirtied and
/// had written the fewest pages goes (the pane shows the largest anyway).
pub(crate) const MAX_WHO_ROWS: usize = 1024;

/// The live attribution state. Calls are charged when the next reading of
/// the maps arrives, not as they come: the reading then holds every page
/// dirtied before the call (the trace loop gets the same by reading the
/// maps again when a batch wrote more than is outstanding, which the
/// dashboard's task cannot do: the maps are read by the sampler). Calls
/// still short after a reading wait for one more, as the trace loop
/// reads twice (`Attribution::charge_batch`).
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveWho {
    attribution: Attribution,
    pending: Vec<CallRecord>,
    /// The pending calls were short at the last reading and held for this
    /// one.
    held: bool,
}

impl LiveWho {
    pub(crate) fn new(mode: AttributionMode) -> LiveWho {
        LiveWho {
            attribution: Attribution::new(mode),
            ..LiveWho::default()
        }
    }

    /// A call to charge at the next reading; past [`MAX_PENDING`] it is
    /// charged at once and returned.
    pub(crate) fn call(&mut self, call: &CallRecord) -> Option<CallRecord> {
        if self.pending.len() >= MAX_PENDING {
            let mut call = call.clone();
            self.attribution.charge(&mut call);
            Some(call)
        } else {
            self.pending.push(call.clone());
            None
        }
    }

    /// A reading of the maps: what grew since the last one becomes
    /// outstanding, then the held calls are charged and returned (for the
    /// fsync join, which charges a commit's data to the dirtiers).
    pub(crate) fn reading(&mut self, snap: &DirtierSnapshot) -> Vec<CallRecord> {
        self.attribution.update(snap);
        if !self.held && self.attribution.short(&self.pending) {
            self.held = true;
            return Vec::new();
        }
        self.held = false;
        let mut calls = std::mem::take(&mut self.pending);
        for call in &mut calls {
            self.attribution.charge(call);
        }
        calls
    }

    /// Dirtyings read between two readings (the ring woke the sampler):
    /// what grew becomes outstanding; the held calls wait for the next
    /// reading.
    pub(crate) fn catch_up(&mut self, snap: &DirtierSnapshot) {
        self.attribution.update(snap);
    }

    /// The interval's `owners` (resets the interval).
    pub(crate) fn owners(&mut self) -> Vec<OwnerLine> {
        self.attribution.take_owners()
    }

    /// The interval's pages charged per (process, device), for the
    /// ledger.
    pub(crate) fn take_written_on(
        &mut self,
    ) -> std::collections::BTreeMap<(u32, wbscope_model::DevId), u64> {
        self.attribution.take_written_on()
    }
}

/// One process's totals since start (or the last reset): its owner lines
/// added up by the model's sum ([`OwnerTotal::add`], the report's too).
pub(crate) type WhoRow = OwnerTotal;

/// Pages of its own a process wrote back itself (fsync,
/// sync_file_range, or throttled into writeback).
pub(crate) fn by_self(r: &WhoRow) -> u64 {
    r.written.saturating_sub(r.by_others)
}

/// Pages another process's sync wrote: others but not the flusher.
pub(crate) fn by_others_sync(r: &WhoRow) -> u64 {
    r.by_others.saturating_sub(r.by_flusher)
}

/// Per process (tgid) since start: the who pane's slice of the state.
/// `(others)` and `(unknown)` rows have pid 0 and add up under it.
#[derive(Clone, Debug, Default)]
pub(crate) struct WhoModel {
    pub(crate) rows: BTreeMap<u32, WhoRow>,
    /// Rows dropped to stay within [`MAX_WHO_ROWS`].
    pub(crate) evicted: u64,
    /// Intervals that carried `owners`.
    pub(crate) intervals: u64,
}

impl WhoModel {
    pub(crate) fn on_owners(&mut self, owners: &[OwnerLine]) {
        if owners.is_empty() {
            return;
        }
        self.intervals += 1;
        for o in owners {
            if !self.rows.contains_key(&o.pid) && self.rows.len() >= MAX_WHO_ROWS {
                let smallest = self
                    .rows
                    .iter()
                    .min_by_key(|(_, r)| (r.dirtied + r.written, r.throttle_pauses))
                    .map(|(pid, _)| *pid);
                if let Some(pid) = smallest {
                    self.rows.remove(&pid);
                    self.evicted += 1;
                }
            }
            let row = &mut self.rows.entry(o.pid).or_default();
            if row.comm != o.comm {
                row.comm.clone_from(&o.comm);
            }
            row.pid = o.pid;
            row.cgroup_id = o.cgroup_id;
            row.add(&o.into());
        }
    }

    /// Per cgroup: the sum of its processes' rows, and how many.
    pub(crate) fn by_cgroup(&self) -> BTreeMap<u64, (WhoRow, usize)> {
        let mut groups: BTreeMap<u64, (WhoRow, usize)> = BTreeMap::new();
        for r in self.rows.values() {
            let g = groups.entry(r.cgroup_id).or_default();
            g.0.cgroup_id = r.cgroup_id;
            g.0.add(r);
            g.1 += 1;
        }
        groups
    }

    pub(crate) fn reset(&mut self) {
        *self = WhoModel::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(pid: u32, cgroup: u64, dirtied: u64, written: u64, others: u64) -> OwnerLine {
        OwnerLine {
            pid,
            comm: format!("p{pid}"),
            cgroup_id: cgroup,
            pages_dirtied: dirtied,
            dirtied_unmeasured: false,
            write_call_bytes: None,
            cancelled_bytes: None,
            pages_written: written,
            pages_written_by_others: others,
            pages_written_by_flusher: others / 2,
            throttle_pauses: 1,
            throttle_pause_ms: 10,
            pages_dirtied_error: None,
        }
    }

    /// A call still short after a reading (the reading missed a CPU's
    /// cached pages) waits for the next one, once.
    #[test]
    fn live_calls_short_after_a_reading_wait_for_the_next() {
        use wbscope_model::{DevId, dirtier::DirtierReading};
        let dev = (7 << 20) | 1;
        let snap = |pages: u64| DirtierSnapshot {
            entries: vec![DirtierReading {
                dev,
                ino: 5,
                tgid: 10,
                pages,
                pid: 10,
                comm: "dd".into(),
                cgroup_id: 1,
                owner_cgroup_id: 0,
                born_ns: 1,
            }],
            ..Default::default()
        };
        let call = CallRecord {
            dev: DevId::from_kernel(dev),
            ino: 5,
            tgid: 99,
            pages_written: 1024,
            start_seen: true,
            ..CallRecord::default()
        };
        let mut live = LiveWho::default();
        live.call(&call);
        live.reading(&snap(512));
        let held = live.owners();
        assert!(held.iter().all(|o| o.pages_written == 0), "{held:?}");
        live.reading(&snap(1024));
        let owners = live.owners();
        let dd = owners.iter().find(|o| o.pid == 10).expect("dd");
        assert_eq!(dd.pages_written, 1024, "{owners:?}");
        // Held once only: a call no reading accounts for is charged at the
        // reading after, the rest to (unknown).
        live.call(&call);
        live.reading(&snap(1024));
        assert_eq!((live.pending.len(), live.held), (1, true));
        live.reading(&snap(1024));
        assert_eq!((live.pending.len(), live.held), (0, false));
        let owners = live.owners();
        assert!(owners.iter().all(|o| o.pages_written == 0), "{owners:?}");
    }

    /// A burst's dirtyings read between two samples are kept: the call on
    /// that inode, charged at the next sample (whose own reading has
    /// nothing new), goes to the process that made it dirty.
    #[test]
    fn dirtyings_caught_up_between_samples_charge_the_next_ones_calls() {
        use wbscope_model::{DevId, dirtier::InodeDirtyingReading};
        let dev = (7 << 20) | 1;
        let burst = DirtierSnapshot {
            dirtyings: vec![InodeDirtyingReading {
                dev,
                ino: 5,
                at_ns: 10,
                tgid: 42,
                comm: "tar".into(),
                cgroup_id: 1,
                owner_cgroup_id: 0,
            }],
            ..Default::default()
        };
        let call = CallRecord {
            dev: DevId::from_kernel(dev),
            ino: 5,
            tgid: 99,
            pages_written: 1,
            start_seen: true,
            start_ns: 20,
            ..CallRecord::default()
        };
        let mut live = LiveWho::new(AttributionMode::PerInode);
        live.catch_up(&burst);
        live.call(&call);
        let charged = live.reading(&DirtierSnapshot::default());
        assert_eq!(charged.len(), 1);
        let tar = live.owners().into_iter().find(|o| o.pid == 42);
        assert_eq!(tar.map(|o| o.pages_written), Some(1));
    }

    #[test]
    fn owners_add_up_per_process_and_per_cgroup() {
        let mut m = WhoModel::default();
        m.on_owners(&[owner(1, 7, 100, 50, 40), owner(2, 7, 10, 0, 0)]);
        m.on_owners(&[owner(1, 7, 100, 50, 10), owner(3, 9, 5, 5, 0)]);
        m.on_owners(&[]);
        assert_eq!(m.intervals, 2);
        let p1 = &m.rows[&1];
        assert_eq!((p1.dirtied, p1.written, p1.by_others), (200, 100, 50));
        assert_eq!(
            (by_self(p1), p1.by_flusher, by_others_sync(p1)),
            (50, 25, 25)
        );
        assert_eq!(p1.throttle_pauses, 2);
        let g = m.by_cgroup();
        assert_eq!(g[&7].1, 2);
        assert_eq!(g[&7].0.dirtied, 210);
        assert_eq!(g[&9].0.written, 5);
    }

    #[test]
    fn rows_are_bounded_and_the_smallest_goes() {
        let mut m = WhoModel::default();
        m.on_owners(&[owner(1, 0, 1 << 20, 0, 0)]);
        let many: Vec<OwnerLine> = (2..MAX_WHO_ROWS as u32 + 10)
            .map(|p| owner(p, 0, 1, 0, 0))
            .collect();
        m.on_owners(&many);
        assert_eq!(m.rows.len(), MAX_WHO_ROWS);
        assert_eq!(m.evicted, 9);
        assert!(m.rows.contains_key(&1), "the largest stays");
    }

    #[test]
    fn held_calls_are_charged_against_the_next_reading() {
        use wbscope_model::dirtier::DirtierReading;
        let mut live = LiveWho::default();
        // The call comes before the reading that holds the pages it wrote.
        let call = CallRecord::from(&writeback_common::WritepagesCall {
            dev: 1,
            ino: 5,
            tgid: 99,
            pages_written: 30,
            ..Default::default()
        });
        live.call(&call);
        let snap = DirtierSnapshot {
            entries: vec![DirtierReading {
                dev: 1,
                ino: 5,
                tgid: 42,
                pid: 42,
                pages: 30,
                comm: "dd".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        live.reading(&snap);
        let owners = live.owners();
        let dd = owners.iter().find(|o| o.pid == 42).unwrap();
        assert_eq!((dd.pages_dirtied, dd.pages_written), (30, 30));
        assert_eq!(dd.pages_written_by_others, 30, "pid 99 wrote them");
    }
}
