//! `wbscope replay`: print a recording the way `trace` printed it live.
use std::{
    fs::File,
    io::{self, BufWriter, Write as _},
    process::ExitCode,
};

use anyhow::Context as _;

use crate::{
    UsageError,
    cli::ReplayArgs,
    export::{json_lines::CallLine, text},
    model::{CallRecord, Totals},
    recording::reader::{Frame, RecordingReader},
};

pub fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    if !args.json && !args.summary && !args.text {
        return dashboard(args);
    }
    let file =
        File::open(&args.file).map_err(|e| UsageError(format!("{}: {e}", args.file.display())))?;
    // SAFETY: the mapping is read-only and private; a recording being
    // appended to while replayed only shows a shorter (cut) prefix.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .with_context(|| format!("mapping {}", args.file.display()))?;
    let mut reader = RecordingReader::open(&map)
        .map_err(|e| UsageError(format!("{}: {e}", args.file.display())))?;
    let mut out = BufWriter::new(io::stdout().lock());
    let mut totals = Totals::default();
    let mut summary = None;
    if !args.json && !args.summary {
        let h = &reader.header;
        writeln!(
            out,
            "recording of {} ({}), wbscope {}",
            h.host, h.kernel, h.wbscope_version
        )?;
        writeln!(out, "{}", text::HEADER)?;
    }
    let result = (|| -> io::Result<()> {
        for frame in reader.by_ref() {
            match frame {
                Frame::Call(call) => {
                    totals.add(&call);
                    print_call(&mut out, args, &call)?;
                }
                Frame::Interval(line) => {
                    if args.json {
                        writeln!(out, "{line}")?;
                    }
                }
                Frame::Summary(s) => summary = Some(s),
            }
        }
        Ok(())
    })();
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.context("writing to stdout")?,
    }
    for damage in &reader.damage {
        eprintln!("wbscope: replay: {damage}");
    }
    // A recording cut before its summary still gets one, marked as such
    // and computed from the calls that survived.
    let summary = match summary {
        Some(s) if reader.damage.is_empty() => s,
        recorded => serde_json::json!({
            "type": "summary",
            "calls": totals.calls,
            "pages_written": totals.pages_written,
            "truncated": recorded.is_none(),
            "damaged_frames": reader.damage.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            "recorded_summary": recorded,
        }),
    };
    if args.json || args.summary {
        writeln!(out, "{summary}")?;
    } else {
        writeln!(
            out,
            "\n{} calls, {} pages written{}",
            totals.calls,
            totals.pages_written,
            if reader.damage.is_empty() {
                ""
            } else {
                " (recording damaged, see above)"
            }
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The recording in the dashboard (the default with no output flag).
fn dashboard(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let file =
        File::open(&args.file).map_err(|e| UsageError(format!("{}: {e}", args.file.display())))?;
    // SAFETY: see `run`.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .with_context(|| format!("mapping {}", args.file.display()))?;
    let mut reader = RecordingReader::open(&map)
        .map_err(|e| UsageError(format!("{}: {e}", args.file.display())))?;
    let frames: Vec<Frame> = reader.by_ref().collect();
    for damage in &reader.damage {
        log::warn!("replay: {damage}");
    }
    let name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let header = reader.header.clone();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(crate::dashboard::run::replay(
            header, frames, name, args.speed,
        ))
}

fn print_call(out: &mut impl io::Write, args: &ReplayArgs, call: &CallRecord) -> io::Result<()> {
    if args.summary {
        return Ok(());
    }
    if args.json {
        let line = serde_json::to_string(&CallLine::from(call)).map_err(io::Error::other)?;
        writeln!(out, "{line}")
    } else {
        writeln!(out, "{}", text::call_row(call))
    }
}
