//! Who dirtied it: per process (or per cgroup, `g`) the pages dirtied,
//! and of its pages written back, how many it wrote itself, the flusher
//! wrote (`flusher`), and others' syncs wrote (`others`); its
//! `balance_dirty_pages` pauses and their sum (`throttled`).
//! Sorted by the column `o` picks while the pane has focus, filtered to
//! one cgroup by `d` (like the top table's device filter).
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Rect},
    style::Modifier,
    widgets::{Cell, Row, Table, Widget},
};

use super::{empty_pane, pane_block, theme};
use crate::app::WhoSort;
use crate::who::{WhoModel, WhoRow, by_others_sync, by_self};
use wbscope_model::units;
use wbscope_model::units::page_size;

/// The widget of the who pane: it reads only the who slice of the state.
pub(crate) struct WhoPane<'a> {
    pub(crate) who: &'a WhoModel,
    /// Whether the dirtier hook is attached (or the recording had it).
    pub(crate) hooked: bool,
    pub(crate) sort: WhoSort,
    pub(crate) by_cgroup: bool,
    pub(crate) cgroup_filter: Option<u64>,
    pub(crate) focused: bool,
}

fn key(r: &WhoRow, sort: WhoSort) -> (u64, u64) {
    match sort {
        WhoSort::Dirtied => (r.dirtied, r.written),
        WhoSort::Written => (r.written, r.dirtied),
        WhoSort::ByOthers => (r.by_others, r.written),
        WhoSort::Throttled => (r.throttle_ms, r.throttle_pauses),
    }
}

fn figures(r: &WhoRow, page: u64) -> [String; 5] {
    let b = |pages: u64| units::bytes(pages * page);
    [
        b(r.dirtied),
        b(by_self(r)),
        b(r.by_flusher),
        b(by_others_sync(r)),
        format!("{}/{}ms", r.throttle_pauses, r.throttle_ms),
    ]
}

fn header(first: &[&'static str], sort: WhoSort) -> Row<'static> {
    let cols = ["dirtied", "by self", "flusher", "others", "throttled"];
    let sorted = match sort {
        WhoSort::Dirtied => Some(0),
        WhoSort::Throttled => Some(4),
        // Written and by-others have no column of their own: the title
        // says them.
        WhoSort::Written | WhoSort::ByOthers => None,
    };
    let mut cells: Vec<Cell> = first.iter().map(|h| Cell::from(*h)).collect();
    cells.extend(cols.iter().enumerate().map(|(i, h)| {
        if Some(i) == sorted {
            Cell::from(format!("{h}▼")).style(theme::value().add_modifier(Modifier::UNDERLINED))
        } else {
            Cell::from(*h)
        }
    }));
    Row::new(cells).style(theme::dim())
}

impl Widget for WhoPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let filter = self.cgroup_filter;
        let filter_name = filter.map_or_else(|| "all cgroups".into(), |c| format!("cgroup {c}"));
        let per = if self.by_cgroup {
            "per cgroup"
        } else {
            "per process"
        };
        let block = pane_block(
            &format!(
                " who dirtied it, {per} (g), {filter_name} (d), by {} (o) ",
                self.sort.name()
            ),
            self.focused,
        );
        let empty = if !self.hooked {
            Some("no dirtier hook: who dirtied what is not traced (P says why)")
        } else if self.who.rows.is_empty() {
            Some("nothing dirtied yet")
        } else {
            None
        };
        if let Some(text) = empty {
            empty_pane(text, block, area, buf);
            return;
        }
        let page = page_size();
        let sort = self.sort;
        let rows_fit = usize::from(area.height.saturating_sub(3));
        let num = Constraint::Length;
        let figs = [num(8), num(8), num(8), num(8), num(10)];
        let table = if self.by_cgroup {
            let mut groups: Vec<(u64, (WhoRow, usize))> = self
                .who
                .by_cgroup()
                .into_iter()
                .filter(|(g, _)| filter.is_none_or(|f| f == *g))
                .collect();
            groups.sort_by(|a, b| {
                key(&b.1.0, sort)
                    .cmp(&key(&a.1.0, sort))
                    .then(a.0.cmp(&b.0))
            });
            let rows = groups.into_iter().take(rows_fit).map(|(g, (r, n))| {
                let mut cells = vec![g.to_string(), n.to_string()];
                cells.extend(figures(&r, page));
                Row::new(cells)
            });
            let mut widths = vec![num(12), num(6)];
            widths.extend(figs);
            Table::new(rows, widths).header(header(&["cgroup", "procs"], sort))
        } else {
            let mut procs: Vec<(&u32, &WhoRow)> = self
                .who
                .rows
                .iter()
                .filter(|(_, r)| filter.is_none_or(|f| f == r.cgroup_id))
                .collect();
            procs.sort_by(|a, b| key(b.1, sort).cmp(&key(a.1, sort)).then(a.0.cmp(b.0)));
            let rows = procs.into_iter().take(rows_fit).map(|(pid, r)| {
                let mut cells = vec![pid.to_string(), r.comm.clone(), r.cgroup_id.to_string()];
                cells.extend(figures(r, page));
                Row::new(cells)
            });
            let mut widths = vec![num(7), Constraint::Fill(1), num(8)];
            widths.extend(figs);
            Table::new(rows, widths).header(header(&["pid", "comm", "cgroup"], sort))
        };
        Widget::render(table.block(block), area, buf);
    }
}
