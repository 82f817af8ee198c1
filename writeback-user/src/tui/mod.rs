//! The live dashboard's views. Rendering reads the [`Model`] and changes
//! nothing; the event loop lives in `commands::dashboard`.
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Bar, BarChart, Block, Paragraph, Wrap},
};

use crate::{
    model::{Log2Histogram, Model},
    plan::ProbeState,
};

/// Draws the whole dashboard into `area`. Never panics on small areas:
/// every widget is clipped by ratatui, and panes that do not fit are
/// dropped.
pub fn render(model: &Model, frame: &mut Frame) {
    let area = frame.area();
    if area.width < 20 || area.height < 6 {
        frame.render_widget(Paragraph::new("wbscope: window too small"), area);
        return;
    }
    // The writepages hook, the unavailable ones, the attached rest, within
    // borders; at most 5 rows.
    let missing = model
        .probes
        .iter()
        .filter(|p| p.state != ProbeState::Attached)
        .count();
    let probe_rows = (missing.min(3) as u16 + 2).min(model.probes.len() as u16 + 1) + 2;
    let [header, probes, charts, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(probe_rows),
        Constraint::Min(3),
        Constraint::Length(2),
    ])
    .areas(area);

    frame.render_widget(header_line(model), header);
    frame.render_widget(probe_panel(model), probes);
    render_histograms(model, frame, charts);
    frame.render_widget(footer_lines(model), footer);
}

fn header_line(model: &Model) -> Paragraph<'static> {
    let attached = model
        .probes
        .iter()
        .filter(|p| p.state == ProbeState::Attached)
        .count();
    Paragraph::new(Line::from(vec![
        Span::styled(
            " wbscope ",
            Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        ),
        Span::raw(format!(
            " writeback  probes {attached}/{}  calls/s {:.1}  pages/s {:.0}",
            model.probes.len(),
            model.calls_per_sec,
            model.pages_per_sec
        )),
    ]))
}

fn probe_panel(model: &Model) -> Paragraph<'static> {
    // When nothing could be attached for one reason (no privileges, no
    // tracefs), say it once instead of once per hook.
    let first_reason = match model.probes.first().map(|p| &p.state) {
        Some(ProbeState::Unavailable(why)) => Some(why),
        _ => None,
    };
    let same_reason = first_reason.filter(|why| {
        model
            .probes
            .iter()
            .all(|p| matches!(&p.state, ProbeState::Unavailable(w) if w == *why))
    });
    if let Some(why) = same_reason {
        return Paragraph::new(Line::from(vec![
            Span::styled("unavailable  ", Style::new().fg(Color::Red)),
            Span::raw(format!("all {} concepts: {why}", model.probes.len())),
        ]))
        .wrap(Wrap { trim: true })
        .block(Block::bordered().title(" probes "));
    }
    // The writepages hook first, then what is missing and why; the
    // attached rest in one line.
    let mut lines: Vec<Line> = Vec::new();
    let mut others = Vec::new();
    for p in &model.probes {
        match &p.state {
            ProbeState::Attached if p.concept == "writepages_call" => lines.insert(
                0,
                Line::from(vec![
                    Span::styled("attached     ", Style::new().fg(Color::Green)),
                    Span::raw(format!(
                        "{}: {}",
                        p.concept,
                        p.hook.as_deref().unwrap_or("-")
                    )),
                ]),
            ),
            ProbeState::Attached => others.push(p.concept),
            ProbeState::Unavailable(why) => lines.push(Line::from(vec![
                Span::styled("unavailable  ", Style::new().fg(Color::Red)),
                Span::raw(format!("{}: {why}", p.concept)),
            ])),
        }
    }
    if !others.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("attached     ", Style::new().fg(Color::Green)),
            Span::raw(others.join(", ")),
        ]));
    }
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(Block::bordered().title(" probes "))
}

/// The interval and since-start histograms share one bucket range so they
/// can be read across.
fn render_histograms(model: &Model, frame: &mut Frame, area: Rect) {
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let span = model.hist_total.span();
    frame.render_widget(
        histogram(&model.hist_interval, span, " pages/call, last interval "),
        left,
    );
    frame.render_widget(
        histogram(&model.hist_total, span, " pages/call, since start "),
        right,
    );
}

fn histogram<'a>(
    hist: &Log2Histogram,
    span: Option<(usize, usize)>,
    title: &'a str,
) -> BarChart<'a> {
    let block = Block::bordered().title(title);
    let Some((first, last)) = span else {
        return BarChart::horizontal(Vec::<Bar>::new()).block(block.title_bottom(" no calls yet "));
    };
    let bars: Vec<Bar> = (first..=last)
        .map(|k| {
            Bar::with_label(
                format!("{:>9}", Log2Histogram::bucket_label(k)),
                hist.buckets()[k],
            )
        })
        .collect();
    BarChart::horizontal(bars)
        .block(block)
        .bar_gap(0)
        .bar_style(Style::new().fg(Color::Cyan))
        .value_style(Style::new().add_modifier(Modifier::BOLD))
}

fn footer_lines(model: &Model) -> Paragraph<'static> {
    let lost = model.kernel.lost_records;
    let lost_style = if lost > 0 {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::new()
    };
    Paragraph::new(vec![
        Line::from(vec![
            Span::raw(format!(
                " calls {}  pages written {}  ",
                model.totals.calls, model.totals.pages_written
            )),
            Span::styled(format!("lost records {lost}"), lost_style),
            Span::raw(format!(
                "  unmatched results {}",
                model.kernel.unmatched_results
            )),
        ]),
        Line::from(Span::styled(
            " q quit",
            Style::new().add_modifier(Modifier::DIM),
        )),
    ])
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};
    use writeback_common::{WritepagesCall, call_flags};

    use super::*;
    use crate::{
        loader::KernelStats,
        model::CallRecord,
        plan::{ProbePlan, ProbeStatus},
    };

    fn model_with_calls() -> Model {
        let mut model = Model::new(vec![
            ProbeStatus {
                concept: "writepages_call",
                hook: Some("tracepoint ext4:ext4_writepages + ext4:ext4_writepages_result".into()),
                state: ProbeState::Attached,
            },
            ProbeStatus {
                concept: "scan",
                hook: Some("tracepoint ext4:ext4_da_write_folios_start".into()),
                state: ProbeState::Attached,
            },
            ProbeStatus {
                concept: "per_page_write",
                hook: None,
                state: ProbeState::Unavailable(
                    "tracepoint writeback:wbc_writepage: not present on this kernel".into(),
                ),
            },
        ]);
        for pages in [1, 3, 3, 1000, 16384, 16384] {
            model.on_call(&CallRecord::from(&WritepagesCall {
                pages_written: pages,
                flags: call_flags::START_SEEN,
                ..Default::default()
            }));
        }
        model.end_interval(
            1.0,
            KernelStats {
                lost_records: 2,
                ..Default::default()
            },
        );
        model.on_call(&CallRecord::from(&WritepagesCall {
            pages_written: 3,
            ..Default::default()
        }));
        model
    }

    fn draw(model: &Model, w: u16, h: u16) -> Terminal<TestBackend> {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
        terminal.draw(|f| render(model, f)).unwrap();
        terminal
    }

    #[test]
    fn dashboard_80x24() {
        let terminal = draw(&model_with_calls(), 80, 24);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn missing_probes_are_explained() {
        let model = Model::new(
            ProbePlan::unavailable(
                "6.18".into(),
                "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON \
                 (missing: CAP_BPF)",
            )
            .statuses(),
        );
        let terminal = draw(&model, 80, 24);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn tiny_and_empty_areas_do_not_panic() {
        let model = model_with_calls();
        for (w, h) in [
            (0, 0),
            (1, 1),
            (10, 3),
            (19, 24),
            (80, 6),
            (200, 7),
            (300, 100),
        ] {
            draw(&model, w, h);
        }
    }
}
