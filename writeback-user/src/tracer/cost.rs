//! `wbscope probes --cost SECONDS`: the floor a BPF program costs on this
//! machine, measured with the kernel's own BPF statistics on four
//! calibration programs (writeback-ebpf/src/floor.rs) attached to
//! `sched:sched_switch`. The tracer's per-program run times (trace and
//! record summaries, `cargo xtask bench`) read against these: a program
//! that costs 900 ns where an empty one costs 400 ns and a clock read 800
//! is paying mostly for the machine.
use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use aya::{EbpfLoader, programs::TracePoint};
use serde::Serialize;

use super::{object::EBPF_OBJECT, privileges, tracefs};

/// `(program, what it does)`, cheapest first.
pub(crate) const FLOOR_PROGRAMS: [(&str, &str); 4] = [
    (
        "floor_empty",
        "nothing (dispatch and the statistics' own clock reads)",
    ),
    ("floor_lookup", "one hash lookup by thread id"),
    (
        "floor_field",
        "one tracepoint field read (bpf_probe_read_kernel)",
    ),
    ("floor_clock", "one bpf_ktime_get_ns()"),
];

/// Where the calibration programs run: frequent on any host, and the
/// hottest event wbscope itself hooks (on-CPU accounting).
const EVENT: (&str, &str) = ("sched", "sched_switch");

/// One calibration program's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct FloorCost {
    pub(crate) program: &'static str,
    pub(crate) does: &'static str,
    pub(crate) invocations: u64,
    pub(crate) run_time_ns: u64,
    /// `run_time_ns / invocations`; `None` without invocations.
    pub(crate) avg_ns: Option<f64>,
}

impl FloorCost {
    fn new(program: &'static str, does: &'static str, invocations: u64, run_time_ns: u64) -> Self {
        FloorCost {
            program,
            does,
            invocations,
            run_time_ns,
            avg_ns: (invocations > 0).then(|| run_time_ns as f64 / invocations as f64),
        }
    }
}

/// Attaches the calibration programs for `duration`, sleeping in 1 ms steps
/// meanwhile (so that even an idle host switches often enough), and
/// returns their run times. Everything is detached when it returns.
pub(crate) fn measure(duration: Duration) -> anyhow::Result<Vec<FloorCost>> {
    privileges::check()?;
    let root = tracefs::ensure_mounted()?;
    // floor_field reads sched_switch's next_pid at its offset here, as the
    // tracer's programs read their fields.
    let (layout, _) = tracefs::read_format(&root, EVENT.0, EVENT.1)?
        .layout(&["next_pid"])
        .context("sched_switch's next_pid")?;
    let mut ebpf = EbpfLoader::new()
        .override_global("FLOOR_LAYOUT", &layout, true)
        .load(EBPF_OBJECT)
        .context("loading the embedded eBPF object")?;
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)")?;
    for (name, _) in FLOOR_PROGRAMS {
        let program: &mut TracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing from the object"))?
            .try_into()
            .with_context(|| format!("{name} is not a tracepoint program"))?;
        program.load().with_context(|| format!("loading {name}"))?;
        program
            .attach(EVENT.0, EVENT.1)
            .with_context(|| format!("attaching {name} to {}:{}", EVENT.0, EVENT.1))?;
    }
    let end = Instant::now() + duration;
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(1));
    }
    FLOOR_PROGRAMS
        .iter()
        .map(|&(name, does)| {
            let info = ebpf
                .program(name)
                .with_context(|| format!("program {name} missing"))?
                .info()
                .with_context(|| format!("reading the statistics of {name}"))?;
            Ok(FloorCost::new(
                name,
                does,
                info.run_count(),
                info.run_time().as_nanos() as u64,
            ))
        })
        .collect()
}

/// The table `wbscope probes --cost` prints.
pub(crate) fn table(costs: &[FloorCost], duration: Duration) -> String {
    let mut out = format!(
        "BPF program floor on this machine ({}:{}, {:.1} s, kernel BPF statistics)\n\
         {:<14} {:>12} {:>9}  what it does\n",
        EVENT.0,
        EVENT.1,
        duration.as_secs_f64(),
        "program",
        "invocations",
        "avg ns"
    );
    for c in costs {
        let avg = c
            .avg_ns
            .map_or_else(|| "-".to_string(), |a| format!("{a:.0}"));
        out += &format!(
            "{:<14} {:>12} {:>9}  {}\n",
            c.program, c.invocations, avg, c.does
        );
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
        let text = table(&costs, Duration::from_secs(2));
        insta::assert_snapshot!(text);
    }
}
