//! The header lines: where we are, what is attached, what the tracer
//! itself costs (and, apart, the bundled writer); replaying a store, a
//! third: its span and where in it the view is.
use ratatui::{
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::Paragraph,
};

use super::theme;
use crate::app::App;
use crate::jump::{self, StoreView};
use crate::state::{Model, WriterPhase};
use wbscope_model::units;

/// (attached, fallen back, missing, off): fallen back means attached,
/// but not with the first candidate hook this kernel could give; off,
/// left off until `--enable` (not missing).
pub(crate) fn plan_counts(m: &Model) -> (usize, usize, usize, usize) {
    if m.plan.concepts.is_empty() {
        let attached = m
            .probes
            .iter()
            .filter(|p| p.state == wbscope_model::plan::ProbeState::Attached)
            .count();
        return (attached, 0, m.probes.len() - attached, 0);
    }
    let count = |f: fn(&wbscope_model::plan::ConceptPlan) -> bool| {
        m.plan.concepts.iter().filter(|c| f(c)).count()
    };
    let (attached, fallen, off) = (
        count(|c| c.is_attached()),
        count(|c| c.fell_back()),
        count(|c| c.is_off_by_default()),
    );
    (
        attached,
        fallen,
        m.plan.concepts.len() - attached - off,
        off,
    )
}

pub(crate) fn header(app: &App, width: u16) -> Paragraph<'static> {
    let m = app.shown();
    let (attached, fallen, missing, off) = plan_counts(m);
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
            if off > 0 {
                format!("{off} off, ")
            } else {
                String::new()
            },
            theme::dim(),
        ),
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
    let pct = |c: f64| format!("{:.1}%", c * 100.0);
    let mut second = vec![
        Span::raw(format!(" records/s {}  ", units::si(m.calls_per_sec))),
        Span::styled(format!("lost {}", m.lost_records), lost_style),
        Span::raw(format!("  tracer CPU {}", units::opt(m.cpu.tracer, pct))),
    ];
    // The writer's threads apart, beside the tracer's, from its first run
    // on: between runs it reads 0.0% rather than vanishing, so the line
    // keeps its shape and the tracer's figure is never taken for both.
    if m.writer.phase != WriterPhase::Idle {
        second.push(Span::raw(format!(
            "  writer CPU {}",
            units::opt(m.cpu.writer, pct)
        )));
    }
    second.push(Span::raw(format!("  BPF {}/s", units::opt(bpf, units::ns))));
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
    let mut lines = vec![Line::from(first), Line::from(second)];
    if let Some(store) = &app.store {
        lines.push(store_line(
            app.replay.as_deref().unwrap_or(""),
            store,
            width,
        ));
    }
    Paragraph::new(lines)
}

/// Header lines: three replaying a store, else two.
pub(crate) fn height(app: &App) -> u16 {
    if app.store.is_some() { 3 } else { 2 }
}

/// Width of the bar that shows where in the store the view is.
const BAR: usize = 24;

/// ` store NAME  2026-12-02 00:00:00 to 01:00:00 UTC  [====|-----]  at
/// 00:20:00`: the store's span (within `--since`/`--until`), the view's
/// place in it as a bar (when there is room) and as a time.
fn store_line(name: &str, store: &StoreView, width: u16) -> Line<'static> {
    let at = store.at();
    let mut spans = vec![
        Span::styled(" store ", theme::title()),
        Span::raw(format!(" {name}  ")),
        Span::styled(jump::span(store.first_ns, store.last_ns), theme::dim()),
    ];
    if width >= 100 {
        let length = store.last_ns.saturating_sub(store.first_ns).max(1);
        let done = at.saturating_sub(store.first_ns).min(length);
        // u128: ns times the bar's width overflow u64 past a few years.
        let mark = (u128::from(done) * (BAR as u128 - 1) / u128::from(length)) as usize;
        spans.push(Span::raw(format!(
            "  [{}|{}]",
            "=".repeat(mark),
            "-".repeat(BAR - 1 - mark)
        )));
    }
    spans.push(Span::raw("  at "));
    spans.push(Span::styled(jump::clock(at), theme::value()));
    if store.searching.is_some() {
        spans.push(Span::styled("  searching\u{2026}", theme::dim()));
    }
    Line::from(spans)
}
