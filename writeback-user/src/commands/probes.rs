//! `wbscope probes`: carry out the probe plan, print it, detach.
use std::{
    io::{self, Write as _},
    process::ExitCode,
};

use anyhow::Context as _;

use crate::{
    cli::ProbesArgs,
    loader::{Tracer, TracerOptions},
    plan::HookKind,
};

pub fn run(args: &ProbesArgs, disabled: &[HookKind]) -> anyhow::Result<ExitCode> {
    let tracer = Tracer::attach(&TracerOptions {
        disabled: disabled.to_vec(),
        ..TracerOptions::default()
    })?;
    let text = if args.json {
        serde_json::to_string_pretty(&tracer.plan).context("encoding the plan")? + "\n"
    } else {
        tracer.plan.table()
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(ExitCode::SUCCESS),
    }
}
