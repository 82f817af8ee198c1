//! Output formats of the tracer.
pub mod diff;
pub mod findings;
pub mod json_lines;
pub mod plot;
pub mod prometheus;
pub mod report;
pub mod table;
pub mod text;
