//! Statistics of repeated runs, for `wbscope diff`: the summary of one
//! side's samples of a figure, and the two significance rules the kernel
//! community uses to say whether one set of runs differs from another.
//! Plain arithmetic, no I/O; `None` wherever a figure is undefined (too
//! few samples, a zero base), never NaN. Units are the samples' own: a
//! summary of MB/s is in MB/s, `rel_stddev` and percentages are unitless
//! (per cent where the name says `pct`).
//!
//! - LKP (Intel's 0-day performance bot, lkp-tests `lib/changed_stat.rb`,
//!   `ChangedStat#change?`): a change counts only when the two sets of
//!   runs do not overlap (every run of one side beyond every run of the
//!   other: `min_b > max_a` or `min_a > max_b`), and the bot reports it
//!   when it is at least 5% ("a 6.0% regression of fsmark.files_per_sec").
//!   With n and m runs of the same distribution the two sets fail to
//!   overlap with probability `2·n!·m!/(n+m)!` whatever the distribution
//!   (every order of the n+m runs is equally likely): 10% for 3 against 3,
//!   2.9% for 4 against 4, 0.79% for 5 against 5 ([`lkp_false_alarm`]).
//! - mmtests compare-kernels (`bin/lib/MMTests/Stat.pm`: `cidiff`, and
//!   `calc_confidence_interval` for the half-width): significant when the
//!   difference of the means exceeds the sum of both sides' 95%
//!   confidence half-widths, each `t(0.975, n-1) · s / √n` with `s` the
//!   sample standard deviation (n−1 in the denominator). mmtests marks such
//!   a difference with stars instead of parentheses: `*  -6.00%*` against
//!   `(  -1.20%)`.
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// LKP's smallest change worth reporting, per cent.
pub(crate) const LKP_MIN_CHANGE_PCT: f64 = 5.0;
/// The confidence of mmtests' intervals.
pub(crate) const CONFIDENCE: f64 = 0.95;

/// One side's samples of a figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub(crate) n: usize,
    pub mean: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// Sample standard deviation (n−1 in the denominator); `None` for
    /// fewer than two samples.
    pub(crate) stddev: Option<f64>,
    /// `stddev / |mean|`; `None` without a stddev or with a zero mean.
    pub(crate) rel_stddev: Option<f64>,
    /// Half-width of the 95% confidence interval of the mean, Student t
    /// with n−1 degrees of freedom; `None` for fewer than two samples.
    pub ci95_half: Option<f64>,
}

impl Summary {
    /// `None` for no samples; non-finite samples are left out.
    pub(crate) fn of(samples: &[f64]) -> Option<Summary> {
        let xs: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if xs.is_empty() {
            return None;
        }
        let n = xs.len();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let stddev = (n >= 2)
            .then(|| (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
        let rel_stddev = stddev.filter(|_| mean != 0.0).map(|s| s / mean.abs());
        let ci95_half = stddev
            .zip(t_quantile(CONFIDENCE, n - 1))
            .map(|(s, t)| t * s / (n as f64).sqrt());
        Some(Summary {
            n,
            mean,
            min,
            max,
            stddev,
            rel_stddev,
            ci95_half,
        })
    }
}

/// The two-sided Student t quantile of confidence `conf` with `dof`
/// degrees of freedom: `t` such that P(|T| ≤ t) = conf (4.303 for 0.95 and
/// 2 dof). `None` for 0 dof or a confidence outside (0, 1).
pub(crate) fn t_quantile(conf: f64, dof: usize) -> Option<f64> {
    if dof == 0 || !(conf > 0.0 && conf < 1.0) {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, dof as f64).ok()?;
    Some(t.inverse_cdf(0.5 + conf / 2.0)).filter(|q| q.is_finite())
}

/// Change of `b`'s mean against `a`'s, per cent: +10 when b is 10% above.
/// `Some(0)` when both are zero; `None` when only `a`'s is (a change from
/// nothing has no percentage: [`signed_change`] makes it ±infinity).
pub(crate) fn change_pct(a: &Summary, b: &Summary) -> Option<f64> {
    if a.mean == 0.0 {
        return (b.mean == 0.0).then_some(0.0);
    }
    Some((b.mean - a.mean) / a.mean.abs() * 100.0)
}

/// A change as a number to compare with a threshold: the percentage, or
/// ±infinity for a change from zero.
pub(crate) fn signed_change(a: &Summary, b: &Summary) -> f64 {
    change_pct(a, b).unwrap_or(if b.mean > a.mean {
        f64::INFINITY
    } else {
        f64::NEG_INFINITY
    })
}

/// LKP's rule: the two sets of runs do not overlap and the change is at
/// least 5%. `None` when a side has fewer than two runs (a single run
/// "overlaps" nothing, so the rule would say yes to any difference).
pub(crate) fn lkp_significant(a: &Summary, b: &Summary) -> Option<bool> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let apart = b.min > a.max || a.min > b.max;
    Some(apart && signed_change(a, b).abs() >= LKP_MIN_CHANGE_PCT)
}

/// mmtests' rule: |mean_b − mean_a| > half_a + half_b (95%, Student t,
/// n−1 dof). `None` when a side has fewer than two runs.
pub(crate) fn mmtests_significant(a: &Summary, b: &Summary) -> Option<bool> {
    let (ha, hb) = (a.ci95_half?, b.ci95_half?);
    Some((b.mean - a.mean).abs() > ha + hb)
}

/// The chance that LKP's non-overlap condition holds between `n` and `m`
/// runs of the same distribution: `2·n!·m!/(n+m)!` (one of the
/// `C(n+m, n)` equally likely orders puts all of one side first, one all
/// of the other). An upper bound of the rule's false alarms, the 5%
/// condition taking some away.
pub fn lkp_false_alarm(n: usize, m: usize) -> f64 {
    // 2 / C(n+m, n), as a product to stay in range.
    let mut c = 1.0;
    for i in 1..=n {
        c *= (m + i) as f64 / i as f64;
    }
    2.0 / c
}

/// mmtests' way of printing a percentage difference: stars around a
/// significant one, parentheses otherwise (`PrintGeneric.pm` turns the
/// `(%7.2f%%)` format into `*%7.2f%*`).
pub fn mmtests_mark(change_pct: Option<f64>, significant: Option<bool>) -> String {
    let sig = significant == Some(true);
    let Some(c) = change_pct else {
        return if sig { "*    new*" } else { "(    new)" }.into();
    };
    if sig {
        format!("*{c:7.2}%*")
    } else {
        format!("({c:7.2}%)")
    }
}

/// LKP's way of printing a side: the mean and, when it rounds to 1% or
/// more, the relative standard deviation as a whole percentage (`± 2%`).
pub fn lkp_value(s: &Summary, decimals: usize) -> String {
    let pct = s.rel_stddev.map_or(0, |r| (r * 100.0).round() as u64);
    if pct == 0 {
        format!("{:.decimals$}", s.mean)
    } else {
        format!("{:.decimals$} ±{pct:>2}%", s.mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_the_printed_tables() {
        // Student's t, two-sided 95% (any statistics table).
        for (dof, t) in [
            (1, 12.706),
            (2, 4.303),
            (3, 3.182),
            (4, 2.776),
            (9, 2.262),
            (30, 2.042),
        ] {
            let q = t_quantile(0.95, dof).unwrap();
            assert!(close(q, t, 0.0005), "dof {dof}: {q}");
        }
        assert_eq!(t_quantile(0.95, 0), None);
        assert_eq!(t_quantile(1.0, 3), None);
    }

    #[test]
    fn summary_by_hand() {
        // 10, 12, 14: mean 12, s = 2, s/√3 = 1.1547, t(0.975,2) = 4.3027
        // → half-width 4.968.
        let s = Summary::of(&[10.0, 12.0, 14.0]).unwrap();
        assert_eq!((s.n, s.mean, s.min, s.max), (3, 12.0, 10.0, 14.0));
        assert!(close(s.stddev.unwrap(), 2.0, 1e-12));
        assert!(close(s.rel_stddev.unwrap(), 2.0 / 12.0, 1e-12));
        assert!(close(
            s.ci95_half.unwrap(),
            4.3027 * 2.0 / 3f64.sqrt(),
            1e-3
        ));
        // One sample: a mean, nothing about spread.
        let one = Summary::of(&[5.0]).unwrap();
        assert_eq!(
            (one.stddev, one.rel_stddev, one.ci95_half),
            (None, None, None)
        );
        // A zero mean has no relative spread.
        assert_eq!(Summary::of(&[-1.0, 1.0]).unwrap().rel_stddev, None);
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
    }

    fn s(xs: &[f64]) -> Summary {
        Summary::of(xs).unwrap()
    }

    #[test]
    fn lkp_rule_by_hand() {
        // Apart and 10% lower: significant.
        let a = s(&[100.0, 101.0, 102.0]);
        let b = s(&[90.0, 91.0, 92.0]);
        assert!(close(change_pct(&a, &b).unwrap(), -9.90099, 1e-4));
        assert_eq!(lkp_significant(&a, &b), Some(true));
        // Apart but 3% only: not reported.
        let b3 = s(&[97.0, 98.0, 98.5]);
        assert_eq!(lkp_significant(&a, &b3), Some(false));
        // 20% lower on average but one run of B reaches A's range.
        let b_over = s(&[70.0, 80.0, 100.5]);
        assert_eq!(lkp_significant(&a, &b_over), Some(false));
        // Touching ranges overlap (min_b > max_a is strict).
        let touch = s(&[102.0, 120.0, 130.0]);
        assert_eq!(lkp_significant(&a, &touch), Some(false));
        // One run a side: undefined.
        assert_eq!(lkp_significant(&s(&[1.0]), &s(&[2.0, 3.0])), None);
        // From nothing: apart, and an infinite change.
        assert_eq!(
            lkp_significant(&s(&[0.0, 0.0, 0.0]), &s(&[1.0, 1.0, 1.0])),
            Some(true)
        );
        assert_eq!(change_pct(&s(&[0.0, 0.0]), &s(&[1.0, 2.0])), None);
        assert_eq!(change_pct(&s(&[0.0, 0.0]), &s(&[0.0, 0.0])), Some(0.0));
    }

    #[test]
    fn mmtests_rule_by_hand() {
        // A: 10, 12, 14 → mean 12, half-width 4.3027·2/√3 = 4.968.
        // B: 20, 21, 22 → mean 21, s = 1, half-width 4.3027/√3 = 2.484.
        // |21 − 12| = 9 > 7.452: significant.
        let a = s(&[10.0, 12.0, 14.0]);
        let b = s(&[20.0, 21.0, 22.0]);
        assert_eq!(mmtests_significant(&a, &b), Some(true));
        // B: 17, 18, 19 → |18 − 12| = 6 < 7.452: not significant, although
        // the ranges do not overlap (LKP would count it: 50% apart).
        let b2 = s(&[17.0, 18.0, 19.0]);
        assert_eq!(mmtests_significant(&a, &b2), Some(false));
        assert_eq!(lkp_significant(&a, &b2), Some(true));
        // Either side of the boundary: B shifted by the sum of the two
        // (equal) half-widths, a hair less or more.
        let h = a.ci95_half.unwrap() * 2.0;
        let shifted = |d: f64| s(&[10.0 + d, 12.0 + d, 14.0 + d]);
        assert_eq!(mmtests_significant(&a, &shifted(h * 0.999)), Some(false));
        assert_eq!(mmtests_significant(&a, &shifted(h * 1.001)), Some(true));
        // No spread on either side: any difference is significant.
        assert_eq!(
            mmtests_significant(&s(&[0.0, 0.0]), &s(&[1.0, 1.0])),
            Some(true)
        );
        assert_eq!(mmtests_significant(&s(&[1.0]), &b), None);
    }

    #[test]
    fn lkp_false_alarm_by_hand() {
        // 3 against 3: 2 of the C(6,3) = 20 orders.
        assert!(close(lkp_false_alarm(3, 3), 0.1, 1e-12));
        assert!(close(lkp_false_alarm(5, 5), 2.0 / 252.0, 1e-12));
        assert!(close(lkp_false_alarm(2, 3), 0.2, 1e-12));
    }

    /// Normal samples from a fixed seed (xorshift64 and Box-Muller): the
    /// same numbers on every run of the test.
    struct Normal(u64);

    impl Normal {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        fn sample(&mut self, mean: f64, sd: f64) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            mean + sd * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
    }

    /// Runs of one configuration (normal noise, 10%): how often each rule
    /// calls them different, against what docs/diff.md says it promises.
    #[test]
    fn false_alarms_are_what_the_rules_promise() {
        let mut g = Normal(0x9e37_79b9_7f4a_7c15);
        let trials = 20_000;
        for (n, lkp_apart) in [(3, 0.1), (5, 2.0 / 252.0)] {
            assert!(close(lkp_false_alarm(n, n), lkp_apart, 1e-12));
            let (mut apart, mut mm, mut both) = (0, 0, 0);
            for _ in 0..trials {
                let a: Vec<f64> = (0..n).map(|_| g.sample(100.0, 10.0)).collect();
                let b: Vec<f64> = (0..n).map(|_| g.sample(100.0, 10.0)).collect();
                let (a, b) = (s(&a), s(&b));
                apart += usize::from(b.min > a.max || a.min > b.max);
                let m = mmtests_significant(&a, &b) == Some(true);
                mm += usize::from(m);
                both += usize::from(m && lkp_significant(&a, &b) == Some(true));
            }
            let rate = |k: usize| k as f64 / trials as f64;
            // Binomial standard error of 0.1 over 20,000 trials: 0.0021.
            let tol = 4.0 * (lkp_apart * (1.0 - lkp_apart) / trials as f64).sqrt();
            assert!(close(rate(apart), lkp_apart, tol), "n={n}: {}", rate(apart));
            // mmtests' about 0.5% (docs/diff.md), both rules no more.
            assert!(rate(mm) > 0.002 && rate(mm) < 0.01, "n={n}: {}", rate(mm));
            assert!(rate(both) <= rate(mm), "n={n}");
        }
    }

    #[test]
    fn marks_as_the_tools_print_them() {
        assert_eq!(mmtests_mark(Some(-6.0), Some(true)), "*  -6.00%*");
        assert_eq!(mmtests_mark(Some(-1.2), Some(false)), "(  -1.20%)");
        assert_eq!(mmtests_mark(Some(3.0), None), "(   3.00%)");
        // A change from zero has no percentage.
        assert_eq!(mmtests_mark(None, Some(true)), "*    new*");
        assert_eq!(mmtests_mark(None, Some(false)), "(    new)");
        let a = s(&[100.0, 102.0, 98.0]);
        assert_eq!(lkp_value(&a, 1), "100.0 ± 2%");
        assert_eq!(lkp_value(&s(&[100.0, 100.5]), 0), "100");
    }
}
