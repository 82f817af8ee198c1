//! `wbscope replay FILE|STORE --openmetrics`: a recording's figures as
//! the exporter would have served them, one timestamped snapshot per
//! interval, in the OpenMetrics text that `promtool tsdb
//! create-blocks-from openmetrics` takes (docs/prometheus.md, "Backfill").
//!
//! The same [`Metrics`] as a live scrape, fed the same frames in the same
//! order (calls as they end, interval lines as they close, the findings
//! judged at each close), so the families, names and labels are a live
//! scrape's; the extra labels (`--label instance=…`) stand in for the
//! ones Prometheus adds at scrape time.
//!
//! Counters and histograms start at 0 where the export starts, as after
//! an exporter's restart: each such series gets a sample of 0 just before
//! its first one (at `--since`, or where it was absent at the snapshot
//! before), so that `increase()` over the export sees every count. A
//! zero needs no extrapolation: Prometheus's `extrapolatedRate`
//! (promql/functions.go) stops its extrapolation to the range's start at
//! the point the counter would have been zero, here the sample itself.
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{self, Write};

use prometheus_client::registry::Registry;

use super::Metrics;
use super::samples::{escape_value, label_names, split_sample};
use wbscope_model::CallRecord;
use wbscope_model::findings::Engine;
use wbscope_model::interval::IntervalLine;

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackfillStats {
    pub snapshots: u64,
    /// Sample lines, the zeros included.
    pub samples: u64,
    /// The first and last sample's time, ns since the epoch.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
}

/// Writes snapshots of the exporter's registry, stamped.
pub struct Backfill<W: Write> {
    metrics: Metrics,
    registry: Registry,
    findings: Engine,
    /// The extra labels, rendered `name="value",…` (no trailing comma).
    labels: String,
    label_names: Vec<String>,
    out: W,
    /// Metadata lines (`# HELP`, `# TYPE`, `# UNIT`) written once each:
    /// repeated, they would only grow the file.
    described: HashSet<String>,
    /// Every series written so far, `name{labels}`: a few hundred to a
    /// few thousand (docs/prometheus.md, cardinality), never per call.
    seen: HashSet<String>,
    /// Where a counter first seen at the next snapshot gets its 0.
    zero_ns: Option<u64>,
    /// A call came after the last snapshot.
    pending: bool,
    last_wall_ns: Option<u64>,
    /// Only a snapshot at least this long after the one before (and the
    /// last); 0: one per interval.
    step_ns: u64,
    last_snapshot_ns: Option<u64>,
    stats: BackfillStats,
    text: String,
}

/// An extra label's name: `[a-zA-Z_][a-zA-Z0-9_]*`, not `__` (Prometheus
/// keeps those), not `le` (a histogram's bucket), none of wbscope's own.
pub fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{name}` is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "`{name}`: names starting with __ are Prometheus's own"
        ));
    }
    if name == "le" {
        return Err("`le` is a histogram bucket's own label".into());
    }
    if super::OWN_LABELS.contains(&name) {
        return Err(format!("`{name}` is a label of wbscope's own metrics"));
    }
    Ok(())
}

/// `ns` as OpenMetrics seconds, to the millisecond Prometheus keeps.
fn seconds(ns: u64) -> String {
    let ms = ns / 1_000_000;
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

impl<W: Write> Backfill<W> {
    /// A backfill to `out` with `labels` on every sample; counters start
    /// at `since_ns` when given (else just before the first frame); with
    /// `step_ns` > 0, at most a snapshot per `step_ns` (and the last).
    pub fn new(
        out: W,
        labels: &[(String, String)],
        since_ns: Option<u64>,
        step_ns: u64,
    ) -> Result<Backfill<W>, String> {
        let mut rendered = Vec::new();
        let mut names = Vec::new();
        for (k, v) in labels {
            check_label_name(k)?;
            if names.contains(k) {
                return Err(format!("label `{k}` given twice"));
            }
            names.push(k.clone());
            rendered.push(format!("{k}=\"{}\"", escape_value(v)));
        }
        let (metrics, registry) = Metrics::new();
        Ok(Backfill {
            metrics,
            registry,
            findings: Engine::new(),
            labels: rendered.join(","),
            label_names: names,
            out,
            described: HashSet::new(),
            seen: HashSet::new(),
            zero_ns: since_ns,
            pending: false,
            last_wall_ns: None,
            step_ns,
            last_snapshot_ns: None,
            stats: BackfillStats::default(),
            text: String::new(),
        })
    }

    fn saw(&mut self, wall_ns: u64) {
        if self.zero_ns.is_none() {
            self.zero_ns = Some(wall_ns.saturating_sub(1_000_000));
        }
        self.last_wall_ns = Some(self.last_wall_ns.map_or(wall_ns, |w| w.max(wall_ns)));
    }

    /// A call that ended at `wall_ns`.
    pub fn call(&mut self, c: &CallRecord, wall_ns: u64) {
        self.saw(wall_ns);
        self.metrics.observe_call(c);
        self.pending = true;
    }

    /// An interval line that closed at `wall_ns`: fed as a live trace
    /// feeds it, then a snapshot stamped at its close (unless `step`
    /// says to wait).
    pub fn interval(&mut self, line: &IntervalLine, wall_ns: u64) -> io::Result<()> {
        self.saw(wall_ns);
        self.metrics.update_from(line);
        self.findings.interval(line);
        self.metrics.set_findings(self.findings.active());
        self.pending = true;
        let due = self
            .last_snapshot_ns
            .is_none_or(|t| wall_ns >= t.saturating_add(self.step_ns));
        if due {
            self.snapshot(wall_ns)?;
        }
        Ok(())
    }

    /// The last snapshot (at the last frame, when anything came after
    /// the one before) and `# EOF`.
    pub fn finish(mut self) -> io::Result<(W, BackfillStats)> {
        if let (true, Some(wall)) = (self.pending, self.last_wall_ns) {
            self.snapshot(wall)?;
        }
        self.out.write_all(b"# EOF\n")?;
        self.out.flush()?;
        Ok((self.out, self.stats))
    }

    pub fn stats(&self) -> BackfillStats {
        self.stats
    }

    fn snapshot(&mut self, ns: u64) -> io::Result<()> {
        // A snapshot never goes back in time (a sample out of order is
        // refused by the TSDB): calls end before their interval closes,
        // but a recording's clock can step.
        let ns = self.last_snapshot_ns.map_or(ns, |t| ns.max(t + 1_000_000));
        self.text.clear();
        prometheus_client::encoding::text::encode(&mut self.text, &self.registry)
            .map_err(|_| io::Error::other("encoding the metrics"))?;
        let ts = seconds(ns);
        let zero_ns = self.zero_ns.unwrap_or(ns).min(ns.saturating_sub(1_000_000));
        let zero_ts = seconds(zero_ns);
        let mut cumulative = false;
        let mut out = String::new();
        for line in self.text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix("# ") {
                if let Some(kind) = meta.strip_prefix("TYPE ") {
                    cumulative = matches!(kind.rsplit(' ').next(), Some("counter" | "histogram"));
                }
                if !self.described.contains(line) {
                    self.described.insert(line.to_string());
                    out.push_str(line);
                    out.push('\n');
                }
                continue;
            }
            let Some((name, inner, value)) = split_sample(line) else {
                return Err(io::Error::other(format!(
                    "the exporter encoded a line this backfill cannot read: {line}"
                )));
            };
            let labels = match (self.labels.is_empty(), inner.is_empty()) {
                (true, _) => inner.to_string(),
                (false, true) => self.labels.clone(),
                (false, false) => format!("{},{inner}", self.labels),
            };
            let series = format!("{name}{{{labels}}}");
            if !self.seen.contains(&series) {
                if let Some(own) = label_names(inner)
                    .into_iter()
                    .find(|n| self.label_names.iter().any(|l| l == n))
                {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("--label {own}: `{own}` is a label of wbscope's own ({name})"),
                    ));
                }
                if cumulative {
                    let _ = writeln!(out, "{series} 0 {zero_ts}");
                    self.stats.samples += 1;
                    self.stats.first_ns.get_or_insert(zero_ns);
                }
                self.seen.insert(series.clone());
            }
            // A value and nothing else: the exporter writes no
            // timestamps or exemplars of its own.
            let value = value.split(' ').next().unwrap_or(value);
            let _ = writeln!(out, "{series} {value} {ts}");
            self.stats.samples += 1;
        }
        self.out.write_all(out.as_bytes())?;
        self.zero_ns = Some(ns);
        self.last_snapshot_ns = Some(ns);
        self.pending = false;
        self.stats.snapshots += 1;
        self.stats.first_ns.get_or_insert(ns);
        self.stats.last_ns = Some(ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_checked() {
        assert!(check_label_name("host").is_ok());
        assert!(check_label_name("_x1").is_ok());
        for bad in ["", "1a", "a-b", "__name__", "le", "é", "dev", "cgroup_id"] {
            assert!(check_label_name(bad).is_err(), "{bad}");
        }
        assert!(
            Backfill::new(
                Vec::new(),
                &[("a".into(), "1".into()), ("a".into(), "2".into())],
                None,
                0
            )
            .is_err()
        );
    }

    fn call(minor: u32, pages: i64) -> CallRecord {
        CallRecord {
            dev: wbscope_model::DevId::from_kernel(8 << 20 | minor),
            pages_written: pages,
            nr_to_write: 1024,
            start_seen: true,
            ..CallRecord::default()
        }
    }

    fn line(time_s: f64) -> IntervalLine {
        let snap = wbscope_model::kernel::KernelSnapshot {
            agg: vec![0; writeback_common::agg::COUNT as usize],
            ..Default::default()
        };
        IntervalLine::new(time_s, 1.0, &Default::default(), &snap, &snap)
    }

    fn samples<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn counters_get_a_zero_before_their_first_sample_and_every_sample_a_time() {
        let mut b = Backfill::new(
            Vec::new(),
            &[("host".into(), "a\"b".into())],
            Some(1_000_000_000_000),
            0,
        )
        .expect("backfill");
        b.call(&call(1, 10), 1_000_500_000_000);
        b.interval(&line(1.0), 1_001_000_000_000).expect("interval");
        b.call(&call(1, 6), 1_001_500_000_000);
        b.call(&call(2, 3), 1_001_600_000_000);
        b.interval(&line(2.0), 1_002_000_000_000).expect("interval");
        // A call after the last interval: one more snapshot at its end.
        b.call(&call(1, 1), 1_002_250_000_000);
        let (out, stats) = b.finish().expect("finish");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(stats.snapshots, 3);
        let dev1 = samples(
            &text,
            r#"wbscope_pages_written_total{host="a\"b",dev="8:1""#,
        );
        assert_eq!(
            dev1.iter()
                .map(|l| l
                    .rsplit_once(' ')
                    .expect("ts")
                    .0
                    .rsplit(' ')
                    .next()
                    .expect("v"))
                .collect::<Vec<_>>(),
            ["0", "10", "16", "17"],
            "{text}"
        );
        assert!(dev1[0].ends_with(" 1000.000"), "{}", dev1[0]);
        assert!(dev1[1].ends_with(" 1001.000"), "{}", dev1[1]);
        assert!(dev1[3].ends_with(" 1002.250"), "{}", dev1[3]);
        // The second device's series starts where it was absent: at the
        // first snapshot.
        let dev2 = samples(
            &text,
            r#"wbscope_pages_written_total{host="a\"b",dev="8:2""#,
        );
        assert!(dev2[0].ends_with(" 0 1001.000"), "{dev2:?}");
        // Gauges get no invented zero, and every line but the metadata
        // and # EOF is stamped.
        let dirty = samples(&text, "wbscope_dirty_pages");
        assert_eq!(dirty.len(), 3, "{dirty:?}");
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(l.split(' ').count(), 3, "{l}");
        }
        // Metadata once per family.
        assert_eq!(
            text.matches("# TYPE wbscope_pages_written counter").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn a_label_of_wbscope_own_is_refused() {
        let err = Backfill::new(Vec::new(), &[("dev".into(), "x".into())], None, 0)
            .err()
            .expect("dev is ours");
        assert!(err.contains("wbscope's own"), "{err}");
        // Every label the exporter writes is in the list that says so.
        let mut b = Backfill::new(Vec::new(), &[], None, 0).expect("backfill");
        b.call(&call(1, 1), 5_000_000_000);
        b.interval(&line(1.0), 6_000_000_000).expect("interval");
        let (out, _) = b.finish().expect("finish");
        let text = String::from_utf8(out).expect("utf-8");
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, inner, _) = split_sample(l).expect("a sample");
            for name in label_names(inner) {
                assert!(
                    name == "le" || crate::prometheus::OWN_LABELS.contains(&name),
                    "{name} of {l}"
                );
            }
        }
    }

    #[test]
    fn a_step_thins_the_snapshots_and_keeps_the_last() {
        let mut b = Backfill::new(Vec::new(), &[], None, 10_000_000_000).expect("backfill");
        for i in 1..=25u64 {
            b.call(&call(1, 1), i * 1_000_000_000 - 1);
            b.interval(&line(i as f64), i * 1_000_000_000)
                .expect("interval");
        }
        let (out, stats) = b.finish().expect("finish");
        let text = String::from_utf8(out).expect("utf-8");
        // At 1 s, 11 s, 21 s, and the last interval's 25 s.
        assert_eq!(stats.snapshots, 4, "{text}");
        let last = samples(&text, "wbscope_pages_written_total");
        assert!(
            last.last().expect("a sample").ends_with(" 25 25.000"),
            "{last:?}"
        );
    }
}
