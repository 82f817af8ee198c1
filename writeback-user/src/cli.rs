//! Command-line interface. Raw arguments are validated here (clap value
//! parsers) before any command runs.
use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::commands::write::WriteArgs;

const EXAMPLES: &str = "\
Examples:
  wbscope                              live dashboard (root or CAP_BPF+CAP_PERFMON)
  wbscope trace --json --duration 10   one JSON line per ext4 writepages call for 10 s
  wbscope trace                        the same as a table, until Ctrl-C
  wbscope --log /tmp/wbscope.log       dashboard, diagnostics to a file";

#[derive(Debug, Parser)]
#[command(
    name = "wbscope",
    version,
    about = "eBPF writeback tracer: chunk size and scan cost of every writeback call",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Write diagnostics to FILE (never to the terminal while the dashboard
    /// is open). Level from RUST_LOG, default `info`.
    #[arg(long, value_name = "FILE", global = true)]
    pub log: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every ext4 writepages call as it completes.
    #[command(after_help = "\
Examples:
  wbscope trace --json --duration 5 > calls.jsonl
  wbscope trace | grep dd

Schema of --json lines: docs/trace-json.md. The last line is always a
summary (calls, pages written, lost records), whether the trace ends by
--duration, Ctrl-C or SIGTERM.")]
    Trace(TraceArgs),
    /// Write files with the writer-core engine.
    Write(WriteArgs),
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Stop after SECONDS (a positive number, fractions allowed); without it,
    /// trace until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
}

/// Parses a strictly positive, finite number of seconds.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a positive number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}` is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("`{s}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["0", "-1", "abc", "", "inf", "NaN", "1e400"] {
            assert!(parse_seconds(bad).is_err(), "{bad} accepted");
        }
    }
}
