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

use wbscope_model::budget::{BudgetLine, CpuBudget, Sheddable};
use wbscope_model::dirtier::{Attribution, AttributionMode};
use wbscope_model::durability::{DeviceFlush, DurabilityJoin, FsyncLine, Phase, Span, SyncRecord};
use wbscope_model::interval::IntervalLine;
use wbscope_model::ledger::{HandleBlocks, LedgerLine, ShareCarry};
use wbscope_model::plan::{Concept, HookChoice, ProbeStatus};
use wbscope_model::summary::SummaryLine;
use wbscope_model::writes::{SlowWrite, Write, WriteTally};
use wbscope_model::{CallRecord, Totals};
use wbscope_tracer::dirtiers::DirtyingsWake;
use wbscope_tracer::privileges::DropOptions;
use wbscope_tracer::ring::{RingCollector, RingRecord};
use wbscope_tracer::seccomp::WritableDir;
use wbscope_tracer::{Tracer, TracerOptions};

use crate::interval::{Decoration, OpenInterval};

/// Where a session's figures go.
pub trait SessionOutput {
    fn call(&mut self, call: &CallRecord) -> io::Result<()>;
    fn interval(&mut self, line: &IntervalLine) -> io::Result<()>;
    fn summary(&mut self, summary: &SummaryLine<'_>) -> io::Result<()>;
    /// One fsync, split (`--enable durability`); dropped by outputs that
    /// keep no such line yet.
    fn sync(&mut self, _sync: &SyncRecord) -> io::Result<()> {
        Ok(())
    }
    /// One slow write system call, split (`--enable writes`); dropped by
    /// outputs that keep no such line.
    fn write(&mut self, _write: &SlowWrite) -> io::Result<()> {
        Ok(())
    }
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
    /// Calls per second above which calls stop being written one by one
    /// (they are still counted in every figure) until the rate falls
    /// below half of it.
    pub max_event_rate: u64,
    /// % of one core the programs and the recorder may use together
    /// (model/budget.rs); `None`: no budget.
    pub cpu_budget: Option<f64>,
    /// Write system calls this long or longer are written one by one
    /// (`--enable writes`).
    pub slow_write: Duration,
}

/// The CPU budget in the loop: what the programs and this process had used
/// at the last interval's end, and the ladder.
struct Budgeted {
    budget: CpuBudget,
    bpf_ns: u64,
    cpu_ns: u64,
    /// Calls seen since the call sampling last wrote one.
    skipped: u64,
    /// Whether the log has said the budget cannot be kept (once a run).
    said_floor: bool,
}

impl Budgeted {
    fn new(pct: f64, tracer: &Tracer, snap: &wbscope_model::kernel::KernelSnapshot) -> Budgeted {
        let attached = Sheddable {
            device_io: !tracer.plan.devices_from_diskstats(),
            per_folio: AttributionMode::of(&tracer.plan) == Some(AttributionMode::PerFolio),
        };
        Budgeted {
            budget: CpuBudget::new(pct, attached),
            bpf_ns: bpf_ns(snap),
            cpu_ns: wbscope_sys::process_cpu_ns(),
            skipped: 0,
            said_floor: false,
        }
    }

    /// Closes an interval: its line, and the sampling for the next one set
    /// in the kernel.
    fn interval(
        &mut self,
        tracer: &Tracer,
        snap: &wbscope_model::kernel::KernelSnapshot,
        wall: Duration,
    ) -> Option<BudgetLine> {
        let (bpf, cpu) = (bpf_ns(snap), wbscope_sys::process_cpu_ns());
        let line = self.budget.interval(
            bpf.saturating_sub(self.bpf_ns),
            cpu.saturating_sub(self.cpu_ns),
            u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX),
        );
        (self.bpf_ns, self.cpu_ns) = (bpf, cpu);
        if let Some(l) = line.as_ref().filter(|l| l.at_floor && !self.said_floor) {
            self.said_floor = true;
            log::warn!(
                "the CPU budget of {}% is not kept: with all optional work shed the programs and \
                 the recorder took {:.2}% of a core (BPF {:.2}%), what the programs cost at their \
                 least per writeback event at this rate; the interval lines say so (budget.at_floor)",
                l.budget_pct,
                l.cpu_pct,
                l.bpf_pct
            );
        }
        if let Err(e) = tracer.set_dirty_folio_sampling(self.budget.dirty_folio_shift()) {
            log::warn!("setting the per-folio sampling: {e:#}");
        }
        if let Err(e) = tracer.set_call_sampling(self.budget.calls_shift()) {
            log::warn!("setting the call sampling: {e:#}");
        }
        if let Err(e) = tracer.set_device_io_shed(self.budget.device_io_shed()) {
            log::warn!("shedding the block programs: {e:#}");
        }
        line
    }

    /// Whether `call` is written, under the call sampling: a call the
    /// kernel drew into its sample is (the others left no record); the
    /// rest (generic calls, which the kernel does not sample) one in N.
    fn write_call(&mut self, call: &CallRecord) -> bool {
        if call.sampled {
            return true;
        }
        let every = 1u64 << self.budget.calls_shift();
        self.skipped += 1;
        if self.skipped >= every {
            self.skipped = 0;
            true
        } else {
            false
        }
    }
}

/// BPF run time of every attached program so far (the kernel's
/// statistics; 0 without them).
fn bpf_ns(snap: &wbscope_model::kernel::KernelSnapshot) -> u64 {
    snap.run_times.iter().map(|r| r.run_time_ns).sum()
}

/// Switches per-call output off while the call rate is over the limit, so
/// a busy host costs aggregation, not an unbounded stream.
#[derive(Default)]
struct RateGate {
    suspended: bool,
    not_written: u64,
    /// The CPU budget, whose call sampling closes the gate for some
    /// calls too.
    budget: Option<Budgeted>,
}

impl RateGate {
    /// Decides at the end of an interval of `secs` with `calls` calls.
    fn interval(&mut self, calls: u64, secs: f64, limit: u64) {
        if secs <= 0.0 {
            return;
        }
        let rate = calls as f64 / secs;
        if !self.suspended && rate > limit as f64 {
            self.suspended = true;
            eprintln!(
                "wbscope: {rate:.0} calls/s is over --max-event-rate {limit}: per-call output \
                 suspended, interval and summary figures go on"
            );
        } else if self.suspended && rate < limit as f64 / 2.0 {
            self.suspended = false;
            eprintln!("wbscope: {rate:.0} calls/s: per-call output resumed");
        }
    }
}

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Duration,
    MaxRecords,
    Signal,
}

/// Who dirtied the pages each call writes (model/dirtier.rs): the
/// attribution state, fed from the dirty-time maps when the dirtier hook
/// is attached.
struct Who<'a> {
    tracer: &'a Tracer,
    on: bool,
    attribution: Attribution,
}

impl Who<'_> {
    /// Reads the maps into the attribution state (a read error is said
    /// once per read and leaves the state as it was).
    fn read(&mut self) {
        if !self.on {
            return;
        }
        if let Some(snap) = snapshot(self.tracer, true) {
            self.attribution.update(&snap);
        }
    }

    /// Takes the dirtyings waiting in the ring now, without the tasks'
    /// counts (those are an interval's): a burst of new files woke the
    /// loop before its ring filled.
    fn catch_up(&mut self) {
        if !self.on {
            return;
        }
        if let Some(snap) = snapshot(self.tracer, false) {
            self.attribution.update(&snap);
        }
    }

    /// Charges a batch of calls, reading the maps again first when the
    /// batch's calls on an inode wrote more together than it has
    /// outstanding (`Attribution::charge_batch`).
    fn charge(&mut self, batch: &mut [CallRecord]) {
        if !self.on {
            return;
        }
        let tracer = self.tracer;
        self.attribution
            .charge_batch(batch, || snapshot(tracer, false));
    }

    /// The interval's `owners`, after a fresh read.
    fn owners(&mut self) -> Vec<wbscope_model::dirtier::OwnerLine> {
        if !self.on {
            return Vec::new();
        }
        self.read();
        self.attribution.take_owners()
    }
}

/// The dirtier maps (with the dirtiers' /proc counts: `tasks`), or
/// `None` after saying why.
fn snapshot(tracer: &Tracer, tasks: bool) -> Option<wbscope_model::dirtier::DirtierSnapshot> {
    tracer
        .dirtiers(tasks)
        .map_err(|e| log::warn!("reading the dirtier maps: {e:#}"))
        .ok()
}

/// What one drain of the ring buffer brought.
#[derive(Default)]
struct Batch {
    calls: Vec<CallRecord>,
    spans: Vec<Span>,
    phases: Vec<Phase>,
    flushes: Vec<DeviceFlush>,
    writes: Vec<Write>,
}

/// Calls a batch keeps room for between drains: 4,096 call records,
/// about 1.5 MiB, a 100 ms drain's worth at 40,000 calls a second.
const KEPT_CALLS: usize = 4096;

impl Batch {
    fn push(&mut self, r: RingRecord) {
        match r {
            RingRecord::Call(c) => self.calls.push(c),
            RingRecord::Sync(s) => self.spans.push(s),
            RingRecord::Commit(p) => self.phases.push(p),
            RingRecord::Flush(f) => self.flushes.push(f),
            RingRecord::Write(w) => self.writes.push(w),
        }
    }

    /// Empties the batch, keeping its room for the next drain: a storm's
    /// drain holds thousands of calls, and growing a new list to that
    /// each time copied them over and over. Room for [`KEPT_CALLS`] at
    /// most is kept: a drain of a full ring (tens of thousands of calls)
    /// must not hold its size for the rest of the run.
    fn clear(&mut self) {
        self.calls.clear();
        self.calls.shrink_to(KEPT_CALLS);
        self.spans.clear();
        self.phases.clear();
        self.flushes.clear();
        self.writes.clear();
    }
}

/// Each fsync split into its parts (model/durability.rs), with
/// `--enable durability`.
struct Durable<'a> {
    tracer: &'a Tracer,
    join: Option<DurabilityJoin>,
    /// The run is over: every fsync held is joined now.
    last: bool,
}

impl Durable<'_> {
    /// Feeds a drained batch (its calls already charged to their
    /// dirtiers) and writes the fsyncs it ended. Every record of a
    /// commit an fsync waited on is in the ring before the fsync's own:
    /// fs/jbd2/commit.c fires `jbd2_run_stats` and `jbd2_end_commit`
    /// before it wakes the commit's waiters, and each handle's
    /// `jbd2_handle_stats` before the transaction can commit.
    fn take(&mut self, batch: &Batch, out: &mut dyn SessionOutput) -> io::Result<()> {
        let Some(join) = self.join.as_mut() else {
            return Ok(());
        };
        for c in &batch.calls {
            join.call(c);
        }
        for p in &batch.phases {
            join.phase(p);
        }
        for f in &batch.flushes {
            join.flush(f.clone());
        }
        if let Err(e) = self.tracer.journal_into(join) {
            log::warn!("reading the journal handles: {e:#}");
        }
        for s in &batch.spans {
            join.span(s.clone());
        }
        let now = if self.last {
            u64::MAX
        } else {
            wbscope_sys::monotonic_ns()
        };
        for rec in join.take(now) {
            out.sync(&rec)?;
        }
        Ok(())
    }

    /// The interval's fsyncs, for its line.
    fn line(&mut self) -> Vec<FsyncLine> {
        self.join
            .as_mut()
            .map_or_else(Vec::new, DurabilityJoin::take_line)
    }

    /// The journal blocks per device and pid since the last line; `None`
    /// without the journal's events.
    fn handle_blocks(&mut self) -> Option<HandleBlocks> {
        self.join.as_mut().map(DurabilityJoin::take_handle_blocks)
    }
}

/// The session loop's state: what it has counted, the interval it is in,
/// and what decorates that interval's line when it ends.
struct Session<'a> {
    tracer: &'a Tracer,
    limits: &'a Limits,
    /// When tracing began: the lines' `time_s` and the summary's length
    /// count from here.
    started: Instant,
    interval: OpenInterval,
    totals: Totals,
    /// `--max-records`, or no bound.
    max: u64,
    gate: RateGate,
    who: Who<'a>,
    durable: Durable<'a>,
    /// The write spans of the interval (`--enable writes`).
    writes: Option<WriteTally>,
    /// The intervals' ledgers added, for the summary.
    ledger: LedgerLine,
    /// Journal bytes held over for the next interval's shares.
    carry: ShareCarry,
    /// Whether stderr was told that the watched pid exited (said once).
    pid_gone_reported: bool,
}

impl<'a> Session<'a> {
    /// Nothing counted yet; the first interval differences the kernel's
    /// counters from now.
    fn start(tracer: &'a Tracer, limits: &'a Limits) -> anyhow::Result<Session<'a>> {
        let started = Instant::now();
        let prev = tracer.snapshot()?;
        let gate = RateGate {
            budget: limits
                .cpu_budget
                .map(|pct| Budgeted::new(pct, tracer, &prev)),
            ..RateGate::default()
        };
        Ok(Session {
            tracer,
            limits,
            started,
            interval: OpenInterval::new(prev, started),
            totals: Totals::default(),
            max: limits.max_records.unwrap_or(u64::MAX),
            gate,
            who: Who {
                tracer,
                on: tracer.plan.attached(Concept::Dirtier),
                attribution: Attribution::new(
                    AttributionMode::of(&tracer.plan).unwrap_or_default(),
                ),
            },
            durable: Durable {
                tracer,
                join: tracer
                    .plan
                    .attached(Concept::Durability)
                    .then(DurabilityJoin::default),
                last: false,
            },
            writes: tracer.plan.attached(Concept::Writes).then(|| {
                WriteTally::new(u64::try_from(limits.slow_write.as_nanos()).unwrap_or(u64::MAX))
            }),
            ledger: LedgerLine::default(),
            carry: ShareCarry::default(),
            pid_gone_reported: false,
        })
    }

    /// Writes the fsyncs a batch ended, then counts its calls (up to `max`
    /// in all) and writes them out one by one unless the rate gate is
    /// closed.
    fn take(&mut self, batch: &mut Batch, out: &mut dyn SessionOutput) -> io::Result<()> {
        self.who.charge(&mut batch.calls);
        self.durable.take(batch, out)?;
        if let Some(tally) = self.writes.as_mut() {
            for w in &batch.writes {
                tally.add(w);
            }
            for slow in tally.take_slow() {
                out.write(&slow)?;
            }
        }
        for call in batch.calls.drain(..) {
            if self.totals.calls >= self.max {
                break;
            }
            self.totals.add(&call);
            self.interval.add(&call);
            let sampled_out = self
                .gate
                .budget
                .as_mut()
                .is_some_and(|b| !b.write_call(&call));
            if self.gate.suspended || sampled_out {
                self.gate.not_written += 1;
            } else {
                out.call(&call)?;
            }
        }
        Ok(())
    }

    /// Ends the interval now: writes its line, with the owners, fsyncs and
    /// budget of what is attached, and opens the next one. Returns the
    /// calls and seconds of the interval that ended.
    fn end_interval(&mut self, out: &mut dyn SessionOutput) -> anyhow::Result<(u64, f64)> {
        let now = Instant::now();
        let cur = self.tracer.snapshot()?;
        let wall = now.duration_since(self.interval.from());
        let owners = self.who.owners();
        let decoration = Decoration {
            owners,
            written_on: self.who.attribution.take_written_on(),
            carry: Some(&mut self.carry),
            fsyncs: self.durable.line(),
            writes: self
                .writes
                .as_mut()
                .map_or_else(Vec::new, WriteTally::take_lines),
            handles: self.durable.handle_blocks(),
            budget: self
                .gate
                .budget
                .as_mut()
                .and_then(|b| b.interval(self.tracer, &cur, wall)),
        };
        let calls = self.interval.calls().calls;
        let line = self.interval.close(self.started, now, cur, decoration);
        if let Some(l) = &line.ledger {
            self.ledger.add(l);
        }
        out.interval(&line)?;
        Ok((calls, line.interval_s))
    }

    /// A tick of `--interval`: the interval ends, the rate gate judges its
    /// call rate, and stderr hears once that the watched pid has exited.
    fn tick(&mut self, out: &mut dyn SessionOutput) -> anyhow::Result<()> {
        let (calls, secs) = self.end_interval(out)?;
        self.gate.interval(calls, secs, self.limits.max_event_rate);
        if let Some(pid) = self.limits.watch_pid
            && !self.pid_gone_reported
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            eprintln!("wbscope: pid {pid} has exited; nothing more will match --pid");
            self.pid_gone_reported = true;
        }
        Ok(())
    }

    /// Ends the run. Records completed before it stopped are still in the
    /// ring: they are kept (within `--max-records`), then the partial
    /// interval's line and the summary are written.
    fn finish(
        mut self,
        collector: &mut RingCollector,
        out: &mut dyn SessionOutput,
    ) -> anyhow::Result<()> {
        let mut rest = Batch::default();
        collector.drain(|r| rest.push(r));
        // Generic calls whose end no event marked are closed now.
        collector.close_open_calls(|r| rest.push(r));
        self.durable.last = true;
        self.take(&mut rest, out)?;
        self.end_interval(out)?;
        // The counters the last interval ended with.
        let cur = self.interval.prev();
        let statuses: Vec<ProbeStatus> = self.tracer.plan.statuses();
        let mut summary = SummaryLine::new(
            self.started.elapsed().as_secs_f64(),
            &self.totals,
            &cur.stats,
            collector.bad_records,
            &statuses,
            &cur.run_times,
        );
        summary.calls_not_written = self.gate.not_written;
        summary.add_sampled_out(&cur.agg);
        summary.attribution = self
            .who
            .on
            .then(|| AttributionMode::of(&self.tracer.plan))
            .flatten();
        summary.ledger = Some(std::mem::take(&mut self.ledger));
        summary.pages_dirtied_unmeasured = self
            .who
            .attribution
            .dirtied_unmeasured()
            .map(str::to_string);
        out.summary(&summary)?;
        out.flush()?;
        Ok(())
    }
}

/// Attaches the tracer with these filters and hook kinds, starts its log
/// pump and opens its ring buffer, and says on stderr what is attached.
pub fn attach(
    filter: writeback_common::Filter,
    hooks: &HookChoice,
) -> anyhow::Result<(Tracer, RingCollector)> {
    let mut tracer = Tracer::attach(&TracerOptions {
        filter,
        hooks: hooks.clone(),
    })?;
    wbscope_tracer::spawn_ebpf_log_pump(&mut tracer);
    let collector = RingCollector::new(&mut tracer)?;
    eprintln!("wbscope: probes: {}", tracer.plan.summary());
    Ok((tracer, collector))
}

/// Ends the run's privileges once attached (tracer/privileges.rs), or
/// says it keeps them, on one stderr line. Call it after attaching and
/// after opening everything the run writes to, before the loop: nothing
/// can be opened after it, except new files in `dir` through its
/// descriptor (a store's).
pub fn drop_privileges(options: &DropOptions, dir: Option<WritableDir<'_>>) -> anyhow::Result<()> {
    let confinement = wbscope_tracer::privileges::drop_after_attach(options, dir)?;
    eprintln!("wbscope: {confinement}");
    Ok(())
}

/// Traces until `limits` or a signal ends the run: the session's state
/// ([`Session`]) fed by the ring buffer's drains and the `--interval`
/// ticks, then its last interval and summary.
pub async fn run(
    tracer: &Tracer,
    collector: &mut RingCollector,
    limits: &Limits,
    out: &mut dyn SessionOutput,
) -> anyhow::Result<Ending> {
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut session = Session::start(tracer, limits)?;
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + limits.interval,
        limits.interval,
    );
    let deadline = limits.duration.map(|d| tokio::time::Instant::now() + d);
    // A quiet trace drains less often: what it writes after a quiet
    // spell is up to half a second late (tracer/ring.rs), which lines
    // and frames read by a person or a pipe bear; the dashboard keeps
    // its 100 ms.
    collector.back_off_when_quiet();
    let mut dirtyings = DirtyingsWake::register(tracer);
    eprintln!("wbscope: tracing; Ctrl-C to stop");
    let mut batch = Batch::default();
    let ending = loop {
        batch.clear();
        let mut ticked = false;
        tokio::select! {
            drained = collector.wait_and_drain(|r| batch.push(r)) => {
                drained?;
            }
            _ = ticks.tick() => {
                // Every call that ended before the tick is in its
                // interval: the ring may hold a quiet spell's first ones.
                collector.drain(|r| batch.push(r));
                ticked = true;
            }
            () = dirtyings.woken() => session.who.catch_up(),
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
        session.take(&mut batch, out)?;
        if ticked {
            session.tick(out)?;
        }
        out.flush()?;
        if session.totals.calls >= session.max {
            break Ending::MaxRecords;
        }
    };
    session.finish(collector, out)?;
    Ok(ending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_gate_suspends_over_the_limit_and_resumes_under_half() {
        let mut g = RateGate::default();
        g.interval(900, 1.0, 1000);
        assert!(!g.suspended);
        g.interval(2001, 2.0, 1000);
        assert!(g.suspended);
        g.interval(600, 1.0, 1000);
        assert!(g.suspended, "hysteresis: 600/s is not under half of 1000");
        g.interval(499, 1.0, 1000);
        assert!(!g.suspended);
        g.interval(5, 0.0, 1000);
        assert!(!g.suspended);
    }
}
