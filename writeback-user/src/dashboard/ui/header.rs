//! The two header lines: where we are, what is attached, what the tracer
//! itself costs.
use ratatui::{
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::Paragraph,
};

use super::theme;
use crate::{dashboard::app::App, dashboard::state::Model, model::units};

/// (attached, fallen back, missing): fallen back means attached, but not
/// with the first candidate hook.
pub(crate) fn plan_counts(m: &Model) -> (usize, usize, usize) {
    if m.plan.concepts.is_empty() {
        let attached = m
            .probes
            .iter()
            .filter(|p| p.state == crate::model::plan::ProbeState::Attached)
            .count();
        return (attached, 0, m.probes.len() - attached);
    }
    let attached = m.plan.concepts.iter().filter(|c| c.is_attached()).count();
    let fallen = m
        .plan
        .concepts
        .iter()
        .filter(|c| c.is_attached() && !c.rejected.is_empty())
        .count();
    (attached, fallen, m.plan.concepts.len() - attached)
}

pub(crate) fn header(app: &App, width: u16) -> Paragraph<'static> {
    let m = app.shown();
    let (attached, fallen, missing) = plan_counts(m);
    let kernel = if m.plan.kernel.is_empty() {
        "?"
    } else {
        m.plan.kernel.as_str()
    };
    let narrow = width < 100;
    let mut first = vec![
        Span::styled(" wbscope ", theme::title()),
        Span::raw(format!(" {} ", m.host)),
        Span::styled(
            if narrow {
                format!("{kernel}  ")
            } else {
                format!("kernel {kernel}  ")
            },
            theme::dim(),
        ),
        Span::raw("probes "),
        Span::styled(format!("{attached}/{}", attached + missing), theme::good()),
        Span::raw(if narrow { " " } else { " attached, " }),
        Span::styled(
            format!(
                "{fallen} {}",
                if narrow { "fallback" } else { "fallen back" }
            ),
            if fallen > 0 {
                theme::warn()
            } else {
                Style::new()
            },
        ),
        Span::raw(if narrow { " " } else { ", " }),
        Span::styled(
            format!("{missing} missing"),
            if missing > 0 {
                theme::bad()
            } else {
                Style::new()
            },
        ),
        Span::styled(" (P)", theme::dim()),
    ];
    if app.paused() {
        first.push(Span::styled(
            "  PAUSED (p) ",
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        ));
    }
    let bpf = m.last.as_ref().filter(|l| !l.run_time.is_empty()).map(|l| {
        let ns: u64 = l.run_time.iter().map(|r| r.run_time_ns).sum();
        ns as f64 / l.interval_s.max(1e-3)
    });
    let lost_style = if m.lost_records > 0 {
        theme::bad()
    } else {
        Style::new()
    };
    let mut second = vec![
        Span::raw(format!(" records/s {}  ", units::si(m.calls_per_sec))),
        Span::styled(format!("lost {}", m.lost_records), lost_style),
        Span::raw(format!(
            "  tracer CPU {}  BPF {}/s",
            units::opt(m.tracer_cpu, |c| format!("{:.1}%", c * 100.0)),
            units::opt(bpf, units::ns)
        )),
    ];
    if width >= 100 {
        second.push(Span::styled(
            format!(
                "  calls {}  pages {}",
                m.totals.calls,
                units::si(m.totals.pages_written as f64)
            ),
            theme::dim(),
        ));
    }
    Paragraph::new(vec![Line::from(first), Line::from(second)])
}
