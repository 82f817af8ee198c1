//! The regression gate of `wbscope diff --fail-if EXPR`: an expression
//! over a figure's change, or a finding, that fails a CI job when it holds
//! significantly (docs/diff.md, "The gate"). Forms:
//!
//! - `FIGURE[@COLUMN] OP PERCENT`: `write_mb_s < -5%`, `fsync_p99 > +20%`,
//!   `sys_cpu_s@fsync-end >= 10%`; OP is `<`, `<=`, `>`, `>=`; the
//!   percentage is B's mean against A's. Holds when the change satisfies
//!   it and is significant under `--rule`.
//! - `finding NAME[@COLUMN] appears|disappears`: `finding dirty-throttled
//!   appears` holds when B's runs had it and A's did not, significantly
//!   (under both rules: every run of B had it, none of A's).
//!
//! Without `@COLUMN` an expression applies to every column.
use serde::Serialize;

use super::{Diff, figures};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Op {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

impl Op {
    fn holds(self, x: f64, limit: f64) -> bool {
        match self {
            Op::Lt => x < limit,
            Op::Le => x <= limit,
            Op::Gt => x > limit,
            Op::Ge => x >= limit,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Test {
    Change { op: Op, pct: f64 },
    Appears,
    Disappears,
}

/// One `--fail-if` expression, parsed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gate {
    /// As written.
    pub expr: String,
    /// The figure (`finding:NAME` for a finding).
    pub figure: String,
    pub column: Option<String>,
    pub(crate) test: Test,
}

/// Where a gate held.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    pub(crate) expr: String,
    pub column: String,
    pub figure: String,
    pub change_pct: Option<f64>,
    pub decided_by: &'static str,
}

const OPS: &str = "<, <=, > or >=";

fn known_figures() -> String {
    let names: Vec<&str> = figures::FIGURES.iter().map(|f| f.name).collect();
    names.join(", ")
}

/// Splits `NAME@COLUMN` (the column trimmed; empty is an error).
fn name_and_column(s: &str) -> Result<(&str, Option<String>), String> {
    match s.split_once('@') {
        None => Ok((s.trim(), None)),
        Some((n, c)) if !c.trim().is_empty() => Ok((n.trim(), Some(c.trim().to_string()))),
        Some((n, _)) => Err(format!("expected a column name after '{}@'", n.trim())),
    }
}

impl Gate {
    /// Parses `expr`; the error says what was expected, and where.
    pub fn parse(expr: &str) -> Result<Gate, String> {
        let text = expr.trim();
        if text.is_empty() {
            return Err(
                "expected FIGURE OP PERCENT (e.g. write_mb_s < -5%) or finding NAME appears".into(),
            );
        }
        if let Some(rest) = text.strip_prefix("finding")
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            return Gate::finding(expr, rest.trim());
        }
        let Some(at) = text.find(['<', '>']) else {
            let first = text.split_whitespace().next().unwrap_or(text);
            return Err(format!(
                "expected an operator ({OPS}) after '{first}', e.g. {first} < -5%"
            ));
        };
        let (name, column) = name_and_column(&text[..at])?;
        if name.is_empty() {
            return Err(format!(
                "expected a figure name before '{}'",
                &text[at..at + 1]
            ));
        }
        if figures::figure(name).is_none() || name.starts_with("finding:") {
            return Err(format!(
                "unknown figure '{name}': expected one of {}, or finding NAME appears",
                known_figures()
            ));
        }
        let rest = &text[at..];
        let (op, rest) = if let Some(r) = rest.strip_prefix("<=") {
            (Op::Le, r)
        } else if let Some(r) = rest.strip_prefix(">=") {
            (Op::Ge, r)
        } else if let Some(r) = rest.strip_prefix('<') {
            (Op::Lt, r)
        } else {
            (Op::Gt, &rest[1..])
        };
        let value = rest.trim();
        let Some(number) = value.strip_suffix('%') else {
            return Err(format!(
                "expected a percentage such as -5% or +20% after '{}', found '{value}'",
                &text[at..text.len() - rest.len()]
            ));
        };
        let pct: f64 = number
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite())
            .ok_or_else(|| format!("expected a number before '%', found '{}'", number.trim()))?;
        Ok(Gate {
            expr: expr.to_string(),
            figure: name.to_string(),
            column,
            test: Test::Change { op, pct },
        })
    }

    fn finding(expr: &str, rest: &str) -> Result<Gate, String> {
        let names = || finding_list();
        let Some((head, verb)) = rest.rsplit_once(char::is_whitespace) else {
            return Err(if rest.is_empty() {
                format!("expected a finding name after 'finding' ({})", names())
            } else {
                format!("expected 'appears' or 'disappears' after 'finding {rest}'")
            });
        };
        let test = match verb {
            "appears" => Test::Appears,
            "disappears" => Test::Disappears,
            other => {
                return Err(format!(
                    "expected 'appears' or 'disappears' after 'finding {}', found '{other}'",
                    head.trim()
                ));
            }
        };
        let (name, column) = name_and_column(head)?;
        if !figures::finding_names().any(|n| n == name) {
            return Err(format!(
                "unknown finding '{name}': expected one of {}",
                names()
            ));
        }
        Ok(Gate {
            expr: expr.to_string(),
            figure: format!("finding:{name}"),
            column,
            test,
        })
    }

    /// Whether any column of `d` has this figure on both sides (with the
    /// column, when named). Findings always apply: a finding no run had
    /// has no row and does not hold.
    pub fn applies(&self, d: &Diff) -> bool {
        matches!(self.test, Test::Appears | Test::Disappears)
            || d.columns
                .iter()
                .filter(|c| self.column.as_ref().is_none_or(|want| want == &c.column))
                .any(|c| c.rows.iter().any(|r| r.figure == self.figure))
    }

    /// Where it holds significantly.
    pub fn hits(&self, d: &Diff) -> Vec<Hit> {
        let mut out = Vec::new();
        for c in &d.columns {
            if self.column.as_ref().is_some_and(|want| want != &c.column) {
                continue;
            }
            for r in c.rows.iter().filter(|r| r.figure == self.figure) {
                let holds = r.significant
                    && match self.test {
                        Test::Change { op, pct } => op.holds(r.signed_change(), pct),
                        Test::Appears => r.b.mean > r.a.mean,
                        Test::Disappears => r.b.mean < r.a.mean,
                    };
                if holds {
                    out.push(Hit {
                        expr: self.expr.clone(),
                        column: c.column.clone(),
                        figure: r.figure.clone(),
                        change_pct: r.change_pct,
                        decided_by: r.decided_by,
                    });
                }
            }
        }
        out
    }
}

fn finding_list() -> String {
    figures::finding_names().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{Rule, Sample, Side, diff};

    fn err(expr: &str) -> String {
        Gate::parse(expr).expect_err(expr)
    }

    #[test]
    fn the_issues_examples_parse() {
        let g = Gate::parse("write_mb_s < -5%").unwrap();
        assert_eq!(g.figure, "write_mb_s");
        assert_eq!(
            g.test,
            Test::Change {
                op: Op::Lt,
                pct: -5.0
            }
        );
        assert_eq!(g.column, None);
        let g = Gate::parse("fsync_p99 > +20%").unwrap();
        assert_eq!(
            g.test,
            Test::Change {
                op: Op::Gt,
                pct: 20.0
            }
        );
        let g = Gate::parse("finding dirty-throttled appears").unwrap();
        assert_eq!(
            (g.figure.as_str(), &g.test),
            ("finding:dirty-throttled", &Test::Appears)
        );
        // Spacing and the other forms.
        let g = Gate::parse("  sys_cpu_s@fsync-end>=10.5%").unwrap();
        assert_eq!(g.column.as_deref(), Some("fsync-end"));
        assert_eq!(
            g.test,
            Test::Change {
                op: Op::Ge,
                pct: 10.5
            }
        );
        assert_eq!(
            Gate::parse("write_p99@ext4 buffered <= -1 %")
                .unwrap()
                .column
                .as_deref(),
            Some("ext4 buffered")
        );
        let g = Gate::parse("finding page-cache-cliff@buffered disappears").unwrap();
        assert_eq!(
            (g.column.as_deref(), &g.test),
            (Some("buffered"), &Test::Disappears)
        );
    }

    #[test]
    fn errors_say_what_was_expected() {
        assert!(err("").starts_with("expected FIGURE OP PERCENT"));
        assert_eq!(
            err("write_mb_s -5%"),
            "expected an operator (<, <=, > or >=) after 'write_mb_s', e.g. write_mb_s < -5%"
        );
        assert!(
            err("write_mbs < -5%").starts_with(
                "unknown figure 'write_mbs': expected one of write_mb_s, durable_mb_s,"
            )
        );
        assert_eq!(
            err("write_mb_s < -5"),
            "expected a percentage such as -5% or +20% after '<', found '-5'"
        );
        assert_eq!(
            err("write_mb_s <= "),
            "expected a percentage such as -5% or +20% after '<=', found ''"
        );
        assert_eq!(
            err("write_mb_s < five%"),
            "expected a number before '%', found 'five'"
        );
        assert_eq!(
            err("write_mb_s < inf%"),
            "expected a number before '%', found 'inf'"
        );
        assert_eq!(err("< -5%"), "expected a figure name before '<'");
        assert_eq!(
            err("write_mb_s@ < -5%"),
            "expected a column name after 'write_mb_s@'"
        );
        assert!(
            err("finding:dirty-throttled > 0%")
                .starts_with("unknown figure 'finding:dirty-throttled'")
        );
        assert_eq!(
            err("finding dirty-throttled"),
            "expected 'appears' or 'disappears' after 'finding dirty-throttled'"
        );
        assert_eq!(
            err("finding dirty-throttled shows"),
            "expected 'appears' or 'disappears' after 'finding dirty-throttled', found 'shows'"
        );
        assert!(
            err("finding no-such appears")
                .starts_with("unknown finding 'no-such': expected one of dirty-throttled,")
        );
        assert!(
            err("finding ")
                .starts_with("expected a finding name after 'finding' (dirty-throttled,")
        );
    }

    fn side(write: &[f64], throttled: &[bool]) -> Side {
        let mut s = Side::default();
        for (&w, &t) in write.iter().zip(throttled) {
            let mut x = Sample::default();
            x.values.insert("write_mb_s", w);
            if t {
                x.findings.insert("dirty-throttled".into());
            }
            s.push("buffered", x);
        }
        s
    }

    #[test]
    fn gates_hold_only_when_significant() {
        let a = side(&[500.0, 505.0, 495.0], &[false, false, false]);
        let slow = side(&[300.0, 305.0, 295.0], &[true, true, true]);
        let d = diff(&a, &slow, Rule::Both);
        let holds = |e: &str| !Gate::parse(e).unwrap().hits(&d).is_empty();
        assert!(holds("write_mb_s < -5%"));
        assert!(!holds("write_mb_s < -50%"));
        assert!(!holds("write_mb_s > +5%"));
        assert!(holds("write_mb_s@buffered < -5%"));
        assert!(!holds("write_mb_s@direct < -5%"));
        assert!(holds("finding dirty-throttled appears"));
        assert!(!holds("finding dirty-throttled disappears"));
        // A 2% drop is below LKP's 5%: not significant under both rules.
        let near = side(&[490.0, 491.0, 489.0], &[false, false, true]);
        let d2 = diff(&a, &near, Rule::Both);
        assert!(
            Gate::parse("write_mb_s < -1%")
                .unwrap()
                .hits(&d2)
                .is_empty()
        );
        // Throttled in one run of three: not an appearance by both rules.
        assert!(
            Gate::parse("finding dirty-throttled appears")
                .unwrap()
                .hits(&d2)
                .is_empty()
        );
        // A figure no column has does not apply (the command refuses it).
        assert!(!Gate::parse("fsync_p99 > 20%").unwrap().applies(&d));
        assert!(Gate::parse("write_mb_s > 20%").unwrap().applies(&d));
    }
}
