//! One module per subcommand.
pub mod dashboard;
pub mod trace;
pub mod write;
