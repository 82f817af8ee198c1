//! `wbscope report INPUT -o FILE.html`: a recording or a compare/scenario
//! document drawn as one HTML page (`export::report`). A recording is
//! streamed twice: once to its first interval line (the report's bin
//! length), once whole into the report's feed; memory stays bounded.
use std::{fs::File, io::Read as _, path::Path, process::ExitCode};

use anyhow::Context as _;

use crate::cli::ReportArgs;
use wbscope_export::report::{self, RecordingFacts, RecordingFeed, ReportData};
use wbscope_model::when::TimeWindow;
use wbscope_recording::{MAGIC, reader::Frame, store::reader::StoreReader};
use wbscope_sys::UsageError;

pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    report::check_output("-o", &args.output)?;
    let data = read_input(&args.input, args.window.window()?)?;
    for w in &data.warnings {
        eprintln!(
            "wbscope: warning: {}: {}",
            args.input.display(),
            wbscope_sys::escape::escape_controls(w)
        );
    }
    report::write_new(&args.output, &report::html(&data))?;
    eprintln!("wbscope: report written to {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// A recording (by its magic) or a store (a directory), in `window`, or
/// a JSON document.
fn read_input(path: &Path, window: TimeWindow) -> anyhow::Result<ReportData> {
    let mut magic = [0u8; 8];
    let is_recording = path.is_dir()
        || (File::open(path)
            .and_then(|mut f| f.read(&mut magic))
            .unwrap_or(0)
            == magic.len()
            && &magic == MAGIC);
    if is_recording {
        let interval = first_interval(super::replay::open(path, window)?);
        return read_recording(
            super::replay::open(path, window)?,
            interval,
            &path.display().to_string(),
        )
        .with_context(|| format!("reading {}", path.display()));
    }
    if !window.is_all() {
        return Err(UsageError(format!(
            "{}: --since/--until read a window of a recording or a store, not of a JSON document",
            path.display()
        ))
        .into());
    }
    report::read_json(path)
}

/// The interval of a recording's first interval line, seconds.
fn first_interval(reader: StoreReader) -> Option<f64> {
    reader.into_iter().find_map(|frame| match frame {
        Frame::Interval(v) => v.get("interval_s").and_then(serde_json::Value::as_f64),
        _ => None,
    })
}

/// A recording's frames into the report's feed, one at a time.
pub(crate) fn read_recording(
    mut reader: StoreReader,
    interval_s: Option<f64>,
    source: &str,
) -> anyhow::Result<ReportData> {
    let h = &reader.header;
    let mut feed = RecordingFeed::new(
        RecordingFacts {
            host: h.host.clone(),
            kernel: h.kernel.clone(),
            wbscope_version: h.wbscope_version.clone(),
            start_unix_ns: h.start_unix_ns,
            start_monotonic_ns: h.start_monotonic_ns,
            probe_plan: h.probe_plan.clone(),
            filter: h.filter.clone(),
        },
        interval_s,
    );
    for frame in reader.by_ref() {
        match frame {
            Frame::Call(c) => feed.call(&c),
            Frame::Interval(v) => feed.interval(v),
            Frame::Summary(v) => feed.summary(&v),
        }
    }
    let mut warnings: Vec<String> = reader.damage.iter().map(ToString::to_string).collect();
    if reader.damage_not_kept > 0 {
        warnings.push(format!(
            "{} more damaged regions not listed",
            reader.damage_not_kept
        ));
    }
    Ok(feed.finish(source, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_export::report::tests::{fixture_frames, fixture_header};
    use wbscope_recording::{FrameKind, writer::RecordingWriter};

    /// The committed recording fixture is the synthetic frames written as
    /// a recording, and reading it back gives the golden page the feed
    /// gives (export::report::tests).
    #[test]
    fn the_recording_fixture_reads_back_to_the_golden_page() {
        let f = fixture_header();
        let header = wbscope_recording::Header {
            format_version: wbscope_recording::FORMAT_VERSION,
            wbscope_version: f.wbscope_version,
            host: f.host,
            kernel: f.kernel,
            start_unix_ns: f.start_unix_ns,
            start_monotonic_ns: f.start_monotonic_ns,
            probe_plan: f.probe_plan,
            field_offsets: serde_json::json!({}),
            filter: f.filter,
            segment: None,
        };
        let (calls_and_lines, summary) = (fixture_frames(), 3.0);
        let mut w = RecordingWriter::new(Vec::new(), &header).unwrap();
        for (calls, line) in &calls_and_lines {
            for c in calls {
                w.call(c).unwrap();
            }
            w.json(FrameKind::Interval, line).unwrap();
        }
        w.json(
            FrameKind::Summary,
            &serde_json::json!({"type": "summary", "duration_s": summary}),
        )
        .unwrap();
        let bytes = w.into_inner();
        let fixtures = wbscope_export::report::tests::fixtures();
        let path = fixtures.join("small.rec");
        if std::env::var_os("WBSCOPE_UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());
        let data = read_input(&path, TimeWindow::default()).unwrap();
        let html = report::html(&data).replace(&path.display().to_string(), "small.rec");
        let golden = std::fs::read_to_string(fixtures.join("recording.html")).unwrap();
        assert!(
            html == golden,
            "reading small.rec differs from recording.html"
        );
        // A file that is neither: a usage error naming it.
        let e = read_input(&fixtures.join("recording.html"), TimeWindow::default()).unwrap_err();
        assert!(e.to_string().contains("not a recording"), "{e}");
    }
}
