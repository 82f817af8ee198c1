//! `wbscope diff A B`: validate the gate expressions and the inputs, read
//! each side's runs (`model::diff::figures`), compare them
//! (`model::diff`), print (`export::diff`), exit 3 when a `--fail-if`
//! holds.
//!
//! Inputs are an [`Input`]: a compare/scenario document or a recording
//! today. A store read over a time window (the always-on recorder being
//! built beside this) is one more variant: its `kind` is `recording` (its
//! frames are a recording's) and its `read_into` feeds the window's
//! interval lines to a `RecordingSample` as [`Input::Recording`] does;
//! nothing else here changes.
use std::{
    fs::File,
    io::{BufReader, Read as _},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context as _;

use crate::cli::DiffArgs;
use wbscope_export::diff::{DiffDoc, GateOutcome, SideFacts, html, text};
use wbscope_model::{
    diff::{RecordingSample, Side, diff, figures, gate::Gate},
    interval::IntervalLine,
};
use wbscope_recording::{
    MAGIC,
    reader::{Frame, RecordingReader},
};
use wbscope_sys::UsageError;

/// Where one side's runs come from.
#[derive(Clone, Debug, PartialEq)]
enum Input {
    /// A `compare --json` or `scenario --json` document: one sample per run.
    Document { path: PathBuf, kind: String },
    /// A recording (`wbscope record`): one sample.
    Recording(PathBuf),
}

impl Input {
    /// What the file is, by its first bytes (and for JSON, its keys).
    fn open(path: &Path) -> Result<Input, UsageError> {
        let refuse = |why: String| UsageError(format!("{}: {why}", path.display()));
        let mut f = File::open(path).map_err(|e| refuse(e.to_string()))?;
        let mut magic = [0u8; 8];
        let got = f.read(&mut magic).map_err(|e| refuse(e.to_string()))?;
        if got == magic.len() && &magic == MAGIC {
            return Ok(Input::Recording(path.to_path_buf()));
        }
        let doc: serde_json::Value = serde_json::from_reader(BufReader::new(
            File::open(path).map_err(|e| refuse(e.to_string()))?,
        ))
        .map_err(|e| refuse(format!("not a recording, nor a JSON document: {e}")))?;
        if !doc.get("runs").is_some_and(serde_json::Value::is_array) {
            return Err(refuse(
                "a JSON document without \"runs\": not made by compare --json or scenario --json"
                    .into(),
            ));
        }
        let kind = match doc.get("scenario").and_then(serde_json::Value::as_str) {
            Some(name) => format!("scenario {name}"),
            None => "compare".into(),
        };
        Ok(Input::Document {
            path: path.to_path_buf(),
            kind,
        })
    }

    fn kind(&self) -> &str {
        match self {
            Input::Document { kind, .. } => kind,
            Input::Recording(_) => "recording",
        }
    }

    fn path(&self) -> &Path {
        match self {
            Input::Document { path, .. } | Input::Recording(path) => path,
        }
    }

    /// Adds this input's runs to `side`.
    fn read_into(&self, side: &mut Side, page_size: u64) -> anyhow::Result<()> {
        match self {
            Input::Document { path, .. } => {
                let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
                let doc: serde_json::Value = serde_json::from_reader(BufReader::new(f))
                    .with_context(|| format!("reading {}", path.display()))?;
                for run in doc["runs"].as_array().into_iter().flatten() {
                    let strategy = run["strategy"].as_str().unwrap_or("?");
                    let column = match run.get("fs").and_then(serde_json::Value::as_str) {
                        Some(fs) => format!("{fs} {strategy}"),
                        None => strategy.to_string(),
                    };
                    side.push(&column, figures::of_run(run, page_size));
                }
            }
            Input::Recording(path) => {
                let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
                let reader = RecordingReader::open(BufReader::new(f))
                    .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
                let mut acc = RecordingSample::default();
                for frame in reader {
                    if let Frame::Interval(v) = frame
                        && let Ok(line) = serde_json::from_value::<IntervalLine>(v)
                    {
                        acc.interval(&line);
                    }
                }
                let sample = acc.finish(page_size).ok_or_else(|| {
                    UsageError(format!(
                        "{}: no whole interval in the recording",
                        path.display()
                    ))
                })?;
                side.push("recording", sample);
            }
        }
        Ok(())
    }
}

/// A side's argument: files joined by commas, or a directory (its .json
/// files and recordings, by name).
fn inputs(flag: &str, arg: &str) -> Result<Vec<Input>, UsageError> {
    let mut out = Vec::new();
    for part in arg.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p = Path::new(part);
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| UsageError(format!("{flag} {part}: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file())
                .collect();
            files.sort();
            for f in files {
                let is_json = f.extension().is_some_and(|x| x == "json");
                match Input::open(&f) {
                    Ok(i) if is_json || matches!(i, Input::Recording(_)) => out.push(i),
                    // Other files of the directory (notes, pages) are not
                    // results; a broken .json is an error.
                    Ok(_) => {}
                    Err(e) if is_json => return Err(e),
                    Err(_) => {}
                }
            }
        } else {
            out.push(Input::open(p)?);
        }
    }
    if out.is_empty() {
        return Err(UsageError(format!(
            "{flag} {arg}: no results (compare/scenario JSON or recordings)"
        )));
    }
    Ok(out)
}

/// The kind all of `inputs` share.
fn one_kind(flag: &str, inputs: &[Input]) -> Result<String, UsageError> {
    let kind = inputs[0].kind().to_string();
    if let Some(other) = inputs.iter().find(|i| i.kind() != kind) {
        return Err(UsageError(format!(
            "{flag}: {} is {kind} but {} is {}; a side holds results of one kind",
            inputs[0].path().display(),
            other.path().display(),
            other.kind()
        )));
    }
    Ok(kind)
}

fn read_side(inputs: &[Input]) -> anyhow::Result<Side> {
    let page = wbscope_model::units::page_size();
    let mut side = Side::default();
    for i in inputs {
        i.read_into(&mut side, page)?;
    }
    Ok(side)
}

pub(crate) fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    let gates = args
        .fail_if
        .iter()
        .map(|e| Gate::parse(e).map_err(|why| UsageError(format!("--fail-if '{e}': {why}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = &args.html {
        wbscope_export::report::check_output("--html", p)?;
    }
    let (ia, ib) = (inputs("A", &args.a)?, inputs("B", &args.b)?);
    let (ka, kb) = (one_kind("A", &ia)?, one_kind("B", &ib)?);
    if ka != kb {
        return Err(UsageError(format!("A is {ka} but B is {kb}: nothing to compare")).into());
    }
    let (a, b) = (read_side(&ia)?, read_side(&ib)?);
    let d = diff(&a, &b, args.rule);
    if d.columns.is_empty() {
        return Err(UsageError(format!(
            "A and B have no column in common (A: {}; B: {})",
            a.columns
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            b.columns
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    let mut outcomes = Vec::new();
    for g in &gates {
        if !g.applies(&d) {
            return Err(UsageError(format!(
                "--fail-if '{}': no column of both A and B has {}{}",
                g.expr,
                g.figure,
                g.column
                    .as_ref()
                    .map_or(String::new(), |c| format!(" in column '{c}'"))
            ))
            .into());
        }
        for c in &d.columns {
            let few = c.runs_a < 2 || c.runs_b < 2;
            if few && g.column.as_ref().is_none_or(|w| w == &c.column) {
                eprintln!(
                    "wbscope: warning: --fail-if '{}': {} has {} run(s) in A and {} in B; the rules need at least 2 a side (3 or more to mean much), so nothing there is significant",
                    g.expr, c.column, c.runs_a, c.runs_b
                );
            }
        }
        outcomes.push(GateOutcome {
            expr: g.expr.clone(),
            hits: g.hits(&d),
        });
    }
    let failed = outcomes.iter().any(|o| !o.hits.is_empty());
    let facts = |arg: &str, inputs: &[Input], kind: &str| SideFacts {
        label: arg.to_string(),
        inputs: inputs
            .iter()
            .map(|i| i.path().display().to_string())
            .collect(),
        kind: kind.to_string(),
    };
    let (fa, fb) = (facts(&args.a, &ia, &ka), facts(&args.b, &ib, &kb));
    if args.json {
        let doc = DiffDoc {
            a: &fa,
            b: &fb,
            diff: &d,
            gates: &outcomes,
            failed,
        };
        println!(
            "{}",
            serde_json::to_string(&doc).context("serialising the diff")?
        );
    } else {
        print!("{}", text(&d, &fa, &fb, &outcomes, args.markdown));
    }
    if let Some(p) = &args.html {
        let values = |column: &str, figure: &str| {
            let of = |s: &Side| -> Vec<f64> {
                s.samples(column)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|x| x.get(figure))
                    .collect()
            };
            (of(&a), of(&b))
        };
        wbscope_export::report::write_new(p, &html(&d, &fa, &fb, &outcomes, &values))?;
        eprintln!("wbscope: diff page written to {}", p.display());
    }
    Ok(if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
