//! Help and probe-plan overlays, drawn over the dashboard.
use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, BorderType, Clear, Paragraph, Wrap},
};

use super::theme;
use crate::dashboard::app::{App, KEYS, Overlay};

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
    let width = area
        .width
        .saturating_sub(4)
        .min(if app.view.overlay == Overlay::Help {
            76
        } else {
            area.width
        });
    let height = (lines.len() as u16 + 2).min(area.height.saturating_sub(2));
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
