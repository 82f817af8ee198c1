//! The rules shipped beside the dashboard (docs/grafana/wbscope-rules.yml)
//! under promtool: `promtool check rules`; `promtool test rules` on
//! cases made here from the findings catalogue (every finding has its
//! alert, firing on its warning and critical series and quiet on info
//! and healthy ones). Live, a real Prometheus evaluating the file fires
//! `WbscopeDirtyThrottled` in the dashboard's test ([`super::dashboard`]),
//! under the same throttled load.

use std::{fmt::Write as _, fs, process::Output};

use serde_norway::Value;
use wbscope_model::findings::RULES;

pub(super) const RULES_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/grafana/wbscope-rules.yml"
);

fn promtool(args: &[&str]) -> Output {
    wbscope_programs::PROMTOOL
        .command()
        .args(args)
        .output()
        .expect("spawn promtool (cargo xtask setup installs it)")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The alerting rules of the file: (name, expr, labels, annotations).
fn alerts() -> Vec<(String, String, Value, Value)> {
    let text = fs::read_to_string(RULES_FILE).expect("read the rules file");
    let doc: Value = serde_norway::from_str(&text).expect("rules YAML");
    let groups = doc["groups"].as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter())
        .filter_map(|r| {
            Some((
                r["alert"].as_str()?.to_string(),
                r["expr"].as_str().expect("expr").to_string(),
                r["labels"].clone(),
                r["annotations"].clone(),
            ))
        })
        .collect()
}

/// An annotation as Prometheus renders it for a series of `instance`
/// (the file's annotations use no other template).
fn rendered(template: &str, instance: &str) -> String {
    let out = template.replace("{{ $labels.instance }}", instance);
    assert!(
        !out.contains("{{"),
        "a template this test cannot render: {template}"
    );
    out
}

/// YAML's double-quoted string.
pub(super) fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a JSON string is a YAML one")
}

#[test]
fn the_rules_file_checks_and_every_finding_alerts_from_warning() {
    let out = promtool(&["check", "rules", RULES_FILE]);
    assert!(out.status.success(), "{}", said(&out));

    let alerts = alerts();
    // Each finding of the catalogue: exactly one alert, on its own
    // severity series.
    let mut per_finding = Vec::new();
    for rule in RULES {
        let needle = format!("wbscope_finding_severity{{finding=\"{}\"}}", rule.name);
        let of: Vec<_> = alerts.iter().filter(|a| a.1.contains(&needle)).collect();
        assert_eq!(of.len(), 1, "alerts for {}: {of:?}", rule.name);
        per_finding.push((rule.name, of[0]));
    }

    // A host at warning, one at critical (the samples at 30 and 45 s),
    // one at info all along, one healthy; 15-s samples. The alerts fire
    // at 45 s for the first two only, still at 75 s (the minute's
    // window), and are resolved at 120 s, when the window no longer
    // holds a bad sample.
    let hosts = [
        ("warn:9400", "0 0 2 2 0 0 0 0 0 0"),
        ("crit:9400", "0 0 3 3 0 0 0 0 0 0"),
        ("info:9400", "1x9"),
        ("ok:9400", "0x9"),
    ];
    let mut t = format!(
        "rule_files:\n  - {}\nevaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n",
        quoted(RULES_FILE)
    );
    for (finding, _) in &per_finding {
        for (host, values) in hosts {
            let _ = writeln!(
                t,
                "      - series: {}\n        values: {}",
                quoted(&format!(
                    "wbscope_finding_severity{{finding=\"{finding}\",instance=\"{host}\",job=\"wbscope\"}}"
                )),
                quoted(values)
            );
        }
    }
    // The tracer's lost records: one host loses 5 at 30 s, one none.
    for (host, values) in [("lossy:9400", "0 0 5 5 5 5 5 5 5 5"), ("ok:9400", "0x9")] {
        let _ = writeln!(
            t,
            "      - series: {}\n        values: {}",
            quoted(&format!(
                "wbscope_lost_records_total{{instance=\"{host}\",job=\"wbscope\"}}"
            )),
            quoted(values)
        );
    }
    t.push_str("    alert_rule_test:\n");
    for (finding, (alert, _, labels, annotations)) in &per_finding {
        for (at, firing) in [
            ("15s", false),
            ("45s", true),
            ("75s", true),
            ("120s", false),
        ] {
            let _ = writeln!(t, "      - eval_time: {at}\n        alertname: {alert}");
            if !firing {
                t.push_str("        exp_alerts: []\n");
                continue;
            }
            t.push_str("        exp_alerts:\n");
            for (host, severity) in [("warn:9400", "warning"), ("crit:9400", "critical")] {
                assert!(
                    labels["severity"].as_str().is_some(),
                    "{alert}: no severity"
                );
                let _ = writeln!(
                    t,
                    "          - exp_labels: {{finding: {}, instance: {}, job: wbscope, severity: {severity}}}",
                    quoted(finding),
                    quoted(host)
                );
                t.push_str("            exp_annotations:\n");
                for (k, v) in annotations.as_mapping().expect("annotations") {
                    let (k, v) = (k.as_str().expect("key"), v.as_str().expect("value"));
                    let _ = writeln!(t, "              {k}: {}", quoted(&rendered(v, host)));
                }
            }
        }
    }
    let (_, _, _, lost_annotations) = alerts
        .iter()
        .find(|a| a.0 == "WbscopeLostRecords")
        .expect("the lost-records alert");
    for (at, firing) in [("15s", false), ("45s", true)] {
        let _ = writeln!(
            t,
            "      - eval_time: {at}\n        alertname: WbscopeLostRecords"
        );
        if firing {
            t.push_str(
                "        exp_alerts:\n          - exp_labels: {instance: \"lossy:9400\", job: wbscope, severity: warning}\n            exp_annotations:\n",
            );
            for (k, v) in lost_annotations.as_mapping().expect("annotations") {
                let (k, v) = (k.as_str().expect("key"), v.as_str().expect("value"));
                let _ = writeln!(
                    t,
                    "              {k}: {}",
                    quoted(&rendered(v, "lossy:9400"))
                );
            }
        } else {
            t.push_str("        exp_alerts: []\n");
        }
    }
    // The fleet row's recording rule: the findings at warning or worse
    // per host.
    let findings = per_finding.len();
    let _ = write!(
        t,
        "    promql_expr_test:\n      - expr: instance:wbscope_findings_alarming:count\n        eval_time: 45s\n        exp_samples:\n          - labels: 'instance:wbscope_findings_alarming:count{{instance=\"crit:9400\",job=\"wbscope\"}}'\n            value: {findings}\n          - labels: 'instance:wbscope_findings_alarming:count{{instance=\"warn:9400\",job=\"wbscope\"}}'\n            value: {findings}\n"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let test_file = dir.path().join("wbscope-rules.test.yml");
    fs::write(&test_file, &t).expect("write the test file");
    let out = promtool(&["test", "rules", test_file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}\n{t}", said(&out));
    assert!(said(&out).contains("SUCCESS"), "{}", said(&out));
}
