//! `wbscope write`: run writer-core from the command line.
//!
//! Placeholder until writer-core's engine lands (issue 4): the subcommand is
//! declared so the CLI layout is final, and refuses to run.
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;

#[derive(Debug, Args)]
pub struct WriteArgs {}

pub fn run(_args: &WriteArgs) -> anyhow::Result<ExitCode> {
    bail!("`wbscope write` is not available yet: writer-core's engine has not landed")
}
