//! Help and probe-plan overlays, drawn over the dashboard.
use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, BorderType, Clear, Paragraph, Wrap},
};

use super::{findings_strip::severity_span, theme};
use crate::app::{App, KEYS, Overlay};

/// A centred rectangle of at most `w` x `h` cells.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let [v] = Layout::vertical([Constraint::Length(h.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [r] = Layout::horizontal([Constraint::Length(w.min(area.width))])
        .flex(Flex::Center)
        .areas(v);
    r
}

pub(crate) fn render(app: &App, frame: &mut Frame) {
    let area = frame.area();
    let (title, lines): (&str, Vec<Line>) = match app.view.overlay {
        Overlay::None => return,
        Overlay::Help => (
            " keys (? or Esc closes) ",
            KEYS.iter()
                .map(|(k, what)| {
                    Line::from(vec![
                        Span::styled(format!("{k:>13}  "), theme::value()),
                        Span::raw(*what),
                    ])
                })
                .chain([
                    Line::raw(""),
                    Line::from(Span::styled(
                        "Rows of the histograms are log2 buckets of pages (4 KiB): the \
                         writer's chunks sit next to the kernel calls of the same size.",
                        theme::dim(),
                    )),
                ])
                .collect(),
        ),
        Overlay::Finding => (
            " findings holding now (j/k scroll, f or Esc closes) ",
            finding_lines(app),
        ),
        Overlay::Plan => (
            " probe plan (j/k scroll, P or Esc closes) ",
            app.shown()
                .plan
                .table()
                .lines()
                .map(|l| Line::raw(l.to_string()))
                .collect(),
        ),
    };
    let width = area.width.saturating_sub(4).min(
        if matches!(app.view.overlay, Overlay::Help | Overlay::Finding) {
            76
        } else {
            area.width
        },
    );
    // The findings' advice is a paragraph: count its wrapped rows (word
    // wrapping leaves up to a word free per row: a tenth, allowed for;
    // what still does not fit scrolls).
    let inner = usize::from(width.saturating_sub(2)).max(10) * 9 / 10;
    let rows = if app.view.overlay == Overlay::Finding {
        lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum()
    } else {
        lines.len()
    };
    let height =
        (rows.min(usize::from(u16::MAX - 2)) as u16 + 2).min(area.height.saturating_sub(2));
    let rect = centered(area, width, height);
    frame.render_widget(Clear, rect);
    let paragraph = Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .scroll((app.view.overlay_scroll, 0))
        .block(
            Block::bordered()
                .border_type(BorderType::Double)
                .title(Span::styled(title, theme::title())),
        );
    frame.render_widget(paragraph, rect);
}

/// Each finding holding now, the most severe first: its name and span,
/// every evidence figure, and what to try.
fn finding_lines(app: &App) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for f in app.shown().active_findings() {
        if !lines.is_empty() {
            lines.push(Line::raw(""));
        }
        lines.push(Line::from(vec![
            severity_span(f.severity),
            Span::styled(format!(" {}", f.name), theme::value()),
            Span::styled(
                format!(
                    "  t={:.0}..{:.0} s, {} interval(s)",
                    f.first_seen_s, f.last_seen_s, f.intervals
                ),
                theme::dim(),
            ),
        ]));
        lines.push(Line::from(Span::styled("evidence", theme::dim())));
        for (name, value) in &f.evidence {
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            lines.push(Line::from(vec![
                Span::raw(format!("  {name}: ")),
                Span::styled(value, theme::value()),
            ]));
        }
        lines.push(Line::from(Span::styled("what to try", theme::dim())));
        lines.push(Line::raw(format!("  {}", f.advice)));
    }
    lines
}
