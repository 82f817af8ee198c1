//! `wbscope diff A B`: did it get worse. Each side is a set of runs,
//! grouped by column (a compare strategy, a scenario's filesystem and
//! variant, or `recording`); for every figure ([`figures`]) of a column
//! both sides have, the summary of each side, the change, both
//! significance rules (`model::stats`) and the verdict. The gate
//! (`--fail-if`) is in [`gate`]. Plain data and arithmetic; the inputs
//! are read by `commands::diff`, printed by `export::diff`.
pub mod figures;
pub mod gate;

use serde::Serialize;

use crate::stats::{Summary, change_pct, lkp_significant, mmtests_significant, signed_change};

pub use figures::{Better, Figure, RecordingSample, Sample};

/// Which rule makes a change significant (`--rule`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rule {
    /// Both LKP's and mmtests' (fewest false alarms).
    #[default]
    Both,
    /// Either of them.
    Either,
    /// LKP's alone: the runs do not overlap and the change is at least 5%.
    Lkp,
    /// mmtests' alone: the means differ by more than both 95% half-widths.
    Mmtests,
}

impl Rule {
    /// Every rule, as `--rule` lists them.
    pub const ALL: [Rule; 4] = [Rule::Both, Rule::Either, Rule::Lkp, Rule::Mmtests];

    /// The rule's name, as `--rule` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Both => "both",
            Rule::Either => "either",
            Rule::Lkp => "lkp",
            Rule::Mmtests => "mmtests",
        }
    }

    /// Significant under this rule; `None` when a rule it needs is
    /// undefined (fewer than two runs a side).
    pub(crate) fn decide(self, lkp: Option<bool>, mmtests: Option<bool>) -> Option<bool> {
        match self {
            Rule::Both => Some(lkp? && mmtests?),
            Rule::Either => Some(lkp? || mmtests?),
            Rule::Lkp => lkp,
            Rule::Mmtests => mmtests,
        }
    }
}

/// One side of a diff: its runs by column, in the order first seen.
#[derive(Clone, Debug, Default)]
pub struct Side {
    pub columns: Vec<(String, Vec<Sample>)>,
}

impl Side {
    pub fn push(&mut self, column: &str, sample: Sample) {
        match self.columns.iter_mut().find(|(c, _)| c == column) {
            Some((_, v)) => v.push(sample),
            None => self.columns.push((column.to_string(), vec![sample])),
        }
    }

    pub fn samples(&self, column: &str) -> Option<&[Sample]> {
        self.columns
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, v)| v.as_slice())
    }
}

/// What a significant change is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Worse,
    Better,
    /// Significant, for a figure that is neither better higher nor lower.
    Changed,
    /// Not significant (or undefined).
    Same,
}

/// One figure of one column, A against B.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    pub(crate) better: Better,
    #[serde(skip)]
    pub decimals: usize,
    pub a: Summary,
    pub b: Summary,
    /// B's mean against A's, per cent; null for a change from zero.
    pub change_pct: Option<f64>,
    /// LKP's rule and mmtests' rule; null with fewer than two runs a side.
    pub lkp: Option<bool>,
    pub mmtests: Option<bool>,
    /// Under `--rule`.
    pub(crate) significant: bool,
    /// Which rules said yes: `both`, `lkp`, `mmtests` or `none`.
    pub decided_by: &'static str,
    pub verdict: Verdict,
}

impl Row {
    fn new(figure: String, f: Figure, a: Summary, b: Summary, rule: Rule) -> Row {
        let lkp = lkp_significant(&a, &b);
        let mmtests = mmtests_significant(&a, &b);
        let significant = rule.decide(lkp, mmtests).unwrap_or(false);
        let decided_by = match (lkp == Some(true), mmtests == Some(true)) {
            (true, true) => "both",
            (true, false) => "lkp",
            (false, true) => "mmtests",
            (false, false) => "none",
        };
        let up = b.mean > a.mean;
        let verdict = match (significant, f.better) {
            (false, _) => Verdict::Same,
            (true, Better::Neither) => Verdict::Changed,
            (true, Better::Higher) if up => Verdict::Better,
            (true, Better::Lower) if !up => Verdict::Better,
            (true, _) => Verdict::Worse,
        };
        Row {
            figure,
            unit: f.unit,
            better: f.better,
            decimals: f.decimals,
            change_pct: change_pct(&a, &b),
            a,
            b,
            lkp,
            mmtests,
            significant,
            decided_by,
            verdict,
        }
    }

    /// The change as a number to test against a threshold (±infinity for
    /// a change from zero).
    pub(crate) fn signed_change(&self) -> f64 {
        signed_change(&self.a, &self.b)
    }
}

/// One column of a diff.
#[derive(Clone, Debug, Serialize)]
pub struct ColumnDiff {
    pub column: String,
    pub runs_a: usize,
    pub runs_b: usize,
    pub rows: Vec<Row>,
}

/// A whole diff.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub rule: Rule,
    pub columns: Vec<ColumnDiff>,
    /// Columns one side has and the other does not (not compared).
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
}

fn values(samples: &[Sample], name: &str) -> Vec<f64> {
    samples.iter().filter_map(|s| s.get(name)).collect()
}

/// Compares every column both sides have, figure by figure.
pub fn diff(a: &Side, b: &Side, rule: Rule) -> Diff {
    let mut columns = Vec::new();
    let mut only_a = Vec::new();
    for (column, sa) in &a.columns {
        let Some(sb) = b.samples(column) else {
            only_a.push(column.clone());
            continue;
        };
        let mut rows = Vec::new();
        let findings = figures::finding_names().map(|n| format!("finding:{n}"));
        let names = figures::FIGURES
            .iter()
            .map(|f| f.name.to_string())
            .chain(findings);
        for name in names {
            let Some(f) = figures::figure(&name) else {
                continue;
            };
            let (va, vb) = (values(sa, &name), values(sb, &name));
            // A finding neither side had says nothing.
            if name.starts_with("finding:") && va.iter().chain(&vb).all(|&v| v == 0.0) {
                continue;
            }
            if let (Some(x), Some(y)) = (Summary::of(&va), Summary::of(&vb)) {
                rows.push(Row::new(name, f, x, y, rule));
            }
        }
        columns.push(ColumnDiff {
            column: column.clone(),
            runs_a: sa.len(),
            runs_b: sb.len(),
            rows,
        });
    }
    let only_b = b
        .columns
        .iter()
        .filter(|(c, _)| a.samples(c).is_none())
        .map(|(c, _)| c.clone())
        .collect();
    Diff {
        rule,
        columns,
        only_a,
        only_b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(write: f64, throttle: f64, finding: bool) -> Sample {
        let mut s = Sample::default();
        s.values.insert("write_mb_s", write);
        s.values.insert("throttle_ms_per_s", throttle);
        if finding {
            s.findings.insert("dirty-throttled".into());
        }
        s
    }

    fn side(xs: &[(f64, f64, bool)]) -> Side {
        let mut s = Side::default();
        for &(w, t, f) in xs {
            s.push("buffered", sample(w, t, f));
        }
        s
    }

    #[test]
    fn a_throttled_side_is_worse_by_both_rules() {
        let a = side(&[
            (500.0, 0.0, false),
            (510.0, 1.0, false),
            (490.0, 0.0, false),
        ]);
        let b = side(&[
            (200.0, 300.0, true),
            (210.0, 320.0, true),
            (190.0, 310.0, true),
        ]);
        let d = diff(&a, &b, Rule::Both);
        assert!(d.only_a.is_empty() && d.only_b.is_empty());
        let rows = &d.columns[0].rows;
        let row = |n: &str| rows.iter().find(|r| r.figure == n).unwrap();
        let w = row("write_mb_s");
        assert_eq!((w.verdict, w.decided_by), (Verdict::Worse, "both"));
        assert!((w.change_pct.unwrap() + 60.0).abs() < 1e-9);
        assert_eq!(row("throttle_ms_per_s").verdict, Verdict::Worse);
        let f = row("finding:dirty-throttled");
        assert_eq!((f.verdict, f.change_pct), (Verdict::Worse, None));
        assert_eq!(f.signed_change(), f64::INFINITY);
        // The same runs the other way round: better.
        let back = diff(&b, &a, Rule::Both);
        let r = &back.columns[0].rows[0];
        assert_eq!(
            (r.figure.as_str(), r.verdict),
            ("write_mb_s", Verdict::Better)
        );
    }

    #[test]
    fn the_rule_decides_when_the_two_disagree() {
        // Apart by 50% (LKP yes) but within mmtests' half-widths.
        let a = side(&[(10.0, 0.0, false), (12.0, 0.0, false), (14.0, 0.0, false)]);
        let b = side(&[(17.0, 0.0, false), (18.0, 0.0, false), (19.0, 0.0, false)]);
        let both = diff(&a, &b, Rule::Both);
        let r = &both.columns[0].rows[0];
        assert_eq!((r.lkp, r.mmtests), (Some(true), Some(false)));
        assert_eq!((r.significant, r.decided_by), (false, "lkp"));
        assert!(diff(&a, &b, Rule::Either).columns[0].rows[0].significant);
        assert!(diff(&a, &b, Rule::Lkp).columns[0].rows[0].significant);
        assert!(!diff(&a, &b, Rule::Mmtests).columns[0].rows[0].significant);
        // One run a side: nothing is significant, whatever the rule.
        let one = diff(
            &side(&[(10.0, 0.0, false)]),
            &side(&[(99.0, 0.0, false)]),
            Rule::Either,
        );
        assert!(!one.columns[0].rows[0].significant);
        assert_eq!(one.columns[0].rows[0].lkp, None);
    }

    #[test]
    fn columns_only_one_side_has_are_named() {
        let mut a = side(&[(1.0, 0.0, false)]);
        a.push("direct", sample(1.0, 0.0, false));
        let mut b = side(&[(1.0, 0.0, false)]);
        b.push("uring", sample(1.0, 0.0, false));
        let d = diff(&a, &b, Rule::Both);
        assert_eq!(
            (d.only_a.as_slice(), d.only_b.as_slice()),
            (&["direct".to_string()][..], &["uring".to_string()][..])
        );
        // A finding neither side had has no row.
        assert!(
            d.columns[0]
                .rows
                .iter()
                .all(|r| !r.figure.starts_with("finding:"))
        );
    }
}
