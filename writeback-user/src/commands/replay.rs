//! `wbscope replay`: print a recording the way `trace` printed it live.
use std::{
    fs::File,
    io::{self, BufWriter, Write as _},
    os::unix::fs::FileTypeExt as _,
    path::Path,
    process::ExitCode,
};

use anyhow::Context as _;

use crate::{
    UsageError,
    cli::ReplayArgs,
    export::{json_lines::CallLine, text},
    model::{CallRecord, Totals},
    recording::reader::{Damage, Frame, OpenError, RecordingReader},
};

/// Frames the dashboard's feed reads ahead of the dashboard: a second of
/// a busy recording, a few hundred KiB.
const FEED_FRAMES: usize = 1024;

pub fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    if !args.json && !args.summary && !args.text {
        return dashboard(args);
    }
    let mut reader = open(&args.file)?;
    let mut out = BufWriter::new(io::stdout().lock());
    let mut totals = Totals::default();
    let mut summary = None;
    if !args.json && !args.summary {
        let h = &reader.header;
        writeln!(
            out,
            "recording of {} ({}), wbscope {}",
            text::escape_controls(&h.host),
            text::escape_controls(&h.kernel),
            text::escape_controls(&h.wbscope_version)
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
                        writeln!(out, "{}", text::escape_json_line(&line.to_string()))?;
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
    // A read error ends the replay with an error (below); the rest of the
    // damage is reported and the replay goes on as far as it can.
    let mut unreadable = None;
    for damage in &reader.damage {
        match damage {
            Damage::Unreadable { .. } => unreadable = Some(damage),
            _ => eprintln!("wbscope: replay: {damage}"),
        }
    }
    if reader.damage_not_kept > 0 {
        eprintln!(
            "wbscope: replay: {} more damaged regions not listed",
            reader.damage_not_kept
        );
    }
    // A recording cut before its summary still gets one, marked as such
    // and computed from the calls that survived.
    let summary = match summary {
        Some(s) if reader.damage.is_empty() => s,
        recorded => {
            let mut s = serde_json::json!({
                "type": "summary",
                "calls": totals.calls,
                "pages_written": totals.pages_written,
                "truncated": recorded.is_none(),
                "damaged_frames": reader.damage.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
                "recorded_summary": recorded,
            });
            if reader.damage_not_kept > 0 {
                s["damaged_frames_not_listed"] = reader.damage_not_kept.into();
            }
            s
        }
    };
    if args.json || args.summary {
        writeln!(out, "{}", text::escape_json_line(&summary.to_string()))?;
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
    if let Some(damage) = unreadable {
        anyhow::bail!("{}: {damage}", args.file.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens a recording and reads its header. Naming something that is not
/// a recording (a directory, a device, an empty or foreign file) is a
/// usage error; failing to read one is not.
fn open(path: &Path) -> anyhow::Result<RecordingReader<File>> {
    let name = path.display();
    let file = File::open(path).map_err(|e| UsageError(format!("{name}: {e}")))?;
    let meta = file
        .metadata()
        .with_context(|| format!("{name}: reading its metadata"))?;
    let kind = meta.file_type();
    if kind.is_dir() {
        return Err(UsageError(format!("{name}: is a directory, not a recording")).into());
    }
    // The reader streams, so a pipe works too (`replay <(zcat run.rec.gz)`).
    if !kind.is_file() && !kind.is_fifo() {
        return Err(UsageError(format!(
            "{name}: not a regular file (a recording is a file written by `wbscope record`)"
        ))
        .into());
    }
    if kind.is_file() && meta.len() == 0 {
        return Err(UsageError(format!("{name}: is empty, not a recording")).into());
    }
    RecordingReader::open(file).map_err(|e| match e {
        OpenError::Io(_) => anyhow::anyhow!("{name}: {e}"),
        e => UsageError(format!("{name}: {e}")).into(),
    })
}

/// The recording in the dashboard (the default with no output flag),
/// read as it plays.
fn dashboard(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let reader = open(&args.file)?;
    let name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let header = reader.header.clone();
    let frames = reader
        .into_channel(FEED_FRAMES)
        .context("starting the recording's reader")?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(crate::commands::dashboard::replay(
            header, frames, name, args.speed,
        ))
}

fn print_call(out: &mut impl io::Write, args: &ReplayArgs, call: &CallRecord) -> io::Result<()> {
    if args.summary {
        return Ok(());
    }
    if args.json {
        let line = serde_json::to_string(&CallLine::from(call)).map_err(io::Error::other)?;
        writeln!(out, "{}", text::escape_json_line(&line))
    } else {
        writeln!(out, "{}", text::call_row(call))
    }
}
