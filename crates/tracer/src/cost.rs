//! `wbscope probes --cost SECONDS`: the floor a BPF program costs on this
//! machine, measured with the kernel's own BPF statistics on four
//! calibration programs (writeback-ebpf/src/floor.rs) attached to
//! `sched:sched_switch`. The tracer's per-program run times (trace and
//! record summaries, `cargo xtask bench`) read against these: a program
//! that costs 900 ns where an empty one costs 400 ns and a clock read 800
//! is paying mostly for the machine.
//!
//! With `--on-hooks`, an empty program on each event the tracer runs on
//! most during a buffered write instead: under a workload, what any
//! program costs there with the caches as the workload leaves them. An
//! event that fires once per large folio of 1 MiB writes finds every
//! program cold: the bench reads the tracer's programs against these
//! (BENCHMARKS.md).
use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::Array,
    programs::{
        BtfTracePoint, TracePoint, tp_btf::BtfTracePointLinkId, trace_point::TracePointLinkId,
    },
};
use serde::Serialize;

use super::{attach::cpu_slot_entries, object, privileges, tracefs};
use wbscope_sys as sys;

/// `(program, what it does)`, cheapest first.
pub(crate) const FLOOR_PROGRAMS: [(&str, &str); 5] = [
    (
        "floor_empty",
        "nothing (dispatch and the statistics' own clock reads)",
    ),
    ("floor_count", COUNTING),
    ("floor_lookup", "one hash lookup by thread id"),
    (
        "floor_field",
        "one tracepoint field read (bpf_probe_read_kernel)",
    ),
    ("floor_clock", "one bpf_ktime_get_ns()"),
];

/// What the counting programs do (`floor_count`, `trial_tp_btf_count`).
const COUNTING: &str = "one counter added in this CPU's line of an array";

/// Where the calibration programs run: frequent on any host (it was the
/// hottest event wbscope hooked, until its on-CPU time came from the
/// caller's own run time instead: a program there ran on every context
/// switch of the host, writeback or not).
const EVENT: (&str, &str) = ("sched", "sched_switch");

/// Where a measurement ran, for the table's title.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    SchedSwitch,
    Hooks,
}

/// An event the tracer's programs run on, for `--on-hooks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// A tp_btf target: an empty `trial_tp_btf` program is loaded for it.
    TpBtf(&'static str),
    /// A classic tracepoint, `category:event`: `floor_empty` attached to it.
    Tracepoint(&'static str),
}

/// The events of [`writeback_common::DEFAULT_HOOKS`], as hooks: a name
/// with a `category:` is a classic tracepoint: what a writer pays for
/// `wbscope trace` as it ships.
fn hooks() -> impl Iterator<Item = Hook> {
    let events = writeback_common::DEFAULT_HOOKS
        .iter()
        .map(|&(event, _)| event);
    // One empty program per event, however many of ours run there.
    let mut seen = std::collections::HashSet::new();
    events
        .filter(move |event| seen.insert(*event))
        .map(|event| match event.contains(':') {
            true => Hook::Tracepoint(event),
            false => Hook::TpBtf(event),
        })
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Hook::TpBtf(name) | Hook::Tracepoint(name) => name,
        }
    }

    /// The calibration program for this hook: empty, or with `counting`
    /// one that adds 1 to a counter.
    fn program(self, counting: bool) -> &'static str {
        match (self, counting) {
            (Hook::TpBtf(_), false) => "trial_tp_btf",
            (Hook::TpBtf(_), true) => "trial_tp_btf_count",
            (Hook::Tracepoint(_), false) => "floor_empty",
            (Hook::Tracepoint(_), true) => "floor_count",
        }
    }

    fn does(self, counting: bool) -> &'static str {
        match (self, counting) {
            (Hook::TpBtf(_), false) => "empty tp_btf program",
            (Hook::Tracepoint(_), false) => "empty tracepoint program",
            (_, true) => COUNTING,
        }
    }

    /// Loads a fresh copy of the object with this hook's calibration
    /// program attached: a tp_btf program is bound to its target when loaded, and
    /// each hook's figures need a program of their own.
    fn attach(self, btf: &Btf, counting: bool) -> anyhow::Result<(Ebpf, Link)> {
        let mut ebpf = object::load(&mut loader())?;
        let prog = self.program(counting);
        let program = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the object"))?;
        let link = match self {
            Hook::TpBtf(target) => {
                let p: &mut BtfTracePoint = program
                    .try_into()
                    .with_context(|| format!("{prog} is not a tp_btf program"))?;
                p.load(target, btf)
                    .with_context(|| format!("loading {prog} for {target}"))?;
                Link::TpBtf(
                    p.attach()
                        .with_context(|| format!("attaching {prog} to {target}"))?,
                )
            }
            Hook::Tracepoint(event) => {
                let (category, name) = event
                    .split_once(':')
                    .with_context(|| format!("{event}: not category:event"))?;
                let p: &mut TracePoint = program
                    .try_into()
                    .with_context(|| format!("{prog} is not a tracepoint program"))?;
                p.load().with_context(|| format!("loading {prog}"))?;
                Link::Tracepoint(
                    p.attach(category, name)
                        .with_context(|| format!("attaching {prog} to {event}"))?,
                )
            }
        };
        Ok((ebpf, link))
    }
}

/// How a calibration program is attached, to detach it before its figures
/// are read: a counting program's counters and its run count then come
/// from the same runs (the counter moves inside a run, the statistics
/// after it).
enum Link {
    TpBtf(BtfTracePointLinkId),
    Tracepoint(TracePointLinkId),
}

impl Link {
    fn detach(self, ebpf: &mut Ebpf, prog: &str) -> anyhow::Result<()> {
        let program = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the object"))?;
        match self {
            Link::TpBtf(id) => {
                let p: &mut BtfTracePoint = program
                    .try_into()
                    .with_context(|| format!("{prog} is not a tp_btf program"))?;
                p.detach(id)
            }
            Link::Tracepoint(id) => {
                let p: &mut TracePoint = program
                    .try_into()
                    .with_context(|| format!("{prog} is not a tracepoint program"))?;
                p.detach(id)
            }
        }
        .with_context(|| format!("detaching {prog}"))
    }
}

/// A loader with the counting programs' `TRIAL_COUNT` sized to a line per
/// possible CPU (one entry, CPU 0's, when the possible CPUs cannot be
/// read: the other CPUs' runs then count nothing and cost less).
fn loader() -> EbpfLoader<'static> {
    let mut loader = EbpfLoader::new();
    if let Some(entries) = cpu_slot_entries() {
        loader.map_max_entries("TRIAL_COUNT", entries);
    }
    loader
}

/// One calibration program's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FloorCost {
    pub(crate) program: &'static str,
    pub(crate) does: &'static str,
    pub(crate) invocations: u64,
    pub(crate) run_time_ns: u64,
    /// `run_time_ns / invocations`; `None` without invocations.
    pub(crate) avg_ns: Option<f64>,
    /// For a counting program: what its counters add up to, which equals
    /// its invocations when it did its one thing every run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) counted: Option<u64>,
}

impl FloorCost {
    fn new(program: &'static str, does: &'static str, invocations: u64, run_time_ns: u64) -> Self {
        FloorCost {
            program,
            does,
            invocations,
            run_time_ns,
            avg_ns: (invocations > 0).then(|| run_time_ns as f64 / invocations as f64),
            counted: None,
        }
    }
}

/// What the CPU lines of `ebpf`'s `TRIAL_COUNT` add up to.
fn counted(ebpf: &Ebpf) -> anyhow::Result<u64> {
    let map: Array<_, [u64; 8]> = ebpf
        .map("TRIAL_COUNT")
        .context("TRIAL_COUNT map missing")?
        .try_into()
        .context("TRIAL_COUNT is not an array")?;
    map.iter().try_fold(0u64, |sum, line| {
        Ok(sum + line.context("reading TRIAL_COUNT")?[0])
    })
}

/// Sleeps in 1 ms steps (so that even an idle host switches often enough)
/// until `duration` passed or a signal arrived under a
/// [`wbscope_sys::SignalGuard`]; returns how long it measured.
fn wait(duration: Duration) -> Duration {
    let start = Instant::now();
    let end = start + duration;
    while Instant::now() < end && !sys::interrupted() {
        thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

/// The figures of `program` in `ebpf` so far.
fn cost_of(
    ebpf: &Ebpf,
    program: &str,
    shown_as: &'static str,
    does: &'static str,
) -> anyhow::Result<FloorCost> {
    let info = ebpf
        .program(program)
        .with_context(|| format!("program {program} missing"))?
        .info()
        .with_context(|| format!("reading the statistics of {program}"))?;
    Ok(FloorCost::new(
        shown_as,
        does,
        info.run_count(),
        info.run_time().as_nanos() as u64,
    ))
}

/// Attaches an empty program (with `counting`, a counting one) to each of
/// [`hooks`], calls `attached`, and
/// measures until `duration` passed or a signal arrived. A hook this
/// kernel lacks (or cannot hook with tp_btf) is reported with no
/// invocations and a warning. Everything is detached when it returns.
pub fn measure_on_hooks(
    duration: Duration,
    counting: bool,
    attached: impl FnOnce(usize),
) -> anyhow::Result<(Vec<FloorCost>, Duration)> {
    privileges::check()?;
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")?;
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)")?;
    let mut loaded = Vec::new();
    for hook in hooks() {
        match hook.attach(&btf, counting) {
            Ok((ebpf, link)) => loaded.push((hook, Some((ebpf, link)))),
            Err(e) => {
                eprintln!("wbscope: warning: {}: {e:#}", hook.name());
                loaded.push((hook, None));
            }
        }
    }
    attached(loaded.iter().filter(|(_, e)| e.is_some()).count());
    let elapsed = wait(duration);
    let mut detached = Vec::new();
    for (hook, attached) in loaded {
        let ebpf = match attached {
            Some((mut ebpf, link)) => {
                link.detach(&mut ebpf, hook.program(counting))?;
                Some(ebpf)
            }
            None => None,
        };
        detached.push((hook, ebpf));
    }
    let costs = detached
        .iter()
        .map(|(hook, ebpf)| match ebpf {
            Some(ebpf) => {
                let mut cost = cost_of(
                    ebpf,
                    hook.program(counting),
                    hook.name(),
                    hook.does(counting),
                )?;
                if counting {
                    cost.counted = Some(counted(ebpf)?);
                }
                Ok(cost)
            }
            None => Ok(FloorCost::new(hook.name(), "not attached", 0, 0)),
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((costs, elapsed))
}

/// Attaches the calibration programs, calls `attached`, measures until
/// `duration` passed or a signal arrived, and returns their run times.
/// Everything is detached when it returns.
pub fn measure(
    duration: Duration,
    attached: impl FnOnce(usize),
) -> anyhow::Result<(Vec<FloorCost>, Duration)> {
    privileges::check()?;
    let root = tracefs::ensure_mounted()?;
    // floor_field reads sched_switch's next_pid at its offset here, as the
    // tracer's programs read their fields.
    let (layout, _) = tracefs::read_format(&root, EVENT.0, EVENT.1)?
        .layout(&["next_pid"])
        .context("sched_switch's next_pid")?;
    let mut ebpf = object::load(loader().override_global("FLOOR_LAYOUT", &layout, true))?;
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)")?;
    let mut links = Vec::new();
    for (name, _) in FLOOR_PROGRAMS {
        let program: &mut TracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing from the object"))?
            .try_into()
            .with_context(|| format!("{name} is not a tracepoint program"))?;
        program.load().with_context(|| format!("loading {name}"))?;
        let link = program
            .attach(EVENT.0, EVENT.1)
            .with_context(|| format!("attaching {name} to {}:{}", EVENT.0, EVENT.1))?;
        links.push((name, Link::Tracepoint(link)));
    }
    attached(FLOOR_PROGRAMS.len());
    let elapsed = wait(duration);
    // Last attached, first detached: each program stays attached through
    // the others' whole span, as the test of their counts expects.
    for (name, link) in links.into_iter().rev() {
        link.detach(&mut ebpf, name)?;
    }
    let costs = FLOOR_PROGRAMS
        .iter()
        .map(|&(name, does)| {
            let mut cost = cost_of(&ebpf, name, name, does)?;
            if name == "floor_count" {
                cost.counted = Some(counted(&ebpf)?);
            }
            Ok(cost)
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((costs, elapsed))
}

/// The table `wbscope probes --cost` prints.
pub fn table(costs: &[FloorCost], on: On, measured: Duration) -> String {
    let (where_, first) = match on {
        On::SchedSwitch => (format!("{}:{}", EVENT.0, EVENT.1), "program"),
        On::Hooks => ("the tracer's busiest events".to_string(), "event"),
    };
    // As wide as the longest name, so that the columns line up
    // (`writeback_dirty_inode_enqueue` is 29 characters).
    let width = costs
        .iter()
        .map(|c| c.program.len())
        .chain([first.len(), 27])
        .max()
        .unwrap_or(27)
        + 1;
    let mut out = format!(
        "BPF program floor on this machine ({where_}, {:.1} s, kernel BPF statistics)\n\
         {first:<width$} {:>12} {:>9}  what it does\n",
        measured.as_secs_f64(),
        "invocations",
        "avg ns"
    );
    for c in costs {
        let avg = c
            .avg_ns
            .map_or_else(|| "-".to_string(), |a| format!("{a:.0}"));
        out += &format!(
            "{:<width$} {:>12} {:>9}  {}\n",
            c.program, c.invocations, avg, c.does
        );
    }
    if on == On::Hooks {
        // What to hold each figure against: the trace's own program on
        // the event, in the `run_time` of its summary under the same load.
        out += "\nThe trace's program on each event (its `run_time` under the same load, \
                against the figure above; goal: at most 2x):\n";
        for c in costs {
            let ours: Vec<&str> = writeback_common::DEFAULT_HOOKS
                .iter()
                .filter(|(event, _)| *event == c.program)
                .map(|&(_, program)| program)
                .collect();
            if !ours.is_empty() {
                out += &format!("  {:<width$} {}\n", c.program, ours.join(", "));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_and_the_table() {
        let costs = [
            FloorCost::new("floor_empty", "nothing", 1000, 250_000),
            FloorCost::new("floor_clock", "clock", 0, 0),
        ];
        assert_eq!(costs[0].avg_ns, Some(250.0));
        assert_eq!(costs[1].avg_ns, None);
        let text = table(&costs, On::SchedSwitch, Duration::from_secs(2));
        insta::assert_snapshot!(text);
        let hooks = [
            FloorCost::new("writeback_dirty_folio", "empty tp_btf program", 4, 800),
            FloorCost::new("ext4_writepages", "empty tp_btf program", 10, 1500),
            FloorCost::new("block_rq_issue", "not attached", 0, 0),
        ];
        let text = table(&hooks, On::Hooks, Duration::from_millis(1500));
        insta::assert_snapshot!("on_hooks", text);
    }

    /// An event name longer than the usual column widens it: every row's
    /// count ends in the same column.
    #[test]
    fn a_long_event_name_widens_the_column() {
        let hooks = [
            FloorCost::new(
                "writeback_dirty_inode_enqueue",
                "empty tp_btf program",
                4,
                800,
            ),
            FloorCost::new("ext4_writepages", "empty tp_btf program", 10, 1500),
        ];
        let text = table(&hooks, On::Hooks, Duration::from_secs(1));
        // Where each row's invocation count ends (right-aligned).
        let end_of = |row: &str, count: &str| {
            let line = text.lines().find(|l| l.starts_with(row)).expect(row);
            line.find(&format!(" {count} ")).expect(count) + 1 + count.len()
        };
        assert_eq!(
            end_of("writeback_dirty_inode_enqueue", "4"),
            end_of("ext4_writepages ", "10"),
            "{text}"
        );
    }
}
