//! `wbscope store DIR`: what a store holds.
use std::{
    io::{self, Write as _},
    process::ExitCode,
};

use anyhow::Context as _;

use crate::cli::StoreArgs;
use wbscope_recording::{reader::OpenError, store::info};
use wbscope_sys::UsageError;

pub(crate) fn run(args: &StoreArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.store;
    if !dir.is_dir() {
        return Err(UsageError(format!("{}: not a store directory", dir.display())).into());
    }
    if info::is_empty(dir) {
        return Err(UsageError(format!(
            "{}: no segments (a store written by `wbscope record --store`)",
            dir.display()
        ))
        .into());
    }
    let summary = info::summarize(dir).map_err(|e| -> anyhow::Error {
        match e {
            OpenError::Io(_) => anyhow::anyhow!("{}: {e}", dir.display()),
            e => UsageError(format!("{}: {e}", dir.display())).into(),
        }
    })?;
    let text = if args.json {
        serde_json::to_string(&summary)? + "\n"
    } else {
        info::text(dir, &summary)
    };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        other => other
            .context("writing to stdout")
            .map(|()| ExitCode::SUCCESS),
    }
}
