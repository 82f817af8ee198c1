//! The shared time axis: kernel pages written/s, writer bytes/s and Dirty,
//! all in megabytes (per second for the rates) so one y axis serves the
//! three and the lines can be compared.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    symbols,
    text::Span,
    widgets::{Axis, Chart, Dataset, GraphType, LegendPosition, Paragraph, Widget},
};

use super::{pane_block, theme};
use crate::state::HISTORY_SECS;
use crate::state::Model;
use wbscope_model::units::page_size;

/// The widget of the shared time axis: it reads only its own slice of the
/// dashboard state.
pub(crate) struct TimeChart<'a> {
    pub(crate) model: &'a Model,
    pub(crate) focused: bool,
}

impl Widget for TimeChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let m = self.model;
        let block = pane_block(
            " MB/s written (kernel, writer) and MB dirty, last 5 min ",
            self.focused,
        );
        let Some(now) = m.history.back().map(|p| p.time_s) else {
            Widget::render(
                Paragraph::new(Span::styled("no samples yet", theme::dim())).block(block),
                area,
                buf,
            );
            return;
        };
        let page = page_size() as f64;
        let x = |t: f64| t - now;
        let kernel: Vec<(f64, f64)> = m
            .history
            .iter()
            .map(|p| (x(p.time_s), p.kernel_pages_per_s * page / 1e6))
            .collect();
        let writer: Vec<(f64, f64)> = m
            .history
            .iter()
            .map(|p| (x(p.time_s), p.writer_bytes_per_s / 1e6))
            .collect();
        let dirty: Vec<(f64, f64)> = m
            .history
            .iter()
            .map(|p| (x(p.time_s), p.dirty_pages as f64 * page / 1e6))
            .collect();
        let top = kernel
            .iter()
            .chain(&writer)
            .chain(&dirty)
            .map(|p| p.1)
            .fold(1.0f64, f64::max);
        // A round upper bound so the labels stay readable.
        let magnitude = 10f64.powf(top.log10().floor());
        let ymax = (top / magnitude).ceil() * magnitude;
        let span = (m.history.len() as f64).clamp(10.0, HISTORY_SECS as f64);
        let datasets = vec![
            Dataset::default()
                .name("kernel")
                .marker(symbols::Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme::kernel())
                .data(&kernel),
            Dataset::default()
                .name("writer")
                .marker(symbols::Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme::writer())
                .data(&writer),
            Dataset::default()
                .name("dirty MB")
                .marker(symbols::Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme::dirty())
                .data(&dirty),
        ];
        let chart = Chart::new(datasets)
            .block(block)
            .legend_position(Some(LegendPosition::TopLeft))
            .hidden_legend_constraints((
                ratatui::layout::Constraint::Percentage(50),
                ratatui::layout::Constraint::Percentage(60),
            ))
            .x_axis(
                Axis::default()
                    .bounds([-span, 0.0])
                    .labels([format!("-{span:.0}s"), "now".to_string()])
                    .style(theme::dim()),
            )
            .y_axis(
                Axis::default()
                    .bounds([0.0, ymax])
                    .labels(["0".to_string(), format!("{ymax:.0}")])
                    .style(theme::dim()),
            );
        Widget::render(chart, area, buf);
    }
}
