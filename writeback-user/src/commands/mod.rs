//! One module per subcommand.
pub mod compare;
pub mod dashboard;
pub mod diff;
pub mod doctor;
mod filter;
pub mod probes;
pub mod record;
pub mod replay;
pub mod report;
pub mod scenario;
pub mod store;
pub mod trace;
pub mod write;
