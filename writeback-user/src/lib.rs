//! wbscope: an eBPF writeback tracer with a live dashboard.
//!
//! Layout (see ARCHITECTURE.md): [`tracefs`] and [`loader`] get the kernel
//! programs configured and attached, [`collector`] reads their records,
//! [`model`] aggregates them, [`tui`] and [`export`] present them, and
//! [`commands`] wires one subcommand each.
pub mod app;
pub mod btf;
pub mod cli;
pub mod collector;
pub mod commands;
pub mod cost;
pub mod ebpf_object;
pub mod error;
pub mod export;
pub mod filters;
pub mod interval;
pub mod loader;
pub mod model;
pub mod plan;
pub mod privileges;
pub mod recording;
pub mod session;
pub mod sys;
pub mod tracefs;
pub mod tui;

use std::{fs::File, process::ExitCode};

use anyhow::Context as _;
use cli::{Cli, Command};
pub use error::UsageError;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.version {
        print!("{}", ebpf_object::version_text());
        return Ok(ExitCode::SUCCESS);
    }
    init_logging(&cli)?;
    match &cli.command {
        Some(Command::Write(args)) => commands::write::run(args),
        Some(Command::Trace(args)) => runtime()?.block_on(commands::trace::run(args, &cli.disable)),
        Some(Command::Probes(args)) => commands::probes::run(args, &cli.disable),
        Some(Command::Record(args)) => {
            runtime()?.block_on(commands::record::run(args, &cli.disable))
        }
        Some(Command::Replay(args)) => commands::replay::run(args),
        Some(Command::Compare(args)) => {
            runtime()?.block_on(commands::compare::run(args, &cli.disable))
        }
        Some(Command::Scenario(args)) => {
            runtime()?.block_on(commands::scenario::run(args, &cli.disable))
        }
        None => runtime()?.block_on(commands::dashboard::run(
            &commands::dashboard::DashboardOptions {
                disabled: cli.disable.clone(),
                dir: cli.dir.clone(),
            },
        )),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Diagnostics go to `--log FILE`; without it, to stderr except under the
/// dashboard, where they would corrupt the screen and are dropped below
/// `error`.
fn init_logging(cli: &Cli) -> anyhow::Result<()> {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(path) = &cli.log {
        let file =
            File::create(path).with_context(|| format!("opening log file {}", path.display()))?;
        builder.target(env_logger::Target::Pipe(Box::new(file)));
    } else if cli.command.is_none() {
        builder.filter_level(log::LevelFilter::Off);
    } else {
        builder.filter_level(log::LevelFilter::Warn);
    }
    // A second init (tests) is harmless.
    let _ = builder.try_init();
    Ok(())
}

/// Prints a clap error: help and version as clap renders them (exit 0),
/// anything else as one line (exit 2).
pub fn report_usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("wbscope: error: {first} (see --help)");
    ExitCode::from(2)
}

/// Forwards aya-log records from the kernel programs to the `log` crate.
pub fn spawn_ebpf_log_pump(tracer: &mut loader::Tracer) {
    let Some(logger) = tracer.take_logger() else {
        return;
    };
    // SAFETY: the logger owns its ring-buffer fd until it is dropped, which
    // only the AsyncFd does.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    };
    let Ok(mut fd) = registered else {
        log::warn!("cannot poll the eBPF log buffer");
        return;
    };
    tokio::spawn(async move {
        while let Ok(mut guard) = fd.readable_mut().await {
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
