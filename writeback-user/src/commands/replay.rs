//! `wbscope replay`: print a recording the way `trace` printed it live.
use std::{
    fs::File,
    io::{self, BufWriter, Write as _},
    os::unix::fs::FileTypeExt as _,
    path::{Path, PathBuf},
    pin::Pin,
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use tokio::sync::mpsc;

use crate::cli::ReplayArgs;
use wbscope_dashboard::{self as dashboard, app::Msg};
use wbscope_export::{json_lines::CallLine, prometheus::Backfill, text};
use wbscope_model::when::TimeWindow;
use wbscope_model::{
    CallRecord, Totals, findings::WARM_UP_NS, interval::IntervalLine, kernel::KernelStats,
    plan::ProbePlan,
};
use wbscope_recording::{
    reader::{Damage, Frame, OpenError, RecordingReader},
    store::{reader::StoreReader, seek},
};
use wbscope_sys::UsageError;
use wbscope_sys::escape::{escape_controls, escape_json_strings};

/// Frames the dashboard's feed reads ahead of the dashboard: a second of
/// a busy recording, a few hundred KiB.
const FEED_FRAMES: usize = 1024;

pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let window = args.window.window()?;
    if args.openmetrics {
        return openmetrics(args, window);
    }
    if !args.json && !args.summary && !args.text {
        // The file first: a wrong file is the more useful error.
        let reader = open(&args.file, window)?;
        let what = "replay without --json, --summary or --text (the dashboard)";
        if args.file == Path::new("-") {
            // Standard input is the recording: the keys come from the
            // controlling terminal, which crossterm opens as /dev/tty.
            use std::io::IsTerminal as _;
            if !io::stdout().is_terminal() || File::open("/dev/tty").is_err() {
                return Err(UsageError(format!(
                    "{what} of standard input needs a terminal (/dev/tty and standard output); \
                     without one, use `wbscope replay - --text`"
                ))
                .into());
            }
        } else {
            super::dashboard::require_terminal(what, "wbscope replay FILE --text")?;
        }
        return dashboard(args, window, reader);
    }
    let mut reader = open(&args.file, window)?;
    let live = is_live(&args.file);
    let mut out = BufWriter::new(io::stdout().lock());
    let mut totals = Totals::default();
    let mut summary = None;
    if !args.json && !args.summary {
        let h = &reader.header;
        writeln!(
            out,
            "recording of {} ({}), wbscope {}",
            escape_controls(&h.host),
            escape_controls(&h.kernel),
            escape_controls(&h.wbscope_version)
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
                        wbscope_sys::escape::write_json_line(&mut out, &line)?;
                    }
                }
                Frame::Summary(s) => summary = Some(s),
            }
            // A live stream is printed as it arrives, not when the
            // buffer fills.
            if live {
                out.flush()?;
            }
        }
        Ok(())
    })();
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.context("writing to stdout")?,
    }
    let unreadable = report_damage(&reader);
    // A recording cut before its summary still gets one, marked as such
    // and computed from the calls that survived.
    // A window has no recorded summary (that is of the whole recording):
    // its summary is the calls in it.
    let summary = match summary {
        Some(s) if reader.damage.is_empty() => s,
        recorded => {
            let mut s = serde_json::json!({
                "type": "summary",
                "calls": totals.calls,
                "pages_written": totals.pages_written,
                "truncated": recorded.is_none() && window.is_all(),
                "damaged_frames": reader.damage.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
                "recorded_summary": recorded,
            });
            if reader.damage_not_kept > 0 {
                s["damaged_frames_not_listed"] = reader.damage_not_kept.into();
            }
            if !window.is_all() {
                s["since_unix_ns"] = window.since_ns.into();
                s["until_unix_ns"] = window.until_ns.into();
            }
            s
        }
    };
    if args.json || args.summary {
        wbscope_sys::escape::write_json_line(&mut out, &summary)?;
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

/// Says the damage met on stderr, but for a read error, returned: that
/// ends the replay with an error after what could be read is out; the
/// rest is said and the replay goes on as far as it can.
fn report_damage(reader: &StoreReader) -> Option<&wbscope_recording::store::reader::Located> {
    let mut unreadable = None;
    for damage in &reader.damage {
        match damage.damage {
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
    unreadable
}

/// `--openmetrics`: the exporter's families at each interval's close,
/// stamped, for `promtool tsdb create-blocks-from openmetrics`
/// (export/prometheus/backfill.rs). A line now and then on a terminal's
/// stderr says how far it is: a week of a store takes minutes.
fn openmetrics(args: &ReplayArgs, window: TimeWindow) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let mut reader = open(&args.file, window)?;
    let step_ns = args
        .step
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let out = BufWriter::new(io::stdout().lock());
    let mut backfill =
        Backfill::new(out, &args.labels, window.since_ns, step_ns).map_err(UsageError)?;
    let progress = io::stderr().is_terminal();
    let mut said = std::time::Instant::now();
    let mut unreadable_lines = 0u64;
    let result = (|| -> io::Result<()> {
        while let Some(frame) = reader.next() {
            let wall = reader.last_wall_ns();
            match (frame, wall) {
                (Frame::Call(call), Some(wall)) => backfill.call(&call, wall),
                (Frame::Interval(v), Some(wall)) => {
                    match serde_json::from_value::<IntervalLine>(v) {
                        Ok(line) => backfill.interval(&line, wall)?,
                        Err(_) => unreadable_lines += 1,
                    }
                }
                _ => {}
            }
            if progress && said.elapsed() >= Duration::from_secs(5) {
                said = std::time::Instant::now();
                let s = backfill.stats();
                eprintln!(
                    "wbscope: replay: {} snapshots, {} samples so far, at {}",
                    s.snapshots,
                    s.samples,
                    utc(s.last_ns.unwrap_or(0))
                );
            }
        }
        Ok(())
    })();
    let finished = result.and_then(|()| backfill.finish());
    let stats = match finished {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            return Err(UsageError(e.to_string()).into());
        }
        other => other.context("writing to stdout")?.1,
    };
    if unreadable_lines > 0 {
        eprintln!("wbscope: replay: {unreadable_lines} interval frames unreadable, left out");
    }
    let unreadable = report_damage(&reader);
    match (stats.first_ns, stats.last_ns) {
        (Some(first), Some(last)) => eprintln!(
            "wbscope: replay: {} snapshots, {} samples, {} to {}",
            stats.snapshots,
            stats.samples,
            utc(first),
            utc(last)
        ),
        _ => eprintln!("wbscope: replay: nothing in the window: no samples"),
    }
    if let Some(damage) = unreadable {
        anyhow::bail!("{}: {damage}", args.file.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `ns` since the epoch as RFC 3339 UTC, to the millisecond.
fn utc(ns: u64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .map(|t| format!("{t:.3}"))
        .unwrap_or_else(|_| format!("{ns} ns"))
}

/// Opens a recording, a store (a directory) or standard input (`-`) and
/// reads its header; only what is in `window` will be read. Naming
/// something that is not a recording (a device, an empty or foreign
/// file, a directory with no segments) is a usage error; failing to read
/// one is not.
pub(crate) fn open(path: &Path, window: TimeWindow) -> anyhow::Result<StoreReader> {
    let name = path.display();
    if path == Path::new("-") {
        // Read as it arrives: the reader blocks on the pipe until the
        // recorder's next flush.
        let reader = RecordingReader::open(Box::new(io::stdin()) as Box<dyn io::Read + Send>)
            .map_err(|e| -> anyhow::Error {
                match e {
                    OpenError::Io(_) => anyhow::anyhow!("standard input: {e}"),
                    e => UsageError(format!("standard input: {e}")).into(),
                }
            })?;
        return Ok(StoreReader::single(reader, window));
    }
    let file = File::open(path).map_err(|e| UsageError(format!("{name}: {e}")))?;
    let meta = file
        .metadata()
        .with_context(|| format!("{name}: reading its metadata"))?;
    let kind = meta.file_type();
    if kind.is_dir() {
        return StoreReader::store(path, window).map_err(|e| {
            UsageError(format!(
                "{name}: is a directory that holds no readable store: {e}"
            ))
            .into()
        });
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
    RecordingReader::open(Box::new(file) as Box<dyn io::Read + Send>)
        .map(|r| StoreReader::single(r, window))
        .map_err(|e| match e {
            OpenError::Io(_) => anyhow::anyhow!("{name}: {e}"),
            e => UsageError(format!("{name}: {e}")).into(),
        })
}

/// Whether `path` is a stream that grows as it is read (standard input or
/// a pipe): played as it arrives rather than at the recorded pace.
fn is_live(path: &Path) -> bool {
    path == Path::new("-") || std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// The recording in the dashboard (the default with no output flag),
/// read as it plays.
fn dashboard(
    args: &ReplayArgs,
    window: TimeWindow,
    reader: StoreReader,
) -> anyhow::Result<ExitCode> {
    let name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Everything shown from the recording is escaped: it is untrusted and
    // the terminal would obey control sequences in it.
    let mut header = reader.header.clone();
    header.host = escape_controls(&header.host).into_owned();
    header.kernel = escape_controls(&header.kernel).into_owned();
    escape_json_strings(&mut header.probe_plan);
    let plan: ProbePlan = serde_json::from_value(header.probe_plan.clone()).unwrap_or_else(|e| {
        ProbePlan::unavailable(
            header.kernel.clone(),
            &format!("probe plan unreadable: {e}"),
        )
    });
    let name = escape_controls(&name).into_owned();
    let speed = if is_live(&args.file) {
        f64::INFINITY
    } else {
        args.speed
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if args.file.is_dir() {
        // A store: the dashboard can move in it (its jumps come back here
        // through `StoreFeed`).
        drop(reader);
        let (first, last) =
            seek::span(&args.file).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
        let span = (
            first.max(window.since_ns.unwrap_or(0)),
            last.min(window.until_ns.unwrap_or(u64::MAX)),
        );
        let source = Arc::new(StoreFeed {
            dir: args.file.clone(),
            window,
            speed,
        });
        return runtime.block_on(dashboard::run::replay_store(
            plan,
            header.host,
            name,
            span,
            source,
        ));
    }
    let frames = reader
        .into_channel(FEED_FRAMES)
        .context("starting the recording's reader")?;
    runtime.block_on(dashboard::run::replay(plan, header.host, name, move |tx| {
        feed_recording(frames, tx, speed, None)
    }))
}

/// The glue between the dashboard's jumps and a store's reader: a jump
/// is a new read of the store from the moment (found by the segments'
/// names, `StoreReader::store`), a search for a finding is
/// `recording::store::seek::find_finding`.
struct StoreFeed {
    dir: PathBuf,
    /// The replay's `--since`/`--until`: jumps stay inside it.
    window: TimeWindow,
    speed: f64,
}

impl dashboard::run::StoreSource for StoreFeed {
    fn play(
        &self,
        from_ns: Option<u64>,
        tx: mpsc::Sender<Msg>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        // From the findings' warm-up before the moment, so that the
        // findings holding at it show when the view gets there.
        let window = match from_ns {
            None => self.window,
            Some(t) => TimeWindow {
                since_ns: Some(
                    t.saturating_sub(WARM_UP_NS)
                        .max(self.window.since_ns.unwrap_or(0)),
                ),
                until_ns: self.window.until_ns,
            },
        };
        let dir = escape_controls(&self.dir.display().to_string()).into_owned();
        let frames = StoreReader::store(&self.dir, window)
            .map_err(|e| format!("{dir}: {e}"))
            .and_then(|r| {
                r.into_channel(FEED_FRAMES)
                    .map_err(|e| format!("starting the store's reader: {e}"))
            });
        let speed = self.speed;
        Box::pin(async move {
            match frames {
                Ok(frames) => feed_recording(frames, tx, speed, from_ns).await,
                Err(e) => {
                    let _ = tx.send(Msg::Status(e)).await;
                }
            }
        })
    }

    fn find_finding(
        &self,
        from_ns: u64,
        forward: bool,
        wanted: &dyn Fn() -> bool,
    ) -> Result<Option<(u64, String)>, String> {
        seek::find_finding(&self.dir, from_ns, forward, self.window, wanted)
            .map(|found| found.map(|f| (f.unix_ns, f.name.to_string())))
            .map_err(|e| format!("{}: {e}", escape_controls(&self.dir.display().to_string())))
    }
}

fn print_call(out: &mut impl io::Write, args: &ReplayArgs, call: &CallRecord) -> io::Result<()> {
    if args.summary {
        return Ok(());
    }
    if args.json {
        let mut line = Vec::with_capacity(1024);
        CallLine::from(call).write_line(&mut line)?;
        out.write_all(&line)
    } else {
        writeln!(out, "{}", text::call_row(call))
    }
}

/// Plays the frames as the reader delivers them (it reads ahead a bounded
/// number), pausing after each interval line for its length / `speed`,
/// except before `pace_from` (a jump's warm-up, played at once); waits
/// while the dashboard has [`wbscope_dashboard::run::REPLAY_AHEAD`] messages not
/// yet taken.
async fn feed_recording(
    mut frames: mpsc::Receiver<(Option<u64>, Frame)>,
    tx: mpsc::Sender<Msg>,
    speed: f64,
    pace_from: Option<u64>,
) {
    let mut lost = 0;
    while let Some((unix_ns, frame)) = frames.recv().await {
        let msg = match frame {
            Frame::Call(mut call) => {
                call.comm = escape_controls(&call.comm).as_ref().into();
                Msg::Call(call)
            }
            Frame::Interval(mut value) => {
                escape_json_strings(&mut value);
                let line: IntervalLine = match serde_json::from_value(value) {
                    Ok(line) => line,
                    Err(e) => {
                        log::warn!("replay: unreadable interval frame: {e}");
                        continue;
                    }
                };
                lost += line.lost_records;
                let warm_up = pace_from.zip(unix_ns).is_some_and(|(p, t)| t < p);
                let pause = Duration::from_secs_f64((line.interval_s / speed).clamp(0.0, 60.0));
                let msg = Msg::Interval {
                    line: Box::new(line),
                    kernel: KernelStats {
                        lost_records: lost,
                        ..KernelStats::default()
                    },
                    unix_ns,
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
                if !warm_up {
                    tokio::time::sleep(pause).await;
                }
                continue;
            }
            Frame::Summary(_) => continue,
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wbscope_dashboard::run::StoreSource as _;
    use wbscope_recording::store::{
        seek::tests::store,
        writer::tests::{SEC, T0},
    };

    /// What `play` sends, until it ends.
    fn played(feed: &StoreFeed, from_ns: Option<u64>) -> Vec<Msg> {
        let (tx, mut rx) = mpsc::channel(1 << 16);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(feed.play(from_ns, tx));
        let mut out = Vec::new();
        while let Ok(msg) = rx.try_recv() {
            out.push(msg);
        }
        out
    }

    fn interval_times(msgs: &[Msg]) -> Vec<u64> {
        msgs.iter()
            .filter_map(|m| match m {
                Msg::Interval { unix_ns, .. } => *unix_ns,
                _ => None,
            })
            .collect()
    }

    /// A jump's play: the findings' warm-up before the moment, then on to
    /// the end of the replay's window; a store gone since is said in one
    /// line, not a crash.
    #[test]
    fn a_jump_plays_from_the_warm_up_before_it_to_the_window_end() {
        let (_t, f) = store(600, &[]);
        let feed = StoreFeed {
            dir: f.dir.clone(),
            window: TimeWindow {
                since_ns: None,
                until_ns: Some(T0 + 500 * SEC),
            },
            // Not paced: the test does not wait for the recorded seconds.
            speed: f64::INFINITY,
        };
        let at = T0 + 300 * SEC;
        let msgs = played(&feed, Some(at));
        let warm = WARM_UP_NS / SEC;
        let want: Vec<u64> = (300 - warm..500).map(|s| T0 + s * SEC).collect();
        assert_eq!(interval_times(&msgs), want);
        let calls = msgs.iter().filter(|m| matches!(m, Msg::Call(_))).count();
        assert_eq!(calls as u64, 200 + warm);
        // From the start of the window when no moment is asked.
        assert_eq!(interval_times(&played(&feed, None)).len(), 499);

        std::fs::remove_dir_all(&f.dir).unwrap();
        let msgs = played(&feed, Some(at));
        assert!(
            matches!(&msgs[..], [Msg::Status(s)]
                if s.starts_with(&f.dir.display().to_string()) && s.contains("No such file")),
            "{msgs:?}"
        );
        let err = feed.find_finding(at, true, &|| true).unwrap_err();
        assert!(err.contains(&f.dir.display().to_string()), "{err}");
    }
}
