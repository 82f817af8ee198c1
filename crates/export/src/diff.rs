//! `wbscope diff`'s output: the table (text or Markdown), one JSON
//! document, and an HTML page in the report's style with each figure's
//! runs of both sides on one axis. The marks are the tools' own: LKP's
//! `mean ±N%` per side, mmtests' `*  -6.00%*` for a significant change and
//! `(  -1.20%)` for another (model::stats).
use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    report::svg::{Anchor, Canvas, INK, MUTED, STYLES, xml},
    table::render,
};
use wbscope_model::{
    diff::{Diff, Row, Verdict, gate::Hit},
    stats::{lkp_false_alarm, lkp_value, mmtests_mark},
};

/// One side as the output names it: a label and the files it read.
#[derive(Clone, Debug, Serialize)]
pub struct SideFacts {
    pub label: String,
    pub inputs: Vec<String>,
    /// `compare`, `scenario NAME`, `recording`.
    pub kind: String,
}

/// What one `--fail-if` found.
#[derive(Clone, Debug, Serialize)]
pub struct GateOutcome {
    pub expr: String,
    pub hits: Vec<Hit>,
}

/// The JSON document (docs/diff.md, "JSON").
#[derive(Serialize)]
pub struct DiffDoc<'a> {
    pub a: &'a SideFacts,
    pub b: &'a SideFacts,
    #[serde(flatten)]
    pub diff: &'a Diff,
    pub gates: &'a [GateOutcome],
    /// A gate held: the exit status is 3.
    pub failed: bool,
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "n/a",
    }
}

fn verdict(r: &Row) -> String {
    let word = match r.verdict {
        Verdict::Worse => "worse",
        Verdict::Better => "better",
        Verdict::Changed => "changed",
        Verdict::Same => {
            return if r.decided_by == "none" {
                String::new()
            } else {
                format!("({} only)", r.decided_by)
            };
        }
    };
    format!("{word} ({})", r.decided_by)
}

fn change(r: &Row) -> String {
    match r.change_pct {
        Some(c) => format!("{c:+.1}%"),
        None => "new".into(),
    }
}

/// The table: per column, a row per figure.
pub fn text(
    d: &Diff,
    a: &SideFacts,
    b: &SideFacts,
    gates: &[GateOutcome],
    markdown: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {} ({}): {}", a.label, a.kind, a.inputs.join(" "));
    let _ = writeln!(out, "B: {} ({}): {}", b.label, b.kind, b.inputs.join(" "));
    let _ = writeln!(
        out,
        "significant: {} (--rule); per side: mean ±relative stddev (LKP's mark)\n",
        rule_words(d)
    );
    for c in &d.columns {
        let _ = writeln!(
            out,
            "{}: A {} runs, B {} runs",
            c.column, c.runs_a, c.runs_b
        );
        let mut rows = vec![vec![
            "figure".to_string(),
            "unit".into(),
            "A".into(),
            "%change".into(),
            "B".into(),
            "lkp".into(),
            "mmtests".into(),
            "verdict".into(),
        ]];
        for r in &c.rows {
            rows.push(vec![
                r.figure.clone(),
                r.unit.into(),
                lkp_value(&r.a, r.decimals),
                change(r),
                lkp_value(&r.b, r.decimals),
                yes_no(r.lkp).into(),
                mmtests_mark(r.change_pct, r.mmtests),
                verdict(r),
            ]);
        }
        out.push_str(&render(&rows, markdown));
        if c.runs_a < 3 || c.runs_b < 3 {
            let _ = writeln!(
                out,
                "note: fewer than 3 runs a side: {} and {} runs of one configuration fail to overlap {:.0}% of the time",
                c.runs_a,
                c.runs_b,
                lkp_false_alarm(c.runs_a.max(1), c.runs_b.max(1)) * 100.0
            );
        }
        out.push('\n');
    }
    for col in &d.only_a {
        let _ = writeln!(out, "only in A (not compared): {col}");
    }
    for col in &d.only_b {
        let _ = writeln!(out, "only in B (not compared): {col}");
    }
    out.push_str(
        "lkp: the runs do not overlap and |change| >= 5%; mmtests: |difference of means| > both 95% half-widths (Student t), *stars* when it holds\n",
    );
    for g in gates {
        if g.hits.is_empty() {
            let _ = writeln!(out, "--fail-if '{}': holds nowhere", g.expr);
        }
        for h in &g.hits {
            let _ = writeln!(
                out,
                "--fail-if '{}': HOLDS for {} {} ({}, decided by {})",
                g.expr,
                h.column,
                h.figure,
                h.change_pct.map_or("new".into(), |c| format!("{c:+.1}%")),
                h.decided_by
            );
        }
    }
    out
}

fn rule_words(d: &Diff) -> &'static str {
    use wbscope_model::diff::Rule;
    match d.rule {
        Rule::Both => "by both rules, LKP's and mmtests'",
        Rule::Either => "by either rule, LKP's or mmtests'",
        Rule::Lkp => "by LKP's rule",
        Rule::Mmtests => "by mmtests' rule",
    }
}

const STRIP_W: f64 = 320.0;
const STRIP_H: f64 = 44.0;

/// Both sides' runs of one figure on one axis: A's above the line, B's
/// below, each side's mean with its 95% interval as a bar.
pub(crate) fn strip(r: &Row, a: &[f64], b: &[f64]) -> String {
    let mut c = Canvas::new(STRIP_W, STRIP_H);
    let all = a.iter().chain(b);
    let mut lo = all.clone().copied().fold(f64::INFINITY, f64::min);
    let mut hi = all.copied().fold(f64::NEG_INFINITY, f64::max);
    for s in [&r.a, &r.b] {
        if let Some(h) = s.ci95_half {
            lo = lo.min(s.mean - h);
            hi = hi.max(s.mean + h);
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        return c.finish("class=\"strip\"");
    }
    // Figures that cannot be negative keep the axis at zero or above; an
    // interval reaching below is cut at the axis' end.
    if a.iter().chain(b).all(|&v| v >= 0.0) {
        lo = lo.max(0.0);
    }
    if hi - lo < f64::EPSILON * hi.abs().max(1.0) {
        lo -= 0.5;
        hi += 0.5;
    }
    let (x0, x1) = (6.0, STRIP_W - 6.0);
    let x = |v: f64| (x0 + (v - lo) / (hi - lo) * (x1 - x0)).clamp(x0, x1);
    let axis_y = 17.0;
    c.line(x0, axis_y, x1, axis_y, MUTED, 1.0);
    for (i, (s, vals, y)) in [(&r.a, a, axis_y - 8.0), (&r.b, b, axis_y + 8.0)]
        .into_iter()
        .enumerate()
    {
        let style = STYLES[i];
        if let Some(h) = s.ci95_half {
            c.line(x(s.mean - h), y, x(s.mean + h), y, style.colour, 2.0);
        }
        c.line(x(s.mean), y - 5.0, x(s.mean), y + 5.0, style.colour, 2.0);
        for &v in vals {
            c.marker(x(v), y, style);
        }
    }
    // The axis' ends, under B's runs.
    c.text(&fmt_num(lo), x0, STRIP_H - 4.0, 9.0, Anchor::Start, MUTED);
    c.text(&fmt_num(hi), x1, STRIP_H - 4.0, 9.0, Anchor::End, MUTED);
    c.finish(&format!(
        "class=\"strip\" data-figure=\"{}\"",
        xml(&r.figure)
    ))
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The values of each side's runs of a row, for [`strip`].
pub(crate) type RunValues<'a> = &'a dyn Fn(&str, &str) -> (Vec<f64>, Vec<f64>);

/// The HTML page: header as the report's, a table per column with the
/// strip of each figure beside its row; significant changes coloured as
/// mmtests' HTML does (green better, red worse).
pub fn html(
    d: &Diff,
    a: &SideFacts,
    b: &SideFacts,
    gates: &[GateOutcome],
    values: RunValues<'_>,
) -> String {
    let mut out = String::new();
    let title = format!("wbscope diff: {} against {}", b.label, a.label);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n<style>{css}\
.worse{{background:#ffa0a0}}.better{{background:#a0ffa0}}.changed{{background:#e0e0ff}}\
td.num{{text-align:right}}</style>\n</head>\n<body>\n<header>\n<h1>{t}</h1>\n<table class=\"facts\">\n",
        t = xml(&title),
        css = crate::report::CSS,
    );
    for (name, s) in [("A", a), ("B", b)] {
        let _ = writeln!(
            out,
            "<tr><th>{name}</th><td>{} ({}): {}</td></tr>",
            xml(&s.label),
            xml(&s.kind),
            xml(&s.inputs.join(" "))
        );
    }
    let _ = writeln!(
        out,
        "<tr><th>significant</th><td>{}</td></tr>\n</table>\n<p class=\"muted\">Each strip: one axis, A's runs above it (<span style=\"color:{}\">&#9679;</span>), B's below (<span style=\"color:{}\">&#9633;</span>), each side's mean as a tick and its 95% confidence interval as a bar.</p>",
        xml(rule_words(d)),
        STYLES[0].colour,
        STYLES[1].colour
    );
    for g in gates {
        let held = !g.hits.is_empty();
        let _ = writeln!(
            out,
            "<p class=\"{}\">--fail-if {}: {}</p>",
            if held { "warn" } else { "muted" },
            xml(&g.expr),
            if held {
                g.hits
                    .iter()
                    .map(|h| format!("holds for {} {}", xml(&h.column), xml(&h.figure)))
                    .collect::<Vec<_>>()
                    .join("; ")
            } else {
                "holds nowhere".into()
            }
        );
    }
    out.push_str("</header>\n");
    for c in &d.columns {
        let _ = writeln!(
            out,
            "<section>\n<h2>{}: A {} runs, B {} runs</h2>\n<table>\n<tr><th>figure</th><th>unit</th><th>A</th><th>%change</th><th>B</th><th>lkp</th><th>mmtests</th><th>verdict</th><th>runs on one axis</th></tr>",
            xml(&c.column),
            c.runs_a,
            c.runs_b
        );
        for r in &c.rows {
            let class = match r.verdict {
                Verdict::Worse => "worse",
                Verdict::Better => "better",
                Verdict::Changed => "changed",
                Verdict::Same => "",
            };
            let (va, vb) = values(&c.column, &r.figure);
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num {class}\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"{class}\">{}</td><td>{}</td></tr>",
                xml(&r.figure),
                xml(r.unit),
                xml(&lkp_value(&r.a, r.decimals)),
                xml(&change(r)),
                xml(&lkp_value(&r.b, r.decimals)),
                yes_no(r.lkp),
                xml(&mmtests_mark(r.change_pct, r.mmtests)),
                xml(&verdict(r)),
                strip(r, &va, &vb).trim_end()
            );
        }
        out.push_str("</table>\n</section>\n");
    }
    for (side, cols) in [("A", &d.only_a), ("B", &d.only_b)] {
        for col in cols {
            let _ = writeln!(
                out,
                "<p class=\"muted\">only in {side} (not compared): {}</p>",
                xml(col)
            );
        }
    }
    let _ = writeln!(
        out,
        "<p class=\"muted\">lkp: the runs do not overlap and |change| &#8805; 5%. mmtests: |difference of means| &gt; the sum of both 95% half-widths (Student t, n&#8722;1 dof). Marks: <span style=\"color:{INK}\">*stars*</span> where mmtests' rule holds.</p>\n</body>\n</html>"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::diff::{Rule, Sample, Side, diff};

    fn side(xs: &[f64]) -> Side {
        let mut s = Side::default();
        for &x in xs {
            let mut v = Sample::default();
            v.values.insert("write_mb_s", x);
            s.push("buffered", v);
        }
        s
    }

    fn facts(l: &str) -> SideFacts {
        SideFacts {
            label: l.into(),
            inputs: vec![format!("{l}.json")],
            kind: "compare".into(),
        }
    }

    #[test]
    fn the_table_marks_as_lkp_and_mmtests_do() {
        let d = diff(
            &side(&[500.0, 510.0, 490.0]),
            &side(&[400.0, 404.0, 396.0]),
            Rule::Both,
        );
        let t = text(&d, &facts("base"), &facts("new"), &[], false);
        let line = t.lines().find(|l| l.starts_with("write_mb_s")).unwrap();
        // 500 ±2% → 400 ±1%: -20%, both rules.
        assert!(line.contains("500.0 ± 2%"), "{line}");
        assert!(line.contains("-20.0%"), "{line}");
        assert!(line.contains("400.0 ± 1%"), "{line}");
        assert!(line.contains("* -20.00%*"), "{line}");
        assert!(line.contains("worse (both)"), "{line}");
        let same = diff(
            &side(&[500.0, 510.0, 490.0]),
            &side(&[505.0, 495.0, 500.0]),
            Rule::Both,
        );
        let t = text(&same, &facts("base"), &facts("new"), &[], false);
        let line = t.lines().find(|l| l.starts_with("write_mb_s")).unwrap();
        assert!(line.contains("(   0.00%)"), "{line}");
        assert!(!line.contains("worse"), "{line}");
    }

    #[test]
    fn the_page_puts_both_sides_on_one_axis() {
        let d = diff(
            &side(&[500.0, 510.0, 490.0]),
            &side(&[400.0, 404.0, 396.0]),
            Rule::Both,
        );
        let page = html(&d, &facts("base"), &facts("<new>"), &[], &|_, _| {
            (vec![500.0, 510.0, 490.0], vec![400.0, 404.0, 396.0])
        });
        assert!(page.contains("&lt;new&gt;"));
        assert!(!page.contains("<new>"));
        let strip = page.split("data-figure=\"write_mb_s\"").nth(1).unwrap();
        let strip = strip.split("</svg>").next().unwrap();
        // Three circles (A) and three squares (B), on one axis line.
        assert_eq!(strip.matches("<circle").count(), 3);
        assert_eq!(strip.matches("<rect").count(), 3);
        assert!(page.contains("class=\"num worse\""));
        // The axis' ends are labelled: the lowest and highest of the runs and the intervals (400 - 9.9, 500 + 24.8).
        assert!(
            strip.contains(">390</text>") && strip.contains(">525</text>"),
            "{strip}"
        );
    }
}
