//! Plain data and arithmetic, no aya and no I/O: the per-call record, log2
//! histograms, the per-interval figures and the lines the exporters print.
//! The tracer fills it; capture, the dashboard, the exporters and
//! recordings read it.
pub(crate) mod budget;
pub(crate) mod device;
pub(crate) mod diff;
pub mod dirtier;
pub mod durability;
pub(crate) mod findings;
pub mod histogram;
pub mod interval;
pub mod kernel;
pub mod plan;
pub mod record;
pub(crate) mod stats;
pub(crate) mod summary;
pub mod timeline;
pub mod units;
pub(crate) mod when;
pub mod window;

pub(crate) use histogram::Log2Histogram;
pub use record::{CallRecord, DevId, ScanFigures};
pub(crate) use record::{Totals, boundary_name, cause_name, sync_mode_name, wb_reason_name};
