//! `wbscope doctor` for people: each finding with its evidence and what
//! to try. Evidence from a recording is untrusted (a task's comm):
//! escaped before it reaches the terminal.
use std::fmt::Write as _;

use wbscope_model::findings::{Finding, Report};
use wbscope_sys::escape::escape_controls;

/// One finding's evidence as `name=value` pairs.
pub(crate) fn evidence_pairs(f: &Finding) -> Vec<String> {
    f.evidence
        .iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{k}={}", escape_controls(&v))
        })
        .collect()
}

/// The report as text: a line per finding, its evidence, the advice.
pub fn report(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "wbscope doctor: {:.1} s watched, {} intervals, {} finding{}",
        r.duration_s,
        r.intervals,
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" }
    );
    if r.findings.is_empty() {
        let _ = writeln!(s, "no writeback problem seen");
    } else if !r.alarming() {
        let _ = writeln!(
            s,
            "no warning: what acted without setting the pace (info, exit status 0)"
        );
    }
    for f in &r.findings {
        let _ = writeln!(
            s,
            "\n{} {}: from {:.1} s to {:.1} s ({} interval{}, {} episode{})",
            f.severity.name().to_uppercase(),
            f.name,
            f.first_seen_s,
            f.last_seen_s,
            f.intervals,
            if f.intervals == 1 { "" } else { "s" },
            f.episodes,
            if f.episodes == 1 { "" } else { "s" },
        );
        let _ = writeln!(s, "  evidence: {}", evidence_pairs(f).join(" "));
        let _ = writeln!(s, "  try: {}", f.advice);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::findings::{Evidence, Severity};

    fn finding(severity: Severity) -> Finding {
        Finding {
            name: "dirty-throttled",
            severity,
            first_seen_s: 1.0,
            last_seen_s: 3.0,
            intervals: 3,
            episodes: 1,
            evidence: Evidence::from([("limit", serde_json::json!("bdi"))]),
            advice: "raise max_bytes".into(),
        }
    }

    #[test]
    fn info_alone_says_no_warning_and_a_warning_does_not() {
        let r = |f: Vec<Finding>| Report {
            duration_s: 3.0,
            intervals: 3,
            findings: f,
        };
        let info = report(&r(vec![finding(Severity::Info)]));
        assert!(info.contains("no warning: what acted"), "{info}");
        assert!(info.contains("INFO dirty-throttled"), "{info}");
        let warn = report(&r(vec![
            finding(Severity::Info),
            finding(Severity::Warning),
        ]));
        assert!(!warn.contains("no warning"), "{warn}");
        assert!(report(&r(vec![])).contains("no writeback problem seen"));
    }
}
