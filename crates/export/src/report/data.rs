//! What a report draws, read from its input: a recording (streamed frame
//! by frame: memory is bounded by the timeline's bins, whatever the
//! recording's length) or a `compare`/`scenario` JSON document (the runs
//! `model::window::Run` serialises, each with its timeline).
use std::path::Path;
use wbscope_model::ledger::LedgerLine;

use serde::Deserialize;

use wbscope_model::{
    CallRecord, Log2Histogram, cause_name,
    findings::{Engine, Finding},
    interval::{Bucket, InodePassCounts, IntervalLine, histogram_buckets},
    plan::ProbePlan,
    timeline::{TICK_S, Timeline, WriterChunks},
    units::utc,
    window::RunContext,
};
use wbscope_sys::UsageError;

use super::{
    who::Owners,
    writes::{WriteBins, WriteSums},
};

/// Everything a report shows.
#[derive(Clone, Debug, Default)]
pub struct ReportData {
    pub(crate) title: String,
    /// Header rows: host, kernel, command, input...
    pub(crate) facts: Vec<(String, String)>,
    pub(crate) plan: Option<ProbePlan>,
    /// Runs (or the one recording), laid end to end on the time axis.
    pub(crate) segments: Vec<Segment>,
    /// A recording: the writer panel shows pages dirtied, there being no
    /// writer of wbscope's own.
    pub(crate) recording: bool,
    /// Bytes per page for converting pages to bytes.
    pub(crate) page_size: u64,
    /// What went wrong reading the input (damage), one line each.
    pub warnings: Vec<String>,
    /// Who dirtied it: a recording's owners, added up (`None` for
    /// documents, which carry none).
    pub(crate) owners: Option<Owners>,
    /// Where the bytes went: a recording's ledgers, added up (`None` for
    /// documents and recordings made before the ledger).
    pub(crate) ledger: Option<LedgerLine>,
}

/// One run (or recording) on the time axis, and its distributions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Segment {
    pub(crate) name: String,
    pub(crate) timeline: Timeline,
    /// The input held a timeline (documents from before it existed do not).
    pub(crate) has_timeline: bool,
    /// The writer wrote with O_DIRECT (no page cache, no writepages).
    pub(crate) o_direct: bool,
    pub(crate) calls: u64,
    pub(crate) pages_per_call: Vec<Bucket>,
    pub(crate) writer_chunks: Option<WriterChunks>,
    /// Inode passes: budgets and pages written per budget pass; `None`
    /// when not measured per device (no tp_btf hook).
    pub(crate) pass_budgets: Option<Vec<Bucket>>,
    pub(crate) pass_written: Option<Vec<Bucket>>,
    /// Pages written per pass without a budget (WB_SYNC_ALL: fsync, sync).
    pub(crate) pass_unbounded: Option<Vec<Bucket>>,
    /// Pages examined per page written; `None` when not measured.
    pub(crate) scan_per_page: Option<f64>,
    /// Findings of `wbscope doctor` over the run, times from its start.
    pub(crate) findings: Vec<FindingMark>,
    /// The input says what the findings were (documents from before
    /// doctor do not).
    pub(crate) findings_known: bool,
    /// The write spans (`--enable writes`), bin by bin of `timeline`;
    /// empty without them (documents: compare and scenario trace none).
    pub(crate) writes: Vec<WriteSums>,
}

/// Length of a compare/scenario window's interval lines, which the
/// findings are judged on (capture/window.rs): a finding first seen at
/// the end of one began at most this long before.
const DOCUMENT_LINE_S: f64 = 1.0;

/// One finding of one run, as the report shows it (read from a document
/// or made from the engine's [`Finding`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub(crate) struct FindingMark {
    pub(crate) name: String,
    pub(crate) severity: String,
    pub(crate) first_seen_s: f64,
    pub(crate) last_seen_s: f64,
    #[serde(default)]
    pub(crate) intervals: u64,
    #[serde(default)]
    pub(crate) episodes: u64,
    #[serde(default)]
    pub(crate) evidence: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub(crate) advice: String,
    /// Start of the first interval it held in (not in the JSON: set from
    /// the interval length by whoever reads it).
    #[serde(skip)]
    pub(crate) start_s: f64,
}

impl FindingMark {
    fn of(f: &Finding, interval_s: f64) -> FindingMark {
        let evidence = serde_json::to_value(&f.evidence)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        FindingMark {
            name: f.name.to_string(),
            severity: f.severity.name().to_string(),
            first_seen_s: f.first_seen_s,
            last_seen_s: f.last_seen_s,
            intervals: f.intervals,
            episodes: f.episodes,
            evidence,
            advice: f.advice.clone(),
            start_s: 0.0,
        }
        .starting(interval_s)
    }

    /// With its start set: `interval_s` before it was first seen.
    fn starting(mut self, interval_s: f64) -> FindingMark {
        self.start_s = (self.first_seen_s - interval_s).max(0.0);
        self
    }
}

#[derive(Deserialize)]
struct DocView {
    runs: Vec<RunView>,
    #[serde(default)]
    context: Option<RunContext>,
    #[serde(default)]
    scenario: Option<String>,
    #[serde(default)]
    scale: Option<String>,
}

#[derive(Deserialize)]
struct RunView {
    #[serde(default)]
    fs: Option<String>,
    strategy: String,
    #[serde(default)]
    repeat: u32,
    writer: WriterView,
    kernel: KernelView,
}

#[derive(Deserialize)]
struct WriterView {
    #[serde(default)]
    o_direct: bool,
}

#[derive(Deserialize)]
struct KernelView {
    #[serde(default)]
    window_s: f64,
    #[serde(default)]
    calls: u64,
    #[serde(default)]
    pages_per_call_hist: Vec<Bucket>,
    #[serde(default)]
    pages_scanned_per_page_written: Option<f64>,
    #[serde(default)]
    inode_pass: Option<PassView>,
    #[serde(default)]
    timeline: Option<Timeline>,
    #[serde(default)]
    writer_chunks: Option<WriterChunks>,
    #[serde(default)]
    findings: Option<Vec<FindingMark>>,
}

#[derive(Deserialize)]
struct PassView {
    #[serde(default)]
    pages_per_pass: Vec<Bucket>,
    #[serde(default)]
    pages_asked_per_pass: Vec<Bucket>,
    #[serde(default)]
    pages_per_unbounded_pass: Vec<Bucket>,
}

/// Reads a `compare`/`scenario` JSON document (recordings are read by
/// `commands::report`, which feeds a [`RecordingFeed`]).
pub fn read_json(path: &Path) -> anyhow::Result<ReportData> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "{}: neither a recording nor a JSON document ({e})",
            path.display()
        ))
    })?;
    from_json(&text, &path.display().to_string())
}

/// A `compare --json` or `scenario --json` document.
pub(crate) fn from_json(text: &str, source: &str) -> anyhow::Result<ReportData> {
    let doc: DocView = serde_json::from_str(text.trim()).map_err(|e| {
        UsageError(format!(
            "{source}: not a recording, nor a compare/scenario JSON document ({e})"
        ))
    })?;
    let ctx = doc.context.clone().unwrap_or_default();
    let what = match (&doc.scenario, &doc.scale) {
        (Some(s), Some(scale)) => format!("scenario {s} (scale {scale})"),
        (Some(s), None) => format!("scenario {s}"),
        _ => "compare".to_string(),
    };
    Ok(from_runs(&doc, ctx, what, source))
}

fn from_runs(doc: &DocView, ctx: RunContext, what: String, source: &str) -> ReportData {
    let repeats = doc.runs.iter().any(|r| r.repeat > 0);
    let segments = doc
        .runs
        .iter()
        .map(|r| {
            let mut name = match &r.fs {
                Some(fs) => format!("{fs} {}", r.strategy),
                None => r.strategy.clone(),
            };
            if repeats {
                name.push_str(&format!(" #{}", r.repeat + 1));
            }
            let k = &r.kernel;
            let has_timeline = k.timeline.is_some();
            let mut timeline = k.timeline.clone().unwrap_or_default();
            timeline.span_s = timeline.span_s.max(k.window_s);
            Segment {
                name,
                timeline,
                has_timeline,
                o_direct: r.writer.o_direct,
                calls: k.calls,
                pages_per_call: k.pages_per_call_hist.clone(),
                writer_chunks: k.writer_chunks.clone(),
                pass_budgets: k
                    .inode_pass
                    .as_ref()
                    .map(|p| p.pages_asked_per_pass.clone()),
                pass_written: k.inode_pass.as_ref().map(|p| p.pages_per_pass.clone()),
                pass_unbounded: k
                    .inode_pass
                    .as_ref()
                    .map(|p| p.pages_per_unbounded_pass.clone()),
                scan_per_page: k.pages_scanned_per_page_written,
                findings_known: k.findings.is_some(),
                findings: k
                    .findings
                    .iter()
                    .flatten()
                    .map(|f| f.clone().starting(DOCUMENT_LINE_S))
                    .collect(),
                writes: Vec::new(),
            }
        })
        .collect();
    let mut facts = vec![("input".to_string(), format!("{what}: {source}"))];
    let mut push = |k: &str, v: &str| {
        if !v.is_empty() {
            facts.push((k.to_string(), v.to_string()));
        }
    };
    let ctx = RunContext {
        host: wbscope_sys::escape::escape_controls(&ctx.host).into_owned(),
        kernel: wbscope_sys::escape::escape_controls(&ctx.kernel).into_owned(),
        command: wbscope_sys::escape::escape_controls(&ctx.command).into_owned(),
        wbscope_version: wbscope_sys::escape::escape_controls(&ctx.wbscope_version).into_owned(),
        ..ctx
    };
    push("host", &ctx.host);
    push("kernel", &ctx.kernel);
    push("command", &ctx.command);
    push("wbscope", &ctx.wbscope_version);
    if ctx.started_unix_s > 0 {
        push("started", &utc(ctx.started_unix_s));
    }
    ReportData {
        title: format!("wbscope report: {what}"),
        facts,
        plan: ctx.probes,
        segments,
        recording: false,
        page_size: wbscope_model::units::page_size(),
        warnings: Vec::new(),
        owners: None,
        ledger: None,
    }
}

/// What a recording's header says, as the report shows it.
#[derive(Clone, Debug, Default)]
pub struct RecordingFacts {
    pub host: String,
    pub kernel: String,
    pub wbscope_version: String,
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at the start: the calls' clock.
    pub start_monotonic_ns: u64,
    pub probe_plan: serde_json::Value,
    pub filter: serde_json::Value,
}

/// A recording's frames, fed one at a time (`commands::report` streams
/// them from the file): calls placed where they ended, interval lines
/// where they were taken, in bins of the recording's interval
/// (`record --interval`: 1 s by default, 100 ms at the finest);
/// distributions added up as they go. Memory: the bins, bounded.
pub struct RecordingFeed {
    facts: RecordingFacts,
    timeline: Timeline,
    per_call: Log2Histogram,
    calls: u64,
    scan_bytes: u64,
    scan_pages: u64,
    passes: Option<InodePassCounts>,
    last_s: f64,
    summary_s: Option<f64>,
    bad_lines: u64,
    /// The doctor's rules over the interval lines, as `doctor --from`.
    engine: Engine,
    owners: Owners,
    ledger: Option<LedgerLine>,
    writes: WriteBins,
}

impl RecordingFeed {
    /// `interval_s`: the recording's first interval (a first pass finds
    /// it), so that the bins are its intervals from the start.
    pub fn new(facts: RecordingFacts, interval_s: Option<f64>) -> RecordingFeed {
        let timeline = Timeline::new(interval_s.unwrap_or(TICK_S));
        RecordingFeed {
            facts,
            writes: WriteBins::new(timeline.bin_s),
            timeline,
            per_call: Log2Histogram::default(),
            calls: 0,
            scan_bytes: 0,
            scan_pages: 0,
            passes: None,
            last_s: 0.0,
            summary_s: None,
            bad_lines: 0,
            engine: Engine::new(),
            owners: Owners::default(),
            ledger: None,
        }
    }

    pub fn call(&mut self, c: &CallRecord) {
        let t = if c.start_ns == 0 {
            self.last_s
        } else {
            (c.start_ns + c.duration_ns).saturating_sub(self.facts.start_monotonic_ns) as f64 / 1e9
        };
        self.last_s = self.last_s.max(t);
        let pages = c.pages_written.max(0) as u64;
        self.timeline.at(t).add_call(cause_name(c.cause), pages);
        self.calls += 1;
        self.per_call.record(pages);
        if let Some(s) = &c.scan {
            self.scan_bytes += s.bytes;
            self.scan_pages += pages;
        }
    }

    pub fn interval(&mut self, v: serde_json::Value) {
        let Ok(line) = serde_json::from_value::<IntervalLine>(v) else {
            self.bad_lines += 1;
            return;
        };
        // Bins no shorter than the recording's interval (it may change
        // mid-way in a recording assembled from several).
        self.timeline.coarsen_to(line.interval_s);
        let mid = line.time_s - line.interval_s / 2.0;
        self.timeline.at(mid).add_interval(&line, |_| true);
        self.writes.add(self.timeline.bin_s, mid, &line.writes);
        self.timeline.extend_to(line.time_s);
        self.last_s = self.last_s.max(line.time_s);
        self.engine.interval(&line);
        self.owners.add(&line.owners);
        if let Some(l) = &line.ledger {
            self.ledger.get_or_insert_with(LedgerLine::default).add(l);
        }
        for d in &line.inode_passes_by_device {
            self.passes
                .get_or_insert_with(Default::default)
                .merge(&d.counts);
        }
    }

    pub fn summary(&mut self, v: &serde_json::Value) {
        self.summary_s = v.get("duration_s").and_then(serde_json::Value::as_f64);
    }

    /// The report data; `warnings` are the reader's damage, one line each.
    pub fn finish(self, source: &str, mut warnings: Vec<String>) -> ReportData {
        let RecordingFeed {
            facts: header,
            mut timeline,
            per_call,
            calls,
            scan_bytes,
            scan_pages,
            passes,
            last_s,
            summary_s,
            bad_lines,
            mut engine,
            owners,
            ledger,
            writes,
        } = self;
        let findings = engine
            .finish()
            .1
            .findings
            .iter()
            .map(|f| FindingMark::of(f, timeline.bin_s))
            .collect();
        let page = wbscope_model::units::page_size();
        let span = summary_s.unwrap_or(0.0).max(last_s);
        timeline.extend_to(span);
        timeline.span_s = span;
        let writes = writes.finish(timeline.bin_s, timeline.bins.len());
        if bad_lines > 0 {
            warnings.push(format!(
                "{bad_lines} interval frames not understood, left out"
            ));
        }
        let plan: Option<ProbePlan> = serde_json::from_value(header.probe_plan.clone()).ok();
        let per_device_passes = plan.as_ref().is_some_and(|p| {
            p.concept(wbscope_model::plan::Concept::InodeWriteback)
                .and_then(|c| c.kind)
                == Some(wbscope_model::plan::HookKind::TpBtf)
        });
        let passes = passes.or_else(|| per_device_passes.then(InodePassCounts::default));
        let filter = wbscope_sys::escape::escape_controls(&header.filter.to_string()).into_owned();
        let segment = Segment {
            name: "recording".into(),
            timeline,
            has_timeline: true,
            o_direct: false,
            calls,
            pages_per_call: histogram_buckets(&per_call),
            writer_chunks: None,
            pass_budgets: passes.as_ref().map(|p| p.pages_asked_per_pass.clone()),
            pass_written: passes.as_ref().map(|p| p.pages_per_pass.clone()),
            pass_unbounded: passes.map(|p| p.pages_per_unbounded_pass),
            scan_per_page: (scan_pages > 0)
                .then(|| scan_bytes as f64 / page as f64 / scan_pages as f64),
            findings,
            findings_known: true,
            writes,
        };
        let esc = |s: &str| wbscope_sys::escape::escape_controls(s).into_owned();
        ReportData {
            title: format!("wbscope report: recording {}", esc(source)),
            facts: vec![
                ("input".into(), format!("recording {}", esc(source))),
                ("host".into(), esc(&header.host)),
                ("kernel".into(), esc(&header.kernel)),
                (
                    "recorded by".into(),
                    format!("wbscope {}", esc(&header.wbscope_version)),
                ),
                ("started".into(), utc(header.start_unix_ns / 1_000_000_000)),
                (
                    "length".into(),
                    format!("{span:.1} s, {calls} writepages calls"),
                ),
                ("filter".into(), filter),
            ],
            plan,
            segments: vec![segment],
            recording: true,
            page_size: page,
            warnings,
            owners: Some(owners),
            ledger,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_without_timelines_still_read() {
        let doc = r#"{"runs":[{"strategy":"direct","repeat":0,
            "writer":{"o_direct":true},"kernel":{"window_s":0.5,"calls":0}}]}"#;
        let d = from_json(doc, "x.json").unwrap();
        assert_eq!(d.segments.len(), 1);
        let s = &d.segments[0];
        assert!(!s.has_timeline && s.o_direct);
        assert_eq!(s.timeline.span_s, 0.5);
        assert!(from_json("{}", "y").is_err());
    }
}
