//! Who dirtied it (issue 15) in the report: the interval lines' `owners`
//! (model/dirtier.rs) added up per process over the recording, and the
//! table of the top processes: pages dirtied, pages of theirs written
//! back by themselves, by the flusher and by others, throttle pauses.
use std::{collections::HashMap, fmt::Write as _};

use wbscope_model::dirtier::{OTHERS, OwnerLine};

use super::{data::ReportData, svg::xml};

/// Rows the table shows; the rest are summed in one row.
pub(crate) const TABLE_ROWS: usize = 20;
/// Processes kept apart over a recording; past it, new ones are added to
/// the `(others)` row (memory stays bounded whatever the length).
const KEPT: usize = 4096;

/// One process over the whole input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OwnerTotal {
    pub(crate) pid: u32,
    pub(crate) comm: String,
    pub(crate) cgroup_id: u64,
    pub(crate) dirtied: u64,
    pub(crate) written: u64,
    pub(crate) by_others: u64,
    pub(crate) by_flusher: u64,
    pub(crate) pauses: u64,
    pub(crate) pause_ms: u64,
}

impl OwnerTotal {
    fn add(&mut self, o: &OwnerLine) {
        self.dirtied += o.pages_dirtied;
        self.written += o.pages_written;
        self.by_others += o.pages_written_by_others;
        self.by_flusher += o.pages_written_by_flusher;
        self.pauses += o.throttle_pauses;
        self.pause_ms += o.throttle_pause_ms;
    }

    fn merge(&mut self, o: &OwnerTotal) {
        self.dirtied += o.dirtied;
        self.written += o.written;
        self.by_others += o.by_others;
        self.by_flusher += o.by_flusher;
        self.pauses += o.pauses;
        self.pause_ms += o.pause_ms;
    }

    /// Written by the flusher, by other processes, by itself: the three
    /// add up to `written` (the flusher's part is within `by_others`).
    fn split(&self) -> (u64, u64, u64) {
        let flusher = self.by_flusher.min(self.written);
        let others = self.by_others.saturating_sub(flusher);
        let own = self.written.saturating_sub(self.by_others.max(flusher));
        (own, flusher, others)
    }
}

/// The owners of every interval, added up per process (pid and comm: a
/// pid reused by another program is another row).
#[derive(Clone, Debug, Default)]
pub(crate) struct Owners {
    rows: HashMap<(u32, String), OwnerTotal>,
    others: OwnerTotal,
    /// Intervals that had any owners.
    pub(crate) intervals: u64,
}

impl Owners {
    pub(crate) fn add(&mut self, owners: &[OwnerLine]) {
        if !owners.is_empty() {
            self.intervals += 1;
        }
        for o in owners {
            let key = (o.pid, o.comm.clone());
            let row = if o.pid == 0 && o.comm == OTHERS {
                &mut self.others
            } else if let Some(row) = self.rows.get_mut(&key) {
                row
            } else if self.rows.len() < KEPT {
                self.rows.entry(key).or_insert_with(|| OwnerTotal {
                    pid: o.pid,
                    comm: o.comm.clone(),
                    cgroup_id: o.cgroup_id,
                    ..OwnerTotal::default()
                })
            } else {
                &mut self.others
            };
            row.add(o);
        }
    }

    /// The top [`TABLE_ROWS`] processes (by pages dirtied, then written,
    /// then pauses), and the rest summed (`None` when there is no rest).
    pub(crate) fn table(&self) -> (Vec<OwnerTotal>, Option<OwnerTotal>) {
        let mut rows: Vec<OwnerTotal> = self.rows.values().cloned().collect();
        rows.sort_by(|a, b| {
            (b.dirtied, b.written, b.pauses, a.pid, &a.comm)
                .cmp(&(a.dirtied, a.written, a.pauses, b.pid, &b.comm))
        });
        let mut rest = self.others.clone();
        let mut any_rest = rest != OwnerTotal::default();
        for r in rows.iter().skip(TABLE_ROWS) {
            rest.merge(r);
            any_rest = true;
        }
        rows.truncate(TABLE_ROWS);
        rest.comm = OTHERS.into();
        (rows, any_rest.then_some(rest))
    }
}

/// The `#who-dirtied` section.
pub(crate) fn section(d: &ReportData) -> String {
    let mut out = String::from("<section id=\"who-dirtied\">\n<h2>Who dirtied it</h2>\n");
    let (rows, rest) = d.owners.as_ref().map(Owners::table).unwrap_or_default();
    if rows.is_empty() && rest.is_none() {
        let why = if d.recording {
            "no process was seen dirtying pages in this recording: it was made without the dirtier hook (see the probe plan above) or by a wbscope before it, or nothing was dirtied"
        } else {
            "not in a compare/scenario document: its runs are wbscope's own writer; who dirtied what is in recordings (wbscope record) made with the dirtier hook"
        };
        let _ = writeln!(out, "<p class=\"muted\">{why}.</p>\n</section>");
        return out;
    }
    out.push_str("<p class=\"muted\">Per process over the recording (docs/trace-json.md, owners): pages it took from clean to dirty, pages of its written back and by whom, its balance_dirty_pages pauses.</p>\n");
    out.push_str("<table class=\"who\">\n<tr><th>pid</th><th>command</th><th>cgroup id</th><th>pages dirtied</th><th>written</th><th>by itself</th><th>by the flusher</th><th>by others</th><th>throttle pauses</th><th>paused (ms)</th></tr>\n");
    for r in rows.iter().chain(&rest) {
        let (own, flusher, others) = r.split();
        let pid = if r.pid == 0 {
            "-".to_string()
        } else {
            r.pid.to_string()
        };
        let cgroup = if r.cgroup_id == 0 {
            "-".to_string()
        } else {
            r.cgroup_id.to_string()
        };
        let _ = writeln!(
            out,
            "<tr><td>{pid}</td><td>{}</td><td>{cgroup}</td><td>{}</td><td>{}</td><td>{own}</td><td>{flusher}</td><td>{others}</td><td>{}</td><td>{}</td></tr>",
            xml(&r.comm),
            r.dirtied,
            r.written,
            r.pauses,
            r.pause_ms
        );
    }
    out.push_str("</table>\n");
    if rest.is_some() {
        let _ = writeln!(
            out,
            "<p class=\"muted\">{OTHERS}: the processes past the top {TABLE_ROWS} here, and past the 16 rows an interval's owners list.</p>"
        );
    }
    out.push_str("</section>\n");
    out
}
