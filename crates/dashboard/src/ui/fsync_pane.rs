//! Each process's fsyncs in the last interval (`--enable durability`):
//! how many, p50/p99/max, and where their time went as one
//! stacked bar (`W` writeback, `w` wait, `J` journal, `F` flush, `.`
//! other); under the table, the last slow fsync (10 ms or more) with the
//! commit it waited on and who was in it.
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Cell, Paragraph, Row, Table, Widget},
};

use super::{bar_cells, empty_pane, pane_block, theme};
use crate::fsync::FsyncModel;
use wbscope_model::{durability::FsyncLine, units};

/// The widget of the fsync pane: it reads only the fsync slice of the state.
pub(crate) struct FsyncPane<'a> {
    pub(crate) fsyncs: &'a FsyncModel,
    /// Whether the durability hooks are attached (or the recording had
    /// them).
    pub(crate) hooked: bool,
    pub(crate) focused: bool,
}

/// The parts' letters, in the order they happen.
const PARTS: [char; 5] = ['W', 'w', 'J', 'F', '.'];

/// The line's parts as `width` letters ([`bar_cells`]).
pub(crate) fn stacked(l: &FsyncLine, width: usize) -> String {
    let parts = [
        l.writeback_ns,
        l.wait_ns,
        l.journal_ns,
        l.flush_ns,
        l.other_ns,
    ];
    PARTS
        .iter()
        .zip(bar_cells(&parts, width))
        .flat_map(|(&c, n)| std::iter::repeat_n(c, n))
        .collect()
}

fn ms(ns: u64) -> String {
    units::ns(ns as f64)
}

impl Widget for FsyncPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let block = pane_block(
            " fsyncs per process: W writeback w wait J journal F flush . other ",
            self.focused,
        );
        let empty = if !self.hooked {
            Some("fsyncs are not split: --enable durability attaches their hooks (P says why)")
        } else if self.fsyncs.lines.is_empty() && self.fsyncs.last_slow.is_none() {
            Some("no fsync yet (each shows about 2 s after it returns)")
        } else {
            None
        };
        if let Some(text) = empty {
            empty_pane(text, block, area, buf);
            return;
        }
        let inner = block.inner(area);
        block.render(area, buf);
        let [table_area, slow_area] =
            Layout::vertical([Constraint::Min(2), Constraint::Length(2)]).areas(inner);
        let num = Constraint::Length;
        let fixed = 7 + 16 + 6 + 3 * 9;
        let bar = usize::from(table_area.width)
            .saturating_sub(fixed + 7)
            .max(5);
        let rows = self
            .fsyncs
            .lines
            .iter()
            .take(usize::from(table_area.height.saturating_sub(1)))
            .map(|l| {
                Row::new(vec![
                    Cell::from(l.pid.to_string()),
                    Cell::from(l.comm.clone()),
                    Cell::from(l.fsyncs.to_string()),
                    Cell::from(ms(l.p50_ns)),
                    Cell::from(ms(l.p99_ns)),
                    Cell::from(ms(l.max_ns)),
                    Cell::from(stacked(l, bar)).style(theme::kernel()),
                ])
            });
        let widths = [
            num(7),
            num(16),
            num(6),
            num(9),
            num(9),
            num(9),
            Constraint::Min(5),
        ];
        let header =
            Row::new(["pid", "comm", "n", "p50", "p99", "max", "time by part"]).style(theme::dim());
        Table::new(rows, widths)
            .header(header)
            .render(table_area, buf);
        let slow = match &self.fsyncs.last_slow {
            None => Line::from(Span::styled("no fsync of 10 ms or more yet", theme::dim())),
            Some((pid, comm, s, at)) => {
                let mut text = format!(
                    "last slow: {} {pid} ({comm}) at {at:.0}s, {} in the journal",
                    ms(s.total_ns),
                    ms(s.journal_ns),
                );
                if let Some(t) = s.transaction {
                    text.push_str(&format!(
                        "; commit {t} ({} blocks):",
                        s.commit_blocks.map_or("?".into(), |b| b.to_string())
                    ));
                    let who: Vec<String> = s
                        .contributors
                        .iter()
                        .map(|c| format!(" {} {} {}blk {}pg", c.pid, c.comm, c.blocks, c.pages))
                        .collect();
                    text.push_str(&who.join(","));
                }
                let style = if s.entangled {
                    theme::warn()
                } else {
                    theme::value()
                };
                Line::from(Span::styled(text, style))
            }
        };
        Paragraph::new(slow)
            .wrap(ratatui::widgets::Wrap { trim: true })
            .render(slow_area, buf);
    }
}
