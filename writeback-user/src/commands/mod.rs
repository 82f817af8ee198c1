//! One module per subcommand.
pub mod dashboard;
pub mod probes;
pub mod trace;
pub mod write;
