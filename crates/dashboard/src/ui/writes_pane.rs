//! Each process's buffered write system calls in the last interval
//! (`--enable writes`, `W`): writes/s, p50/p99/max, and where their time
//! went as one stacked bar (`T` throttle, `S` stable, `R` reclaim, `B`
//! blocked, `.` other, each in its own colour, the legend in the title);
//! under the table, the last slow write (10 ms or more) with what it
//! waited for and, when it was paused, the limits that paused it.
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Cell, Paragraph, Row, Table, Widget},
};

use super::{bar_cells, empty_pane, pane_block_line, theme};
use crate::writes::{WritesModel, waited_for};
use wbscope_model::{
    units,
    writes::{PART_NAMES, SlowWrite, WriteLine},
};

/// The widget of the write pane: it reads only the write slice of the
/// state.
pub(crate) struct WritesPane<'a> {
    pub(crate) writes: &'a WritesModel,
    /// Whether the write spans are attached (or the recording had them).
    pub(crate) hooked: bool,
    pub(crate) focused: bool,
}

/// The parts' letters, in [`PART_NAMES`] order: the bar reads without
/// colour too.
const LETTERS: [char; 5] = ['T', 'S', 'R', 'B', '.'];

/// The parts' colours, in [`PART_NAMES`] order: red for the dirty
/// limits' pauses (what the pane is mostly looked at for), green for the
/// copy on the CPU that every write has.
fn part_style(i: usize) -> Style {
    let colour = match i {
        0 => Color::Red,
        1 => Color::Blue,
        2 => Color::Magenta,
        3 => Color::Cyan,
        _ => Color::Green,
    };
    Style::new().fg(colour)
}

/// The line's parts as `width` cells, one span per part in its style.
pub(crate) fn stacked(l: &WriteLine, width: usize) -> Line<'static> {
    let spans: Vec<Span> = bar_cells(&l.parts.values(), width)
        .into_iter()
        .enumerate()
        .filter(|&(_, n)| n > 0)
        .map(|(i, n)| Span::styled(LETTERS[i].to_string().repeat(n), part_style(i)))
        .collect();
    Line::from(spans)
}

/// The title with its legend: each part's letter in its colour, then its
/// name.
fn title() -> Line<'static> {
    let legend = LETTERS
        .iter()
        .zip(PART_NAMES)
        .enumerate()
        .flat_map(|(i, (c, name))| {
            [
                Span::styled(c.to_string(), part_style(i)),
                Span::raw(format!(" {name} ")),
            ]
        });
    Line::from(
        std::iter::once(Span::raw(" writes per process: "))
            .chain(legend)
            .collect::<Vec<_>>(),
    )
}

fn ms(ns: u64) -> String {
    units::ns(ns as f64)
}

/// "last slow write: dd 812 212.4ms at 3s, throttle 208.0ms (bdi); write
/// 1.0M, 3 pauses".
fn slow_line(s: &SlowWrite, at: f64) -> Line<'static> {
    let (part, part_ns) = waited_for(s);
    let mut text = format!(
        "last slow write: {} {} {} at {at:.0}s, {part} {}",
        s.comm,
        s.pid,
        ms(s.parts.total_ns),
        ms(part_ns),
    );
    if s.pauses > 0 {
        let by = if s.throttled_by.is_empty() {
            "an unknown limit".to_string()
        } else {
            s.throttled_by.join(" and ")
        };
        // The limits belong to the throttle part: said beside it when it
        // is the one named, apart otherwise.
        if part == PART_NAMES[0] {
            text.push_str(&format!(" ({by})"));
        } else {
            text.push_str(&format!(", paused by {by}"));
        }
    }
    if s.ret < 0 {
        text.push_str(&format!("; {} failed ({})", s.call, s.ret));
    } else {
        text.push_str(&format!("; {} {}", s.call, units::bytes(s.ret as u64)));
    }
    if s.pauses > 1 {
        text.push_str(&format!(", {} pauses", s.pauses));
    }
    // A write the dirty limits paused is the case this pane is for.
    let style = if s.pauses > 0 {
        theme::warn()
    } else {
        theme::value()
    };
    Line::from(Span::styled(text, style))
}

impl Widget for WritesPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let block = pane_block_line(title(), self.focused);
        let empty = if !self.hooked {
            Some("write calls are not split: --enable writes attaches their hooks (P says why)")
        } else if self.writes.lines.is_empty() && self.writes.last_slow.is_none() {
            Some("no buffered write to a file yet (each shows with the next interval)")
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
        let widths = [
            num(7),
            num(16),
            num(9),
            num(9),
            num(9),
            num(9),
            Constraint::Min(5),
        ];
        // The bar takes what the figures leave, less the six gaps between
        // columns and one cell so it does not touch the border.
        let fixed = 7 + 16 + 4 * 9 + 6 + 1;
        let bar = usize::from(table_area.width).saturating_sub(fixed).max(5);
        let rows = self
            .writes
            .lines
            .iter()
            .take(usize::from(table_area.height.saturating_sub(1)))
            .map(|l| {
                Row::new(vec![
                    // The line of the processes past the kept ones has
                    // no pid of its own.
                    Cell::from(if l.pid == 0 {
                        "-".to_string()
                    } else {
                        l.pid.to_string()
                    }),
                    Cell::from(l.comm.clone()),
                    Cell::from(units::opt(self.writes.per_s(l), units::si)),
                    Cell::from(ms(l.p50_ns)),
                    Cell::from(ms(l.p99_ns)),
                    Cell::from(ms(l.max_ns)),
                    Cell::from(stacked(l, bar)),
                ])
            });
        let header = Row::new([
            "pid",
            "comm",
            "writes/s",
            "p50",
            "p99",
            "max",
            "time by part",
        ])
        .style(theme::dim());
        Table::new(rows, widths)
            .header(header)
            .render(table_area, buf);
        let slow = match &self.writes.last_slow {
            None => Line::from(Span::styled("no write of 10 ms or more yet", theme::dim())),
            Some((s, at)) => slow_line(s, *at),
        };
        Paragraph::new(slow)
            .wrap(ratatui::widgets::Wrap { trim: true })
            .render(slow_area, buf);
    }
}
