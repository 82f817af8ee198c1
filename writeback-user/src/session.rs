//! The tracing loop shared by the commands that stream what the tracer
//! sees (`record` today; `trace` writes to stdout with the same shape):
//! drain the ring buffer, close an interval every `interval`, stop on
//! `--duration`, `--max-records`, SIGINT, SIGTERM or SIGHUP, and always
//! finish with the last partial interval and a summary.
use std::{
    io,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    collector::{Event, RingCollector},
    export::json_lines::SummaryLine,
    interval::{CallAggregate, IntervalLine, KernelSnapshot},
    loader::Tracer,
    model::{CallRecord, Totals},
    plan::ProbeStatus,
};

/// Where a session's figures go.
pub trait SessionOutput {
    fn call(&mut self, call: &CallRecord) -> io::Result<()>;
    fn interval(&mut self, line: &IntervalLine) -> io::Result<()>;
    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()>;
    /// Called after every drain and interval: make what was written
    /// durable enough to survive the process.
    fn flush(&mut self) -> io::Result<()>;
}

#[derive(Clone, Debug)]
pub struct Limits {
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub max_records: Option<u64>,
    /// Say once when this traced pid has exited.
    pub watch_pid: Option<u32>,
}

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Duration,
    MaxRecords,
    Signal,
}

pub async fn run(
    tracer: &Tracer,
    collector: &mut RingCollector,
    limits: &Limits,
    out: &mut dyn SessionOutput,
) -> anyhow::Result<Ending> {
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let statuses: Vec<ProbeStatus> = tracer.plan.statuses();
    let started = Instant::now();
    let mut last_tick = started;
    let mut prev = KernelSnapshot::take(tracer)?;
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + limits.interval,
        limits.interval,
    );
    let deadline = limits.duration.map(|d| tokio::time::Instant::now() + d);
    let mut totals = Totals::default();
    let mut interval = CallAggregate::default();
    let mut pid_gone_reported = false;
    let max = limits.max_records.unwrap_or(u64::MAX);
    eprintln!("wbscope: tracing; Ctrl-C to stop");

    let ending = loop {
        let mut batch: Vec<CallRecord> = Vec::new();
        tokio::select! {
            drained = collector.wait_and_drain(|Event::Call(c)| batch.push(c)) => {
                drained?;
            }
            _ = ticks.tick() => {
                let now = Instant::now();
                let cur = KernelSnapshot::take(tracer)?;
                out.interval(&IntervalLine::new(
                    now.duration_since(started).as_secs_f64(),
                    now.duration_since(last_tick).as_secs_f64(),
                    &interval,
                    &prev,
                    &cur,
                ))?;
                interval = CallAggregate::default();
                prev = cur;
                last_tick = now;
                if let Some(pid) = limits.watch_pid
                    && !pid_gone_reported
                    && !Path::new(&format!("/proc/{pid}")).exists()
                {
                    eprintln!("wbscope: pid {pid} has exited; nothing more will match --pid");
                    pid_gone_reported = true;
                }
            }
            _ = sigint.recv() => break Ending::Signal,
            _ = sigterm.recv() => break Ending::Signal,
            _ = sighup.recv() => break Ending::Signal,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => break Ending::Duration,
        }
        for call in batch {
            if totals.calls >= max {
                break;
            }
            totals.add(&call);
            interval.add(&call);
            out.call(&call)?;
        }
        out.flush()?;
        if totals.calls >= max {
            break Ending::MaxRecords;
        }
    };
    // Records completed before we stopped are still in the ring: keep them
    // (within --max-records), and close the partial interval.
    let mut rest: Vec<CallRecord> = Vec::new();
    collector.drain(|Event::Call(c)| rest.push(c));
    for call in rest {
        if totals.calls >= max {
            break;
        }
        totals.add(&call);
        interval.add(&call);
        out.call(&call)?;
    }
    let now = Instant::now();
    let cur = KernelSnapshot::take(tracer)?;
    out.interval(&IntervalLine::new(
        now.duration_since(started).as_secs_f64(),
        now.duration_since(last_tick).as_secs_f64(),
        &interval,
        &prev,
        &cur,
    ))?;
    out.summary(&SummaryLine::new(
        started.elapsed().as_secs_f64(),
        &totals,
        &cur.stats,
        collector.bad_records,
        &statuses,
        &cur.run_times,
    ))?;
    out.flush()?;
    Ok(ending)
}
