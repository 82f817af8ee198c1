//! `wbscope trace`: interval figures, and with `--events` every
//! writepages call, on stdout until stopped (the loop is `session.rs`).
use std::{
    io::{self, BufWriter, Write as _},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{DropArgs, TraceArgs};
use wbscope_capture::session::{self, Limits, SessionOutput};
use wbscope_export::{
    json_lines::{CallLine, SyncLine, WriteLine},
    prometheus::Telemetry,
    text,
};
use wbscope_model::CallRecord;
use wbscope_model::durability::SyncRecord;
use wbscope_model::findings::{Engine, FindingEvent};
use wbscope_model::plan::{HookChoice, ProbeState};
use wbscope_model::writes::SlowWrite;
use wbscope_model::{interval::IntervalLine, summary::SummaryLine};
use wbscope_tracer::privileges::DropOptions;

const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// stdout's buffer: a drain's worth of `--events` lines in a few writes.
/// Lines are flushed after every drain (every 100 ms at most) whatever
/// its size; with std's 8 KiB, an fsync storm's 10,000 call lines a
/// second (750 bytes each) took 900 write() calls a second.
const OUT_BUFFER: usize = 256 << 10;

/// Lines to stdout, as JSON or a table, and the figures to the Prometheus
/// exporter and the remote-write push when there are.
struct TraceOutput {
    json: bool,
    events: bool,
    out: BufWriter<io::Stdout>,
    telemetry: Option<Telemetry>,
    /// Findings (model/findings): `{"type":"finding"}` lines with --json
    /// when one opens or closes, and the exporter's finding gauges.
    findings: Engine,
    /// A call line's bytes, put together before they go to `out` in one
    /// write (kept between calls: no allocation per line).
    call_line: Vec<u8>,
}

impl TraceOutput {
    fn line(&mut self, line: &str) -> io::Result<()> {
        writeln!(self.out, "{line}")
    }

    /// One JSON line; process names are chosen by other processes, so the
    /// controls serde_json leaves raw (DEL, C1, bidi marks) are escaped too.
    fn json<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        wbscope_sys::escape::write_json_line(&mut self.out, value)
    }
}

impl TraceOutput {
    fn finding_lines(&mut self, events: &[FindingEvent]) -> io::Result<()> {
        if self.json {
            for ev in events {
                self.json(ev)?;
            }
        }
        Ok(())
    }
}

impl SessionOutput for TraceOutput {
    fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        if let Some(t) = &self.telemetry {
            t.call(call);
        }
        match (self.events, self.json) {
            (false, _) => Ok(()),
            (true, true) => {
                self.call_line.clear();
                CallLine::from(call).write_line(&mut self.call_line)?;
                self.out.write_all(&self.call_line)
            }
            (true, false) => self.line(&text::call_row(call)),
        }
    }

    fn sync(&mut self, sync: &SyncRecord) -> io::Result<()> {
        if let Some(t) = &self.telemetry {
            t.sync(sync);
        }
        match (self.events, self.json) {
            (false, _) => Ok(()),
            (true, true) => self.json(&SyncLine::from(sync)),
            (true, false) => self.line(&text::sync_row(sync)),
        }
    }

    fn write(&mut self, write: &SlowWrite) -> io::Result<()> {
        if self.json {
            self.json(&WriteLine::from(write))
        } else {
            self.line(&text::write_row(write))
        }
    }

    fn interval(&mut self, line: &IntervalLine) -> io::Result<()> {
        if let Some(t) = &mut self.telemetry {
            t.interval(line, super::now_ms())
                .map_err(io::Error::other)?;
        }
        if self.json {
            self.json(line)?;
        } else {
            self.line(&text::interval_row(line))?;
        }
        let events = self.findings.interval(line);
        self.finding_lines(&events)
    }

    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()> {
        // What still holds closes with the trace, before its summary.
        let (events, _) = self.findings.finish();
        self.finding_lines(&events)?;
        if self.json {
            self.json(summary)
        } else {
            self.line(text::summary(summary).trim_end())
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// `--user` and `--no-drop` as the tracer's drop takes them (`record`
/// too); `outbound` when the run pushes (`--remote-write`).
pub(super) fn drop_options(args: &DropArgs, outbound: bool) -> DropOptions {
    DropOptions {
        user: args.user.clone(),
        no_drop: args.no_drop,
        outbound,
    }
}

pub(crate) async fn run(args: &TraceArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let filter = super::filter::resolve(&args.filter)?;
    let push = args.push.config();
    let privileges = drop_options(&args.privileges, push.is_some());
    privileges.check()?;
    // --prometheus (export/prometheus.rs): listening before the probes are
    // attached, so a scrape right after the "tracing;" line works; stdout
    // output goes on as without it.
    let serve = args
        .prometheus_listen()?
        .map(|addr| (addr, args.web_config.as_deref()));
    let telemetry = Telemetry::start(serve, push.as_ref()).await?;
    let (tracer, mut collector) = session::attach(filter, hooks)?;
    for s in tracer.plan.statuses() {
        if let ProbeState::Unavailable(why) = &s.state {
            eprintln!("wbscope: {} unavailable: {why}", s.concept);
        }
    }
    if !tracer
        .plan
        .attached(wbscope_model::plan::Concept::WritepagesCall)
    {
        eprintln!("wbscope: warning: no writepages hook attached; no calls will be seen");
    }
    if let Some(t) = &telemetry {
        super::say_telemetry(t);
    }

    let mut out = TraceOutput {
        json: args.json,
        events: args.events,
        out: BufWriter::with_capacity(OUT_BUFFER, io::stdout()),
        telemetry,
        findings: Engine::new(),
        call_line: Vec::with_capacity(1024),
    };
    session::drop_privileges(&privileges, None)?;
    let header = if args.events {
        text::HEADER
    } else {
        text::INTERVAL_HEADER
    };
    let limits = Limits {
        interval: args.interval.unwrap_or(DEFAULT_INTERVAL),
        duration: args.duration,
        max_records: None,
        watch_pid: args.filter.pid,
        max_event_rate: args.max_event_rate,
        cpu_budget: None,
        slow_write: args.spans.slow_write(),
    };
    let result = async {
        if !args.json {
            out.line(header)?;
        }
        session::run(&tracer, &mut collector, &limits, &mut out).await
    }
    .await;
    if let Some(t) = out.telemetry.take() {
        super::finish_telemetry(t).await;
    }
    match result {
        Ok(_) => Ok(ExitCode::SUCCESS),
        // A closed pipe ends the trace quietly, like `perf trace | head`.
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e).context("tracing"),
    }
}
