//! The findings of `wbscope doctor` (docs/findings.md) in the report: a
//! strip on the shared time axis, one row per finding, a band from the
//! start of the first interval it held in to the end of the last (solid
//! for `critical`, hatched for `warning`, outlined for `info`, so the
//! severities stay apart printed in grey), and the list below it with
//! severity, evidence and advice.
//!
//! Where the findings come from: a `compare`/`scenario` document carries
//! each run's `kernel.findings` (judged on the window's one-second
//! interval lines); a recording's interval lines are judged here with the
//! same engine `wbscope doctor --from` uses.
use std::fmt::Write as _;

use wbscope_model::findings::RULES;

use super::{
    data::{FindingMark, ReportData},
    layout::{
        Drawn, LEFT, NOTE_SIZE, PLOT_TOP, RIGHT, TICK_SIZE, WIDTH, XLayout, frames, notes_below,
        segment_axis,
    },
    svg::{Anchor, Canvas, GRID, INK, MUTED, n, xml},
};

const ROW_H: f64 = 18.0;
const CRITICAL: &str = "#b2182b";
const WARNING: &str = "#c05a00";
const INFO: &str = "#1f4e9c";

/// The finding names of the input, in catalogue order (names the
/// catalogue does not know last, as they come).
fn names(d: &ReportData) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in &d.segments {
        for f in &s.findings {
            if !out.contains(&f.name) {
                out.push(f.name.clone());
            }
        }
    }
    let rank = |name: &str| {
        RULES
            .iter()
            .position(|r| r.name == name)
            .unwrap_or(RULES.len())
    };
    out.sort_by_key(|name| rank(name));
    out
}

/// Why the strip is empty, when it is.
fn empty_reason(d: &ReportData) -> String {
    if d.segments.iter().any(|s| s.findings_known) {
        "empty: no finding held in any interval (docs/findings.md: nothing to report)".into()
    } else {
        "empty: no findings in this input (written by a wbscope without doctor)".into()
    }
}

/// The strip: rows of findings on the time panels' axis.
pub(crate) fn strip(d: &ReportData, layout: &XLayout) -> Drawn {
    let names = names(d);
    let rows = names.len().max(1);
    let plot_h = rows as f64 * ROW_H;
    let plot_b = PLOT_TOP + plot_h;
    let notes_h = (3 + 2 * d.segments.len()) as f64 * 15.0;
    let mut c = Canvas::new(WIDTH, plot_b + 40.0 + notes_h);
    let (plot_l, plot_r) = (LEFT, WIDTH - RIGHT);
    c.text(
        "Findings of wbscope doctor, on the same time axis (docs/findings.md)",
        8.0,
        16.0,
        13.0,
        Anchor::Start,
        INK,
    );
    // Legend: the three severities.
    let mut lx = plot_l;
    for severity in ["critical", "warning", "info"] {
        let b = Canvas::box_of(severity, lx + 30.0, 38.0, NOTE_SIZE, Anchor::Start);
        if !c.fits(&b) {
            break;
        }
        band(&mut c, severity, lx, 28.0, 24.0, 12.0, "");
        c.text(severity, lx + 30.0, 38.0, NOTE_SIZE, Anchor::Start, INK);
        lx = b.x1 + 14.0;
    }
    // Row codes in the margin; the list below names them.
    for (k, _) in names.iter().enumerate() {
        let y = PLOT_TOP + k as f64 * ROW_H;
        c.text(
            &format!("F{}", k + 1),
            plot_l - 8.0,
            y + ROW_H / 2.0 + 4.0,
            NOTE_SIZE,
            Anchor::End,
            INK,
        );
        if k > 0 {
            c.line(plot_l, y, plot_r, y, GRID, 1.0);
        }
    }
    let mut points = 0;
    let mut key = Vec::new();
    for (i, (s, &(x0, x1))) in d.segments.iter().zip(&layout.spans).enumerate() {
        segment_axis(&mut c, d, s, i, (x0, x1), plot_b, &mut key);
        let span = s.timeline.span_s.max(1e-9);
        let x_of = |t: f64| x0 + (x1 - x0) * (t / span).clamp(0.0, 1.0);
        for f in &s.findings {
            let Some(row) = names.iter().position(|nm| *nm == f.name) else {
                continue;
            };
            let (a, b) = (x_of(f.start_s), x_of(f.last_seen_s));
            // At least 4 px: one short interval at a run's end still shows.
            let (a, b) = if b - a < 4.0 {
                ((b - 4.0).max(x0), (b - 4.0).max(x0) + 4.0)
            } else {
                (a, b)
            };
            let y = PLOT_TOP + row as f64 * ROW_H + 3.0;
            let title = format!(
                "{} ({}): {:.1}-{:.1} s",
                f.name, f.severity, f.start_s, f.last_seen_s
            );
            band(&mut c, &f.severity, a, y, b - a, ROW_H - 6.0, &title);
            points += 1;
            // The name beside the band when it fits inside the run.
            let label = format!("{} ({})", f.name, f.severity);
            let lb = Canvas::box_of(&label, b + 4.0, y + ROW_H - 9.0, TICK_SIZE, Anchor::Start);
            if lb.x1 < x1 - 2.0 {
                c.text(
                    &label,
                    b + 4.0,
                    y + ROW_H - 9.0,
                    TICK_SIZE,
                    Anchor::Start,
                    INK,
                );
            }
        }
    }
    frames(&mut c, layout, plot_h);
    let empty = (points == 0).then(|| empty_reason(d));
    if let Some(e) = &empty {
        c.text(
            e,
            (plot_l + plot_r) / 2.0,
            PLOT_TOP + plot_h / 2.0 + 4.0,
            NOTE_SIZE,
            Anchor::Middle,
            MUTED,
        );
    }
    let note = "band: from the start of the first interval a finding held in to the end of the last (F1, F2...: the list below)";
    notes_below(
        &mut c,
        d,
        plot_b,
        std::iter::once(note.to_string()).chain(key),
    );
    Drawn {
        canvas: c,
        id: "findings",
        points,
        empty,
    }
}

/// Fill, stroke, hatched of a severity: `critical` solid, `warning`
/// hatched, `info` an outline, so they stay apart in grey.
fn look(severity: &str) -> (&'static str, &'static str, bool) {
    match severity {
        "critical" => (CRITICAL, CRITICAL, false),
        "warning" => ("white", WARNING, true),
        _ => ("white", INFO, false),
    }
}

/// A finding's band (or a legend swatch): a rectangle in its severity's
/// look; hatching drawn as 45° lines clipped to it (no SVG pattern: the
/// page refers to nothing, not even by `url(#…)`).
fn band(c: &mut Canvas, severity: &str, x: f64, y: f64, w: f64, h: f64, title: &str) {
    let (fill, stroke, hatched) = look(severity);
    let title = if title.is_empty() {
        String::new()
    } else {
        format!("<title>{}</title>", xml(title))
    };
    c.raw(&format!(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.5\">{title}</rect>\n",
        n(x),
        n(y),
        n(w),
        n(h)
    ));
    if !hatched {
        return;
    }
    // Lines from (x0, y + h) up to (x0 + h, y), every 5 px; the part of
    // each inside the rectangle: t in [x - x0, x + w - x0] and [0, h].
    let mut d = String::new();
    let mut x0 = x - h;
    while x0 < x + w {
        let (t0, t1) = ((x - x0).max(0.0), (x + w - x0).min(h));
        if t1 > t0 {
            let _ = write!(
                d,
                "M{},{} L{},{} ",
                n(x0 + t0),
                n(y + h - t0),
                n(x0 + t1),
                n(y + h - t1)
            );
        }
        x0 += 5.0;
    }
    c.raw(&format!(
        "<path d=\"{}\" stroke=\"{stroke}\" stroke-width=\"2\"/>\n",
        d.trim_end()
    ));
}

/// Its evidence on one line: `key = value; ...`.
fn evidence_text(f: &FindingMark) -> String {
    f.evidence
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k} = {s}"),
            v => format!("{k} = {v}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "3 intervals, 1 episode".
fn held(f: &FindingMark) -> String {
    let s = |k: u64| if k == 1 { "" } else { "s" };
    format!(
        "{} interval{}, {} episode{}",
        f.intervals,
        s(f.intervals),
        f.episodes,
        s(f.episodes)
    )
}

/// The `#findings` section: the list, code by code as the strip numbers
/// them, with severity, when, evidence and advice.
pub(crate) fn section(d: &ReportData) -> String {
    let mut out = String::from("<section id=\"findings\">\n<h2>Findings</h2>\n");
    let names = names(d);
    if names.is_empty() {
        let why = empty_reason(d);
        let why = why.trim_start_matches("empty: ");
        let _ = writeln!(out, "<p class=\"muted\">No findings: {}.</p>", xml(why));
        out.push_str("</section>\n");
        return out;
    }
    let runs = d.segments.len() > 1 || !d.recording;
    let _ = writeln!(
        out,
        "<table class=\"findings\">\n<tr><th>code</th><th>finding</th><th>severity</th>{}<th>seen</th><th>evidence (worst interval)</th><th>what to try</th></tr>",
        if runs { "<th>run</th>" } else { "" }
    );
    for (k, name) in names.iter().enumerate() {
        for s in &d.segments {
            for f in s.findings.iter().filter(|f| f.name == *name) {
                let run = if runs {
                    format!("<td>{}</td>", xml(&s.name))
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "<tr><td>F{}</td><td>{}</td><td class=\"sev-{}\">{}</td>{run}<td>{} to {} s ({})</td><td>{}</td><td>{}</td></tr>",
                    k + 1,
                    xml(&f.name),
                    xml(&f.severity),
                    xml(&f.severity),
                    n(f.start_s),
                    n(f.last_seen_s),
                    held(f),
                    xml(&evidence_text(f)),
                    xml(&f.advice)
                );
            }
        }
    }
    out.push_str("</table>\n</section>\n");
    out
}
