//! Who dirtied it, in the report: the interval lines' `owners`
//! (model/dirtier.rs) added up per process over the recording, and the
//! table of the top processes: pages dirtied, pages of theirs written
//! back by themselves, by the flusher and by others, throttle pauses.
//! The recording's reader ([`super::data::RecordingFeed`]) adds the lines
//! up; the page gives the section what they came to.
use std::{collections::HashMap, fmt::Write as _};

use wbscope_model::dirtier::{OTHERS, OwnerLine, OwnerTotal};
use wbscope_model::ledger::LedgerLine;

use super::svg::xml;

/// Rows the table shows; the rest are summed in one row.
pub(crate) const TABLE_ROWS: usize = 20;
/// Processes kept apart over a recording; past it, new ones are added to
/// the `(others)` row (memory stays bounded whatever the length).
const KEPT: usize = 4096;

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
            row.add(&o.into());
        }
    }

    /// The top [`TABLE_ROWS`] processes (by pages dirtied, then written,
    /// then pauses), and the rest summed (`None` when there is no rest).
    pub(crate) fn table(&self) -> (Vec<OwnerTotal>, Option<OwnerTotal>) {
        let mut rows: Vec<OwnerTotal> = self.rows.values().cloned().collect();
        rows.sort_by(|a, b| {
            (b.dirtied, b.written, b.throttle_pauses, a.pid, &a.comm).cmp(&(
                a.dirtied,
                a.written,
                a.throttle_pauses,
                b.pid,
                &b.comm,
            ))
        });
        let mut rest = self.others.clone();
        let mut any_rest = rest != OwnerTotal::default();
        for r in rows.iter().skip(TABLE_ROWS) {
            rest.add(r);
            any_rest = true;
        }
        rows.truncate(TABLE_ROWS);
        rest.comm = OTHERS.into();
        (rows, any_rest.then_some(rest))
    }
}

/// The `#who-dirtied` section: the table of `owners` (`None` for a
/// compare/scenario document, which carries none; `recording` says
/// which input it was, for the reason of an empty section).
pub(crate) fn section(owners: Option<&Owners>, recording: bool) -> String {
    let mut out = String::from("<section id=\"who-dirtied\">\n<h2>Who dirtied it</h2>\n");
    let (rows, rest) = owners.map(Owners::table).unwrap_or_default();
    if rows.is_empty() && rest.is_none() {
        let why = if recording {
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
        let (own, flusher, others) = r.written_split();
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
            r.throttle_pauses,
            r.throttle_ms
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

/// The `#ledger` section: where a recording's bytes went (model/
/// ledger.rs, docs/ledger.md), its intervals' ledgers added up: each
/// device's bytes written by class beside its own counter, then per
/// process the stages from its write calls to the device.
pub(crate) fn ledger_section(ledger: Option<&LedgerLine>, recording: bool) -> String {
    let mut out = String::from("<section id=\"ledger\">\n<h2>Where the bytes go</h2>\n");
    let Some(l) = ledger.filter(|l| !l.devices.is_empty() || !l.processes.is_empty()) else {
        let why = if recording {
            "this recording has no ledger: it was made by a wbscope before it, or nothing was written"
        } else {
            "not in a compare/scenario document: the ledger is in recordings (wbscope record)"
        };
        let _ = writeln!(out, "<p class=\"muted\">{why}.</p>\n</section>");
        return out;
    };
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    out.push_str("<p class=\"muted\">Bytes over the recording (docs/ledger.md): each device's writes by class, which add up to the device's own counter (written); per process, from its write calls to the device, with its share of the journal and metadata and the amplification over its write calls. A dash: not measured (the classes need --enable device_io, the shares --enable durability).</p>\n");
    out.push_str("<table class=\"who\">\n<tr><th>device</th><th>written</th><th>data</th><th>of it direct</th><th>journal</th><th>metadata</th><th>other</th><th>unattributed</th></tr>\n");
    for d in &l.devices {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            d.dev,
            d.written,
            opt(d.data),
            opt(d.direct),
            opt(d.journal),
            opt(d.metadata),
            opt(d.other),
            d.unattributed
        );
    }
    out.push_str("</table>\n<table class=\"who\">\n<tr><th>pid</th><th>command</th><th>write calls</th><th>dirtied</th><th>absorbed</th><th>cancelled</th><th>written back</th><th>journal</th><th>metadata</th><th>amplification</th></tr>\n");
    for p in &l.processes {
        let s = &p.stages;
        let pid = if p.pid == 0 {
            "-".to_string()
        } else {
            p.pid.to_string()
        };
        let x = s
            .amplification_of_write_calls
            .or(s.amplification)
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}×"));
        let _ = writeln!(
            out,
            "<tr><td>{pid}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{x}</td></tr>",
            xml(&p.comm),
            opt(s.write_calls),
            opt(s.dirtied),
            opt(s.absorbed),
            opt(s.cancelled),
            s.written_back,
            opt(s.journal),
            opt(s.metadata),
        );
    }
    out.push_str("</table>\n</section>\n");
    out
}
