//! `wbscope trace`: interval figures, and with `--events` every
//! writepages call, on stdout until stopped.
use std::{
    io::{self, BufWriter, Write as _},
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::TraceArgs,
    collector::{Event, RingCollector},
    export::{
        json_lines::{CallLine, SummaryLine},
        prometheus::Exporter,
        text,
    },
    filters,
    interval::{CallAggregate, IntervalLine, KernelSnapshot},
    loader::{Tracer, TracerOptions},
    model::Totals,
    plan::{HookKind, ProbeState},
};

const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Writes lines to stdout; remembers the first error (a closed pipe ends
/// the trace quietly, like `perf trace | head`).
struct Printer {
    json: bool,
    events: bool,
    out: BufWriter<io::Stdout>,
    totals: Totals,
    interval: CallAggregate,
    error: Option<io::Error>,
}

impl Printer {
    fn line(&mut self, line: &str) {
        if self.error.is_none()
            && let Err(e) = writeln!(self.out, "{line}")
        {
            self.error = Some(e);
        }
    }

    fn json<T: Serialize>(&mut self, value: &T) {
        match serde_json::to_string(value) {
            Ok(line) => self.line(&line),
            Err(e) => log::error!("encoding a JSON line: {e}"),
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Call(call) => {
                self.totals.add(&call);
                self.interval.add(&call);
                if !self.events {
                    return;
                }
                if self.json {
                    self.json(&CallLine::from(&call));
                } else {
                    self.line(&text::call_row(&call));
                }
            }
        }
    }

    fn interval_line(&mut self, line: &IntervalLine) {
        if self.json {
            self.json(line);
        } else {
            self.line(&text::interval_row(line));
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }
}

pub async fn run(args: &TraceArgs, disabled: &[HookKind]) -> anyhow::Result<ExitCode> {
    let filter = filters::resolve(&args.filter)?;
    // --prometheus (export/prometheus.rs): listening before the probes are
    // attached, so a scrape right after the "tracing;" line works. Fed
    // below from each call record and each interval line; stdout goes on.
    let exporter = match args.prometheus_listen()? {
        Some(addr) => Some(Exporter::start(addr).await?),
        None => None,
    };
    let export = |e: &Event| {
        if let Some(x) = &exporter {
            x.metrics.observe(e);
        }
    };
    let export_line = |line: &IntervalLine| {
        if let Some(x) = &exporter {
            x.metrics.update_from(line);
        }
    };
    let mut tracer = Tracer::attach(&TracerOptions {
        filter,
        disabled: disabled.to_vec(),
    })?;
    crate::spawn_ebpf_log_pump(&mut tracer);
    let mut collector = RingCollector::new(tracer.take_events()?)?;
    let statuses = tracer.plan.statuses();
    eprintln!("wbscope: probes: {}", tracer.plan.summary());
    for s in &statuses {
        if let ProbeState::Unavailable(why) = &s.state {
            eprintln!("wbscope: {} unavailable: {why}", s.concept);
        }
    }
    if !tracer.plan.attached(crate::plan::Concept::WritepagesCall) {
        eprintln!("wbscope: warning: no writepages hook attached; no calls will be seen");
    }
    if let Some(x) = &exporter {
        eprintln!("wbscope: metrics on http://{}/metrics", x.local_addr);
    }
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    let mut printer = Printer {
        json: args.json,
        events: args.events,
        out: BufWriter::new(io::stdout()),
        totals: Totals::default(),
        interval: CallAggregate::default(),
        error: None,
    };
    if !args.json {
        printer.line(if args.events {
            text::HEADER
        } else {
            text::INTERVAL_HEADER
        });
    }
    let period = args.interval.unwrap_or(DEFAULT_INTERVAL);
    let started = Instant::now();
    let mut last_tick = started;
    let mut prev = KernelSnapshot::take(&tracer)?;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut pid_gone_reported = false;
    // Signals people and tests wait for: the probes are live from here on.
    eprintln!("wbscope: tracing; Ctrl-C to stop");

    loop {
        let flushed = tokio::select! {
            drained = collector.wait_and_drain(|e| { export(&e); printer.event(e) }) => {
                drained?;
                printer.flush()
            }
            _ = ticks.tick() => {
                let now = Instant::now();
                let cur = KernelSnapshot::take(&tracer)?;
                let line = IntervalLine::new(
                    now.duration_since(started).as_secs_f64(),
                    now.duration_since(last_tick).as_secs_f64(),
                    &printer.interval,
                    &prev,
                    &cur,
                );
                printer.interval_line(&line);
                export_line(&line);
                printer.interval = CallAggregate::default();
                prev = cur;
                last_tick = now;
                if let Some(pid) = args.filter.pid
                    && !pid_gone_reported
                    && !Path::new(&format!("/proc/{pid}")).exists()
                {
                    eprintln!("wbscope: pid {pid} has exited; nothing more will match --pid");
                    pid_gone_reported = true;
                }
                printer.flush()
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => break,
        };
        match flushed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e).context("writing to stdout"),
        }
    }
    // Records completed before we stopped are still in the ring: keep them,
    // and close the partial interval so its figures are not lost.
    collector.drain(|e| {
        export(&e);
        printer.event(e)
    });
    let now = Instant::now();
    let cur = KernelSnapshot::take(&tracer)?;
    let line = IntervalLine::new(
        now.duration_since(started).as_secs_f64(),
        now.duration_since(last_tick).as_secs_f64(),
        &printer.interval,
        &prev,
        &cur,
    );
    printer.interval_line(&line);
    export_line(&line);
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        let summary = SummaryLine::new(
            elapsed,
            &printer.totals,
            &cur.stats,
            collector.bad_records,
            &statuses,
            &cur.run_times,
        );
        printer.json(&summary);
    } else {
        let summary = text::summary(elapsed, &printer.totals, &cur.stats, &statuses);
        printer.line(summary.trim_end());
    }
    match printer.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(ExitCode::SUCCESS),
    }
}
