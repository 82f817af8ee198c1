//! The writer: its settings (what the keys change), run state, throughput
//! sparkline and sync latency percentiles.
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Paragraph, Sparkline, Widget},
};
use writer_core::{ByteSize, Strategy};

use super::{pane_block, theme};
use crate::app::{RunState, WriterSettings};
use crate::state::Model;
use crate::state::WriterPhase;
use wbscope_model::units;

/// The widget of the writer pane: settings, run state, throughput and sync latencies: it reads only its own slice of the
/// dashboard state.
pub(crate) struct WriterPane<'a> {
    pub(crate) model: &'a Model,
    pub(crate) settings: &'a WriterSettings,
    pub(crate) run_state: RunState,
    pub(crate) focused: bool,
}

impl Widget for WriterPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let m = self.model;
        let w = &m.writer;
        let s = self.settings;
        let block = pane_block(" writer ", self.focused);
        let inner = block.inner(area);
        Widget::render(block, area, buf);

        let mut settings = vec![
            Span::styled(s.strategy.name(), theme::writer()),
            Span::raw("  chunk "),
            Span::styled(ByteSize(s.chunk).to_string(), theme::value()),
        ];
        if s.strategy == Strategy::SrfPipelined || inner.width >= 50 {
            settings.push(Span::raw("  window "));
            settings.push(Span::styled(s.window.to_string(), theme::value()));
        }
        settings.push(Span::raw("  jobs "));
        settings.push(Span::styled(s.jobs.to_string(), theme::value()));

        let state = match (self.run_state, &w.phase) {
            (RunState::Stopping { restart: true, .. }, _) => Line::from(Span::styled(
                "restarting with the new settings",
                theme::warn(),
            )),
            (RunState::Stopping { .. }, _) => Line::from(Span::styled("stopping", theme::warn())),
            (RunState::Running { .. }, WriterPhase::Running) => Line::from(vec![
                Span::styled("running ", theme::good()),
                Span::styled(units::mb_s(w.current_rate() as f64), theme::writer()),
                Span::raw(format!(
                    "  {} in {} run(s)",
                    units::bytes(w.total_bytes),
                    w.runs
                )),
            ]),
            (RunState::Running { .. }, _) => Line::from(Span::styled("starting", theme::warn())),
            (RunState::Idle, WriterPhase::Ended(how)) => Line::from(vec![
                Span::styled("stopped: ", theme::dim()),
                Span::raw(how.clone()),
            ]),
            (RunState::Idle, _) => Line::from(Span::styled("idle: w starts a run", theme::dim())),
        };
        let mut lines = vec![Line::from(settings), state];
        let [text, spark, rest] = Layout::vertical([
            Constraint::Length(2),
            Constraint::Length(if inner.height >= 6 { 2 } else { 1 }),
            Constraint::Min(0),
        ])
        .areas(inner);
        Widget::render(Paragraph::new(std::mem::take(&mut lines)), text, buf);

        // Newest on the right, as much history as fits.
        let n = usize::from(spark.width);
        let data: Vec<u64> = w
            .throughput
            .iter()
            .skip(w.throughput.len().saturating_sub(n))
            .copied()
            .collect();
        Widget::render(
            Sparkline::default().data(&data).style(theme::writer()),
            spark,
            buf,
        );

        let roomy = rest.width >= 45;
        let mut sync: Vec<Line> = w
            .sync
            .iter()
            .filter_map(|(kind, h)| {
                let s = h.summary()?;
                let mut spans = vec![
                    Span::raw(short_kind(kind.name()).to_string()),
                    Span::raw(" p50 "),
                    Span::styled(units::us(s.p50), theme::value()),
                    Span::raw(" p99 "),
                    Span::styled(units::us(s.p99), theme::value()),
                ];
                if roomy {
                    spans.push(Span::raw(format!(
                        " max {}  {} calls",
                        units::us(s.max),
                        units::si(s.count as f64)
                    )));
                }
                Some(Line::from(spans))
            })
            .collect();
        if sync.is_empty() && !w.dir.is_empty() {
            sync.push(Line::from(Span::styled("no sync calls", theme::dim())));
        }
        if !w.dir.is_empty() {
            sync.push(Line::from(Span::styled(
                format!("{}/file in {}", units::bytes(w.file_size), w.dir),
                theme::dim(),
            )));
        }
        Widget::render(Paragraph::new(sync), rest, buf);
    }
}

fn short_kind(name: &str) -> &str {
    match name {
        "srf_write" => "srf WRITE",
        "srf_wait_before" => "srf WAIT_BEFORE",
        other => other,
    }
}
