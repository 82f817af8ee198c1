//! Owners added up: an interval's `owners` lines summed per process over
//! many intervals (the report's who-dirtied table, the dashboard's who
//! pane), or over processes (the `(others)` row past the rows an interval
//! lists, a cgroup's row). One sum for all of them, so that a figure
//! added to [`OwnerLine`] is added up everywhere it is shown.
use super::OwnerLine;

/// One owner's pages and pauses over several lines (or several owners'
/// in one row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerTotal {
    /// Process (thread group) id; 0 for `(others)`, `(unknown)` and sums
    /// over processes.
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// Pages it took from clean to dirty.
    pub dirtied: u64,
    /// Its pages written back, by anyone.
    pub written: u64,
    /// The part another process wrote (the flusher included).
    pub by_others: u64,
    /// The part written under flusher work (a kworker).
    pub by_flusher: u64,
    /// Its `balance_dirty_pages` pauses, and their sum (ms).
    pub throttle_pauses: u64,
    pub throttle_ms: u64,
    /// Bytes of its write calls and its dirty bytes cancelled
    /// ([`OwnerLine::write_call_bytes`]); `None` until a line had them.
    pub write_call_bytes: Option<u64>,
    pub cancelled_bytes: Option<u64>,
}

/// `a + b` where either is known.
pub(crate) fn add_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        _ => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

impl OwnerTotal {
    /// Adds `o`'s pages and pauses; pid, comm and cgroup stay this row's.
    pub fn add(&mut self, o: &OwnerTotal) {
        self.dirtied += o.dirtied;
        self.written += o.written;
        self.by_others += o.by_others;
        self.by_flusher += o.by_flusher;
        self.throttle_pauses += o.throttle_pauses;
        self.throttle_ms += o.throttle_ms;
        self.write_call_bytes = add_known(self.write_call_bytes, o.write_call_bytes);
        self.cancelled_bytes = add_known(self.cancelled_bytes, o.cancelled_bytes);
    }

    /// Written by itself, by the flusher, by other processes: the three
    /// add up to `written` ([`written_split`]).
    pub fn written_split(&self) -> (u64, u64, u64) {
        written_split(self.written, self.by_others, self.by_flusher)
    }
}

impl OwnerLine {
    /// Written by itself, by the flusher, by other processes, of this one
    /// interval ([`written_split`]).
    pub fn written_split(&self) -> (u64, u64, u64) {
        written_split(
            self.pages_written,
            self.pages_written_by_others,
            self.pages_written_by_flusher,
        )
    }
}

/// `(own, flusher, others)` of `written` pages: the three add up to it.
/// The flusher's part is within `by_others` (a kworker is another
/// process) and is kept apart should it not be (a kworker that dirtied
/// pages its own flusher work then wrote).
fn written_split(written: u64, by_others: u64, by_flusher: u64) -> (u64, u64, u64) {
    let flusher = by_flusher.min(written);
    let others = by_others.saturating_sub(flusher);
    let own = written.saturating_sub(by_others.max(flusher));
    (own, flusher, others)
}

impl From<&OwnerLine> for OwnerTotal {
    fn from(o: &OwnerLine) -> OwnerTotal {
        OwnerTotal {
            pid: o.pid,
            comm: o.comm.clone(),
            cgroup_id: o.cgroup_id,
            dirtied: o.pages_dirtied,
            written: o.pages_written,
            by_others: o.pages_written_by_others,
            by_flusher: o.pages_written_by_flusher,
            throttle_pauses: o.throttle_pauses,
            throttle_ms: o.throttle_pause_ms,
            write_call_bytes: o.write_call_bytes,
            cancelled_bytes: o.cancelled_bytes,
        }
    }
}

/// A sum as an interval's line. Without `pages_dirtied_error`: the
/// half-widths of sampled counts do not add up as the counts do.
impl From<OwnerTotal> for OwnerLine {
    fn from(t: OwnerTotal) -> OwnerLine {
        OwnerLine {
            pid: t.pid,
            comm: t.comm,
            cgroup_id: t.cgroup_id,
            pages_dirtied: t.dirtied,
            dirtied_unmeasured: false,
            pages_written: t.written,
            pages_written_by_others: t.by_others,
            pages_written_by_flusher: t.by_flusher,
            throttle_pauses: t.throttle_pauses,
            throttle_pause_ms: t.throttle_ms,
            pages_dirtied_error: None,
            write_call_bytes: t.write_call_bytes,
            cancelled_bytes: t.cancelled_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_add_up_and_written_splits_into_three_parts() {
        let line = OwnerLine {
            pid: 7,
            comm: "dd".into(),
            cgroup_id: 3,
            pages_dirtied: 100,
            pages_written: 50,
            pages_written_by_others: 40,
            pages_written_by_flusher: 30,
            throttle_pauses: 2,
            throttle_pause_ms: 20,
            pages_dirtied_error: Some(5),
            dirtied_unmeasured: false,
            write_call_bytes: Some(4096),
            cancelled_bytes: None,
        };
        let mut t = OwnerTotal::from(&line);
        t.add(&OwnerTotal::from(&line));
        assert_eq!((t.pid, t.comm.as_str(), t.cgroup_id), (7, "dd", 3));
        assert_eq!((t.dirtied, t.written, t.throttle_ms), (200, 100, 40));
        assert_eq!(t.written_split(), (20, 60, 20));
        // A flusher part beyond the others' is the flusher's all the same.
        let odd = OwnerTotal {
            written: 10,
            by_others: 2,
            by_flusher: 6,
            ..OwnerTotal::default()
        };
        assert_eq!(odd.written_split(), (4, 6, 0));
        assert_eq!(line.written_split(), (10, 30, 10));
        let back = OwnerLine::from(t);
        assert_eq!(back.pages_written_by_flusher, 60);
        assert_eq!(back.pages_dirtied_error, None);
    }
}
