//! `wbscope record`: a session written to a recording file.
use std::{
    fs::{File, OpenOptions},
    io::{self, BufWriter},
    path::Path,
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;

use crate::{
    UsageError,
    capture::session::{self, Ending, Limits, SessionOutput},
    cli::RecordArgs,
    model::CallRecord,
    model::interval::IntervalLine,
    model::interval::SummaryLine,
    model::plan::HookChoice,
    recording::{FORMAT_VERSION, FrameKind, Header, writer::RecordingWriter},
    tracer::Tracer,
};

pub(crate) struct RecordingOutput {
    pub(crate) writer: RecordingWriter<BufWriter<File>>,
}

impl SessionOutput for RecordingOutput {
    fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        self.writer.call(call)
    }

    fn interval(&mut self, line: &IntervalLine) -> io::Result<()> {
        self.writer.json(FrameKind::Interval, line)
    }

    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()> {
        self.writer.json(FrameKind::Summary, summary)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Creates the output without ever replacing an existing file.
fn create_new(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => UsageError(format!(
                "{} already exists; wbscope record never overwrites a file",
                path.display()
            ))
            .into(),
            _ => anyhow::Error::new(e).context(format!("creating {}", path.display())),
        })
}

/// A new recording at `path` (never replacing a file) with the header of
/// this tracer and filter.
pub(crate) fn create(
    path: &Path,
    tracer: &Tracer,
    filter: &writeback_common::Filter,
) -> anyhow::Result<RecordingOutput> {
    let file = create_new(path)?;
    let header = Header {
        format_version: FORMAT_VERSION,
        wbscope_version: env!("CARGO_PKG_VERSION").to_string(),
        host: crate::sys::hostname(),
        kernel: tracer.plan.kernel.clone(),
        start_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        start_monotonic_ns: monotonic_ns(),
        probe_plan: serde_json::to_value(&tracer.plan)?,
        field_offsets: tracer.field_offsets.clone(),
        filter: serde_json::json!({
            "dev": filter.dev, "tgid": filter.tgid, "ino": filter.ino, "cgroup_id": filter.cgroup_id,
        }),
    };
    let writer = RecordingWriter::new(BufWriter::new(file), &header)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(RecordingOutput { writer })
}

pub(crate) async fn run(args: &RecordArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let filter = super::filter::resolve(&args.filter)?;
    let privileges = super::trace::drop_options(&args.privileges);
    privileges.check()?;
    // Checked before attaching (create_new below still guards the race).
    if args.output.exists() {
        return Err(UsageError(format!(
            "{} already exists; wbscope record never overwrites a file",
            args.output.display()
        ))
        .into());
    }
    if let Some(parent) = args.output.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(UsageError(format!("-o {}: no such directory", args.output.display())).into());
    }
    let (tracer, mut collector) = session::attach(filter, hooks)?;
    let mut out = create(&args.output, &tracer, &filter)?;
    session::drop_privileges(&privileges)?;

    let limits = Limits {
        interval: args.interval.unwrap_or(Duration::from_secs(1)),
        duration: args.duration,
        max_records: args.max_records,
        watch_pid: args.filter.pid,
        max_event_rate: args.max_event_rate,
    };
    let ending = session::run(&tracer, &mut collector, &limits, &mut out)
        .await
        .with_context(|| format!("recording to {}", args.output.display()))?;
    let w = &out.writer;
    eprintln!(
        "wbscope: recorded {} frames, {} bytes to {}{}",
        w.frames,
        w.bytes,
        args.output.display(),
        match ending {
            Ending::MaxRecords => " (--max-records reached)",
            _ => "",
        }
    );
    Ok(ExitCode::SUCCESS)
}
