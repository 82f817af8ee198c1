//! The side-by-side tables of `compare` and `scenario`: one column per
//! run (or group of repetitions), writer rows then kernel rows, as text or
//! Markdown, or the runs as one JSON document.
use std::io::Write as _;

use anyhow::Context as _;
use serde::Serialize;
use writer_core::Report;

use wbscope_model::{
    units::pow2_bytes,
    window::{KernelFigures, Run, RunContext},
};

/// Prints the runs as JSON (`{"runs": [...], "context": {...}}`) or as the side-by-side
/// table.
pub fn print_runs(
    runs: &[Run],
    columns: &[String],
    json: bool,
    markdown: bool,
    context: &RunContext,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        #[derive(Serialize)]
        struct Doc<'a> {
            runs: &'a [Run],
            context: &'a RunContext,
        }
        // Serialised whole before the first byte goes out (json! panicked
        // on a non-UTF-8 path; to_writer would cut the object on an error).
        let text = serde_json::to_string(&Doc { runs, context }).context("serialising the runs")?;
        writeln!(out, "{text}")?;
    } else {
        out.write_all(table(runs, columns, markdown).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

type Metric<T> = (&'static str, fn(&T) -> Option<f64>, u8);

/// Writer rows of the table: label, figure, decimals.
pub(crate) const WRITER_METRICS: &[Metric<Report>] = &[
    ("durable MB/s", |r| r.durable_mb_s, 1),
    ("write MB/s", |r| Some(r.write_mb_s), 1),
    (
        "per-second MB/s mean",
        |r| r.per_second.as_ref().map(|p| p.mean),
        1,
    ),
    (
        "per-second MB/s min",
        |r| r.per_second.as_ref().map(|p| p.min),
        1,
    ),
    (
        "per-second CV",
        |r| r.per_second.as_ref().and_then(|p| p.cv),
        3,
    ),
    ("elapsed s", |r| Some(r.elapsed_s), 2),
    // The writer's own fsyncs (or fdatasyncs), beside the kernel's split
    // of them below.
    (
        "fsync p50 ms (writer)",
        |r| writer_sync(r).map(|l| l.p50 / 1e3),
        2,
    ),
    (
        "fsync p99 ms (writer)",
        |r| writer_sync(r).map(|l| l.p99 / 1e3),
        2,
    ),
    ("user CPU s", |r| Some(r.user_cpu_s), 2),
    ("sys CPU s", |r| Some(r.sys_cpu_s), 2),
];

/// The writer's fsync latencies, or its fdatasync ones.
fn writer_sync(r: &Report) -> Option<&writer_core::stats::LatencySummary> {
    r.sync_latency_us
        .get("fsync")
        .or_else(|| r.sync_latency_us.get("fdatasync"))
}

/// Kernel rows of the table.
pub(crate) const KERNEL_METRICS: &[Metric<KernelFigures>] = &[
    (
        "fsyncs (kernel)",
        |k| k.fsyncs.as_ref().map(|f| f.count as f64),
        0,
    ),
    ("fsync p50 ms", |k| k.fsyncs.as_ref().map(|f| f.p50_ms), 2),
    ("fsync p99 ms", |k| k.fsyncs.as_ref().map(|f| f.p99_ms), 2),
    (
        "fsync writeback ms",
        |k| k.fsyncs.as_ref().map(|f| f.writeback_ms_mean),
        2,
    ),
    (
        "fsync wait ms",
        |k| k.fsyncs.as_ref().map(|f| f.wait_ms_mean),
        2,
    ),
    (
        "fsync journal ms",
        |k| k.fsyncs.as_ref().map(|f| f.journal_ms_mean),
        2,
    ),
    (
        "fsync flush ms",
        |k| k.fsyncs.as_ref().map(|f| f.flush_ms_mean),
        2,
    ),
    ("writepages calls", |k| Some(k.calls as f64), 0),
    ("pages written (calls)", |k| Some(k.pages_written as f64), 0),
    (
        "pages/call p50",
        |k| k.pages_per_call.as_ref().map(|p| p.p50 as f64),
        0,
    ),
    (
        "pages/call p99",
        |k| k.pages_per_call.as_ref().map(|p| p.p99 as f64),
        0,
    ),
    (
        "pages/call max",
        |k| k.pages_per_call.as_ref().map(|p| p.max as f64),
        0,
    ),
    (
        "scanned/written page",
        |k| k.pages_scanned_per_page_written,
        2,
    ),
    ("ns per written page", |k| k.ns_per_written_page, 0),
    ("on-CPU ns per page", |k| k.on_cpu_ns_per_written_page, 0),
    (
        "peak Dirty MiB*",
        |k| Some(k.peak_dirty_kib as f64 / 1024.0),
        1,
    ),
    (
        "peak Writeback MiB*",
        |k| Some(k.peak_writeback_kib as f64 / 1024.0),
        1,
    ),
    (
        "throttle pause ms*",
        |k| Some(k.throttle_pause_ms_total as f64),
        0,
    ),
    ("inode passes*", |k| Some(k.inode_passes as f64), 0),
    ("device requests", |k| Some(k.device_requests as f64), 0),
];

/// Rows of the inode passes on the run's devices ("-" without the
/// per-device hook); the chunk-size rows follow in [`kernel_rows`].
pub(crate) const PASS_METRICS: &[Metric<KernelFigures>] = &[
    (
        "inode passes",
        |k| k.inode_pass.as_ref().map(|p| p.counts.passes as f64),
        0,
    ),
    (
        "pages written (passes)",
        |k| k.inode_pass.as_ref().map(|p| p.counts.pages_written as f64),
        0,
    ),
    (
        "pages/pass mean",
        |k| k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_mean),
        0,
    ),
];

/// Bucket-valued rows: label and the `[lo, hi]` of the first run.
type RangeRow = (&'static str, fn(&KernelFigures) -> Option<[u64; 2]>);

const RANGE_ROWS: &[RangeRow] = &[
    ("pages/pass p50", |k| {
        k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_p50)
    }),
    ("pages/pass p99", |k| {
        k.inode_pass.as_ref().and_then(|p| p.pages_per_pass_p99)
    }),
    ("pages asked/pass p50", |k| {
        k.inode_pass
            .as_ref()
            .and_then(|p| p.pages_asked_per_pass_p50)
    }),
];

/// A log2 bucket of pages, `lo-hi` (both included).
fn fmt_range([lo, hi]: [u64; 2]) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

/// A cell: the value, or `median ±half-range` over repetitions.
pub fn cell(mut vals: Vec<f64>, decimals: u8) -> String {
    let d = decimals as usize;
    match vals.len() {
        0 => "-".to_string(),
        1 => format!("{:.d$}", vals[0]),
        _ => {
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let m = median(&mut vals);
            format!("{m:.d$} ±{:.d$}", (hi - lo) / 2.0)
        }
    }
}

/// Rows of kernel figures, one column per group of figures.
pub fn kernel_rows(columns: &[Vec<&KernelFigures>]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (label, f, decimals) in KERNEL_METRICS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(cell(col.iter().filter_map(|k| f(k)).collect(), *decimals));
        }
        rows.push(row);
    }
    for (label, f, decimals) in PASS_METRICS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(cell(col.iter().filter_map(|k| f(k)).collect(), *decimals));
        }
        rows.push(row);
    }
    // Buckets do not take a median over repetitions: the first run's.
    for (label, f) in RANGE_ROWS {
        let mut row = vec![label.to_string()];
        for col in columns {
            row.push(col.first().and_then(|k| f(k)).map_or("-".into(), fmt_range));
        }
        rows.push(row);
    }
    let mut row = vec!["device request p50".to_string()];
    for col in columns {
        row.push(
            col.first()
                .and_then(|k| k.device_request_bytes_p50)
                .map_or("-".into(), |[lo, hi]| {
                    format!("{}-{}", pow2_bytes(lo), pow2_bytes(hi + 1))
                }),
        );
    }
    rows.push(row);
    // The findings of the first run of each column (docs/findings.md),
    // with a severity initial.
    let mut row = vec!["findings".to_string()];
    for col in columns {
        let names: Vec<String> = col
            .first()
            .map(|k| {
                k.findings
                    .iter()
                    .map(|f| format!("{}({})", f.name, &f.severity.name()[..1]))
                    .collect()
            })
            .unwrap_or_default();
        row.push(if names.is_empty() {
            "-".into()
        } else {
            names.join(",")
        });
    }
    rows.push(row);
    rows
}

/// Rows of the page-cache-cliff scenario, after the usual ones: what each
/// run left in the page cache and took from reclaim, and io_uring's punts.
pub const CACHE_METRICS: &[Metric<Run>] = &[
    (
        "files cached peak MiB",
        |r| r.writer.cache_peak_kib.map(|k| k as f64 / 1024.0),
        1,
    ),
    (
        "files cached end MiB",
        |r| r.writer.cache_end_kib.map(|k| k as f64 / 1024.0),
        1,
    ),
    (
        "kswapd pages stolen*",
        |r| r.writer.reclaim.map(|c| c.pgsteal_kswapd as f64),
        0,
    ),
    (
        "direct reclaim pages*",
        |r| r.writer.reclaim.map(|c| c.pgsteal_direct as f64),
        0,
    ),
    ("sys CPU s/GiB", |r| r.writer.sys_cpu_s_per_gib, 2),
    (
        "io_uring punts*",
        |r| r.kernel.io_uring_punts.map(|p| p as f64),
        0,
    ),
];

/// The writepages calls of each column by cause, `cause n` pairs (the
/// first run's).
fn cause_row(columns: &[Vec<&Run>]) -> Vec<String> {
    let mut row = vec!["calls by cause".to_string()];
    for col in columns {
        row.push(col.first().map_or("-".into(), |r| {
            let by: Vec<String> = r
                .kernel
                .calls_by_cause
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            if by.is_empty() {
                "-".into()
            } else {
                by.join(", ")
            }
        }));
    }
    row
}

/// Footnote for the rows marked `*`.
pub const SYSTEM_WIDE: &str = "* system-wide over the run's window (all devices)";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The side-by-side table: one column per run label; with repetitions,
/// `median ±half-range`.
pub fn table(runs: &[Run], columns: &[String], markdown: bool) -> String {
    table_with(runs, columns, markdown, &[])
}

/// [`table`] with `extra` rows (and the calls by cause) after the kernel's.
pub fn table_with(
    runs: &[Run],
    columns: &[String],
    markdown: bool,
    extra: &[Metric<Run>],
) -> String {
    let mut header = vec!["".to_string()];
    header.extend(columns.iter().cloned());
    let mut rows = vec![header];
    let of = |c: &String| runs.iter().filter(|r| &r.column() == c).collect::<Vec<_>>();
    for (label, f, decimals) in WRITER_METRICS {
        let mut row = vec![label.to_string()];
        for c in columns {
            row.push(cell(
                of(c).iter().filter_map(|r| f(&r.writer)).collect(),
                *decimals,
            ));
        }
        rows.push(row);
    }
    let kernel: Vec<Vec<&KernelFigures>> = columns
        .iter()
        .map(|c| of(c).into_iter().map(|r| &r.kernel).collect())
        .collect();
    rows.extend(kernel_rows(&kernel));
    if !extra.is_empty() {
        let cols: Vec<Vec<&Run>> = columns.iter().map(of).collect();
        for (label, f, decimals) in extra {
            let mut row = vec![label.to_string()];
            for col in &cols {
                row.push(cell(col.iter().filter_map(|r| f(r)).collect(), *decimals));
            }
            rows.push(row);
        }
        rows.push(cause_row(&cols));
    }
    let n = columns.first().map_or(0, |c| of(c).len());
    let mut s = render(&rows, markdown);
    if n > 1 {
        s.push_str(&format!("{n} runs per column: median ±half the range\n"));
    }
    s.push_str(SYSTEM_WIDE);
    s.push('\n');
    s
}

/// Aligns `rows` (the first is the header) as text or Markdown.
pub fn render(rows: &[Vec<String>], markdown: bool) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for (ri, r) in rows.iter().enumerate() {
        let cells: Vec<String> = (0..cols)
            .map(|i| {
                let c = r.get(i).map_or("", String::as_str);
                if i == 0 {
                    format!("{c:<w$}", w = width[i])
                } else {
                    format!("{c:>w$}", w = width[i])
                }
            })
            .collect();
        if markdown {
            s.push_str(&format!("| {} |\n", cells.join(" | ")));
            if ri == 0 {
                let seps: Vec<String> = (0..cols)
                    .map(|i| {
                        if i == 0 {
                            "-".repeat(width[i].max(3))
                        } else {
                            format!("{}:", "-".repeat(width[i].max(3) - 1))
                        }
                    })
                    .collect();
                s.push_str(&format!("| {} |\n", seps.join(" | ")));
            }
        } else {
            s.push_str(cells.join("  ").trim_end());
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_model::{interval::InodePassCounts, window::InodePassFigures};

    #[test]
    fn pass_rows_show_buckets_or_a_dash() {
        let with = KernelFigures {
            inode_pass: Some(InodePassFigures {
                counts: InodePassCounts {
                    passes: 12,
                    pages_written: 24576,
                    ..Default::default()
                },
                pages_per_pass_p50: Some([2048, 4095]),
                pages_per_pass_p99: Some([1, 1]),
                pages_per_pass_mean: Some(2048.0),
                pages_asked_per_pass_p50: None,
            }),
            ..Default::default()
        };
        // Without the per-device hook (classic tracepoint fallback).
        let without = KernelFigures::default();
        let rows = kernel_rows(&[vec![&with], vec![&without]]);
        let row = |label: &str| -> Vec<String> {
            rows.iter()
                .find(|r| r[0] == label)
                .unwrap_or_else(|| panic!("no row {label}: {rows:?}"))[1..]
                .to_vec()
        };
        assert_eq!(row("inode passes"), ["12", "-"]);
        assert_eq!(row("pages written (passes)"), ["24576", "-"]);
        assert_eq!(row("pages/pass mean"), ["2048", "-"]);
        assert_eq!(row("pages/pass p50"), ["2048-4095", "-"]);
        assert_eq!(row("pages/pass p99"), ["1", "-"]);
        assert_eq!(row("pages asked/pass p50"), ["-", "-"]);
        // The existing rows stay.
        assert_eq!(row("inode passes*"), ["0", "0"]);
        assert_eq!(row("device request p50"), ["-", "-"]);
    }
}

#[cfg(test)]
mod json_doc_tests {
    use wbscope_model::{
        findings::{Finding, Severity},
        timeline::{TimeBin, Timeline, WriterChunks},
        window::{InodePassFigures, KernelFigures, RunContext},
    };

    /// The keys of a JSON object.
    fn keys(v: &serde_json::Value) -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every field of a run's `kernel` (with its findings, timeline and
    /// writer chunks) and of `context` is in docs/scenarios.md's section
    /// on the JSON document.
    #[test]
    fn every_compare_json_field_is_documented() {
        let doc = include_str!("../../../docs/scenarios.md");
        let section = doc
            .split("### The JSON document")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("a JSON document section in docs/scenarios.md");
        let mut timeline = Timeline::default();
        *timeline.at(0.0) = TimeBin {
            writer_bytes: vec![1],
            ..TimeBin::default()
        };
        let kernel = KernelFigures {
            inode_pass: Some(InodePassFigures::default()),
            findings: vec![Finding {
                name: "dirty-throttled",
                severity: Severity::Warning,
                first_seen_s: 1.0,
                last_seen_s: 1.0,
                intervals: 1,
                episodes: 1,
                evidence: Default::default(),
                advice: String::new(),
            }],
            timeline,
            writer_chunks: Some(WriterChunks::default()),
            ..KernelFigures::default()
        };
        let k = serde_json::to_value(&kernel).unwrap();
        let all = [
            ("kernel", keys(&k)),
            ("kernel.inode_pass", keys(&k["inode_pass"])),
            ("kernel.findings[]", keys(&k["findings"][0])),
            ("kernel.timeline", keys(&k["timeline"])),
            ("kernel.timeline.bins[]", keys(&k["timeline"]["bins"][0])),
            ("kernel.writer_chunks", keys(&k["writer_chunks"])),
            (
                "context",
                keys(&serde_json::to_value(RunContext::default()).unwrap()),
            ),
        ];
        for (what, keys) in all {
            assert!(!keys.is_empty(), "{what}: no keys");
            for key in keys {
                assert!(
                    section.contains(&format!("`{key}`"))
                        || section.contains(&format!("\"{key}\"")),
                    "{what}.{key} is not documented in docs/scenarios.md"
                );
            }
        }
    }
}
