//! `wbscope report INPUT -o FILE.html`: a recording or a compare/scenario
//! document drawn as one HTML page (`export::report`).
use std::process::ExitCode;

use crate::{cli::ReportArgs, export::report};

pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    report::check_output("-o", &args.output)?;
    let data = report::read_input(&args.input)?;
    for w in &data.warnings {
        eprintln!(
            "wbscope: warning: {}: {}",
            args.input.display(),
            crate::escape::escape_controls(w)
        );
    }
    report::write_new(&args.output, &report::html(&data))?;
    eprintln!("wbscope: report written to {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}
