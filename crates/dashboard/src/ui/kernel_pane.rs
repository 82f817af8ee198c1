//! Kernel writeback figures of the last interval: rates, asked vs
//! written, scan cost, causes, dirty levels against the thresholds,
//! throttling.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Paragraph, Widget, Wrap},
};

use super::{pane_block, theme};
use crate::state::Model;
use wbscope_model::plan::ProbeState;
use wbscope_model::units;
use wbscope_model::units::page_size;

/// The reason shared by every concept when nothing could be attached (no
/// privileges, no tracefs), said once.
pub(crate) fn common_reason(m: &Model) -> Option<&str> {
    let first = match m.probes.first().map(|p| &p.state) {
        Some(ProbeState::Unavailable(why)) => why.as_str(),
        _ => return None,
    };
    m.probes
        .iter()
        .all(|p| matches!(&p.state, ProbeState::Unavailable(w) if w == first))
        .then_some(first)
}

/// The widget of the kernel pane: writeback rates, causes and dirty levels: it reads only its own slice of the
/// dashboard state.
pub(crate) struct KernelPane<'a> {
    pub(crate) model: &'a Model,
    pub(crate) focused: bool,
}

impl Widget for KernelPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let m = self.model;
        let block = pane_block(" kernel writeback ", self.focused);
        let inner_w = area.width.saturating_sub(2);
        let mut lines = Vec::new();
        if let Some(why) = common_reason(m) {
            lines.push(Line::from(Span::styled("probes unavailable", theme::bad())));
            lines.push(Line::from(why.to_string()));
            lines.push(Line::from(Span::styled(
                "dirty levels below come from /proc/vmstat",
                theme::dim(),
            )));
        } else {
            lines.extend(rates(m));
        }
        lines.extend(dirty_lines(m, inner_w));
        if area.height >= 12 && common_reason(m).is_none() {
            lines.extend(detail_lines(m));
        }
        Widget::render(
            Paragraph::new(lines).wrap(Wrap { trim: true }).block(block),
            area,
            buf,
        );
    }
}

fn rates(m: &Model) -> Vec<Line<'static>> {
    let Some(l) = &m.last else {
        return vec![Line::from(Span::styled(
            "waiting for the first interval",
            theme::dim(),
        ))];
    };
    let per_s = |v: u64| v as f64 / l.interval_s.max(1e-3);
    let causes: Vec<String> = l
        .calls_by_cause
        .iter()
        .map(|(c, n)| format!("{} {}", short_cause(c), units::si(per_s(*n))))
        .collect();
    let t = &l.throttle;
    vec![
        Line::from(vec![
            Span::raw("calls/s "),
            Span::styled(units::si(m.calls_per_sec), theme::value()),
            Span::raw("  pages/s "),
            Span::styled(units::si(m.pages_per_sec), theme::kernel()),
            Span::raw(format!(
                "  {}",
                units::mb_s(m.pages_per_sec * page_size() as f64)
            )),
        ]),
        Line::from(vec![
            Span::raw("written/asked "),
            Span::styled(
                units::opt(l.written_per_asked, |r| format!("{:.0}%", r * 100.0)),
                theme::value(),
            ),
            Span::raw("  scan "),
            Span::styled(
                units::opt(l.scan.pages_scanned_per_page_written, |r| format!("{r:.2}")),
                theme::value(),
            ),
            Span::raw(" pg/pg"),
        ]),
        Line::from(vec![
            Span::styled(units::opt(l.ns_per_written_page, units::ns), theme::value()),
            Span::raw("/page  throttled "),
            Span::styled(
                format!("{} ({} ms)", t.pauses, t.pause_ms_total),
                if t.pauses > 0 {
                    theme::bad()
                } else {
                    theme::value()
                },
            ),
        ]),
        Line::from(if causes.is_empty() {
            vec![Span::styled("calls/s by cause: none", theme::dim())]
        } else {
            vec![Span::raw(format!("cause/s {}", causes.join(" ")))]
        }),
    ]
}

/// Lines for a roomy pane: flusher work, inode passes, devices.
fn detail_lines(m: &Model) -> Vec<Line<'static>> {
    let Some(l) = &m.last else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let flusher: Vec<String> = l
        .flusher
        .iter()
        .map(|f| format!("{} {}x/{}pg", f.reason, f.chunks, units::si(f.pages as f64)))
        .collect();
    out.push(Line::from(vec![
        Span::raw("flusher "),
        Span::raw(if flusher.is_empty() {
            "idle".to_string()
        } else {
            flusher.join(" ")
        }),
        Span::styled(
            format!(
                "  inode passes {} wrote {} of {} asked",
                l.inode_passes,
                units::si(l.inode_pages_wrote as f64),
                units::si(l.inode_pages_asked as f64)
            ),
            theme::dim(),
        ),
    ]));
    let devices: Vec<String> = l
        .devices
        .iter()
        .map(|d| format!("{} {} req", d.dev, d.requests))
        .collect();
    out.push(Line::from(vec![
        Span::raw("block "),
        Span::raw(if devices.is_empty() {
            "no requests".to_string()
        } else {
            devices.join("  ")
        }),
        Span::styled(
            format!("  extents {} bios {}", l.extents, l.bios),
            theme::dim(),
        ),
    ]));
    out
}

fn short_cause(c: &str) -> &str {
    match c {
        "background" => "bg",
        "periodic" => "kupdate",
        "flusher_other" => "flusher",
        other => other,
    }
}

/// Dirty and Writeback as bars over the dirty threshold, with the
/// background threshold marked `|`; throttling below.
fn dirty_lines(m: &Model, width: u16) -> Vec<Line<'static>> {
    let Some(l) = &m.last else {
        return Vec::new();
    };
    let v = &l.dirty.vmstat;
    let page = page_size();
    let limit = v.nr_dirty_threshold.max(1);
    let bar_w = usize::from(width.saturating_sub(22)).clamp(4, 60);
    let bar = |pages: u64, style: Style| -> Vec<Span<'static>> {
        let fill = ((pages as f64 / limit as f64) * bar_w as f64).round() as usize;
        let fill = fill.min(bar_w);
        let bg = ((v.nr_dirty_background_threshold as f64 / limit as f64) * bar_w as f64) as usize;
        let rest: String = (fill..bar_w)
            .map(|i| if i == bg { '|' } else { '.' })
            .collect();
        vec![
            Span::raw("["),
            Span::styled("#".repeat(fill), style),
            Span::styled(rest, theme::dim()),
            Span::raw("] "),
            Span::styled(units::bytes(pages * page), theme::value()),
        ]
    };
    let mut dirty = vec![Span::raw("Dirty ")];
    dirty.extend(bar(v.nr_dirty, theme::dirty()));
    let mut wb = vec![Span::raw("Wback ")];
    wb.extend(bar(v.nr_writeback, theme::kernel()));
    vec![
        Line::from(dirty),
        Line::from(wb),
        Line::from(Span::styled(
            format!(
                "| bg {}  limit {}",
                units::bytes(v.nr_dirty_background_threshold * page),
                units::bytes(v.nr_dirty_threshold * page)
            ),
            theme::dim(),
        )),
    ]
}
