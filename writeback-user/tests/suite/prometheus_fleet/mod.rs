//! Prometheus as the fleet's engine: a store backfilled with promtool
//! ([`store_backfill`]), samples pushed by remote write ([`push`], and
//! with the receiver down for a minute, [`outage`]), the rules shipped
//! beside the dashboard ([`rules`]) and the dashboard itself
//! ([`dashboard`]), each against a real Prometheus started by the test.
//!
//! One file group (`support::file_group`) for all four: each test reads
//! only its own Prometheus and, for its figures, its own loop device's
//! calls (`--device`), so they may overlap; what they share with the
//! other modules' tests (throttling, dirty levels, the disks' own
//! counters) is host-wide and would be disturbed by them, so no other
//! module runs beside them.
mod dashboard;
mod outage;
mod push;
mod rules;
mod store_backfill;

/// The file group of this module's tests.
pub(crate) const GROUP: &str = module_path!();
