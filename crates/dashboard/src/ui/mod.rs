//! The live dashboard's views. Rendering reads the [`App`] (its model, view
//! state and writer settings) and changes nothing; the event loop lives in
//! `dashboard::run`, the state changes in `dashboard::app`. Each pane is a
//! widget over its own slice of the state (`KernelPane { model, focused }`
//! and so on), so a new pane is a new file and one line here.
//!
//! Layout, top to bottom: two header lines (three replaying a store:
//! its span and where the view is); the findings strip; the
//! kernel and writer panes side by side; then the histograms, the time chart and the top table
//! when there is room (160 columns and 40 rows), or the one Tab focuses
//! (80x24); the who, fsync, ledger and write panes take the top table's
//! place while focused; one footer line of keys.
mod chart;
mod findings_strip;
mod fsync_pane;
mod header;
mod histograms;
mod kernel_pane;
mod ledger_pane;
mod overlay;
mod top_table;
mod who_pane;
mod writer_pane;
mod writes_pane;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, BorderType, Paragraph},
};

use chart::TimeChart;
use findings_strip::FindingsStrip;
use fsync_pane::FsyncPane;
use histograms::Histograms;
use kernel_pane::KernelPane;
use ledger_pane::LedgerPane;
use top_table::TopTable;
use who_pane::WhoPane;
use writer_pane::WriterPane;
use writes_pane::WritesPane;

use crate::app::{App, Pane};
use wbscope_model::plan::Concept;

/// Styles. Named colours that read on dark and light backgrounds (no
/// white, black or yellow), with modifiers carrying the meaning where
/// colour is not available.
pub(crate) mod theme {
    use super::*;
    pub(crate) fn title() -> Style {
        Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)
    }
    pub(crate) fn dim() -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }
    pub(crate) fn value() -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub(crate) fn kernel() -> Style {
        Style::new().fg(Color::Cyan)
    }
    pub(crate) fn writer() -> Style {
        Style::new().fg(Color::Magenta)
    }
    pub(crate) fn dirty() -> Style {
        Style::new().fg(Color::Blue)
    }
    pub(crate) fn good() -> Style {
        Style::new().fg(Color::Green)
    }
    pub(crate) fn warn() -> Style {
        Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD)
    }
    pub(crate) fn bad() -> Style {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    }
}

/// A bordered pane; the focused one has a thick border and a bold title,
/// which shows without colour.
pub(crate) fn pane_block(title: &str, focused: bool) -> Block<'static> {
    pane_block_line(Line::raw(title.to_string()), focused)
}

/// [`pane_block`] with a title of styled spans (a legend), made bold as
/// a whole when focused.
pub(crate) fn pane_block_line(title: Line<'static>, focused: bool) -> Block<'static> {
    let block = Block::bordered().title(if focused {
        title.patch_style(theme::value())
    } else {
        title
    });
    if focused {
        block.border_type(BorderType::Thick)
    } else {
        block
    }
}

/// A pane with nothing to show: why, dimmed, in its block.
pub(crate) fn empty_pane(
    text: &str,
    block: Block<'_>,
    area: Rect,
    buf: &mut ratatui::buffer::Buffer,
) {
    use ratatui::widgets::Widget as _;
    Paragraph::new(text)
        .style(theme::dim())
        .block(block)
        .render(area, buf);
}

/// A stacked bar's cells: `width` split among `parts` by their share of
/// the whole; every part with any time gets at least one cell while
/// there is room, so a small part still shows. All 0 when there is
/// nothing to split.
pub(crate) fn bar_cells(parts: &[u64], width: usize) -> Vec<usize> {
    let total: u64 = parts.iter().sum();
    if total == 0 || width == 0 {
        return vec![0; parts.len()];
    }
    let mut cells: Vec<usize> = parts
        .iter()
        .map(|&p| ((p as f64 / total as f64) * width as f64).round() as usize)
        .collect();
    for (c, &p) in cells.iter_mut().zip(parts) {
        if p > 0 && *c == 0 {
            *c = 1;
        }
    }
    // Back to `width`: take from the largest.
    while cells.iter().sum::<usize>() > width {
        let i = (0..cells.len()).max_by_key(|&i| cells[i]).unwrap_or(0);
        cells[i] -= 1;
    }
    cells
}

/// Below this the dashboard only says that the window is too small.
const MIN_W: u16 = 40;
const MIN_H: u16 = 12;

/// Draws the whole dashboard into the frame. Never panics on small
/// areas: below 40x12 it prints one line, and panes that do not fit are
/// dropped.
pub(crate) fn render(app: &App, frame: &mut Frame) {
    let area = frame.area();
    if area.width < MIN_W || area.height < MIN_H {
        frame.render_widget(
            Paragraph::new(format!(
                "wbscope: {}x{} is too small (40x12)",
                area.width, area.height
            )),
            area,
        );
        return;
    }
    let [head, strip, body, foot] = Layout::vertical([
        Constraint::Length(header::height(app)),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(header::header(app, area.width), head);
    frame.render_widget(FindingsStrip { model: app.shown() }, strip);
    render_body(app, frame, body);
    frame.render_widget(footer(app, area.width), foot);
    overlay::render(app, frame);
}

fn render_body(app: &App, frame: &mut Frame, body: Rect) {
    let roomy = body.height >= 36;
    let stats_h = if roomy { 11 } else { 9 };
    let [stats, lower] =
        Layout::vertical([Constraint::Length(stats_h), Constraint::Min(0)]).areas(body);
    let [kernel, writer] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(stats);
    let model = app.shown();
    let focus = app.view.focus;
    frame.render_widget(
        KernelPane {
            model,
            focused: focus == Pane::Kernel,
        },
        kernel,
    );
    frame.render_widget(
        WriterPane {
            model,
            settings: &app.settings,
            run_state: app.run_state,
            focused: focus == Pane::Writer,
        },
        writer,
    );
    let histograms = Histograms {
        model,
        focused: focus == Pane::Histograms,
    };
    let chart = TimeChart {
        model,
        focused: focus == Pane::Chart,
    };
    let top = TopTable {
        model,
        sort: app.view.sort,
        device_filter: app.view.device_filter,
        focused: focus == Pane::Top,
    };
    let who = WhoPane {
        who: &model.who,
        hooked: model.plan.attached(Concept::Dirtier),
        sort: app.view.who_sort,
        by_cgroup: app.view.who_by_cgroup,
        cgroup_filter: app.view.cgroup_filter,
        focused: focus == Pane::Who,
    };
    let fsync = FsyncPane {
        fsyncs: &model.fsyncs,
        hooked: model.plan.attached(Concept::Durability),
        focused: focus == Pane::Fsync,
    };
    let ledger = LedgerPane {
        ledger: model.ledger.as_ref(),
        focused: focus == Pane::Ledger,
    };
    let writes = WritesPane {
        writes: &model.writes,
        hooked: model.plan.attached(Concept::Writes),
        focused: focus == Pane::Writes,
    };

    if body.width >= 120 && roomy {
        let [mid, bottom] =
            Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(lower);
        let [hist, chart_area] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(mid);
        frame.render_widget(histograms, hist);
        frame.render_widget(chart, chart_area);
        // The who, fsync, ledger and write panes take the top table's
        // place while they have focus.
        match focus {
            Pane::Who => frame.render_widget(who, bottom),
            Pane::Fsync => frame.render_widget(fsync, bottom),
            Pane::Ledger => frame.render_widget(ledger, bottom),
            Pane::Writes => frame.render_widget(writes, bottom),
            _ => frame.render_widget(top, bottom),
        }
    } else {
        // One lower pane at a time: the focused one (the histograms while
        // the focus is on the kernel or writer pane).
        match focus {
            Pane::Chart => frame.render_widget(chart, lower),
            Pane::Top => frame.render_widget(top, lower),
            Pane::Who => frame.render_widget(who, lower),
            Pane::Fsync => frame.render_widget(fsync, lower),
            Pane::Ledger => frame.render_widget(ledger, lower),
            Pane::Writes => frame.render_widget(writes, lower),
            Pane::Histograms | Pane::Kernel | Pane::Writer => {
                frame.render_widget(histograms, lower);
            }
        }
    }
}

fn footer(app: &App, width: u16) -> Paragraph<'static> {
    if let Some(status) = &app.status {
        return Paragraph::new(Line::from(Span::styled(
            format!(" {status}"),
            theme::warn(),
        )));
    }
    let wide = width >= 120;
    // Replaying a store the writer keys are refused: the jumps take their
    // place. The view keys follow either.
    let first: &[(&str, &str)] = match (app.store.is_some(), wide) {
        (true, true) => &[
            ("\u{2190}/\u{2192}", "minute"),
            ("n/N", "next/prev finding"),
        ],
        (true, false) => &[("\u{2190}/\u{2192}", "minute"), ("n/N", "finding")],
        (false, true) => &[
            ("w", "writer on/off"),
            ("s", "strategy"),
            ("+/-", "chunk"),
            ("[/]", "window"),
            ("</>", "jobs"),
        ],
        (false, false) => &[("w", "writer"), ("s", "strategy"), ("+/-", "chunk")],
    };
    let view: &[(&str, &str)] = if wide {
        &[
            ("Tab", "pane"),
            ("o", "sort"),
            ("d", "device"),
            ("p", "pause"),
            ("r", "reset"),
            ("P", "plan"),
            ("f", "finding"),
            ("?", "help"),
            ("q", "quit"),
        ]
    } else {
        &[("Tab", "pane"), ("?", "help"), ("q", "quit")]
    };
    let mut spans = Vec::new();
    for (k, what) in first.iter().chain(view) {
        spans.push(Span::styled(format!(" {k}"), theme::value()));
        spans.push(Span::styled(format!(" {what} "), theme::dim()));
    }
    Paragraph::new(Line::from(spans))
}

#[cfg(test)]
mod tests;
