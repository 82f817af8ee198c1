//! One module per subcommand.
pub mod dashboard;
pub mod probes;
pub mod record;
pub mod replay;
pub mod trace;
pub mod write;
