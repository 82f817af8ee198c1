use std::process::ExitCode;

use clap::Parser as _;
use wbscope::cli::Cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return wbscope::report_usage_error(&e),
    };
    match wbscope::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wbscope: error: {e:#}");
            if e.downcast_ref::<wbscope::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
