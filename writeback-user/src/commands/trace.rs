//! `wbscope trace`: stream every writepages call to stdout.
use std::{
    io::{self, BufWriter, Write as _},
    process::ExitCode,
    time::Instant,
};

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::TraceArgs,
    collector::{Event, RingCollector},
    export::{
        json_lines::{CallLine, SummaryLine},
        text,
    },
    loader::Tracer,
    model::Totals,
};

/// Writes lines to stdout; remembers the first error (a closed pipe ends
/// the trace quietly, like `perf trace | head`).
struct Printer {
    json: bool,
    out: BufWriter<io::Stdout>,
    totals: Totals,
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

    fn event(&mut self, event: Event) {
        match event {
            Event::Call(call) => {
                self.totals.add(&call);
                let line = if self.json {
                    serde_json::to_string(&CallLine::from(&call)).unwrap_or_default()
                } else {
                    text::call_row(&call)
                };
                self.line(&line);
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }
}

pub async fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let mut tracer = Tracer::attach()?;
    crate::spawn_ebpf_log_pump(&mut tracer);
    let mut collector = RingCollector::new(tracer.take_events()?)?;
    for p in &tracer.probes {
        eprintln!("wbscope: {p}");
    }
    if !tracer.any_attached() {
        eprintln!("wbscope: warning: no probe attached; the trace will stay empty");
    }
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    let mut printer = Printer {
        json: args.json,
        out: BufWriter::new(io::stdout()),
        totals: Totals::default(),
        error: None,
    };
    if !args.json {
        printer.line(text::HEADER);
    }
    let started = Instant::now();
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    // Signals people and tests wait for: the probes are live from here on.
    eprintln!("wbscope: tracing; Ctrl-C to stop");

    let mut closed = false;
    loop {
        tokio::select! {
            drained = collector.wait_and_drain(|e| printer.event(e)) => {
                drained?;
                if let Err(e) = printer.flush() {
                    if e.kind() == io::ErrorKind::BrokenPipe {
                        closed = true;
                        break;
                    }
                    return Err(e).context("writing to stdout");
                }
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => break,
        }
    }
    if closed {
        return Ok(ExitCode::SUCCESS);
    }
    // Records completed before we stopped are still in the ring: keep them.
    collector.drain(|e| printer.event(e));
    let kernel = tracer.stats()?;
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        let summary = SummaryLine::new(
            elapsed,
            &printer.totals,
            &kernel,
            collector.bad_records,
            &tracer.probes,
        );
        let line = serde_json::to_string(&summary).context("encoding the summary")?;
        printer.line(&line);
    } else {
        let summary = text::summary(elapsed, &printer.totals, &kernel, &tracer.probes);
        printer.line(summary.trim_end());
    }
    match printer.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(ExitCode::SUCCESS),
    }
}
