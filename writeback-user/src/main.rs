//! `wbscope`: an eBPF writeback tracer with a live dashboard (see
//! ARCHITECTURE.md). This crate is the binary: the command line ([`cli`])
//! and one thin `run` per subcommand ([`commands`]) over the library
//! crates — `wbscope-tracer` attaches and reads the kernel programs,
//! `wbscope-model` makes figures of what they count, `wbscope-capture`
//! drives a tracer over time, `wbscope-dashboard`, `wbscope-export` and
//! `wbscope-recording` present and keep them. Nothing imports this crate.
mod cli;
mod commands;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use cli::{Cli, Command};
use wbscope_sys::UsageError;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return report_usage_error(&e),
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wbscope: error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Runs the parsed command line.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.version {
        print!("{}", wbscope_tracer::object::version_text());
        return Ok(ExitCode::SUCCESS);
    }
    init_logging(&cli)?;
    let hooks = wbscope_model::plan::HookChoice {
        disabled: cli.disable.clone(),
        enabled: cli.enable.clone(),
    };
    match &cli.command {
        Some(Command::Write(args)) => commands::write::run(args),
        Some(Command::Trace(args)) => {
            single_thread_runtime()?.block_on(commands::trace::run(args, &hooks))
        }
        Some(Command::Probes(args)) => commands::probes::run(args, &hooks),
        Some(Command::Record(args)) => {
            single_thread_runtime()?.block_on(commands::record::run(args, &hooks))
        }
        Some(Command::Replay(args)) => commands::replay::run(args),
        Some(Command::Store(args)) => commands::store::run(args),
        Some(Command::Compare(args)) => runtime()?.block_on(commands::compare::run(args, &hooks)),
        Some(Command::Doctor(args)) => runtime()?.block_on(commands::doctor::run(args, &hooks)),
        Some(Command::Scenario(args)) => runtime()?.block_on(commands::scenario::run(args, &hooks)),
        Some(Command::Report(args)) => commands::report::run(args),
        Some(Command::Diff(args)) => commands::diff::run(args),
        None => runtime()?.block_on(commands::dashboard::run(
            &wbscope_dashboard::run::DashboardOptions {
                hooks: hooks.clone(),
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

/// `trace` and `record`: one thread, so that dropping the privileges
/// after attaching reaches the whole process (capabilities and the
/// bounding set are per thread: tracer/privileges.rs).
fn single_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
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
        // Appended to, never truncated: a log file named by mistake (or
        // shared between runs) keeps what it had.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening log file {}", path.display()))?;
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
fn report_usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "wbscope: error: {} (see --help)",
        usage_line(&e.render().to_string())
    );
    ExitCode::from(2)
}

/// A clap error in one line: its first line, and when that ends in a
/// colon the list under it ("the following required arguments were not
/// provided: `--cost <SECONDS>`"), or else the values it would take
/// (`"invalid value 'x' for '--enable <HOOKS>' [possible values: …]"`).
fn usage_line(rendered: &str) -> String {
    let mut lines = rendered.lines().skip_while(|l| l.trim().is_empty());
    let Some(first) = lines.next() else {
        return "invalid arguments".into();
    };
    let first = first.strip_prefix("error: ").unwrap_or(first);
    if !first.ends_with(':') {
        return match lines
            .map(str::trim)
            .find(|l| l.starts_with("[possible values:"))
        {
            Some(values) => format!("{first} {values}"),
            None => first.to_string(),
        };
    }
    let items: Vec<&str> = lines
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    format!("{first} {}", items.join(", "))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::{cli::Cli, usage_line};

    fn line_of(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).expect_err("a usage error");
        usage_line(&e.render().to_string())
    }

    #[test]
    fn a_bad_value_names_the_good_ones_on_its_line() {
        let line = line_of(&["wbscope", "--enable", "bogus", "probes"]);
        assert_eq!(
            line,
            "invalid value 'bogus' for '--enable <HOOKS>' [possible values: global_dirty_state, dirty_folio, device_io, extents, durability, writes]"
        );
        let line = line_of(&["wbscope", "--disable", "uprobe", "probes"]);
        assert!(
            line.starts_with("invalid value 'uprobe' for '--disable <KINDS>' [possible values: fentry, kprobe, tp_btf, raw_tp, tracepoint"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_missing_argument_is_named_on_the_line() {
        let line = line_of(&["wbscope", "probes", "--on-hooks"]);
        assert!(line.ends_with(": --cost <SECONDS>"), "{line}");
    }
}
