//! Plain data and arithmetic, no aya and no I/O: the per-call record, log2
//! histograms, the per-interval figures and the lines the exporters print.
//! The tracer fills it; capture, the dashboard, the exporters and
//! recordings read it.
pub mod budget;
pub(crate) mod device;
pub mod diff;
pub mod dirtier;
pub mod durability;
pub mod findings;
pub mod histogram;
pub mod interval;
pub mod kernel;
pub mod ledger;
pub mod map_memory;
pub mod plan;
pub mod record;
pub mod stats;
pub mod summary;
pub mod timeline;
pub mod units;
pub mod when;
pub mod window;
pub mod writes;

pub use histogram::Log2Histogram;
pub use record::{CallRecord, DevId, ScanFigures};
pub use record::{Totals, boundary_name, cause_name, sync_mode_name, wb_reason_name};
