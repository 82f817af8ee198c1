//! The writer: its settings (what the keys change), run state, throughput
//! sparkline and sync latency percentiles.
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Paragraph, Sparkline},
};
use writer_core::{ByteSize, Strategy};

use super::{fmt, pane_block, theme};
use crate::{
    dashboard::app::{App, Pane, RunState},
    dashboard::state::WriterPhase,
};

pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let m = app.shown();
    let w = &m.writer;
    let s = &app.settings;
    let block = pane_block(" writer ", app.view.focus == Pane::Writer);
    let inner = block.inner(area);
    frame.render_widget(block, area);

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

    let state = match (app.run_state, &w.phase) {
        (RunState::Stopping { restart: true, .. }, _) => Line::from(Span::styled(
            "restarting with the new settings",
            theme::warn(),
        )),
        (RunState::Stopping { .. }, _) => Line::from(Span::styled("stopping", theme::warn())),
        (RunState::Running { .. }, WriterPhase::Running) => Line::from(vec![
            Span::styled("running ", theme::good()),
            Span::styled(fmt::mb_s(w.current_rate() as f64), theme::writer()),
            Span::raw(format!(
                "  {} in {} run(s)",
                fmt::bytes(w.total_bytes),
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
    frame.render_widget(Paragraph::new(std::mem::take(&mut lines)), text);

    // Newest on the right, as much history as fits.
    let n = usize::from(spark.width);
    let data: Vec<u64> = w
        .throughput
        .iter()
        .skip(w.throughput.len().saturating_sub(n))
        .copied()
        .collect();
    frame.render_widget(
        Sparkline::default().data(&data).style(theme::writer()),
        spark,
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
                Span::styled(fmt::us(s.p50), theme::value()),
                Span::raw(" p99 "),
                Span::styled(fmt::us(s.p99), theme::value()),
            ];
            if roomy {
                spans.push(Span::raw(format!(
                    " max {}  {} calls",
                    fmt::us(s.max),
                    fmt::si(s.count as f64)
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
            format!("{}/file in {}", fmt::bytes(w.file_size), w.dir),
            theme::dim(),
        )));
    }
    frame.render_widget(Paragraph::new(sync), rest);
}

fn short_kind(name: &str) -> &str {
    match name {
        "srf_write" => "srf WRITE",
        "srf_wait_before" => "srf WAIT_BEFORE",
        other => other,
    }
}
