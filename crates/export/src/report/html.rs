//! The page around the panels: header, probe plan, the findings list and
//! the who-dirtied table (findings.rs, who.rs), CSS. Self-contained: no script, no
//! external fonts, styles or images.
use std::fmt::Write as _;

use super::{
    data::ReportData,
    dists::dist_panels,
    panels::{time_panels, writes_missing},
    svg::xml,
};

/// The page's style, shared with `wbscope diff`'s page.
pub(crate) const CSS: &str = "\
body{margin:0;padding:16px;background:#fff;color:#222;\
font-family:'DejaVu Sans Mono','Liberation Mono',monospace;font-size:13px}\
h1{font-size:18px;margin:0 0 8px}h2{font-size:15px;margin:18px 0 6px}\
table{border-collapse:collapse;margin:4px 0}\
td,th{padding:1px 10px 1px 0;text-align:left;vertical-align:top}\
th{font-weight:bold}.muted{color:#555}.warn{color:#222;font-weight:bold}\
svg{display:block;margin:0 0 10px}\
.sev-critical,.sev-warning{font-weight:bold}\
@media print{section{break-inside:avoid}}";

/// The whole page.
pub(crate) fn page(d: &ReportData) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n<table class=\"facts\">\n",
        xml(&d.title),
        xml(&d.title)
    );
    for (k, v) in &d.facts {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", xml(k), xml(v));
    }
    out.push_str("</table>\n");
    for w in &d.warnings {
        let _ = writeln!(out, "<p class=\"warn\">damage: {}</p>", xml(w));
    }
    match &d.plan {
        Some(plan) => {
            let _ = writeln!(
                out,
                "<h2>Probe plan</h2>\n<table class=\"plan\">\n<tr><th>concept</th><th>kind</th><th>hook</th></tr>"
            );
            for c in &plan.concepts {
                let (kind, hook) = match (&c.hook, c.kind) {
                    (Some(h), Some(k)) => (k.to_string(), h.clone()),
                    (Some(h), None) => ("-".to_string(), h.clone()),
                    _ => (
                        "-".to_string(),
                        format!(
                            "not attached{}",
                            c.rejected
                                .first()
                                .map(|r| format!(": {}", r.reason))
                                .unwrap_or_default()
                        ),
                    ),
                };
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    xml(c.concept.name()),
                    xml(&kind),
                    xml(&hook)
                );
            }
            out.push_str("</table>\n");
        }
        None => out.push_str("<p class=\"muted\">No probe plan in this input.</p>\n"),
    }
    out.push_str("</header>\n");

    // The findings of `wbscope doctor`: listed here, marked on the time
    // axis by the first time panel.
    out.push_str(&super::findings::section(d));

    out.push_str("<section id=\"time\">\n<h2>On one time axis: the writer and the kernel</h2>\n");
    for svg in time_panels(d) {
        out.push_str(&svg);
    }
    // The write panels, when the input has no write spans, stand as one
    // sentence saying how to get them.
    if let Some(missing) = writes_missing(d) {
        let _ = writeln!(
            out,
            "<p class=\"muted\" id=\"writes-missing\">{}</p>",
            xml(missing)
        );
    }
    out.push_str(
        "</section>\n<section id=\"distributions\">\n<h2>Below the axis: per call, per run</h2>\n",
    );
    for svg in dist_panels(d) {
        out.push_str(&svg);
    }
    out.push_str("</section>\n");

    out.push_str(&super::who::section(d.owners.as_ref(), d.recording));
    out.push_str(&super::who::ledger_section(d.ledger.as_ref(), d.recording));
    out.push_str("</body>\n</html>\n");
    out
}
