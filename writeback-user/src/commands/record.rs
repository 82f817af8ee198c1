//! `wbscope record`: a session written to a recording file, to standard
//! output, or to a store.
use std::{
    fs::OpenOptions,
    io::{self, BufWriter, Write},
    path::Path,
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;

use crate::cli::{self, RecordArgs};
use wbscope_capture::session::{self, Ending, Limits, SessionOutput};
use wbscope_export::prometheus::{PushConfig, Telemetry};
use wbscope_model::CallRecord;
use wbscope_model::durability::SyncRecord;
use wbscope_model::interval::IntervalLine;
use wbscope_model::plan::HookChoice;
use wbscope_model::summary::SummaryLine;
use wbscope_recording::{
    FORMAT_VERSION, FrameKind, Header,
    store::writer::{Bounds, StoreWriter, SystemEnv},
    writer::RecordingWriter,
};
use wbscope_sys::UsageError;
use wbscope_tracer::{Tracer, seccomp::WritableDir};

pub(crate) struct RecordingOutput {
    pub(crate) writer: RecordingWriter<Box<dyn Write>>,
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

/// A session into a store: frames gathered into one block per interval,
/// written (and synced) when the interval closes.
struct StoreOutput {
    writer: StoreWriter<SystemEnv>,
}

fn io_err(e: anyhow::Error) -> io::Error {
    io::Error::other(format!("{e:#}"))
}

impl SessionOutput for StoreOutput {
    fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        self.writer.call(call).map_err(io_err)
    }

    fn interval(&mut self, line: &IntervalLine) -> io::Result<()> {
        self.writer.interval(line).map_err(io_err)
    }

    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()> {
        self.writer.summary(summary).map_err(io_err)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Blocks are written whole at each interval (loss on a crash: the
        // interval being gathered).
        Ok(())
    }
}

/// A record's output, and with `--remote-write` its figures pushed as
/// they are recorded.
struct Pushed<O> {
    inner: O,
    telemetry: Option<Telemetry>,
}

impl<O: SessionOutput> SessionOutput for Pushed<O> {
    fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        if let Some(t) = &self.telemetry {
            t.call(call);
        }
        self.inner.call(call)
    }

    fn sync(&mut self, sync: &SyncRecord) -> io::Result<()> {
        if let Some(t) = &self.telemetry {
            t.sync(sync);
        }
        self.inner.sync(sync)
    }

    fn interval(&mut self, line: &IntervalLine) -> io::Result<()> {
        if let Some(t) = &mut self.telemetry {
            t.interval(line, super::now_ms()).map_err(io_err)?;
        }
        self.inner.interval(line)
    }

    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()> {
        self.inner.summary(summary)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<O> Pushed<O> {
    async fn start(inner: O, push: Option<&PushConfig>) -> anyhow::Result<Pushed<O>> {
        let telemetry = Telemetry::start(None, push).await?;
        if let Some(t) = &telemetry {
            super::say_telemetry(t);
        }
        Ok(Pushed { inner, telemetry })
    }

    async fn finish(&mut self) {
        if let Some(t) = self.telemetry.take() {
            super::finish_telemetry(t).await;
        }
    }
}

/// The header of a recording of this tracer and filter.
fn header(tracer: &Tracer, filter: &writeback_common::Filter) -> anyhow::Result<Header> {
    Ok(Header {
        format_version: FORMAT_VERSION,
        wbscope_version: env!("CARGO_PKG_VERSION").to_string(),
        host: wbscope_sys::hostname(),
        kernel: tracer.plan.kernel.clone(),
        start_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        start_monotonic_ns: wbscope_sys::monotonic_ns(),
        probe_plan: serde_json::to_value(&tracer.plan)?,
        field_offsets: tracer.field_offsets.clone(),
        filter: serde_json::json!({
            "dev": filter.dev, "tgid": filter.tgid, "ino": filter.ino, "cgroup_id": filter.cgroup_id,
        }),
        segment: None,
    })
}

/// Where `-o` goes: a new file (never replacing one), or standard output
/// for `-`.
fn create_new(path: &Path) -> anyhow::Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufWriter::new(io::stdout())));
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| -> anyhow::Error {
            match e.kind() {
                io::ErrorKind::AlreadyExists => UsageError(format!(
                    "{} already exists; wbscope record never overwrites a file",
                    path.display()
                ))
                .into(),
                _ => anyhow::Error::new(e).context(format!("creating {}", path.display())),
            }
        })?;
    Ok(Box::new(BufWriter::new(file)))
}

/// A new recording at `path` (never replacing a file; `-` for standard
/// output) with the header of this tracer and filter.
pub(crate) fn create(
    path: &Path,
    tracer: &Tracer,
    filter: &writeback_common::Filter,
) -> anyhow::Result<RecordingOutput> {
    let out = create_new(path)?;
    let writer = RecordingWriter::new(out, &header(tracer, filter)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(RecordingOutput { writer })
}

/// Refuses an output that exists or whose directory does not (before
/// attaching; `create_new` still guards the race).
fn check_output(output: &Path) -> anyhow::Result<()> {
    if output == Path::new("-") {
        return Ok(());
    }
    if output.exists() {
        return Err(UsageError(format!(
            "{} already exists; wbscope record never overwrites a file",
            output.display()
        ))
        .into());
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(UsageError(format!("-o {}: no such directory", output.display())).into());
    }
    Ok(())
}

/// Whether the session ended because standard output's reader went away.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

pub(crate) async fn run(args: &RecordArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let filter = super::filter::resolve(&args.filter)?;
    let push = args.push.config();
    let privileges = super::trace::drop_options(&args.privileges, push.is_some());
    privileges.check()?;
    let limits = Limits {
        interval: args.interval.unwrap_or(Duration::from_secs(1)),
        duration: args.duration,
        max_records: args.max_records,
        watch_pid: args.filter.pid,
        max_event_rate: args.max_event_rate,
        cpu_budget: args.cpu_budget,
        slow_write: args.spans.slow_write(),
    };
    if let Some(dir) = &args.store {
        if dir.exists() && !dir.is_dir() {
            return Err(UsageError(format!("--store {}: not a directory", dir.display())).into());
        }
        let (tracer, mut collector) = session::attach(filter, hooks)?;
        let bounds = Bounds {
            keep: Some(args.keep.unwrap_or(cli::DEFAULT_KEEP)),
            max_size: args.max_size.unwrap_or(cli::DEFAULT_MAX_SIZE),
            min_free_percent: args.min_free.unwrap_or(cli::DEFAULT_MIN_FREE),
        };
        let writer = StoreWriter::open(dir, bounds, header(&tracer, &filter)?, SystemEnv)?;
        // The store goes on creating and deleting segments after the drop,
        // as the user the run becomes, through its directory's descriptor
        // (docs/production.md, "The store after the drop").
        if let Some((uid, gid)) = privileges.user_ids()? {
            writer.give_to(uid, gid)?;
        }
        // Before the drop: the push reads its config and resolves the
        // receiver.
        let mut out = Pushed::start(StoreOutput { writer }, push.as_ref()).await?;
        session::drop_privileges(
            &privileges,
            Some(WritableDir {
                fd: out.inner.writer.dir_fd(),
            }),
        )?;
        let ending = session::run(&tracer, &mut collector, &limits, &mut out).await;
        out.finish().await;
        let ending = ending.with_context(|| format!("recording to {}", dir.display()))?;
        let s = &out.inner.writer.stats;
        eprintln!(
            "wbscope: stored {} blocks ({} bytes of frames in {} bytes) in {}; {} segments \
             deleted{}{}",
            s.blocks,
            s.raw_bytes,
            s.written_bytes,
            dir.display(),
            s.segments_deleted,
            if s.calls_not_kept + s.intervals_not_kept > 0 {
                format!(
                    "; {} calls and {} intervals not kept (no room)",
                    s.calls_not_kept, s.intervals_not_kept
                )
            } else {
                String::new()
            },
            ending_note(ending)
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.keep.is_some() || args.max_size.is_some() || args.min_free.is_some() {
        return Err(UsageError("--keep, --max-size and --min-free bound a --store".into()).into());
    }
    let Some(output) = &args.output else {
        return Err(UsageError("record needs -o FILE or --store DIR".into()).into());
    };
    check_output(output)?;
    let (tracer, mut collector) = session::attach(filter, hooks)?;
    let mut out = Pushed::start(create(output, &tracer, &filter)?, push.as_ref()).await?;
    session::drop_privileges(&privileges, None)?;
    let ending = session::run(&tracer, &mut collector, &limits, &mut out).await;
    out.finish().await;
    let ending = match ending {
        Ok(ending) => ending,
        Err(e) if output == Path::new("-") && broken_pipe(&e) => {
            eprintln!("wbscope: the reader of standard output went away; stopped");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e).with_context(|| format!("recording to {}", output.display())),
    };
    let w = &out.inner.writer;
    eprintln!(
        "wbscope: recorded {} frames, {} bytes to {}{}",
        w.frames,
        w.bytes,
        output.display(),
        ending_note(ending)
    );
    Ok(ExitCode::SUCCESS)
}

fn ending_note(ending: Ending) -> &'static str {
    match ending {
        Ending::MaxRecords => " (--max-records reached)",
        _ => "",
    }
}
