//! `--user` and `--no-drop`: how `trace` and `record` end their
//! privileges once attached (tracer/privileges.rs; docs/production.md).
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct DropArgs {
    /// After attaching, become this user (default `nobody` when started
    /// as root; a non-root start stays its own user), with no
    /// capabilities, no_new_privs and a seccomp filter of the system calls
    /// the run makes; `record --store` gives its store to this user first
    /// (docs/production.md).
    #[arg(long, value_name = "NAME")]
    pub(crate) user: Option<String>,

    /// Keep root (or the capabilities) for the whole run, for debugging;
    /// said on stderr at start.
    #[arg(long, conflicts_with = "user")]
    pub(crate) no_drop: bool,
}
