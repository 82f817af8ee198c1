//! Per device and per inode: bytes written back, calls, mean chunk, scan
//! ratio; sorted by the column `o` picks, filtered to one device by `d`.
use std::cmp::Ordering;

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::Modifier,
    widgets::{Cell, Row, Table, Widget},
};

use super::{pane_block, theme};
use crate::app::SortKey;
use crate::state::{Model, TopRow};
use wbscope_model::DevId;
use wbscope_model::units;
use wbscope_model::units::page_size;

fn key(row: &TopRow, sort: SortKey, page: u64) -> f64 {
    match sort {
        SortKey::Bytes => row.pages_written as f64,
        SortKey::Calls => row.calls as f64,
        SortKey::MeanChunk => row.mean_chunk_pages().unwrap_or(0.0),
        SortKey::ScanRatio => row.scan_ratio(page).unwrap_or(0.0),
    }
}

fn figures(row: &TopRow, page: u64) -> [String; 4] {
    [
        units::bytes(row.pages_written * page),
        units::si(row.calls as f64),
        units::opt(row.mean_chunk_pages(), |p| format!("{} pg", units::si(p))),
        units::opt(row.scan_ratio(page), |r| format!("{r:.2}")),
    ]
}

fn header(first: &[&'static str], sort: SortKey) -> Row<'static> {
    let cols = ["bytes", "calls", "mean chunk", "scan"];
    let sorted = match sort {
        SortKey::Bytes => 0,
        SortKey::Calls => 1,
        SortKey::MeanChunk => 2,
        SortKey::ScanRatio => 3,
    };
    let mut cells: Vec<Cell> = first.iter().map(|h| Cell::from(*h)).collect();
    cells.extend(cols.iter().enumerate().map(|(i, h)| {
        if i == sorted {
            Cell::from(format!("{h}▼")).style(theme::value().add_modifier(Modifier::UNDERLINED))
        } else {
            Cell::from(*h)
        }
    }));
    Row::new(cells).style(theme::dim())
}

/// The widget of the per-device and per-inode tables: it reads only its own slice of the
/// dashboard state.
pub(crate) struct TopTable<'a> {
    pub(crate) model: &'a Model,
    pub(crate) sort: SortKey,
    pub(crate) device_filter: Option<DevId>,
    pub(crate) focused: bool,
}

impl Widget for TopTable<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let m = self.model;
        let page = page_size();
        let sort = self.sort;
        let filter = self.device_filter;
        let focused = self.focused;
        let order = |a: &TopRow, b: &TopRow| {
            key(b, sort, page)
                .partial_cmp(&key(a, sort, page))
                .unwrap_or(Ordering::Equal)
        };
        let filter_name =
            filter.map_or_else(|| "all devices".to_string(), |d| format!("device {d}"));

        let wide = area.width >= 120;
        let (dev_area, ino_area) = if wide {
            let [d, i] =
                Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)])
                    .areas(area);
            (Some(d), i)
        } else {
            (None, area)
        };

        let num = |w| Constraint::Length(w);
        if let Some(dev_area) = dev_area {
            let mut devs: Vec<_> = m.devices.iter().collect();
            devs.sort_by(|a, b| order(a.1, b.1));
            let rows = devs.into_iter().map(|(d, r)| {
                let mut cells = vec![d.to_string()];
                cells.extend(figures(r, page));
                let row = Row::new(cells);
                if Some(*d) == filter {
                    row.style(theme::value())
                } else {
                    row
                }
            });
            let table = Table::new(rows, [num(9), num(9), num(7), num(11), num(6)])
                .header(header(&["device"], sort))
                .block(pane_block(" per device (d filters) ", focused));
            Widget::render(table, dev_area, buf);
        }

        let mut inodes: Vec<_> = m
            .inodes
            .iter()
            .filter(|((d, _), _)| filter.is_none_or(|f| f == *d))
            .collect();
        inodes.sort_by(|a, b| order(a.1, b.1).then(a.0.cmp(b.0)));
        let rows_fit = usize::from(ino_area.height.saturating_sub(3));
        let rows = inodes.into_iter().take(rows_fit).map(|((d, ino), r)| {
            let mut cells = vec![format!("{d} {ino}"), r.comm.clone()];
            cells.extend(figures(r, page));
            Row::new(cells)
        });
        let table = Table::new(
            rows,
            [
                num(14),
                Constraint::Fill(1),
                num(8),
                num(6),
                num(11),
                num(6),
            ],
        )
        .header(header(&["dev inode", "comm"], sort))
        .block(pane_block(
            &format!(" per inode, {filter_name}, by {} (o) ", sort.name()),
            focused,
        ));
        Widget::render(table, ino_area, buf);
    }
}
