//! One line under the header: the finding that holds now (the most
//! severe first), how long it has held, how many others hold, and the key
//! that opens its evidence. The severity is a word as well as a colour,
//! so it reads on a terminal without colour.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::theme;
use crate::state::Model;
use wbscope_model::findings::Severity;

/// The severity as the strip and the overlay print it.
pub(crate) fn severity_span(severity: Severity) -> Span<'static> {
    match severity {
        Severity::Critical => {
            Span::styled(" CRITICAL ", theme::bad().add_modifier(Modifier::REVERSED))
        }
        Severity::Warning => Span::styled(" WARNING ", theme::warn()),
        Severity::Info => Span::styled(" info ", Style::new()),
    }
}

/// The widget of the findings strip: it reads only the model's findings.
pub(crate) struct FindingsStrip<'a> {
    pub(crate) model: &'a Model,
}

impl Widget for FindingsStrip<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let active = self.model.active_findings();
        let mut spans = vec![Span::styled(" findings ", theme::dim())];
        match active.first() {
            None => spans.push(Span::styled("none holding now", theme::dim())),
            Some(f) => {
                spans.push(severity_span(f.severity));
                spans.push(Span::styled(format!(" {} ", f.name), theme::value()));
                spans.push(Span::raw(format!(
                    " since t={:.0} s, {} interval{}",
                    f.first_seen_s,
                    f.intervals,
                    if f.intervals == 1 { "" } else { "s" }
                )));
                if active.len() > 1 {
                    spans.push(Span::raw(format!("  +{} more", active.len() - 1)));
                }
                spans.push(Span::styled("  f", theme::value()));
                spans.push(Span::styled(" evidence", theme::dim()));
            }
        }
        Paragraph::new(Line::from(spans)).render(area, buf);
    }
}
