//! `wbscope` with no subcommand: the live dashboard.
use std::{io::IsTerminal as _, process::ExitCode};

use wbscope_dashboard::run::DashboardOptions;
use wbscope_sys::UsageError;

/// Refuses to start without a terminal (ratatui would fail to size or
/// switch a screen that is not there), then runs the dashboard.
pub(crate) async fn run(options: &DashboardOptions) -> anyhow::Result<ExitCode> {
    require_terminal("the dashboard", "wbscope trace")?;
    wbscope_dashboard::run::run(options).await
}

/// One line naming what needs a terminal and what to run instead, when
/// standard input or output is not one (`setsid wbscope </dev/null`, a
/// cron job, a pipe).
pub(crate) fn require_terminal(what: &str, instead: &str) -> Result<(), UsageError> {
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        Ok(())
    } else {
        Err(UsageError(format!(
            "{what} needs a terminal on standard input and output; without one, use `{instead}`"
        )))
    }
}
