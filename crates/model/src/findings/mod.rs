//! Findings: which writeback mechanism is hurting, with its evidence and
//! what to try. Plain data and arithmetic over the interval lines, in the
//! order they were made, so live tracing, the replay of a recording and a
//! compare/scenario run get the same findings from the same lines. The
//! catalogue — meaning, evidence, thresholds and why, advice and its
//! source — is docs/findings.md; each rule is in its own file here.
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::interval::IntervalLine;

mod calls;
mod device;
mod dirty;
mod flusher;
mod fsyncs;
mod ledger;
#[cfg(test)]
mod tests;
mod writes;

/// How bad a finding is. `warning` and `critical` make `wbscope doctor`
/// exit 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The band `x` falls in, each threshold the least value of its band
/// (`f64::INFINITY` for a band a rule does not have); None under `info`.
/// Every rule has an `info` band well under its warning, so that a user
/// who set a cap reads what acted and how much, with exit status 0.
pub(crate) fn band(x: f64, info: f64, warning: f64, critical: f64) -> Option<Severity> {
    if x >= critical {
        Some(Severity::Critical)
    } else if x >= warning {
        Some(Severity::Warning)
    } else if x >= info {
        Some(Severity::Info)
    } else {
        None
    }
}

/// Evidence figures by name (JSON numbers, strings, lists).
pub type Evidence = BTreeMap<&'static str, serde_json::Value>;

/// What a rule says about the interval that just ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) severity: Severity,
    pub(crate) evidence: Evidence,
    pub(crate) advice: String,
}

/// What the rules see: the latest interval lines (the last one is the
/// interval that just ended) and what was learnt over the run.
pub(crate) struct Ctx<'a> {
    pub(crate) history: &'a VecDeque<IntervalLine>,
    pub(crate) baselines: &'a device::Baselines,
}

impl Ctx<'_> {
    /// The interval that just ended.
    pub(crate) fn line(&self) -> &IntervalLine {
        // The engine pushes before it asks.
        &self.history[self.history.len() - 1]
    }

    /// The last `n` lines (fewer at the start), oldest first.
    pub(crate) fn last(&self, n: usize) -> impl Iterator<Item = &IntervalLine> + Clone {
        self.history
            .iter()
            .skip(self.history.len().saturating_sub(n))
    }
}

/// One rule: its name and the function that judges the latest interval.
pub struct Rule {
    pub name: &'static str,
    pub(crate) check: fn(&Ctx<'_>) -> Option<Verdict>,
}

/// The catalogue, in the order docs/findings.md lists it.
pub const RULES: &[Rule] = &[
    Rule {
        name: dirty::THROTTLED,
        check: dirty::throttled,
    },
    Rule {
        name: calls::FSYNC_STORM,
        check: calls::fsync_storm,
    },
    Rule {
        name: calls::SCAN,
        check: calls::scan_exceeds_written,
    },
    Rule {
        name: calls::CHUNK_CAPPED,
        check: calls::chunk_capped,
    },
    Rule {
        name: flusher::SMALL_BUDGET,
        check: flusher::small_flusher_budget,
    },
    Rule {
        name: dirty::CLIFF,
        check: dirty::page_cache_cliff,
    },
    Rule {
        name: dirty::LAGGING,
        check: dirty::writeback_lagging,
    },
    Rule {
        name: device::SATURATED,
        check: device::device_saturated,
    },
    Rule {
        name: device::FLUSH_BOUND,
        check: device::flush_bound,
    },
    Rule {
        name: fsyncs::JOURNAL_BOUND,
        check: fsyncs::journal_bound,
    },
    Rule {
        name: fsyncs::ENTANGLED,
        check: fsyncs::fsync_entangled,
    },
    Rule {
        name: ledger::WRITE_AMPLIFIED,
        check: ledger::write_amplified,
    },
    Rule {
        name: writes::STALLED,
        check: writes::write_stalled,
    },
];

/// Lines kept for the rules that look back: the longest look-back
/// (page-cache-cliff's, [`dirty::CLIFF_LOOKBACK`]) plus the current one.
const HISTORY: usize = dirty::CLIFF_LOOKBACK + 1;

/// How long before a moment the rules must be fed for the findings that
/// hold at it to show: [`HISTORY`] intervals of the recorder's default
/// second. A replay that jumps to a moment starts this much before it
/// (played at once, not paced), and the search for a finding's start
/// judges from this much before where it looks.
pub const WARM_UP_NS: u64 = HISTORY as u64 * 1_000_000_000;

/// A finding over the intervals it held: first and last interval it was
/// seen in, the worst severity, and the evidence of the (latest) worst
/// interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub name: &'static str,
    pub severity: Severity,
    /// `time_s` of the end of the first and last interval it held in.
    pub first_seen_s: f64,
    pub last_seen_s: f64,
    /// Intervals it held in, and separate stretches of them.
    pub intervals: u64,
    pub episodes: u64,
    pub evidence: Evidence,
    pub advice: String,
}

impl Finding {
    fn open(name: &'static str, time_s: f64, v: Verdict) -> Finding {
        Finding {
            name,
            severity: v.severity,
            first_seen_s: time_s,
            last_seen_s: time_s,
            intervals: 1,
            episodes: 1,
            evidence: v.evidence,
            advice: v.advice,
        }
    }

    /// Another interval it held in.
    fn update(&mut self, time_s: f64, v: Verdict) {
        self.last_seen_s = time_s;
        self.intervals += 1;
        if v.severity >= self.severity {
            self.severity = v.severity;
            self.evidence = v.evidence;
            self.advice = v.advice;
        }
    }

    /// The same finding's later episode, folded in.
    fn merge(&mut self, later: &Finding) {
        self.last_seen_s = later.last_seen_s;
        self.intervals += later.intervals;
        self.episodes += later.episodes;
        if later.severity >= self.severity {
            self.severity = later.severity;
            self.evidence = later.evidence.clone();
            self.advice = later.advice.clone();
        }
    }
}

/// `{"type": "finding", "event": "open"|"close", ...}`: a finding starts
/// or stops holding (trace --json, the dashboard, Prometheus).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FindingEvent {
    pub(crate) r#type: &'static str,
    pub(crate) event: &'static str,
    /// End of the interval that opened it, or of the last it held in.
    pub time_s: f64,
    #[serde(flatten)]
    pub finding: Finding,
}

impl FindingEvent {
    fn new(event: &'static str, time_s: f64, finding: Finding) -> FindingEvent {
        FindingEvent {
            r#type: "finding",
            event,
            time_s,
            finding,
        }
    }

    pub fn is_open(&self) -> bool {
        self.event == "open"
    }
}

/// `wbscope doctor --json`: the whole watch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub duration_s: f64,
    pub intervals: u64,
    pub findings: Vec<Finding>,
}

impl Report {
    /// Exit status 3 (for scripts and CI) when this is true.
    pub fn alarming(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity >= Severity::Warning)
    }
}

/// Feeds interval lines to the rules; says when findings open and close.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    history: VecDeque<IntervalLine>,
    baselines: device::Baselines,
    active: BTreeMap<&'static str, Finding>,
    /// Episodes that closed, by name, merged.
    closed: BTreeMap<&'static str, Finding>,
    intervals: u64,
    end_s: f64,
}

impl Engine {
    pub fn new() -> Engine {
        Engine::default()
    }

    /// Judges the interval `line` ends; the findings that opened or closed
    /// with it.
    pub fn interval(&mut self, line: &IntervalLine) -> Vec<FindingEvent> {
        self.history.push_back(line.clone());
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        self.intervals += 1;
        self.end_s = line.time_s;
        let ctx = Ctx {
            history: &self.history,
            baselines: &self.baselines,
        };
        let verdicts: Vec<(&'static str, Option<Verdict>)> =
            RULES.iter().map(|r| (r.name, (r.check)(&ctx))).collect();
        // Learnt after judging: an interval is judged against the
        // baseline of the intervals before it.
        self.baselines.learn(line);
        let mut events = Vec::new();
        for (name, verdict) in verdicts {
            match (verdict, self.active.remove(name)) {
                (Some(v), Some(mut f)) => {
                    f.update(line.time_s, v);
                    self.active.insert(name, f);
                }
                (Some(v), None) => {
                    let f = Finding::open(name, line.time_s, v);
                    events.push(FindingEvent::new("open", line.time_s, f.clone()));
                    self.active.insert(name, f);
                }
                (None, Some(f)) => {
                    events.push(FindingEvent::new("close", line.time_s, f.clone()));
                    self.close(f);
                }
                (None, None) => {}
            }
        }
        events
    }

    fn close(&mut self, f: Finding) {
        match self.closed.get_mut(f.name) {
            Some(earlier) => earlier.merge(&f),
            None => {
                self.closed.insert(f.name, f);
            }
        }
    }

    /// The findings holding now (the dashboard's strip, Prometheus).
    pub fn active(&self) -> impl Iterator<Item = &Finding> {
        self.active.values()
    }

    /// Ends the watch: closes what is open (the close events), and the
    /// report of everything seen, in catalogue order.
    pub fn finish(&mut self) -> (Vec<FindingEvent>, Report) {
        let end = self.end_s;
        let open: Vec<Finding> = std::mem::take(&mut self.active).into_values().collect();
        let events = open
            .iter()
            .map(|f| FindingEvent::new("close", end, f.clone()))
            .collect();
        for f in open {
            self.close(f);
        }
        let findings = RULES
            .iter()
            .filter_map(|r| self.closed.get(r.name).cloned())
            .collect();
        (
            events,
            Report {
                duration_s: end,
                intervals: self.intervals,
                findings,
            },
        )
    }
}

/// The findings of a sequence of lines, start to end.
pub fn judge<'a>(lines: impl IntoIterator<Item = &'a IntervalLine>) -> Report {
    let mut engine = Engine::new();
    for line in lines {
        engine.interval(line);
    }
    engine.finish().1
}

/// A figure rounded to 3 significant decimals for evidence: JSON readers
/// do not need 17 digits, and the same figure prints the same.
pub(crate) fn round3(v: f64) -> serde_json::Value {
    serde_json::json!((v * 1000.0).round() / 1000.0)
}
