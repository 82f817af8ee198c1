//! `wbscope doctor`: watch (or read a recording) and name the writeback
//! problem, with its evidence and what to try (model/findings, the
//! catalogue in docs/findings.md). Exit 3 when any `warning` or
//! `critical` finding was seen.
use std::{
    io::{self, Write as _},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;

use crate::cli::{DEFAULT_MAX_EVENT_RATE, DoctorArgs};
use wbscope_capture::session::{self, Limits, SessionOutput};
use wbscope_export as export;
use wbscope_model::{
    CallRecord,
    findings::{Engine, Report},
    interval::IntervalLine,
    plan::HookChoice,
    summary::SummaryLine,
};
use wbscope_recording::reader::{Damage, Frame};

/// Exit status when a `warning` or `critical` finding was seen.
pub(crate) const EXIT_FINDINGS: u8 = 3;
/// How long `doctor` watches without `--duration`.
pub(crate) const DEFAULT_DURATION: Duration = Duration::from_secs(30);

/// Feeds the engine, and with `--record` the recording; prints nothing
/// until the report.
struct Doctor {
    engine: Engine,
    record: Option<super::record::RecordingOutput>,
}

impl SessionOutput for Doctor {
    fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        match &mut self.record {
            Some(r) => r.call(call),
            None => Ok(()),
        }
    }

    fn interval(&mut self, line: &IntervalLine) -> io::Result<()> {
        if let Some(r) = &mut self.record {
            r.interval(line)?;
        }
        for ev in self.engine.interval(line) {
            if ev.is_open() {
                eprintln!(
                    "wbscope: {:.1} s: {} ({})",
                    ev.time_s,
                    ev.finding.name,
                    ev.finding.severity.name()
                );
            }
        }
        Ok(())
    }

    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()> {
        match &mut self.record {
            Some(r) => r.summary(summary),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.record {
            Some(r) => r.flush(),
            None => Ok(()),
        }
    }
}

pub(crate) async fn run(args: &DoctorArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let report = match &args.from {
        Some(path) => {
            let f = &args.filter;
            if f.device.is_some() || f.pid.is_some() || f.cgroup.is_some() || f.inode.is_some() {
                return Err(wbscope_sys::UsageError(
                    "--from: a recording is judged as recorded; filters apply when watching".into(),
                )
                .into());
            }
            from_recording(path, args.window.window()?)?
        }
        None if args.window.since.is_some() || args.window.until.is_some() => {
            return Err(wbscope_sys::UsageError(
                "--since/--until read a window of --from RECORDING|STORE".into(),
            )
            .into());
        }
        None => {
            let filter = super::filter::resolve(&args.filter)?;
            if let Some(path) = &args.record
                && path.exists()
            {
                return Err(wbscope_sys::UsageError(format!(
                    "--record {}: already exists; never overwritten",
                    path.display()
                ))
                .into());
            }
            let (tracer, mut collector) = session::attach(filter, &hooks.for_doctor())?;
            let record = match &args.record {
                Some(path) => Some(super::record::create(path, &tracer, &filter)?),
                None => None,
            };
            let limits = Limits {
                interval: args.interval.unwrap_or(Duration::from_secs(1)),
                duration: Some(args.duration.unwrap_or(DEFAULT_DURATION)),
                max_records: None,
                watch_pid: args.filter.pid,
                max_event_rate: DEFAULT_MAX_EVENT_RATE,
                cpu_budget: None,
                slow_write: args.spans.slow_write(),
            };
            let mut out = Doctor {
                engine: Engine::new(),
                record,
            };
            session::run(&tracer, &mut collector, &limits, &mut out)
                .await
                .context("watching")?;
            out.engine.finish().1
        }
    };
    print(&report, args.json)?;
    Ok(if report.alarming() {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

/// The findings of a recording's interval lines, in order.
fn from_recording(
    path: &std::path::Path,
    window: wbscope_model::when::TimeWindow,
) -> anyhow::Result<Report> {
    let mut reader = super::replay::open(path, window)?;
    let mut engine = Engine::new();
    for frame in reader.by_ref() {
        if let Frame::Interval(value) = frame {
            match serde_json::from_value::<IntervalLine>(value) {
                Ok(line) => {
                    engine.interval(&line);
                }
                Err(e) => eprintln!("wbscope: doctor: unreadable interval frame: {e}"),
            }
        }
    }
    for damage in &reader.damage {
        eprintln!("wbscope: doctor: {damage}");
        if let Damage::Unreadable { .. } = damage.damage {
            anyhow::bail!("{}: {damage}", path.display());
        }
    }
    Ok(engine.finish().1)
}

fn print(report: &Report, json: bool) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    let text = if json {
        serde_json::to_string(report)? + "\n"
    } else {
        export::findings::report(report)
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}
