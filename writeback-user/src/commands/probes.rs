//! `wbscope probes`: carry out the probe plan, print it, detach; or,
//! with `--cost`, measure the BPF program floor of this machine.
use std::{
    io::{self, Write as _},
    process::ExitCode,
};

use anyhow::Context as _;

use crate::cli::ProbesArgs;
use wbscope_model::plan::HookChoice;
use wbscope_sys::SignalGuard;
use wbscope_tracer::{Tracer, TracerOptions};
use wbscope_tracer::{cost, memory};

pub(crate) fn run(args: &ProbesArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let text = match args.cost {
        Some(duration) => {
            // Ctrl-C or SIGTERM ends the measurement early; what was
            // measured is still printed.
            let _guard = SignalGuard::install();
            let secs = duration.as_secs_f64();
            let ((costs, measured), on) = if args.on_hooks {
                let what = if args.counting {
                    "a counting"
                } else {
                    "an empty"
                };
                let attached = |n| {
                    eprintln!(
                        "wbscope: measuring; {what} program on {n} of the tracer's events \
                         for {secs:.1} s; Ctrl-C to stop"
                    )
                };
                (
                    cost::measure_on_hooks(duration, args.counting, attached)?,
                    cost::On::Hooks,
                )
            } else {
                let attached = |_| {
                    eprintln!(
                        "wbscope: measuring; the BPF program floor for {secs:.1} s; Ctrl-C to stop"
                    )
                };
                (cost::measure(duration, attached)?, cost::On::SchedSwitch)
            };
            if args.json {
                serde_json::to_string(&costs).context("encoding the costs")? + "\n"
            } else {
                cost::table(&costs, on, measured)
            }
        }
        None => {
            let options = TracerOptions {
                hooks: hooks.clone(),
                ..TracerOptions::default()
            };
            if let Some(cpus) = args.cpus {
                let memory = memory::memory_plan(&options, Some(cpus))?;
                if args.json {
                    serde_json::to_string_pretty(&memory).context("encoding the memory")? + "\n"
                } else {
                    memory.table()
                }
            } else {
                let tracer = Tracer::attach(&options)?;
                if args.json {
                    let mut plan =
                        serde_json::to_value(&tracer.plan).context("encoding the plan")?;
                    if let Some(o) = plan.as_object_mut() {
                        o.insert(
                            "memory".into(),
                            serde_json::to_value(&tracer.memory).context("encoding the memory")?,
                        );
                    }
                    serde_json::to_string_pretty(&plan).context("encoding the plan")? + "\n"
                } else {
                    tracer.plan.table() + "\n" + &tracer.memory.table()
                }
            }
        }
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(ExitCode::SUCCESS),
    }
}
